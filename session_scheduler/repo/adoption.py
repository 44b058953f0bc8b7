"""What a project was when the scheduler first adopted it: the person's `CLAUDE.md` and branch.

The CLI runs with `setting_sources=[]` and never reads a project's `CLAUDE.md` itself. So that a
person's rules still reach every session, the scheduler takes a snapshot of that file once, when
it first adopts the project (before any session ran, before anything is checked out or set
aside), keeps it in its own log folder (`.agent_logs/adoption.json`, which no session can write)
and appends it to every session's system prompt. A `CLAUDE.md` an agent creates or edits later
is never handed on: only the first run's snapshot is. The same record keeps the branch the
person had checked out, which a run names when it ends on `main` (run/opening.name_the_person_s_branch).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import git

from session_scheduler.core.errors import GitError
from session_scheduler.core.layout import ADOPTION_FILE, LOG_DIR, SPEC_NAME, STATE_FILE
from session_scheduler.guard import safe_git
from session_scheduler.repo import gitops
from session_scheduler.store.progress import atomic_write_json

NAME = "CLAUDE.md"
"""The file a person writes their conventions for Claude Code in."""
MAX_CHARS = 8000
"""At most this much of it reaches a session (the rest is cut, and the cut is said)."""
HEADING = "# The project's own conventions (its CLAUDE.md)"
OURS = frozenset({SPEC_NAME, ".gitignore"})
"""What a repository may hold of the scheduler's own before it counts as having code."""


@dataclass(frozen=True)
class Adoption:
    conventions: str
    """The person's CLAUDE.md, cut to MAX_CHARS; "" when the project had none."""
    source: str
    """Where it was read: `work tree`, `HEAD <sha>`, or `none`."""
    branch: str | None = None
    """The branch checked out before the first run (None: a new repository, or HEAD detached)."""
    files: int = 0
    """Files the person's HEAD held when the project was adopted (its own code; 0: a new repository)."""
    commit: str | None = None
    """That HEAD: the code the first INITIALIZER is shown a map of (None: no commit yet)."""


NONE = Adoption("", "none")


def path(project: Path) -> Path:
    return project / LOG_DIR / ADOPTION_FILE


def found(project: Path) -> Adoption:
    """What the project holds now, changing nothing: its `CLAUDE.md` in the work tree (a regular
    file, not a link), else the one committed in HEAD (a regular blob); the branch checked out."""
    if not (project / ".git").exists():
        return _with_file(project, NONE)
    repo = safe_git.open(project)  # hardened: reading a blob runs no filter, no textconv
    try:
        try:
            branch: str | None = str(repo.git.symbolic_ref("--quiet", "--short", "HEAD"))
        except git.GitCommandError:
            branch = None
        committed = Adoption("", "none", branch)
        try:
            commit = str(repo.git.rev_parse("--verify", "--quiet", "HEAD^{commit}"))
            names = str(repo.git.ls_tree("-r", "--name-only", "-z", commit)).split("\0")
            own = [n for n in names if n and n not in OURS]
            committed = Adoption("", "none", branch, len(own), commit)
        except git.GitCommandError:  # no commit yet
            pass
        try:
            entry = str(repo.git.ls_tree("HEAD", "--", NAME)).split()
            if len(entry) >= 3 and entry[0] == "100644" and entry[1] == "blob":  # a link's target is not read
                data = repo.git.cat_file(
                    "blob", entry[2], stdout_as_string=False, strip_newline_in_stdout=False
                )
                committed = replace(
                    committed,
                    conventions=_bounded(bytes(data)),
                    source=f"HEAD {str(repo.git.rev_parse('HEAD'))[:12]}",
                )
        except git.GitCommandError:  # no commit yet
            pass
    finally:
        repo.close()
    return _with_file(project, committed)


def _with_file(project: Path, committed: Adoption) -> Adoption:
    file = project / NAME
    if file.is_file() and not file.is_symlink():
        return replace(committed, conventions=_bounded(file.read_bytes()), source="work tree")
    return committed


def adopted(project: Path) -> bool:
    """Whether the scheduler has run on the project (its record, or a state file of an older release)."""
    return path(project).exists() or (project / STATE_FILE).exists()


def refuse_unfinished(project: Path) -> None:
    """Refuse, before anything is written, a repository not yet adopted that is in the middle of a
    merge, rebase, cherry-pick or revert: that is the person's work, which no checkout may abort.
    (Later, such a state is a session's leftover, which the next checkout aborts.)"""
    if not project.is_dir() or adopted(project):
        return
    busy = gitops.unfinished(project)
    if busy is not None:
        what, fix = busy
        raise GitError(
            f"the repository {project} is in the middle of {what}: {fix}, then run the same "
            "command again (the scheduler takes over no half-done operation of yours)"
        )


def pending(project: Path) -> Adoption | None:
    """What to record for a project the scheduler has never run (no state file, no record yet);
    None when it has been adopted (a project first run by a release that kept no record has none)."""
    return None if adopted(project) else found(project)


def record(project: Path, adoption: Adoption) -> None:
    path(project).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(
        path(project),
        {
            "claude_md": {"source": adoption.source, "text": adoption.conventions},
            "branch": adoption.branch,
            "code": {"commit": adoption.commit, "files": adoption.files},
        },
    )


def load(project: Path) -> Adoption:
    """The recorded adoption; NONE when there is none (or it is unreadable)."""
    try:
        data = json.loads(path(project).read_text(encoding="utf-8"))
        branch = data.get("branch")
        code = data.get("code") or {}
        return Adoption(
            str(data["claude_md"]["text"]),
            str(data["claude_md"]["source"]),
            str(branch) if branch else None,
            int(code.get("files") or 0),
            str(code["commit"]) if code.get("commit") else None,
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return NONE


def preview(project: Path) -> Adoption:
    """What a session would get, changing nothing (`--dry-run`)."""
    waiting = pending(project) if project.exists() else None
    return waiting if waiting is not None else load(project)


def section(adoption: Adoption) -> str:
    """The part of the system prompt that hands the conventions on ("" when there are none)."""
    if not adoption.conventions.strip():
        return ""
    return "\n".join(
        [
            HEADING,
            "",
            "The person who owns this repository wrote these rules for it (its CLAUDE.md as it was before",
            "the scheduler's first run). Follow them where they do not conflict with your role and scope above.",
            "",
            adoption.conventions.rstrip(),
            "",
        ]
    )


def _bounded(data: bytes) -> str:
    text = data.decode("utf-8", errors="replace")
    if len(text) <= MAX_CHARS:
        return text
    return f"{text[:MAX_CHARS]}\n[... cut: {len(text) - MAX_CHARS} more characters of CLAUDE.md ...]\n"
