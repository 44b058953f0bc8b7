"""A copy of the project's repository that no session can reach, and the repair it makes possible.

A session's commands may write the project's git folder (their git must work), so a session can
destroy it: remove it, its objects, its refs or `packed-refs`, write garbage into `HEAD` or the
index, leave lock files that make the scheduler's next git command fail. Verification cannot undo
that: its own git commands would fail.

- **Before each session** `sync` brings a bare repository in the scheduler's log folder
  (`.agent_logs/git_backup.git`, which no session can write) up to date with the project's: one
  local `git fetch --atomic --prune` (incremental: only what is new travels; all or nothing) of
  every ref, mirrored under `refs/project/`, and of every stash entry (only the newest is a ref,
  the others live in the stash's reflog), kept as `refs/stash-log/<commit>`. Beside it
  (`scheduler/`) it records the project's `HEAD` and a copy of the stash's reflog. The refs it
  holds are the session's snapshot. A fetch that fails (history the project cannot read) leaves
  the backup as the last one left it, and says so.
- **After each session**, before anything else runs git, `repair` checks that the repository is
  sound: the git folder, `objects/` and `refs/` are folders, `HEAD` is readable and names a
  commit, every ref of the snapshot and every branch resolves to an object that exists (a branch
  to a commit), no lock file is left and no link is in `refs/`, the index is readable: one
  `git cat-file --batch-check` and one `git ls-files`, not an fsck. A branch simply gone while
  its commit is still there is not damage: verification undoes that, as it undoes a moved
  branch. If anything is wrong it
  rebuilds what is missing: the folders (a git folder that is gone is made again, with the run's
  settings from git_guard's copy), `HEAD`, the lock files and links removed, a `packed-refs` git
  cannot read cut to its readable lines, the backup's object files copied in when an object of
  the snapshot is missing, every missing or broken ref of the snapshot set back and every other
  broken branch removed, the stash's reflog, and the index read again from `HEAD` (the work tree
  is left as it is). Verification then judges the session as usual.
- **When a run opens the repository** the same repair is made if the git folder, `HEAD` or
  `main` is damaged (a run killed during a session that damaged it); a person's changes between
  runs to other refs are kept.

Every git command here runs with the scheduler's hardened environment (`safe_git.environment`)
and names its git folder. The fetch runs in the backup; for it git starts `git upload-pack` in the
project, with neither the system's nor the user's config and without the command-scope settings
(git drops those across a local transport): only the repository's config, which cannot name a
command that `upload-pack` runs (`uploadpack.packObjectsHook` is read from protected config only).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import git

import git_guard
import refs
import safe_git
from layout import LOG_DIR

STORE = "git_backup.git"
"""The backup, under the log folder."""
MIRROR = "refs/project/"
"""Where the backup keeps the project's refs (`refs/heads/main` as `refs/project/heads/main`)."""
STASHES = "refs/stash-log/"
"""Where it keeps each stash entry, by its commit."""
RECORD = "scheduler"
"""Inside the backup: `git-dir` (the project's git folder), `HEAD` and `stash-log` (its copies)."""
FETCH = ("-c", "protocol.file.allow=always", "-c", "protocol.version=2", "-c", "gc.autoDetach=false")
"""A local fetch (the scheduler's git allows no transport), protocol v2 (it fetches a stash entry
by its commit), git's automatic upkeep of the backup run in the call, not left running after it."""
LOCATION = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR")
"""Variables that would make git look elsewhere than the folders named here."""
MINIMAL_CONFIG = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n"
"""The settings of a git folder made again when git_guard has no copy of the run's."""
SHOWN = 4
"""Problems named in the one line of a repair; the rest are counted."""
_HEX = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
_PACKED_LINE = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})? refs/\S+")
_PEELED_LINE = re.compile(r"\^[0-9a-f]{40}(?:[0-9a-f]{24})?")
_OBJECT_FILE = re.compile(r"[0-9a-f]{2}/[0-9a-f]{38}(?:[0-9a-f]{24})?|pack/pack-[0-9a-f]+\.(?:pack|rev|idx)")
"""The object files of the backup that a repair copies: loose objects and packs (no bitmaps, no
multi-pack index: those describe the backup's packs only)."""
T = TypeVar("T")


