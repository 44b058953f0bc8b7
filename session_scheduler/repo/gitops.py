"""Every git operation the scheduler performs itself (agents run git on their own)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git

from session_scheduler.core.config import DEFAULT_ALLOWED_DOMAINS
from session_scheduler.core.errors import GitError
from session_scheduler.core.layout import CLAUDE_DIR, NEVER_IN_GIT, SPEC_NAME, ignore_pattern
from session_scheduler.guard import command_sandbox, safe_git
from session_scheduler.repo import refs
from session_scheduler.store import crashpoints, filestat

MAIN = "main"
SCHEDULER_PATHS = tuple(ignore_pattern(name) for name in NEVER_IN_GIT)
"""Hand-off and scheduler files as ignore patterns: never in git, whatever a branch's .gitignore says."""
SANDBOX_PLACEHOLDERS = (
    ".bashrc",
    ".bash_profile",
    ".gitconfig",
    ".gitmodules",
    ".mcp.json",
    ".idea",
    ".zshrc",
    ".zprofile",
    ".profile",
    ".ripgreprc",
    ".vscode",
)
"""Dotfiles Claude Code's sandbox mounts placeholders over where the project has none (character
devices: `git add -A` fails on them, "can only add regular files"); the CLI's list, as bundled."""
PROJECT_EXCLUDED = tuple(path for path in SCHEDULER_PATHS if path != ignore_pattern(CLAUDE_DIR))
"""What the person's own `.git/info/exclude` gets: the scheduler's records and state (`.claude` is
theirs there: no session runs in their folder)."""
EXCLUDED = (*SCHEDULER_PATHS, *SANDBOX_PLACEHOLDERS)
"""What `.git/info/exclude` holds: enough, in a repository whose `.gitignore` the scheduler never
changes (an existing one), for an agent's `git add -A` to stage nothing of the scheduler's."""
IGNORED = (
    "# scheduler hand-off and state files: kept out of git so checkouts never change them",
    *SCHEDULER_PATHS,
    "__pycache__/",
    "*.pyc",
    "node_modules/",
    ".venv/",
    ".pytest_cache/",
    ".mypy_cache/",
    ".ruff_cache/",
    ".coverage",
    "*.egg-info/",
    "# dotfiles Claude Code's sandbox mounts placeholders over (they break `git add`)",
    *SANDBOX_PLACEHOLDERS,
)
"""The `.gitignore` of a repository the scheduler creates."""


TRACKED = (".gitignore", SPEC_NAME)


SETUP_COMMIT = "chore: app spec and .gitignore for the scheduler's files"
SPEC_COMMIT = "chore: app spec for the scheduler"
SPEC_VERSION_COMMIT = "chore: a new version of the app spec"
"""The commit of a spec that changed since the last run (a project that grows)."""
"""The setup commit in an existing repository: the spec alone (its .gitignore is the person's)."""

UNFINISHED = (
    ("MERGE_HEAD", "a merge", "finish it (`git commit`) or abort it (`git merge --abort`)"),
    ("rebase-merge", "a rebase", "finish it (`git rebase --continue`) or abort it (`git rebase --abort`)"),
    (
        "rebase-apply",
        "a rebase or `git am`",
        "finish it (`--continue`) or abort it (`git rebase --abort` / `git am --abort`)",
    ),
    (
        "CHERRY_PICK_HEAD",
        "a cherry-pick",
        "finish it (`git cherry-pick --continue`) or abort it (`git cherry-pick --abort`)",
    ),
    ("REVERT_HEAD", "a revert", "finish it (`git revert --continue`) or abort it (`git revert --abort`)"),
)
"""Operations git leaves half done: (marker in the git folder, what it is, how a person ends it)."""


def failed(project: Path, exc: git.GitCommandError) -> GitError:
    """A git command the scheduler ran that failed, as one line that says what to do."""
    command = " ".join(str(part) for part in exc.command[:4])
    said = str(exc.stderr).strip()  # GitPython's wrapping: stderr: '...'
    said = said.removeprefix("stderr: '").removesuffix("'") if said.startswith("stderr: '") else said
    said = " ".join(said.split())[-300:] or f"exit code {exc.status}"
    return GitError(
        f"git failed in {project} ({command}): {said}; "
        "fix the repository (see `git status`) and run the same command again"
    )


def unfinished(project: Path) -> tuple[str, str] | None:
    """The operation the repository is in the middle of, and how to end it; None when there is none
    (read from the git folder, changing nothing)."""
    git_dir = project / ".git"
    for marker, what, fix in UNFINISHED:
        if (git_dir / marker).exists():
            return what, fix
    return None


