"""The run's event log, `.agent_logs/events.jsonl`: one JSON object a line, only ever appended.

Every figure a person reads about a project (the run summary, `status`, `report`) is a fold of
this log (`Totals`); no second copy of the totals is kept anywhere. Each event has `v` (the
schema version), `ts` (epoch seconds), `run` (the invocation that wrote it) and `kind`, plus
the fields `FIELDS` names for its kind (docs/events.md describes each one).

A line torn by a kill mid-write is skipped on read, and the next append starts a new line, so
one torn event never spoils the next.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from session_scheduler.core.clock import Clock, SystemClock
from session_scheduler.core.layout import EVENTS_FILE, LOG_DIR
from session_scheduler.core.standing import COUNTED as COUNTED  # re-exported: the fold counts these
from session_scheduler.store import crashpoints

VERSION = 1

FIELDS: dict[str, tuple[str, ...]] = {
    "run_started": ("pid", "project", "version", "cost_basis"),
    "run_ended": ("status", "message", "sessions"),
    "session_started": ("session", "role", "model", "feature", "branch", "attempt", "log_dir", "lane"),
    "session_ended": ("session", "role", "feature", "standing", "reason", "receipt"),
    "resumed": ("session", "role", "cause"),
    "features_listed": ("session", "features"),
    "verdict": ("session", "feature", "review_id", "verdict"),
    "merge_verified": ("session", "feature", "branch", "commit", "tests"),
    "undo": ("session", "reason"),
    "denial": ("session", "role", "tool", "input", "rule"),
    "limit_wait": ("session", "why", "until"),
    "feature_blocked": ("feature", "rejections"),
    "budget_reached": ("which", "budget_usd", "spent_usd"),
    "set_aside": ("ref", "message"),
    "sent_back": ("feature", "branch", "why", "review_id"),
    "approved": ("features", "onto", "commit"),
    "held": ("feature", "branch", "why"),
    "gates_ran": ("where", "passed", "gates", "red"),
}
"""Every kind of event and the fields it carries (besides v, ts, run, kind)."""
SENT_BACK_BY_PERSON = "person"
"""The `why` of a `sent_back` event the person's `send-back` (or a closed pull request) wrote."""

CUT_BY = {
    "kill": "killed with its run",
    "interrupt": "stopped with its run (Ctrl-C or a stop signal)",
    "idle_timeout": "stopped by the idle timeout",
    "session_timeout": "stopped by the session timeout",
    "api_error": "stopped at an API error",
    "no_result": "ended without a result from Claude Code",
}
"""What cut a session, as a person reads it (the `by` of a session_ended event's `cut`)."""

NOTIFY_KINDS = frozenset({"run_ended", "feature_blocked", "budget_reached", "limit_wait", "resumed"})
"""The events a person cares about: those `--notify` runs its command on."""

ROLES = ("INITIALIZER", "IMPLEMENT", "REVIEW", "FIX", "ARCHITECTURE")
"""The roles in the order a project meets them: every listing by role uses it (stable across runs)."""


def role_order(role: str) -> tuple[int, str]:
    """The sort key of a role: its place in ROLES, then (an unknown role) its name."""
    return (ROLES.index(role) if role in ROLES else len(ROLES), role)


RECEIPT_TOKENS = ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")

Event = dict[str, Any]
Listener = Callable[[Event], None]


def log_path(project: Path) -> Path:
    return project / LOG_DIR / EVENTS_FILE


