"""The hand-off files and the scheduler's own files: schemas, atomic writes, invariants."""

from __future__ import annotations

import errno
import itertools
import json
import operator
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from session_scheduler.core.errors import StateError
from session_scheduler.core.layout import (
    CONFIG_FILE,
    HANDOFF_FILES,
    LOG_DIR,
    SETTINGS_FILE,
    STATE_FILE,
)
from session_scheduler.core.machine import SessionState
from session_scheduler.core.schemas import AGENT_CONFIG, HANDOFF_SCHEMAS, LIST_ITEMS, SHELLS, schema_error
from session_scheduler.core.session import LANE, SessionFolder
from session_scheduler.store import crashpoints, filestat
from session_scheduler.store.filestat import Signature
from session_scheduler.store.records import Records, records_of


def atomic_write_json(path: Path, data: Any, *, durable: bool = True) -> None:
    """Write JSON through a temp file in the same folder and `os.replace`."""
    atomic_write_text(path, to_text(data), durable=durable)


def to_text(data: Any) -> str:
    """JSON as people read it and as fast as the C encoder writes it: an object's fields one per
    line, and a list of objects (features, sessions, reviews) one entry per line."""
    if not isinstance(data, dict):
        return json.dumps(data, indent=2) + "\n"
    fields = []
    for key, value in data.items():
        name = json.dumps(key)
        if isinstance(value, Encoded):
            fields.append(f"  {name}: {value}")
        elif isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
            items = ",\n".join(f"    {json.dumps(item, ensure_ascii=False)}" for item in value)
            fields.append(f"  {name}: [\n{items}\n  ]")
        else:
            fields.append(f"  {name}: {json.dumps(value, ensure_ascii=False)}")
    return "{\n" + ",\n".join(fields) + "\n}\n" if fields else "{}\n"


class Encoded(str):
    """A value `to_text` writes as it is: JSON its caller encoded (and keeps) already."""


def remove_half_written(where: Records | Path) -> list[str]:
    """Delete the temp files of atomic writes a killed process never renamed into place in the records."""
    folder = records_of(where).root
    names = [*HANDOFF_FILES, STATE_FILE, CONFIG_FILE, SETTINGS_FILE, "app_spec.txt"]
    stale = [p for name in names for p in folder.glob(f".{name}.*.tmp")]
    for path in stale:
        path.unlink(missing_ok=True)
    return [p.name for p in stale]


def atomic_write_text(path: Path, text: str, *, durable: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), durable=durable)


