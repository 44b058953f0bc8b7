"""The scheduler's git reads answer exactly as git does, without starting git where refs are files."""

from __future__ import annotations

import subprocess
from pathlib import Path

import git
import pytest

import gitops


def sh(project: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=project, capture_output=True, text=True, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def git_answers(project: Path) -> tuple[str | None, dict[str, str], dict[str, str | None]]:
    """git's own answers: the checked-out branch, every branch's commit, some refs' commits."""
    branch = sh(project, "symbolic-ref", "--quiet", "--short", "HEAD") or None
    out = sh(project, "for-each-ref", "--format=%(refname:short) %(objectname)", "refs/heads/")
    heads = dict(line.split(" ", 1) for line in out.splitlines() if line)
    names = ("main", "feature/F001", "feature/deep/F002", "gone", "empty", "garbled")
    refs = {name: sh(project, "rev-parse", "--verify", "--quiet", f"refs/heads/{name}") or None for name in names}
    return branch, heads, refs


def ours(repo: git.Repo) -> tuple[str | None, dict[str, str], dict[str, str | None]]:
    names = ("main", "feature/F001", "feature/deep/F002", "gone", "empty", "garbled")
    return gitops.current_branch(repo), gitops.branches(repo), {name: gitops.head(repo, name) for name in names}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    project = tmp_path / "p"
    project.mkdir()
    (project / "app_spec.txt").write_text("spec\n")
    gitops.open_repo(project)
    sh(project, "branch", "feature/F001")
    (project / "a.txt").write_text("a\n")
    sh(project, "checkout", "-q", "-b", "feature/deep/F002")
    sh(project, "add", "a.txt")
    sh(project, "commit", "-q", "-m", "a")
    sh(project, "checkout", "-q", "main")
    return project


def test_loose_packed_detached_and_broken_refs_read_as_git_reads_them(project: Path) -> None:
    repo = git.Repo(project)
    assert ours(repo) == git_answers(project)
    sh(project, "pack-refs", "--all")  # every ref now only in packed-refs
    assert not (project / ".git/refs/heads/main").exists()
    assert ours(repo) == git_answers(project)
    sh(project, "branch", "-f", "feature/F001", "feature/deep/F002")  # loose again, shadowing the packed one
    assert ours(repo) == git_answers(project)
    sh(project, "checkout", "-q", "--detach", "feature/F001")
    assert gitops.current_branch(repo) is None
    assert ours(repo) == git_answers(project)
    sh(project, "checkout", "-q", "main")
    (project / ".git/refs/heads/empty").write_text("")  # a ref file a killed git left empty
    (project / ".git/refs/heads/garbled").write_text("not a sha\n")
    answers = ours(repo)
    assert answers == git_answers(project)
    assert answers[2]["empty"] is None and answers[2]["garbled"] is None and "empty" not in answers[1]


def test_where_refs_are_not_files_git_is_asked(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = git.Repo(project)
    with repo.config_writer() as writer:  # ignored by git in a version-0 repository, read by us
        writer.set_value("extensions", "refstorage", "reftable")
    monkeypatch.delitem(gitops._REF_STORAGE, str(repo.git_dir), raising=False)
    asked = commands_of(monkeypatch)
    assert ours(repo) == git_answers(project)
    assert {"rev-parse", "symbolic-ref", "for-each-ref"} <= set(asked)


def test_where_refs_are_files_no_git_is_started(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = git.Repo(project)
    sh(project, "pack-refs", "--all")
    asked = commands_of(monkeypatch)
    assert ours(repo)[2]["feature/deep/F002"] is not None
    assert asked == []


def commands_of(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The git subcommands GitPython starts from now on."""
    asked: list[str] = []
    real = git.cmd.Git.execute

    def execute(self: git.cmd.Git, command: list[str], *args: object, **kwargs: object) -> object:
        asked.append(command[1])
        return real(self, command, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(git.cmd.Git, "execute", execute)
    return asked


def test_dirty_sees_staged_unstaged_and_untracked_but_not_ignored(project: Path) -> None:
    repo = git.Repo(project)
    assert not gitops.dirty(repo)
    (project / "progress.json").write_text("{}")  # the scheduler's own files are excluded
    (project / "__pycache__").mkdir()
    (project / "__pycache__/x.pyc").write_bytes(b"x")
    assert not gitops.dirty(repo)
    (project / "new.txt").write_text("n\n")
    assert gitops.dirty(repo)
    (project / "new.txt").unlink()
    (project / "app_spec.txt").write_text("changed\n")
    assert gitops.dirty(repo)
    sh(project, "add", "app_spec.txt")
    assert gitops.dirty(repo)


def test_the_stash_list_is_asked_again_only_when_the_stash_changed(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert gitops.stashes(project) == []
    repo = git.Repo(project)
    (project / "left.txt").write_text("left\n")
    assert gitops.stash_leftovers(repo, "first")
    first = gitops.stashes(project)
    assert len(first) == 1 and first[0].endswith("first")
    listed: list[Path] = []
    real = gitops.git.Repo

    def counting(path: Path) -> git.Repo:
        listed.append(path)
        return real(path)

    monkeypatch.setattr(gitops.git, "Repo", counting)
    assert gitops.stashes(project) == first and listed == []  # unchanged: from the last answer
    (project / "left.txt").write_text("again\n")
    assert gitops.stash_leftovers(real(project), "second")
    now = gitops.stashes(project)
    assert len(now) == 2 and now[0].endswith("second") and len(listed) == 1
    sh(project, "stash", "clear")
    assert gitops.stashes(project) == []


def test_checkout_sets_aside_leftovers_and_a_half_done_merge(project: Path) -> None:
    repo = git.Repo(project)
    (project / "main.txt").write_text("main side\n")
    sh(project, "add", "main.txt")
    sh(project, "commit", "-q", "-m", "main side")
    sh(project, "checkout", "-q", "feature/F001")
    (project / "main.txt").write_text("branch side\n")
    sh(project, "add", "main.txt")
    sh(project, "commit", "-q", "-m", "branch side")
    sh(project, "merge", "main")  # conflicts: a merge left half done
    assert (project / ".git/MERGE_HEAD").exists()
    gitops.checkout(repo, "feature/F001")  # already on it, but not clean
    assert not (project / ".git/MERGE_HEAD").exists() and not gitops.dirty(repo)
    (project / "stray.txt").write_text("s\n")
    gitops.checkout(repo, "main")
    assert gitops.current_branch(repo) == "main" and not (project / "stray.txt").exists()
    assert len(gitops.stashes(project)) == 1