def new_run_id(clock: Clock | None = None) -> str:
    """An invocation's id: when it started (on `clock`, the system's by default) and its process,
    readable and unique on one machine."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime((clock or SystemClock()).now()))
    return f"{stamp}-{os.getpid()}"


def make_event(kind: str, run: str, ts: float, fields: dict[str, Any]) -> Event:
    """One event, checked against `FIELDS` (a missing field is a bug in the caller)."""
    expected = FIELDS.get(kind)
    if expected is None:
        raise ValueError(f"unknown event kind {kind!r}")
    missing = [name for name in expected if name not in fields]
    if missing:
        raise ValueError(f"event {kind} lacks {', '.join(missing)}")
    return {"v": VERSION, "ts": round(ts, 3), "run": run, "kind": kind, **fields}


class EventLog:
    """Appends this invocation's events and hands each one to the listeners (the console, the
    notifier, the running totals). Side effect: one appended line per event, put on disk
    (fsync) by `sync`: the scheduler syncs before each save of its state file, so a power cut
    never leaves a state that is ahead of the log."""

    def __init__(self, project: Path, run: str, *, clock: Callable[[], float] = time.time) -> None:
        self.path = log_path(project)
        self.run = run
        self._clock = clock
        self._listeners: list[Listener] = []
        self._unsynced = False

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def emit(self, kind: str, **fields: Any) -> Event:
        event = make_event(kind, self.run, self._clock(), fields)
        append(self.path, event, durable=False)
        self._unsynced = True
        for listener in self._listeners:  # the event is on disk: a failing listener never stops the run
            try:
                listener(event)
            except Exception as exc:
                sys.stderr.write(f"WARNING: a listener of the event log failed on {kind}: {exc!r}\n")
        return event

    def sync(self) -> None:
        """Put the events appended so far on disk (one fsync, none when there is nothing new)."""
        if not self._unsynced:
            return
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._unsynced = False


def append(path: Path, event: Event, *, durable: bool = True) -> None:
    """Append one line; a torn line left by a killed writer is closed first. A killed process
    loses nothing written; `durable` (fsync) keeps the line through a power cut too."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(event, separators=(",", ":"), allow_nan=False) + "\n"
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = "\n" + line
        data = line.encode("utf-8")
        half = len(data) // 2
        os.write(fd, data[:half])
        crashpoints.reached("event_half_written")
        os.write(fd, data[half:])
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)


def read(path: Path) -> list[Event]:
    """Every whole event in the log (a torn or foreign line is skipped); [] when there is none."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    return list(parse(raw.splitlines()))


def parse(lines: Iterable[bytes]) -> Iterator[Event]:
    for line in lines:
        try:
            event = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(event, dict) and event.get("kind") in FIELDS:
            yield event


def owner(event: Event) -> str:
    """The invocation an event belongs to: the run that wrote it, except the end of a session cut
    off by a kill, which the next run records on behalf of the run the session belonged to."""
    cut = event.get("cut")
    return str((cut.get("run") if isinstance(cut, dict) else None) or event.get("run"))


# -- the fold -------------------------------------------------------------------------------------


def _tokens() -> dict[str, int]:
    return dict.fromkeys(RECEIPT_TOKENS, 0)


def lane_of(event: Event) -> int:
    """The lane a session's event belongs to (0 for events of a version before lanes)."""
    return int(event.get("lane") or 0)


@dataclass
class Spend:
    """Sessions, cost and tokens of one group (a role, a feature, the project)."""

    sessions: int = 0
    failed: int = 0
    cost_usd: float = 0.0
    tokens: dict[str, int] = field(default_factory=_tokens)

    def add(self, receipt: dict[str, Any]) -> None:
        self.cost_usd += float(receipt.get("cost_usd") or 0.0)
        for key in RECEIPT_TOKENS:
            self.tokens[key] += int(receipt.get(key) or 0)

    @property
    def total_tokens(self) -> int:
        return sum(self.tokens.values())


