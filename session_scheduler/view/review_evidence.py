"""Each feature's evidence for the report, read from the project: its gates as they last ran (with
a red gate's output), and each review's graded acceptance steps with the browser evidence the
review cited (a snapshot and a screenshot per step) and the console's messages its browser read.

`gather` is the only function here that reads files. A review is tied to the session that wrote
it by the event log (`verdict` after that session's `session_started`, which names its folder);
the files come from that folder's ledger (`browser.jsonl`) and `evidence/` (core/evidence.py).
A cited name is shown only when it is a name the scheduler gives (`evidence.NAME`, of the kind it
is cited as) and the file lies inside the session's evidence folder, checked on the file system:
no symbolic link is followed, and the resolved path must stay inside. Anything that cannot be
shown (no ledger, a file gone, a line that is not JSON) becomes a line saying so, never an error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from session_scheduler.core.evidence import EVIDENCE_DIR, KINDS, LEDGER, NAME, Call, parse_ledger
from session_scheduler.core.layout import LOG_DIR
from session_scheduler.store import handoff_history
from session_scheduler.store.events import Event
from session_scheduler.view.markup import cut

CONSOLE_CHARS = 3000
"""How much of one console read the report shows, whole lines (the rest is in its file, linked)."""
SNAPSHOT_CHARS = 4000
"""How much of a snapshot the page shows folded under its link (the file has it whole)."""
LATER_ERRORS, LINE_CHARS = 20, 300
"""The error lines past the cut that are shown anyway (how many, and each cut to how long)."""
ERROR_LINE = re.compile(r"^(\[ERROR\]|(Uncaught )?[A-Z]\w*Error\b)")
"""A console line that reports an error: `[ERROR] …` (@playwright/mcp 0.0.83's form of a console
message of type error, `[TYPE] text @ url:line`) or a page error's stack (`TypeError: …`)."""
PNG = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class GateRun:
    """One gate as it last ran on the feature's branch or on `main` (a `gates_ran` event)."""

    where: str
    name: str
    kind: str
    passed: bool
    seconds: float
    output: str
    """The end of a red gate's output ('' for a gate that passed)."""


@dataclass(frozen=True)
class Cited:
    """A file an acceptance result cites (`snapshot` or `screenshot`)."""

    kind: str
    name: str
    file: str | None
    """Where it is, relative to the project (POSIX), when it can be shown; else None."""
    problem: str = ""
    """Why it cannot be shown ('' when it can)."""
    text: str = ""
    """A snapshot's first SNAPSHOT_CHARS (a browser may not show a `.yml` file it is linked to)."""


@dataclass(frozen=True)
class StepEvidence:
    step: int
    passed: bool
    evidence: str
    snapshot: Cited | None
    """None: the result cites none."""
    screenshot: Cited | None


@dataclass(frozen=True)
class ConsoleRead:
    """The console's messages as one browser call read them."""

    name: str
    file: str
    """Relative to the project (POSIX)."""
    text: str
    """Its first lines, at most CONSOLE_CHARS."""
    left_out: int
    """Characters of the file not in `text`."""
    later_errors: tuple[str, ...] = ()
    """Error lines past the cut (at most LATER_ERRORS): an error is never hidden by it."""


@dataclass(frozen=True)
class ReviewEvidence:
    review_id: int
    verdict: str
    session: int | None
    """The REVIEW session that wrote it (None: the event log names none)."""
    steps: tuple[StepEvidence, ...]
    console: tuple[ConsoleRead, ...] = ()
    missing: tuple[str, ...] = ()
    """What of the review's browser evidence cannot be shown, in words."""

    @property
    def browser(self) -> bool:
        """The review has browser evidence to show or to miss."""
        return bool(self.console or self.missing) or any(s.snapshot or s.screenshot for s in self.steps)


@dataclass(frozen=True)
class FeatureEvidence:
    feature: str
    gates: tuple[GateRun, ...]
    reviews: tuple[ReviewEvidence, ...]


def last_gates(log: Iterable[Event]) -> dict[str, dict[str, Event]]:
    """Per feature, the last `gates_ran` event of each place its gates ran (branch, main)."""
    last: dict[str, dict[str, Event]] = {}
    for event in log:
        if event["kind"] == "gates_ran" and event.get("feature"):
            last.setdefault(str(event["feature"]), {})[str(event["where"])] = event
    return last


