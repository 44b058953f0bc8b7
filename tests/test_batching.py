"""The merge queue's batches (core/batching.py), driven as the queue would drive them, against a
model of the world: a culprit makes every tested set it is in red, a conflicting branch conflicts
whenever it is merged."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session_scheduler.core.batching import (
    DEFAULT_CAP,
    Batch,
    Done,
    Land,
    RunTests,
    SendBack,
    Step,
    after_test,
    cap_for,
    conflicted,
    deferred,
    plan,
    runners_for,
)


@dataclass
class Trace:
    """What the queue did with one batch."""

    tests: list[tuple[tuple[str, ...], bool]] = field(default_factory=list)
    """Each test run: the set, and whether it passed."""
    rounds: list[list[tuple[tuple[str, ...], bool]]] = field(default_factory=list)
    """The runs side by side, round by round."""
    landed: list[str] = field(default_factory=list)
    lands: list[tuple[str, ...]] = field(default_factory=list)
    """Each landing's set: `main` moved to that run's merge."""
    sent: dict[str, str] = field(default_factory=dict)
    """Branch -> cause."""
    evidence: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """A branch sent back red -> the last red run's set when it was sent back."""
    landed_at_send: dict[str, list[str]] = field(default_factory=dict)
    """A branch sent back red -> what had landed by then."""

    @property
    def runs(self) -> int:
        return len(self.tests)


def drive(
    waiting: tuple[str, ...],
    culprits: frozenset[str] = frozenset(),
    conflicts: frozenset[str] = frozenset(),
    cap: int = DEFAULT_CAP,
    runners: int = 1,
) -> Trace:
    """Run one batch to its end: merge (a conflicting branch stops the merge), test, act."""
    trace = Trace()
    step = plan(waiting, cap, runners)
    for _ in range(10 * len(waiting) + 2):  # a batch that never ends fails here
        for action in step.actions:
            if isinstance(action, Land):
                assert trace.rounds and (action.branches, True) in trace.rounds[-1], "landed untested"
                trace.landed.extend(action.branches)
                trace.lands.append(action.branches)
            elif isinstance(action, SendBack):
                assert action.branch not in trace.sent
                trace.sent[action.branch] = action.cause
                if action.cause == "red":
                    last = next(r for r in reversed(trace.rounds) if not all(ok for _, ok in r))
                    trace.evidence[action.branch] = next(s for s, ok in last if not ok)  # its first red
                    trace.landed_at_send[action.branch] = list(trace.landed)
        nxt = step.next
        if isinstance(nxt, Done):
            assert step.batch == Batch()
            return trace
        clash = next((b for b in nxt.branches if b in conflicts), None)
        if clash is not None:
            step = conflicted(step.batch, clash)
            continue
        assert len(nxt.sets) <= runners and nxt.sets[-1] == nxt.branches
        assert list(nxt.sizes) == sorted(set(nxt.sizes)) and nxt.sizes[0] >= 1
        answers = tuple(not culprits.intersection(tested) for tested in nxt.sets)
        trace.rounds.append(list(zip(nxt.sets, answers, strict=True)))
        trace.tests.extend(trace.rounds[-1])
        step = after_test(step.batch, answers if runners > 1 else answers[0])
    raise AssertionError("the batch did not end")


def names(count: int) -> tuple[str, ...]:
    return tuple(f"feature/F{n:03d}" for n in range(1, count + 1))


@st.composite
def worlds(draw: st.DrawFn) -> tuple[tuple[str, ...], frozenset[str], frozenset[str], int]:
    queue = names(draw(st.integers(0, 20)))
    culprits = frozenset(draw(st.sets(st.sampled_from(queue)))) if queue else frozenset()
    conflicts = frozenset(draw(st.sets(st.sampled_from(queue)))) if queue else frozenset()
    return queue, culprits, conflicts - culprits, draw(st.integers(1, 12)), draw(st.integers(1, 5))


