"""A session's outbox (lanes): the hand-off files as they were when the session started, which its
hand-off tools write and its verification reads, and which the scheduler applies to the
project's records once the session is verified.

Several lanes' sessions run at once; each sees the records as they were at its start plus its
own writes, so verifying one session never sees another's entries. `apply` appends what the
session added (its progress entry, its reviews and fixes) to the records, giving review and fix
ids out there, in the order sessions are applied, and says which provisional id became which.
`passes` is never taken from an outbox: with lanes it is the schedule's, set when work lands.
Applying is idempotent (entries already in the records, by their session, are not added again),
so a scheduler killed halfway applies the rest when the session is verified again.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from session_scheduler.core.errors import StateError
from session_scheduler.core.layout import FEATURES_FILE, HANDOFF_FILES, HISTORY_FILES
from session_scheduler.store import filestat
from session_scheduler.store.handoff_history import largest_archived_id
from session_scheduler.store.progress import (
    atomic_write_json,
    carry,
    incremental_schema_error,
    load_handoff,
    remember,
)
from session_scheduler.store.records import Records

OUTBOX = "outbox"
"""A lane's session's outbox: its folder in the session's folder."""


def open_outbox(records: Records, folder: Path, previous: Records | None = None) -> Records:
    """A session's outbox in `folder`: copies of the records' hand-off files, made now, and their
    history files linked (read only: the tools take the largest archived ids from them).
    `previous`: the lane's last outbox, whose memory of its restore copies and of the history
    index the new one keeps (each entry still checked against the file it describes)."""
    folder.mkdir(parents=True, exist_ok=True)
    outbox = Records(folder)
    if previous is not None:
        outbox.copies = previous.copies  # the lane's restore copies: the same folder every session
        outbox.positions = previous.positions  # where the features were (each checked when read)
    for name in HANDOFF_FILES:
        source, target = records.path(name), folder / name
        target.unlink(missing_ok=True)
        if source.is_file():
            carry(records, source, outbox, target)  # known valid as the records' version is
    for name in HISTORY_FILES:
        source, target = records.path(name), folder / name
        target.unlink(missing_ok=True)
        before = filestat.signature(source)
        if before is None:
            continue
        try:
            os.link(source, target)
        except OSError:  # another file system: a copy reads the same
            shutil.copyfile(source, target)
        known = previous.history_index.get(str(previous.path(name))) if previous is not None else None
        now = filestat.signature(target)
        if known is not None and now is not None and known[0][:3] == before[:3] == now[:3]:
            outbox.history_index[str(target)] = (now, known[1])  # the version the last outbox read
    # (its change time aside: making and removing the outboxes' links to it changes that alone,
    # and the history files are the records', which no session can write)
    return outbox


@dataclass(frozen=True)
class Applied:
    """Which provisional id (the session's tools gave it) became which in the records."""

    review_ids: dict[int, int] = field(default_factory=dict)
    fix_ids: dict[int, int] = field(default_factory=dict)
    entries: int = 0
    """Entries added to the records (0: the session's were there already)."""


def apply(outbox: Records, records: Records, session: int, *, extension: bool = False) -> Applied:
    """What session `session` added in its outbox, appended to the records (see the module).
    `extension`: a verified INITIALIZER's extend form, whose new features (those the records do
    not list) are appended to the records' list as it is now (its `passes` the schedule's)."""
    added = load_handoff(outbox)
    current = load_handoff(records)
    if current.feature_list is None and added.feature_list is not None:  # the INITIALIZER's list
        atomic_write_json(records.path(FEATURES_FILE), added.feature_list)
    elif extension and current.feature_list is not None and added.feature_list is not None:
        known = {f["id"] for f in current.features()}
        new = [f for f in added.features() if f["id"] not in known]
        if new:
            _write(
                records,
                FEATURES_FILE,
                {**current.feature_list, "features": [*current.features(), *new]},
                current.feature_list,
            )
    entries = 0
    progress = dict(current.progress or {})
    mine = [e for e in (added.progress or {}).get("sessions", []) if e.get("session_id") == session]
    if mine and not any(e.get("session_id") == session for e in progress.get("sessions", [])):
        progress["sessions"] = [*progress.get("sessions", []), *mine]
        _write(records, "progress.json", progress, current.progress)
        entries += len(mine)
    reviews = dict(current.reviews or {"reviews": [], "fixes": []})
    review_ids: dict[int, int] = {}
    fix_ids: dict[int, int] = {}
    new_reviews = [r for r in (added.reviews or {}).get("reviews", []) if r.get("session_id") == session]
    new_fixes = [f for f in (added.reviews or {}).get("fixes", []) if f.get("session_id") == session]
    have = {(e.get("session_id"), key) for key in ("reviews", "fixes") for e in reviews.get(key, [])}
    if new_reviews and (session, "reviews") not in have:
        next_id = _next_id(records, reviews["reviews"], "review_id", "reviews")
        for n, review in enumerate(new_reviews):
            review_ids[int(review["review_id"])] = next_id + n
        reviews["reviews"] = [
            *reviews["reviews"],
            *({**r, "review_id": review_ids[int(r["review_id"])]} for r in new_reviews),
        ]
        entries += len(new_reviews)
    if new_fixes and (session, "fixes") not in have:
        next_id = _next_id(records, reviews["fixes"], "fix_id", "fixes")
        for n, fix in enumerate(new_fixes):
            fix_ids[int(fix["fix_id"])] = next_id + n
        reviews["fixes"] = [
            *reviews["fixes"],
            *(
                {
                    **f,
                    "fix_id": fix_ids[int(f["fix_id"])],
                    "review_id": review_ids.get(int(f["review_id"]), f["review_id"]),
                }
                for f in new_fixes
            ),
        ]
        entries += len(new_fixes)
    if review_ids or fix_ids:
        _write(records, "reviews.json", reviews, current.reviews)
    return Applied(review_ids, fix_ids, entries)


def _next_id(records: Records, entries: list[dict[str, Any]], key: str, history: str) -> int:
    """One more than the largest id in the file and its history."""
    return max((int(e[key]) for e in entries), default=largest_archived_id(records.root, history)) + 1


def _write(records: Records, name: str, data: dict[str, Any], before: Any) -> None:
    """Write a hand-off file of the records, checked against its schema first: its entries that
    are not those of `before` (the records' validated version it extends), which the records
    then know as the file's version (not read and checked again)."""
    error = incremental_schema_error(data, name, before)
    if error is not None:
        raise StateError(f"{name} does not match its schema {error}")
    atomic_write_json(records.path(name), data)
    remember(records, records.path(name), data)
