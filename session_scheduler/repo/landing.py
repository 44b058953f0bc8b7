"""Where verified work lands, decided in one place: the project's `main`, or a review branch the
person approves from.

A new project lands on `main`. A project adopted from a repository that already has commits
lands on a review branch (`agents/<date>`, made from the person's branch when the first run
starts): the person's own branch moves only when they `approve` (run/approval.py). The choice is
saved with the project (`--land-on`); the review branch is named once, when it is first needed.
Inside every lane's clone the branch work lands on is called `main` whatever its name here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import git

from session_scheduler.core.config import REVIEW_PREFIX, REVIEWED, AgentConfig
from session_scheduler.core.errors import BadInput
from session_scheduler.guard import safe_git
from session_scheduler.repo import adoption, gitops, refs
from session_scheduler.store import events


def has_commits(project: Path) -> bool:
    """Whether the folder holds a git repository with at least one commit (read, nothing changed)."""
    git_dir = project / ".git"
    if not git_dir.is_dir():
        return False
    head = (
        (git_dir / "HEAD").read_text(encoding="utf-8", errors="replace").strip()
        if (git_dir / "HEAD").is_file()
        else ""
    )
    if head.startswith("ref: "):
        return refs.sha(git_dir, head.removeprefix("ref: ")) is not None
    return bool(head)


def default_land_on(project: Path) -> str:
    """Where a project's work lands when the person did not say: a repository with commits of
    its own gets a review branch, a new project `main`."""
    return "review" if has_commits(project) else "main"


def review_branch_name(project: Path, now: float) -> str:
    """A new review branch's name: `agents/<UTC date>`, with `-2`, `-3`... when the repository
    has a branch of that name already."""
    base = f"{REVIEW_PREFIX}{time.strftime('%Y-%m-%d', time.gmtime(now))}"
    git_dir = project / ".git"
    name, n = base, 1
    while git_dir.is_dir() and refs.sha(git_dir, f"refs/heads/{name}") is not None:
        n += 1
        name = f"{base}-{n}"
    return name


def settle(
    project: Path, saved: dict[str, object] | None, config: AgentConfig, given: str | None, now: float
) -> AgentConfig:
    """The run's landing place: the default for a project the scheduler has not seen, the review
    branch named when first needed, and a change the project cannot make refused (one line)."""
    if saved is None and given is None:  # a project the scheduler ran before options were saved keeps main
        config = replace(config, land_on="main" if adoption.adopted(project) else default_land_on(project))
    was = str(saved.get("land_on", "main")) if saved else None
    if was in REVIEWED and config.land_on == "main" and saved and saved.get("review_branch"):
        waiting = unapproved(project, str(saved["review_branch"]))
        if waiting:
            raise BadInput(
                f"--land-on main: {saved['review_branch']} holds {waiting} not on your branch yet; "
                "`approve` them (or delete that branch) first, then switch"
            )
    if config.land_on in REVIEWED and config.review_branch is None:
        config = replace(config, review_branch=review_branch_name(project, now))
    return config


def person_branch(project: Path) -> str:
    """The person's own branch: the one checked out before the first run (else `main`), which
    only their `approve` moves."""
    adopted = adoption.load(project).branch
    if adopted and not adopted.startswith(REVIEW_PREFIX):
        return adopted
    return gitops.MAIN


def unapproved(project: Path, review_branch: str) -> str:
    """How many commits the review branch has that the person's branch lacks, in words ("" when none)."""
    if not (project / ".git").is_dir():
        return ""
    repo = safe_git.open(project)
    if gitops.head(repo, review_branch) is None:
        return ""
    target = person_branch(project)
    if gitops.head(repo, target) is None:
        return ""
    subjects = str(repo.git.log("--format=%s", "--no-merges", f"{target}..{review_branch}")).splitlines()
    count = sum(1 for subject in subjects if subject != gitops.SPEC_COMMIT)
    return f"{count} commit{'s' if count != 1 else ''}" if count else ""


@dataclass(frozen=True)
class Placed:
    """A feature on the branch work lands on: the commit the queue landed it with, and the one before."""

    feature: str
    merge: str
    base: str


def placed(project: Path, repo: git.Repo, branch: str) -> dict[str, Placed]:
    """The features on `branch`, in the order they landed: for each, the last commit the merge
    queue landed it with (its `merge_verified` event: the records, never a commit message) that
    is on the branch's first-parent line (where the queue moves it), unless the person sent the
    feature back after (`sent_back`: its change was taken off the branch)."""
    if gitops.head(repo, branch) is None:
        return {}
    line = str(repo.git.rev_list("--first-parent", "--parents", f"refs/heads/{branch}", "--")).splitlines()
    before = {commit: parents[0] for commit, *parents in (entry.split() for entry in line) if parents}
    found: dict[str, Placed] = {}
    for event in events.read(events.log_path(project)):
        feature = event.get("feature")
        if not feature:
            continue
        if event.get("kind") == "sent_back" and event.get("why") == PERSON:
            found.pop(str(feature), None)
        elif event.get("kind") == "merge_verified" and str(event.get("commit")) in before:
            commit = str(event["commit"])
            found.pop(str(feature), None)
            found[str(feature)] = Placed(str(feature), commit, before[commit])
    return found


PERSON = events.SENT_BACK_BY_PERSON
