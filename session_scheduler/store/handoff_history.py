"""Bounded hand-off files: `progress.json` keeps its recent sessions and `reviews.json` its
recent reviews and fixes; older entries move to append-only JSON Lines history files.

So the files agents write stay small at any size of project, while nothing is lost: the
history files hold every older entry, in order, once. Moving is crash-safe: the entries are
appended (and fsynced) to the history first, then the hand-off file is rewritten without
them; a kill in between leaves them in both places, and the next move skips entries whose id
the history already has.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from session_scheduler.core.layout import HISTORY_FILES
from session_scheduler.store import filestat
from session_scheduler.store.progress import atomic_write_json, read_json
from session_scheduler.store.records import Records, records_of

WINDOW = 20
"""Entries of each list a hand-off file keeps (it is trimmed back to this once it holds twice as many)."""
HISTORY = dict(zip(("sessions", "reviews", "fixes"), HISTORY_FILES[:3], strict=True))
IDS = {"sessions": "session_id", "reviews": "review_id", "fixes": "fix_id"}
FILES = {"sessions": "progress.json", "reviews": "reviews.json", "fixes": "reviews.json"}


def history_path(project: Path, key: str) -> Path:
    return project / HISTORY[key]


BLOCK = 65_536
"""How much of a history file is read at a time from its end."""


def _lines_from_end(path: Path) -> Iterator[bytes]:
    """The file's non-empty lines, newest first, read backwards a block at a time (cheap at any
    size: a caller that stops at the first line it can use reads one block or two)."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return
    with handle:
        end = handle.seek(0, os.SEEK_END)
        rest = b""  # the start of a line whose beginning is in an earlier block
        while end > 0:
            start = max(0, end - BLOCK)
            handle.seek(start)
            lines = (handle.read(end - start) + rest).split(b"\n")
            end, rest = start, lines[0] if start > 0 else b""
            for line in reversed(lines[1:] if start > 0 else lines):
                if line.strip():
                    yield line


COUNTS = HISTORY_FILES[3]
"""Beside the reviews' history: how many archived reviews each feature (and `architecture`) has."""


def archived_review_counts(where: Records | Path) -> dict[str, int]:
    """How many reviews of each feature id (`architecture` for architecture reviews) were moved
    to the history; read from a small index, not from the history itself."""
    return dict(_index(records_of(where))[1])


def archived_review_count(where: Records | Path, key: str) -> int:
    """How many reviews of feature `key` (`architecture`: architecture reviews) were moved to the
    history (`archived_review_counts`'s one entry, without copying the index)."""
    return _index(records_of(where))[1].get(key, 0)


def _index(records: Records) -> tuple[int, dict[str, int]]:
    """(the largest review id counted, the counts); the index as last read is kept by the
    records, by path and stat (it changes only when reviews move). The counts are shared:
    callers copy them before any change."""
    path = records.path(COUNTS)
    memo: dict[str, tuple[filestat.Signature, tuple[int, dict[str, int]]]] = records.history_index
    try:
        key = filestat.of(path.stat())
        known = memo.get(str(path))
        if known is not None and known[0] == key:
            return known[1]
        data = json.loads(path.read_text(encoding="utf-8"))
        index = int(data["counted_to"]), {str(k): int(v) for k, v in data["counts"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return 0, {}
    memo[str(path)] = (key, index)
    return index


def _count_key(review: dict[str, Any]) -> str:
    return (
        "architecture"
        if review.get("kind") == "architecture"
        else str(review.get("feature_id") or review.get("branch") or "")
    )


def largest_archived_id(project: Path, key: str) -> int:
    """The id of the newest whole entry moved to the history (0: none); a torn line a kill left
    at the end is passed over, and an entry longer than a block is read whole."""
    for line in _lines_from_end(history_path(project, key)):
        try:
            return int(json.loads(line)[IDS[key]])
        except (ValueError, KeyError, TypeError):
            continue
    return 0


def trim(where: Records | Path, window: int = WINDOW) -> dict[str, int]:
    """Move all but the newest `window` entries of each list to its history, once a list holds
    twice as many; how many entries moved, by list."""
    records = records_of(where)
    project = records.root
    moved: dict[str, int] = {}
    for name in sorted(set(FILES.values())):
        path = project / name
        if not path.exists():
            continue
        data = read_json(path)
        keys = [key for key, file in FILES.items() if file == name]
        changed = False
        for key in keys:
            entries = data.get(key)
            if not isinstance(entries, list) or len(entries) < 2 * window:
                continue
            old, data[key] = entries[:-window], entries[-window:]
            done = largest_archived_id(project, key)
            fresh = [e for e in old if isinstance(e, dict) and int(e.get(IDS[key], 0)) > done]
            _append(history_path(project, key), fresh)
            if key == "reviews":  # each review counted once, however often a kill repeats this
                counted_to, shared = _index(records)
                counts = dict(shared)
                new = [r for r in old if isinstance(r, dict) and int(r.get("review_id", 0)) > counted_to]
                for review in new:
                    counts[_count_key(review)] = counts.get(_count_key(review), 0) + 1
                if new:
                    atomic_write_json(
                        project / COUNTS,
                        {"counted_to": max(int(r["review_id"]) for r in new), "counts": counts},
                    )
            moved[key], changed = len(old), True
        if changed:
            atomic_write_json(path, data)
    return moved


def _append(path: Path, entries: list[dict[str, Any]]) -> None:
    if not entries:
        return
    data = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in entries).encode("utf-8")
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":  # a torn line a kill left: it stays alone
            data = b"\n" + data
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_history(project: Path, key: str) -> list[dict[str, Any]]:
    """Every archived entry of a list, oldest first (a torn last line is skipped)."""
    path = history_path(project, key)
    if not path.exists():
        return []
    entries = []
    for line in path.read_bytes().splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue
    return entries