def gate_runs(ran: Mapping[str, Event]) -> tuple[GateRun, ...]:
    red: dict[str, dict[str, Any]] = {
        where: event["red"] if isinstance(event.get("red"), dict) else {} for where, event in ran.items()
    }
    return tuple(
        GateRun(
            where,
            str(g["name"]),
            str(g.get("kind") or ""),
            bool(g["passed"]),
            float(g.get("seconds") or 0.0),
            "" if g["passed"] else str(red[where].get(g["name"]) or ""),
        )
        for where, event in ran.items()
        for g in event["gates"]
    )


def review_sessions(log: Iterable[Event]) -> dict[int, tuple[int, str]]:
    """Review id -> (the REVIEW session that wrote it, that session's folder relative to the
    project). A review the scheduler wrote (a red gate's, in an IMPLEMENT or FIX) has none."""
    folders: dict[int, str] = {}
    made: dict[int, tuple[int, str]] = {}
    for event in log:
        if event["kind"] == "session_started" and event.get("log_dir"):
            if event.get("role") == "REVIEW":
                folders[int(event["session"])] = str(event["log_dir"])
            else:  # a number is given once; a rerun of the same session is the same role
                folders.pop(int(event["session"]), None)
        elif event["kind"] == "verdict" and isinstance(event.get("review_id"), int):
            folder = folders.get(int(event["session"]))
            if folder is not None:
                made[event["review_id"]] = (int(event["session"]), folder)
    return made


def gather(
    project: Path,
    log: list[Event],
    reviewed: Mapping[str, Iterable[tuple[int, str]]],
    web: frozenset[str] = frozenset(),
) -> tuple[FeatureEvidence, ...]:
    """Each feature's evidence, in the order of `reviewed` (feature -> its (review id, verdict)s;
    a feature whose gates ran and that has no review yet comes after). `web`: the features
    reviewed in a browser (one of their reviews without browser evidence says so)."""
    gates, sessions, graded = last_gates(log), review_sessions(log), _graded(project)
    root = project.resolve()
    out = []
    for feature in [*reviewed, *(f for f in gates if f not in reviewed)]:
        reviews = tuple(  # a review that graded steps, or a web feature's review by a REVIEW session
            _review(root, number, verdict, graded.get(number, []), sessions.get(number), feature in web)
            for number, verdict in reviewed.get(feature, ())
            if number in graded or (feature in web and number in sessions)
        )
        if reviews or feature in gates:
            out.append(FeatureEvidence(feature, gate_runs(gates.get(feature, {})), reviews))
    return tuple(out)