@dataclass(frozen=True)
class Backup:
    """The backup of one project's repository as the last `sync` left it."""

    project: Path
    git_dir: Path
    head: str
    """The project's `HEAD` (`ref: refs/heads/main`, or a commit)."""
    refs: Mapping[str, str]
    """Every ref of the project (full name) and its object, as backed up."""
    error: str = ""
    """Why the last `sync` could not bring the backup up to date (empty when it did)."""

    @property
    def store(self) -> Path:
        return store_of(self.project)


def store_of(project: Path) -> Path:
    return project / LOG_DIR / STORE


def sync(project: Path, git_dir: Path) -> Backup:
    """Bring the backup up to date with the repository whose git folder is `git_dir`; the backup
    as it then stands. A fetch that fails leaves the backup as an earlier one left it (`error`)."""
    store = store_of(project)
    if not (store / "HEAD").is_file():
        _git(project, "init", "--bare", "--quiet", "--template=", str(store))
    stash_log = git_dir / "logs" / "refs" / "stash"
    entries = list(dict.fromkeys(_stash_entries(stash_log)))
    source = str(git_dir.resolve())
    try:  # only the stash entries that are commits there: a line written into the reflog would fail the fetch
        stashes = [f"+{sha}:{STASHES}{sha}" for sha, kind in zip(entries, _probe(git_dir, entries), strict=True) if kind == "commit"]
        _git(store, *FETCH, "fetch", "--quiet", "--atomic", "--prune", "--no-tags", "--no-write-fetch-head", source, f"+refs/*:{MIRROR}*", *stashes, git_dir=store)
    except git.GitCommandError as exc:
        error = f"the scheduler's copy of the repository could not be brought up to date ({_first_line(exc)}); it keeps the repository as an earlier session found it"
        return _loaded(project, git_dir, error)
    record = store / RECORD
    record.mkdir(exist_ok=True)
    (record / "git-dir").write_text(f"{git_dir}\n", encoding="utf-8")
    (record / "HEAD").write_text(_read(git_dir / "HEAD") or "", encoding="utf-8")
    if _is_file(stash_log):
        shutil.copyfile(stash_log, record / "stash-log")
    else:
        (record / "stash-log").unlink(missing_ok=True)
    return _loaded(project, git_dir, "")


def load(project: Path) -> Backup | None:
    """The backup the last `sync` left (None when there is none)."""
    recorded = _read(store_of(project) / RECORD / "git-dir")
    return _loaded(project, Path(recorded.strip()), "") if recorded else None


def _loaded(project: Path, git_dir: Path, error: str) -> Backup:
    store = store_of(project)
    head = _read(store / RECORD / "HEAD") or "ref: refs/heads/main\n"
    try:
        listing = _git(store, "for-each-ref", "--format=%(objectname) %(refname)", MIRROR, git_dir=store)
    except GitFailed as exc:  # the backup itself is damaged (it is the scheduler's; no session can write it)
        listing = ""
        error = f"the scheduler's copy of the repository cannot be read ({_first_line(exc)}); remove {store} to start a new one"
    snapshot = {}
    for line in listing.splitlines():
        sha, _, name = line.partition(" ")
        snapshot["refs/" + name.removeprefix(MIRROR)] = sha
    return Backup(project, git_dir, head, snapshot, error)


def repair(backup: Backup, *, at_open: bool = False) -> str | None:
    """Check the repository (`check`) and rebuild what is missing from the backup; None when it
    was sound, else the one line that says what was damaged (and what could not be put back)."""
    found = check(backup, at_open=at_open)
    if not found:
        return None
    failed: list[str] = []
    for step in (_folders, _head_file, _strays_removed, _packed_refs):
        _attempt(failed, step, backup)
    restored = _attempt(failed, _objects, backup) is not False  # failed part way: objects may be gone
    for step in (_refs, _head_target):
        _attempt(failed, step, backup)
    _attempt(failed, _index, backup, restored)
    left = check(backup)
    what = f"{_label(backup)} was damaged since the last session began" if at_open else f"the session damaged {_label(backup)}"
    line = f"{what} ({_summary(found)}); restored from the scheduler's copy"
    return f"{line}, except: {_summary(left + failed)}" if left or failed else line


