"""What a person relies on after each session holds for every lane count (issue 30): the same run
on one lane and on lanes leaves the same records of how each session ended: what the CLI
reported (`result.json`), every refused call with its rule (`denials.jsonl`, `denial` events, a
DENIED line), an estimated cost for a session cut off, and a `feature_blocked` event."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import git
import pytest
from helpers import sh
from test_cut_sessions import TimedOutOnce

from scripted_model.scenario import Scenario
from session_scheduler.core.config import AgentConfig
from session_scheduler.core.errors import GitError
from session_scheduler.run.agent import SessionRequest, SessionResult, SessionRunner
from session_scheduler.run.lanes import Lanes
from session_scheduler.run.report import RunReport
from session_scheduler.store import events
from session_scheduler.testing.inprocess import InProcessRobotRunner

SPEC = Path(__file__).resolve().parent.parent / "session_scheduler" / "prompts" / "app_spec.txt"
CFG = AgentConfig(architecture_interval=100, max_attempts=2, sandbox=False)
LOOPS: dict[str, int] = {"one lane": 1, "three lanes": 3}
"""The one loop with one lane and with two (each in a clone of its own, landing through the
merge queue)."""
LANE_COUNTS = pytest.mark.parametrize("lanes", list(LOOPS))


def new_project(tmp_path: Path) -> Path:
    project = tmp_path / "app"
    project.mkdir()
    (project / "app_spec.txt").write_text(SPEC.read_text())
    return project


def run(
    project: Path,
    config: AgentConfig,
    runner: SessionRunner,
    lanes: str,
    lines: list[str],
    max_iterations: int | None = None,
) -> RunReport:
    """The project run to its end (or `max_iterations` sessions) the way `lanes` names (LOOPS)."""
    return Lanes(project, config, runner, LOOPS[lanes], echo=lines.append).run(max_iterations).run


def log_of(project: Path) -> list[dict[str, Any]]:
    return events.read(events.log_path(project))


@LANE_COUNTS
def test_a_session_cut_off_has_its_cost_estimated_and_says_what_cut_it(tmp_path: Path, lanes: str) -> None:
    project = new_project(tmp_path)
    lines: list[str] = []
    config = dataclasses.replace(CFG, feature_count=1)
    report = run(project, config, TimedOutOnce(Scenario.from_json({"features": 1})), lanes, lines)
    assert report.status == "done", report.message
    ended = [e for e in log_of(project) if e["kind"] == "session_ended" and e["session"] == 2]
    assert len(ended) == 1, ended
    receipt = ended[0]["receipt"]
    assert receipt["cost_estimated"] and receipt["partial"] and receipt["cost_usd"] > 0, receipt
    assert ended[0]["cut"]["by"] == "idle_timeout"
    line = next(line for line in lines if "Session 2 IMPLEMENT" in line)
    assert "(1 turn, " in line and "estimated" in line, line


@LANE_COUNTS
def test_each_session_leaves_its_result_and_every_refused_call_with_its_rule(
    tmp_path: Path, lanes: str
) -> None:
    project = new_project(tmp_path)
    lines: list[str] = []
    scenario = Scenario.from_json({"features": 1, "faults": [{"session": 2, "kind": "forbidden_command"}]})
    config = dataclasses.replace(CFG, feature_count=1)
    report = run(project, config, InProcessRobotRunner(scenario), lanes, lines)
    assert report.status == "done", report.message
    folders = sorted((project / ".agent_logs").glob("session_*"))
    assert len(folders) == 3, folders
    for folder in folders:
        result = json.loads((folder / "result.json").read_text())
        assert "permission_denials" in result, folder.name
    implement = next(f for f in folders if f.name.startswith("session_0002_"))
    audit = [json.loads(line) for line in (implement / "denials.jsonl").read_text().splitlines()]
    assert [(a["role"], a["tool"], a["input"]["command"]) for a in audit] == [
        ("IMPLEMENT", "Bash", "git push origin main")
    ]
    assert "git push" in audit[0]["rule"], audit
    denials = [e for e in log_of(project) if e["kind"] == "denial"]
    assert [(d["session"], d["rule"]) for d in denials] == [(2, audit[0]["rule"])]
    assert any(f"DENIED Bash: git push origin main ({audit[0]['rule']})" in line for line in lines), lines


@LANE_COUNTS
def test_a_feature_rejected_too_often_is_blocked_with_an_event(tmp_path: Path, lanes: str) -> None:
    project = new_project(tmp_path)
    lines: list[str] = []
    scenario = Scenario.from_json({"features": 2, "reviews": {"F002": ["REJECT", "REJECT"]}})
    config = dataclasses.replace(CFG, feature_count=2)
    report = run(project, config, InProcessRobotRunner(scenario), lanes, lines)
    assert report.status == "done" and report.message == "1 of 2 features pass, 1 blocked", report.message
    blocked = [e for e in log_of(project) if e["kind"] == "feature_blocked"]
    assert [(e["feature"], e["rejections"]) for e in blocked] == [("F002", 2)]
    assert any("blocked: F002 (rejected 2 times)" in line for line in lines), lines


class Idle(InProcessRobotRunner):
    """An agent that ends every session at once, having done nothing."""

    async def run(self, request: SessionRequest) -> SessionResult:
        return SessionResult(subtype="success", is_error=False)


@LANE_COUNTS
def test_an_initializer_that_kept_failing_halts_and_the_next_run_tries_it_again(
    tmp_path: Path, lanes: str
) -> None:
    project = new_project(tmp_path)
    lines: list[str] = []
    config = dataclasses.replace(CFG, feature_count=1)
    scenario = Scenario.from_json({"features": 1})
    report = run(project, config, Idle(scenario), lanes, lines)
    assert report.status == "halted" and "no feature_list.json was written" in report.message, report.message
    report = run(project, config, InProcessRobotRunner(scenario), lanes, lines)
    assert report.status == "done", report.message
    assert any("The last run halted (INITIALIZER failed 2 times" in line for line in lines), lines
    roles = [e["role"] for e in log_of(project) if e["kind"] == "session_started"]
    assert roles == ["INITIALIZER", "INITIALIZER", "INITIALIZER", "IMPLEMENT", "REVIEW"], roles


class GitBreaks(InProcessRobotRunner):
    """The robot, but session 2 meets a git command that fails (a lock left behind, a full disk)."""

    async def run(self, request: SessionRequest) -> SessionResult:
        if request.plan.number == 2:
            raise git.GitCommandError(["git", "fetch", "--quiet", "lane"], 128, stderr="fatal: disk full")
        return await super().run(request)


@LANE_COUNTS
def test_a_git_failure_ends_the_run_in_one_line_that_says_what_to_do(tmp_path: Path, lanes: str) -> None:
    project = new_project(tmp_path)
    config = dataclasses.replace(CFG, feature_count=1)
    with pytest.raises(GitError) as failed:
        run(project, config, GitBreaks(Scenario.from_json({"features": 1})), lanes, [])
    message = str(failed.value)
    assert message.startswith(f"git failed in {project} (git fetch --quiet lane): fatal: disk full; fix"), (
        message
    )
    assert "\n" not in message
    ended = [e for e in log_of(project) if e["kind"] == "run_ended"]
    assert [(e["status"], e["message"]) for e in ended] == [("error", message)]


class SandboxFails(InProcessRobotRunner):
    """The robot, but the OS sandbox of the first `times` IMPLEMENT sessions fails to start: they
    end having done nothing."""

    def __init__(self, scenario: Scenario, times: int) -> None:
        super().__init__(scenario)
        self.times = times

    async def run(self, request: SessionRequest) -> SessionResult:
        if request.plan.role.value == "IMPLEMENT" and self.times > 0:
            self.times -= 1
            return SessionResult(subtype="success", is_error=False, num_turns=1, sandbox_failed=True)
        return await super().run(request)


@LANE_COUNTS
def test_a_session_whose_sandbox_failed_runs_again_under_its_number_and_then_the_run_stops(
    tmp_path: Path, lanes: str
) -> None:
    project = new_project(tmp_path)
    lines: list[str] = []
    config = dataclasses.replace(CFG, feature_count=1)
    scenario = Scenario.from_json({"features": 1})
    report = run(project, config, SandboxFails(scenario, 1), lanes, lines)
    assert report.status == "done", report.message
    started = [(e["session"], e["role"]) for e in log_of(project) if e["kind"] == "session_started"]
    assert started == [(1, "INITIALIZER"), (2, "IMPLEMENT"), (2, "IMPLEMENT"), (3, "REVIEW")], started
    aside = [f.name for f in (project / ".agent_logs").glob("session_0002_IMPLEMENT.*")]
    assert len(aside) == 1 and ".interrupted-sandbox-" in aside[0], aside
    assert any("the OS sandbox failed to start for this session; running it again" in line for line in lines)

    (tmp_path / "other").mkdir()
    other = new_project(tmp_path / "other")
    report = run(other, config, SandboxFails(scenario, 10), lanes, lines)
    assert report.status == "limit" and "OS sandbox kept failing to start" in report.message, report.message
    started = [e["role"] for e in log_of(other) if e["kind"] == "session_started"]
    assert started == ["INITIALIZER", "IMPLEMENT", "IMPLEMENT", "IMPLEMENT"], started


class LeavesScratch(InProcessRobotRunner):
    """The robot, but IMPLEMENT leaves a scratch file and an unsaved edit behind, as real agents do."""

    def __init__(self, scenario: Scenario) -> None:
        super().__init__(scenario)
        self.found: list[tuple[int, bool]] = []

    async def run(self, request: SessionRequest) -> SessionResult:
        self.found.append((request.plan.number, (request.cwd / "scratch.txt").exists()))
        result = await super().run(request)
        if request.plan.role.value == "IMPLEMENT":
            (request.cwd / "scratch.txt").write_text("notes the agent never committed\n")
            with (request.cwd / "README.md").open("a") as readme:
                readme.write("an edit the agent never committed\n")
        return result


@LANE_COUNTS
def test_what_a_session_left_uncommitted_is_set_aside_named_and_gone_from_the_next_session(
    tmp_path: Path, lanes: str
) -> None:
    project = new_project(tmp_path)
    lines: list[str] = []
    config = dataclasses.replace(CFG, feature_count=1)
    runner = LeavesScratch(Scenario.from_json({"features": 1}))
    report = run(project, config, runner, lanes, lines)
    assert report.status == "done", report.message
    assert runner.found == [(1, False), (2, False), (3, False)], runner.found  # REVIEW starts clean
    kept = [e for e in log_of(project) if e["kind"] == "set_aside"]
    assert len(kept) == 1 and kept[0]["commit"], kept
    shown = sh(project, f"git stash show --include-untracked --name-only {kept[0]['ref']}")
    assert set(shown.split()) == {"README.md", "scratch.txt"}, shown
    assert any("set aside: " in line and kept[0]["ref"] in line for line in lines), lines


@LANE_COUNTS
def test_a_person_s_branch_named_as_a_work_branch_is_set_aside_not_handed_to_a_session(
    tmp_path: Path, lanes: str
) -> None:
    project = new_project(tmp_path)
    sh(project, "git init -q -b main . && echo old > old.txt && git add old.txt")
    sh(project, "git -c user.name=u -c user.email=u@x commit -q -m mine && git checkout -q -b feature/F001")
    sh(
        project,
        "echo tried > try.txt && git add try.txt && git -c user.name=u -c user.email=u@x commit -q -m try",
    )
    sh(project, "git checkout -q main")
    old = sh(project, "git rev-parse feature/F001")
    lines: list[str] = []
    report = run(
        project,
        dataclasses.replace(CFG, feature_count=1),
        InProcessRobotRunner(Scenario.from_json({"features": 1})),
        lanes,
        lines,
    )
    assert report.status == "done", report.message
    assert sh(project, "git rev-parse refs/scheduler/preexisting/feature/F001") == old
    assert sh(project, "git merge-base --is-ancestor feature/F001 main && echo merged") == "merged"
    assert not (project / "try.txt").exists()
    assert old not in sh(project, "git rev-list feature/F001"), "a session took the person's branch over"
    assert [e["ref"] for e in log_of(project) if e["kind"] == "set_aside"] == [
        "refs/scheduler/preexisting/feature/F001"
    ]


@LANE_COUNTS
def test_the_hand_off_files_are_checked_trimmed_restored_and_carry_each_lane_s_status(
    tmp_path: Path, lanes: str
) -> None:
    project = new_project(tmp_path)
    lines: list[str] = []
    config = dataclasses.replace(CFG, feature_count=2)
    scenario = Scenario.from_json({"features": 2})
    report = run(project, config, InProcessRobotRunner(scenario), lanes, lines, max_iterations=2)
    assert report.status == "limit", report.message
    assert (project / ".agent_logs" / "restore" / "post" / "reviews.json").is_file()
    status = json.loads((project / "progress.json").read_text())
    assert status["current_phase"] in ("IMPLEMENT", "REVIEW", "WAIT") and status["lanes"]["0"]["phase"], (
        status
    )
    progress_file = json.loads((project / "progress.json").read_text())
    first = progress_file["sessions"][0]
    progress_file["sessions"] = [
        {**first, "session_id": n} for n in range(1, 45)
    ]  # a long night's entries, as a run of many sessions leaves them
    (project / "progress.json").write_text(json.dumps(progress_file))
    (project / "reviews.json").unlink()  # a person tidied up
    report = run(project, config, InProcessRobotRunner(scenario), lanes, lines)
    assert report.status == "done", report.message
    assert any(
        "WARNING: reviews.json was missing; restored from .agent_logs/restore/post/reviews.json" in line
        for line in lines
    ), lines
    kept = json.loads((project / "progress.json").read_text())
    assert len(kept["sessions"]) < 40 and (project / "progress_history.jsonl").is_file(), len(
        kept["sessions"]
    )
    assert kept["current_phase"] == "DONE" and {lane["phase"] for lane in kept["lanes"].values()} == {"DONE"}


@LANE_COUNTS
def test_every_session_works_in_a_clone_whose_sandbox_denies_the_whole_project_folder(
    tmp_path: Path, lanes: str
) -> None:
    """Whatever the lane count, no session works in the person's folder, and its sandbox denies
    that folder whole, the records and `.agent_logs/` included, for reading and for writing (the
    red team's lane attacks play it through the real CLI's sandbox)."""
    project = new_project(tmp_path)
    settings: list[tuple[Path, dict[str, Any]]] = []

    class Recording(InProcessRobotRunner):
        async def run(self, request: SessionRequest) -> SessionResult:
            settings.append((request.cwd, json.loads(request.settings_path.read_text())))
            return await super().run(request)

    sandboxed = dataclasses.replace(CFG, sandbox=True, feature_count=1)
    lines: list[str] = []
    report = run(project, sandboxed, Recording(Scenario.from_json({"features": 1})), lanes, lines)
    assert report.status == "done", report.message
    assert [cwd.name for cwd, _ in settings] == ["lane-0"] * 3 or lanes != "one lane"
    records = (
        project / ".agent_logs" / "events.jsonl",
        project / ".agent_state.json",
        project / "app_spec.txt",
    )
    for cwd, session in settings:
        assert cwd.parent == project.parent / f"{project.name}.lanes" and cwd != project
        box = session["sandbox"]["filesystem"]
        for path in (project, *records):
            assert any(path.is_relative_to(denied) for denied in box["denyRead"] if denied != "~"), path
            assert not any(path.is_relative_to(opened) for opened in box["allowRead"]), (
                path,
                box["allowRead"],
            )
            assert not any(path.is_relative_to(written) for written in box["allowWrite"]), path
        assert str(cwd) in box["allowRead"]
