"""The whole loop with the in-process robot: real files, real git, the scheduler's checks."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest

from scripted_model.scenario import Scenario
from session_scheduler.core.config import AgentConfig, SessionType
from session_scheduler.repo import gitops, workdirs
from session_scheduler.run.agent import SessionRequest, SessionResult
from session_scheduler.run.lanes import Lanes
from session_scheduler.store.progress import HANDOFF_FILES, load_handoff
from session_scheduler.testing.inprocess import InProcessRobotRunner

SPEC = Path(__file__).resolve().parent.parent / "session_scheduler" / "prompts" / "app_spec.txt"
LIFECYCLE = {"features": 3, "reviews": {"F001": ["REQUEST_CHANGES", "PASS"], "F002": ["REJECT", "PASS"]}}
EXPECTED = [
    "INITIALIZER",
    "IMPLEMENT",
    "REVIEW",
    "FIX",
    "REVIEW",
    "IMPLEMENT",
    "REVIEW",
    "IMPLEMENT",
    "REVIEW",
    "ARCHITECTURE",
    "IMPLEMENT",
    "REVIEW",
]
CFG = AgentConfig(architecture_interval=2, feature_count=3, test_command="bash init.sh")


def new_project(tmp_path: Path, name: str = "app") -> Path:
    project = tmp_path / name
    project.mkdir()
    (project / "app_spec.txt").write_text(SPEC.read_text())
    return project


def sessions(project: Path) -> list[str]:
    logs = sorted(p.name for p in (project / ".agent_logs").glob("session_*") if "." not in p.name)
    return [name.split("_", 2)[2] for name in logs]


def git(project: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=project, capture_output=True, text=True, check=True).stdout


def run(project: Path, scenario: dict[str, object], cfg: AgentConfig = CFG, **kw: object):  # type: ignore[no-untyped-def]
    lines: list[str] = []
    runner = InProcessRobotRunner(Scenario.from_json(scenario))
    report = Lanes(project, cfg, runner, echo=lines.append).run(**kw).run  # type: ignore[arg-type]
    return report, runner, lines


def test_full_lifecycle(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    report, runner, _ = run(project, LIFECYCLE)
    assert report.status == "done"
    assert sessions(project) == EXPECTED
    assert report.state.backlog.passing == {"F001", "F002", "F003"}
    assert report.state.backlog.completed == 3
    assert report.totals.sessions_by_role == {
        "INITIALIZER": 1,
        "IMPLEMENT": 4,
        "REVIEW": 5,
        "FIX": 1,
        "ARCHITECTURE": 1,
    }
    # Every feature branch is merged into main; main's own commits are the scheduler's, the
    # initializer's and merges only.
    for feature in ("F001", "F002", "F003"):
        assert gitops.is_ancestor(gitops.open_repo(project), f"feature/{feature}", "main")
    first_parent = git(project, "log", "--first-parent", "--format=%s", "main").splitlines()
    assert [s for s in first_parent if not s.startswith("Merge ")] == [
        "chore: project skeleton and init.sh",
        "chore: app spec and .gitignore for the scheduler's files",
    ]
    subprocess.run(["bash", "init.sh"], cwd=project, check=True, capture_output=True)
    # The hand-off files validate, and each session left its copies.
    handoff = load_handoff(project)
    assert [r["verdict"] for r in handoff.review_list()] == [
        "REQUEST_CHANGES",
        "PASS",
        "REJECT",
        "PASS",
        "PASS",
        "PASS",
    ]
    assert handoff.fix_list()[0]["review_id"] == 1
    for log in (project / ".agent_logs").glob("session_*"):  # feature_list.json: its changes only
        assert {p.name for p in (log / "post").iterdir()} == {"progress.json", "reviews.json"}
        assert set(json.loads((log / "changes.json").read_text())) == {"passes", "feature_list_written"}
    assert {p.name for p in (project / ".agent_logs" / "restore" / "post").iterdir()} == set(HANDOFF_FILES)
    # Every session got its role's prompt, model and settings.
    roles = [r.plan.role.value for r in runner.requests]
    assert roles == EXPECTED
    assert all(f"# YOUR ROLE - {r.plan.role.value} AGENT" in r.plan.system_prompt for r in runner.requests)
    assert all(
        f"# Scope of this session: {r.plan.role.value}" in r.plan.system_prompt for r in runner.requests
    )
    assert [r.plan.model for r in runner.requests][:3] == ["sonnet", "sonnet", "opus"]


def test_rejected_branch_is_deleted_and_redone_from_main(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    report, _, lines = run(project, LIFECYCLE, max_iterations=7)  # session 7: F002's REVIEW rejects
    assert sessions(project)[-1] == "REVIEW" and report.state.backlog.rejections == (("F002", 1),)
    assert any("branch feature/F002 deleted" in line for line in lines)
    repo = gitops.open_repo(project)
    assert gitops.head(repo, "feature/F002") is None  # deleted
    kept = "refs/scheduler/rejected/session-7/feature/F002"
    assert git(project, "for-each-ref", "--format=%(refname)", "refs/scheduler/rejected/").split() == [kept]
    rejected, main_then = git(project, "rev-parse", kept).strip(), gitops.head(repo, "main")
    assert main_then and not gitops.is_ancestor(repo, rejected, main_then)  # its tip kept, not merged
    assert report.state.lane.role is SessionType.IMPLEMENT and report.state.lane.work is not None
    assert report.state.lane.work.feature_id == "F002"

    report, runner, _ = run(project, LIFECYCLE)
    assert report.status == "done" and sessions(project) == EXPECTED
    redone = runner.requests[0].plan  # the next session: IMPLEMENT on F002 again
    assert (
        redone.role is SessionType.IMPLEMENT and redone.work is not None and redone.work.feature_id == "F002"
    )
    # Redone from main as it stood after the rejection, not from the rejected tip; then merged.
    redo = git(project, "rev-list", "--reverse", "--first-parent", "feature/F002", f"^{main_then}").split()
    assert redo and git(project, "rev-parse", f"{redo[0]}^").strip() == main_then
    assert gitops.is_ancestor(repo, "feature/F002", "main") and "F002" in report.state.backlog.passing
    assert git(project, "rev-parse", kept).strip() == rejected  # still kept


def test_interrupted_run_is_resumed_by_a_second_invocation(tmp_path: Path) -> None:
    reference = new_project(tmp_path, "reference")
    run(reference, LIFECYCLE)

    class Crash(InProcessRobotRunner):
        async def run(self, request: SessionRequest) -> SessionResult:
            if request.plan.number == 5:  # the REVIEW that merges F001: half done, then killed
                (request.cwd / "reviews.json").write_text('{"reviews": [ half written')
                raise KeyboardInterrupt
            return await super().run(request)

    project = new_project(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        Lanes(project, CFG, Crash(Scenario.from_json(LIFECYCLE)), echo=lambda _: None).run()
    state = json.loads((project / ".agent_state.json").read_text())
    assert state["in_flight"]["0"]["number"] == 5
    report, _, lines = run(project, LIFECYCLE)
    assert any("was interrupted" in line for line in lines)
    assert report.status == "done" and report.totals.not_counted == {"interrupted": 1}
    assert sessions(project) == EXPECTED == sessions(reference)
    assert git(project, "ls-tree", "-r", "--name-only", "main") == git(
        reference, "ls-tree", "-r", "--name-only", "main"
    )
    assert load_handoff(project).feature_list == load_handoff(reference).feature_list


def test_max_iterations_stops_a_resumable_run(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    report, _, _ = run(project, LIFECYCLE, max_iterations=4)
    assert report.status == "limit" and report.sessions_this_run == 4
    report, _, _ = run(project, LIFECYCLE)
    assert report.status == "done" and sessions(project) == EXPECTED


def test_invalid_json_an_agent_writes_in_its_clone_is_no_record(tmp_path: Path) -> None:
    """The records are written through the hand-off tools only: a REVIEW that breaks a
    reviews.json in its clone breaks nothing the scheduler reads; its verdict stands."""
    project = new_project(tmp_path)
    scenario = {**LIFECYCLE, "faults": [{"session": 3, "kind": "invalid_json", "file": "reviews.json"}]}
    report, _, lines = run(project, scenario)
    assert report.status == "done" and sessions(project) == EXPECTED
    assert not any("not valid JSON" in line for line in lines)
    assert (workdirs.path_of(project, 0) / "reviews.json").read_text().startswith('{"reviews": [ this is not')
    post = json.loads((project / ".agent_logs" / "session_0003_REVIEW" / "post" / "reviews.json").read_text())
    assert [r["verdict"] for r in post["reviews"]] == ["REQUEST_CHANGES"]


def test_commit_on_main_is_undone_and_retried(tmp_path: Path) -> None:
    """A commit the Bash policy cannot see (a script; without the OS sandbox, as in-process) is
    undone in the session's clone; the project's `main` never had it."""
    project = new_project(tmp_path)
    clone = workdirs.path_of(project, 0)
    scenario = {**LIFECYCLE, "faults": [{"session": 2, "kind": "hidden_commit_on_main"}]}
    report, _, lines = run(project, scenario)
    assert report.status == "done"
    assert any("IMPLEMENT changed `main`" in line for line in lines)
    # Undone: main put back where it stood, the stray commit kept aside in the clone, never on main.
    stray = git(clone, "rev-parse", "refs/scheduler/undone/session-2/main").strip()
    assert git(clone, "log", "-1", "--format=%s", stray).strip() == "stray commit on main"
    assert any(
        f"undo: main reset to {git(clone, 'rev-parse', f'{stray}^').strip()[:10]}" in line for line in lines
    )
    assert "stray commit on main" not in git(project, "log", "--format=%s", "main")
    # Retried: the same role again on the same feature, then the run goes on as usual.
    assert sessions(project)[:3] == ["INITIALIZER", "IMPLEMENT", "IMPLEMENT"]
    assert sessions(project)[2:] == EXPECTED[1:]
    assert report.totals.failed == 1


def test_a_visible_commit_on_main_is_refused_before_it_runs(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    scenario = {**LIFECYCLE, "faults": [{"session": 2, "kind": "commit_on_main"}]}
    report, _, lines = run(project, scenario)
    assert report.status == "done" and sessions(project) == EXPECTED
    assert any("DENIED" in line and "IMPLEMENT may not change the branch main" in line for line in lines), (
        lines
    )
    assert "stray commit on main" not in git(project, "log", "--format=%s", "--all")


def test_failing_tests_after_a_merge_undo_it(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    scenario = {"features": 3, "buggy": ["F003"], "faults": [{"session": 8, "kind": "ignore_tests"}]}
    report, _, lines = run(project, scenario, max_iterations=8)
    assert any("PASS counts as REQUEST_CHANGES" in line for line in lines)
    assert report.state.lane.role is SessionType.FIX
    assert "F003" not in report.state.backlog.passing
    assert not gitops.is_ancestor(gitops.open_repo(project), "feature/F003", "main")
    review = load_handoff(project).review_list()[-1]
    assert review["verified_verdict"] == "REQUEST_CHANGES" and review["scheduler_findings"]
    report, _, _ = run(project, scenario)
    assert report.status == "done" and report.state.backlog.passing == {"F001", "F002", "F003"}


def test_forbidden_write_is_denied_by_the_path_policy(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    scenario = {"features": 1, "faults": [{"session": 3, "kind": "forbidden_write", "file": "src/x.py"}]}
    report, _, _ = run(project, scenario)
    result = json.loads((project / ".agent_logs" / "session_0003_REVIEW" / "result.json").read_text())
    assert result["permission_denials"][0]["tool_input"]["file_path"].endswith("src/x.py")
    assert report.status == "done"
    (audit,) = (project / ".agent_logs" / "session_0003_REVIEW" / "denials.jsonl").read_text().splitlines()
    assert (
        json.loads(audit)["rule"]
        == "scheduler policy: Write is not one of REVIEW's tools in this unattended run (it has: Bash, Read, "
        "Glob, Grep, handoff__brief, handoff__show_feature, handoff__append_session, handoff__record_review, "
        "handoff__mark_passing)"
    )
    assert report.totals.denials_by_role == {"REVIEW": 1}


def test_a_forbidden_command_is_denied_and_audited_with_its_rule(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    scenario = {
        "features": 1,
        "faults": [{"session": 2, "kind": "forbidden_command", "command": "git push origin main"}],
    }
    report, _, lines = run(project, scenario)
    (audit,) = (project / ".agent_logs" / "session_0002_IMPLEMENT" / "denials.jsonl").read_text().splitlines()
    assert json.loads(audit) == {
        "session": 2,
        "role": "IMPLEMENT",
        "tool": "Bash",
        "input": {"command": "git push origin main", "description": "git push origin main"},
        "rule": "deny rule Bash(git push:*)",
    }
    assert "  DENIED Bash: git push origin main (deny rule Bash(git push:*))" in lines
    assert report.status == "done" and report.totals.denials_by_role == {"IMPLEMENT": 1}


def test_initializer_that_keeps_failing_halts_and_is_retried_on_the_next_run(tmp_path: Path) -> None:
    project = new_project(tmp_path)

    class Idle:
        async def run(self, request: SessionRequest) -> SessionResult:
            return SessionResult(subtype="success", is_error=False)

    lines: list[str] = []
    report = Lanes(project, AgentConfig(max_attempts=2), Idle(), echo=lines.append).run().run
    assert report.status == "halted" and "no feature_list.json was written" in report.message
    assert sessions(project) == ["INITIALIZER", "INITIALIZER"]  # it kept failing: both attempts used
    assert report.state.lane.role is SessionType.HALTED
    report, runner, _ = run(project, {"features": 1})
    assert report.status == "done"
    assert runner.requests[0].plan.role is SessionType.INITIALIZER  # the next run retries it first
    assert sessions(project) == ["INITIALIZER", "INITIALIZER", "INITIALIZER", "IMPLEMENT", "REVIEW"]


def test_the_budget_stops_the_run_and_each_session_gets_what_is_left(tmp_path: Path) -> None:
    class Priced(InProcessRobotRunner):
        async def run(self, request: SessionRequest) -> SessionResult:
            return dataclasses.replace(await super().run(request), cost_usd=1.0)

    project = new_project(tmp_path)
    runner = Priced(Scenario.from_json(LIFECYCLE))
    config = dataclasses.replace(CFG, max_budget_usd=2.5)
    report = Lanes(project, config, runner, echo=lambda _: None).run().run
    assert report.status == "limit" and "less than one session may spend ($1.00)" in report.message
    assert [r.plan.max_budget_usd for r in runner.requests] == [2.5, 1.5]  # then $0.50 is left
    raised = dataclasses.replace(CFG, max_budget_usd=100.0)
    assert Lanes(project, raised, runner, echo=lambda _: None).run().run.status == "done"


def test_a_second_kill_while_resuming_still_resumes(tmp_path: Path) -> None:
    """Killed again after the interrupted session's folder was set aside, before the rerun saved."""

    class Crash(InProcessRobotRunner):
        async def run(self, request: SessionRequest) -> SessionResult:
            if request.plan.number == 3:
                raise KeyboardInterrupt
            return await super().run(request)

    project = new_project(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        Lanes(project, CFG, Crash(Scenario.from_json(LIFECYCLE)), echo=lambda _: None).run()
    log = project / ".agent_logs" / "session_0003_REVIEW"
    log.rename(log.with_name(log.name + ".interrupted-1"))  # what the first resume does before it is killed
    report, _, lines = run(project, LIFECYCLE)
    assert report.status == "done" and sessions(project) == EXPECTED
    assert any("was interrupted" in line for line in lines)


def test_a_sandbox_that_fails_to_start_costs_no_attempt_and_stops_resumably(tmp_path: Path) -> None:
    class SandboxDown:
        def __init__(self) -> None:
            self.numbers: list[int] = []

        async def run(self, request: SessionRequest) -> SessionResult:
            self.numbers.append(request.plan.number)
            return SessionResult(subtype="success", is_error=False, sandbox_failed=True)

    project = new_project(tmp_path)
    runner = SandboxDown()
    lines: list[str] = []
    report = Lanes(project, CFG, runner, echo=lines.append).run().run
    assert report.status == "limit" and "OS sandbox kept failing to start" in report.message
    assert runner.numbers == [1, 1, 1]  # the same session, rerun twice, never counted as an attempt
    assert report.state.lane.attempts == 0 and report.state.session_count == 0
    assert len(list((project / ".agent_logs").glob("session_0001_INITIALIZER.interrupted-sandbox-*"))) == 3
    report, _, _ = run(project, LIFECYCLE)
    assert report.status == "done" and sessions(project) == EXPECTED


def test_features_are_built_after_the_features_they_depend_on_and_the_model_takes_its_time(
    tmp_path: Path,
) -> None:
    """The scenario's initializer writes `depends_on` (F002 needs F003): one lane builds F001,
    F003, then F002; each turn of the robot waits its latency on the run's clock (no real wait)."""
    from session_scheduler.testing.seams import VirtualClock

    project = new_project(tmp_path)
    clock = VirtualClock()
    scenario = Scenario.from_json({"features": 3, "depends": {"F002": ["F003"]}, "turn_latency_s": 30})
    runner = InProcessRobotRunner(scenario, clock=clock)
    start = clock.now()
    cfg = dataclasses.replace(CFG, architecture_interval=10)
    report = Lanes(project, cfg, runner, echo=lambda _: None, clock=clock).run().run
    assert report.status == "done"
    built = [
        r.plan.work.feature_id
        for r in runner.requests
        if r.plan.role is SessionType.IMPLEMENT and r.plan.work
    ]
    assert built == ["F001", "F003", "F002"]
    listed = json.loads((project / "feature_list.json").read_text())["features"]
    assert [f.get("depends_on") for f in listed] == [None, ["F003"], None]
    assert clock.now() - start >= 30 * 7 * 8  # 7 sessions, at least eight turns each
