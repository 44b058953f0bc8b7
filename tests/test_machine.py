"""The state machine: one row per rule, each comparing the whole next state and its events.

Every row of DESIGN.md's table (and every failure rule) is a case in which that rule is
what decides; property tests check that any sequence of outcomes ends within the bound.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session_scheduler.core.config import AgentConfig, SessionType
from session_scheduler.core.machine import (
    ArchitectureDue,
    Backlog,
    Blocked,
    Done,
    Event,
    GaveUp,
    Halted,
    Lane,
    Merged,
    Outcome,
    Rejected,
    Retry,
    SessionState,
    Step,
    WorkItem,
    architecture_due,
    architecture_fixes,
    feature,
    get_next_session_type,
    resume,
    transition,
)

T = SessionType
CFG = AgentConfig(architecture_interval=2, max_fix_rounds=2, max_rejections=2, max_attempts=3)
FEATURES = ("F001", "F002", "F003")
F1, F2, ARCH7 = feature("F001"), feature("F002"), architecture_fixes(7)


def S(
    role: SessionType,
    work: WorkItem | None = None,
    *,
    features: tuple[str, ...] = FEATURES,
    passing: tuple[str, ...] = (),
    blocked: tuple[str, ...] = (),
    rejections: tuple[tuple[str, int], ...] = (),
    attempts: int = 0,
    fix_rounds: int = 0,
    open_review: int | None = None,
    checked: int = 0,
    count: int = 4,
    halt: str = "",
) -> SessionState:
    return SessionState(
        Backlog(features, frozenset(passing), frozenset(blocked), rejections),
        Lane(role, work, attempts, fix_rounds, open_review),
        architecture_checked_at=checked,
        session_count=count,
        halt_reason=halt,
    )


def ok(role: SessionType, *passing: str, **kw: object) -> Outcome:
    return Outcome(role, True, passing=frozenset(passing), **kw)  # type: ignore[arg-type]


def failed(role: SessionType, *passing: str) -> Outcome:
    return Outcome(role, False, passing=frozenset(passing), reason="bad")


Row = tuple[str, SessionState, Outcome, SessionState, tuple[Event, ...]]
ROWS: list[Row] = [
    # -- INITIALIZER
    (
        "INITIALIZER with a valid list: IMPLEMENT the first feature",
        S(T.INITIALIZER, features=(), count=0, attempts=1),
        ok(T.INITIALIZER, feature_ids=FEATURES),
        S(T.IMPLEMENT, F1, count=1),
        (),
    ),
    (
        "INITIALIZER failed, attempts left: retried",
        S(T.INITIALIZER, features=(), count=0),
        failed(T.INITIALIZER),
        S(T.INITIALIZER, features=(), count=1, attempts=1),
        (Retry(T.INITIALIZER, 2, "bad"),),
    ),
    (
        "INITIALIZER failed on its last attempt: HALTED",
        S(T.INITIALIZER, features=(), count=2, attempts=2),
        failed(T.INITIALIZER),
        S(T.HALTED, features=(), count=3, attempts=0, halt="INITIALIZER failed 3 times: bad"),
        (GaveUp(T.INITIALIZER, "bad"), Halted("INITIALIZER failed 3 times: bad")),
    ),
    # -- IMPLEMENT
    (
        "IMPLEMENT with new commits: REVIEW",
        S(T.IMPLEMENT, F1, attempts=1),
        ok(T.IMPLEMENT),
        S(T.REVIEW, F1, count=5),
        (),
    ),
    (
        "IMPLEMENT failed, attempts left: retried",
        S(T.IMPLEMENT, F1, attempts=1),
        failed(T.IMPLEMENT),
        S(T.IMPLEMENT, F1, attempts=2, count=5),
        (Retry(T.IMPLEMENT, 3, "bad"),),
    ),
    (
        "IMPLEMENT failed on its last attempt: counts as a rejection, retried from main",
        S(T.IMPLEMENT, F1, attempts=2),
        failed(T.IMPLEMENT),
        S(T.IMPLEMENT, F1, rejections=(("F001", 1),), count=5),
        (GaveUp(T.IMPLEMENT, "bad"), Rejected(F1)),
    ),
    (
        "IMPLEMENT failed on its last attempt, second rejection: blocked, next feature",
        S(T.IMPLEMENT, F1, attempts=2, rejections=(("F001", 1),)),
        failed(T.IMPLEMENT),
        S(T.IMPLEMENT, F2, rejections=(("F001", 2),), blocked=("F001",), count=5),
        (GaveUp(T.IMPLEMENT, "bad"), Rejected(F1), Blocked("F001")),
    ),
    # -- REVIEW
    (
        "REVIEW REQUEST_CHANGES, fix rounds left: FIX",
        S(T.REVIEW, F1, attempts=1),
        ok(T.REVIEW, verdict="REQUEST_CHANGES", review_id=5),
        S(T.FIX, F1, fix_rounds=1, open_review=5, count=5),
        (),
    ),
    (
        "REVIEW REQUEST_CHANGES, the last fix round left: FIX",
        S(T.REVIEW, F1, fix_rounds=1, open_review=4),
        ok(T.REVIEW, verdict="REQUEST_CHANGES", review_id=6),
        S(T.FIX, F1, fix_rounds=2, open_review=6, count=5),
        (),
    ),
    (
        "REVIEW REQUEST_CHANGES, no fix rounds left: treated as REJECT",
        S(T.REVIEW, F1, fix_rounds=2, open_review=6),
        ok(T.REVIEW, verdict="REQUEST_CHANGES", review_id=8),
        S(T.IMPLEMENT, F1, rejections=(("F001", 1),), count=5),
        (Rejected(F1),),
    ),
    (
        "REVIEW REJECT: branch dropped, feature retried",
        S(T.REVIEW, F2, passing=("F001",), fix_rounds=1, open_review=3),
        ok(T.REVIEW, "F001", verdict="REJECT", review_id=4),
        S(T.IMPLEMENT, F2, passing=("F001",), rejections=(("F002", 1),), count=5),
        (Rejected(F2),),
    ),
    (
        "REVIEW REJECT, the Kth rejection: blocked, next feature",
        S(T.REVIEW, F1, rejections=(("F001", 1), ("F003", 1))),
        ok(T.REVIEW, verdict="REJECT", review_id=4),
        S(T.IMPLEMENT, F2, rejections=(("F001", 2), ("F003", 1)), blocked=("F001",), count=5),
        (Rejected(F1), Blocked("F001")),
    ),
    (
        "REVIEW PASS, none due: IMPLEMENT the next feature",
        S(T.REVIEW, F1, fix_rounds=1, open_review=2),
        ok(T.REVIEW, "F001", verdict="PASS", review_id=3),
        S(T.IMPLEMENT, F2, passing=("F001",), count=5),
        (Merged(F1),),
    ),
    (
        "REVIEW PASS, an architecture review due: ARCHITECTURE",
        S(T.REVIEW, F2, passing=("F001",)),
        ok(T.REVIEW, "F001", "F002", verdict="PASS", review_id=3),
        S(T.ARCHITECTURE, passing=("F001", "F002"), count=5),
        (Merged(F2), ArchitectureDue(2)),
    ),
    (
        "REVIEW PASS of the last feature: DONE wins over a due review",
        S(T.REVIEW, feature("F003"), passing=("F001",), blocked=("F002",)),
        ok(T.REVIEW, "F001", "F003", verdict="PASS", review_id=9),
        S(T.DONE, passing=("F001", "F003"), blocked=("F002",), count=5),
        (Merged(feature("F003")), Done()),
    ),
    (
        "REVIEW REJECT of the last open feature, the rest passing: DONE",
        S(T.REVIEW, feature("F003"), passing=("F001", "F002"), rejections=(("F003", 1),), checked=2),
        ok(T.REVIEW, "F001", "F002", verdict="REJECT", review_id=9),
        S(T.DONE, passing=("F001", "F002"), blocked=("F003",), rejections=(("F003", 2),), checked=2, count=5),
        (Rejected(feature("F003")), Blocked("F003"), Done()),
    ),
    (
        "REVIEW failed, attempts left: retried; its claimed `passes` do not count",
        S(T.REVIEW, F1, fix_rounds=1, open_review=2),
        failed(T.REVIEW, "F001"),
        S(T.REVIEW, F1, fix_rounds=1, open_review=2, attempts=1, count=5),
        (Retry(T.REVIEW, 2, "bad"),),
    ),
    (
        "REVIEW failed on its last attempt: counts as a rejection",
        S(T.REVIEW, F1, attempts=2),
        failed(T.REVIEW),
        S(T.IMPLEMENT, F1, rejections=(("F001", 1),), count=5),
        (GaveUp(T.REVIEW, "bad"), Rejected(F1)),
    ),
    # -- FIX
    (
        "FIX: always REVIEW, same round and review",
        S(T.FIX, F1, fix_rounds=2, open_review=6, attempts=1),
        ok(T.FIX),
        S(T.REVIEW, F1, fix_rounds=2, open_review=6, count=5),
        (),
    ),
    (
        "FIX failed, attempts left: retried",
        S(T.FIX, F1, fix_rounds=1, open_review=6),
        failed(T.FIX),
        S(T.FIX, F1, fix_rounds=1, open_review=6, attempts=1, count=5),
        (Retry(T.FIX, 2, "bad"),),
    ),
    (
        "FIX failed on its last attempt: REVIEW judges the branch as it stands",
        S(T.FIX, F1, fix_rounds=1, open_review=6, attempts=2),
        failed(T.FIX),
        S(T.REVIEW, F1, fix_rounds=1, open_review=6, count=5),
        (GaveUp(T.FIX, "bad"),),
    ),
    # -- ARCHITECTURE
    (
        "ARCHITECTURE with issues: FIX on arch/<review>",
        S(T.ARCHITECTURE, passing=("F001", "F002"), attempts=1),
        ok(T.ARCHITECTURE, "F001", "F002", verdict="REQUEST_CHANGES", review_id=7),
        S(T.FIX, ARCH7, passing=("F001", "F002"), fix_rounds=1, open_review=7, checked=2, count=5),
        (),
    ),
    (
        "ARCHITECTURE without issues: IMPLEMENT",
        S(T.ARCHITECTURE, passing=("F001", "F002")),
        ok(T.ARCHITECTURE, "F001", "F002", verdict="PASS", review_id=7),
        S(T.IMPLEMENT, feature("F003"), passing=("F001", "F002"), checked=2, count=5),
        (),
    ),
    (
        "ARCHITECTURE failed, attempts left: retried, not yet counted as done",
        S(T.ARCHITECTURE, passing=("F001", "F002")),
        failed(T.ARCHITECTURE),
        S(T.ARCHITECTURE, passing=("F001", "F002"), attempts=1, count=5),
        (Retry(T.ARCHITECTURE, 2, "bad"),),
    ),
    (
        "ARCHITECTURE failed on its last attempt: given up for this multiple",
        S(T.ARCHITECTURE, passing=("F001", "F002"), attempts=2),
        failed(T.ARCHITECTURE),
        S(T.IMPLEMENT, feature("F003"), passing=("F001", "F002"), checked=2, count=5),
        (GaveUp(T.ARCHITECTURE, "bad"),),
    ),
    (
        "REVIEW PASS of an architecture branch: merged, IMPLEMENT",
        S(T.REVIEW, ARCH7, passing=("F001", "F002"), fix_rounds=1, open_review=7, checked=2),
        ok(T.REVIEW, "F001", "F002", verdict="PASS", review_id=8),
        S(T.IMPLEMENT, feature("F003"), passing=("F001", "F002"), checked=2, count=5),
        (Merged(ARCH7),),
    ),
    (
        "REVIEW REJECT of an architecture branch: dropped, no feature counts a rejection",
        S(T.REVIEW, ARCH7, passing=("F001", "F002"), fix_rounds=1, open_review=7, checked=2),
        ok(T.REVIEW, "F001", "F002", verdict="REJECT", review_id=8),
        S(T.IMPLEMENT, feature("F003"), passing=("F001", "F002"), checked=2, count=5),
        (Rejected(ARCH7),),
    ),
    (
        "A review due after a rejection (the interval was lowered on resume) is not skipped",
        S(T.REVIEW, feature("F003"), passing=("F001", "F002")),
        ok(T.REVIEW, "F001", "F002", verdict="REJECT", review_id=8),
        S(T.ARCHITECTURE, passing=("F001", "F002"), rejections=(("F003", 1),), count=5),
        (Rejected(feature("F003")), ArchitectureDue(2)),
    ),
]


@pytest.mark.parametrize(("name", "before", "outcome", "after", "events"), ROWS, ids=[r[0] for r in ROWS])
def test_transition_rule(
    name: str, before: SessionState, outcome: Outcome, after: SessionState, events: tuple[Event, ...]
) -> None:
    assert transition(before, outcome, CFG) == Step(after, events)
    assert get_next_session_type(before, outcome, CFG) is after.lane.role


def test_before_any_session_the_state_names_the_next_role() -> None:
    assert get_next_session_type(SessionState(), None, CFG) is T.INITIALIZER
    assert get_next_session_type(S(T.REVIEW, F1), None, CFG) is T.REVIEW


def test_an_outcome_of_another_role_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot follow"):
        transition(S(T.REVIEW, F1), ok(T.IMPLEMENT), CFG)


def test_one_rejection_blocks_when_the_limit_is_one() -> None:
    step = transition(S(T.REVIEW, F1), ok(T.REVIEW, verdict="REJECT"), replace(CFG, max_rejections=1))
    assert step.state.backlog.blocked == {"F001"} and Blocked("F001") in step.events


def test_a_single_attempt_gives_up_at_once() -> None:
    step = transition(S(T.IMPLEMENT, F1), failed(T.IMPLEMENT), replace(CFG, max_attempts=1))
    assert step.events[0] == GaveUp(T.IMPLEMENT, "bad") and step.state.lane.attempts == 0


def test_no_fix_rounds_means_every_request_for_changes_is_a_rejection() -> None:
    step = transition(
        S(T.REVIEW, F1), ok(T.REVIEW, verdict="REQUEST_CHANGES"), replace(CFG, max_fix_rounds=0)
    )
    assert step.events == (Rejected(F1),) and step.state.lane.role is T.IMPLEMENT


@pytest.mark.parametrize(
    ("completed", "checked", "interval", "due"),
    [(2, 0, 2, True), (1, 0, 2, False), (3, 2, 2, False), (4, 2, 2, True), (5, 4, 5, True), (4, 4, 5, False)],
)
def test_architecture_due_once_per_multiple(completed: int, checked: int, interval: int, due: bool) -> None:
    ids = tuple(f"F{i:03d}" for i in range(1, 7))
    state = SessionState(Backlog(ids, frozenset(ids[:completed])), architecture_checked_at=checked)
    assert architecture_due(state, AgentConfig(architecture_interval=interval)) is due


def test_the_backlog_derives_what_it_does_not_store() -> None:
    backlog = Backlog(FEATURES, frozenset({"F002"}), frozenset({"F001"}))
    assert backlog.completed == 1 and backlog.next_open() == "F003" and not backlog.settled()
    assert Backlog().settled() is False and Backlog().next_open() is None
    assert Backlog(("F001",), blocked=frozenset({"F001"})).settled()
    assert backlog.rejection_count("F003") == 0
    assert backlog.reject("F003", 3).reject("F003", 3).rejection_count("F003") == 2


def test_work_items_know_their_branch() -> None:
    assert (F1.branch, ARCH7.branch) == ("feature/F001", "arch/7")
    assert (str(F1), str(ARCH7)) == ("F001", "the fixes of architecture review 7")
    assert WorkItem.from_json(F1.to_json()) == F1 and WorkItem.from_json(ARCH7.to_json()) == ARCH7
    assert WorkItem.from_json(None) is None
    for bad in ({}, {"feature_id": "F001", "architecture_review": 7}):
        with pytest.raises(
            ValueError, match=r"^a work item is a feature or an architecture review's fixes, not both$"
        ):
            WorkItem(**bad)  # type: ignore[arg-type]


def test_resume_retries_a_halted_initializer_and_leaves_other_states_alone() -> None:
    halted = S(T.HALTED, features=(), halt="INITIALIZER failed 3 times: bad", count=3)
    assert resume(halted) == S(T.INITIALIZER, features=(), count=3)
    assert resume(S(T.FIX, F1, attempts=1)) == S(T.FIX, F1, attempts=1)


def test_model_for_each_role() -> None:
    from session_scheduler.core.config import get_model_for_session

    assert [get_model_for_session(t, AgentConfig()) for t in (T.INITIALIZER, T.IMPLEMENT, T.FIX)] == [
        "sonnet"
    ] * 3
    assert [get_model_for_session(t, AgentConfig()) for t in (T.REVIEW, T.ARCHITECTURE)] == ["opus"] * 2
    custom = AgentConfig(models={**AgentConfig().models, "REVIEW": "my-model"})
    assert get_model_for_session(T.REVIEW, custom) == "my-model"
    with pytest.raises(ValueError):
        get_model_for_session(T.DONE, custom)


def session_bound(feature_count: int, config: AgentConfig) -> int:
    """An upper bound on the sessions of a whole run: every loop of the machine is bounded."""
    a = config.max_attempts
    review_cycle = a * (1 + 1) * (config.max_fix_rounds + 1)  # (REVIEW + FIX) per round
    per_try = a + review_cycle  # IMPLEMENT then the review cycle
    per_feature = per_try * (config.max_rejections + 1)
    arch_reviews = feature_count // config.architecture_interval + 1
    per_arch = a + review_cycle * (config.max_rejections + 1)
    return a + feature_count * per_feature + arch_reviews * per_arch


# -- properties --------------------------------------------------------------------------------


def drive(
    outcomes: list[tuple[bool, str]], cfg: AgentConfig, n_features: int
) -> tuple[int, SessionState, list[Event]]:
    """Run the machine on scripted (ok, verdict) outcomes; a PASS marks the feature passing."""
    ids = tuple(f"F{i:03d}" for i in range(1, n_features + 1))
    state, steps, events = SessionState(), 0, []
    script = iter(outcomes)
    while state.lane.role not in (T.DONE, T.HALTED):
        good, verdict = next(script, (True, "PASS"))
        role, work, passing = state.lane.role, state.lane.work, state.backlog.passing
        if role is T.INITIALIZER:
            out = Outcome(role, good, feature_ids=ids if good else ())
        elif role in (T.REVIEW, T.ARCHITECTURE):
            v = verdict if role is T.REVIEW or verdict != "REJECT" else "PASS"
            merged = {work.feature_id} if v == "PASS" and work and work.feature_id else set()
            out = Outcome(role, good, verdict=v, review_id=steps + 1, passing=frozenset(passing | merged))  # type: ignore[arg-type]
        else:
            out = Outcome(role, good, passing=passing)
        step = transition(state, out, cfg)
        state, steps = step.state, steps + 1
        events.extend(step.events)
        assert steps <= session_bound(n_features, cfg), "the loop must end within the bound"
    return steps, state, events


outcome_st = st.tuples(st.booleans(), st.sampled_from(["PASS", "REQUEST_CHANGES", "REJECT"]))


@settings(max_examples=300, deadline=None)
@given(
    outcomes=st.lists(outcome_st, max_size=400),
    n_features=st.integers(1, 8),
    interval=st.integers(1, 4),
    rounds=st.integers(0, 3),
    rejections=st.integers(1, 3),
    attempts=st.integers(1, 3),
)
def test_any_sequence_of_outcomes_ends_within_the_bound(
    outcomes: list[tuple[bool, str]],
    n_features: int,
    interval: int,
    rounds: int,
    rejections: int,
    attempts: int,
) -> None:
    cfg = AgentConfig(
        architecture_interval=interval,
        max_fix_rounds=rounds,
        max_rejections=rejections,
        max_attempts=attempts,
    )
    _, final, events = drive(outcomes, cfg, n_features)
    if final.lane.role is T.DONE:
        assert final.backlog.settled() and events[-1] == Done()
    merged = [e.work.feature_id for e in events if isinstance(e, Merged) and e.work.feature_id]
    assert sorted(merged) == sorted(final.backlog.passing), "a feature completes exactly when it is merged"
    blocked = [e.feature_id for e in events if isinstance(e, Blocked)]
    assert sorted(blocked) == sorted(final.backlog.blocked), "each block is reported once"


@settings(max_examples=200, deadline=None)
@given(outcomes=st.lists(outcome_st, min_size=1, max_size=60), n=st.integers(1, 5))
def test_the_next_state_depends_only_on_state_and_outcome(outcomes: list[tuple[bool, str]], n: int) -> None:
    cfg = AgentConfig(architecture_interval=2, max_fix_rounds=1, max_rejections=2, max_attempts=2)
    assert drive(outcomes, cfg, n) == drive(outcomes, cfg, n)


def test_architecture_cadence_over_20_features_with_interval_3() -> None:
    _, final, events = drive([], AgentConfig(architecture_interval=3), 20)
    assert [e.completed for e in events if isinstance(e, ArchitectureDue)] == [3, 6, 9, 12, 15, 18]
    assert final.backlog.completed == 20 and final.lane.role is T.DONE


def test_a_changed_interval_on_resume_neither_skips_nor_repeats_a_review() -> None:
    ids = tuple(f"F{i:03d}" for i in range(1, 7))
    four = frozenset(ids[:4])
    state = SessionState(Backlog(ids, four), Lane(T.REVIEW, feature("F005")), architecture_checked_at=4)
    wider = AgentConfig(architecture_interval=5)
    state = transition(state, Outcome(T.REVIEW, True, verdict="PASS", passing=four | {"F005"}), wider).state
    assert state.lane.role is T.ARCHITECTURE and state.backlog.completed == 5
    state = transition(
        state, Outcome(T.ARCHITECTURE, True, verdict="PASS", passing=four | {"F005"}), wider
    ).state
    assert state.architecture_checked_at == 5 and state.lane == Lane(T.IMPLEMENT, feature("F006"))


def test_a_single_attempt_is_told_in_the_singular() -> None:
    step = transition(
        S(T.INITIALIZER, features=(), count=0), failed(T.INITIALIZER), replace(CFG, max_attempts=1)
    )
    assert step.state.halt_reason == "INITIALIZER failed 1 time: bad"


def test_red_gates_on_the_branch_send_the_work_to_fix_and_reject_it_when_rounds_run_out_red_gates_to_fix_and_rejects_when_rounds_run_out() -> (
    None
):
    from session_scheduler.core.machine import GatesRed

    config = AgentConfig(max_fix_rounds=1)
    work = feature("F001")
    state = SessionState(lane=Lane(T.IMPLEMENT, work))
    step = transition(state, Outcome(T.IMPLEMENT, True, gates_review=4), config)
    assert step.state.lane == Lane(T.FIX, work, fix_rounds=1, open_review=4)
    assert step.events == (GatesRed(work, 4),)
    fixed = transition(step.state, Outcome(T.FIX, True, gates_review=5), config)
    assert fixed.state.lane.role is not T.FIX and GatesRed(work, 5) in fixed.events
    assert any(type(e).__name__ == "Rejected" for e in fixed.events)
    assert transition(state, Outcome(T.IMPLEMENT, True), config).state.lane.role is T.REVIEW
