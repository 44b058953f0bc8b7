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
  the backup as the last one left it, and says so. The backup keeps its refs packed and its
  history in a commit-graph, so that a fetch reads thousands of refs quickly.
- **After each session**, before anything else runs git, `repair` checks that the repository is
  sound: the git folder, `objects/` and `refs/` are folders, `HEAD` is readable and names a
  commit, every ref of the snapshot and every branch resolves to an object that exists (a branch
  to a commit), no lock file is left and no link or special file is in `refs/`, `packed-refs`
  is one git reads, the index is readable. The refs are resolved from their files as git resolves
  them (a loose file first, a file where a ref's folder should be breaks it, then
  `packed-refs`), and git is asked only whether their objects exist: one
  `git cat-file --batch-check` and one `git ls-files`, not an fsck. A branch simply gone while
  its commit is still there is not damage: verification undoes that, as it undoes a moved
  branch. If anything is wrong it rebuilds what is missing: the folders (a git folder that is
  gone is made again, with the run's settings from git_guard's copy), `HEAD`, the lock files,
  links and special files removed, `packed-refs` cut to its readable lines, the backup's object
  files copied in when an object of the snapshot is missing, every missing or broken ref of the
  snapshot set back and every other broken branch removed, the stash's reflog, and the index
  read again from `HEAD` (the work tree is left as it is). Verification then judges the session
  as usual.
- **When a run opens the repository** the same repair is made if the git folder, `HEAD` or
  `main` is damaged (a run killed during a session that damaged it); a person's changes between
  runs to other refs are kept.

Every git command here runs with the scheduler's hardened environment (`safe_git.environment`)
and names its git folder. The fetch runs in the backup; for it git starts `git upload-pack` in the
project, with neither the system's nor the user's config and without the command-scope settings
(git drops those across a local transport): only the repository's config, which cannot name a
command that `upload-pack` runs (`uploadpack.packObjectsHook` is read from protected config only).
Refs kept in a reftable (git 2.45 and later) are not files: such a repository is left alone.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import git

from session_scheduler.core.layout import LOG_DIR
from session_scheduler.guard import safe_git
from session_scheduler.repo import git_guard, refs

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
LOOSE_KEPT = 64
"""Loose refs in the backup beyond which they are packed (a fetch reads them all)."""
MINIMAL_CONFIG = (
    "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n"
)
"""The settings of a git folder made again when git_guard has no copy of the run's."""
SHOWN = 4
"""Problems named in the one line of a repair; the rest are counted."""
PART = ".restoring"
"""The suffix of a file being written in the git folder before it takes its name."""
_HEX = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
_REF_NAME = r"refs/(?![/.]|.*(?:\.\.|@\{|//|/\.|\.lock/|\.lock$|[/.]$))[^\x00-\x20\x7f~^:?*\[\\]+"
"""A ref name git accepts (refs.valid's rules, in one expression: `packed-refs` has thousands)."""
_VALID_REF = re.compile(_REF_NAME)
_PACKED_LINE = re.compile(rf"([0-9a-f]{{40}}(?:[0-9a-f]{{24}})?) ({_REF_NAME})")
_PEELED_LINE = re.compile(r"\^[0-9a-f]{40}(?:[0-9a-f]{24})?")
_REFLOG_LINE = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})? ([0-9a-f]{40}(?:[0-9a-f]{24})?) ")
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
        _run(["init", "--bare", str(store)])
    stash_log = git_dir / "logs" / "refs" / "stash"
    entries = list(dict.fromkeys(_stash_entries(stash_log)))
    try:  # only the stash entries that are commits there: a line written into the reflog would fail the fetch
        kinds = _probe(git_dir, entries)
        stashes = [f"+{sha}:{STASHES}{sha}" for sha in entries if kinds[sha] == "commit"]
        _git(
            store,
            *FETCH,
            "fetch",
            "--atomic",
            "--prune",
            "--no-tags",
            "--no-write-fetch-head",
            str(git_dir.resolve()),
            f"+refs/*:{MIRROR}*",
            *stashes,
        )
    except git.GitCommandError as exc:
        error = f"the scheduler's copy of the repository could not be brought up to date ({_first_line(exc)}); it keeps the repository as an earlier session found it"
        return _loaded(project, git_dir, error)
    if not any(
        (store / "objects" / "info" / name).exists() for name in ("commit-graph", "commit-graphs")
    ):  # once; git's upkeep renews it
        _git(store, "commit-graph", "write", "--reachable")
    if sum(len(names) for _, _, names in os.walk(store / "refs")) > LOOSE_KEPT:
        _git(store, "pack-refs", "--all")
    record = store / RECORD
    record.mkdir(exist_ok=True)
    _write(record / "git-dir", f"{git_dir}\n")
    _write(record / "HEAD", _text(git_dir / "HEAD"))
    if _is_file(stash_log):
        shutil.copyfile(stash_log, record / "stash-log")
    else:
        (record / "stash-log").unlink(missing_ok=True)
    return _loaded(project, git_dir, "")


