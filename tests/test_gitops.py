"""The scheduler's git reads answer exactly as git does, without starting git where refs are files."""

from __future__ import annotations

import subprocess
from pathlib import Path

import git
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session_scheduler.guard import safe_git
from session_scheduler.repo import gitops
from session_scheduler.store.records import Records


def sh(project: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=project, capture_output=True, text=True, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else ""


NAMES = (
    "main",
    "feature/F001",
    "feature/deep/F002",
    "gone",
    "empty",
    "garbled",
    "alias",
    "dangling",
    "hidden",
)


def git_answers(project: Path) -> tuple[str | None, dict[str, str], dict[str, str | None]]:
    """git's own answers: the checked-out branch, every branch's commit, some refs' commits."""
    branch = sh(project, "symbolic-ref", "--quiet", "--short", "HEAD") or None
    out = sh(project, "for-each-ref", "--format=%(refname:short) %(objectname)", "refs/heads/")
    heads = dict(line.split(" ", 1) for line in out.splitlines() if line)
    names = NAMES
    refs = {
        name: sh(project, "rev-parse", "--verify", "--quiet", f"refs/heads/{name}") or None for name in names
    }
    return branch, heads, refs


def ours(repo: git.Repo) -> tuple[str | None, dict[str, str], dict[str, str | None]]:
    return (
        gitops.current_branch(repo),
        gitops.branches(repo),
        {name: gitops.head(repo, name) for name in NAMES},
    )


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


def test_symbolic_tagged_hidden_and_unsafe_refs_read_as_git_reads_them(project: Path) -> None:
    from session_scheduler.repo import refs

    repo = git.Repo(project)
    sh(project, "tag", "-a", "v1", "-m", "annotated")  # packed with a peeled ^ line
    sh(project, "branch", "hidden")
    sh(project, "pack-refs", "--all")
    assert "^" in (project / ".git/packed-refs").read_text()
    (project / ".git/refs/heads/hidden").write_text("garbage\n")  # a broken loose ref hides the packed one
    (project / ".git/refs/heads/alias").write_text("ref: refs/heads/feature/deep/F002\n")
    (project / ".git/refs/heads/dangling").write_text("ref: refs/heads/nowhere\n")
    answers = ours(repo)
    assert answers == git_answers(project)
    assert answers[2]["alias"] == answers[2]["feature/deep/F002"] and answers[2]["hidden"] is None
    assert refs.sha(project / ".git", "refs/tags/v1") == sh(project, "rev-parse", "refs/tags/v1")
    for unsafe in (
        "refs/heads/../../config",
        "refs/heads/x.lock",
        "refs/heads/.hidden",
        "HEAD",
        "refs/heads/a b",
        "refs/heads/",
    ):
        assert refs.sha(project / ".git", unsafe) is None, unsafe
    sh(project, "branch", "-f", "-q", "feature/F001", "feature/deep/F002")
    sh(project, "pack-refs", "--all")  # packed-refs rewritten: read again
    assert ours(repo) == git_answers(project)


def test_where_refs_are_not_files_git_is_asked(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = git.Repo(project)
    with repo.config_writer() as writer:  # ignored by git in a version-0 repository, read by us
        writer.set_value("extensions", "refstorage", "reftable")
    # a plain git.Repo keeps no memo: its ref storage is read from the config at each call
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


def test_the_stash_list_is_asked_again_only_when_the_stash_changed(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    memo = Records(project).stashes  # the project's
    assert gitops.stashes(project, memo) == []
    repo = git.Repo(project)
    (project / "left.txt").write_text("left\n")
    assert gitops.stash_leftovers(repo, "first")
    first = gitops.stashes(project, memo)
    assert len(first) == 1 and first[0].endswith("first")
    listed: list[Path] = []
    real = gitops.safe_git.open

    def counting(path: Path) -> git.Repo:
        listed.append(path)
        return real(path)

    monkeypatch.setattr(gitops.safe_git, "open", counting)
    assert gitops.stashes(project, memo) == first and listed == []  # unchanged: from the last answer
    (project / "left.txt").write_text("again\n")
    assert gitops.stash_leftovers(real(project), "second")
    now = gitops.stashes(project, memo)
    assert len(now) == 2 and now[0].endswith("second") and len(listed) == 1
    sh(project, "stash", "clear")
    assert gitops.stashes(project, memo) == []


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


def test_the_saved_heads_are_what_differs_from_a_kept_packed_refs(project: Path, tmp_path: Path) -> None:
    from session_scheduler.repo import refs
    from session_scheduler.run.verify import PreSession, heads_of
    from session_scheduler.store.progress import Handoff

    repo = git.Repo(project)
    sh(project, "branch", "packed-only")
    sh(project, "pack-refs", "--all")
    copies = tmp_path / "copies"
    copies.mkdir()
    refs.keep_packed(project / ".git", copies)
    assert (copies / "packed-refs").stat().st_ino == (project / ".git/packed-refs").stat().st_ino  # a link
    refs.keep_packed(project / ".git", copies)  # the same version again: rename(2) does nothing
    assert sorted(p.name for p in copies.iterdir()) == ["packed-refs"]
    sh(project, "branch", "-D", "packed-only")  # git writes a new packed-refs: the kept one stays as it was
    sh(project, "branch", "-f", "feature/F001", "feature/deep/F002")  # moved: loose again
    sh(project, "branch", "new")
    heads = gitops.branches(repo)
    pre = PreSession("m", None, Handoff(None, None, None), copies, heads)
    record = pre.heads_record
    assert record == {
        "heads": {"feature/F001": heads["feature/F001"], "new": heads["new"]},
        "heads_gone": ["packed-only"],
    }
    assert heads_of(record, copies) == heads
    assert heads_of({"heads": {"main": "x"}}, copies) == {
        "main": "x"
    }  # a record of an older version: every branch
    (copies / "packed-refs").unlink()
    refs.keep_packed(tmp_path / "no-repo", copies)  # a repository without packed-refs keeps none
    assert not (copies / "packed-refs").exists()
    assert PreSession("m", None, Handoff(None, None, None), copies, heads).heads_record == {
        "heads": heads,
        "heads_gone": [],
    }


def test_many_loose_branches_are_packed_and_read_the_same(project: Path) -> None:
    repo = git.Repo(project)
    for n in range(gitops.LOOSE_BRANCHES_KEPT - 3):  # the fixture has three
        sh(project, "branch", f"feature/F{n:04d}")
    assert not gitops.pack_branches_if_many(repo)
    sh(project, "branch", "one-more")
    before = gitops.branches(repo)
    assert len(before) == gitops.LOOSE_BRANCHES_KEPT + 1
    assert gitops.pack_branches_if_many(repo)
    assert not (project / ".git/refs/heads/one-more").exists()
    assert gitops.branches(repo) == before == git_answers(project)[1]


SHAS = tuple(c * 40 for c in "123")


@settings(max_examples=200, deadline=None)
@given(
    before=st.dictionaries(st.sampled_from("abcdefgh"), st.sampled_from(SHAS), max_size=8),
    after=st.dictionaries(st.sampled_from("abcdefgh"), st.sampled_from(SHAS), max_size=8),
    copies=st.booleans(),
)
def test_the_changed_branches_are_exactly_those_that_differ(
    before: dict[str, str], after: dict[str, str], copies: bool
) -> None:
    from session_scheduler.repo import refs

    if copies:  # equal commits as other string objects, as two reads of a loose ref give
        after = {b: "".join(list(s)) for b, s in after.items()}
        assert all(after[b] is not s for b, s in before.items() if b in after)
    assert refs.changed(before, after) == {
        b for b in before.keys() | after.keys() if before.get(b) != after.get(b)
    }


def test_ref_names_follow_git_s_rules() -> None:
    from session_scheduler.repo import refs

    for good in (
        "refs/heads/main",
        "refs/heads/feature/F001",
        "refs/heads/v1.2",
        "refs/tags/x-y_z",
        "refs/stash",
    ):
        assert refs.valid(good), good
    bad = (
        "heads/main",
        "refs/heads/a.",
        "refs/heads/a/",
        "refs/heads/",
        "refs/heads/.hidden",
        "refs/heads/x/.y",
        "refs/heads/a.lock",
        "refs/heads/a.lock/b",
        "refs/heads/a..b",
        "refs/heads/a b",
        "refs/heads/a~1",
        "refs/heads/a^",
        "refs/heads/a:b",
        "refs/heads/a?",
        "refs/heads/a*",
        "refs/heads/a[b",
        "refs/heads/a\\b",
        "refs/heads/a@{1}",
        "refs//heads",
        "refs/heads/a\x7f",
    )
    for name in bad:
        assert not refs.valid(name), name


def test_unreadable_bytes_and_garbled_packed_lines_are_no_refs(tmp_path: Path) -> None:
    from session_scheduler.repo import refs

    git_dir = tmp_path / "g"
    (git_dir / "refs/heads").mkdir(parents=True)
    (git_dir / "refs/heads/bytes").write_bytes(b"\xff\xfe not a sha\n")
    sha = "a" * 40
    (git_dir / "packed-refs").write_bytes(
        b"# pack-refs with: peeled fully-peeled sorted \n"
        + f"{sha} refs/heads/good\n".encode()
        + b"not-a-sha refs/heads/garbled\n\xff\xfe refs/heads/binary\n"
        + f"{sha}\n^{sha}\n".encode()
    )
    assert refs.sha(git_dir, "refs/heads/bytes") is None
    assert refs.heads(git_dir) == {"good": sha}
    assert refs.packed(git_dir) == {"refs/heads/good": sha}


def test_packed_refs_are_parsed_once_per_version_even_through_a_kept_link(tmp_path: Path) -> None:
    from session_scheduler.repo import refs

    git_dir, kept = tmp_path / "g", tmp_path / "kept"
    git_dir.mkdir()
    kept.mkdir()
    memo: refs.Packed = {}  # the repository's (`safe_git.GitMemo.packed`)
    (git_dir / "packed-refs").write_text(f"{'b' * 40} refs/heads/x\n")
    first = refs.packed(git_dir, memo)
    assert refs.packed(git_dir, memo) is first  # not parsed again
    refs.keep_packed(git_dir, kept)  # a hard link changes the file's change time, not its version
    assert refs.packed(git_dir, memo) is first and refs.packed(kept, memo) is first
    (git_dir / "packed-refs").write_text(f"{'c' * 40} refs/heads/x\n")  # git writes a new file
    assert refs.packed(git_dir, memo) == {"refs/heads/x": "c" * 40}


def test_packed_refs_are_copied_where_they_cannot_be_linked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from session_scheduler.repo import refs

    git_dir, kept = tmp_path / "g", tmp_path / "kept"
    git_dir.mkdir()
    kept.mkdir()
    (git_dir / "packed-refs").write_text(f"{'d' * 40} refs/heads/y\n")

    def no_links(*args: object) -> None:
        raise OSError("another file system")

    monkeypatch.setattr(refs.os, "link", no_links)
    refs.keep_packed(git_dir, kept)
    assert (kept / "packed-refs").read_text() == (git_dir / "packed-refs").read_text()
    assert (kept / "packed-refs").stat().st_ino != (git_dir / "packed-refs").stat().st_ino
    assert sorted(p.name for p in kept.iterdir()) == ["packed-refs"]


def test_main_gets_a_ref_file_of_its_own_and_packed_refs_exists(tmp_path: Path) -> None:
    """The sandbox keeps `main`'s ref file and packed-refs unwritable; a denied path that does not
    exist becomes unreadable there, so both must exist before a session."""
    project = tmp_path / "app"
    project.mkdir()
    (project / "app_spec.txt").write_text("spec\n")
    repo = gitops.open_repo(project)
    git_dir = Path(repo.common_dir)
    sha = gitops.head(repo, gitops.MAIN)
    repo.git.pack_refs("--all")
    assert not (git_dir / "refs/heads/main").exists()
    assert gitops.keep_loose(repo, gitops.MAIN)
    assert (git_dir / "refs/heads/main").read_text() == f"{sha}\n" and (git_dir / "packed-refs").exists()
    assert not gitops.keep_loose(repo, gitops.MAIN), "already loose: nothing written"
    (git_dir / "packed-refs").unlink()
    assert not gitops.keep_loose(repo, gitops.MAIN) and (git_dir / "packed-refs").read_text() == ""
    assert repo.git.rev_parse("main") == sha and not gitops.keep_loose(repo, "no-such-branch")


def test_opening_a_repository_writes_nothing_into_its_config_and_commits_as_the_person(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduler's commits are by the repository's identity, else the person's (their global
    config), else the default; none is written into the repository's config (the person's own
    commits there stay theirs), and a config.lock of someone else's is left alone."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    project = tmp_path / "p"
    project.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(project)], check=True)
    config = project / ".git" / "config"
    before = config.read_bytes()
    (project / ".git" / "config.lock").write_text("[someone else's\n")
    (project / "app_spec.txt").write_text("spec\n")
    gitops.open_repo(project)
    assert config.read_bytes() == before and (project / ".git" / "config.lock").exists()
    assert (
        sh(project, "log", "-1", "--format=%an <%ae>").strip()
        == "autonomous-agent <autonomous-agent@localhost>"
    )
    (home / ".gitconfig").write_text("[user]\n\tname = Person\n\temail = person@example.org\n")
    assert safe_git.identity(safe_git.open(project)) == ("Person", "person@example.org")
    (project / ".git" / "config.lock").unlink()
    sh(project, "config", "user.name", "Project")
    assert safe_git.identity(safe_git.open(project)) == ("Project", "person@example.org")
    (home / ".gitconfig").write_text("[user\n broken")
    sh(project, "config", "--unset", "user.name")
    assert safe_git.identity(safe_git.open(project)) == safe_git.DEFAULT_IDENTITY


