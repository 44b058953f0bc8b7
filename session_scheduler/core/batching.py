"""The merge queue's batches (pure): test several approved branches together, bisect on red.

When several approved branches wait, the queue merges them all, in queue order, onto `main` and
runs the tests once; green lands them all. Red bisects: the first half of the red set is tested
(and landed on green), and so on until the culprit is one branch, which alone is sent back; the
branches after it are tested together again. A branch that conflicts while its set is merged is
sent back at once, and the set is merged again without it. One branch at a time is `cap=1`.

The caller drives it (the merging and the test runs are its own): `plan` starts a batch, and
`after_test` / `conflicted` answer the batch's `RunTests`. Each returns a `Step`: the batch, the
landings and sends-back to act on in order, and what comes next: a `RunTests` or `Done`.

Red is inferred, not always seen: when a set is red and its first half green, the second half is
red on the `main` that now holds the first (the same merge, so the same tree), and is split
without being tested again; a single branch known red so is sent back with the output of the
last red run, which tested exactly that tree. This holds while only the batch moves `main` and
the tests are deterministic; when `main` moved otherwise, the caller plans again from `remaining`.

Test runs per batch of n with c culprits: at most 1 + c * (ceil(log2 n) + 1) (one run for the
batch; to isolate each culprit, one run per halving; then one for the branches after it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Cause = Literal["red", "conflict"]

DEFAULT_CAP = 8
"""The most branches one batch tests together: one red branch in 8 costs 4 runs at most to find."""


@dataclass(frozen=True)
class RunTests:
    """Merge these branches, in this order, onto `main` without moving it, and run the tests."""

    branches: tuple[str, ...]


@dataclass(frozen=True)
class Land:
    """The tested merge was green: move `main` to it (these branches land, in this order)."""

    branches: tuple[str, ...]


@dataclass(frozen=True)
class SendBack:
    """This branch goes back to its lane as a FIX: it conflicts, or it is red (the output of the
    last red test run is its evidence: that run tested `main` with it merged last)."""

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
    """Where a batch stands: the set under test, the red set it halves, the branches after them.
    Queue order is `testing`, then the rest of `red`, then `rest`."""

    testing: tuple[str, ...] = ()
    """The set whose test result is awaited (empty: the batch is done)."""
    red: tuple[str, ...] = ()
    """A set known red on the current `main`; `testing` is its first half (empty: `testing` is
    a set of which nothing is known)."""
    rest: tuple[str, ...] = ()
    """Branches after these, untested since a culprit before them was found."""

    @property
    def remaining(self) -> tuple[str, ...]:
        """The branches neither landed nor sent back, in queue order (what to plan again from)."""
        return (*self.testing, *self.red[len(self.testing) :], *self.rest)


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


def plan(waiting: tuple[str, ...], cap: int = DEFAULT_CAP) -> Step:
    """A batch of the first `cap` branches waiting (in queue order), and its first test."""
    if cap < 1:
        raise ValueError(f"a batch holds at least one branch (cap {cap})")
    if len(set(waiting)) != len(waiting):
        raise ValueError(f"a branch waits twice: {waiting}")
    return _fresh(waiting[:cap], ())


def after_test(batch: Batch, passed: bool) -> Step:
    """The tests of `batch.testing` came back: green lands it, red narrows the search."""
    if not batch.testing:
        raise ValueError("the batch is done: nothing was being tested")
    if passed:
        landed = (Land(batch.testing),)
        if not batch.red:  # a set of which nothing was known: every branch of it is in
            return _fresh(batch.rest, landed)
        return _isolate(batch.red[len(batch.testing) :], batch.rest, landed)
    after = (*batch.red[len(batch.testing) :], *batch.rest)  # untested now: the red set is smaller
    return _isolate(batch.testing, after, ())


def conflicted(batch: Batch, branch: str) -> Step:
    """`branch` conflicted while `batch.testing` was merged: it goes back at once, and what is
    left is merged and tested again, as a set of which nothing is known (a conflict means the
    `main` or the order differ from those any red was seen on)."""
    if branch not in batch.testing:
        raise ValueError(f"{branch} is not in the set being merged ({', '.join(batch.testing)})")
    left = tuple(b for b in batch.remaining if b != branch)
    return _fresh(left, (SendBack(branch, "conflict"),))


def _isolate(red: tuple[str, ...], rest: tuple[str, ...], before: tuple[Move, ...]) -> Step:
    """`red` is known red: one branch is the culprit, sent back, and `rest` is tested next;
    more are halved, the first half tested."""
    if len(red) == 1:
        return _fresh(rest, (*before, SendBack(red[0], "red")))
    half = red[: (len(red) + 1) // 2]
    return Step(Batch(half, red, rest), before, RunTests(half))


def _fresh(branches: tuple[str, ...], before: tuple[Move, ...]) -> Step:
    """Test `branches` together, of which nothing is known (none left: the batch is done)."""
    if not branches:
        return Step(Batch(), before, Done())
    return Step(Batch(branches), before, RunTests(branches))
