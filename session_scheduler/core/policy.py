"""What each role may do, in one table (pure data, no I/O).

The permission settings and the file-path hook (security.py), the scope text (in the system prompt),
the hand-off contract (invariants.py), the role's git checks (verify.py) and the
scheduler's checkout before a session are all derived from `POLICIES`; none of them lists
a role's rights beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from session_scheduler.core.config import SessionType
from session_scheduler.core.layout import HANDOFF_FILES
from session_scheduler.core.machine import WorkItem

T = SessionType
FEATURES, PROGRESS, REVIEWS = HANDOFF_FILES
Branches = Literal["main", "work", "main_on_pass", "none"]
FAILED = "FAILED"
"""The outcome every role may report: it could not do its work (its `notes` say why). The
scheduler takes it at its word: the session failed and is retried."""

BUILD = (
    "git add",
    "git commit",
    "git mv",
    "git rm",
    "git restore",
    "git reset",
    "git stash",
    "mkdir",
    "touch",
    "cp",
    "mv",
    "chmod",
    "python3",
    "python",
    "pip install",
    "pip3 install",
    "npm install",
    "npm ci",
    "npx",
    "node",
    "make",
)
"""What a role that writes code runs besides inspecting and testing."""
RUN_APP = ("python3", "python", "node", "npm start")
"""Reviewers try the feature's steps by running the app itself."""
NEW_BRANCH = ("git checkout -b", "git switch -c", "git checkout -B")
REWRITE_BRANCHES = (
    "git branch -f",
    "git branch -D",
    "git branch -d",
    "git branch -m",
    "git branch -M",
    "git checkout -f",
    "git commit",
    "git cherry-pick",
    "git revert",
    "git stash",
)
"""Reviewers judge and merge; they never move, delete or add to a branch."""


@dataclass(frozen=True)
class RolePolicy:
    """One role's rights."""

    scope: str
    """The role's scope in one sentence (the first line of its scope text)."""
    writes_code: bool
    """May write any project file but the scheduler's; otherwise only `handoff_writes`."""
    handoff_writes: frozenset[str]
    """The hand-off files it may write."""
    done: str
    """The outcome its session entry reports when its work is done (`outcomes`)."""
    creates_feature_list: bool = False
    review_kind: str | None = None
    """The kind of review it appends to reviews.json (None: it appends none)."""
    appends_fixes: bool = False
    sets_passes: bool = False
    branches: Branches = "none"
    """Which branches it may change: `main`, its work branch, `main` on a PASS, or none."""
    merges: Literal["work", "main"] | None = None
    """The one branch it may merge into the branch it changes: the work branch or `main`."""
    starts_on: Literal["main", "work"] = "main"
    """What the scheduler checks out before the session."""
    commands: tuple[str, ...] = ()
    """Command prefixes it may run besides inspecting the project and running its tests."""
    refused: tuple[str, ...] = ()
    """Command prefixes refused to it besides the ones refused to every role."""

    @property
    def outcomes(self) -> tuple[str, str]:
        """The outcomes its session entry may report (append_session): done, or FAILED."""
        return (self.done, FAILED)

    @property
    def merge_commands(self) -> tuple[str, ...]:
        """The `git merge` prefixes its `merges` right gives it."""
        if self.merges == "work":
            return ("git merge",)
        return ("git merge main", "git merge --abort") if self.merges == "main" else ()

    def may_write_handoff(self, name: str) -> bool:
        return name in self.handoff_writes

    @property
    def may_move_main(self) -> bool:
        """Whether any session of the role may move `main` (the sandbox keeps it unwritable otherwise)."""
        return self.branches in ("main", "main_on_pass")

    def branches_it_may_change(self, work: WorkItem | None, verdict: str | None) -> frozenset[str]:
        """The branches a verified session of this role may have created, moved or deleted."""
        if self.branches == "main" or (self.branches == "main_on_pass" and verdict == "PASS"):
            return frozenset({"main"})
        if self.branches == "work" and work is not None:
            return frozenset({work.branch})
        return frozenset()


POLICIES: dict[SessionType, RolePolicy] = {
    T.INITIALIZER: RolePolicy(
        scope="Write the feature list, init.sh and the project skeleton; commit on `main`.",
        writes_code=True,
        handoff_writes=frozenset({FEATURES, PROGRESS}),
        done="INITIALIZED",
        creates_feature_list=True,
        branches="main",
        commands=BUILD,
        refused=NEW_BRANCH,
    ),
    T.IMPLEMENT: RolePolicy(
        scope="Implement ONE feature on its `feature/<ID>` branch; never commit on `main`.",
        writes_code=True,
        handoff_writes=frozenset({PROGRESS}),
        done="READY_FOR_REVIEW",
        branches="work",
        commands=BUILD,
    ),
    T.REVIEW: RolePolicy(
        scope="Review the branch, merge it into `main` on a PASS, record the verdict; never write product code.",
        writes_code=False,
        handoff_writes=frozenset(HANDOFF_FILES),
        done="REVIEWED",
        review_kind="feature",
        sets_passes=True,
        branches="main_on_pass",
        merges="work",
        starts_on="work",
        commands=("git reset --hard ORIG_HEAD", *RUN_APP),
        refused=NEW_BRANCH + REWRITE_BRANCHES,
    ),
    T.FIX: RolePolicy(
        scope="Fix the open review's issues on the same branch; never merge into `main`, never set `passes`.",
        writes_code=True,
        handoff_writes=frozenset({PROGRESS, REVIEWS}),
        done="FIXED",
        appends_fixes=True,
        branches="work",
        merges="main",
        starts_on="work",
        commands=BUILD,
        refused=NEW_BRANCH,
    ),
    T.ARCHITECTURE: RolePolicy(
        scope="Review the whole codebase on `main` and record the findings; change no file and no branch.",
        writes_code=False,
        handoff_writes=frozenset({PROGRESS, REVIEWS}),
        done="ARCHITECTURE_REVIEWED",
        review_kind="architecture",
        commands=(),
        refused=NEW_BRANCH + REWRITE_BRANCHES,
    ),
}


def policy(role: SessionType) -> RolePolicy:
    try:
        return POLICIES[role]
    except KeyError:
        raise ValueError(f"{role} runs no session") from None