def load(project: Path) -> Backup | None:
    """The backup the last `sync` left (None when there is none)."""
    recorded = _text(store_of(project) / RECORD / "git-dir").strip()
    return _loaded(project, Path(recorded), "") if recorded else None


def _loaded(project: Path, git_dir: Path, error: str) -> Backup:
    store = store_of(project)
    head = _text(store / RECORD / "HEAD") or "ref: refs/heads/main\n"
    try:
        listing = _git(store, "for-each-ref", "--format=%(objectname) %(refname)", MIRROR)
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
    what = (
        f"{_label(backup)} was damaged since the last session began"
        if at_open
        else f"the session damaged {_label(backup)}"
    )
    line = f"{what} ({_summary(found)}); restored from the scheduler's copy"
    return f"{line}, except: {_summary(left + failed)}" if left or failed else line


def check(backup: Backup, *, at_open: bool = False) -> list[str]:
    """What is wrong with the repository (empty: it is sound). `at_open`: only the git folder,
    `HEAD` and `main` (between runs a person may change the other refs, the index, the locks)."""
    g, label = backup.git_dir, _label(backup)
    if (g / "reftable").is_dir():
        return []
    if not _is_folder(g):
        return [f"{label} missing" if not os.path.lexists(g) else f"{label} is not a folder"]
    found = [f"{label}/{name} missing" for name in ("objects", "refs") if not _is_folder(g / name)]
    if _head_text(g) is None:
        found.append("HEAD unreadable")
    if found:
        return found  # git would not take it for a repository
    files = _RefFiles.of(g)
    if files.packed is None:
        return [f"{label}/packed-refs unreadable"]  # git reads no ref then
    names = [f"{refs.HEADS}main"] if at_open else _names(backup, files)
    try:
        found += _ref_problems(backup, files, ["HEAD", *names]).values()
    except git.GitCommandError as exc:
        return [f"git cannot read the repository ({_first_line(exc)})"]
    if not at_open:
        found += [f"{label}/{path} {what}" for path, what in files.strays]
        found += [] if _index_readable(g) else ["the index unreadable"]
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
        _write(g / "config", MINIMAL_CONFIG)


def _head_file(backup: Backup) -> None:
    if _head_text(backup.git_dir) is None:
        _write(backup.git_dir / "HEAD", backup.head)


def _strays_removed(backup: Backup) -> None:
    for path, _ in _RefFiles.of(backup.git_dir).strays:
        (backup.git_dir / path).unlink()  # a link goes, never what it points to


def _packed_refs(backup: Backup) -> None:
    """A `packed-refs` git cannot read (it refuses every ref then) keeps its readable ref lines."""
    path = backup.git_dir / "packed-refs"
    if _RefFiles.of(backup.git_dir).packed is None:
        lines = [m for m in map(_PACKED_LINE.fullmatch, _text(path).splitlines()) if m]
        _write(path, "".join(f"{m[0]}\n" for m in sorted(lines, key=lambda m: m[2])))


def _objects(backup: Backup) -> bool:
    """The backup's object files copied in when an object of the snapshot is missing; whether they were."""
    if None not in _probe(backup.git_dir, sorted(set(backup.refs.values()))).values():
        return False
    source, target = backup.store / "objects", backup.git_dir / "objects"
    for path in source.rglob("*"):
        rel = path.relative_to(source)
        dest = target / rel
        if _OBJECT_FILE.fullmatch(rel.as_posix()) and (
            not dest.is_file() or dest.stat().st_size != path.stat().st_size
        ):
            dest.parent.mkdir(exist_ok=True)
            shutil.copyfile(path, dest.with_name(dest.name + PART))
            os.replace(dest.with_name(dest.name + PART), dest)
    return True


