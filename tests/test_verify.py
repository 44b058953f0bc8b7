"""Verification against agents that lie or overstep: each case must fail and be undone."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from scripted_model.scenario import Scenario
from session_scheduler.core.config import AgentConfig
from session_scheduler.repo import gitops, workdirs
from session_scheduler.run.agent import SessionRequest, SessionResult
from session_scheduler.run.lanes import Lanes
from session_scheduler.testing.inprocess import InProcessRobotRunner

SPEC = Path(__file__).resolve().parent.parent / "session_scheduler" / "prompts" / "app_spec.txt"
CFG = AgentConfig(feature_count=2, max_attempts=2, test_command="bash init.sh")


def sh(cwd: Path, command: str) -> str:
    return subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, check=True).stdout


class Overstepping(InProcessRobotRunner):
    """The robot, plus something forbidden done in one session (before or after its work)."""

    def __init__(self, session: int, act: Callable[[Path, Path], None], *, before: bool = False) -> None:
        super().__init__(Scenario.from_json({"features": 2}))
        self.session, self.act, self.before = session, act, before

    async def run(self, request: SessionRequest) -> SessionResult:
        if request.plan.number == self.session and self.before:
            self.act(request.cwd, request.records.root)
            return SessionResult(subtype="success", is_error=False)
        result = await super().run(request)
        if request.plan.number == self.session:
            self.act(request.cwd, request.records.root)
        return result


def run(tmp_path: Path, runner: InProcessRobotRunner) -> tuple[Path, list[str]]:
    project = tmp_path / "app"
    project.mkdir()
    (project / "app_spec.txt").write_text(SPEC.read_text())
    lines: list[str] = []
    report = Lanes(project, CFG, runner, echo=lines.append).run().run
    assert report.status == "done", report.message
    return project, lines


def failed(lines: list[str], session: int) -> str:
    return next(line for line in lines if line.startswith(f"--- Session {session} ") and "FAILED" in line)


def test_a_review_that_moves_the_branch_instead_of_merging_is_refused(tmp_path: Path) -> None:
    def fake_pass(cwd: Path, records: Path) -> None:  # its hand-off files: the session's outbox
        sh(cwd, "git checkout -q main && git branch -f feature/F001 main")
        reviews = json.loads((records / "reviews.json").read_text())
        reviews["reviews"].append(
            {
                "review_id": 1,
                "feature_id": "F001",
                "kind": "feature",
                "verdict": "PASS",
                "issues": {"critical": [], "major": [], "minor": []},
                "acceptance": [{"step": n, "passed": True, "evidence": "seen"} for n in (1, 2)],
            }
        )
        (records / "reviews.json").write_text(json.dumps(reviews))
        features = json.loads((records / "feature_list.json").read_text())
        features["features"][0]["passes"] = True
        (records / "feature_list.json").write_text(json.dumps(features))

    project, lines = run(tmp_path, Overstepping(3, fake_pass, before=True))
    assert "changed branches it does not own: feature/F001" in failed(lines, 3)
    assert gitops.is_ancestor(gitops.open_repo(project), "feature/F001", "main")
    assert "feat(F001)" in sh(project, "git log --format=%s main")


def test_a_pass_whose_main_holds_more_than_the_merge_is_refused(tmp_path: Path) -> None:
    def extra_commit(cwd: Path, _: Path) -> None:
        sh(cwd, "echo '# unreviewed' >> README.md && git commit -qam 'sneaked in'")

    project, lines = run(tmp_path, Overstepping(3, extra_commit))
    assert "is not feature/F001 merged into the old `main`" in failed(lines, 3)
    assert "sneaked in" not in sh(project, "git log --format=%s main")
    clone = workdirs.path_of(project, 0)  # undone where the session worked
    assert "sneaked in" in sh(clone, "git log --format=%s refs/scheduler/undone/session-3/main")


def test_committing_scheduler_files_is_refused_and_state_survives(tmp_path: Path) -> None:
    def tamper(cwd: Path, _: Path) -> None:
        sh(
            cwd,
            "printf '*.pyc\\n' > .gitignore && git add .gitignore && git add -f feature_list.json "
            "&& git commit -qm 'track the feature list'",
        )

    project, lines = run(tmp_path, Overstepping(2, tamper))
    assert "hand-off or scheduler files were committed: feature_list.json" in failed(lines, 2)
    assert sh(project, "git ls-files feature_list.json .agent_state.json") == ""
    assert json.loads((project / ".agent_state.json").read_text())["lane"]["role"] == "DONE"


def test_a_deleted_work_branch_is_restored_by_the_undo(tmp_path: Path) -> None:
    scenario = Scenario.from_json({"features": 2, "reviews": {"F001": ["REQUEST_CHANGES", "PASS"]}})

    class DeletesBranch(InProcessRobotRunner):
        async def run(self, request: SessionRequest) -> SessionResult:
            if request.plan.number == 4:  # the FIX of F001
                sh(request.cwd, "git checkout -q main && git branch -D feature/F001")
                return SessionResult(subtype="success", is_error=False)
            return await super().run(request)

    project, lines = run(tmp_path, DeletesBranch(scenario))
    assert "branch feature/F001 does not exist" in failed(lines, 4)
    assert any("undo: feature/F001 reset to" in line for line in lines)
    assert json.loads((project / ".agent_state.json").read_text())["backlog"]["passing"] == ["F001", "F002"]


@pytest.mark.parametrize(
    "command",
    [
        "git branch stray main",
        "git branch -f main HEAD",
    ],
)
def test_implement_may_touch_only_its_own_branch(tmp_path: Path, command: str) -> None:
    project, lines = run(tmp_path, Overstepping(2, lambda cwd, _: sh(cwd, command)))
    reason = failed(lines, 2)
    assert "changed branches it does not own" in reason or "changed `main`" in reason
    assert "stray" not in sh(project, "git branch --list stray")
