"""Several lanes over one backlog (pure): the schedule the authority keeps.

Each lane is a line of sessions (`machine.Lane`); all of them share one `Backlog`. A lane's
session is transitioned by the one `machine.transition`, over a view of the schedule in which
the features the other lanes hold are taken (`machine.Others`), so no feature is ever held by two
lanes; a feature is taken only once the features it depends on are merged, and an architecture
review only on a quiet `main` (no other lane holds work, the merge queue is empty). A lane that
may take nothing waits (`WAIT`), and is woken after every change. Session numbers are handed out
here, once each, whichever lane asks.

With several lanes a REVIEW's PASS approves the work (`Approved`) instead of merging it: it waits
in the merge queue (`Backlog.landing`), and only `landed` makes it pass; `sent_back` (a conflict
or a red test) counts as a rejection and hands the work, with the scheduler's review, to the next
free lane as a FIX. `passing` is the schedule's own: what landed. A lane whose approved merge is
expected to land as it is goes on from it (`stacked`) instead of waiting (`landing_of`); what it
began there is redone if that merge does not land as approved (`restarted`, `unready`). With one lane the schedule is
exactly `SessionState` (its REVIEW merges and tests, as always).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from session_scheduler.core.config import TERMINAL, AgentConfig, SessionType
from session_scheduler.core.machine import (
    Approved,
    ArchitectureDue,
    Backlog,
    Blocked,
    Done,
    Event,
    Lane,
    Merged,
    Others,
    Outcome,
    SessionState,
    WorkItem,
    architecture_due,
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
    cloned: bool = False
    """Every lane works in a clone and approved work lands through the merge queue, one lane
    included (run/lanes.py); False: one lane in the project folder, whose REVIEW merges."""

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
        busy = any(o.role not in IDLE for o in others) or bool(self.backlog.landing)
        return SessionState(
            self.backlog,
            self.lanes[lane],
            self.architecture_checked_at,
            self.session_count,
            self.halt_reason,
            Others(held, busy, len(self.lanes), any(o.role is T.INITIALIZER for o in others)),
        )

    @property
    def queued(self) -> bool:
        """Approved work lands through the merge queue (lanes in clones), not by its REVIEW."""
        return len(self.lanes) > 1 or self.cloned

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
    schedule: Schedule, lane: int, outcome: Outcome, config: AgentConfig, *, stack: bool = False
) -> tuple[Schedule, tuple[Event, ...]]:
    """Apply the verified outcome of lane `lane`'s session; then every waiting lane looks for
    work again (a merge may have freed a dependency, a rejection a feature, a quiet `main` an
    architecture review). A halt halts every lane. With the merge queue, a PASS approves; with
    `stack` (its merge is expected to land as it is) the lane goes on at once, on that merge
    (`stacked`), instead of waiting for it to land."""
    view = schedule.view(lane)
    if schedule.queued:  # what passes is what landed; approved work is the queue's, not open
        outcome = replace(outcome, passing=schedule.backlog.passing)
        work = view.lane.work
        if _approves(view.lane.role, outcome) and work is not None:
            landing = (*view.backlog.landing, work)  # and `main` is not quiet while it waits
            view = replace(
                view, backlog=replace(view.backlog, landing=landing), others=replace(view.others, busy=True)
            )
    step = transition(view, outcome, config)
    state, events = step.state, step.events
    if schedule.queued:
        events = tuple(Approved(e.work) if isinstance(e, Merged) else e for e in events)
        if _approves(view.lane.role, outcome) and work is not None:  # its next work starts on it
            # (and what the transition chose for it next stays for whoever takes it: sent-back work, a plan)
            backlog = replace(state.backlog, returned=view.backlog.returned, to_plan=view.backlog.to_plan)
            state = went_on(replace(state, lane=Lane(T.WAIT, work), backlog=backlog), work, config, stack)
    after = _apply(schedule, lane, state)
    if state.lane.role is T.HALTED:
        return replace(after, lanes=tuple(Lane(T.HALTED) for _ in after.lanes)), events
    woken, more = wake(after, config)
    return woken, (*events, *more)


def went_on(state: SessionState, approved: WorkItem, config: AgentConfig, stack: bool) -> SessionState:
    """A lane whose REVIEW just approved `approved` does not wait for it to land: it takes the
    next feature, or work the queue sent back, from `main`. With `stack` (its merge is expected
    to land as it is) it goes on from that merge (`stacked`): a feature that depends on the
    approved one may start. Anything else (a plan, an architecture review the approval makes
    due, the end of the project) waits for the landing, as it did (`landing_of`)."""
    return stacked(state, approved, config) if stack else _next_work(state, state.backlog.passing, config)


def stacked(state: SessionState, approved: WorkItem, config: AgentConfig) -> SessionState:
    """A lane whose REVIEW just approved `approved` goes on from that merge while it waits to
    land: it takes the next feature as if the approved one passed (a feature that depends on it
    may start), or work the queue sent back; else it waits for the landing (`went_on`). What it
    built on a merge that did not land as approved is redone (`restarted`)."""
    passing = state.backlog.passing
    return _next_work(state, passing | {approved.feature_id} if approved.feature_id else passing, config)


def _next_work(state: SessionState, passing: frozenset[str], config: AgentConfig) -> SessionState:
    """The feature or sent-back work a free lane takes, as if `passing` passed; else `state`."""
    ahead = replace(state.backlog, passing=passing)
    real = state.backlog.passing
    choice = choose_work(replace(state, backlog=ahead), config).state  # (its lane waits: free)
    if choice.lane.role not in (T.IMPLEMENT, T.FIX):
        return state
    return replace(choice, backlog=replace(choice.backlog, passing=real))


def restarted(schedule: Schedule, work: WorkItem, config: AgentConfig) -> tuple[Schedule, tuple[Event, ...]]:
    """Approved work that was built on another approved merge which did not land as approved (it
    was sent back or held): it leaves the merge queue and is done again from `main` (its branch
    is set aside by the caller). Not a rejection: the agent did what it was asked."""
    return wake(replace(schedule, backlog=_unqueued(schedule.backlog, work)), config)


def unready(schedule: Schedule, lane: int, config: AgentConfig) -> tuple[Schedule, tuple[Event, ...]]:
    """Lane `lane` was given a feature that depends on work its REVIEW approved, to begin on that
    approval's merge (`stacked`), and the merge did not land as it is before the lane began (it
    was sent back, held, or `main` moved): the lane gives the feature back and waits for what it
    depends on, as any lane would."""
    lanes = list(schedule.lanes)
    lanes[lane] = Lane(T.WAIT)
    return wake(replace(schedule, lanes=tuple(lanes)), config)


def _approves(role: SessionType, outcome: Outcome) -> bool:
    """The outcome is a verified PASS of a REVIEW (the transition merges its work)."""
    return role is T.REVIEW and outcome.ok and outcome.verdict == "PASS"


def landed(schedule: Schedule, work: WorkItem, config: AgentConfig) -> tuple[Schedule, tuple[Event, ...]]:
    """The merge queue landed approved work on `main`: a feature now passes (its dependents may start)."""
    backlog = _unqueued(schedule.backlog, work)
    if work.feature_id is not None:
        backlog = replace(backlog, passing=backlog.passing | {work.feature_id})
    woken, events = wake(replace(schedule, backlog=backlog), config)
    return woken, (Merged(work), *events)


def held(
    schedule: Schedule, work: WorkItem, why: str, config: AgentConfig
) -> tuple[Schedule, tuple[Event, ...]]:
    """A risk rule holds approved work for the person (`why`: the rule's words): it leaves the
    merge queue without landing, and lands when the person approves it (`released`)."""
    assert work.feature_id is not None, "only a feature is held"
    backlog = _unqueued(schedule.backlog, work)
    backlog = replace(backlog, held=(*backlog.held, (work.feature_id, why)))
    return wake(replace(schedule, backlog=backlog), config)


def released(schedule: Schedule, feature_id: str, config: AgentConfig) -> tuple[Schedule, tuple[Event, ...]]:
    """The person approved a held feature and it landed: it passes, and every lane that had
    finished looks for work again (what depends on it may start)."""
    backlog = schedule.backlog
    if feature_id not in {f for f, _ in backlog.held}:
        raise ValueError(f"{feature_id} is not held")
    backlog = replace(
        backlog,
        held=tuple((f, why) for f, why in backlog.held if f != feature_id),
        passing=backlog.passing | {feature_id},
    )
    lanes = tuple(Lane(T.WAIT) if lane.role is T.DONE else lane for lane in schedule.lanes)
    return wake(replace(schedule, backlog=backlog, lanes=lanes), config)


def sent_back(
    schedule: Schedule, work: WorkItem, review_id: int, config: AgentConfig, *, rejection: bool = True
) -> tuple[Schedule, tuple[Event, ...]]:
    """The merge queue could not land approved work (a conflict, a red test; `review_id`: the
    scheduler's review saying so): unless that blocks it, the next free lane FIXes it against that
    review. A red test counts as a rejection; a textual conflict (`rejection=False`) does not: it
    is what building side by side costs, not the agent's fault, and its FIX merges `main`."""
    backlog = _unqueued(schedule.backlog, work)
    events: tuple[Event, ...] = ()
    if work.feature_id is not None and rejection:
        before = backlog.blocked
        backlog = backlog.reject(work.feature_id, config.max_rejections)
        if work.feature_id in backlog.blocked:
            events = (
                Blocked(work.feature_id),
                *(
                    Blocked(f, because=work.feature_id)
                    for f in backlog.dependents(work.feature_id)
                    if f in backlog.blocked and f not in before
                ),
            )
    if not events:
        backlog = replace(backlog, returned=(*backlog.returned, (work, review_id)))
    woken, more = wake(replace(schedule, backlog=backlog), config)
    return woken, (*events, *more)


def _unqueued(backlog: Backlog, work: WorkItem) -> Backlog:
    if work not in backlog.landing:
        raise ValueError(f"{work} is not in the merge queue")
    return replace(backlog, landing=tuple(w for w in backlog.landing if w != work))


def wake(schedule: Schedule, config: AgentConfig) -> tuple[Schedule, tuple[Event, ...]]:
    """Every waiting lane chooses its work again, in lane order, each seeing what the ones
    before it took (a lane that just chose to wait chooses the same again)."""
    events: tuple[Event, ...] = ()
    if not schedule.backlog.features:  # the INITIALIZER has not listed them yet
        return schedule, events
    for n, lane in enumerate(schedule.lanes):
        if lane.role is not T.WAIT or landing_of(schedule, n):
            continue
        step = choose_work(schedule.view(n), config)
        schedule = _apply(schedule, n, step.state)
        events += step.events
    return _review_before_done(schedule, config, events)


def landing_of(schedule: Schedule, lane: int) -> WorkItem | None:
    """The approved work lane `lane` waits to see land (or sent back) before it takes other work:
    its next session starts on a `main` that holds it, as a lane whose REVIEW merged always did
    (the queue lands the REVIEW's own merge at once when `main` has not moved)."""
    work = schedule.lanes[lane].work
    waits = schedule.lanes[lane].role is T.WAIT and work is not None
    return work if waits and work in schedule.backlog.landing else None


def _review_before_done(
    schedule: Schedule, config: AgentConfig, events: tuple[Event, ...]
) -> tuple[Schedule, tuple[Event, ...]]:
    """With several lanes, an architecture review that fell due while other lanes held work (it
    waits for a quiet `main`) runs once they are all done, in lane 0, before the project is. One
    lane never held work while another did: a project whose last feature completes the interval
    is done without it, as it always was."""
    if len(schedule.lanes) == 1 or any(lane.role is not T.DONE for lane in schedule.lanes):
        return schedule, events
    if not architecture_due(schedule.view(0), config):
        return schedule, events
    lanes = (Lane(T.ARCHITECTURE), *schedule.lanes[1:])
    due = ArchitectureDue(schedule.backlog.completed)
    return replace(schedule, lanes=lanes), (*(e for e in events if not isinstance(e, Done)), due)


MEMORY_PER_LANE = 1 << 30
"""What one lane needs of the machine's memory: its Claude Code process (about 270 MB), the
agent's builds and test runs, and the scheduler's share."""


def lanes_refusal(lanes: int, available_bytes: int | None) -> str | None:
    """Why this machine cannot hold `lanes` lanes (None: it can, or cannot say)."""
    if lanes < 2 or available_bytes is None:
        return None
    fits = max(1, available_bytes // MEMORY_PER_LANE)
    if lanes <= fits:
        return None
    gib = available_bytes / (1 << 30)
    return (
        f"--lanes {lanes} needs about {lanes * MEMORY_PER_LANE >> 30} GiB of free memory (1 GiB a lane: "
        f"a Claude Code process, the agent's builds and tests), but this machine has {gib:.1f} GiB free; "
        f"use --lanes {fits} or fewer"
    )


def resumed(schedule: Schedule) -> Schedule:
    """The schedule a new run starts from: a halted run tries its INITIALIZER again (in lane 0;
    the others wait for its feature list), as one lane does (`machine.resume`)."""
    if not any(lane.role is T.HALTED for lane in schedule.lanes):
        return schedule
    waiting = (Lane(T.WAIT),) * (len(schedule.lanes) - 1)
    return replace(schedule, lanes=(Lane(T.INITIALIZER), *waiting), halt_reason="")


def planning(schedule: Schedule) -> bool:
    """A lane plans the features of a spec, or will when it is next free."""
    return schedule.backlog.to_plan or any(lane.role is T.INITIALIZER for lane in schedule.lanes)


def extended(schedule: Schedule, config: AgentConfig) -> Schedule:
    """The schedule once a newer spec waits to be planned into features: the next lane free to
    choose plans it (a finished project's lanes look for work again), the others go on with the
    features already listed. A schedule that plans already, or has no feature list yet (its
    first INITIALIZER reads the newest spec), is returned as it is."""
    if planning(schedule) or not schedule.backlog.features or schedule.halt_reason:
        return schedule
    backlog = replace(schedule.backlog, to_plan=True)
    lanes = tuple(Lane(T.WAIT) if lane.role is T.DONE else lane for lane in schedule.lanes)
    return wake(replace(schedule, backlog=backlog, lanes=lanes), config)[0]


def resized(schedule: Schedule, lanes: int) -> Schedule:
    """The schedule with `lanes` lanes: lanes added wait for work; a lane removed must hold
    nothing, and one lane (whose REVIEW merges) needs the merge queue empty. ValueError says why not."""
    count = len(schedule.lanes)
    if lanes >= count:
        return replace(schedule, lanes=(*schedule.lanes, *([Lane(T.WAIT)] * (lanes - count))))
    busy = [n for n in range(lanes, count) if schedule.lanes[n].role not in IDLE]
    if busy:
        held = ", ".join(
            f"lane {n} ({schedule.lanes[n].role.value} {_work_name(schedule.lanes[n].work)})" for n in busy
        )
        raise ValueError(f"{held} still hold work; run with --lanes {count} until they are done")
    if lanes == 1 and schedule.backlog.landing and not schedule.cloned:
        raise ValueError(
            f"{len(schedule.backlog.landing)} approved work item(s) wait in the merge queue; "
            f"run with --lanes {count} until they have landed"
        )
    return replace(schedule, lanes=schedule.lanes[:lanes])  # `wake` gives a waiting lane 0 work


def _work_name(work: WorkItem | None) -> str:
    if work is None:
        return ""
    return work.feature_id or work.branch
