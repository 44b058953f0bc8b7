"""Does the merge queue keep up? (issue 33, item 4): a simulation of the schedule alone.

A discrete-event simulation with modelled times (no CLI, no git, no clock: seconds to run). The
lanes are the real pure schedule (core/schedule.py over core/machine.py's `Backlog`): N
independent features, every session verified and every REVIEW a PASS, fed to `transition_lane`
as synthetic `Outcome`s; the queue lands with `landed` and sends back with `sent_back`. A lane
whose REVIEW passed takes its next feature while its approved work waits to land (`went_on`, as
run/lanes.py does; going on from the approved merge itself, `stacked`, is not modelled: the
features are independent).

Each feature costs an IMPLEMENT and a REVIEW (10 and 5 minutes on average, each session's time its
mean times a uniform spread of +-30%, from the seeded `random.Random`). An approved branch is red
on `main` with probability 5% (drawn once per approval, so a FIX's branch may be red again): red
whenever it is in a tested set; it goes back as a FIX (5 minutes) and a REVIEW. The queue is one
server (one round of runs at a time): while `main` has not moved since the head's REVIEW started, the REVIEW's own merge lands
as it is, with no run of the queue (as merge_queue.land does; a red one goes back: its lane's run
found it); otherwise it plans a batch of what waits
(core/batching.py, the planner the queue uses) and each round of test runs takes the suite's time.
Three policies (`POLICIES`): one branch at a time; batches of 8 with one run at a time; and what
the lanes loop's queue does, `runners_for(lanes)` runs side by side (prefixes of the batch's chain
of merges, at once) on batches of `cap_for` them. Not modelled: conflicts, dependencies, ARCHITECTURE
reviews, failed sessions, the INITIALIZER (its list is there at time 0), the scheduler's own time.

The backlog is large enough that no lane runs out within the hours (unless --features says
otherwise: then features per hour are counted up to the last landing).

    .venv/bin/python bench/queue_sim.py [--lanes 4,16,64] [--test-s 1,300] [--hours 8] [--seed 1]
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
from dataclasses import dataclass, field, replace

from session_scheduler.core import batching
from session_scheduler.core.config import AgentConfig, SessionType
from session_scheduler.core.machine import Approved, Outcome, SessionState, Verdict, WorkItem
from session_scheduler.core.schedule import Schedule, landed, sent_back, transition_lane

T = SessionType
SESSIONS = (T.IMPLEMENT, T.REVIEW, T.FIX)
POLICIES = ("one at a time", "batched", "side by side")
"""One branch per test run; batches of 8 with one run at a time; the lanes loop's queue:
`batching.runners_for(lanes)` runs side by side, batches of `cap_for` them."""
SUITES = {1.0: "1 s", 300.0: "5 min"}


@dataclass(frozen=True)
class Model:
    """What one simulated night is made of."""

    lanes: int = 16
    test_s: float = 300.0
    """The project's test suite: one run of the queue."""
    cap: int = batching.DEFAULT_CAP
    """The most branches one test run holds (1: one at a time)."""
    runners: int = 1
    """The queue's test runs side by side (core/batching.py: prefixes of a batch at once)."""
    hours: float = 8.0
    features: int | None = None
    """None: enough that no lane runs out within `hours`."""
    implement_s: float = 600.0
    review_s: float = 300.0
    fix_s: float = 300.0
    spread: float = 0.3
    """Each session takes its role's mean times uniform(1 - spread, 1 + spread)."""
    red_rate: float = 0.05
    """The chance that an approved branch is red on `main` (drawn per approval)."""

    @property
    def backlog(self) -> int:
        if self.features is not None:
            return self.features
        per_lane = self.hours * 3600 / (self.implement_s + self.review_s)
        return math.ceil(self.lanes * per_lane * 1.25) + self.lanes


@dataclass(frozen=True)
class Result:
    model: Model
    landed: int
    """Features landed on `main` within the hours."""
    elapsed_s: float
    """The window: `hours`, or up to the last landing when the backlog ran out first."""
    runs: int
    """Test runs of the queue (those side by side each counted)."""
    busy_s: float
    """The queue's time spent testing."""
    as_reviewed: int
    """Landings with no run (`main` had not moved since their REVIEW started)."""
    sent_back: int
    waited_s: float
    """Lane time with no session: waiting for its approved work to land, or with nothing to take."""
    unfinished: int
    """Features begun and not landed when the window closed (in a lane, the queue, or sent back)."""
    untouched: int
    queued: int = 0
    """Of `unfinished`, the work in the merge queue's hands: approved, or sent back and not taken
    again yet (a lane goes on while its approval waits)."""

    @property
    def per_hour(self) -> float:
        return self.landed / (self.elapsed_s / 3600) if self.elapsed_s else 0.0

    @property
    def utilisation(self) -> float:
        return self.busy_s / self.elapsed_s if self.elapsed_s else 0.0


@dataclass(frozen=True)
class Waiting:
    """Approved work in the queue."""

    work: WorkItem
    red: bool
    synced: int
    """`main`'s version when its REVIEW started."""