def check(backup: Backup, *, at_open: bool = False) -> list[str]:
    """What is wrong with the repository (empty: it is sound). `at_open`: only the git folder,
    `HEAD` and `main` (between runs a person may change the other refs, the index, the locks)."""
    g, label = backup.git_dir, _label(backup)
    if not _is_folder(g):
        return [f"{label} missing" if not os.path.lexists(g) else f"{label} is not a folder"]
    found = [f"{label}/{name} missing" for name in ("objects", "refs") if not _is_folder(g / name)]
    if _head_text(g) is None:
        found.append("HEAD unreadable")
    if found:
        return found  # git would not take it for a repository
    names = [f"{refs.HEADS}main"] if at_open else _names(backup)
    try:
        found += _ref_problems(backup, ["HEAD", *names], deleted_branches=False).values()
    except git.GitCommandError as exc:
        return [f"git cannot read the repository ({_first_line(exc)})"]
    if not at_open:
        found += [f"{label}/{path} {what}" for path, what in _strays(g)]
        found += [] if _index_readable(backup) else ["the index unreadable"]
    return found


# -- the steps of a repair ------------------------------------------------------------------------


def _attempt(failed: list[str], step: Callable[..., T], *args: Any) -> T | None:
    """Run one step of a repair; what makes it fail is noted and the next step runs."""
    try:
        return step(*args)
    except (git.GitCommandError, OSError) as exc:
        failed.append(_first_line(exc))
        return None


def _folders(backup: Backup) -> None:
    """The git folder, `objects/` and `refs/` as folders; a git folder made again gets the run's
    settings back from git_guard's copy (or git's defaults, when it has none)."""
    g = backup.git_dir
    remade = not _is_folder(g)
    for path in (g, g / "objects", g / "refs"):
        if os.path.lexists(path) and not _is_folder(path):
            os.unlink(path)
        path.mkdir(exist_ok=True)
    if not remade:
        return
    copy = backup.project / LOG_DIR / git_guard.COPY_DIR / "copy"
    for name in git_guard.GUARDED:  # the copy holds files, folders and links only
        if _is_folder(copy / name):
            shutil.copytree(copy / name, g / name, symlinks=True)
        elif os.path.lexists(copy / name):
            shutil.copy2(copy / name, g / name, follow_symlinks=False)
    if not (g / "config").exists():
        (g / "config").write_text(MINIMAL_CONFIG, encoding="utf-8")


def _head_file(backup: Backup) -> None:
    if _head_text(backup.git_dir) is None:
        _write(backup.git_dir / "HEAD", backup.head)


def _strays_removed(backup: Backup) -> None:
    for path, _ in _strays(backup.git_dir):
        (backup.git_dir / path).unlink()  # a link goes, never what it points to


def _packed_refs(backup: Backup) -> None:
    """A `packed-refs` with a line git cannot read (git then refuses every ref) keeps its refs."""
    path = backup.git_dir / "packed-refs"
    lines = (_read(path) or "").splitlines()
    readable = [
        (i == 0 and line.startswith("#")) or bool(_PACKED_LINE.fullmatch(line) or _PEELED_LINE.fullmatch(line))
        for i, line in enumerate(lines)
    ]
    if not all(readable):
        _write(path, "".join(f"{line}\n" for line in lines if _PACKED_LINE.fullmatch(line)))


def _objects(backup: Backup) -> bool:
    """The backup's object files copied in when an object of the snapshot is missing; whether they were."""
    shas = sorted(set(backup.refs.values()))
    if None not in _probe(backup.git_dir, shas):
        return False
    source, target = backup.store / "objects", backup.git_dir / "objects"
    files = [p for p in source.rglob("*") if _OBJECT_FILE.fullmatch(p.relative_to(source).as_posix())]
    for path in sorted(files, key=lambda p: p.suffix == ".idx"):  # each pack's index last: git finds a pack by it
        dest = target / path.relative_to(source)
        if not dest.is_file() or dest.stat().st_size != path.stat().st_size:
            dest.parent.mkdir(exist_ok=True)
            tmp = dest.with_name(dest.name + ".restoring")
            shutil.copyfile(path, tmp)
            os.replace(tmp, dest)
    return True


