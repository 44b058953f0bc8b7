"""Several lanes over one backlog (pure): the schedule the authority keeps.

Each lane is a line of sessions (`machine.Lane`); all of them share one `Backlog`. A lane's
session is transitioned by the one `machine.transition`, over a view of the schedule in which
the features the other lanes hold are taken (`machine.Others`), so no feature is ever held by two
lanes; a feature is taken only once the features it depends on are merged, and an architecture
review only on a quiet `main` (no other lane holds work). A lane that may take nothing waits
(`WAIT`), and is woken after every transition of another lane. Session numbers are handed out
here, once each, whichever lane asks. With one lane the schedule is exactly `SessionState`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from session_scheduler.core.config import TERMINAL, AgentConfig, SessionType
from session_scheduler.core.machine import (
    Backlog,
    Event,
    Lane,
    Others,
    Outcome,
    SessionState,
    choose_work,
    transition,
)

T = SessionType
IDLE = frozenset({T.WAIT, *TERMINAL})
"""The roles of a lane that holds nothing."""


@dataclass(frozen=True)
class Schedule:
    """The backlog, every lane, and the counters they share."""

    backlog: Backlog = field(default_factory=Backlog)
    lanes: tuple[Lane, ...] = (Lane(),)
    architecture_checked_at: int = 0
    session_count: int = 0
    """Sessions that counted (were transitioned), of every lane."""
    issued: int = 0
    """The largest session number handed out (a session keeps its number when it runs again)."""
    halt_reason: str = ""

    @classmethod
    def of(cls, state: SessionState, lanes: int = 1) -> Schedule:
        """A one-lane state as lane 0 of `lanes` lanes; the others wait (`wake` gives them work;
        before the feature list the INITIALIZER runs alone)."""
        if lanes < 1:
            raise ValueError("a schedule has at least one lane")
        schedule = cls(
            state.backlog,
            (state.lane, *([Lane(T.WAIT)] * (lanes - 1))),
            state.architecture_checked_at,
            state.session_count,
            state.session_count,
            state.halt_reason,
        )
        return schedule

    def holder(self, feature_id: str) -> int | None:
        """The lane that holds a feature (its claim), if one does."""
        return next(
            (n for n, lane in enumerate(self.lanes) if lane.work and lane.work.feature_id == feature_id),
            None,
        )

    def view(self, lane: int) -> SessionState:
        """Lane `lane`'s state: the shared backlog and counters, its own lane, and what the others hold."""
        others = [other for n, other in enumerate(self.lanes) if n != lane]
        held = frozenset(o.work.feature_id for o in others if o.work and o.work.feature_id is not None)
        busy = any(o.role not in IDLE for o in others)
        return SessionState(
            self.backlog,
            self.lanes[lane],
            self.architecture_checked_at,
            self.session_count,
            self.halt_reason,
            Others(held, busy),
        )

    @property
    def settled(self) -> bool:
        """Every lane is done (the backlog is settled) or the run halted."""
        return all(lane.role in TERMINAL for lane in self.lanes)

    def issue(self) -> tuple[Schedule, int]:
        """The next session number, handed out once (to whichever lane starts a session)."""
        number = self.issued + 1
        return replace(self, issued=number), number


def _apply(schedule: Schedule, lane: int, state: SessionState) -> Schedule:
    """A lane's new state written back into the schedule (the shared parts are the state's)."""
    lanes = list(schedule.lanes)
    lanes[lane] = state.lane
    return replace(
        schedule,
        backlog=state.backlog,
        lanes=tuple(lanes),
        architecture_checked_at=state.architecture_checked_at,
        session_count=state.session_count,
        halt_reason=state.halt_reason,
    )


def transition_lane(
    schedule: Schedule, lane: int, outcome: Outcome, config: AgentConfig
) -> tuple[Schedule, tuple[Event, ...]]:
    """Apply the verified outcome of lane `lane`'s session; then every waiting lane looks for
    work again (a merge may have freed a dependency, a rejection a feature, a quiet `main` an
    architecture review). A halt halts every lane."""
    step = transition(schedule.view(lane), outcome, config)
    after = _apply(schedule, lane, step.state)
    if step.state.lane.role is T.HALTED:
        return replace(after, lanes=tuple(Lane(T.HALTED) for _ in after.lanes)), step.events
    woken, events = wake(after, config)
    return woken, (*step.events, *events)


def wake(schedule: Schedule, config: AgentConfig) -> tuple[Schedule, tuple[Event, ...]]:
    """Every waiting lane chooses its work again, in lane order, each seeing what the ones
    before it took (a lane that just chose to wait chooses the same again)."""
    events: tuple[Event, ...] = ()
    if not schedule.backlog.features:  # the INITIALIZER has not listed them yet
        return schedule, events
    for n, lane in enumerate(schedule.lanes):
        if lane.role is not T.WAIT:
            continue
        step = choose_work(schedule.view(n), config)
        schedule = _apply(schedule, n, step.state)
        events += step.events
    return schedule, events