@settings(max_examples=400, deadline=None)
@given(worlds())
def test_every_branch_ends_once_and_exactly_the_culprits_are_sent_back_red(
    world: tuple[tuple[str, ...], frozenset[str], frozenset[str], int, int],
) -> None:
    queue, culprits, conflicts, cap, runners = world
    batch = queue[:cap]
    trace = drive(queue, culprits, conflicts, cap, runners)
    assert sorted([*trace.landed, *trace.sent]) == sorted(batch)  # each exactly once
    assert {b for b, cause in trace.sent.items() if cause == "red"} == culprits.intersection(batch)
    assert {b for b, cause in trace.sent.items() if cause == "conflict"} == conflicts.intersection(batch)
    assert not culprits.intersection(trace.landed)
    assert trace.landed == [b for b in batch if b in trace.landed]  # queue order


@settings(max_examples=400, deadline=None)
@given(worlds())
def test_nothing_lands_from_a_red_run_and_a_red_branch_s_evidence_is_its_own_merge(
    world: tuple[tuple[str, ...], frozenset[str], frozenset[str], int, int],
) -> None:
    queue, culprits, conflicts, cap, runners = world
    trace = drive(queue, culprits, conflicts, cap, runners)
    red_runs = {tested for tested, ok in trace.tests if not ok}
    green_runs = {tested for tested, ok in trace.tests if ok}
    for landing in trace.lands:  # `main` only ever moves to a merge whose run was green
        assert landing in green_runs and landing not in red_runs
    for branch, tested in trace.evidence.items():  # the last red run: `main` as it is now, then it
        assert tested[-1] == branch
        assert set(tested[:-1]) <= set(trace.landed_at_send[branch])


@settings(max_examples=400, deadline=None)
@given(worlds())
def test_test_runs_grow_with_the_log_of_the_batch_per_culprit(
    world: tuple[tuple[str, ...], frozenset[str], frozenset[str], int, int],
) -> None:
    queue, culprits, conflicts, cap, runners = world
    batch = queue[:cap]
    trace = drive(queue, culprits, conflicts, cap, runners)
    found = len(culprits.intersection(batch))
    depth = next(d for d in range(len(batch) + 1) if (runners + 1) ** d >= len(batch))  # log(runners + 1)
    assert len(trace.rounds) <= 1 + found * (depth + 1)
    if not found:  # no culprit: one round, whatever conflicted (each conflict is found by the merge)
        assert len(trace.rounds) == (1 if set(batch) - conflicts else 0)
    if runners == 1:
        assert trace.runs == len(trace.rounds)


@settings(max_examples=200, deadline=None)
@given(worlds())
def test_a_cap_of_one_is_one_branch_at_a_time(
    world: tuple[tuple[str, ...], frozenset[str], frozenset[str], int, int],
) -> None:
    queue, culprits, conflicts, _, runners = world
    trace = drive(queue, culprits, conflicts, cap=1, runners=runners)
    if queue and queue[0] not in conflicts:
        assert trace.tests == [((queue[0],), queue[0] not in culprits)]
    else:
        assert trace.tests == []


def test_no_culprit_is_one_run_that_lands_the_whole_batch() -> None:
    trace = drive(names(8))
    assert trace.tests == [(names(8), True)]
    assert trace.landed == list(names(8)) and trace.sent == {}


def test_the_batch_is_the_first_cap_branches() -> None:
    step = plan(names(12), cap=8)
    assert step.actions == (RunTests(names(8)),) and step.batch.remaining == names(8)


@pytest.mark.parametrize(
    ("culprit", "runs"),
    [(1, 5), (2, 5), (3, 5), (4, 5), (5, 5), (6, 5), (7, 5), (8, 4)],
)
def test_one_culprit_in_8_is_found_in_3_more_runs(culprit: int, runs: int) -> None:
    """Red, then three halvings find it; a culprit in the first half costs one more run: the
    branches after it, untested since, are tested together."""
    queue = names(8)
    trace = drive(queue, frozenset({queue[culprit - 1]}))
    assert trace.runs == runs
    assert trace.sent == {queue[culprit - 1]: "red"}
    assert trace.landed == [b for b in queue if b != queue[culprit - 1]]