def open_repo(project: Path, trunk: str = MAIN) -> git.Repo:
    """Open the project's repository, creating it (branch `main`, identity, .gitignore) if needed;
    every git command the scheduler runs in it is hardened (safe_git.py). The work tree is left as
    it is (nothing checked out, nothing set aside) unless the spec must first be committed on
    `main`; each session checks out what it starts on itself. `trunk`: the branch work lands on;
    another than `main` (a review branch) is made from the person's branch and gets the spec by
    a commit of its own, the person's work tree, index and branch untouched."""
    try:
        repo = safe_git.open(project) if (project / ".git").exists() else safe_git.init(project, MAIN)
        ensure_exclude(
            repo, PROJECT_EXCLUDED
        )  # first: a stash below must leave the scheduler's files where they are
        spec = project / SPEC_NAME
        spec_text = spec.read_bytes() if spec.is_file() else None
        if trunk != MAIN:
            ensure_exclude(
                repo, (f"/{SPEC_NAME}",)
            )  # the scheduler's copy, committed on the review branch alone
            _ensure_gitignore(repo, project, commit_spec=False)  # a new repository's setup commit
            if head(repo, trunk) is None:
                repo.git.branch(trunk, "HEAD")
            if spec_text is not None:
                commit_spec_on(repo, trunk, spec_text)
            return repo
        if repo.head.is_valid():
            if head(repo, MAIN) is None:  # an existing repository whose main line has another name
                repo.git.branch(MAIN, "HEAD")
            if _spec_untracked(repo, project) and current_branch(repo) != MAIN:  # the first run in an
                checkout(repo, MAIN)  # existing repository on another branch: what is in the way set aside
        if spec_text is not None and not spec.exists():  # set aside with a user's uncommitted work
            spec.write_bytes(spec_text)
        _ensure_gitignore(repo, project)
        if _spec_edited(repo):  # a newer version (store/specs.py): on main, where every clone reads it
            repo.git.add("--", SPEC_NAME)
            repo.git.commit("-m", SPEC_VERSION_COMMIT, "--no-verify", "--", SPEC_NAME)
        return repo
    except git.GitCommandError as exc:
        raise GitError(f"git failed in {project}: {exc.stderr.strip() or exc}") from None


def commit_spec_on(repo: git.Repo, branch: str, spec: bytes) -> None:
    """`branch` gets the spec as `app_spec.txt` in a commit of its own, made without a work tree
    or the index (the person's are left as they are), unless its tree holds that spec already."""
    tip = head(repo, branch)
    assert tip is not None
    blob = with_input(repo, spec, "hash-object", "-w", "--no-filters", "--stdin")
    listing = str(repo.git.ls_tree(tip)).splitlines()
    entry = f"100644 blob {blob}\t{SPEC_NAME}"
    if entry in listing:
        return
    kept = [line for line in listing if line.split("\t", 1)[-1] != SPEC_NAME]
    tree = with_input(repo, ("\n".join([*kept, entry]) + "\n").encode(), "mktree")
    commit = str(repo.git.commit_tree(tree, "-p", tip, "-m", SPEC_COMMIT)).strip()
    repo.git.update_ref(f"refs/heads/{branch}", commit, tip)


def with_input(repo: git.Repo, data: bytes, *command: str) -> str:
    """A git command's output, `data` on its input."""
    with tempfile.TemporaryFile() as stream:
        stream.write(data)
        stream.seek(0)
        return str(repo.git.execute(["git", *command], istream=stream)).strip()


def _spec_edited(repo: git.Repo) -> bool:
    """`main` is checked out and the spec in its work tree differs from the one committed there."""
    if current_branch(repo) != MAIN or not repo.git.ls_files("--", SPEC_NAME):
        return False
    try:
        repo.git.diff("--quiet", "HEAD", "--", SPEC_NAME)
    except git.GitCommandError:
        return True
    return False


def _spec_untracked(repo: git.Repo, project: Path) -> bool:
    return (project / SPEC_NAME).exists() and not repo.git.ls_files(SPEC_NAME)


