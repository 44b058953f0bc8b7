"""Lanes as a run: the command line's `--lanes`, limits over lanes in flight (budget,
--max-iterations), a crashed run's sessions resumed in their lanes, the machine's capacity, and
a project's lane count changed between runs. The in-process robot plays the agent."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner
from helpers import cli_seams

from scripted_model.scenario import Scenario
from session_scheduler.core.config import AgentConfig, SessionType
from session_scheduler.core.schedule import MEMORY_PER_LANE
from session_scheduler.guard import safe_git
from session_scheduler.run.agent import SessionRequest, SessionResult
from session_scheduler.run.lanes import STOPPING, Lanes
from session_scheduler.store import events, statefile
from session_scheduler.testing.inprocess import InProcessRobotRunner
from session_scheduler.view.cli import available_memory, main, resolve_project

SPEC = Path(__file__).resolve().parent.parent / "session_scheduler" / "prompts" / "app_spec.txt"
CFG = AgentConfig(architecture_interval=100, feature_count=4, test_command="bash init.sh", sandbox=False)
FOUR = {"features": 4, "depends": {"F002": ["F001"], "F003": ["F001"], "F004": ["F001"]}}
T = SessionType


def new_project(tmp_path: Path) -> Path:
    project = tmp_path / "app"
    project.mkdir()
    (project / "app_spec.txt").write_text(SPEC.read_text())
    return project


class Priced(InProcessRobotRunner):
    """The robot, each session costing one dollar; it notes how many sessions ran at once."""

    def __init__(self, scenario: Scenario) -> None:
        super().__init__(scenario)
        self.running = self.most = 0
        self.lock, self.together = threading.Lock(), threading.Event()

    async def run(self, request: SessionRequest) -> SessionResult:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            if self.running > 1:
                self.together.set()
        try:
            if request.plan.number > 1:  # a session waits (a while) for another to run beside it
                await anyio.to_thread.run_sync(self.together.wait, 10.0)
            return dataclasses.replace(await super().run(request), cost_usd=1.0)
        finally:
            with self.lock:
                self.running -= 1


def test_lanes_start_no_session_the_budget_left_cannot_cover_with_those_in_flight(tmp_path: Path) -> None:
    """$3.50, at most $1 a session: after the INITIALIZER two sessions may run at once, not three."""
    project = new_project(tmp_path)
    runner = Priced(Scenario.from_json({"features": 4}))
    config = dataclasses.replace(CFG, max_budget_usd=3.5, max_session_budget_usd=1.0)
    report = Lanes(project, config, runner, 3, echo=lambda _: None).run()
    assert report.run.status == "limit" and "less than one session may spend" in report.run.message
    assert report.sessions == 3 and runner.most == 2  # three lanes, but the budget covered two
    assert report.run.totals.cost_usd == 3.0 <= 3.5
    assert [r.plan.max_budget_usd for r in runner.requests] == [1.0, 1.0, 1.0]
    log = events.read(events.log_path(project))
    assert [e["kind"] for e in log if e["kind"] == "budget_reached"] == ["budget_reached"]


def test_without_a_session_cap_the_mean_session_is_what_a_lane_must_leave_for_the_others(
    tmp_path: Path,
) -> None:
    project = new_project(tmp_path)
    runner = Priced(Scenario.from_json({"features": 4}))
    config = dataclasses.replace(CFG, max_budget_usd=2.5)
    report = Lanes(project, config, runner, 3, echo=lambda _: None).run()
    assert report.run.status == "limit" and runner.most == 1  # $1.50 left: one $1 session at a time
    assert report.run.totals.cost_usd == 2.0
    assert [r.plan.max_budget_usd for r in runner.requests] == [2.5, 1.5]


def test_max_iterations_counts_the_sessions_of_every_lane_and_the_next_run_goes_on(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    scenario = Scenario.from_json(FOUR)
    first = Lanes(project, CFG, InProcessRobotRunner(scenario), 3, echo=lambda _: None).run(max_iterations=4)
    assert first.run.status == "limit" and "stopped after 4 sessions (--max-iterations)" in first.run.message
    assert first.sessions == 4
    saved = statefile.load(project)
    assert saved is not None and saved.in_flight == {}  # every session it started ended
    second = Lanes(project, CFG, InProcessRobotRunner(scenario), 3, echo=lambda _: None).run()
    assert second.run.status == "done" and second.run.message == "all 4 features pass"
    merges = [m.split(" (")[0] for m in _merges(project) if m.startswith("Merge feature/")]
    assert sorted(m.split(" (")[0] for m in merges) == [f"Merge feature/F00{n}" for n in (1, 2, 3, 4)]


class Crash(InProcessRobotRunner):
    """The robot, but the process dies (as under kill -9, from the loop's view) in session `number`."""

    def __init__(self, scenario: Scenario, number: int) -> None:
        super().__init__(scenario)
        self.number = number

    def _run(self, request: SessionRequest) -> SessionResult:
        if request.plan.number == self.number:
            raise SystemExit("killed")
        return super()._run(request)


def test_a_crashed_run_s_session_runs_again_in_its_lane_under_its_number(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    scenario = Scenario.from_json(FOUR)
    with pytest.raises(SystemExit):
        Lanes(project, CFG, Crash(scenario, 3), 3, echo=lambda _: None).run()
    saved = statefile.load(project)
    assert saved is not None and 3 in [f.number for f in saved.in_flight.values()]
    (lane,) = [n for n, f in saved.in_flight.items() if f.number == 3]
    lines: list[str] = []
    report = Lanes(project, CFG, InProcessRobotRunner(scenario), 3, echo=lines.append).run()
    assert report.run.status == "done" and sorted(report.landed) == ["F001", "F002", "F003", "F004"]
    log = events.read(events.log_path(project))
    (resumed,) = [e for e in log if e["kind"] == "resumed"]
    assert resumed["session"] == 3 and resumed["lane"] == lane
    assert any(f"[lane {lane}] Resuming: session 3" in line and "again: it was" in line for line in lines)
    starts = Counter(e["session"] for e in log if e["kind"] == "session_started")
    assert starts[3] == 2 and all(n == 1 for s, n in starts.items() if s != 3)  # only the cut one again
    ends = [e["standing"] for e in log if e["kind"] == "session_ended" and e["session"] == 3]
    assert ends[-1] == "verified" and len([e for e in ends if e == "verified"]) == 1
    merges = [m.split(" (")[0] for m in _merges(project) if m.startswith("Merge feature/")]
    assert len(merges) == len(set(merges)) == 4  # nothing merged twice
    aside = [p.name for p in (project / ".agent_logs").iterdir() if ".interrupted-" in p.name]
    assert len(aside) == 1 and aside[0].startswith("session_0003_")
    saved = statefile.load(project)
    assert saved is not None and saved.in_flight == {}


def test_a_landing_the_schedule_never_saved_is_dropped_and_its_review_approves_it_again(
    tmp_path: Path,
) -> None:
    """Killed between writing the merge queue's file and saving the schedule: the queue's entry
    is not landed unseen; the REVIEW runs again and approves it (once)."""
    from session_scheduler.repo.merge_queue import Landing, Queue
    from session_scheduler.store.records import Records

    project = new_project(tmp_path)
    scenario = Scenario.from_json(FOUR)
    Lanes(project, CFG, InProcessRobotRunner(scenario), 2, echo=lambda _: None).run(max_iterations=1)
    Queue(Records(project)).add(Landing("F009", "feature/F009", "0" * 40, 1, 7, 0.0))
    report = Lanes(project, CFG, InProcessRobotRunner(scenario), 2, echo=lambda _: None).run()
    assert report.run.status == "done" and "F009" not in report.landed
    assert Queue(Records(project)).pending() == []


class ReviewsLate(InProcessRobotRunner):
    """The robot, whose REVIEW of `late` waits (inside its session) until the `others` landed."""

    def __init__(self, scenario: Scenario, project: Path, late: str, others: set[str]) -> None:
        super().__init__(scenario)
        self.project, self.late, self.others = project, late, others

    async def run(self, request: SessionRequest) -> SessionResult:
        work = request.plan.work
        if request.plan.role is T.REVIEW and work is not None and work.feature_id == self.late:
            await anyio.to_thread.run_sync(self._others_landed)
        return await super().run(request)

    def _others_landed(self) -> None:
        for _ in range(400):
            log = events.read(events.log_path(self.project))
            if self.others <= {e.get("feature") for e in log if e["kind"] == "merge_verified"}:
                return
            threading.Event().wait(0.05)


def test_each_landing_runs_the_tests_once_the_queue_s_when_main_moved_under_the_review(
    tmp_path: Path,
) -> None:
    """F001's REVIEW runs alone: its lane tests its merge, which lands as it is. F002..F004 are
    reviewed side by side (F004's REVIEW waits for the other two to land): a lane that expects
    `main` to move first leaves the gates to the queue, which runs them once on what it lands (a
    REVIEW's own merge, or its own); every feature is tested exactly once on its way."""
    project = new_project(tmp_path)
    runner = ReviewsLate(Scenario.from_json(FOUR), project, "F004", {"F002", "F003"})
    lines: list[str] = []
    report = Lanes(project, CFG, runner, 3, echo=lines.append).run()
    assert report.run.status == "done" and sorted(report.landed) == ["F001", "F002", "F003", "F004"]
    log = events.read(events.log_path(project))
    on_main = Counter(e["feature"] for e in log if e["kind"] == "gates_ran" and e["where"] == "main")
    assert on_main == Counter({"F001": 1, "F002": 1, "F003": 1, "F004": 1})
    queue = {
        e["feature"] for e in log if e["kind"] == "gates_ran" and e["where"] == "main" and "session" not in e
    }
    assert "F004" in queue and "F001" not in queue  # F004's REVIEW saw main move: the queue tested it
    assert any("its gates run once, in the merge queue" in line for line in lines)
    landed = {e["feature"]: e["tests"] for e in log if e["kind"] == "merge_verified"}
    assert landed["F001"] == "passed on the review's merge" and landed["F004"] == "passed"
    for feature in ("F002", "F003"):  # tested once: by its lane (landed as it is) or by the queue
        assert landed[feature] == ("passed" if feature in queue else "passed on the review's merge")


class HoldsLate(Lanes):
    """Lanes whose merge queue checks the risk rules of `late` only once the lane's session of
    `after` has begun (on `late`'s approved merge, which it waited on)."""

    def __init__(self, *args: Any, late: str, after: threading.Event, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.late, self.after = late, after

    def _risk(self, repo: Any, landing: Any) -> str | None:
        if landing.feature == self.late:
            assert self.after.wait(30.0), "the lane never began its next session"
        return super()._risk(repo, landing)


class Notes(InProcessRobotRunner):
    """The robot, which tells `begun` when an IMPLEMENT of `feature` starts and notes the commit
    each session's `main` is at."""

    def __init__(self, scenario: Scenario, feature: str, begun: threading.Event) -> None:
        super().__init__(scenario)
        self.feature, self.begun = feature, begun
        self.mains: list[tuple[str, str | None, str]] = []

    async def run(self, request: SessionRequest) -> SessionResult:
        work = request.plan.work
        fid = work.feature_id if work else None
        main = safe_git.open(request.cwd).git.rev_parse("main")
        self.mains.append((request.plan.role.value, fid, main))
        if request.plan.role is T.IMPLEMENT and fid == self.feature:
            self.begun.set()
        return await super().run(request)


def test_a_lane_goes_on_from_its_approved_merge_and_what_it_began_there_is_set_aside_if_that_is_held(
    tmp_path: Path,
) -> None:
    """One lane: F001's REVIEW approves it and the lane begins F002, which depends on it, on that
    merge at once. A risk rule holds F001 for the person; F002's approval, which holds F001's
    merge, would land F001 unapproved: the queue sets F002 aside (kept) instead, and F002 waits
    for F001 with the person. `main` never holds either."""
    project = new_project(tmp_path)
    begun = threading.Event()
    runner = Notes(Scenario.from_json({"features": 2, "depends": {"F002": ["F001"]}}), "F002", begun)
    config = dataclasses.replace(
        CFG, feature_count=2, risk={"rules": [{"name": "the store", "paths": ["todo/store.py"]}]}
    )
    lines: list[str] = []
    report = HoldsLate(project, config, runner, 1, echo=lines.append, late="F001", after=begun).run()
    assert report.run.status == "done", report.run.message
    backlog = report.schedule.backlog
    assert report.landed == () and backlog.passing == set() and [f for f, _ in backlog.held] == ["F001"]
    assert backlog.waiting_for_person() == {"F001", "F002"}
    repo = safe_git.open(project)
    approved_f001 = repo.git.rev_parse("refs/scheduler/reviewed/feature/F001")
    implements = [main for role, fid, main in runner.mains if role == "IMPLEMENT" and fid == "F002"]
    assert implements == [approved_f001]  # begun on F001's approved merge, not waiting for it to land
    assert "todo/store.py" not in repo.git.ls_tree("-r", "--name-only", "main").split()
    log = events.read(events.log_path(project))
    assert [(e["feature"], e["why"]) for e in log if e["kind"] == "sent_back"] == [("F002", "stacked")]
    kept = repo.git.for_each_ref("--format=%(refname)", "refs/scheduler/rejected/").split()
    assert any(ref.endswith("/feature/F002") for ref in kept), kept
    assert not repo.git.for_each_ref("refs/scheduler/stacked/")  # forgotten once set aside
    assert any(
        "approved work that did not land as approved: it is done again from main" in line for line in lines
    )


class Gathers(Lanes):
    """Lanes whose merge queue, once F001 landed, waits for `count` approvals before it lands
    any (as it would behind a slow test suite)."""

    def __init__(self, *args: Any, gather: int, runners: int = 1, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gather = gather
        self.runners = runners

    def _land_next(self, repo: Any, waiting: list[Any]) -> None:
        if waiting[0].feature != "F001":
            for _ in range(600):
                if len(waiting) >= self.gather or self.failed is not None:
                    break
                threading.Event().wait(0.05)
                with self.lock:
                    waiting = self.queue.pending()
        super()._land_next(repo, waiting)


@pytest.mark.parametrize("runners", [1, 2])
def test_approvals_waiting_together_are_tested_as_one_batch_and_a_red_one_alone_goes_back(
    tmp_path: Path, runners: int
) -> None:
    """F002, F003 and F004 approved while the queue is busy: it merges the three onto `main` and
    tests them once (with two runners, the merge after the first two as well, side by side).
    F002 and F003 are red together (F003's test pins the words F002 changes): the batch is red,
    its first half too, F002 alone green: F002 lands, F003 goes back alone (known red without a
    run of its own), F004 is tested and lands; F003's FIX lands later. Every feature is merged
    once and `main` stays green."""
    project = new_project(tmp_path)
    scenario = Scenario.from_json({**FOUR, "red_together": [["F002", "F003"]]})
    lines: list[str] = []
    lanes = Gathers(
        project, CFG, InProcessRobotRunner(scenario), 3, echo=lines.append, gather=3, runners=runners
    )
    report = lanes.run()
    assert report.run.status == "done", report.run.message
    assert sorted(report.landed) == ["F001", "F002", "F003", "F004"]
    log = events.read(events.log_path(project))
    runs = [
        e.get("batch")
        for e in log
        if e["kind"] == "gates_ran" and e["where"] == "main" and "session" not in e
    ]
    first = max((r for r in runs[:runners] if r), key=len)
    assert sorted(first) == ["F002", "F003", "F004"], runs  # the three, tested once together
    if runners == 2:
        assert sorted(map(len, (r for r in runs[:2] if r))) == [2, 3], runs  # side by side
    culprit = max(("F002", "F003"), key=first.index)  # the pair's second in queue order
    back = [(e["feature"], e["why"], e.get("batch")) for e in log if e["kind"] == "sent_back"]
    assert len(back) == 1 and back[0][:2] == (culprit, "tests") and back[0][2] >= 2, back
    landed = [(e["feature"], e.get("batch")) for e in log if e["kind"] == "merge_verified"]
    assert landed[0] == ("F001", None) and landed[-1] == (culprit, None)  # its FIX lands last
    assert len(runs) <= 1 + 2 + 1 + 1, runs  # the batch, two halvings, the rest; the FIX's own
    assert sorted(m.split()[1] for m in _merges(project)) == [f"feature/F00{n}" for n in range(1, 5)]
    if any(batch for _, batch in landed):  # a green set of two or more landed (the order decides)
        assert any("tested with" in line for line in lines)
    tests = subprocess.run(["bash", "init.sh"], cwd=project, capture_output=True, text=True, check=False)
    assert tests.returncode == 0, tests.stdout + tests.stderr  # main is green


def _merges(project: Path) -> list[str]:
    import subprocess

    return subprocess.run(
        ["git", "log", "--merges", "--first-parent", "--format=%s", "main"],
        cwd=project,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()


# -- the machine, and a project's lane count --------------------------------------------------
def test_the_free_memory_is_the_kernel_s_estimate(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   2048 kB\n")
    assert available_memory(meminfo) == 2048 * 1024
    meminfo.write_text("MemTotal: 1 kB\n")
    assert available_memory(meminfo) is None
    assert available_memory(tmp_path / "none") is None


def _cli(*args: str, memory: int | None = None, scenario: dict[str, Any] | None = None) -> Any:
    obj = cli_seams(lambda _: InProcessRobotRunner(Scenario.from_json(scenario or FOUR)))
    obj["memory"] = lambda: memory
    return CliRunner().invoke(main, list(args), obj=obj)


def test_the_command_line_refuses_lanes_the_machine_cannot_hold_and_writes_nothing(spec_file: Path) -> None:
    result = _cli(
        "--project-dir", "big", "--spec", str(spec_file), "--lanes", "8", memory=3 * MEMORY_PER_LANE
    )
    assert result.exit_code == 2, result.output
    assert "use --lanes 3 or fewer" in result.output
    assert not resolve_project("big").exists()
    assert _cli("--project-dir", "big", "--lanes", "0").exit_code == 2  # click's own range check
    assert _cli("--project-dir", "big", "--lanes", "17").exit_code == 2


def test_lanes_are_saved_with_the_project_and_a_rerun_goes_on_with_them(spec_file: Path) -> None:
    args = ("--project-dir", "app", "--spec", str(spec_file))
    first = _cli(*args, "--lanes", "2", "--max-iterations", "3", "--feature-count", "4")
    assert first.exit_code == 3, first.output
    project = resolve_project("app")
    assert json.loads((project / ".agent_config.json").read_text())["lanes"] == 2
    second = _cli(*args)
    assert second.exit_code == 0, second.output
    assert "4/4 features passing" in second.output and "[lane 1]" in second.output
    runs = [e for e in events.read(events.log_path(project)) if e["kind"] == "run_started"]
    assert [e["lanes"] for e in runs] == [2, 2]


def test_a_lanes_project_goes_on_with_one_lane_once_the_others_are_idle(spec_file: Path) -> None:
    args = ("--project-dir", "app", "--spec", str(spec_file), "--feature-count", "4")
    first = _cli(*args, "--lanes", "3", "--max-iterations", "4")
    assert first.exit_code == 3, first.output
    config = resolve_project("app") / ".agent_config.json"
    before = config.read_bytes()
    refused = _cli(*args, "--lanes", "1")
    assert refused.exit_code == 2 and "still hold work; run with --lanes 3" in refused.output
    assert config.read_bytes() == before and "Project:" not in refused.output  # refused before the run
    done = _cli(*args)  # the saved count still holds
    assert done.exit_code == 0, done.output
    again = _cli(*args, "--lanes", "1")  # nothing left: the one-lane loop reads the lanes' schedule
    assert again.exit_code == 0, again.output
    saved = statefile.load(resolve_project("app"))
    assert saved is not None and all(lane.role is T.DONE for lane in saved.schedule.lanes)


class Interrupted(InProcessRobotRunner):
    """The robot; during session `number` the person presses Ctrl-C (the main thread is interrupted)."""

    def __init__(self, scenario: Scenario, number: int) -> None:
        super().__init__(scenario)
        self.number = number
        self.lanes: Lanes

    def _run(self, request: SessionRequest) -> SessionResult:
        if request.plan.number == self.number:
            import _thread
            import time

            _thread.interrupt_main()
            while not isinstance(self.lanes.failed, KeyboardInterrupt):  # it reaches them while this runs
                time.sleep(0.05)
        return super()._run(request)


def test_ctrl_c_stops_every_lane_and_their_sessions_run_again_uncounted(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    scenario = Scenario.from_json(FOUR)
    runner = Interrupted(scenario, 4)
    lines: list[str] = []
    runner.lanes = Lanes(project, CFG, runner, 3, echo=lines.append)
    with pytest.raises(KeyboardInterrupt):
        runner.lanes.run()
    assert STOPPING in lines  # said at once, before the sessions have stopped
    log = events.read(events.log_path(project))
    cut = [e for e in log if e["kind"] == "session_ended" and e["standing"] == "interrupted"]
    assert 4 in [e["session"] for e in cut] and all(e["cut"]["by"] == "interrupt" for e in cut)
    assert not [
        e
        for e in log
        if e["kind"] == "session_ended" and e["session"] == 4 and e["standing"] != "interrupted"
    ]
    assert log[-1]["kind"] == "run_ended" and log[-1]["status"] == "interrupted"
    saved = statefile.load(project)
    assert saved is not None and {f.number for f in saved.in_flight.values()} >= {4}
    assert all(f.why == "interrupted" for f in saved.in_flight.values())
    report = Lanes(project, CFG, InProcessRobotRunner(scenario), 3, echo=lambda _: None).run()
    assert report.run.status == "done" and report.run.message == "all 4 features pass"
    merges = [m.split(" (")[0] for m in _merges(project) if m.startswith("Merge feature/")]
    assert sorted(m.split(" (")[0] for m in merges) == [
        f"Merge feature/F00{n}" for n in (1, 2, 3, 4)
    ]  # once each
    log = events.read(events.log_path(project))
    assert {e["session"] for e in log if e["kind"] == "resumed"} == {
        f.number for f in saved.in_flight.values()
    }
    assert not [e for e in log if e["kind"] == "session_ended" and e["standing"] == "failed"]


class LimitedThenCtrlC(InProcessRobotRunner):
    """The robot, but session 1 hits a usage limit an hour from its reset; a second later, while
    every lane waits it out, the person presses Ctrl-C."""

    def _run(self, request: SessionRequest) -> SessionResult:
        import _thread
        import threading
        import time

        threading.Timer(1.0, _thread.interrupt_main).start()
        return SessionResult(rate_limit_resets_at=int(time.time()) + 3600, cost_usd=0.1)


def test_ctrl_c_while_the_lanes_wait_out_a_usage_limit_stops_them_at_once_and_starts_nothing(
    tmp_path: Path,
) -> None:
    import time

    project = new_project(tmp_path)
    lanes = Lanes(project, CFG, LimitedThenCtrlC(Scenario.from_json(FOUR)), 2, echo=lambda _: None)
    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        lanes.run()
    assert time.monotonic() - began < 30  # not the hour, nor a long sleep's step
    log = events.read(events.log_path(project))
    assert [e["session"] for e in log if e["kind"] == "session_started"] == [1]  # its rerun never started
    saved = statefile.load(project)
    (waiting,) = saved.in_flight.values() if saved else ()
    assert (
        waiting.number == 1
        and waiting.why == "interrupted"
        and waiting.wait_until is not None
        and waiting.wait_until > time.time() + 3000
    )


def test_a_clone_that_will_not_take_main_is_made_again_and_the_lane_goes_on(tmp_path: Path) -> None:
    from session_scheduler.repo import workdirs

    project = new_project(tmp_path)
    scenario = Scenario.from_json(FOUR)
    Lanes(project, CFG, InProcessRobotRunner(scenario), 2, echo=lambda _: None).run(max_iterations=1)
    repo = safe_git.open(project)  # main moves (another lane's landing): the clone must take it
    (project / "NOTES.md").write_text("notes\n")
    repo.git.add("NOTES.md")
    repo.git.commit("-q", "-m", "notes")
    jammed = workdirs.path_of(project, 0) / ".git" / "refs" / "heads" / "main.lock"
    jammed.mkdir()  # no lock file git can make: the clone's main cannot move
    lines: list[str] = []
    report = Lanes(project, CFG, InProcessRobotRunner(scenario), 2, echo=lines.append).run()
    assert report.run.status == "done" and not jammed.exists()
    assert any(line.startswith("[lane 0] its clone was made again: lane clone") for line in lines)


def test_lock_files_a_killed_git_left_in_a_clone_are_removed_before_its_next_session(tmp_path: Path) -> None:
    from session_scheduler.repo import workdirs

    project = new_project(tmp_path)
    scenario = Scenario.from_json(FOUR)
    Lanes(project, CFG, InProcessRobotRunner(scenario), 2, echo=lambda _: None).run(max_iterations=1)
    dot_git = workdirs.path_of(project, 0) / ".git"
    stale = [dot_git / "refs" / "heads" / "main.lock", dot_git / "index.lock", dot_git / "HEAD.lock"]
    for lock in stale:
        lock.write_text("")  # a git killed mid-update: main, the index and HEAD could not move
    lines: list[str] = []
    report = Lanes(project, CFG, InProcessRobotRunner(scenario), 2, echo=lines.append).run()
    assert report.run.status == "done", report.run.message
    assert not any(lock.exists() for lock in stale)
    assert not any("made again" in line for line in lines)


def test_an_architecture_review_runs_on_a_quiet_main_and_its_fixes_land_through_the_queue(
    tmp_path: Path,
) -> None:
    project = new_project(tmp_path)
    after_f001 = {f"F00{n}": ["F001"] for n in range(2, 6)}
    scenario = Scenario.from_json({"features": 5, "depends": after_f001, "architecture": ["REQUEST_CHANGES"]})
    config = dataclasses.replace(CFG, architecture_interval=2, feature_count=5)
    report = Lanes(project, config, InProcessRobotRunner(scenario), 3, echo=lambda _: None).run()
    assert report.run.status == "done", report.run.message
    log = events.read(events.log_path(project))
    started = [e for e in log if e["kind"] == "session_started"]
    ended = {e["session"]: e for e in log if e["kind"] == "session_ended"}
    (arch,) = [e for e in started if e["role"] == "ARCHITECTURE"][:1]
    for other in started:  # main was quiet: no other lane's session overlapped the review
        if other is not arch:
            assert float(ended[other["session"]]["ts"]) <= float(arch["ts"]) or float(other["ts"]) >= float(
                ended[arch["session"]]["ts"]
            )
    fixes = [e for e in log if e["kind"] == "merge_verified" and str(e["branch"]).startswith("arch/")]
    assert len(fixes) == 1  # its FIX, reviewed, landed through the queue once
    assert f"Merge {fixes[0]['branch']}" in "\n".join(_merges(project))


class Engine(InProcessRobotRunner):
    """An engine's runner (Reattachable), its "workers" the robot: session `number`'s first try
    runs to its end on its worker while the scheduler dies (the result kept by the engine, the run
    ended as by kill -9). `holds` says which tries the engine has; a run of one returns its result."""

    def __init__(self, scenario: Scenario, number: int, *, holding: bool = True) -> None:
        super().__init__(scenario)
        self.number, self.holding = number, holding
        self.kept: dict[tuple[int, int], SessionResult] = {}
        self.asked: list[tuple[int, int]] = []
        self.awaited: list[tuple[int, int]] = []
        self.dying = True

    def holds(self, number: int, attempt: int) -> bool:
        self.asked.append((number, attempt))
        return self.holding and (number, attempt) in self.kept

    async def run(self, request: SessionRequest) -> SessionResult:
        key = (request.plan.number, request.attempt)
        if key in self.kept:
            self.awaited.append(key)
            return self.kept[key]
        result = await super().run(request)
        if request.plan.number == self.number and self.dying:
            self.kept[key] = result
            self.dying = False
            raise SystemExit("the scheduler was killed; its session ran to its end on its worker")
        return result


def _killed_with_a_session_on_the_engine(tmp_path: Path, **engine: Any) -> tuple[Path, Engine, int]:
    project = new_project(tmp_path)
    runner = Engine(Scenario.from_json(FOUR), 3, **engine)
    with pytest.raises(SystemExit):
        Lanes(project, CFG, runner, 3, echo=lambda _: None).run()
    saved = statefile.load(project)
    assert saved is not None
    (lane,) = [n for n, f in saved.in_flight.items() if f.number == 3]
    return project, runner, lane


def test_a_killed_run_s_session_the_engine_holds_is_awaited_not_run_again(tmp_path: Path) -> None:
    project, runner, lane = _killed_with_a_session_on_the_engine(tmp_path)
    lines: list[str] = []
    report = Lanes(project, CFG, runner, 3, echo=lines.append).run()
    assert report.run.status == "done" and sorted(report.landed) == ["F001", "F002", "F003", "F004"]
    assert runner.awaited == [(3, 1)]  # the same try, its result taken
    log = events.read(events.log_path(project))
    (resumed,) = [e for e in log if e["kind"] == "resumed"]
    assert (resumed["session"], resumed["cause"], resumed["lane"]) == (3, "reattached", lane)
    assert any(f"[lane {lane}] Session 3" in line and "still on the engine" in line for line in lines)
    starts = Counter(e["session"] for e in log if e["kind"] == "session_started")
    assert set(starts.values()) == {1}, starts  # nothing started twice, the held one included
    ends = [e["standing"] for e in log if e["kind"] == "session_ended" and e["session"] == 3]
    assert ends == ["verified"]
    assert not [p for p in (project / ".agent_logs").iterdir() if ".interrupted-" in p.name]
    merges = [m.split(" (")[0] for m in _merges(project) if m.startswith("Merge feature/")]
    assert len(merges) == len(set(merges)) == 4


def _flight_changed(project: Path, lane: int, **change: Any) -> None:
    saved = statefile.load(project)
    assert saved is not None
    flights = {**saved.in_flight, lane: dataclasses.replace(saved.in_flight[lane], **change)}
    statefile.save(project, saved.schedule, flights)


@pytest.mark.parametrize(
    "why",
    [
        "the engine does not hold it",
        "it was cut short",
        "its start's branches are not on record",
        "its results were half recorded",
        "its folder's copies are gone",
    ],
)
def test_a_killed_run_s_session_runs_again_unless_the_engine_holds_it_as_it_started(
    tmp_path: Path, why: str
) -> None:
    project, runner, lane = _killed_with_a_session_on_the_engine(
        tmp_path, holding=why != "the engine does not hold it"
    )
    if why == "it was cut short":
        _flight_changed(project, lane, why="outage")
    if why == "its start's branches are not on record":
        _flight_changed(project, lane, heads={}, heads_gone=None)
    if why == "its folder's copies are gone":
        saved = statefile.load(project)
        assert saved is not None
        shutil.rmtree(Path(saved.in_flight[lane].log_dir) / "pre")
    if why == "its results were half recorded":  # undone from its copies first, then run again
        saved = statefile.load(project)
        assert saved is not None
        _flight_changed(project, lane, copies=str(Path(saved.in_flight[lane].log_dir) / "pre"))
    report = Lanes(project, CFG, runner, 3, echo=lambda _: None).run()
    assert report.run.status == "done" and sorted(report.landed) == ["F001", "F002", "F003", "F004"]
    assert runner.awaited == []
    log = events.read(events.log_path(project))
    assert [e["cause"] for e in log if e["kind"] == "resumed"] != ["reattached"]
    starts = Counter(e["session"] for e in log if e["kind"] == "session_started")
    assert starts[3] == 2  # run again, as its next try
    aside = [p.name for p in (project / ".agent_logs").iterdir() if ".interrupted-" in p.name]
    assert len(aside) == 1 and aside[0].startswith("session_0003_")


def _one_lane_killed_with_a_session_on_the_engine(tmp_path: Path, **engine: Any) -> tuple[Path, Engine]:
    from session_scheduler.run.lanes import Lanes

    project = new_project(tmp_path)
    runner = Engine(Scenario.from_json(FOUR), 3, **engine)
    with pytest.raises(SystemExit):
        Lanes(project, CFG, runner, echo=lambda _: None).run()
    saved = statefile.load(project)
    assert saved is not None and [f.number for f in saved.in_flight.values()] == [3]
    return project, runner


def test_with_one_lane_a_killed_run_s_session_the_engine_holds_is_awaited_not_run_again(
    tmp_path: Path,
) -> None:
    from session_scheduler.run.lanes import Lanes

    project, runner = _one_lane_killed_with_a_session_on_the_engine(tmp_path)
    lines: list[str] = []
    report = Lanes(project, CFG, runner, echo=lines.append).run().run
    assert report.status == "done", report
    assert runner.awaited == [(3, 1)] and (3, 1) in runner.asked
    log = events.read(events.log_path(project))
    assert [(e["session"], e["cause"]) for e in log if e["kind"] == "resumed"] == [(3, "reattached")]
    assert any("Session 3 (" in line and "still on the engine" in line for line in lines)
    starts = Counter(e["session"] for e in log if e["kind"] == "session_started")
    assert set(starts.values()) == {1}, starts
    assert [e["standing"] for e in log if e["kind"] == "session_ended" and e["session"] == 3] == ["verified"]
    assert not [p for p in (project / ".agent_logs").iterdir() if ".interrupted-" in p.name]


@pytest.mark.parametrize("why", ["the engine does not hold it", "it was cut short"])
def test_with_one_lane_a_killed_run_s_session_runs_again_unless_the_engine_holds_it(
    tmp_path: Path, why: str
) -> None:
    from session_scheduler.run.lanes import Lanes

    project, runner = _one_lane_killed_with_a_session_on_the_engine(
        tmp_path, holding=why != "the engine does not hold it"
    )
    if why == "it was cut short":
        _flight_changed(project, next(iter(statefile.load(project).in_flight)), why="outage")  # type: ignore[union-attr]
    report = Lanes(project, CFG, runner, echo=lambda _: None).run().run
    assert report.status == "done", report
    assert runner.awaited == []
    log = events.read(events.log_path(project))
    assert "reattached" not in [e["cause"] for e in log if e["kind"] == "resumed"]
    starts = Counter(e["session"] for e in log if e["kind"] == "session_started")
    assert starts[3] == 2


@pytest.mark.parametrize("named", [True, False])
def test_an_untracked_local_file_reaches_every_lane_only_when_the_person_names_it(
    tmp_path: Path, named: bool
) -> None:
    from session_scheduler.repo import workdirs

    project = new_project(tmp_path)
    (project / ".env").write_text("KEY=1\n")  # the app's local config: the person keeps it out of git
    (project / "notes.txt").write_text("the person's own\n")  # never named: reaches no lane
    config = dataclasses.replace(CFG, local_files=(".env",) if named else ())
    report = Lanes(
        project, config, InProcessRobotRunner(Scenario.from_json(FOUR)), 2, echo=lambda _: None
    ).run()
    assert report.run.status == "done", report.run.message
    for lane in (0, 1):
        clone = workdirs.path_of(project, lane)
        assert ((clone / ".env").read_text() if named else None) == ("KEY=1\n" if named else None)
        assert (clone / ".env").exists() is named and not (clone / "notes.txt").exists()
        assert safe_git.open(clone).git.status("--porcelain") == ""
    assert ".env" not in safe_git.open(project).git.ls_tree("-r", "--name-only", "main").split()
    # the person's untracked files stay where they are, through the skeleton and every landing
    assert (project / ".env").read_text() == "KEY=1\n" and (project / "notes.txt").exists()
    assert safe_git.open(project).git.stash("list") == ""