def _refs(backup: Backup) -> None:
    """Every missing or broken ref of the snapshot set back and every other broken branch removed
    (`git update-ref` transactions); the stash's reflog put back with `refs/stash`."""
    g = backup.git_dir
    files = _RefFiles.of(g)
    broken = list(_ref_problems(backup, files, _names(backup, files), deleted_branches=True))
    for name in broken:  # a loose file git cannot read would refuse the update
        if name in files.loose:
            (g / name).unlink()
    if broken:  # removed first, a packed line too, then set back
        _git(g, "update-ref", "--stdin", input="".join(f"delete {n}\n" for n in broken))
    commands = "".join(f"update {n} {backup.refs[n]}\n" for n in broken if n in backup.refs)
    if commands:
        _git(g, "update-ref", "-m", "scheduler: restored from its copy", "--stdin", input=commands)
    stash_log, kept = g / "logs" / "refs" / "stash", backup.store / RECORD / "stash-log"
    if kept.is_file() and "refs/stash" in broken:  # `git update-ref` added an entry to it, or it is gone
        os.makedirs(stash_log.parent, exist_ok=True)
        shutil.copyfile(kept, stash_log)


def _head_target(backup: Backup) -> None:
    if _probe(backup.git_dir, ["HEAD"])["HEAD"] != "commit":
        _write(backup.git_dir / "HEAD", backup.head)


def _index(backup: Backup, rebuild: bool) -> None:
    """An index git cannot read, or one from before objects were restored (it may name objects
    that are gone), is read again from `HEAD`; the work tree stays as it is."""
    if rebuild or not _index_readable(backup.git_dir):
        _git(backup.git_dir, "read-tree", "HEAD")  # writes a new index whatever the old one holds


# -- reading --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _RefFiles:
    """The ref files of a git folder as git reads them."""

    loose: dict[str, str]
    """Each loose ref (full name) and its file's text."""
    packed: dict[str, str] | None
    """The refs in `packed-refs`; None when git cannot read it (a line it does not expect, lines
    out of the order its header promises)."""
    strays: list[tuple[str, str]] = field(default_factory=list)
    """What must not be there, and why: a lock file left (no git runs between sessions; a lock
    makes the scheduler's next git command that needs it fail), a link in `refs/` (git would
    write a ref through it, outside the project), a file that is not a regular one (git would
    block reading a pipe)."""

    @classmethod
    def of(cls, git_dir: Path) -> _RefFiles:
        loose: dict[str, str] = {}
        strays = [(p.name, "left behind") for p in git_dir.glob("*.lock") if not _is_folder(p)]
        if os.path.lexists(git_dir / "packed-refs") and not _is_file(git_dir / "packed-refs"):
            strays.append(("packed-refs", "is not a file"))
        for folder, subfolders, names in os.walk(
            git_dir / "refs"
        ):  # links to folders are listed, not followed
            for name in [*subfolders, *names]:
                path = Path(folder, name)
                rel = path.relative_to(git_dir).as_posix()
                if path.is_symlink():
                    strays.append((rel, "is a link"))
                elif name in subfolders:
                    continue
                elif not _is_file(path):
                    strays.append((rel, "is not a file"))
                elif name.endswith(".lock"):
                    strays.append((rel, "left behind"))
                elif _VALID_REF.fullmatch(rel):  # git takes no other file under refs/ for a ref
                    loose[rel] = _text(path).strip()
        return cls(loose, _packed(_text(git_dir / "packed-refs")), sorted(strays))

    def resolve(self, name: str) -> str | None:
        """The object a ref name points at, as git resolves it: its loose file, else its line in
        `packed-refs`; None when a file stands where one of its folders should be, or its file
        holds neither an object nor `ref: <name>` (followed at most five times, as git does)."""
        for _ in range(5):
            if name.startswith(self.folders):
                return None
            text = self.loose.get(name)
            if text is None:
                return (self.packed or {}).get(name)
            if not text.startswith("ref:"):
                return text if _HEX.fullmatch(text) else None
            name = text.removeprefix("ref:").strip()
        return None

    @functools.cached_property
    def folders(self) -> tuple[str, ...]:
        """Each loose ref as the folder of the refs it would block."""
        return tuple(f"{name}/" for name in self.loose)

    def has(self, name: str) -> bool:
        """Whether a file or a `packed-refs` line names the ref."""
        return name in self.loose or name in (self.packed or {})


def _packed(text: str) -> dict[str, str] | None:
    """The refs of a `packed-refs` text, None when git would refuse it."""
    lines = text.splitlines()
    header = lines[0] if lines and lines[0].startswith("# pack-refs with:") else None
    found: dict[str, str] = {}
    for line in lines[1:] if header else lines:
        ref = _PACKED_LINE.fullmatch(line)
        if ref:
            found[ref[2]] = ref[1]
        elif not (_PEELED_LINE.fullmatch(line) and found):
            return None
    ordered = header is None or " sorted " not in f"{header} " or list(found) == sorted(found)
    return found if ordered else None


