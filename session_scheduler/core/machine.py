"""The session state machine: one pure transition from a verified outcome to the next state.

`transition(state, outcome, config)` applies what the scheduler verified about the session
that just ran and returns the new state together with the events it implies; the loop acts
on the events (deleting a rejected branch, printing a block) and never compares states.
The rules read like DESIGN.md's table; `get_next_session_type` is derived from them.

The state is split for later parallel lanes: a `Backlog` (the feature set, shared) and a
`Lane` (one line of sessions working one item at a time). Nothing here reads a file.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any, Literal

from session_scheduler.core.config import AgentConfig, SessionType
from session_scheduler.core.gates import GateResult
from session_scheduler.core.humane import plural

Verdict = Literal["PASS", "REQUEST_CHANGES", "REJECT"]
T = SessionType


# -- what a session works on -----------------------------------------------------------------


FEATURE_BRANCH, ARCHITECTURE_BRANCH = "feature/", "arch/"
WORK_BRANCHES = (FEATURE_BRANCH, ARCHITECTURE_BRANCH)
"""The prefixes of the branches sessions work on: the scheduler's namespace in the repository."""


@dataclass(frozen=True)
class WorkItem:
    """One feature, or the fixes an architecture review asked for; exactly one is set."""

    feature_id: str | None = None
    architecture_review: int | None = None

    def __post_init__(self) -> None:
        if (self.feature_id is None) == (self.architecture_review is None):
            raise ValueError("a work item is a feature or an architecture review's fixes, not both")

    @property
    def branch(self) -> str:
        if self.feature_id is not None:
            return f"{FEATURE_BRANCH}{self.feature_id}"
        return f"{ARCHITECTURE_BRANCH}{self.architecture_review}"

    def __str__(self) -> str:
        return self.feature_id or f"the fixes of architecture review {self.architecture_review}"

    def to_json(self) -> dict[str, Any]:
        if self.feature_id is not None:
            return {"feature": self.feature_id}
        return {"architecture_review": self.architecture_review}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> WorkItem | None:
        if not data:
            return None
        return cls(data.get("feature"), data.get("architecture_review"))


def feature(feature_id: str) -> WorkItem:
    return WorkItem(feature_id=feature_id)


def architecture_fixes(review_id: int) -> WorkItem:
    return WorkItem(architecture_review=review_id)


