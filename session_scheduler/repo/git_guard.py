"""The repository's own settings stay as the run found them: `.git/config`, `.git/hooks`, `.git/info`.

No session may change them (the OS sandbox keeps `.git` read-only; the Bash policy refuses the
git commands that write them); this check stands behind both. When a run opens the repository,
`baseline` fingerprints every entry (content, executable bit, link target) and keeps a private
copy under `.agent_logs/git_guard/` (the scheduler's log folder, which no session can write): a
person may change these files between runs, never during one. After each session
`check_and_restore` names every entry that was added, removed or changed, and puts back each
guarded file or folder that differs.

`.git/info/refs` is not guarded: `git gc` writes it (`git update-server-info`) and no git
command reads it but a dumb-HTTP server's client; a restored `info/` leaves it out.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from session_scheduler.core.layout import LOG_DIR

GUARDED = ("config", "config.worktree", "hooks", "info")
"""The entries of the git folder that are guarded, each with whatever lies under it."""
UNGUARDED = frozenset({"info/refs"})
SANDBOX_PLACEHOLDERS = frozenset({"config.worktree", "info/.claude-sandbox-noreplace"})
"""Empty files Claude Code's sandbox leaves where it guards a path that did not exist: empty, they
count as absent (git reads an empty config as none); with content, they are a change."""
COPY_DIR = "git_guard"
"""Under the log folder: `copy/` (the guarded entries as the run found them) and `digest.json`."""


@dataclass(frozen=True)
class GitGuard:
    """The guarded entries of `git_dir` as a run found them, and where their copies are."""

    project: Path
    git_dir: Path
    digest: Mapping[str, str]
    """Each guarded path (relative to `git_dir`) and its fingerprint."""
    since_last_run: tuple[str, ...] = field(default=())
    """What differs from the baseline of the run before (a person's change, kept)."""

    @property
    def copy(self) -> Path:
        return self.project / LOG_DIR / COPY_DIR / "copy"


def fingerprints(git_dir: Path) -> dict[str, str]:
    """Every guarded path under `git_dir` and its fingerprint (symbolic links are not followed)."""
    found: dict[str, str] = {}
    pending = list(GUARDED)
    while pending:
        rel = pending.pop()
        if rel in UNGUARDED:
            continue
        path = git_dir / rel
        try:
            info = path.lstat()
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(info.st_mode):
            found[rel] = f"link {os.readlink(path)}"
        elif stat.S_ISDIR(info.st_mode):
            if rel in SANDBOX_PLACEHOLDERS and next(path.iterdir(), None) is None:
                continue  # the sandbox leaves `.claude-sandbox-noreplace` as an empty folder too
            found[rel] = "folder"
            pending += [f"{rel}/{child.name}" for child in path.iterdir()]
        elif stat.S_ISREG(info.st_mode):
            if rel in SANDBOX_PLACEHOLDERS and info.st_size == 0:
                continue
            executable = "executable " if info.st_mode & 0o111 else ""
            found[rel] = f"{executable}file {hashlib.sha256(path.read_bytes()).hexdigest()}"
        else:
            found[rel] = f"special {stat.S_IFMT(info.st_mode):o}"
    return found


def differences(before: Mapping[str, str], after: Mapping[str, str], prefix: str = ".git") -> list[str]:
    """One line per path that was added, removed or changed between two fingerprints."""
    lines = []
    for rel in sorted(set(before) | set(after)):
        if rel not in before:
            lines.append(f"{prefix}/{rel} added")
        elif rel not in after:
            lines.append(f"{prefix}/{rel} removed")
        elif before[rel] != after[rel]:
            lines.append(f"{prefix}/{rel} changed")
    return lines


def baseline(project: Path, git_dir: Path | None = None) -> GitGuard:
    """Fingerprint and copy the guarded entries of the project's git folder as they are now."""
    git_dir = git_dir or project / ".git"
    folder = project / LOG_DIR / COPY_DIR
    digest_file = folder / "digest.json"
    digest = fingerprints(git_dir)
    guard = GitGuard(project, git_dir, digest)
    try:
        earlier = json.loads(digest_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        earlier = None
    if isinstance(earlier, dict):
        guard = GitGuard(project, git_dir, digest, tuple(differences(earlier, digest, _label(guard))))
    _remove(guard.copy)
    guard.copy.mkdir(parents=True)
    for name in GUARDED:
        _copy(git_dir / name, guard.copy / name)
    digest_file.write_text(json.dumps(digest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return guard


def check_and_restore(project: Path, guard: GitGuard) -> list[str]:
    """What changed in the guarded entries since `guard` was taken; each top entry that differs
    is replaced by its copy (or removed, when the run found none)."""
    now = fingerprints(guard.git_dir)
    changed = differences(guard.digest, now, _label(guard))
    for name in GUARDED:
        if _subtree(guard.digest, name) != _subtree(now, name):
            _remove(guard.git_dir / name)
            _copy(guard.copy / name, guard.git_dir / name)
    return changed


def _label(guard: GitGuard) -> str:
    """How the git folder is named in the lines: relative to the project where it is inside."""
    return (
        os.path.relpath(guard.git_dir, guard.project)
        if guard.git_dir.is_relative_to(guard.project)
        else str(guard.git_dir)
    )


def _subtree(digest: Mapping[str, str], name: str) -> dict[str, str]:
    return {rel: value for rel, value in digest.items() if rel == name or rel.startswith(name + "/")}


def _remove(path: Path) -> None:
    """Remove a file, link or folder (a link is removed, never what it points to)."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _copy(source: Path, target: Path) -> None:
    """Copy a file, link or folder as it is (links as links), leaving out `UNGUARDED` paths and
    what is neither a file, a folder nor a link."""
    if not (source.is_symlink() or source.exists()) or _special(source):
        return
    if not source.is_dir() or source.is_symlink():
        shutil.copy2(source, target, follow_symlinks=False)
        return

    def ignored(folder: str, names: list[str]) -> list[str]:
        rel = Path(folder).relative_to(source.parent).as_posix()
        return [name for name in names if f"{rel}/{name}" in UNGUARDED or _special(Path(folder, name))]

    shutil.copytree(source, target, symlinks=True, ignore=ignored)


def _special(path: Path) -> bool:
    mode = path.lstat().st_mode
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode))