def _ensure_gitignore(repo: git.Repo, project: Path, *, commit_spec: bool = True) -> None:
    """Keep hand-off and scheduler files out of git.

    `.git/info/exclude` holds the scheduler's paths on every start (no commit can change
    it). A repository the scheduler creates gets them in its `.gitignore` too, together with the
    spec, in one commit on `main`; an existing repository's `.gitignore` is the person's and is
    left alone: only the spec is committed. Either happens the first time only, so a resumed run
    never moves `main` under a session.
    """
    ensure_exclude(repo, PROJECT_EXCLUDED)
    if repo.head.is_valid():
        if commit_spec and _spec_untracked(
            repo, project
        ):  # the spec alone: what the person staged stays staged
            repo.git.add(SPEC_NAME)
            repo.git.commit("-m", SPEC_COMMIT, "--no-verify", "--", SPEC_NAME)
        return
    path = project / ".gitignore"
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    missing = [line for line in IGNORED if line not in lines]
    if missing:
        path.write_text("\n".join([*lines, *missing]) + "\n", encoding="utf-8")
    repo.git.add(*[name for name in TRACKED if (project / name).exists()])
    repo.git.commit("-m", SETUP_COMMIT, "--no-verify")


def ensure_exclude(repo: git.Repo, names: tuple[str, ...] = EXCLUDED) -> None:
    """The scheduler's paths in `.git/info/exclude`, which no commit can change: in a lane's
    clone, `names` with the dotfiles a session's sandbox mounts placeholders over; in the
    person's project, the scheduler's own files alone (`SCHEDULER_PATHS`: their `.vscode`,
    `.claude` or `.mcp.json` still show in their `git status`)."""
    exclude = Path(repo.git_dir) / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    known = exclude.read_text(encoding="utf-8").splitlines() if exclude.exists() else []
    if any(line not in known for line in names):
        extra = [line for line in names if line not in known]
        head = [] if EXCLUDE_HEADING in known else [EXCLUDE_HEADING]  # once, however often it adds
        exclude.write_text("\n".join([*known, *head, *extra]) + "\n", encoding="utf-8")


EXCLUDE_HEADING = "# the scheduler's files"


def commits_after_setup(repo: git.Repo, trunk: str = MAIN) -> int:
    """How many commits `trunk` (where work lands) has after the scheduler's own first one (0 when it has none)."""
    subjects = str(repo.git.log("--format=%s", trunk)).splitlines() if head(repo, trunk) else []
    for setup in (SETUP_COMMIT, SPEC_COMMIT):
        if setup in subjects:
            return subjects.index(setup)
    return 0


def head(repo: git.Repo, branch: str) -> str | None:
    """The commit a branch points at, or None when it does not exist."""
    return ref_sha(repo, f"refs/heads/{branch}")


def ref_sha(repo: git.Repo, ref: str) -> str | None:
    """The commit a full ref name points at, or None when it does not exist or is unreadable.

    Read from the ref files (loose, then packed-refs) without starting git, as `git rev-parse
    --verify` would answer; git itself answers where refs are not files (reftable)."""
    if not _refs_are_files(repo):
        try:
            return str(repo.git.rev_parse("--verify", "--quiet", ref))
        except git.GitCommandError:
            return None
    return refs.sha(Path(repo.common_dir), ref, memo(repo).packed)


def memo(repo: git.Repo) -> safe_git.GitMemo:
    """What the scheduler remembers of this repository (an object of its own, not of the process)."""
    kept = getattr(repo, "memo", None)
    return kept if isinstance(kept, safe_git.GitMemo) else safe_git.GitMemo()


def _refs_are_files(repo: git.Repo) -> bool:
    """Whether the repository's refs are loose files and packed-refs (git's default)."""
    kept = memo(repo)
    if kept.refs_are_files is None:
        storage = repo.config_reader("repository").get_value("extensions", "refstorage", "files")
        kept.refs_are_files = str(storage).lower() == "files"
    return kept.refs_are_files


def is_ancestor(repo: git.Repo, ancestor: str, descendant: str) -> bool:
    try:
        repo.git.merge_base("--is-ancestor", ancestor, descendant)
        return True
    except git.GitCommandError:
        return False


def current_branch(repo: git.Repo) -> str | None:
    """The checked-out branch, None when HEAD is detached (read from HEAD, as `git symbolic-ref
    --short HEAD` answers)."""
    if not _refs_are_files(repo):
        try:
            return str(repo.git.symbolic_ref("--quiet", "--short", "HEAD"))
        except git.GitCommandError:
            return None
    try:
        target = Path(repo.git_dir, "HEAD").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if not target.startswith("ref: "):
        return None
    return target.removeprefix("ref: ").strip().removeprefix("refs/heads/")