@dataclass
class _Night:
    """The simulation's mutable state, one run's own (nothing at module level)."""

    model: Model
    rng: random.Random
    schedule: Schedule
    config: AgentConfig
    now: float = 0.0
    events: list[tuple[float, int, int]] = field(default_factory=list)
    """(time, order, lane): a lane's session ends; lane -1: the queue's test run ends."""
    order: int = 0
    running: set[int] = field(default_factory=set)
    """The lanes whose session runs."""
    synced: dict[int, int] = field(default_factory=dict)
    queue: list[Waiting] = field(default_factory=list)
    step: batching.Step | None = None
    main: int = 0
    landed: int = 0
    last_landing: float = 0.0
    runs: int = 0
    busy_s: float = 0.0
    as_reviewed: int = 0
    sent_back: int = 0
    waited_s: float = 0.0
    waiting_since: dict[int, float] = field(default_factory=dict)

    def at(self, delay: float, lane: int) -> None:
        self.order += 1
        heapq.heappush(self.events, (self.now + delay, self.order, lane))

    def start_sessions(self) -> None:
        for n, lane in enumerate(self.schedule.lanes):
            if lane.role in SESSIONS and n not in self.running:
                if n in self.waiting_since:
                    self.waited_s += self.now - self.waiting_since.pop(n)
                mean = {T.IMPLEMENT: self.model.implement_s, T.REVIEW: self.model.review_s}.get(
                    lane.role, self.model.fix_s
                )
                self.running.add(n)
                if lane.role is T.REVIEW:
                    self.synced[n] = self.main
                self.at(mean * self.rng.uniform(1 - self.model.spread, 1 + self.model.spread), n)
            elif lane.role not in SESSIONS and n not in self.waiting_since:
                self.waiting_since[n] = self.now

    def session_ended(self, n: int) -> None:
        role = self.schedule.lanes[n].role
        self.running.remove(n)
        said: Verdict | None = "PASS" if role is T.REVIEW else None
        outcome = Outcome(role, ok=True, verdict=said, passing=self.schedule.backlog.passing, review_id=1)
        self.schedule, events = transition_lane(self.schedule, n, outcome, self.config)
        for event in events:
            if isinstance(event, Approved):
                red = self.rng.random() < self.model.red_rate
                self.queue.append(Waiting(event.work, red, self.synced.pop(n)))

    def serve(self) -> None:
        """The queue, idle: land the head as reviewed, or plan a batch and start its first run."""
        while self.step is None and self.queue:
            head = self.queue[0]
            if head.synced == self.main:  # its REVIEW's own merge, tested in its lane
                if head.red:  # red there: its verification sent it back (no run of the queue)
                    self.send_back(head.work.branch)
                    continue
                self.as_reviewed += 1
                self.land((head.work.branch,))
                continue
            waiting = tuple(w.work.branch for w in self.queue)
            self.act(batching.plan(waiting, self.model.cap, self.model.runners))

    def act(self, step: batching.Step) -> None:
        for move in step.moves:
            if isinstance(move, batching.Land):
                self.land(move.branches)
            else:
                self.send_back(move.branch)
        if isinstance(step.next, batching.RunTests):
            self.step = step
            self.runs += len(step.next.sizes)
            self.busy_s += self.model.test_s
            self.at(self.model.test_s, -1)
        else:
            self.step = None

    def tested(self) -> None:
        assert self.step is not None and isinstance(self.step.next, batching.RunTests)
        red = {w.work.branch for w in self.queue if w.red}
        passed = tuple(not red.intersection(tested) for tested in self.step.next.sets)
        self.act(batching.after_test(self.step.batch, passed))

    def take(self, branch: str) -> Waiting:
        (item,) = (w for w in self.queue if w.work.branch == branch)
        self.queue.remove(item)
        return item

    def land(self, branches: tuple[str, ...]) -> None:
        self.main += 1
        for branch in branches:
            item = self.take(branch)
            if item.red:
                raise AssertionError(f"{branch}, red on main, landed")
            self.schedule = landed(self.schedule, item.work, self.config)[0]
            self.landed += 1
            self.last_landing = self.now

    def send_back(self, branch: str) -> None:
        self.schedule = sent_back(self.schedule, self.take(branch).work, 1, self.config)[0]
        self.sent_back += 1


