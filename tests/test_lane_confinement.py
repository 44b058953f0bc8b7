"""What the red team's lanes found (session_scheduler/testing/red_team.py, LANE_CALLS): a lane's
session reads neither the project it was cloned from nor the projects beside it, and the mount
points the OS sandbox leaves in a lane's `.git` do not make the scheduler remake the clone, while
a clone whose config sends a fetch elsewhere, or whose `.git` borrows another's, is made again."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import sh

from session_scheduler.core.confinement import Host
from session_scheduler.guard import safe_git
from session_scheduler.guard.sandbox import lane_project, sandbox_settings
from session_scheduler.repo import workdirs

HOST = Host(("/home/me", "/root", "/home"), None, (), (), "/tmp")


def _denied(workdir: Path) -> list[str]:
    return list(sandbox_settings(workdir, (), HOST)["sandbox"]["filesystem"]["denyRead"])


def test_a_lane_s_session_reads_neither_its_project_nor_the_projects_beside_it() -> None:
    lane = Path("/srv/work/app.lanes/lane-0")
    denied, allowed = _denied(lane), sandbox_settings(lane, (), HOST)["sandbox"]["filesystem"]["allowRead"]
    assert "/srv/work/app.lanes" in denied  # the other lanes' clones
    assert "/srv/work" in denied  # the project (its records, the outboxes) and the other projects
    assert str(lane) in allowed
    assert lane_project(lane) == Path("/srv/work/app")
    assert "/srv/work" not in _denied(Path("/srv/work/app/sub"))  # not a lane: as before
    assert "/srv" not in _denied(Path("/srv/work/app"))


@pytest.mark.parametrize(
    "folder", ["/srv/work/app/lane-0", "/srv/work/.lanes/lane-0", "/srv/app.lanes/other"]
)
def test_only_a_lane_s_clone_is_taken_for_one(folder: str) -> None:
    assert lane_project(Path(folder)) is None


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "app"
    root.mkdir()
    sh(root, "git init -q -b main && git config user.name me && git config user.email me@x")
    sh(root, "echo one > f && git add f && git commit -qm one")
    return root


def test_the_sandbox_s_empty_mount_points_in_a_lane_s_git_keep_the_clone(project: Path) -> None:
    repo = safe_git.open(project)
    clone, _ = workdirs.ensure(repo, project, 0)
    git_dir = Path(clone.working_dir) / ".git"
    (git_dir / "objects" / "info" / "alternates").write_text("")  # what Claude Code's sandbox leaves
    (git_dir / "config.worktree").write_text("")
    (git_dir / "worktrees").mkdir()
    assert workdirs.problem_of(Path(clone.working_dir)) is None


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (
            "git config url.{project}/elsewhere.insteadOf {project}",
            "its config rewrites where git fetches from",
        ),
        ("echo {project}/.git > .git/commondir", "git finds another repository there"),
        ("ln -s {project}/.git/objects/info/x .git/objects/info/alternates", "it borrows objects"),
    ],
)
def test_a_clone_that_fetches_elsewhere_or_shares_a_repository_is_made_again(
    project: Path, damage: str, problem: str
) -> None:
    repo = safe_git.open(project)
    clone, _ = workdirs.ensure(repo, project, 0)
    path = Path(clone.working_dir)
    sh(path, damage.format(project=project))
    assert (workdirs.problem_of(path) or "").startswith(problem)
    again, why = workdirs.ensure(repo, project, 0)
    assert why is not None and why.startswith(problem) and workdirs.problem_of(path) is None
    workdirs.sync_main(again, project, str(sh(project, "git rev-parse main")).strip())