def _graded(project: Path) -> dict[int, list[dict[str, Any]]]:
    """Review id -> its acceptance results as recorded (with the files they cite), from
    `reviews.json` and the reviews moved to its history; a file not readable gives the rest."""
    try:
        current = json.loads((project / "reviews.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        current = None
    reviews = handoff_history.read_history(project, "reviews")
    if isinstance(current, dict) and isinstance(current.get("reviews"), list):
        reviews += current["reviews"]
    graded: dict[int, list[dict[str, Any]]] = {}
    for review in reviews:
        try:
            results = review["acceptance"]
            number = int(review["review_id"])
        except (KeyError, TypeError, ValueError):
            continue
        if isinstance(results, list):
            graded[number] = [r for r in results if isinstance(r, dict)]
    return graded


def _review(
    root: Path,
    number: int,
    verdict: str,
    results: list[dict[str, Any]],
    session: tuple[int, str] | None,
    web: bool,
) -> ReviewEvidence:
    cites = any(r.get("snapshot") or r.get("screenshot") for r in results)
    if session is None:
        unknown = (
            f"the event log names no session for review #{number}: its browser evidence cannot be found",
        )
        return ReviewEvidence(
            number, verdict, None, _steps(results, None, root), missing=unknown if cites else ()
        )
    folder, problem = _folder(root, session[1])
    calls, missing = ([], [problem]) if folder is None else _ledger(folder)
    if not cites and not calls and not web:  # a review without a browser: nothing to show or miss
        return ReviewEvidence(number, verdict, session[0], _steps(results, None, root))
    if folder is not None and not calls and not missing:
        missing.append(
            f"no browser call is recorded in {session[1]}/{LEDGER} (not used, or the ledger is gone)"
        )
    console: list[ConsoleRead] = []
    for call in calls:
        if call.tool == "browser_console_messages" and call.file and not call.error:
            read, problem = _console(root, folder, call.file) if folder is not None else (None, "")
            console += [read] if read is not None else []
            missing += [problem] if problem else []
    if calls and not any(c.tool == "browser_console_messages" and not c.error for c in calls):
        missing.append("the console's messages were not read (no browser_console_messages call)")
    return ReviewEvidence(
        number, verdict, session[0], _steps(results, folder, root), tuple(console), tuple(missing)
    )


def _steps(results: list[dict[str, Any]], folder: Path | None, root: Path) -> tuple[StepEvidence, ...]:
    return tuple(
        StepEvidence(
            int(r.get("step") or 0) if str(r.get("step") or "0").isdigit() else 0,
            r.get("passed") is True,
            " ".join(str(r.get("evidence") or "").split()),
            _cited(folder, root, "snapshot", r.get("snapshot")),
            _cited(folder, root, "screenshot", r.get("screenshot")),
        )
        for r in results
    )


def _cited(folder: Path | None, root: Path, kind: str, name: Any) -> Cited | None:
    if not name:
        return None
    name = str(name)
    if folder is None:
        return Cited(kind, name, None, "its session's folder is not known or not there")
    path, problem = inside(folder, name, kind)
    if path is None:
        return Cited(kind, name, None, problem)
    file = path.relative_to(root).as_posix()
    if kind == "screenshot":
        return (
            Cited(kind, name, file)
            if _is_png(path)
            else Cited(kind, name, None, f"{name} is not a PNG image")
        )
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            text = f.read(SNAPSHOT_CHARS + 1)
    except OSError as exc:
        return Cited(kind, name, None, f"{name} cannot be read: {exc.strerror}")
    return Cited(kind, name, file, "", cut(text, SNAPSHOT_CHARS))


def inside(folder: Path, name: str, kind: str) -> tuple[Path | None, str]:
    """The evidence file `name` of a session's folder, resolved, when it is a name the scheduler
    gives a `kind` and the file lies inside the folder's `evidence/` (no symbolic link followed);
    else None and why not."""
    if not NAME.match(name) or name.split("-", 1)[0] != kind:
        return None, f"{name!r} is not a name the scheduler gives a {kind}: not shown"
    box = folder / EVIDENCE_DIR
    if box.is_symlink():
        return None, f"the evidence folder of {folder.name} is a symbolic link: not followed"
    path = box / name
    if path.is_symlink():
        return None, f"{name} is a symbolic link: not followed"
    if not path.is_file():
        return None, f"{name} is missing from {folder.name}/{EVIDENCE_DIR}"
    resolved = path.resolve()
    if not resolved.is_relative_to(box.resolve()):
        return None, f"{name} lies outside {folder.name}/{EVIDENCE_DIR}: not shown"
    return resolved, ""


def _folder(root: Path, log_dir: str) -> tuple[Path | None, str]:
    """The session's folder (resolved) when it is there and inside the project's log folder."""
    path = root / log_dir
    logs = (root / LOG_DIR).resolve()
    if path.is_symlink() or not path.resolve().is_relative_to(logs) or not logs.is_relative_to(root):
        return None, f"the session folder {log_dir!r} is not inside {LOG_DIR}: not followed"
    if not path.is_dir():
        return None, f"the session folder {log_dir} is gone"
    return path.resolve(), ""


def _ledger(folder: Path) -> tuple[list[Call], list[str]]:
    """The browser calls of the session's ledger, and what of it could not be read."""
    path = folder / LEDGER
    if path.is_symlink():
        return [], [f"{folder.name}/{LEDGER} is a symbolic link: not followed"]
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        return [], [f"{folder.name}/{LEDGER} cannot be read: {exc.strerror}"]
    calls, bad = parse_ledger(text)
    return calls, [f"line {n} of {folder.name}/{LEDGER} {why}: skipped" for n, why in bad]


def _console(root: Path, folder: Path, name: str) -> tuple[ConsoleRead | None, str]:
    path, problem = inside(folder, name, KINDS["browser_console_messages"][0])
    if path is None:
        return None, problem
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return None, f"{name} cannot be read: {exc.strerror}"
    return ConsoleRead(name, path.relative_to(root).as_posix(), *cut_console(text)), ""


def console_lines(text: str) -> list[tuple[bool, str]]:
    """Each line of a console read, and whether it reports an error."""
    return [(bool(ERROR_LINE.match(line)), line) for line in text.splitlines()]


def cut_console(text: str) -> tuple[str, int, tuple[str, ...]]:
    """A console read's first whole lines (at most CONSOLE_CHARS; one longer line is cut), the
    characters left out, and the error lines among them (at most LATER_ERRORS, each cut)."""
    if len(text) <= CONSOLE_CHARS:
        return text, 0, ()
    end = text.rfind("\n", 0, CONSOLE_CHARS) + 1 or CONSOLE_CHARS
    later = [line for err, line in console_lines(text[end:]) if err]
    return text[:end], len(text) - end, tuple(cut(line, LINE_CHARS) for line in later[:LATER_ERRORS])


def _is_png(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(len(PNG)) == PNG
    except OSError:
        return False