def _names(backup: Backup, files: _RefFiles) -> list[str]:
    """The refs a session must leave resolving: every ref of the snapshot and every branch now
    (a branch is what verification and the scheduler's git read)."""
    now = sorted(
        n for n in {*files.loose, *(files.packed or {})} if n.startswith(refs.HEADS) and n not in backup.refs
    )
    return [*backup.refs, *now]


def _ref_problems(
    backup: Backup, files: _RefFiles, names: Sequence[str], *, deleted_branches: bool = False
) -> dict[str, str]:
    """Each name that does not resolve to an object that exists, or (`HEAD`, a branch) not to a
    commit, and what is wrong with it. Without `deleted_branches`, a branch of the snapshot that
    is simply gone (no ref file or packed line left) while its commit is still there is none:
    verification undoes that as it undoes a moved branch."""
    head = (_head_text(backup.git_dir) or "").removeprefix("ref:").strip()
    points = {
        n: files.resolve(n) if n != "HEAD" else files.resolve(head) if head.startswith("refs/") else head
        for n in names
    }
    kept = [backup.refs[n] for n in names if n.startswith(refs.HEADS) and n in backup.refs]
    kinds = _probe(backup.git_dir, sorted({*filter(None, points.values()), *kept}))
    found = {}
    for name in names:
        kind = kinds.get(points[name] or "")
        branch = name.startswith(refs.HEADS)
        gone = (
            branch
            and not deleted_branches
            and not files.has(name)
            and kinds.get(backup.refs.get(name, "")) is not None
        )
        if name == "HEAD":
            if kind != "commit":
                found[name] = "HEAD points to no commit"
        elif kind is None:
            if not gone:
                found[name] = f"{name} missing"
        elif kind != "commit" and branch:
            found[name] = f"{name} is not a commit"
    return found


def _probe(git_dir: Path, names: Sequence[str]) -> dict[str, str | None]:
    """The type of the object each name (an object, a ref, `HEAD`) resolves to, None when it
    does not or the object is missing (one `git cat-file --batch-check`; none for no name)."""
    if not names:
        return {}
    out = _git(git_dir, "cat-file", "--batch-check=%(objecttype)", input="".join(f"{n}\n" for n in names))
    return {
        n: None if answer.endswith(" missing") else answer
        for n, answer in zip(names, out.splitlines(), strict=True)
    }


def _index_readable(git_dir: Path) -> bool:
    try:
        _git(git_dir, "ls-files")
    except git.GitCommandError:
        return False
    return True


def _stash_entries(reflog: Path) -> list[str]:
    """The commit of each stash entry, from the stash's reflog (`<old> <new> <who> <when>\t<message>`)."""
    return [m[1] for m in map(_REFLOG_LINE.match, _text(reflog).splitlines()) if m]


def _head_text(git_dir: Path) -> str | None:
    """`HEAD` when git can read it: a file holding `ref: <a ref name>` or a commit."""
    text = _text(git_dir / "HEAD").strip()
    target = text.removeprefix("ref:").strip()
    return text if (text.startswith("ref:") and refs.valid(target)) or _HEX.fullmatch(text) else None


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


def _text(path: Path) -> str:
    """A regular file's text; empty for anything else."""
    try:
        return path.read_bytes().decode(errors="replace") if _is_file(path) else ""
    except OSError:
        return ""


def _write(path: Path, text: str) -> None:
    path.with_name(path.name + PART).write_bytes(text.encode())
    os.replace(path.with_name(path.name + PART), path)


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
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    lines = [line for line in lines if "fatal:" in line] or lines
    return lines[0][:200] if lines else type(exc).__name__


class GitFailed(git.GitCommandError):
    """A git command of this module failed; `said`: its error output as git wrote it."""

    def __init__(self, command: list[str], status: int, stderr: str) -> None:
        super().__init__(command, status, stderr)
        self.said = stderr


def _git(git_dir: Path, *args: str, input: str | None = None) -> str:
    """One git command in the git folder `git_dir` (none is searched for; no command here reads a
    work tree)."""
    return _run([f"--git-dir={git_dir}", *args], input)


def _run(args: list[str], input: str | None = None) -> str:
    """One git command with the scheduler's hardened environment."""
    env = safe_git.without_location(os.environ) | safe_git.environment()
    command = ["git", *args]
    done = subprocess.run(
        command, env=env, input=input, capture_output=True, text=True
    )  # its status is read below
    if done.returncode != 0:
        raise GitFailed(command, done.returncode, done.stderr)
    return done.stdout