def _refs(backup: Backup) -> None:
    """Every missing or broken ref of the snapshot set back and every other broken branch removed
    (`git update-ref` transactions); the stash's reflog put back with `refs/stash`."""
    g = backup.git_dir
    broken = list(_ref_problems(backup, _names(backup), deleted_branches=True))
    for name in broken:  # a loose file git cannot read would refuse the update (no link is left in refs/)
        if refs.valid(name) and _is_file(g / name):
            os.unlink(g / name)
    if broken:  # removed first, a packed line too, then set back
        _git(g, "update-ref", "--stdin", git_dir=g, input="".join(f"delete {n}\n" for n in broken))
    commands = "".join(f"update {n} {backup.refs[n]}\n" for n in broken if n in backup.refs)
    if commands:
        _git(g, "update-ref", "-m", "scheduler: restored from its copy", "--stdin", git_dir=g, input=commands)
    stash_log, kept = g / "logs" / "refs" / "stash", backup.store / RECORD / "stash-log"
    if kept.is_file() and "refs/stash" in broken:  # `git update-ref` added an entry to it, or it is gone
        stash_log.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(kept, stash_log)


def _head_target(backup: Backup) -> None:
    if _probe(backup.git_dir, ["HEAD"]) != ["commit"]:
        _write(backup.git_dir / "HEAD", backup.head)


def _index(backup: Backup, rebuild: bool) -> None:
    """An index git cannot read, or one from before objects were restored (it may name objects
    that are gone), is read again from `HEAD`; the work tree stays as it is."""
    if rebuild or not _index_readable(backup):
        (backup.git_dir / "index").unlink(missing_ok=True)
        _git(backup.project, "read-tree", "HEAD", git_dir=backup.git_dir, work_tree=True)


# -- reading --------------------------------------------------------------------------------------


def _names(backup: Backup) -> list[str]:
    """The refs a session must leave resolving: every ref of the snapshot and every branch now
    (a branch is what verification and the scheduler's git read)."""
    now = [f"{refs.HEADS}{branch}" for branch in refs.heads(backup.git_dir)]
    return [*backup.refs, *(name for name in now if name not in backup.refs)]


def _ref_problems(backup: Backup, names: Sequence[str], *, deleted_branches: bool) -> dict[str, str]:
    """Each name that does not resolve to an object that exists, or (`HEAD`, a branch) not to a
    commit, and what is wrong with it. Without `deleted_branches`, a branch of the snapshot that
    is simply gone (no ref file or packed line left) while its commit is still there is none:
    verification undoes that as it undoes a moved branch."""
    g = backup.git_dir
    shas = [] if deleted_branches else sorted({backup.refs[n] for n in names if n.startswith(refs.HEADS) and n in backup.refs})
    answers = _probe(g, [*names, *shas])
    kept = {sha for sha, kind in zip(shas, answers[len(names) :], strict=True) if kind is not None}
    found = {}
    for name, kind in zip(names, answers, strict=False):
        branch = name.startswith(refs.HEADS)
        if name == "HEAD":
            if kind != "commit":
                found[name] = "HEAD points to no commit"
        elif kind is None:
            gone = branch and backup.refs.get(name) in kept and not _is_file(g / name) and name not in refs.packed(g)
            if not gone:
                found[name] = f"{name} missing"
        elif kind != "commit" and branch:
            found[name] = f"{name} is not a commit"
    return found


def _probe(git_dir: Path, names: Sequence[str]) -> list[str | None]:
    """The type of the object each name (a ref, `HEAD`, an object) resolves to, None when it does
    not resolve or the object is missing (one `git cat-file --batch-check`)."""
    if not names:
        return []
    out = _git(git_dir, "cat-file", "--batch-check=%(objecttype)", git_dir=git_dir, input="".join(f"{n}\n" for n in names))
    return [None if answer.endswith((" missing", " ambiguous")) else answer for answer in out.splitlines()]


