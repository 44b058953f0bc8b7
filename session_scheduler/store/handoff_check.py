"""The hand-off files checked before a session reads them, for every lane count: each present
(a missing one comes back from the newest kept copy, with `passes` as the scheduler verified it),
each parsing and valid, and `passes` set back where it differs from what was verified. On a
run's start their older entries move to the history files first (`handoff_history.trim`)."""

from __future__ import annotations

from collections.abc import Callable

from session_scheduler.core.errors import StateError
from session_scheduler.core.layout import HANDOFF_FILES, LOG_DIR
from session_scheduler.store import handoff_history, progress
from session_scheduler.store.records import Records


def check(
    records: Records, passing: frozenset[str], echo: Callable[[str], None], *, trim: bool = False
) -> None:
    """Check the hand-off files (a project with a feature list): see the module. A file that
    does not parse is named, with where its good copies are."""
    try:
        if trim:
            handoff_history.trim(records)
        _restore(records, passing, echo)
    except StateError as exc:
        raise StateError(
            f"{exc}. The newest good copies of the hand-off files are in {LOG_DIR}/restore/post/ "
            f"(and of progress.json and reviews.json in {LOG_DIR}/session_*/post/); restore the file from there"
        ) from None


def _restore(records: Records, passing: frozenset[str], echo: Callable[[str], None]) -> None:
    for name in HANDOFF_FILES:
        if not records.path(name).exists():
            copy = progress.newest_copy(records, name)
            if copy is None:
                raise StateError(f"{name} is missing")
            progress.restore_file(records, name, copy, passing)
            echo(f"  WARNING: {name} was missing; restored from {copy.relative_to(records.root)}")
    progress.load_handoff(records)  # every file must still parse and validate
    corrected = progress.correct_passes(records, passing)
    if corrected:
        echo(
            f"  WARNING: `passes` of {', '.join(corrected)} in feature_list.json did not match what the "
            "scheduler verified; set back (only a verified REVIEW sets it)"
        )
