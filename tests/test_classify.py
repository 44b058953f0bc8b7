"""The one place that decides how a session's result counts."""

from __future__ import annotations

import pytest

from session_scheduler.core.config import SessionType
from session_scheduler.core.machine import Outcome
from session_scheduler.run.agent import SessionResult
from session_scheduler.run.classify import BACKOFF_CAP_S, Classified, Standing, backoff_s, cut_short, judged
from session_scheduler.testing.seams import VirtualClock

S = Standing
OK = SessionResult(subtype="success", is_error=False, num_turns=5)
CUT = [
    (SessionResult(rate_limit_resets_at=1_900_000_000), S.USAGE_LIMIT, "the usage limit was reached"),
    (
        SessionResult(subtype="error_max_budget_usd", cost_usd=1.5),
        S.BUDGET,
        "the budget ran out during the session ($1.50",
    ),
    (SessionResult(terminal_reason="api_error", api_error_status=529), S.OUTAGE, "kept failing (529)"),
    (SessionResult(terminal_reason="api_error", api_error_status=None), S.OUTAGE, "kept failing (no answer)"),
    (SessionResult(api_error_status=500), S.OUTAGE, "kept failing (500)"),
    (
        SessionResult(error="Claude Code exited with 1: fetch failed (ECONNRESET)"),
        S.OUTAGE,
        "could not be reached",
    ),
    (
        SessionResult(api_error_status=401, base_url="http://127.0.0.1:9"),
        S.AUTH,
        "the endpoint http://127.0.0.1:9 (ANTHROPIC_BASE_URL) refused the credentials (401)",
    ),
    (SessionResult(not_logged_in=True), S.AUTH, "Claude Code is not logged in or the key is invalid"),
    (SessionResult(api_error_status=403), S.AUTH, "not logged in or the key is invalid"),
    (
        SessionResult(api_error_status=404, base_url="http://h:1"),
        S.AUTH,
        "the endpoint http://h:1 (ANTHROPIC_BASE_URL) does not know the model 'm1'",
    ),
    (
        SessionResult(error="... unrecognized_model ..."),
        S.AUTH,
        "the Anthropic API does not know the model 'm1'",
    ),
    (SessionResult(api_error_status=402), S.AUTH, "refused the request for billing reasons"),
    (SessionResult(error="Your credit balance is too low"), S.AUTH, "billing reasons"),
]


@pytest.mark.parametrize(("result", "standing", "reason"), CUT)
def test_cut_short(result: SessionResult, standing: Standing, reason: str) -> None:
    classified = cut_short(result, "m1")
    assert classified is not None and classified.standing is standing
    assert reason in classified.reason, classified.reason
    assert not standing.counted


def test_a_usage_limit_keeps_its_reset_time() -> None:
    assert cut_short(SessionResult(rate_limit_resets_at=7), "m") == Classified(
        S.USAGE_LIMIT, "the usage limit was reached", 7
    )


@pytest.mark.parametrize(
    "result",
    [
        OK,
        SessionResult(subtype="error_max_turns", num_turns=200),
        SessionResult(error="the session ran out of its 60 s", num_turns=3),
    ],
)
def test_the_agents_own_results_are_verified(result: SessionResult) -> None:
    assert cut_short(result, "m") is None


def test_judged() -> None:
    good, bad = (
        Outcome(SessionType.IMPLEMENT, True),
        Outcome(SessionType.IMPLEMENT, False, reason="no commit"),
    )
    assert judged(OK, good) == Classified(S.VERIFIED, "verified")
    assert judged(OK, bad) == Classified(S.FAILED, "no commit")
    assert judged(SessionResult(sandbox_failed=True), bad).standing is S.SANDBOX
    assert judged(SessionResult(sandbox_failed=True), good).standing is S.VERIFIED


def test_standings() -> None:
    assert [s for s in S if s.counted] == [S.VERIFIED, S.FAILED]
    assert [s for s in S if s.stops_the_run] == [S.BUDGET, S.AUTH]


def test_backoff_doubles_from_30_s_to_15_min_with_jitter() -> None:
    low = VirtualClock()
    low.random = lambda: 0.0  # type: ignore[method-assign]
    assert [backoff_s(n, low) for n in (1, 2, 3, 6, 7, 20)] == [30, 60, 120, 900, 900, 900]
    high = VirtualClock()
    high.random = lambda: 1.0  # type: ignore[method-assign]
    assert backoff_s(1, high) == 36 and backoff_s(9, high) == BACKOFF_CAP_S * 1.2
