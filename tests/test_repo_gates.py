"""Gates on a real repository: a commit's files as the plugins see them, and its gates run in one
clean worktree outside the project (install first, every gate after it, red or green)."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

import git
import pytest

from session_scheduler.core.gates import Gate, GateResult, GateSet
from session_scheduler.core.languages import detect
from session_scheduler.repo import gates as repo_gates
from session_scheduler.repo import gitops


@pytest.fixture
def repo(tmp_path: Path) -> git.Repo:
    project = tmp_path / "projects" / "app"
    project.mkdir(parents=True)
    (project / "app_spec.txt").write_text("spec\n")
    return gitops.open_repo(project)


def commit(repo: git.Repo, files: dict[str, str | bytes | None]) -> str:
    """Commit `files` (None: as it already is in the work tree)."""
    root = Path(repo.working_dir)
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is None:
            continue
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    repo.git.add(*files)
    repo.git.commit("-m", "files", "--no-verify")
    return repo.head.commit.hexsha


def ticks() -> itertools.count[float]:
    return itertools.count(0.0, 0.5)


def run(repo: git.Repo, sha: str, gates: GateSet, timeout: float = 900) -> tuple[GateResult, ...]:
    clock = ticks()
    return repo_gates.run_gates_at(
        repo, sha, gates, allowed_domains=(), sandboxed=False, clock=lambda: next(clock), timeout=timeout
    )


# --- tree_at --------------------------------------------------------------------------------------------


def test_the_tree_of_a_commit_names_its_files_and_reads_its_text(repo: git.Repo) -> None:
    sha = commit(repo, {"pyproject.toml": "[tool.ruff]\n", "app/__init__.py": "", "logo.png": b"\x89PNG\0\0"})
    commit(repo, {"pyproject.toml": "changed later\n"})
    tree = repo_gates.tree_at(repo, sha)
    assert {"pyproject.toml", "app/__init__.py", "logo.png", "app_spec.txt"} <= tree.names
    assert tree.read("pyproject.toml") == "[tool.ruff]\n"  # as at that commit
    assert tree.read("logo.png") is None  # binary
    assert tree.read("missing.txt") is None


def test_the_tree_reads_no_large_file_and_no_link(repo: git.Repo) -> None:
    os.symlink("app_spec.txt", Path(repo.working_dir) / "link")
    tree = repo_gates.tree_at(
        repo, commit(repo, {"big.json": "x" * (repo_gates.READ_LIMIT + 1), "link": None})
    )
    assert {"big.json", "link"} <= tree.names
    assert tree.read("big.json") is None and tree.read("link") is None
    assert tree.read("app_spec.txt") == "spec\n"


def test_the_plugins_detect_on_a_commit(repo: git.Repo) -> None:
    sha = commit(repo, {"package.json": '{"scripts": {"test": "node t.js"}}', "package-lock.json": "{}"})
    assert detect(repo_gates.tree_at(repo, sha)) == GateSet(
        (Gate("tests", "npm test"),), "npm ci", "detected:node"
    )


# --- run_gates_at (unsandboxed: fast) -----------------------------------------------------------------


def test_every_gate_runs_red_or_green_in_one_worktree_after_the_install(repo: git.Repo) -> None:
    sha = commit(repo, {"check.sh": "test -f installed && echo fine\n"})
    gates = GateSet(
        (
            Gate("lint", "echo 'a.py:1: E501'; exit 1", "lint"),
            Gate("tests", "bash check.sh", "tests"),
        ),
        install="touch installed",
    )
    assert run(repo, sha, gates) == (
        GateResult("lint", "lint", gates.gates[0].command, False, 0.5, "a.py:1: E501\n"),
        GateResult("tests", "tests", "bash check.sh", True, 0.5, "fine\n"),
    )
    assert str(repo.git.worktree("list")).count("\n") == 0, "the worktree was removed"
    assert not (Path(repo.working_dir) / "installed").exists()


def test_a_failed_install_is_the_one_red_result_and_no_gate_runs(repo: git.Repo, tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    gates = GateSet((Gate("tests", f"touch {ran}"),), install="echo 'no such package'; exit 2")
    assert run(repo, repo.head.commit.hexsha, gates) == (
        GateResult("install", "tests", "echo 'no such package'; exit 2", False, 0.5, "no such package\n"),
    )
    assert not ran.exists()


def test_a_gate_past_its_timeout_is_red_and_says_so_and_the_next_still_runs(repo: git.Repo) -> None:
    gates = GateSet((Gate("slow", "echo started; sleep 30; echo done"), Gate("lint", "echo ok", "lint")))
    started = time.monotonic()
    slow, lint = run(repo, repo.head.commit.hexsha, gates, timeout=1)
    assert time.monotonic() - started < 20, "the whole process group was killed at the timeout"
    assert not slow.passed and slow.output == "started\n`slow` timed out after 1s"
    assert lint.passed and lint.output == "ok\n"


def test_the_guard_is_held_while_the_worktree_is_added_and_removed(repo: git.Repo) -> None:
    held: list[int] = []

    class Guard:
        """A lock's shape (lanes pass one): what the worktree list holds when it is taken."""

        def __enter__(self) -> None:
            held.append(len(str(repo.git.worktree("list")).splitlines()))

        def __exit__(self, *_: object) -> None:
            return None

    gates = GateSet((Gate("tests", "true"),))
    repo_gates.run_gates_at(
        repo, repo.head.commit.hexsha, gates, allowed_domains=(), sandboxed=False, guard=Guard()
    )
    assert held == [1, 2]  # entered before the worktree was added, and again before it was removed


def test_run_tests_at_still_shares_the_worktree(repo: git.Repo) -> None:
    sha = repo.head.commit.hexsha
    assert gitops.run_tests_at(repo, sha, "cat app_spec.txt", sandboxed=False) == (True, "spec\n")
    assert gitops.run_tests_at(repo, sha, "sleep 30", timeout=1, sandboxed=False) == (
        False,
        "test command timed out after 1s",
    )


# --- sandboxed ------------------------------------------------------------------------------------------


def test_a_sandboxed_gate_cannot_write_outside_its_worktree(
    repo: git.Repo, tmp_path: Path, runtime: str
) -> None:
    project = Path(repo.working_dir)
    beside = tmp_path / "beside.txt"
    beside.write_text("original\n")
    gates = GateSet(
        (
            Gate("evil", f"echo evil > {project}/app_spec.txt; echo evil > {beside}"),
            Gate("inside", "echo made > here.txt && cat here.txt"),
        ),
        install="touch installed",
    )
    evil, inside = repo_gates.run_gates_at(repo, repo.head.commit.hexsha, gates, allowed_domains=())
    assert not evil.passed and inside.passed and inside.output == "made\n"
    assert (project / "app_spec.txt").read_text() == "spec\n" and beside.read_text() == "original\n"
