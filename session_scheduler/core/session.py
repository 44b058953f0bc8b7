"""One session's records as values (pure): `InFlight`, where a lane's session in flight started
(what a rerun needs; the state file's `in_flight`, keyed by lane), and `SessionFolder`, every name
in a session's folder under `.agent_logs/`, written once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from session_scheduler.core.config import SessionType
from session_scheduler.core.layout import LOG_DIR

LANE = 0
"""The one lane sessions run in today (a lane's records are keyed by its id)."""


REATTACHED = "reattached"
"""The cause of a `resumed` event whose session an engine still held after its run was killed:
awaited, not run again."""


@dataclass(frozen=True)
class InFlight:
    """Where the session in flight started: set while it runs, and after it was cut short until
    its rerun is verified (`why`: its standing; `wait_until`: when it may run again).

    Its saved form (`to_json`) is one value of the state file's `in_flight` object (keyed by its
    lane), key for key and in the order every earlier version wrote its `in_progress` object;
    `from_json` reads every earlier form."""

    number: int
    log_dir: str
    main: str
    branch_tip: str | None
    heads: Mapping[str, str] = field(default_factory=dict)
    """The branches that differ from the copy of packed-refs in `copies` (every branch in older records)."""
    heads_gone: tuple[str, ...] | None = None
    """Packed branches that are gone (None: an older record, whose `heads` lists every branch)."""
    copies: str | None = None
    """The restore point the rerun restores the hand-off files from (older records: the folder's pre/)."""
    why: str | None = None
    wait_until: float | None = None
    lane: int = LANE
    attempt: int = 1
    """Which run of the session this is: one more each time it runs again (core/engine.workflow_id)."""

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None, lane: int = LANE) -> InFlight | None:
        """The saved form of `lane`'s session read back (the state file's schema checked it)."""
        if data is None:
            return None
        gone = data.get("heads_gone")
        return cls(
            number=int(data["number"]),
            log_dir=str(data["log_dir"]),
            main=str(data["main"]),
            branch_tip=data.get("branch_tip"),
            heads=dict(data.get("heads") or {}),
            heads_gone=None if gone is None else tuple(gone),
            copies=data.get("copies"),
            why=data.get("why"),
            wait_until=data.get("wait_until"),
            lane=lane,
            attempt=int(data.get("attempt", 1)),
        )

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "number": self.number,
            "log_dir": self.log_dir,
            "main": self.main,
            "branch_tip": self.branch_tip,
            "heads": dict(self.heads),
        }
        if self.heads_gone is not None:
            data["heads_gone"] = list(self.heads_gone)
        if self.copies is not None:
            data["copies"] = self.copies
        if self.why is not None:
            data["why"] = self.why
        if self.wait_until is not None:
            data["wait_until"] = self.wait_until
        if self.attempt != 1:
            data["attempt"] = self.attempt
        return data

    @property
    def heads_record(self) -> dict[str, Any]:
        """`heads` and `heads_gone` as `verify.heads_of` reads them."""
        record: dict[str, Any] = {"heads": dict(self.heads)}
        if self.heads_gone is not None:
            record["heads_gone"] = list(self.heads_gone)
        return record

    def cut(self, why: str, wait_until: float | None = None) -> InFlight:
        """The same start, cut short for `why` (to run again after `wait_until`)."""
        return replace(self, why=why, wait_until=wait_until)


Flights = Mapping[int, InFlight]
"""The sessions in flight, by lane (a lane with none has no entry)."""


def flights_from_json(data: Mapping[str, Any]) -> dict[int, InFlight]:
    """The state file's `in_flight` object (lane id as text -> saved form) read back."""
    flights = {int(lane): InFlight.from_json(form, int(lane)) for lane, form in data.items()}
    return {lane: flight for lane, flight in sorted(flights.items()) if flight is not None}


def flights_to_json(flights: Flights) -> dict[str, Any]:
    """The state file's `in_flight` object: each lane's session by its lane id, lanes in order."""
    return {str(lane): flights[lane].to_json() for lane in sorted(flights)}


@dataclass(frozen=True)
class SessionFolder:
    """A session's folder, `.agent_logs/session_NNNN_ROLE/`, and every file in it."""

    path: Path

    PREFIX = "session_"
    RESULT = "result.json"
    TRANSCRIPT = "transcript.jsonl"
    CLI_STDERR = "cli_stderr.log"
    DENIALS = "denials.jsonl"
    CHANGES = "changes.json"
    STATE = "state.json"
    PRE = "pre"
    POST = "post"
    ASIDE = ".interrupted-"
    """A folder set aside for a rerun is named `<folder>.interrupted-<why>-<ns>`."""

    @classmethod
    def of(cls, project: Path, number: int, role: SessionType) -> SessionFolder:
        return cls(project / LOG_DIR / f"{cls.PREFIX}{number:04d}_{role.value}")

    @classmethod
    def glob_of(cls, number: int | None = None) -> str:
        """The pattern (inside LOG_DIR) of every session's folder, or of session `number`'s."""
        return f"{cls.PREFIX}*" if number is None else f"{cls.PREFIX}{number:04d}_*"

    @staticmethod
    def is_set_aside(path: Path) -> bool:
        return "." in path.name

    def aside(self, why: str, ns: int) -> Path:
        """Where the folder goes when it is set aside for a rerun."""
        return self.path.with_name(f"{self.path.name}{self.ASIDE}{why}-{ns}")

    def set_aside_copies(self) -> list[Path]:
        """This folder's earlier set-aside copies that still hold their `pre/`, oldest first."""
        return sorted(
            p for p in self.path.parent.glob(self.path.name + self.ASIDE + "*") if (p / self.PRE).is_dir()
        )

    @property
    def result(self) -> Path:
        return self.path / self.RESULT

    @property
    def transcript(self) -> Path:
        return self.path / self.TRANSCRIPT

    @property
    def cli_stderr(self) -> Path:
        return self.path / self.CLI_STDERR

    @property
    def denials(self) -> Path:
        return self.path / self.DENIALS

    @property
    def changes(self) -> Path:
        return self.path / self.CHANGES

    @property
    def state(self) -> Path:
        return self.path / self.STATE

    @property
    def pre(self) -> Path:
        return self.path / self.PRE

    @property
    def post(self) -> Path:
        return self.path / self.POST
