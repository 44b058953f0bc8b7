"""The merge queue's batches (pure): test several approved branches together, bisect on red.

When several approved branches wait, the queue merges them all, in queue order, onto `main` and
runs the tests once; green lands them all. Red bisects: the first half of the red set is tested
(and landed on green), and so on until the culprit is one branch, which alone is sent back; the
branches after it are tested together again. A branch that conflicts while its set is merged is
sent back at once, and the set is merged again without it. One branch at a time is `cap=1`.

With `runners` test runs side by side (`runners=1`: one at a time), a round tests several
prefixes of the merged chain at once: a fresh set's prefixes at `runners` even cuts (the last is
the whole set), a red set's at `runners` cuts that split it in `runners + 1` parts. The first red
prefix bounds the culprit; every green prefix before it lands. One round finds a culprit among
`runners + 1` branches, where one run at a time halves.

The caller drives it (the merging and the test runs are its own): `plan` starts a batch, and
`after_test` / `conflicted` / `deferred` answer the batch's `RunTests`. Each returns a `Step`: the batch, the
landings and sends-back to act on in order, and what comes next: a `RunTests` or `Done`.

Red is inferred, not always seen: when a set is red and its prefixes green, the part after the
longest green prefix is red on the `main` that now holds that prefix (the same merge, so the same
tree), and is split without being tested again; a single branch known red so is sent back with
the output of the red run that bounded it (the first red run of the last round with one), which
tested exactly that tree. This holds while only the batch moves `main` and the tests are
deterministic; when `main` moved otherwise, the caller plans again from `remaining`.

Rounds of test runs per batch of n with c culprits, one runner: at most 1 + c * (ceil(log2 n) + 1)
(one run for the batch; to isolate each culprit, one run per halving; then one for the branches
after it); with r runners, ceil(log(r + 1) n) rounds per culprit instead of ceil(log2 n).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Cause = Literal["red", "conflict"]

DEFAULT_CAP = 8
"""The most branches one batch tests together per runner: one red branch in 8 costs 4 runs at
most to find with one runner."""
LANES_PER_RUNNER = 4
"""The lanes loop's queue runs one test run side by side per this many lanes (16 lanes: 4)."""