def dirty(repo: git.Repo) -> bool:
    """Uncommitted work: staged or unstaged changes, or untracked files that are not ignored
    (one `git status`, where `Repo.is_dirty(untracked_files=True)` starts three processes). A nested
    repository's own changes are not asked about: that would run git inside it, with its config."""
    return bool(repo.git.status("--porcelain", "--untracked-files=normal", "--ignore-submodules=all").strip())


def set_branch(repo: git.Repo, branch: str, sha: str) -> None:
    """Move `branch` back to `sha` (the undo of a forbidden commit), keeping stray work stashed."""
    if current_branch(repo) == branch:
        stash_leftovers(repo, f"scheduler: work left when {branch} was reset")
        repo.git.reset("--hard", sha)
    else:
        repo.git.branch("-f", branch, sha)


def move_main(repo: git.Repo, new: str, old: str, branch: str = MAIN) -> None:
    """Move the project's `branch` (`main`, or where work lands) from `old` to `new` (only from
    `old`: a compare-and-swap), its work tree following when it has that branch checked out
    (`follow_main`): nothing of the person's is stashed or overwritten."""
    repo.git.update_ref(f"refs/heads/{branch}", new, old)
    follow_main(repo, old, new, branch)


def follow_main(repo: git.Repo, old: str, new: str, branch: str = MAIN) -> None:
    """The project's work tree, when it has `branch` checked out, follows it from `old` to `new`
    (a two-tree merge of the index and the files: what the person changed there and their
    untracked files are kept; a change in a file the move touches makes git refuse, leaving their
    files as they are, and `git status` shows the difference)."""
    if repo.bare or current_branch(repo) != branch:
        return
    with contextlib.suppress(git.GitCommandError):
        repo.git.read_tree("-m", "-u", old, new)


def keep_ref(repo: git.Repo, name: str, sha: str) -> None:
    """Keep a commit reachable under refs/scheduler/<name> (undone or rejected work)."""
    repo.git.update_ref(f"refs/scheduler/{name}", sha)


def delete_branch(repo: git.Repo, branch: str) -> None:
    if head(repo, branch) is None:
        return
    if current_branch(repo) == branch:
        checkout(repo, MAIN)
    repo.git.branch("-D", branch)


def create_branch(repo: git.Repo, branch: str, at: str) -> None:
    if head(repo, branch) is None:
        repo.git.branch(branch, at)


def abort_unfinished(repo: git.Repo) -> bool:
    """Abort a merge, rebase or cherry-pick an agent left half done; whether there was one."""
    git_dir, aborted = Path(repo.git_dir), False
    for marker, command in (
        ("MERGE_HEAD", ("merge", "--abort")),
        ("rebase-merge", ("rebase", "--abort")),
        ("rebase-apply", ("rebase", "--abort")),
        ("CHERRY_PICK_HEAD", ("cherry-pick", "--abort")),
    ):
        if (git_dir / marker).exists():
            repo.git.execute(["git", *command])
            aborted = True
    return aborted


def stash_leftovers(repo: git.Repo, message: str, *, is_dirty: bool | None = None) -> bool:
    """Stash uncommitted work (untracked files too) so nothing an agent left is lost.
    `is_dirty`: what `dirty` answered just before, when the caller asked it."""
    if abort_unfinished(repo) or is_dirty is None:
        is_dirty = dirty(repo)
    if not is_dirty:
        return False
    # The scheduler's own files are in .git/info/exclude, so --include-untracked leaves them
    # where they are (naming them as pathspecs would make git refuse ignored paths). A spec not
    # committed yet (an existing repository's first run) stays too: the first session reads it.
    spec_untracked = Path(str(repo.working_tree_dir), "app_spec.txt").exists() and not repo.git.ls_files(
        "app_spec.txt"
    )
    keep = ["--", ".", ":(exclude)app_spec.txt"] if spec_untracked else []
    repo.git.stash("push", "--include-untracked", "-m", message, *keep)
    crashpoints.reached("stashed")
    return True


def stashes(project: Path, memo: dict[str, Any] | None = None) -> list[str]:
    """`git stash list`, newest first (empty without a repository); git is asked only when the
    stash's reflog changed since the last answer kept in `memo` (the project's `Records.stashes`)."""
    memo = {} if memo is None else memo
    if not (project / ".git").exists():
        return []
    key = filestat.signature(project / ".git" / "logs" / "refs" / "stash")
    if key is None and refs.sha(project / ".git", "refs/stash") is None:
        return []
    known = memo.get(str(project))
    if key is not None and known is not None and known[0] == key:
        return list(known[1])
    entries = [line for line in safe_git.open(project).git.stash("list").splitlines() if line.strip()]
    memo[str(project)] = (key, tuple(entries))
    return entries


