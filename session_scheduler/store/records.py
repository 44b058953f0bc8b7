"""`Records`: the project's authoritative store, apart from any work tree an agent works in.

The records are the state file, the hand-off files, the history files, the event log, the
restore points and the session folders, all under one root (today the project folder). A
`Workdir` is where an agent works: a git work tree (today the same folder; with lanes, a
clone). The runner and the hand-off tools get both, never one path for both: every hand-off
write (the hand-off tools, verification's corrections, the status fields) goes to the records.

One `Records` per project also holds what the store remembers between reads: the last
validated version of each hand-off file, the restore copies made last, the saved backlog's
encoded parts, the archived-review index and the stash list (the repository's own memos are
its `safe_git.HardenedRepo`'s). Nothing of it
is shared by the process: two `Records` of one folder each read what they need, and a
`Records` made for one call (from a bare `Path`) remembers nothing beyond it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(eq=False)
class Records:
    root: Path
    """The folder the records live in (today the project folder)."""
    loaded: dict[str, Any] = field(default_factory=dict, repr=False)
    """progress: the last validated content of each hand-off file, by path, with its stat."""
    passing: list[tuple[Any, frozenset[str]]] = field(default_factory=list, repr=False)
    """progress: the passing features of the last few feature-list versions (never changed)."""
    copies: dict[str, Any] = field(default_factory=dict, repr=False)
    """progress: the restore copies `snapshot` made last, oldest first."""
    encoded: dict[str, tuple[tuple[object, ...], Any, Any]] = field(default_factory=dict, repr=False)
    """statefile: per part of the backlog, what it was made of at the last save, its form, its
    JSON; and the whole backlog's JSON."""
    history_index: dict[str, Any] = field(default_factory=dict, repr=False)
    """handoff_history: the archived-review index as last read, by path and stat."""
    lines: tuple[Any, list[bytes]] = field(default=(None, []), repr=False)
    """progress: the features of the feature list it wrote last (their list) and their lines."""
    positions: dict[Any, int] = field(default_factory=dict, repr=False)
    """progress: where each feature id was in the feature list when last looked for."""
    stashes: dict[str, tuple[Any, tuple[str, ...]]] = field(default_factory=dict, repr=False)
    """gitops: per work tree, the stash reflog's stat and the `git stash list` it gave."""

    def __post_init__(self) -> None:
        self.root = Path(self.root)

    def path(self, name: str) -> Path:
        """A file of the records (a hand-off file, the state file, a history file)."""
        return self.root / name


def records_of(where: Records | Path) -> Records:
    """`where` as records: a `Records` as it is; a bare folder as records that remember nothing
    beyond the call (tools, tests and one-off readers; the scheduler keeps one per project)."""
    return where if isinstance(where, Records) else Records(Path(where))