def test_the_first_run_on_main_commits_the_spec_alone_and_sets_nothing_aside(tmp_path: Path) -> None:
    """An existing repository on `main` with the person's untracked and staged files: the spec is
    committed alone, nothing is stashed, their files stay as they were."""
    project = tmp_path / "app"
    project.mkdir()
    sh(project, "init", "-q", "-b", "main")
    sh(project, "-c", "user.name=p", "-c", "user.email=p@x", "commit", "-q", "--allow-empty", "-m", "start")
    (project / "app_spec.txt").write_text("An app.\n")
    (project / ".env").write_text("KEY=1\n")
    (project / "staged.txt").write_text("staged\n")
    sh(project, "add", "staged.txt")
    gitops.open_repo(project)
    assert sh(project, "stash", "list") == "" and (project / ".env").read_text() == "KEY=1\n"
    assert sh(project, "show", "--name-only", "--format=", "main").split() == ["app_spec.txt"]
    assert "A  staged.txt" in sh(project, "status", "--porcelain").splitlines()


def test_the_exclude_file_gets_the_scheduler_s_heading_once(project: Path) -> None:
    repo = safe_git.open(project)
    gitops.ensure_exclude(repo, ("a.json",))
    gitops.ensure_exclude(repo, ("a.json", "/b.txt"))
    gitops.ensure_exclude(repo, ("a.json", "/b.txt"))
    lines = (project / ".git" / "info" / "exclude").read_text().splitlines()
    assert lines.count(gitops.EXCLUDE_HEADING) == 1 and lines.count("a.json") == lines.count("/b.txt") == 1