def runners_for(lanes: int) -> int:
    """The test runs the merge queue runs side by side for `lanes` lanes (bench/queue_sim.py:
    with a 5-minute suite and 5% of branches red, one runner lands half of what 16 lanes approve)."""
    return max(1, lanes // LANES_PER_RUNNER)


def cap_for(runners: int) -> int:
    """The most branches a batch holds with `runners`: `DEFAULT_CAP` per runner."""
    return DEFAULT_CAP * runners


@dataclass(frozen=True)
class RunTests:
    """Merge these branches, in this order, onto `main` without moving it, and run the tests on
    the merge after each of the first `prefixes` of them, side by side (one run each; none
    given: the last merge alone)."""

    branches: tuple[str, ...]
    prefixes: tuple[int, ...] = ()

    @property
    def sizes(self) -> tuple[int, ...]:
        """How many of `branches` each run's merge holds, ascending (the last: all of them)."""
        return self.prefixes or (len(self.branches),)

    @property
    def sets(self) -> tuple[tuple[str, ...], ...]:
        """What each run tests, in the order of `after_test`'s answers."""
        return tuple(self.branches[:n] for n in self.sizes)


@dataclass(frozen=True)
class Land:
    """The tested merge was green: move `main` to it (these branches land, in this order: the
    merge after the last of them, a prefix of the chain that was tested)."""

    branches: tuple[str, ...]


@dataclass(frozen=True)
class SendBack:
    """This branch goes back to its lane as a FIX: it conflicts, or it is red (the output of the
    red run that bounded it is its evidence: that run tested `main` with it merged last)."""

    branch: str
    cause: Cause


@dataclass(frozen=True)
class Done:
    """Every branch of the batch landed or was sent back: plan the next batch."""


Move = Land | SendBack
"""What a test result or a conflict settles."""
Action = Move | RunTests | Done


@dataclass(frozen=True)
class Batch:
    """Where a batch stands: the set under test, the red set it splits, the branches after them.
    Queue order is `testing`, then the rest of `red`, then `rest`."""

    testing: tuple[str, ...] = ()
    """The branches merged for the runs awaited (empty: the batch is done)."""
    red: tuple[str, ...] = ()
    """A set known red on the current `main`; `testing` is a prefix of it, shorter (empty:
    `testing` is a set of which nothing is known)."""
    rest: tuple[str, ...] = ()
    """Branches after these, untested since a culprit before them was found."""
    cuts: tuple[int, ...] = ()
    """The prefixes of `testing` under test, ascending (empty: all of it, one run)."""
    runners: int = 1
    """Test runs side by side."""

    @property
    def remaining(self) -> tuple[str, ...]:
        """The branches neither landed nor sent back, in queue order (what to plan again from)."""
        return (*self.testing, *self.red[len(self.testing) :], *self.rest)

    @property
    def sizes(self) -> tuple[int, ...]:
        return self.cuts or (len(self.testing),)


@dataclass(frozen=True)
class Step:
    """The batch after an answer, and what the caller does now: `moves` in order, then `next`."""

    batch: Batch
    moves: tuple[Move, ...]
    """What the answer settled: landings and branches sent back, in order."""
    next: RunTests | Done

    @property
    def actions(self) -> tuple[Action, ...]:
        return (*self.moves, self.next)


def plan(waiting: tuple[str, ...], cap: int = DEFAULT_CAP, runners: int = 1) -> Step:
    """A batch of the first `cap` branches waiting (in queue order), and its first round of tests
    (`runners` side by side)."""
    if cap < 1:
        raise ValueError(f"a batch holds at least one branch (cap {cap})")
    if runners < 1:
        raise ValueError(f"the queue runs at least one test run at a time (runners {runners})")
    if len(set(waiting)) != len(waiting):
        raise ValueError(f"a branch waits twice: {waiting}")
    return _fresh(waiting[:cap], (), runners)


def after_test(batch: Batch, passed: bool | tuple[bool, ...]) -> Step:
    """The runs of `batch` came back (one answer per run, in `RunTests.sets` order; a bool: the
    one run's): the green prefixes before the first red one land, the red one narrows the search."""
    if not batch.testing:
        raise ValueError("the batch is done: nothing was being tested")
    answers = (passed,) if isinstance(passed, bool) else passed
    sizes = batch.sizes
    if len(answers) != len(sizes):
        raise ValueError(f"{len(sizes)} runs were being tested, {len(answers)} answers came back")
    first_red = next((i for i, ok in enumerate(answers) if not ok), None)
    if first_red is None:  # the longest run, all of `testing`, green too
        whole: tuple[Move, ...] = (Land(batch.testing),)
        if not batch.red:  # a set of which nothing was known (nothing after it): every branch of it is in
            return Step(Batch(), whole, Done())
        return _isolate(batch.red[len(batch.testing) :], batch.rest, whole, batch.runners)
    green = sizes[first_red - 1] if first_red else 0
    landed = (Land(batch.testing[:green]),) if green else ()
    red_at = sizes[first_red]
    after = (*batch.testing[red_at:], *batch.red[len(batch.testing) :], *batch.rest)  # untested now
    return _isolate(batch.testing[green:red_at], after, landed, batch.runners)


def conflicted(batch: Batch, branch: str) -> Step:
    """`branch` conflicted while `batch.testing` was merged: it goes back at once, and what is
    left is merged and tested again, as a set of which nothing is known (a conflict means the
    `main` or the order differ from those any red was seen on)."""
    if branch not in batch.testing:
        raise ValueError(f"{branch} is not in the set being merged ({', '.join(batch.testing)})")
    left = tuple(b for b in batch.remaining if b != branch)
    return _fresh(left, (SendBack(branch, "conflict"),), batch.runners)


def deferred(batch: Batch, branch: str) -> Step:
    """`branch` conflicted while `batch.testing` was merged, but only with branches before it in
    the set (it merges onto `main` alone): it leaves this batch without a move and waits for the
    next, merged onto a `main` that holds what it conflicted with (then its FIX starts from it)
    or not (then it merges). What is left is merged and tested again, as after a conflict."""
    if branch not in batch.testing:
        raise ValueError(f"{branch} is not in the set being merged ({', '.join(batch.testing)})")
    return _fresh(tuple(b for b in batch.remaining if b != branch), (), batch.runners)


def _isolate(red: tuple[str, ...], rest: tuple[str, ...], before: tuple[Move, ...], runners: int) -> Step:
    """`red` is known red: one branch is the culprit, sent back, and `rest` is tested next;
    more are split in `runners + 1` parts, the prefixes before each part's end tested."""
    if len(red) == 1:
        return _fresh(rest, (*before, SendBack(red[0], "red")), runners)
    cuts = _cuts(len(red), runners + 1)[:-1]
    testing = red[: cuts[-1]]
    return Step(Batch(testing, red, rest, _given(cuts), runners), before, RunTests(testing, _given(cuts)))


def _fresh(branches: tuple[str, ...], before: tuple[Move, ...], runners: int) -> Step:
    """Test `branches` together, of which nothing is known (none left: the batch is done): the
    whole set, and with more runners its prefixes at even cuts too."""
    if not branches:
        return Step(Batch(), before, Done())
    cuts = _given(_cuts(len(branches), runners))
    return Step(Batch(branches, cuts=cuts, runners=runners), before, RunTests(branches, cuts))


def _cuts(length: int, parts: int) -> tuple[int, ...]:
    """Where `parts` even parts of `length` branches end, ascending, each at least one (the last
    is `length`; fewer when there are fewer branches than parts)."""
    return tuple(sorted({math.ceil(i * length / parts) for i in range(1, parts + 1)}))


def _given(cuts: tuple[int, ...]) -> tuple[int, ...]:
    """`cuts` as `RunTests.prefixes` says them: empty for one run of the whole merge."""
    return () if len(cuts) == 1 else cuts