def _index_readable(backup: Backup) -> bool:
    try:
        _git(backup.project, "ls-files", "--stage", git_dir=backup.git_dir, work_tree=True)
    except git.GitCommandError:
        return False
    return True


def _stash_entries(reflog: Path) -> list[str]:
    """The commit of each stash entry, from the stash's reflog (`<old> <new> <who> <when>\t<message>`)."""
    lines = (_read(reflog) or "").splitlines()
    return [words[1] for words in (line.split(" ", 2) for line in lines) if len(words) > 2 and _HEX.fullmatch(words[1])]


def _head_text(git_dir: Path) -> str | None:
    """`HEAD` when git can read it: a file holding `ref: <a ref name>` or a commit."""
    text = (_read(git_dir / "HEAD") or "").strip()
    target = text.removeprefix("ref:").strip()
    return text if (text.startswith("ref:") and refs.valid(target)) or _HEX.fullmatch(text) else None


def _strays(git_dir: Path) -> list[tuple[str, str]]:
    """Lock files left in the git folder or its refs (no git runs between sessions: a lock makes
    the scheduler's next git command that needs it fail), and links in its refs (git would write
    a ref through them, outside the project); each with what is wrong."""
    found = [(p.name, "left behind") for p in git_dir.glob("*.lock") if not _is_folder(p)]
    for folder, subfolders, names in os.walk(git_dir / "refs"):  # links to folders are listed, not followed
        for name in [*subfolders, *names]:
            path = Path(folder, name)
            if path.is_symlink():
                found.append((path.relative_to(git_dir).as_posix(), "is a link"))
            elif name.endswith(".lock") and name in names:
                found.append((path.relative_to(git_dir).as_posix(), "left behind"))
    return sorted(found)


def _is_folder(path: Path) -> bool:
    """A folder, not a link to one."""
    return _kind(path) == stat.S_IFDIR


def _is_file(path: Path) -> bool:
    """A regular file, not a link to one (nor a pipe, which would block its reader)."""
    return _kind(path) == stat.S_IFREG


def _kind(path: Path) -> int | None:
    try:
        return stat.S_IFMT(path.lstat().st_mode)
    except OSError:
        return None


def _read(path: Path) -> str | None:
    """A regular file's text (None for anything else)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace") if _is_file(path) else None
    except OSError:
        return None


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".restoring")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _label(backup: Backup) -> str:
    """The git folder as the lines name it: relative to the project where it is inside."""
    g = backup.git_dir
    return os.path.relpath(g, backup.project) if g.is_relative_to(backup.project) else str(g)


def _summary(problems: Iterable[str]) -> str:
    items = list(problems)
    shown = ", ".join(items[:SHOWN])
    return shown if len(items) <= SHOWN else f"{shown} and {len(items) - SHOWN} more"


def _first_line(exc: BaseException) -> str:
    """What a failure says, in one line: git's first fatal error where it gave one."""
    text = exc.said if isinstance(exc, GitFailed) else str(exc)
    lines = [line.strip(" \0") for line in text.splitlines() if line.strip(" \0")]
    lines = [line for line in lines if "fatal:" in line] or lines
    return lines[0][:200] if lines else type(exc).__name__


class GitFailed(git.GitCommandError):
    """A git command of this module failed; `said`: its error output as git wrote it."""

    def __init__(self, command: list[str], status: int, stderr: str) -> None:
        super().__init__(command, status, stderr)
        self.said = stderr


def _git(cwd: Path, *args: str, git_dir: Path | None = None, work_tree: bool = False, input: str | None = None) -> str:
    """One git command with the scheduler's hardened environment, in the git folder it names (none
    is searched for); `work_tree`: `cwd` is its work tree."""
    env = {k: v for k, v in os.environ.items() if k not in LOCATION} | safe_git.environment()
    where = [f"--git-dir={git_dir}"] if git_dir is not None else []
    where += [f"--work-tree={cwd}"] if work_tree else []
    command = ["git", *where, *args]
    done = subprocess.run(command, cwd=cwd if cwd.is_dir() else None, env=env, input=input, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise GitFailed(command, done.returncode, done.stderr)
    return done.stdout