def simulate(model: Model, rng: random.Random) -> Result:
    """One night of `model`, every draw from `rng`."""
    ids = tuple(f"F{n:05d}" for n in range(1, model.backlog + 1))
    config = AgentConfig(architecture_interval=10**9, feature_count=len(ids), max_rejections=10**6)
    schedule = replace(Schedule.of(SessionState(), model.lanes), cloned=True)  # the queue lands, one lane too
    listed = Outcome(T.INITIALIZER, ok=True, feature_ids=ids)
    night = _Night(model, rng, transition_lane(schedule, 0, listed, config)[0], config)
    end = model.hours * 3600
    night.start_sessions()
    while night.events and night.events[0][0] <= end:
        night.now, _, lane = heapq.heappop(night.events)
        if lane < 0:
            night.tested()
        else:
            night.session_ended(lane)
        night.serve()
        night.start_sessions()
    backlog = night.schedule.backlog
    settled = backlog.settled()
    elapsed = night.last_landing if settled else end
    night.now = elapsed
    night.waited_s += sum(elapsed - since for since in night.waiting_since.values() if since < elapsed)
    busy = night.busy_s - sum(max(0.0, t - end) for t, _, lane in night.events if lane < 0)
    begun = {w.feature_id for w in (*backlog.landing, *(w for w, _ in backlog.returned))}
    begun |= {lane.work.feature_id for lane in night.schedule.lanes if lane.work is not None}
    begun -= backlog.passing
    return Result(
        model,
        night.landed,
        elapsed,
        night.runs,
        busy,
        night.as_reviewed,
        night.sent_back,
        night.waited_s,
        len(begun),
        len(ids) - len(backlog.passing) - len(begun),
        len(backlog.landing) + len(backlog.returned),
    )


def table(results: list[tuple[Result, ...]]) -> str:
    """One row per lane count and suite: each policy's features per hour and the queue's busy
    share; then the runners and the test runs per landing of the last (side by side)."""
    lines = [
        "| lanes | suite | one at a time: features/h | queue busy | batched (cap 8): features/h | "
        "queue busy | side by side: runners, cap | features/h | queue busy | runs per landing | lanes idle |",
        "|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for one, batched, side in results:
        m = side.model
        suite = SUITES.get(m.test_s, f"{m.test_s:g} s")
        lines.append(
            f"| {m.lanes} | {suite} | {one.per_hour:.1f} | {one.utilisation:.0%} | "
            f"{batched.per_hour:.1f} | {batched.utilisation:.0%} | {m.runners}, {m.cap} | "
            f"{side.per_hour:.1f} | {side.utilisation:.0%} | {side.runs / max(1, side.landed):.2f} | "
            f"{waiting(side):.0%} |"
        )
    return "\n".join(lines)


def waiting(result: Result) -> float:
    """The lanes' share of the night with no session (`Result.waited_s`)."""
    return result.waited_s / (result.model.lanes * result.elapsed_s) if result.elapsed_s else 0.0


def verdict(fast: Result, slow: Result, within: float = 0.10) -> str:
    """Whether the queue is the limit: features/hour with the slow suite below `within` of the fast one's."""
    m = slow.model
    limit = slow.per_hour < (1 - within) * fast.per_hour
    runs = "one run at a time" if m.runners == 1 else f"{m.runners} runs side by side"
    return (
        f"At {m.lanes} lanes with a {SUITES.get(m.test_s, f'{m.test_s:g} s')} suite, batches of {m.cap}, {runs}: "
        f"{slow.per_hour:.1f} features/h against {fast.per_hour:.1f} with a 1 s suite "
        f"({slow.per_hour / fast.per_hour - 1:+.0%}): the queue "
        f"{'IS the limit (more than' if limit else 'is NOT the limit (within'} {within:.0%})."
    )


def policy(name: str, lanes: int) -> tuple[int, int]:
    """(cap, runners) of one of `POLICIES` at `lanes` lanes."""
    runners = batching.runners_for(lanes)
    return {
        "one at a time": (1, 1),
        "batched": (batching.DEFAULT_CAP, 1),
        "side by side": (batching.cap_for(runners), runners),
    }[name]


def run(
    lanes: tuple[int, ...], suites: tuple[float, ...], seed: int, night: Model
) -> list[tuple[Result, ...]]:
    """Every policy (`POLICIES`, in order) for every lane count and suite, each night from its own
    `Random(seed)` (`night`: the rest of the model)."""
    out = []
    for n in lanes:
        for test_s in suites:
            out.append(
                tuple(
                    simulate(
                        replace(night, lanes=n, test_s=test_s, cap=cap, runners=runners), random.Random(seed)
                    )
                    for cap, runners in (policy(name, n) for name in POLICIES)
                )
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", default="4,16,64", help="lane counts, comma-separated")
    parser.add_argument("--test-s", default="1,300", help="test suite times in seconds, comma-separated")
    parser.add_argument("--features", type=int, default=None, help="backlog size (default: enough)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hours", type=float, default=8.0)
    parser.add_argument(
        "--red-rate", type=float, default=0.05, help="the share of approved branches red on main"
    )
    args = parser.parse_args()
    lanes = tuple(int(n) for n in args.lanes.split(","))
    suites = tuple(float(s) for s in args.test_s.split(","))
    night = Model(hours=args.hours, features=args.features, red_rate=args.red_rate)
    results = run(lanes, suites, args.seed, night)
    print(table(results))
    print()
    if not {(16, 1.0), (16, 300.0)} <= {(r[0].model.lanes, r[0].model.test_s) for r in results}:
        results = run((16,), (1.0, 300.0), args.seed, night)  # the lines are about 16 lanes, 1 s and 5 min
    at16 = {r[0].model.test_s: r for r in results if r[0].model.lanes == 16}
    for n in (1, 2):  # batched with one runner, then side by side
        print(verdict(at16[1.0][n], at16[300.0][n]))


if __name__ == "__main__":
    main()
