"""The state machine: one test per row of DESIGN.md's transition table, plus properties."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from config import (
    AgentConfig,
    Outcome,
    SessionState,
    SessionType,
    advance,
    get_model_for_session,
    get_next_session_type,
    session_bound,
)

T = SessionType
CFG = AgentConfig(architecture_interval=5, max_fix_rounds=2, max_rejections=2, max_attempts=3)
FEATURES = ("F001", "F002", "F003")


def state(next_session: SessionType = T.IMPLEMENT, **kw: object) -> SessionState:
    base = SessionState(
        next_session=next_session, features=FEATURES, current_feature="F001", current_branch="feature/F001"
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def ok(t: SessionType, **kw: object) -> Outcome:
    return Outcome(session_type=t, ok=True, **kw)  # type: ignore[arg-type]


def failed(t: SessionType) -> Outcome:
    return Outcome(session_type=t, ok=False, reason="no commits")


ROWS = [
    ("no feature list yet", SessionState(), None, T.INITIALIZER),
    (
        "INITIALIZER failed, attempts left",
        SessionState(next_session=T.INITIALIZER),
        failed(T.INITIALIZER),
        T.INITIALIZER,
    ),
    (
        "INITIALIZER failed, no attempts left",
        SessionState(next_session=T.INITIALIZER, attempts=2),
        failed(T.INITIALIZER),
        T.HALTED,
    ),
    (
        "INITIALIZER valid list",
        SessionState(next_session=T.INITIALIZER),
        ok(T.INITIALIZER, feature_ids=FEATURES),
        T.IMPLEMENT,
    ),
    ("IMPLEMENT with new commits", state(), ok(T.IMPLEMENT), T.REVIEW),
    ("IMPLEMENT failed, attempts left", state(), failed(T.IMPLEMENT), T.IMPLEMENT),
    (
        "REVIEW REQUEST_CHANGES, rounds left",
        state(T.REVIEW),
        ok(T.REVIEW, verdict="REQUEST_CHANGES", review_id=1),
        T.FIX,
    ),
    (
        "REVIEW REQUEST_CHANGES, no rounds left = REJECT",
        state(T.REVIEW, fix_rounds=2),
        ok(T.REVIEW, verdict="REQUEST_CHANGES"),
        T.IMPLEMENT,
    ),
    ("REVIEW REJECT: feature retried", state(T.REVIEW), ok(T.REVIEW, verdict="REJECT"), T.IMPLEMENT),
    (
        "REVIEW PASS, architecture due",
        state(T.REVIEW, features_completed=4),
        ok(T.REVIEW, verdict="PASS", passing=frozenset({"F001"})),
        T.ARCHITECTURE,
    ),
    (
        "REVIEW PASS, none due",
        state(T.REVIEW),
        ok(T.REVIEW, verdict="PASS", passing=frozenset({"F001"})),
        T.IMPLEMENT,
    ),
    ("FIX always", state(T.FIX), ok(T.FIX), T.REVIEW),
    ("FIX failed at the bound still goes to REVIEW", state(T.FIX, attempts=2), failed(T.FIX), T.REVIEW),
    (
        "ARCHITECTURE no issues",
        state(T.ARCHITECTURE, current_feature=None),
        ok(T.ARCHITECTURE, verdict="PASS"),
        T.IMPLEMENT,
    ),
    (
        "ARCHITECTURE issues",
        state(T.ARCHITECTURE, current_feature=None),
        ok(T.ARCHITECTURE, verdict="REQUEST_CHANGES", review_id=7),
        T.FIX,
    ),
    (
        "every feature passes",
        state(T.REVIEW, current_feature="F003", passing=frozenset({"F001", "F002"})),
        ok(T.REVIEW, verdict="PASS", passing=frozenset(FEATURES)),
        T.DONE,
    ),
    (
        "every feature passes or is blocked",
        state(
            T.REVIEW,
            current_feature="F003",
            passing=frozenset({"F001"}),
            blocked=frozenset({"F002"}),
            rejections=(("F003", 1),),
        ),
        ok(T.REVIEW, verdict="REJECT", passing=frozenset({"F001"})),
        T.DONE,
    ),
]


@pytest.mark.parametrize(("name", "before", "outcome", "expected"), ROWS, ids=[r[0] for r in ROWS])
def test_transition_table(
    name: str, before: SessionState, outcome: Outcome | None, expected: SessionType
) -> None:
    assert get_next_session_type(before, outcome, CFG) is expected


def test_rejection_blocks_after_max_rejections_and_moves_on() -> None:
    s = state(T.REVIEW)
    s = advance(s, ok(T.REVIEW, verdict="REJECT"), CFG)
    assert (s.next_session, s.current_feature, s.blocked) == (T.IMPLEMENT, "F001", frozenset())
    s = advance(dataclasses.replace(s, next_session=T.REVIEW), ok(T.REVIEW, verdict="REJECT"), CFG)
    assert s.blocked == {"F001"}
    assert (s.next_session, s.current_feature, s.current_branch) == (T.IMPLEMENT, "F002", "feature/F002")


def test_architecture_issues_open_an_arch_branch_without_a_feature() -> None:
    s = advance(
        state(T.ARCHITECTURE, current_feature=None, current_branch=None),
        ok(T.ARCHITECTURE, verdict="REQUEST_CHANGES", review_id=7),
        CFG,
    )
    assert (s.next_session, s.current_feature, s.current_branch, s.open_review_id) == (
        T.FIX,
        None,
        "arch/7",
        7,
    )
    s = advance(s, ok(T.FIX), CFG)
    assert (s.next_session, s.current_branch) == (T.REVIEW, "arch/7")
    s = advance(s, ok(T.REVIEW, verdict="PASS"), CFG)
    assert s.features_completed == 0 and s.next_session is T.IMPLEMENT


def test_fix_round_counter_and_attempts() -> None:
    s = advance(state(T.REVIEW), ok(T.REVIEW, verdict="REQUEST_CHANGES", review_id=3), CFG)
    assert (s.next_session, s.fix_rounds, s.open_review_id) == (T.FIX, 1, 3)
    retried = advance(s, failed(T.FIX), CFG)
    assert (retried.next_session, retried.fix_rounds, retried.attempts) == (T.FIX, 1, 1)
    s = advance(retried, ok(T.FIX), CFG)
    assert (s.next_session, s.attempts) == (T.REVIEW, 0)


def test_models_per_role_and_overrides() -> None:
    assert [get_model_for_session(t, AgentConfig()) for t in (T.INITIALIZER, T.IMPLEMENT, T.FIX)] == [
        "sonnet"
    ] * 3
    assert get_model_for_session(T.REVIEW, AgentConfig()) == "opus"
    assert get_model_for_session(T.ARCHITECTURE, AgentConfig()) == "opus"
    custom = AgentConfig(models={**AgentConfig().models, "REVIEW": "my-model"})
    assert get_model_for_session(T.REVIEW, custom) == "my-model"
    with pytest.raises(ValueError):
        get_model_for_session(T.DONE, custom)


def test_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="architecture_interval"):
        AgentConfig(architecture_interval=0)
    with pytest.raises(ValueError, match="unknown role"):
        AgentConfig(models={"TESTER": "x"})


def test_state_round_trips_through_json() -> None:
    s = state(T.FIX, passing=frozenset({"F002"}), blocked=frozenset({"F003"}), rejections=(("F003", 2),))
    assert SessionState.from_json(s.to_json()) == s


def _run(outcomes: list[tuple[bool, str]], cfg: AgentConfig, n_features: int) -> tuple[int, SessionState]:
    """Drive the machine with scripted (ok, verdict) outcomes; PASS marks the feature passing."""
    ids = tuple(f"F{i:03d}" for i in range(1, n_features + 1))
    s = advance(SessionState(), None, cfg)
    steps = 0
    script = iter(outcomes)
    while s.next_session not in (T.DONE, T.HALTED):
        good, verdict = next(script, (True, "PASS"))
        t = s.next_session
        if t is T.INITIALIZER:
            out = Outcome(t, good, feature_ids=ids if good else ())
        elif t in (T.REVIEW, T.ARCHITECTURE):
            v = verdict if t is T.REVIEW or verdict != "REJECT" else "PASS"
            passing = s.passing | ({s.current_feature} if v == "PASS" and s.current_feature else set())
            out = Outcome(t, good, verdict=v, review_id=steps + 1, passing=frozenset(passing))
        else:
            out = Outcome(t, good, passing=s.passing)
        s = advance(s, out, cfg)
        steps += 1
        assert steps <= session_bound(n_features, cfg), "the loop must end within the bound"
    return steps, s


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
def test_any_sequence_of_verdicts_ends_within_the_bound(
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
    _, final = _run(outcomes, cfg, n_features)
    if final.next_session is T.DONE:
        assert all(f in final.passing or f in final.blocked for f in final.features)
    assert final.features_completed == len(final.passing)


@settings(max_examples=200, deadline=None)
@given(outcomes=st.lists(outcome_st, min_size=1, max_size=60), n=st.integers(1, 5))
def test_next_type_depends_only_on_state_and_outcome(outcomes: list[tuple[bool, str]], n: int) -> None:
    """Two runs of the same outcomes give the same states (no hidden state, no randomness)."""
    cfg = AgentConfig(architecture_interval=2, max_fix_rounds=1, max_rejections=2, max_attempts=2)
    assert _run(outcomes, cfg, n) == _run(outcomes, cfg, n)


def test_architecture_cadence_over_20_features_with_interval_3() -> None:
    cfg = AgentConfig(architecture_interval=3)
    s = advance(SessionState(), None, cfg)
    ids = tuple(f"F{i:03d}" for i in range(1, 21))
    arch_after: list[int] = []
    while s.next_session is not T.DONE:
        t = s.next_session
        if t is T.INITIALIZER:
            out = Outcome(t, True, feature_ids=ids)
        elif t is T.REVIEW:
            out = Outcome(t, True, verdict="PASS", passing=s.passing | {s.current_feature or ""})
        elif t is T.ARCHITECTURE:
            arch_after.append(s.features_completed)
            out = Outcome(t, True, verdict="PASS", passing=s.passing)
        else:
            out = Outcome(t, True, passing=s.passing)
        s = advance(s, out, cfg)
    assert arch_after == [3, 6, 9, 12, 15, 18]
    assert s.features_completed == 20


def test_a_changed_interval_on_resume_neither_skips_nor_repeats_a_review() -> None:
    s = state(T.REVIEW, features_completed=4, architecture_checked_at=4)
    wider = AgentConfig(architecture_interval=5)
    s = advance(s, ok(T.REVIEW, verdict="PASS", passing=frozenset({"F001"})), wider)
    assert s.next_session is T.ARCHITECTURE and s.features_completed == 5
    s = advance(s, ok(T.ARCHITECTURE, verdict="PASS", passing=frozenset({"F001"})), wider)
    assert s.architecture_checked_at == 5 and s.next_session is T.IMPLEMENT