def atomic_write_bytes(path: Path, data: bytes | list[bytes], *, durable: bool = True) -> None:
    """Readers see the old file or the new one, never a part, even if this process is killed.
    `data`: the bytes, or their pieces in order (written as they are, not joined first).
    `durable`: on disk before the rename (fsync), so a power cut keeps it too; files the
    scheduler writes anew before each session (the status fields, the session's settings) skip
    it, as the state file that says which session runs is always durable."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb", buffering=0) as handle:
            _write_all(fd, [data] if isinstance(data, bytes) else data)
            if durable:
                os.fsync(handle.fileno())
        crashpoints.reached("atomic_write_tmp")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


IOV_MAX = 1024
"""Pieces one `writev` takes at most (Linux's `IOV_MAX`)."""


def _write_all(fd: int, pieces: list[bytes]) -> None:
    """Every piece, in order, gathered by the kernel a batch at a time (a short write's rest
    written after it)."""
    for start in range(0, len(pieces), IOV_MAX):
        batch = pieces[start : start + IOV_MAX]
        written = os.writev(fd, batch)
        rest = memoryview(b"".join(batch))[written:] if written < sum(map(len, batch)) else b""
        while rest:
            rest = rest[os.write(fd, rest) :]


def validate(data: Any, schema: dict[str, Any], name: str) -> None:
    """Raise StateError naming the file and the first schema violation."""
    error = schema_error(data, schema)
    if error is not None:
        raise StateError(f"{name} does not match its schema {error}")


MAX_JSON_BYTES = 256 * 2**20
"""No record the scheduler reads is larger (a 10,000-feature list is about 4 MB): a bigger one is refused."""


def read_regular(path: Path, limit: int = MAX_JSON_BYTES) -> bytes:
    """A regular file's bytes. An agent may write the hand-off files, so one may be a FIFO (a
    plain read would block forever), a link to /dev/zero (it would never end) or huge: refused,
    links not followed, the size bounded."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StateError(
                f"{path} is not a regular file; delete it (the scheduler restores it from its copy)"
            )
        if st.st_size > limit:
            raise StateError(f"{path} is larger than {limit:,} bytes; no record the scheduler writes is")
        return f.read(limit + 1)


def read_json(path: Path, schema: dict[str, Any] | None = None) -> Any:
    """Parse and validate one JSON file; errors name the file and the fix."""
    try:
        text = read_regular(path).decode("utf-8")
    except FileNotFoundError:
        raise StateError(f"{path} is missing") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StateError(
                f"{path} is a symbolic link; delete it (the scheduler restores it from its copy)"
            ) from None
        raise StateError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise StateError(f"{path} is not UTF-8 text (byte {exc.start})") from None
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
    memo: list[tuple[Any, frozenset[str]]] = field(default_factory=list, compare=False, repr=False)
    """Where the passing features of the feature list's last versions are kept (its Records')."""

    def features(self) -> list[dict[str, Any]]:
        return list((self.feature_list or {}).get("features", []))

    def passing(self) -> frozenset[str]:
        listed = self.feature_list
        for known, passing in self.memo:  # one version of the list is asked many times a session
            if known is listed:
                return passing
        passing = _passing(self.features())
        if listed is not None:
            _know_passing(self.memo, listed, passing)
        return passing

    def review_list(self) -> list[dict[str, Any]]:
        return list((self.reviews or {}).get("reviews", []))

    def fix_list(self) -> list[dict[str, Any]]:
        return list((self.reviews or {}).get("fixes", []))


def _passing(features: list[dict[str, Any]]) -> frozenset[str]:
    """The ids of the features whose `passes` is true (in C loops: the list can be long)."""
    flags = map(operator.is_, map(operator.methodcaller("get", "passes"), features), itertools.repeat(True))
    return frozenset(itertools.compress(map(operator.itemgetter("id"), features), flags))


def _know_passing(memo: list[tuple[Any, frozenset[str]]], version: Any, passing: frozenset[str]) -> None:
    """Keep the passing features of the last few feature-list versions (a version is never changed)."""
    memo.insert(0, (version, passing))
    del memo[8:]


def load_handoff(where: Records | Path) -> Handoff:
    """Load and validate the hand-off files; a missing file is None, a broken one an error.

    The parsed files are shared, not copied: callers read them and never change them."""
    records = records_of(where)
    loaded: dict[str, Any] = {}
    for name in HANDOFF_FILES:
        path = records.path(name)
        loaded[name] = validated(path, name, records) if path.exists() else None
    return Handoff(
        loaded["feature_list.json"], loaded["progress.json"], loaded["reviews.json"], records.passing
    )


@dataclass(frozen=True)
class _Loaded:
    key: Signature
    data: Any


def validated(path: Path, name: str, records: Records | None = None) -> Any:
    """A hand-off file, parsed and validated once per version of the `records` it is one of: an
    unchanged file (same inode, size and modification time) is not read again, and of a changed
    one only the list entries that differ from the last validated version are checked against
    their schema (without `records`, read and checked whole). Callers share the parsed version:
    they never change it."""
    key = filestat.of(path.stat())
    memo: dict[str, Any] = records.loaded if records is not None else {}
    known = memo.get(str(path))
    if known is not None and known.key == key:
        return known.data
    data = read_json(path)
    error = incremental_schema_error(data, name, known.data if known else None)
    if error is not None:
        raise StateError(f"{path} does not match its schema {error}")
    memo[str(path)] = _Loaded(key, data)
    return data


def remember(records: Records, path: Path, data: Any, *, passing: frozenset[str] | None = None) -> None:
    """`data`, just validated and written to `path` in this process, is that file's current
    version (a hand-off tool's write: the scheduler does not parse it again); `passing`, when
    the writer knows it, is that feature list's passing features (not derived again)."""
    records.loaded[str(path)] = _Loaded(filestat.of(path.stat()), data)
    if passing is not None:
        _know_passing(records.passing, data, passing)


def carry(records: Records, source: Path, copy: Records, target: Path) -> None:
    """Copy the hand-off file `source` of `records` to `target` of `copy` (another records: a
    session's outbox); when `source` is, as copied, the version `records` last validated, `copy`
    knows that version as its own (the copy is not parsed and checked again, and a later change
    to it is checked against that version, entry by entry)."""
    known = records.loaded.get(str(source))
    before = source.stat()
    shutil.copyfile(source, target)
    if known is None or known.key != filestat.of(before) or filestat.of(source.stat()) != known.key:
        return
    copy.loaded[str(target)] = _Loaded(filestat.of(target.stat()), known.data)
    for version, passing in reversed(records.passing):
        if version is known.data:
            _know_passing(copy.passing, version, passing)


def last_validated(records: Records, path: Path) -> Any:
    """The last validated content of a hand-off file (None: not read yet); not to be changed."""
    known = records.loaded.get(str(path))
    return known.data if known else None


def incremental_schema_error(data: Any, name: str, before: Any) -> str | None:
    """The schema error of a hand-off file, checking only list entries not already valid in
    `before` (the last validated version of the file at the same positions)."""
    lists = LIST_ITEMS[name]
    if not isinstance(data, dict) or not all(isinstance(data.get(key), list) for key in lists if key in data):
        return schema_error(data, HANDOFF_SCHEMAS[name])
    error = schema_error(data, SHELLS[name])
    if error is not None:
        return error
    for key, items in lists.items():
        earlier = before.get(key) if isinstance(before, dict) else None
        old: list[Any] = earlier if isinstance(earlier, list) else []
        for n, entry in enumerate(data.get(key, [])):
            if n < len(old) and (old[n] is entry or old[n] == entry):
                continue
            error = schema_error(entry, items)
            if error is not None:
                where, _, message = error.removeprefix("at ").partition(": ")
                inner = "" if where == "(top level)" else f"/{where}"
                return f"at {key}/{n}{inner}: {message}"
    return None


def ensure_handoff_files(where: Records | Path, project_name: str) -> None:
    """Create the empty progress and reviews files the agents append to."""
    project = records_of(where).root
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


STATUS_FIELDS = ("current_phase", "current_feature", "current_branch", "features_completed", "lanes")
"""The fields of progress.json the scheduler writes before each session (agents never change them)."""


def write_status(
    where: Records | Path,
    *,
    phase: str,
    feature: str | None,
    branch: str | None,
    features_completed: int,
    lane: int = LANE,
) -> None:
    """Write the status fields of progress.json for lane `lane`'s session about to run: its own
    entry of `lanes`, and the `current_*` fields (the lane whose session runs next)."""
    records = records_of(where)
    path = records.path("progress.json")
    known = validated(path, "progress.json", records)
    lanes = dict(known.get("lanes") or {})
    lanes[str(lane)] = {"phase": phase, "feature": feature, "branch": branch}
    ordered = dict(sorted(lanes.items(), key=lambda item: int(item[0])))
    status = dict(zip(STATUS_FIELDS, (phase, feature, branch, features_completed, ordered), strict=True))
    if all(known.get(key) == value for key, value in status.items()):
        return
    data = {**known, **status}  # a shallow copy: the entries are not changed
    atomic_write_json(path, data, durable=False)
    remember(records, path, data)


def write_status_of(where: Records | Path, state: SessionState, lane: int = LANE) -> None:
    """progress.json's status fields from lane `lane`'s state: what its next session works on."""
    work = state.lane.work
    write_status(
        where,
        phase=state.lane.role.value,
        feature=work.feature_id if work else None,
        branch=work.branch if work else None,
        features_completed=state.backlog.completed,
        lane=lane,
    )


KEPT_PER_SESSION: tuple[str, ...] = ("progress.json", "reviews.json")
"""The hand-off files each session folder keeps copies of (bounded by the history window);
feature_list.json, which grows with the project, is kept only in the restore point, and a
session's changes to it in its `changes.json`."""


def restore_point(where: Records | Path, which: str, lane: int = LANE) -> Path:
    """A folder of full copies of the hand-off files: `post` (the records' after the last
    verified session), or lane `lane`'s (`pre`: before its session in flight; `applying`: just
    before that session's results are applied): each lane has its own."""
    root = records_of(where).root / LOG_DIR / "restore"
    return root / which if which == SessionFolder.POST else root / f"lane-{lane}" / which


def newest_copy(where: Records | Path, name: str) -> Path | None:
    """The newest copy of a hand-off file the scheduler kept after a session (verified, or
    restored after a failed session), or None."""
    records = records_of(where)
    rolling = restore_point(records, SessionFolder.POST) / name
    if rolling.is_file():
        return rolling
    copies = sorted(
        folder.post / name
        for folder in map(SessionFolder, (records.root / LOG_DIR).glob(SessionFolder.glob_of()))
        if not SessionFolder.is_set_aside(folder.path) and (folder.post / name).is_file()
    )
    return copies[-1] if copies else None


def correct_passes(where: Records | Path, passing: frozenset[str]) -> list[str]:
    """Set `passes` back to what the scheduler verified; the feature ids it corrected. The list
    written is a new version (the validated one is shared, never changed) that shares every
    feature it did not correct; those are written as they were last encoded (`Records.lines`)."""
    records = records_of(where)
    path = records.path("feature_list.json")
    listed = load_handoff(records)
    had = listed.passing()
    if had == passing:  # the common case, from the validated copy
        return []
    data = listed.feature_list
    features = data.get("features") if isinstance(data, dict) else None
    if data is None or not isinstance(features, list):
        return []
    differ = had ^ passing  # a feature whose `passes` is wrong is one of these (ids are unique)
    wrong = [
        n
        for n in _positions(records, features, differ)
        if isinstance(features[n], dict)
        and bool(features[n].get("passes")) != (features[n].get("id") in passing)
    ]
    if not wrong:
        return []
    corrected = list(features)
    for n in wrong:
        corrected[n] = {**features[n], "passes": features[n].get("id") in passing}
    version = {**data, "features": corrected}
    atomic_write_bytes(  # not durable: the state file is, and `passes` comes from it
        path, _features_text(records, features, version, wrong), durable=False
    )
    flipped = {str(corrected[n]["id"]) for n in wrong}
    remember(records, path, version, passing=passing if flipped == differ else frozenset(had ^ flipped))
    return [str(corrected[n].get("id")) for n in wrong]


def feature_in(where: Records | Path, handoff: Handoff, feature_id: str) -> dict[str, Any] | None:
    """The entry of `feature_id` in the feature list of `handoff` (the `where` records'), None
    when it lists none: looked up where the records last saw it, not searched for."""
    features = (handoff.feature_list or {}).get("features", [])
    found = _positions(records_of(where), features, frozenset((feature_id,)))
    return features[found[0]] if found else None


def _positions(records: Records, features: list[Any], ids: frozenset[str]) -> list[int]:
    """Where the features `ids` are in `features`, in list order: from where they were last seen
    (`Records.positions`, each checked), the list read again only when one has moved."""
    known = records.positions
    seen = [(fid, known.get(fid, -1)) for fid in ids]
    if any(n < 0 or n >= len(features) or _id_at(features, n) != fid for fid, n in seen):
        known.clear()
        known.update((f.get("id"), n) for n, f in enumerate(features) if isinstance(f, dict))
        seen = [(fid, known[fid]) for fid in ids if fid in known]
    return sorted(n for _, n in seen)


def _id_at(features: list[Any], n: int) -> Any:
    feature = features[n]
    return feature.get("id") if isinstance(feature, dict) else None


def _features_text(
    records: Records, before: list[Any], version: dict[str, Any], changed: list[int]
) -> list[bytes]:
    """`to_text` of the feature list `version`, encoded, in pieces, which differs from the list
    `before` at the positions `changed` alone: when `before` is the list written last
    (`Records.lines` keeps its lines, encoded), only those are encoded again; the pieces are
    written as they are (never joined into one copy of a list that grows with the project)."""
    features = version["features"]
    written, lines = records.lines
    last = len(features) - 1
    if written is before and len(lines) == len(features):
        lines = list(lines)
        for n in changed:
            lines[n] = _line(features[n], n == last)
    else:
        lines = [_line(feature, n == last) for n, feature in enumerate(features)]
    records.lines = (features, lines)
    if not lines:
        return [to_text(version).encode("utf-8")]
    return text_around(version, "features", b"[\n", *lines, b"\n  ]")


def text_around(data: dict[str, Any], key: str, *inner: bytes) -> list[bytes]:
    """`to_text(data)` encoded, in pieces, the value of `key` being the JSON pieces `inner`
    (already encoded and kept by the caller: a long value is not copied)."""
    head, tail = to_text({k: _HOLE if k == key else v for k, v in data.items()}).split(_HOLE, 1)
    return [head.encode("utf-8"), *inner, tail.encode("utf-8")]


_HOLE = Encoded("\0value\0")
"""Where `text_around` puts the value (JSON text never holds a NUL)."""


def _line(feature: Any, last: bool) -> bytes:
    """A feature's line in the list, with the comma that separates it from the next."""
    return f"    {json.dumps(feature, ensure_ascii=False)}".encode() + (b"" if last else b",\n")


def snapshot(where: Records | Path, dest: Path, names: tuple[str, ...] = HANDOFF_FILES) -> None:
    """Copy each existing hand-off file of `names` into `dest` (each copy written whole, then
    renamed into place); a file that does not exist is removed from `dest`.

    A file unchanged since this process last copied it (same `filestat.signature`) is not
    copied again: `dest` keeps that copy, or gets a hard link to it. Copies are never written
    in place, so a link shares a version that no one changes. The copy of `feature_list.json`
    is a base: it is not made again while only `passes` changed (`restore` takes them from
    the scheduler's state), so a REVIEW does not copy a list that grows with the project.
    The copies made last are remembered by the `Records` (a bare folder: copied anew)."""
    records = records_of(where)
    copies = records.copies
    dest.mkdir(parents=True, exist_ok=True)
    for name in names:
        source, target = records.path(name), dest / name
        sig = filestat.signature(source)
        if sig is None:
            target.unlink(missing_ok=True)
            copies.pop(str(target), None)
            continue
        known = copies.get(str(target))
        if (
            known is not None
            and known.own == _copy_id(target)
            and (known.source == sig or _same_base(records, known, source, name))
        ):
            continue
        tmp = dest / f".{name}.copy.tmp"
        tmp.unlink(missing_ok=True)
        try:
            os.link(_earlier_copy(copies, sig, name), tmp)
        except (OSError, LookupError):
            shutil.copy2(source, tmp)
        os.replace(tmp, target)
        tmp.unlink(missing_ok=True)  # rename(2) does nothing when both names are links to one file
        copies.pop(str(target), None)
        copies[str(target)] = _Copy(sig, _copy_id(target), _version(records, source, name, sig))
        while len(copies) > _COPIES_KEPT:
            del copies[next(iter(copies))]


@dataclass(frozen=True)
class _Copy:
    source: Signature
    """The signature of the file it copied."""
    own: tuple[int, int, int] | None
    """The copy's (inode, size, modification time), which a hard link does not change."""
    version: Any
    """The validated version it copied, where it is a base (feature_list.json)."""


_COPIES_KEPT = 32
"""The copies `snapshot` keeps in mind (`Records.copies`), oldest forgotten first."""
BASE = "feature_list.json"
"""The hand-off file whose copies are bases: only `passes` changes after the INITIALIZER."""


def _version(records: Records, source: Path, name: str, sig: Signature) -> Any:
    """The validated version of `source` as copied (None: not a base, or not valid)."""
    if name != BASE:
        return None
    try:
        data = validated(source, name, records)
    except StateError:
        return None
    return data if filestat.signature(source) == sig else None


def _same_base(records: Records, known: _Copy, source: Path, name: str) -> bool:
    """The copy still serves as the base of `source`: the same features but for `passes`."""
    if known.version is None:
        return False
    try:
        now = validated(source, name, records)
    except StateError:
        return False
    rest = {k: v for k, v in now.items() if k != "features"}
    if rest != {k: v for k, v in known.version.items() if k != "features"}:
        return False
    return only_passes_differ(known.version.get("features", []), now.get("features", []))


def only_passes_differ(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> bool:
    """The same features, in the same order, but for their `passes` (in C loops over the
    entries that are other objects: a hand-off tool's write shares the others)."""
    if len(before) != len(after):
        return False
    maybe = itertools.compress(range(len(after)), map(operator.is_not, before, after))
    return all(
        before[n] == after[n] or _without_passes(before[n]) == _without_passes(after[n]) for n in maybe
    )


def _without_passes(feature: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in feature.items() if k != "passes"}


def _copy_id(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _earlier_copy(copies: dict[str, _Copy], sig: Signature, name: str) -> Path:
    """A copy, still as it was made, of the version of `name` with signature `sig`."""
    for path, copy in reversed(copies.items()):
        if copy.source == sig and Path(path).name == name and _copy_id(Path(path)) == copy.own:
            return Path(path)
    raise LookupError(name)


def restore(where: Records | Path, src: Path, passing: frozenset[str]) -> None:
    """Put the hand-off files back as they were in `src` (remove those it lacks), with the
    `passes` the scheduler verified (`passing`): the copy of feature_list.json is a base."""
    project = records_of(where).root
    for name in HANDOFF_FILES:
        if (src / name).exists():
            restore_file(project, name, src / name, passing)
        else:
            (project / name).unlink(missing_ok=True)


def restore_file(where: Records | Path, name: str, copy: Path, passing: frozenset[str]) -> None:
    """One hand-off file back from its copy (feature_list.json with `passing` as its passes)."""
    project = records_of(where).root
    text = copy.read_text(encoding="utf-8")
    if name == BASE:
        text = _with_passes(text, passing)
    atomic_write_text(project / name, text)


def _with_passes(text: str, passing: frozenset[str]) -> str:
    """A feature list's text with `passes` set from `passing` (as it is when not a list)."""
    try:
        data = json.loads(text)
    except ValueError:
        return text
    features = data.get("features") if isinstance(data, dict) else None
    if not isinstance(features, list) or not all(isinstance(f, dict) for f in features):
        return text
    if all(f.get("passes") is (f.get("id") in passing) for f in features):
        return text
    return to_text({**data, "features": [{**f, "passes": f.get("id") in passing} for f in features]})


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


def scheduler_review(
    where: Records | Path,
    feature_id: str | None,
    finding: str,
    detail: str,
    session: int | None = None,
    conflicts: tuple[str, ...] = (),
) -> int:
    """A REQUEST_CHANGES the scheduler itself writes (a conflict or red tests on landing, a red
    gate on the branch), appended to reviews.json: its id. `session` marks it as that session's
    (lanes: an outbox's entries are applied by their session); `conflicts`, the files a merge
    onto `main` conflicts in when that is all the review is about (its FIX only merges)."""
    records = records_of(where)
    data = load_handoff(records).reviews or {"reviews": [], "fixes": []}
    reviews = list(data.get("reviews", []))
    review_id = max((int(r["review_id"]) for r in reviews), default=0) + 1
    reviews.append(
        {
            "review_id": review_id,
            "feature_id": feature_id,
            "kind": "feature" if feature_id else "architecture",
            "verdict": "REQUEST_CHANGES",
            "issues": {"critical": [finding], "major": [], "minor": []},
            **({"scheduler_findings": [detail.strip()[-1500:]]} if detail.strip() else {}),
            **({"session_id": session} if session is not None else {}),
            **({"conflicts": list(conflicts)} if conflicts else {}),
        }
    )
    atomic_write_json(records.path("reviews.json"), {**data, "reviews": reviews})
    return review_id
