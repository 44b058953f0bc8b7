"""The hand-off files and the scheduler's own files: schemas, atomic writes, lock, invariants."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import filelock
import jsonschema

from errors import AlreadyRunning, StateError
from schemas import AGENT_CONFIG, AGENT_STATE, HANDOFF_SCHEMAS

HANDOFF_FILES: tuple[str, ...] = ("feature_list.json", "progress.json", "reviews.json")
STATE_FILE = ".agent_state.json"
CONFIG_FILE = ".agent_config.json"
LOCK_FILE = ".agent.lock"
LOG_DIR = ".agent_logs"


def atomic_write_json(path: Path, data: Any) -> None:
    """Write JSON through a temp file in the same folder and `os.replace`."""
    text = json.dumps(data, indent=2, sort_keys=False) + "\n"
    atomic_write_text(path, text)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def validate(data: Any, schema: dict[str, Any], name: str) -> None:
    """Raise StateError naming the file and the first schema violation."""
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(data))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise StateError(f"{name} does not match its schema at {where}: {error.message}")


def read_json(path: Path, schema: dict[str, Any] | None = None) -> Any:
    """Parse and validate one JSON file; errors name the file and the fix."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise StateError(f"{path} is missing") from None
    except OSError as exc:
        raise StateError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StateError(
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    if schema is not None:
        validate(data, schema, str(path))
    return data


@dataclass(frozen=True)
class Handoff:
    """The three hand-off files as parsed JSON (None where a file does not exist)."""

    feature_list: dict[str, Any] | None
    progress: dict[str, Any] | None
    reviews: dict[str, Any] | None

    def features(self) -> list[dict[str, Any]]:
        return list((self.feature_list or {}).get("features", []))

    def passing(self) -> frozenset[str]:
        return frozenset(f["id"] for f in self.features() if f.get("passes") is True)

    def review_list(self) -> list[dict[str, Any]]:
        return list((self.reviews or {}).get("reviews", []))

    def fix_list(self) -> list[dict[str, Any]]:
        return list((self.reviews or {}).get("fixes", []))


def load_handoff(project: Path) -> Handoff:
    """Load and validate the hand-off files; a missing file is None, a broken one an error."""
    loaded: dict[str, Any] = {}
    for name in HANDOFF_FILES:
        path = project / name
        loaded[name] = read_json(path, HANDOFF_SCHEMAS[name]) if path.exists() else None
    return Handoff(loaded["feature_list.json"], loaded["progress.json"], loaded["reviews.json"])


def ensure_handoff_files(project: Path, project_name: str) -> None:
    """Create the empty progress and reviews files the agents append to."""
    if not (project / "reviews.json").exists():
        atomic_write_json(project / "reviews.json", {"reviews": [], "fixes": []})
    if not (project / "progress.json").exists():
        atomic_write_json(
            project / "progress.json",
            {
                "project_name": project_name,
                "current_phase": "INITIALIZER",
                "current_feature": None,
                "current_branch": None,
                "features_completed": 0,
                "sessions": [],
            },
        )


def write_status(
    project: Path, *, phase: str, feature: str | None, branch: str | None, features_completed: int
) -> None:
    """Write the status fields of progress.json for the session about to run."""
    path = project / "progress.json"
    data = read_json(path, HANDOFF_SCHEMAS["progress.json"])
    data.update(
        current_phase=phase,
        current_feature=feature,
        current_branch=branch,
        features_completed=features_completed,
    )
    atomic_write_json(path, data)


def snapshot(project: Path, dest: Path) -> None:
    """Copy each existing hand-off file into `dest` (a session's log folder)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in HANDOFF_FILES:
        if (project / name).exists():
            shutil.copy2(project / name, dest / name)


def restore(project: Path, src: Path) -> None:
    """Put the hand-off files back as they were in `src`; remove those it lacks."""
    for name in HANDOFF_FILES:
        if (src / name).exists():
            atomic_write_text(project / name, (src / name).read_text(encoding="utf-8"))
        else:
            (project / name).unlink(missing_ok=True)


APPENDS: dict[str, tuple[frozenset[str], bool]] = {
    "REVIEW": (frozenset({"feature"}), False),
    "ARCHITECTURE": (frozenset({"architecture"}), False),
    "FIX": (frozenset(), True),
}
"""Per role: the kinds of review it may append to reviews.json, and whether it may append fixes."""


def check_invariants(before: Handoff, after: Handoff, role: str) -> list[str]:
    """Violations of the hand-off contract by a session of `role` (empty when clean)."""
    problems: list[str] = []
    ids = [f["id"] for f in after.features()]
    if len(ids) != len(set(ids)):
        problems.append("feature_list.json has duplicate feature IDs")
    if before.feature_list is not None:
        strip = [{k: v for k, v in f.items() if k != "passes"} for f in before.features()]
        now = [{k: v for k, v in f.items() if k != "passes"} for f in after.features()]
        if strip != now:
            problems.append("features were added, removed or edited after the INITIALIZER")
        if before.passing() != after.passing() and role != "REVIEW":
            problems.append(f"{role} changed `passes`; only REVIEW may")
    elif role != "INITIALIZER" and after.feature_list is not None:
        problems.append(f"{role} created feature_list.json; only the INITIALIZER may")
    for label, key, old, new in (
        ("reviews", "review_id", before.review_list(), after.review_list()),
        ("fixes", "fix_id", before.fix_list(), after.fix_list()),
    ):
        if new[: len(old)] != old:
            problems.append(f"earlier entries of reviews.json `{label}` were changed or removed")
        numbers = [entry[key] for entry in new]
        if any(b <= a for a, b in itertools.pairwise(numbers)):
            problems.append(f"reviews.json `{label}` IDs must increase ({key}: {numbers})")
    kinds, may_fix = APPENDS.get(role, (frozenset(), False))
    added = after.review_list()[len(before.review_list()) :]
    if any(review["kind"] not in kinds for review in added):
        allowed = " or ".join(sorted(kinds)) or "no"
        problems.append(f"{role} appended a review it may not write ({allowed} reviews only)")
    if len(after.fix_list()) > len(before.fix_list()) and not may_fix:
        problems.append(f"{role} appended a fix entry; only FIX may")
    old_sessions = (before.progress or {}).get("sessions", [])
    if (after.progress or {}).get("sessions", [])[: len(old_sessions)] != old_sessions:
        problems.append("earlier session entries of progress.json were changed or removed")
    return problems


def load_state(project: Path) -> dict[str, Any] | None:
    path = project / STATE_FILE
    if not path.exists():
        return None
    try:
        return dict(read_json(path, AGENT_STATE))
    except StateError as exc:
        raise StateError(
            f"{exc}. Restore it from the newest copy, {LOG_DIR}/session_*/state.json (each session "
            "leaves one), then run the same command again"
        ) from None


def save_state(project: Path, data: dict[str, Any]) -> None:
    validate(data, AGENT_STATE, STATE_FILE)
    atomic_write_json(project / STATE_FILE, data)


def load_config(project: Path) -> dict[str, Any] | None:
    path = project / CONFIG_FILE
    if not path.exists():
        return None
    try:
        return dict(read_json(path, AGENT_CONFIG))
    except StateError as exc:
        raise StateError(
            f"{exc}. Fix or delete it; options given on the command line are saved anew"
        ) from None


def save_config(project: Path, data: dict[str, Any]) -> None:
    validate(data, AGENT_CONFIG, CONFIG_FILE)
    atomic_write_json(project / CONFIG_FILE, data)


@contextmanager
def project_lock(project: Path) -> Iterator[None]:
    """Hold the project's lock; a second scheduler on the same project fails at once."""
    lock = filelock.FileLock(str(project / LOCK_FILE), timeout=0)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise AlreadyRunning(
            f"another scheduler is already running on {project} (lock {LOCK_FILE} is held); "
            "wait for it to finish or stop it first"
        ) from None
    try:
        yield
    finally:
        lock.release()
