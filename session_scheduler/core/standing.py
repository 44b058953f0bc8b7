"""How a session ended (its `Standing`) and what that leads to (`CONSEQUENCES`): one table (pure).

run/classify decides a result's standing; the loop (run/lanes) only applies the standing's
consequence; the event fold (store/events) counts the standings the table counts. A standing's
value is what the event log and the state file record.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Standing(Enum):
    VERIFIED = "verified"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    USAGE_LIMIT = "usage_limit"
    OUTAGE = "outage"
    SANDBOX = "sandbox"
    BROWSER = "browser"
    BUDGET = "budget"
    AUTH = "auth"

    @property
    def consequence(self) -> Consequence:
        return CONSEQUENCES[self]

    @property
    def counted(self) -> bool:
        """Counts as a session of its role (and, when FAILED, as an attempt)."""
        return self.consequence.then is Then.TRANSITION

    @property
    def stops_the_run(self) -> bool:
        return self.consequence.then in (Then.STOP, Then.RAISE)


class Then(Enum):
    """What the loop does after a session of a standing."""

    TRANSITION = "transition"
    """Counted: its verified outcome goes through `machine.transition`."""
    RERUN = "rerun"
    """Not counted: saved as in flight, and run again from the same start (its hand-off files
    restored from its own copies, its folder kept aside), after its `wait`."""
    RERUN_FRESH = "rerun_fresh"
    """Not counted: verification undid it; its folder is kept aside and it runs again at once,
    `retries` times in one run, then the run stops with `stop`."""
    STOP = "stop"
    """Not counted: the run stops with a resumable limit (exit 3), `stop` after the reason."""
    RAISE = "raise"
    """Not counted: the run stops with an error a person must act on (exit 1)."""


class Wait(Enum):
    """How long a RERUN waits before it runs again."""

    NONE = "none"
    RESET = "reset"
    """Until the usage limit resets (and a margin); `--no-wait` stops the run instead."""
    BACKOFF = "backoff"
    """An outage's back-off; the run stops when the outage outlasts `--max-outage-minutes`."""


@dataclass(frozen=True)
class Consequence:
    then: Then
    wait: Wait = Wait.NONE
    retries: int = 0
    """RERUN_FRESH: reruns in one run before it stops."""
    stop: str = ""
    """STOP, RERUN_FRESH: what the run's last line says (after the reason for STOP)."""
    note: str = ""
    """RERUN_FRESH: the line said before it runs again."""


SANDBOX_STOP = (
    "Claude Code's OS sandbox kept failing to start (see `--check`; a heavily loaded machine can "
    "delay its socat bridges); run the same command again"
)

BROWSER_STOP = (
    "the app or the browser for a web feature's REVIEW did not start (its reason above; the "
    "session's app.log and browser.log say more; `--check` checks Chromium and the browser's "
    "server); fix it and run the same command again"
)

CONSEQUENCES: dict[Standing, Consequence] = {
    Standing.VERIFIED: Consequence(Then.TRANSITION),
    Standing.FAILED: Consequence(Then.TRANSITION),
    Standing.INTERRUPTED: Consequence(Then.RERUN),
    Standing.USAGE_LIMIT: Consequence(Then.RERUN, Wait.RESET),
    Standing.OUTAGE: Consequence(Then.RERUN, Wait.BACKOFF),
    Standing.SANDBOX: Consequence(
        Then.RERUN_FRESH,
        retries=2,
        stop=SANDBOX_STOP,
        note="the OS sandbox failed to start for this session; running it again",
    ),
    Standing.BROWSER: Consequence(
        Then.RERUN_FRESH,
        retries=1,
        stop=BROWSER_STOP,
        note="the browser for this REVIEW did not start; running the session again",
    ),
    Standing.BUDGET: Consequence(
        Then.STOP, stop="raise --max-budget-usd and run the same command again to resume"
    ),
    Standing.AUTH: Consequence(Then.RAISE),
}
"""What each standing leads to: the one place the loop reads it from."""

COUNTED: frozenset[str] = frozenset(s.value for s in Standing if s.counted)
"""The recorded standings that count as a session of their role."""
