"""What every run does to the person's project around its sessions: before the first, the checks
that refuse a project and the repairs of what a killed run left behind; after the last, the
line that names the person's own branch."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import git

from session_scheduler.core import version
from session_scheduler.core.config import AgentConfig
from session_scheduler.core.errors import ConfigError, StateError
from session_scheduler.core.humane import plural
from session_scheduler.core.layout import HANDOFF_FILES, STATE_FILE
from session_scheduler.core.machine import WORK_BRANCHES
from session_scheduler.guard import processes
from session_scheduler.guard.sandbox import Host
from session_scheduler.repo import adoption, gitops, refs
from session_scheduler.run.plan import Planner
from session_scheduler.store import crashpoints, progress
from session_scheduler.store.events import EventLog
from session_scheduler.store.records import Records


def open_project(
    project: Path,
    records: Records,
    echo: Callable[[str], None],
    tmp_dirs: Iterable[Path],
    trunk: str = gitops.MAIN,
) -> tuple[git.Repo, int]:
    """The project's repository, after the checks that refuse a project before anything runs,
    and the number of stashes it had before it was opened. `tmp_dirs`: the private temp folders
    of the sessions (one per lane); what a killed run's sessions left running there is stopped.
    `trunk`: the branch work lands on (`main`, or a review branch made here from the person's)."""
    progress.remove_half_written(records)
    left = [pid for tmp in tmp_dirs for pid in processes.stop_with_tmpdir(tmp)]
    if left:
        echo(
            f"  stopped {plural(len(left), 'process', 'processes')} the sessions of a killed run left running (pids {', '.join(map(str, left))})"
        )
    adoption.refuse_unfinished(project)
    adopting = adoption.pending(project)  # first: before anything is checked out or set aside
    stashed = len(gitops.stashes(project, records.stashes))
    repo = gitops.open_repo(project, trunk)
    later = gitops.commits_after_setup(repo, trunk)
    if later and not any((project / name).exists() for name in (STATE_FILE, *HANDOFF_FILES)):
        raise StateError(
            f"{STATE_FILE} and the hand-off files are gone, but {trunk} has {plural(later, 'commit')} of earlier "
            "sessions (was the folder cleaned with `git clean -x`?); restore them from a backup of the "
            "project, or start a new project with another --project-dir"
        )
    if adopting is not None:
        adoption.record(project, adopting)
        if adopting.conventions:
            echo(
                f"  the project's CLAUDE.md ({adopting.source}) goes to every session as its conventions; "
                "later edits to it are not handed on"
            )
    current = gitops.current_branch(repo)
    if (
        current and current.startswith(WORK_BRANCHES) and trunk == gitops.MAIN
    ):  # a lane's branch is fetched here
        gitops.checkout(repo, gitops.MAIN)
    crashpoints.reached("repo_opened")
    return repo, stashed


def local_file_missing(project: Path, name: str) -> str | None:
    """What is wrong with the local file `name` of `project` (None: it is a regular file there)."""
    path = project / name
    if path.is_symlink() or not path.is_file():
        return (
            f"--local-file {name}: {path} is not a file (a regular file, not a link); create it, or forget "
            "the saved local files with --local-file none"
        )
    return None


def check_local_files(project: Path, repo: git.Repo, names: tuple[str, ...]) -> None:
    """Refuse, before anything runs, a local file (`--local-file`) the project does not have as an
    untracked regular file: what each lane's clone is given must be the person's, outside git."""
    for name in names:
        missing = local_file_missing(project, name)
        if missing:
            raise ConfigError(missing)
        if str(repo.git.execute(["git", "--literal-pathspecs", "ls-files", "--", name])).strip():
            raise ConfigError(
                f"--local-file {name}: git tracks it, so every lane's clone has it already; forget the saved "
                "local files with --local-file none (and name the untracked ones again)"
            )


def planner_of(project: Path, config: AgentConfig, host: Host) -> Planner:
    """How the run plans its sessions, one lane or several: this machine's `host` (read at the
    run's edge) and the adoption `open_project` recorded (read here, once the project is open)."""
    return Planner(config, host, adoption.load(project))


def run_started(log: EventLog, project: Path, cost_basis: str, **more: Any) -> None:
    """The run's first event: this process, the project, the product's version, what the costs are."""
    log.emit(
        "run_started",
        pid=os.getpid(),
        project=str(project),
        version=version.VERSION,
        cost_basis=cost_basis,
        **more,
    )


def set_aside_foreign_branches(repo: git.Repo, log: EventLog, echo: Callable[[str], None]) -> None:
    """Branches named as sessions name their work branches, in a repository before any session
    ran, are a person's: kept aside so that no session (in any lane) takes one over as its own."""
    for branch, sha in sorted(gitops.branches(repo).items()):
        if not branch.startswith(WORK_BRANCHES):
            continue
        ref = f"refs/scheduler/preexisting/{branch}"
        gitops.keep_ref(repo, f"preexisting/{branch}", sha)
        gitops.delete_branch(repo, branch)
        message = f"your branch {branch} ({sha[:10]}) is named as this project's work branches are"
        echo(f"  set aside: {message}; kept as {ref} (`git branch <name> {ref}` brings it back)")
        log.emit("set_aside", ref=ref, message=message)


def note_stash(project: Path, records: Records, before: int, echo: Callable[[str], None]) -> tuple[str, ...]:
    """Say in one line where the person's uncommitted work went when opening the project set it
    aside (to check out `main`, where work lands); the set-aside to record as an event (ref,
    message, commit), or nothing."""
    entries = gitops.stashes(project, records.stashes)
    if len(entries) <= before:
        return ()
    ref, _, message = entries[0].partition(": ")
    echo(
        f"  set aside: uncommitted work is kept as {ref} ({message}); "
        f"`git stash show -p --include-untracked {ref}` shows it, `git stash pop {ref}` brings it back"
    )
    return ref, message, refs.sha(project / ".git", "refs/stash") or ""


def name_the_person_s_branch(
    repo: git.Repo, adopted_branch: str | None, echo: Callable[[str], None], trunk: str = gitops.MAIN
) -> None:
    """After a run that ran sessions, name the branch the person had checked out before the
    first run when that was another than `main` (where the work lands): it is as they left it.
    With a review branch (`trunk`), say where the work is and how to take it."""
    mine = adopted_branch
    if trunk != gitops.MAIN:
        yours = f"your branch {mine}" if mine else "your branch"
        echo(
            f"  work tree: as you left it; the verified work is on {trunk} ({yours} has not moved): "
            "`status` lists it, `approve` lands it on your branch, `send-back FEATURE --why ...` returns one"
        )
        return
    if mine and mine != gitops.MAIN and not mine.startswith(WORK_BRANCHES) and gitops.head(repo, mine):
        echo(
            f"  work tree: on main, with the sessions' work; your branch {mine} is as you left it (`git checkout {mine}`)"
        )
