"""The spec's history: every version of `app_spec.txt` a project was given, when it came, and
the session that planned it into features.

A project grows: the same command with another `--spec` (or the person's edit of
`app_spec.txt`) adds a version here when the run starts (`note`), and a newer version than the
last planned one makes the next free lane run the INITIALIZER in its extend form
(core/schedule.extended), whose brief carries what changed (`change`). Each version is kept whole
in `.agent_logs/specs/` (no session reads or writes there); `specs.json` indexes them.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from session_scheduler.core.errors import StateError
from session_scheduler.core.layout import LOG_DIR, SPEC_NAME
from session_scheduler.store.progress import atomic_write_bytes, atomic_write_json
from session_scheduler.store.records import Records, records_of

FOLDER = "specs"
"""Inside LOG_DIR: each version's text and the index."""
INDEX = "specs.json"
CHANGE_BUDGET = 3_000
"""Bytes of the spec's diff a brief carries at most (the rest is in app_spec.txt itself)."""


@dataclass(frozen=True)
class Version:
    number: int
    sha256: str
    added_at: str
    """UTC, ISO 8601; "" for the first version of a project older than the history."""
    file: str
    """Its text, in the folder."""
    planned_in: int | None = None
    """The session that planned it into features (None: not yet)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.number,
            "sha256": self.sha256,
            "added_at": self.added_at,
            "file": self.file,
            "planned_in": self.planned_in,
        }


def folder(where: Records | Path) -> Path:
    return records_of(where).path(LOG_DIR) / FOLDER


def history(where: Records | Path) -> tuple[Version, ...]:
    """The versions in the order they came (none: the history was never written)."""
    path = folder(where) / INDEX
    if not path.is_file():
        return ()
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
        return tuple(
            Version(
                int(e["version"]),
                str(e["sha256"]),
                str(e["added_at"]),
                str(e["file"]),
                None if e.get("planned_in") is None else int(e["planned_in"]),
            )
            for e in entries
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StateError(
            f"{path} is unreadable ({exc}); restore it from a backup, or delete it to start the spec's "
            "history again from the current app_spec.txt"
        ) from None


def note(where: Records | Path, now: float, *, listed: bool) -> Version | None:
    """Record the project's `app_spec.txt` as a new version when it differs from the newest one
    (or is the first); return the version added (None: nothing changed, or there is no spec).
    `listed`: the project has a feature list already. The first version of such a project (it
    is older than the history) counts as planned, so only what comes after it is planned again."""
    records = records_of(where)
    spec = records.path(SPEC_NAME)
    if not spec.is_file():
        return None
    data = spec.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    versions = history(records)
    if versions and versions[-1].sha256 == digest:
        return None
    number = len(versions) + 1
    first_of_older = not versions and listed
    added = Version(
        number,
        digest,
        "" if first_of_older else datetime.fromtimestamp(now, UTC).isoformat(timespec="seconds"),
        f"v{number}.txt",
        0 if first_of_older else None,
    )
    atomic_write_bytes(folder(records) / added.file, data)
    _save(records, (*versions, added))
    return added


def unplanned(where: Records | Path) -> Version | None:
    """The newest version when no session has planned it yet."""
    versions = history(where)
    return versions[-1] if versions and versions[-1].planned_in is None else None


def pending(where: Records | Path) -> bool:
    """A version waits to be planned: the newest is unplanned, or `app_spec.txt` was edited since
    it was recorded (a project older than the history has no version to compare with)."""
    records = records_of(where)
    versions = history(records)
    if not versions:
        return False
    spec = records.path(SPEC_NAME)
    edited = spec.is_file() and hashlib.sha256(spec.read_bytes()).hexdigest() != versions[-1].sha256
    return edited or versions[-1].planned_in is None


def planned(where: Records | Path, session: int) -> None:
    """Session `session` planned the newest version (and every one before it) into features."""
    versions = history(where)
    if versions and versions[-1].planned_in is None:
        _save(
            where,
            tuple(v if v.planned_in is not None else _with(v, session) for v in versions),
        )


def _with(version: Version, session: int) -> Version:
    return Version(version.number, version.sha256, version.added_at, version.file, session)


def change(where: Records | Path) -> str:
    """What the newest version changed since the last planned one, as a unified diff cut to
    CHANGE_BUDGET bytes; "" when there is no earlier planned version."""
    versions = history(where)
    base = next((v for v in reversed(versions[:-1]) if v.planned_in is not None), None)
    if base is None:
        return ""
    return diff(_text(where, base), _text(where, versions[-1]), base.number, versions[-1].number)


def diff(old: str, new: str, old_number: int, new_number: int) -> str:
    lines = difflib.unified_diff(
        old.splitlines(), new.splitlines(), f"app_spec.txt (version {old_number})",
        f"app_spec.txt (version {new_number})", lineterm="", n=1,
    )  # fmt: skip
    text = "\n".join(lines)
    if len(text.encode("utf-8")) <= CHANGE_BUDGET:
        return text
    cut = text.encode("utf-8")[:CHANGE_BUDGET].decode("utf-8", "ignore").rpartition("\n")[0]
    return cut + "\n(the diff is cut here: app_spec.txt has the whole new version)"


def added_lines(old: str, new: str) -> list[str]:
    """The lines the new version adds (changed lines included), in order."""
    matcher = difflib.SequenceMatcher(None, old.splitlines(), new.splitlines(), autojunk=False)
    return [
        line
        for tag, _, _, j1, j2 in matcher.get_opcodes()
        if tag in ("replace", "insert")
        for line in new.splitlines()[j1:j2]
        if line.strip()
    ]


def _text(where: Records | Path, version: Version) -> str:
    return (folder(where) / version.file).read_bytes().decode("utf-8", "replace")


def _save(where: Records | Path, versions: tuple[Version, ...]) -> None:
    atomic_write_json(folder(where) / INDEX, [v.to_json() for v in versions])