def test_the_last_of_8_red_runs_first_half_and_lands_it() -> None:
    queue = names(8)
    trace = drive(queue, frozenset({queue[7]}))
    assert trace.tests == [(queue, False), (queue[:4], True), (queue[4:6], True), (queue[6:7], True)]


def test_all_red_sends_every_branch_back_and_lands_nothing() -> None:
    queue = names(8)
    trace = drive(queue, frozenset(queue))
    assert trace.landed == [] and trace.sent == dict.fromkeys(queue, "red")
    assert trace.runs <= 1 + 8 * 4


def test_a_conflict_is_sent_back_without_a_run_and_the_rest_goes_on() -> None:
    queue = names(4)
    step = plan(queue)
    step = conflicted(step.batch, queue[1])
    assert step.actions == (SendBack(queue[1], "conflict"), RunTests((queue[0], *queue[2:])))
    step = after_test(step.batch, True)
    assert step.actions == (Land((queue[0], *queue[2:])), Done())


def test_an_empty_queue_is_done_at_once() -> None:
    assert plan(()) == Step(Batch(), (), Done())


@pytest.mark.parametrize("cap", [0, -1])
def test_a_batch_holds_at_least_one_branch(cap: int) -> None:
    with pytest.raises(ValueError, match="at least one"):
        plan(names(2), cap)


def test_the_answers_must_fit_the_batch() -> None:
    with pytest.raises(ValueError, match="waits twice"):
        plan(("a", "a"))
    with pytest.raises(ValueError, match=r"^the batch is done: nothing was being tested$"):
        after_test(Batch(), True)
    with pytest.raises(ValueError, match=r"^c is not in the set being merged \(a, b\)$"):
        conflicted(plan(("a", "b")).batch, "c")
    with pytest.raises(ValueError, match=r"^c is not in the set being merged \(a, b\)$"):
        deferred(plan(("a", "b")).batch, "c")


def test_three_runners_find_one_culprit_in_8_in_one_more_round() -> None:
    """A fresh 8 with three runners: the merges after 3, 6 and 8 side by side; the first three
    land, the first red bounds the culprit to the next three, and one round of the merges after
    the first and the second of them (onto the `main` that holds the first three) finds it."""
    queue = names(8)
    trace = drive(queue, frozenset({queue[4]}), runners=3)
    assert trace.rounds == [
        [(queue[:3], True), (queue[:6], False), (queue[:8], False)],
        [(queue[3:4], True), (queue[3:5], False)],
        [(queue[5:6], True), (queue[5:7], True), (queue[5:8], True)],
    ]
    assert trace.sent == {queue[4]: "red"} and trace.evidence[queue[4]] == queue[3:5]
    assert trace.lands == [queue[:3], queue[3:4], queue[5:8]]


def test_more_runners_than_branches_test_each_prefix_once() -> None:
    step = plan(names(2), runners=5)
    assert step.next == RunTests(names(2), (1, 2)) and step.next.sets == (names(1), names(2))


def test_the_answers_must_be_one_per_run() -> None:
    step = plan(names(4), runners=2)
    with pytest.raises(ValueError, match="2 runs were being tested, 1 answers came back"):
        after_test(step.batch, (True,))
    with pytest.raises(ValueError, match="at least one test run"):
        plan(names(4), runners=0)


def test_a_deferred_branch_leaves_the_batch_with_no_move_and_the_rest_is_merged_again() -> None:
    queue = names(4)
    step = deferred(plan(queue).batch, queue[2])
    assert step.actions == (RunTests((*queue[:2], queue[3])),)
    step = after_test(step.batch, True)
    assert step.actions == (Land((*queue[:2], queue[3])), Done())
    with pytest.raises(ValueError, match="not in the set"):
        deferred(plan(queue).batch, "other")


@pytest.mark.parametrize(
    ("lanes", "runners", "cap"), [(1, 1, 8), (3, 1, 8), (4, 1, 8), (7, 1, 8), (8, 2, 16), (16, 4, 32)]
)
def test_one_runner_per_four_lanes_and_8_branches_per_runner(lanes: int, runners: int, cap: int) -> None:
    assert runners_for(lanes) == runners and cap_for(runners) == cap
    assert isinstance(cap_for(runners), int)
