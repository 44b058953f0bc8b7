"""What a planning session is told beyond the hand-off files (the I/O for brief.Planning): the
spec's change since the last planned version, the spec's tasks when it is a task list, and the
map of the code, built by the scheduler from git objects (never by running the project's code)
and cached per commit.

The INITIALIZER gets the map of the code the person had when the project was adopted (its
`existing` form); an ARCHITECTURE review gets the map of `main` as it is. A spec or a map that
cannot be read makes the brief say less, never a session fail: verification judges the work.
"""

from __future__ import annotations

from pathlib import Path

import git

from session_scheduler.core import languages
from session_scheduler.core.config import SessionType
from session_scheduler.core.errors import GitError, SpecError
from session_scheduler.core.layout import LOG_DIR, SPEC_NAME
from session_scheduler.core.machine import SessionState, extends
from session_scheduler.core.tasks import Task, read_tasks
from session_scheduler.guard import safe_git
from session_scheduler.repo import repomap
from session_scheduler.repo.adoption import Adoption
from session_scheduler.repo.gates import tree_at
from session_scheduler.run.brief import NO_PLANNING, Planning
from session_scheduler.store import specs
from session_scheduler.store.records import Records

VENV_PYTHON = ".venv/bin/python -m "
"""How a gate runs a tool from the venv the scheduler installs (the brief names the tool alone)."""
MAPS = "repomap"
"""Inside LOG_DIR: the rendered maps, one per commit (no session reads or writes there)."""


def planning_for(
    state: SessionState,
    project: Path,
    records: Records,
    adopted: Adoption,
    main: str | None,
    *,
    keep: bool = True,
) -> Planning:
    """What the session about to run in `state` is told of its spec and code (`main`: the
    commit the session starts on, whose map an ARCHITECTURE review gets; `keep`: the map is
    cached in the records, which `--dry-run` leaves as they are)."""
    role = state.lane.role
    if role is SessionType.ARCHITECTURE:
        return Planning(repo_map=map_of(project, records, main, keep=keep))
    if role is not SessionType.INITIALIZER:
        return NO_PLANNING
    existing = not state.backlog.features and adopted.files > 0
    return Planning(
        existing=existing,
        tools=tools_on(project, adopted.commit) if existing else "",
        spec_change=specs.change(records) if extends(state) else "",
        tasks=spec_tasks(records.path(SPEC_NAME)),
        repo_map=map_of(project, records, adopted.commit, keep=keep) if existing else "",
    )


def tools_on(project: Path, commit: str | None) -> str:
    """What `commit`'s own configuration names to test and check its code (the language plugins'
    reading, the same the gates detect with `--detect-gates`), in one line ("" without a commit)."""
    if commit is None:
        return ""
    repo = safe_git.open(project)
    try:
        found = languages.detect(tree_at(repo, commit))
    except (GitError, git.GitCommandError):
        return ""
    finally:
        repo.close()
    named = [
        f"{g.kind} `{g.command.replace(VENV_PYTHON, 'python -m ')}`" for g in (found.gates if found else ())
    ]
    return "; ".join(named) or "no test runner, linter or type checker"


def spec_tasks(spec: Path) -> tuple[Task, ...]:
    """The open tasks of a spec that is a task list or an issues export (none: text, or unreadable)."""
    try:
        return read_tasks(spec.read_bytes(), SPEC_NAME)[1]
    except (OSError, SpecError):
        return ()


def map_of(project: Path, records: Records, commit: str | None, *, keep: bool = True) -> str:
    """The map of `commit`'s code, built once per commit when `keep` ("" without a commit, or
    when git cannot read it)."""
    if commit is None:
        return ""
    try:
        if not keep:
            return repomap.build(project, commit)
        return repomap.cached(project, records.path(LOG_DIR) / MAPS, commit)
    except GitError:
        return ""