def clear_stale_locks(repo: git.Repo) -> list[str]:
    """Remove the lock files a git process killed with its session left (the index's, HEAD's,
    packed-refs' and any ref's), which would make the next git command that writes them fail;
    their paths under .git. Only called between sessions, under the project lock, when no agent
    can be running git in `repo` (a lane's clone)."""
    git_dir = Path(repo.git_dir)
    found = [git_dir / name for name in ("index.lock", "HEAD.lock", "packed-refs.lock")]
    found += (Path(folder, name) for folder, _, names in os.walk(git_dir / "refs") for name in names)
    removed = []
    for lock in found:
        if lock.name.endswith(".lock") and (lock.is_symlink() or lock.is_file()):
            lock.unlink()
            removed.append(str(lock.relative_to(git_dir)))
    return removed


def branches(repo: git.Repo) -> dict[str, str]:
    """Every local branch and the commit it points at (from the ref files where refs are files)."""
    if not _refs_are_files(repo):
        out = repo.git.for_each_ref("--format=%(refname:short) %(objectname)", "refs/heads/")
        return dict(line.split(" ", 1) for line in out.splitlines() if line.strip())
    return refs.heads(Path(repo.common_dir), memo(repo).packed)


LOOSE_BRANCHES_KEPT = 64
"""Loose branch files beyond which they are packed into `.git/packed-refs` (as `git gc` does):
the scheduler reads every branch twice a session, and keeps one branch per feature."""


def pack_branches_if_many(repo: git.Repo) -> bool:
    """`git pack-refs --all` when the loose branch files are more than LOOSE_BRANCHES_KEPT."""
    if not _refs_are_files(repo) or refs.loose_heads(Path(repo.common_dir)) <= LOOSE_BRANCHES_KEPT:
        return False
    repo.git.pack_refs("--all")
    return True


def keep_loose(repo: git.Repo, branch: str) -> bool:
    """Give `branch` its own ref file when it lives only in `packed-refs`, and make sure
    `packed-refs` exists (empty is valid), so that the sandbox can keep both files unwritable
    (layout.MAIN_REF_PATHS: a path it denies that does not exist would become unreadable);
    whether it wrote the ref."""
    if not _refs_are_files(repo):
        return False
    packed = Path(repo.common_dir, "packed-refs")
    if not packed.exists():
        packed.touch()
    loose = Path(repo.common_dir, "refs", "heads", branch)
    sha = head(repo, branch)
    if sha is None or loose.exists():
        return False
    loose.parent.mkdir(parents=True, exist_ok=True)
    tmp = loose.with_name(f".{loose.name}.scheduler-tmp")
    tmp.write_text(sha + "\n", encoding="ascii")
    os.replace(tmp, loose)
    return True


def branch_view(project: Path) -> tuple[str | None, frozenset[str]]:
    """The checked-out branch (None when detached) and the local branches, changing nothing."""
    if not (project / ".git").exists():
        return None, frozenset()
    repo = safe_git.open(project)
    return current_branch(repo), frozenset(branches(repo))


def changed_paths(repo: git.Repo, base: str, tip: str) -> list[str]:
    """Files that differ between two commits (a rename: both names)."""
    return [change.path for change in changes(repo, base, tip)]


TREE_DIFF = ("--ignore-submodules=none",)
"""A diff of two commits names gitlinks (the scheduler's `diff.ignoreSubmodules=all` is for the
work tree: git looks into no nested repository to compare two commits)."""


GITLINK = "160000"
"""The mode of a gitlink: a commit of another repository recorded as a directory (a submodule)."""


@dataclass(frozen=True)
class Change:
    """One path that differs between two commits, as `git diff --raw` shows it."""

    old_mode: str
    new_mode: str
    """"000000" when the path is gone at the later commit."""
    blob: str
    """The object at the later commit."""
    path: str


def changes(repo: git.Repo, base: str, tip: str) -> list[Change]:
    """Every path that differs between two commits (a rename as a removal and an addition).
    Asked once per pair of commits (`GitMemo.diffs`): two commits never change."""
    if not (is_object_name(base) and is_object_name(tip)):  # a branch name: it can move
        return _changes(repo, base, tip)
    found: tuple[Change, ...] = safe_git.remembered(
        memo(repo).diffs, (base, tip), lambda: tuple(_changes(repo, base, tip))
    )
    return list(found)