@dataclass
class Totals:
    """What the events add up to. `apply` folds one event in; `of` folds a whole log.

    A session number can end more than once (a kill between its end and the state save makes
    it run again): money and tokens add up over every end, while the session counts once, as
    its last end says.
    """

    spend: Spend = field(default_factory=Spend)
    by_role: dict[str, Spend] = field(default_factory=dict)
    by_feature: dict[str, Spend] = field(default_factory=dict)
    standings: dict[int, tuple[str, str, str | None]] = field(default_factory=dict)
    """Session number -> (role, standing, feature) of its last end."""
    not_counted: dict[str, int] = field(default_factory=dict)
    denials_by_role: dict[str, int] = field(default_factory=dict)
    features: tuple[str, ...] = ()
    passing: dict[str, float] = field(default_factory=dict)
    """Feature -> when its merge was verified."""
    blocked: dict[str, float] = field(default_factory=dict)
    evidence: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Feature -> its merge commit, review and test result."""
    ended: list[Event] = field(default_factory=list)
    """Every session_ended event, oldest first."""
    in_flight: dict[int, Event] = field(default_factory=dict)
    """By lane, the session_started event of its session that has not ended: running, or killed
    with its run (then the next run records its end when it runs it again). An event of a version
    before lanes is lane 0's."""
    waiting: Event | None = None
    """The last limit_wait, until a session starts again."""
    set_aside: list[Event] = field(default_factory=list)
    """Uncommitted work the scheduler stashed (git stash refs)."""
    cut: list[Event] = field(default_factory=list)
    """The session_ended events of sessions cut off before the CLI reported (a `cut` field:
    by what, the run they belonged to, their last recorded activity), oldest first."""
    started_runs: dict[int, str] = field(default_factory=dict)
    """Session number -> the run its last start belongs to."""
    first_ts: float | None = None
    last_ts: float | None = None
    run_started: Event | None = None
    run_ended: Event | None = None
    run: str | None = None
    """Fold only the events that belong to this invocation (None: every event)."""

    @classmethod
    def of(cls, events: Iterable[Event], run: str | None = None) -> Totals:
        """The fold of `events`; only those that belong to invocation `run` when it is given."""
        totals = cls(run=run)
        for event in events:
            totals.apply(event)
        return totals

    def apply(self, event: Event) -> None:
        if self.run is not None and owner(event) != self.run:
            return
        kind, ts = event["kind"], float(event.get("ts", 0.0))
        self.first_ts = ts if self.first_ts is None else self.first_ts
        self.last_ts = ts
        handler = getattr(self, f"_on_{kind}", None)
        if handler is not None:
            handler(event)

    def _on_run_started(self, event: Event) -> None:
        self.run_started, self.run_ended = event, None

    def _on_run_ended(self, event: Event) -> None:
        self.run_ended, self.waiting = event, None

    def _on_session_started(self, event: Event) -> None:
        self.in_flight[lane_of(event)], self.waiting = event, None
        self.started_runs[int(event["session"])] = str(event.get("run"))

    def _on_session_ended(self, event: Event) -> None:
        receipt, role, feature = event["receipt"], event["role"], event.get("feature")
        number, standing = int(event["session"]), event["standing"]
        groups = [self.spend, self.by_role.setdefault(role, Spend())]
        if feature:
            groups.append(self.by_feature.setdefault(feature, Spend()))
        earlier = self.standings.get(number)
        for group in groups:
            group.add(receipt)
            if earlier is not None and earlier[1] in COUNTED:  # the session counts once, as it last ended
                group.sessions -= 1
                group.failed -= earlier[1] == "failed"
            if standing in COUNTED:
                group.sessions += 1
                group.failed += standing == "failed"
        if standing not in COUNTED:
            self.not_counted[standing] = self.not_counted.get(standing, 0) + 1
        self.standings[number] = (role, standing, feature)
        self.ended.append(event)
        if isinstance(event.get("cut"), dict):
            self.cut.append(event)
        lane = next((n for n, started in self.in_flight.items() if started.get("session") == number), None)
        if lane is not None:
            del self.in_flight[lane]

    @property
    def flight(self) -> Event | None:
        """The session in flight that started last (of any lane), or None."""
        return max(self.in_flight.values(), key=lambda e: float(e.get("ts", 0.0)), default=None)

    def _on_features_listed(self, event: Event) -> None:
        self.features = tuple(event["features"])

    def _on_verdict(self, event: Event) -> None:
        feature = event.get("feature")
        if feature:
            self.evidence.setdefault(feature, {}).update(
                review_id=event["review_id"], verdict=event["verdict"]
            )

    def _on_merge_verified(self, event: Event) -> None:
        feature = event.get("feature")
        if feature:
            self.passing[feature] = float(event["ts"])
            self.evidence.setdefault(feature, {}).update(commit=event["commit"], tests=event["tests"])

    def _on_sent_back(self, event: Event) -> None:
        if event.get("why") == SENT_BACK_BY_PERSON:  # taken off where it had landed: it passes no more
            self.passing.pop(str(event["feature"]), None)

    def _on_feature_blocked(self, event: Event) -> None:
        self.blocked[event["feature"]] = float(event["ts"])

    def _on_denial(self, event: Event) -> None:
        self.denials_by_role[event["role"]] = self.denials_by_role.get(event["role"], 0) + 1

    def _on_limit_wait(self, event: Event) -> None:
        self.waiting = event

    def _on_set_aside(self, event: Event) -> None:
        self.set_aside.append(event)

    @property
    def sessions_by_role(self) -> dict[str, int]:
        return {
            role: self.by_role[role].sessions
            for role in sorted(self.by_role, key=role_order)
            if self.by_role[role].sessions
        }

    @property
    def sessions(self) -> int:
        return self.spend.sessions

    @property
    def failed(self) -> int:
        return self.spend.failed

    @property
    def cost_usd(self) -> float:
        return self.spend.cost_usd

    def recent(self, n: int = 5) -> list[Event]:
        return self.ended[-n:]

    def sessions_of_feature(self, feature: str, role: str) -> int:
        """How many counted sessions of `role` worked on `feature` (its attempts, for IMPLEMENT)."""
        return sum(1 for r, s, f in self.standings.values() if f == feature and r == role and s in COUNTED)