# -- the state ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Backlog:
    """The feature set and what is verified about each feature (shared by every lane)."""

    features: tuple[str, ...] = ()
    passing: frozenset[str] = frozenset()
    blocked: frozenset[str] = frozenset()
    rejections: tuple[tuple[str, int], ...] = ()
    depends: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Feature -> the features it depends on (the feature list's `depends_on`; only those that have any)."""
    landing: tuple[WorkItem, ...] = ()
    """Lanes: work a REVIEW approved, waiting in the merge queue to land on `main`, oldest first."""
    returned: tuple[tuple[WorkItem, int], ...] = ()
    """Lanes: work the merge queue sent back (a conflict or a red test), with the review that says
    why, for the next free lane to FIX, oldest first."""
    held: tuple[tuple[str, str], ...] = ()
    """Approved features a risk rule holds for the person (core/risk.py), with the rule's words:
    they land only when the person approves them; what depends on them waits with them."""
    to_plan: bool = False
    """A newer spec waits to be planned: the next lane free to choose runs the INITIALIZER in its
    extend form, which appends the new features to the list (store/specs.py)."""

    def needs(self, feature_id: str) -> tuple[str, ...]:
        """The features `feature_id` depends on."""
        return next((needs for f, needs in self.depends if f == feature_id), ())

    @property
    def completed(self) -> int:
        """Features merged and passing: only a verified REVIEW PASS sets `passes`."""
        return len(self.passing)

    def settled(self) -> bool:
        """Every feature passes, is blocked or waits for the person (and a feature list exists),
        and the merge queue holds nothing (lanes)."""
        if not self.features or self.to_plan or self.landing or self.returned:
            return False
        waiting = self.waiting_for_person()
        if len(self.passing) + len(self.blocked) + len(waiting) < len(self.features):
            return False  # (the ids are unique: too few to cover them all, read without a union)
        return (self.passing | self.blocked | waiting).issuperset(self.features)

    def waiting_for_person(self) -> frozenset[str]:
        """The features held for the person and those that depend on them (not passing)."""
        held = {f for f, _ in self.held}
        return (
            frozenset(held.union(*(self.dependents(f) for f in held)) - self.passing) if held else frozenset()
        )

    def next_open(self, held: frozenset[str] = frozenset(), *, critical: bool = False) -> str | None:
        """Of the features that neither pass nor are blocked nor `held` (by another lane) and
        whose dependencies all pass (are merged): the first in list order, or with `critical`
        (several lanes) the one on the critical path: whose chain of features still to pass that
        depend on it is longest (ties: more such features, then list order), so that chains
        start first and do not finish on one lane while the others idle."""
        taken = self.blocked | held | self._queued() | {f for f, _ in self.held}  # (few: `passing` apart)
        left = itertools.filterfalse(
            taken.__contains__, itertools.filterfalse(self.passing.__contains__, self.features)
        )
        if not self.depends:
            return next(left, None)
        depends = dict(self.depends)
        ready = [f for f in left if self.passing.issuperset(depends.get(f, ()))]
        if len(ready) < 2 or not critical:
            return ready[0] if ready else None
        chain, after = self.chains()
        place = {f: n for n, f in enumerate(self.features)}
        return min(ready, key=lambda f: (-chain.get(f, 0), -after.get(f, 0), place[f]))

    def chains(self) -> tuple[dict[str, int], dict[str, int]]:
        """For each feature with features still to pass that depend on it: the longest chain of
        them below it, and how many they are, directly or not."""
        left = set(self.features) - self.passing - self.blocked
        users: dict[str, list[str]] = {}
        for f, needs in self.depends:
            if f in left:
                for need in needs:
                    users.setdefault(need, []).append(f)
        chain: dict[str, int] = {}
        reach: dict[str, frozenset[str]] = {}

        def walk(f: str, path: frozenset[str]) -> None:
            if f in chain:
                return
            below = [u for u in users.get(f, ()) if u not in path]  # a cycle (refused upstream) ends here
            for u in below:
                walk(u, path | {f})
            chain[f] = max((chain[u] + 1 for u in below), default=0)
            reach[f] = frozenset(below).union(*(reach[u] for u in below))

        for f in list(users):
            walk(f, frozenset())
        return chain, {f: len(r) for f, r in reach.items()}

    def _queued(self) -> frozenset[str]:
        """The features in the merge queue's hands: landing, or sent back for a FIX."""
        items = (*self.landing, *(work for work, _ in self.returned))
        return frozenset(work.feature_id for work in items if work.feature_id is not None)

    def dependents(self, feature_id: str) -> tuple[str, ...]:
        """The features that depend on `feature_id`, directly or through others, in list order."""
        found: set[str] = set()
        frontier = {feature_id}
        while frontier:
            frontier = {f for f, needs in self.depends if f not in found and frontier.intersection(needs)}
            found |= frontier
        return tuple(f for f in self.features if f in found)

    def rejection_count(self, feature_id: str) -> int:
        return dict(self.rejections).get(feature_id, 0)

    def reject(self, feature_id: str, max_rejections: int) -> Backlog:
        """Count a rejection; the max_rejections-th one blocks the feature, and with it every
        feature that depends on it (none of them could ever be merged)."""
        counts = dict(self.rejections)
        counts[feature_id] = counts.get(feature_id, 0) + 1
        blocked = self.blocked
        if counts[feature_id] >= max_rejections:
            blocked = blocked | {feature_id} | (set(self.dependents(feature_id)) - self.passing)
        return replace(self, rejections=tuple(sorted(counts.items())), blocked=blocked)


@dataclass(frozen=True)
class Lane:
    """One line of sessions: the role that runs next and the item it works on."""

    role: SessionType = T.INITIALIZER
    work: WorkItem | None = None
    attempts: int = 0
    """Failed (unverified) sessions of `role` in a row."""
    fix_rounds: int = 0
    """FIX sessions in the current review cycle of `work`."""
    open_review: int | None = None
    """The review a FIX session answers."""


@dataclass(frozen=True)
class Others:
    """What the other lanes hold, as one lane's transition sees it (one lane: nothing)."""

    held: frozenset[str] = frozenset()
    """The features other lanes work on: not to be taken."""
    busy: bool = False
    """Another lane holds work: an architecture review waits for a quiet `main`."""
    lanes: int = 1
    """How many lanes the project runs: with several, a free lane claims by the critical path."""
    planning: bool = False
    """Another lane plans a newer spec's features: a lane with nothing left waits for them."""


@dataclass(frozen=True)
class SessionState:
    """Everything the scheduler knows between sessions (saved as `.agent_state.json`)."""

    backlog: Backlog = Backlog()
    lane: Lane = Lane()
    architecture_checked_at: int = 0
    """backlog.completed when the last ARCHITECTURE review ran (0: none yet)."""
    session_count: int = 0
    halt_reason: str = ""
    others: Others = Others()
    """The other lanes (schedule.py sets it for a lane's transition; never saved)."""

    @property
    def next_number(self) -> int:
        return self.session_count + 1


# -- outcomes and events ----------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """The verified outcome of one session: what the scheduler checked, not what the agent said."""

    role: SessionType
    ok: bool
    """The session did what its role requires, checked against files and git."""
    verdict: Verdict | None = None
    """REVIEW / ARCHITECTURE: the verified verdict (a PASS whose merge failed its checks is not PASS)."""
    feature_ids: tuple[str, ...] = ()
    """INITIALIZER: the IDs of the verified feature list, in order."""
    depends: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """INITIALIZER: the verified list's dependencies (feature -> the features it depends on)."""
    passing: frozenset[str] = frozenset()
    """Features whose `passes` is true after the session (verified)."""
    review_id: int | None = None
    """REVIEW / ARCHITECTURE: the ID of the review the session appended."""
    reason: str = ""
    undone: str = ""
    """What the scheduler undid of a session that still counts (a merge whose tests failed)."""
    gates: tuple[GateResult, ...] = ()
    """The project's gates the scheduler ran after the session (on the branch, or on `main`)."""
    gates_review: int | None = None
    """IMPLEMENT / FIX: the review the scheduler wrote because a gate was red on the branch: the
    work goes back to FIX with the gates' output, and no REVIEW runs on it."""


@dataclass(frozen=True)
class Retry:
    """The session failed its checks and runs again (`attempt` is the try about to run)."""

    role: SessionType
    attempt: int
    reason: str


@dataclass(frozen=True)
class GaveUp:
    """The role failed its checks on every attempt."""

    role: SessionType
    reason: str


@dataclass(frozen=True)
class Merged:
    """A REVIEW's PASS was verified: the work is on `main` (a feature is completed)."""

    work: WorkItem


@dataclass(frozen=True)
class Approved:
    """Lanes: a REVIEW's PASS was verified in its lane; the work waits in the merge queue."""

    work: WorkItem


@dataclass(frozen=True)
class GatesRed:
    """A gate was red on the work's branch: the scheduler's review `review_id` sends it to FIX."""

    work: WorkItem
    review_id: int


@dataclass(frozen=True)
class Rejected:
    """The work is dropped: its branch goes, a feature is retried from `main` later."""

    work: WorkItem


@dataclass(frozen=True)
class Blocked:
    """A feature was rejected too often (or depends on one that was); the run goes on without it."""

    feature_id: str
    because: str | None = None
    """The blocked feature it depends on (None: it was rejected too often itself)."""


@dataclass(frozen=True)
class ArchitectureDue:
    completed: int


@dataclass(frozen=True)
class Halted:
    reason: str


@dataclass(frozen=True)
class Done:
    """Every feature passes or is blocked."""


Event = Retry | GaveUp | Merged | Approved | GatesRed | Rejected | Blocked | ArchitectureDue | Halted | Done


@dataclass(frozen=True)
class Step:
    """The state for the next session and the events that led to it."""

    state: SessionState
    events: tuple[Event, ...] = ()


# -- the transition -----------------------------------------------------------------------------


def transition(state: SessionState, outcome: Outcome, config: AgentConfig) -> Step:
    """Apply the verified outcome of the session that ran in `state`."""
    lane = state.lane
    if outcome.role is not lane.role:
        raise ValueError(f"a {outcome.role} outcome cannot follow a {lane.role} session")
    state = replace(state, session_count=state.session_count + 1)
    if not outcome.ok:
        return _failed(state, outcome, config)
    state = replace(state, backlog=replace(state.backlog, passing=outcome.passing))
    if lane.role is T.INITIALIZER:
        listed = replace(state.backlog, features=outcome.feature_ids, depends=outcome.depends)
        return choose_work(replace(state, backlog=listed), config)
    if lane.role is T.IMPLEMENT or lane.role is T.FIX:
        return _built(state, outcome, config)
    if lane.role is T.ARCHITECTURE:
        return _architecture_reviewed(state, outcome, config)
    return _reviewed(state, outcome, config)


def _failed(state: SessionState, outcome: Outcome, config: AgentConfig) -> Step:
    """Retried a bounded number of times; then each role gives up in its own way."""
    lane = state.lane
    if lane.attempts + 1 < config.max_attempts:
        retry = replace(lane, attempts=lane.attempts + 1)
        return Step(replace(state, lane=retry), (Retry(lane.role, lane.attempts + 2, outcome.reason),))
    gave_up = GaveUp(lane.role, outcome.reason)
    if lane.role is T.INITIALIZER and state.backlog.features:  # an extension: the list stands as it was
        return choose_work(state, config, gave_up)
    if lane.role is T.INITIALIZER:  # never skipped: without a feature list nothing can run
        reason = f"{lane.role.value} failed {plural(config.max_attempts, 'time')}: {outcome.reason}"
        return Step(replace(state, lane=Lane(T.HALTED), halt_reason=reason), (gave_up, Halted(reason)))
    if lane.role is T.FIX:
        return _continue(state, T.REVIEW, gave_up)
    if lane.role is T.ARCHITECTURE:  # given up for this multiple of the interval
        checked = replace(state, architecture_checked_at=state.backlog.completed)
        return choose_work(checked, config, gave_up)
    return _reject(state, config, gave_up)  # IMPLEMENT, REVIEW


def _built(state: SessionState, outcome: Outcome, config: AgentConfig) -> Step:
    """IMPLEMENT or FIX verified: to REVIEW, unless a gate was red on the branch; then back to FIX
    while fix rounds are left, else the work is rejected."""
    if outcome.gates_review is None:
        return _continue(state, T.REVIEW)
    assert state.lane.work is not None
    red = GatesRed(state.lane.work, outcome.gates_review)
    if state.lane.fix_rounds < config.max_fix_rounds:
        return _continue(state, T.FIX, red, open_review=outcome.gates_review)
    return _reject(state, config, red)


def _reviewed(state: SessionState, outcome: Outcome, config: AgentConfig) -> Step:
    lane = state.lane
    assert lane.work is not None
    if outcome.verdict == "PASS":
        return choose_work(state, config, Merged(lane.work))
    if outcome.verdict == "REQUEST_CHANGES" and lane.fix_rounds < config.max_fix_rounds:
        return _continue(state, T.FIX, open_review=outcome.review_id)
    return _reject(state, config)  # REJECT, or REQUEST_CHANGES with no fix rounds left


def _architecture_reviewed(state: SessionState, outcome: Outcome, config: AgentConfig) -> Step:
    state = replace(state, architecture_checked_at=state.backlog.completed)
    if outcome.verdict == "REQUEST_CHANGES":
        assert outcome.review_id is not None
        fixes = Lane(
            T.FIX, architecture_fixes(outcome.review_id), fix_rounds=1, open_review=outcome.review_id
        )
        return Step(replace(state, lane=fixes))
    return choose_work(state, config)


def _reject(state: SessionState, config: AgentConfig, *events: Event) -> Step:
    work = state.lane.work
    assert work is not None
    backlog = state.backlog
    found: tuple[Event, ...] = (*events, Rejected(work))
    if work.feature_id is not None:
        before = backlog.blocked
        backlog = backlog.reject(work.feature_id, config.max_rejections)
        if work.feature_id in backlog.blocked:
            found += (Blocked(work.feature_id),)
            found += tuple(
                Blocked(f, because=work.feature_id)
                for f in backlog.dependents(work.feature_id)
                if f in backlog.blocked and f not in before
            )
    return choose_work(replace(state, backlog=backlog), config, *found)


def _continue(state: SessionState, role: SessionType, *events: Event, open_review: int | None = None) -> Step:
    """The review cycle of the current work item goes on with `role`."""
    lane = state.lane
    if role is T.FIX:
        lane = replace(lane, role=role, attempts=0, fix_rounds=lane.fix_rounds + 1, open_review=open_review)
    else:
        lane = replace(lane, role=role, attempts=0)
    return Step(replace(state, lane=lane), events)


def choose_work(state: SessionState, config: AgentConfig, *events: Event) -> Step:
    """No review cycle is open: DONE, a due ARCHITECTURE review (on a quiet `main`: a lane waits
    while another holds work), the next feature it may take, or (lanes) WAIT."""
    backlog = state.backlog
    if backlog.to_plan:  # a newer spec: this lane plans it (the INITIALIZER's extend form)
        return Step(replace(state, backlog=replace(backlog, to_plan=False), lane=Lane(T.INITIALIZER)), events)
    if backlog.settled() and state.others.planning:  # what another lane plans may be this lane's
        return Step(replace(state, lane=Lane(T.WAIT)), events)
    if backlog.settled():
        return Step(replace(state, lane=Lane(T.DONE)), (*events, Done()))
    if backlog.returned:  # lanes: work the merge queue sent back comes first, as a FIX
        (work, review_id), *rest = backlog.returned
        fix = Lane(T.FIX, work, fix_rounds=1, open_review=review_id)
        return Step(replace(state, backlog=replace(backlog, returned=tuple(rest)), lane=fix), events)
    if architecture_due(state, config):
        if state.others.busy:
            return Step(replace(state, lane=Lane(T.WAIT)), events)
        due = ArchitectureDue(backlog.completed)
        return Step(replace(state, lane=Lane(T.ARCHITECTURE)), (*events, due))
    next_feature = backlog.next_open(state.others.held, critical=state.others.lanes > 1)
    if next_feature is None:  # lanes: what is left is held or waits for its dependencies
        return Step(replace(state, lane=Lane(T.WAIT)), events)
    return Step(replace(state, lane=Lane(T.IMPLEMENT, feature(next_feature))), events)


def extends(state: SessionState) -> bool:
    """The session about to run is the INITIALIZER's extend form: it appends the features of a
    newer spec to the list the project has (the first form writes the list)."""
    return state.lane.role is T.INITIALIZER and bool(state.backlog.features)


def architecture_due(state: SessionState, config: AgentConfig) -> bool:
    """Due once per new multiple of the interval reached by the completed features."""
    interval = config.architecture_interval
    return state.backlog.completed // interval > state.architecture_checked_at // interval


def get_next_session_type(state: SessionState, outcome: Outcome | None, config: AgentConfig) -> SessionType:
    """The role of the next session: `state`'s own before any session ran, else the transition's."""
    if outcome is None:
        return state.lane.role
    return transition(state, outcome, config).state.lane.role


def resume(state: SessionState) -> SessionState:
    """The state a new run starts from: a halted run tries its INITIALIZER again."""
    if state.lane.role is T.HALTED:
        return replace(state, lane=Lane(T.INITIALIZER), halt_reason="")
    return state