def is_object_name(name: str) -> bool:
    """Whether `name` is a full object name (a commit's, never a branch's that could move)."""
    return len(name) in (40, 64) and all(c in "0123456789abcdef" for c in name)


def _changes(repo: git.Repo, base: str, tip: str) -> list[Change]:
    raw = str(repo.git.diff("--raw", "-z", "--no-renames", "--no-abbrev", *TREE_DIFF, base, tip))
    fields = raw.split("\0")
    found = []
    for header, path in zip(fields[0::2], fields[1::2], strict=False):
        old_mode, new_mode, _old, new, _status = header.lstrip(":").split(" ")
        found.append(Change(old_mode, new_mode, new, path))
    return found


def blob_text(repo: git.Repo, sha: str) -> str:
    """A blob's content as stored (no filter, no text conversion), bytes that are not UTF-8 replaced."""
    data = repo.git.cat_file("blob", sha, stdout_as_string=False, strip_newline_in_stdout=False)
    return bytes(data).decode("utf-8", errors="replace")


def parents(repo: git.Repo, sha: str) -> list[str]:
    return str(repo.git.rev_list("--parents", "-n", "1", sha)).split()[1:]


def checkout(repo: git.Repo, branch: str) -> None:
    """Check out `branch`, stashing whatever an earlier session left uncommitted."""
    is_dirty = dirty(repo)
    if current_branch(repo) == branch and not is_dirty:
        return
    stash_leftovers(repo, f"scheduler: leftovers before checking out {branch}", is_dirty=is_dirty)
    repo.git.checkout(branch)


def run_tests_at(
    repo: git.Repo,
    sha: str,
    command: str,
    timeout: float = 900,
    *,
    allowed_domains: tuple[str, ...] = DEFAULT_ALLOWED_DOMAINS,
    sandboxed: bool = True,
    guard: AbstractContextManager[Any] | None = None,
) -> tuple[bool, str]:
    """Run the project's test command in a clean worktree of `sha`, outside the project, inside the
    command sandbox (writes: the worktree and a private temp; network: `allowed_domains`);
    (passed, output tail). `sandboxed=False` (the project's --no-sandbox) runs it unconfined, with
    the scheduler's environment, as the person chose. `guard` is held while the worktree is added
    and removed (lanes: a fetch into the repository at that moment would see a half-made worktree)."""
    with clean_worktree(repo, sha, guard) as tree:
        try:
            code, output = run_in_worktree(repo, tree, command, timeout, allowed_domains, sandboxed=sandboxed)
        except subprocess.TimeoutExpired:
            return False, f"test command timed out after {timeout:.0f}s"
        return code == 0, output[-2000:]


@contextlib.contextmanager
def clean_worktree(
    repo: git.Repo, sha: str, guard: AbstractContextManager[Any] | None = None
) -> Iterator[Path]:
    """A detached worktree of `sha` in a temp folder outside the project, removed afterwards (its
    private temp for the sandbox beside it); `guard` held while it is added and removed."""
    guard = guard or contextlib.nullcontext()
    with tempfile.TemporaryDirectory(prefix="agent-tests-") as tmp:
        tree = Path(tmp) / "tree"
        with guard:
            repo.git.worktree("add", "--detach", str(tree), sha)
        try:
            yield tree
        finally:
            with guard:
                repo.git.worktree("remove", "--force", str(tree))


def run_in_worktree(
    repo: git.Repo,
    tree: Path,
    command: str,
    timeout: float,
    allowed_domains: Iterable[str],
    *,
    sandboxed: bool = True,
) -> tuple[int, str]:
    """Run `command` with bash in a `clean_worktree`: (exit code, output), inside the command
    sandbox unless `sandboxed=False`; subprocess.TimeoutExpired at `timeout`."""
    if not sandboxed:
        return _run_unconfined(command, tree, timeout)
    profile = command_sandbox.host_profile(tree, tree.parent / "tmp", Path(repo.working_dir), allowed_domains)
    return command_sandbox.run_sandboxed(command, tree, profile, timeout)


def _run_unconfined(command: str, cwd: Path, timeout: float) -> tuple[int, str]:
    """`bash -c command` in its own process group, killed whole at `timeout` (a child that kept
    the output pipes open would otherwise hold the scheduler until it ended)."""
    proc = subprocess.Popen(
        ["bash", "-c", command], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
        start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise subprocess.TimeoutExpired(command, timeout, output=out + err) from None
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return proc.returncode, out + err
