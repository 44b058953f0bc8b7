"""Several lanes with the in-process robot: real clones, real git, the merge queue, one authority."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections import Counter
from pathlib import Path

from helpers import begun_on

from scripted_model.scenario import Scenario
from session_scheduler.core.config import AgentConfig
from session_scheduler.repo import workdirs
from session_scheduler.run.agent import SessionRequest, SessionResult
from session_scheduler.run.lanes import Lanes
from session_scheduler.store import events, statefile
from session_scheduler.testing.inprocess import InProcessRobotRunner

SPEC = Path(__file__).resolve().parent.parent / "session_scheduler" / "prompts" / "app_spec.txt"
CFG = AgentConfig(architecture_interval=100, feature_count=4, test_command="bash init.sh", sandbox=False)
AFTER_F001 = {"F002": ["F001"], "F003": ["F001"], "F004": ["F001"]}


def new_project(tmp_path: Path) -> Path:
    project = tmp_path / "app"
    project.mkdir()
    (project / "app_spec.txt").write_text(SPEC.read_text())
    return project


def git(project: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=project, capture_output=True, text=True, check=True).stdout


def test_three_lanes_build_every_feature_once_each_landed_once_on_main(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    runner = InProcessRobotRunner(Scenario.from_json({"features": 4, "depends": AFTER_F001}))
    lines: list[str] = []
    report = Lanes(project, CFG, runner, 3, echo=lines.append).run()
    assert report.landed[0] == "F001" and sorted(report.landed) == ["F001", "F002", "F003", "F004"]
    assert report.sent_back == () and report.schedule.settled
    merges = git(project, "log", "--merges", "--format=%s", "main").splitlines()
    assert sorted(m.split(" (")[0] for m in merges) == [
        f"Merge feature/F00{n}" for n in (1, 2, 3, 4)
    ]  # each once
    features = json.loads((project / "feature_list.json").read_text())["features"]
    assert all(f["passes"] for f in features)
    git(project, "diff", "--quiet")  # the project's work tree follows main
    assert (project / "todo" / "cmd_add.py").is_file()
    log = events.read(events.log_path(project))
    started = [e for e in log if e["kind"] == "session_started"]
    assert {e["lane"] for e in started} == {0, 1, 2}  # the lanes ran side by side
    assert sorted(e["session"] for e in started) == list(range(1, report.sessions + 1))  # numbers once each
    ended = [e for e in log if e["kind"] == "session_ended"]
    assert sorted(e["session"] for e in ended) == list(range(1, report.sessions + 1))  # each start ends once
    assert events.Totals.of(log).sessions == report.sessions
    entries = [s["session_id"] for s in json.loads((project / "progress.json").read_text())["sessions"]]
    assert Counter(entries) == Counter(range(1, report.sessions + 1))
    reviews = [r["review_id"] for r in json.loads((project / "reviews.json").read_text())["reviews"]]
    assert reviews == list(range(1, len(reviews) + 1))  # given out centrally, in order
    for lane in range(3):
        assert workdirs.path_of(project, lane).is_dir() and not workdirs.path_of(
            project, lane
        ).is_relative_to(project)
    saved = statefile.load(project)
    assert saved is not None and len(saved.schedule.lanes) == 3 and saved.schedule.issued == report.sessions
    assert not any(e["kind"] == "undo" for e in log) and not any("failed" in line for line in lines)


def test_one_lane_in_a_clone_lands_each_review_s_own_merge_with_no_second_test_run(tmp_path: Path) -> None:
    """The lanes' loop runs one lane too: its agent works in its clone, never in the project
    folder, and since `main` never moves under one lane, each REVIEW's verified merge is what
    lands (main's history is one lane's: one merge per feature, the REVIEW's own)."""
    import pytest

    with pytest.raises(ValueError, match="one lane or more"):
        Lanes(Path("."), CFG, InProcessRobotRunner(), 0)
    project = new_project(tmp_path)
    seen: list[Path] = []

    class Where(InProcessRobotRunner):
        async def run(self, request: SessionRequest) -> SessionResult:
            seen.append(request.cwd)
            return await super().run(request)

    scenario = Scenario.from_json({"features": 2, "depends": {"F002": ["F001"]}})
    report = Lanes(
        project, dataclasses.replace(CFG, feature_count=2), Where(scenario), 1, echo=lambda _: None
    ).run()
    assert report.run.status == "done" and report.landed == ("F001", "F002"), report.run.message
    assert set(seen) == {project.parent / "app.lanes" / "lane-0"}, seen
    assert git(project, "log", "--merges", "--format=%s", "main").splitlines() == [
        "Merge feature/F002",
        "Merge feature/F001",
    ]
    landed = [e for e in events.read(events.log_path(project)) if e["kind"] == "merge_verified"]
    assert [e["tests"] for e in landed] == ["passed on the review's merge"] * 2


def test_a_lane_s_feature_waits_for_the_feature_it_depends_on_to_land(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    scenario = {"features": 3, "depends": {"F002": ["F001"], "F003": ["F002"]}}
    report = Lanes(
        project,
        dataclasses.replace(CFG, feature_count=3),
        InProcessRobotRunner(Scenario.from_json(scenario)),
        2,
        echo=lambda _: None,
    ).run()
    assert report.landed == ("F001", "F002", "F003")
    log = events.read(events.log_path(project))
    begun = {e["feature"]: e for e in log if e["kind"] == "session_started" and e["role"] == "IMPLEMENT"}
    landed = {e["feature"]: e for e in log if e["kind"] == "merge_verified"}
    assert begun_on(log, begun["F002"], "F001") and begun_on(log, begun["F003"], "F002")
    assert not begun_on(log, begun["F002"], "F003")  # (the check has teeth)
    assert all(
        e["waited_s"] >= 0 and e["land_s"] > 0 and e["tests"] == "passed on the review's merge"
        for e in landed.values()
    )


def test_a_conflict_on_landing_goes_back_to_a_lane_which_merges_main_and_it_lands(tmp_path: Path) -> None:
    """F002 and F003 are fixed side by side, each adding its line at the end of the changelog:
    the second to land conflicts, is sent back with the scheduler's review, fixed by merging
    main in, reviewed again and landed; nothing is lost or merged twice."""
    project = new_project(tmp_path)
    scenario = {
        "features": 3,
        "depends": {"F002": ["F001"], "F003": ["F001"]},
        "reviews": {"F002": ["REQUEST_CHANGES", "PASS"], "F003": ["REQUEST_CHANGES", "PASS"]},
    }
    cfg = dataclasses.replace(CFG, feature_count=3)
    report = Lanes(
        project, cfg, InProcessRobotRunner(Scenario.from_json(scenario)), 2, echo=lambda _: None
    ).run()
    assert sorted(report.landed) == ["F001", "F002", "F003"] and len(report.sent_back) == 1
    log = events.read(events.log_path(project))
    (back,) = [e for e in log if e["kind"] == "sent_back"]
    assert back["why"] == "conflict" and back["feature"] == report.sent_back[0]
    review = next(
        r
        for r in json.loads((project / "reviews.json").read_text())["reviews"]
        if r["review_id"] == back["review_id"]
    )
    assert (
        "conflicts in CHANGELOG.md" in review["issues"]["critical"][0]
        and review["feature_id"] == back["feature"]
    )
    merges = git(project, "log", "--merges", "--first-parent", "--format=%s", "main").splitlines()
    assert sorted(m.split(" (")[0] for m in merges) == [f"Merge feature/F00{n}" for n in (1, 2, 3)]
    changelog = (project / "CHANGELOG.md").read_text()
    assert changelog.count("addressed review") >= 2  # both fixes' lines are on main


class CutOnce:
    """The robot, but the first try of session `number` hits a usage limit or an outage."""

    def __init__(self, robot: InProcessRobotRunner, number: int, result: object) -> None:
        self.robot, self.number, self.result, self.tries = robot, number, result, Counter[int]()

    async def run(self, request):  # type: ignore[no-untyped-def]
        self.tries[request.plan.number] += 1
        if request.plan.number == self.number and self.tries[request.plan.number] == 1:
            return self.result
        return await self.robot.run(request)


def test_a_usage_limit_pauses_every_lane_once_and_the_cut_session_runs_again(tmp_path: Path) -> None:
    from session_scheduler.run.agent import SessionResult
    from session_scheduler.run.classify import LIMIT_MARGIN_S
    from session_scheduler.store.events import EventLog
    from session_scheduler.testing.seams import VirtualClock

    project = new_project(tmp_path)
    clock = VirtualClock()
    reset = int(clock.now()) + 1800
    robot = InProcessRobotRunner(Scenario.from_json({"features": 4, "depends": AFTER_F001}), clock=clock)
    runner = CutOnce(robot, 5, SessionResult(rate_limit_resets_at=reset, cost_usd=0.25))
    log = EventLog(project, "run-1", clock=clock.now)
    lines: list[str] = []
    report = Lanes(project, CFG, runner, 2, echo=lines.append, events=log, clock=clock).run()  # type: ignore[arg-type]
    assert sorted(report.landed) == ["F001", "F002", "F003", "F004"] and runner.tries[5] == 2
    found = events.read(events.log_path(project))
    (wait,) = [e for e in found if e["kind"] == "limit_wait"]
    assert wait["session"] == 5 and wait["until"] == reset + LIMIT_MARGIN_S and wait["why"] == "usage_limit"
    ended = [e["standing"] for e in found if e["kind"] == "session_ended" and e["session"] == 5]
    assert ended == ["usage_limit", "verified"]  # cut, then run again and verified
    after = [e for e in found if e["kind"] == "session_started" and e["ts"] > wait["ts"]]
    assert after and all(e["ts"] >= wait["until"] for e in after)  # no lane started while paused
    assert sum("every lane waits" in line for line in lines) == 1


def test_a_pause_that_comes_after_a_lane_looked_still_holds_its_session_back(tmp_path: Path) -> None:
    """Another lane's usage limit can pause every lane just after this lane found no pause and
    made its session ready: the session still waits for the pause to end before it starts."""
    from session_scheduler.store.events import EventLog
    from session_scheduler.testing.seams import VirtualClock

    project = new_project(tmp_path)
    clock = VirtualClock()
    robot = InProcessRobotRunner(Scenario.from_json({"features": 4}), clock=clock)
    lanes = Lanes(
        project,
        CFG,
        robot,
        2,
        echo=lambda _: None,
        events=EventLog(project, "run-1", clock=clock.now),
        clock=clock,
    )
    looked, pauses = lanes._paused, list[float]()

    def then_paused() -> None:
        looked()
        if not pauses:  # as a cut in another lane would, right after this lane looked
            with lanes.lock:
                lanes.paused_until = clock.now() + 600
            pauses.append(lanes.paused_until)

    lanes._paused = then_paused  # type: ignore[method-assign]
    lanes.run(max_iterations=1)  # the INITIALIZER's, which only lane 0 can run
    started = [e["ts"] for e in events.read(events.log_path(project)) if e["kind"] == "session_started"]
    assert len(started) == 1 and started[0] >= pauses[0]


def test_what_retrying_cannot_fix_stops_every_lane(tmp_path: Path) -> None:
    import pytest

    from session_scheduler.core.errors import SchedulerError
    from session_scheduler.run.agent import SessionResult

    project = new_project(tmp_path)
    robot = InProcessRobotRunner(Scenario.from_json({"features": 4, "depends": AFTER_F001}))
    runner = CutOnce(robot, 4, SessionResult(api_error_status=401))
    with pytest.raises(SchedulerError, match="not logged in or the key is invalid"):
        Lanes(project, CFG, runner, 2, echo=lambda _: None).run()  # type: ignore[arg-type]


def test_an_outage_backs_every_lane_off_and_a_long_one_stops_the_run(tmp_path: Path) -> None:

    from session_scheduler.run.agent import SessionResult
    from session_scheduler.store.events import EventLog
    from session_scheduler.testing.seams import VirtualClock

    outage = SessionResult(subtype="success", terminal_reason="api_error", api_error_status=529)
    scenario = Scenario.from_json({"features": 4, "depends": AFTER_F001})
    clock = VirtualClock()
    project = new_project(tmp_path)
    runner = CutOnce(InProcessRobotRunner(scenario, clock=clock), 4, outage)
    log = EventLog(project, "run-1", clock=clock.now)
    report = Lanes(project, CFG, runner, 2, echo=lambda _: None, events=log, clock=clock).run()  # type: ignore[arg-type]
    assert len(report.landed) == 4 and runner.tries[4] == 2
    (wait,) = [e for e in events.read(events.log_path(project)) if e["kind"] == "limit_wait"]
    assert wait["why"] == "outage" and 30 <= wait["until"] - wait["ts"] <= 36  # the first back-off
    impatient = dataclasses.replace(CFG, max_outage_minutes=0.1)
    (tmp_path / "second").mkdir()
    other = new_project(tmp_path / "second")
    runner = CutOnce(InProcessRobotRunner(scenario, clock=clock), 4, outage)
    stopped = Lanes(other, impatient, runner, 2, echo=lambda _: None, clock=clock).run()  # type: ignore[arg-type]
    assert (
        stopped.run.status == "limit"
        and "back-off included (--max-outage-minutes 0.1)" in stopped.run.message
    )
    saved = statefile.load(other)
    assert saved is not None and [f.why for f in saved.in_flight.values()] == [
        "outage"
    ]  # it runs again next time
    lines: list[str] = []
    robot = InProcessRobotRunner(scenario, clock=clock)
    again = Lanes(other, CFG, robot, 2, echo=lines.append, clock=clock).run()
    assert again.run.status == "done"
    assert next(line for line in lines if "Resuming" in line).endswith("again: it was cut short (outage)")
