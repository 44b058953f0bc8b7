"""How a session's result counts: the one place that decides it (pure).

A session ends in one of these standings:

- `VERIFIED` or `FAILED`: the scheduler verified it; a failure uses one attempt of the role.
- not counted, and run again from the same starting point without using an attempt:
  `INTERRUPTED` (the scheduler was stopped), `USAGE_LIMIT` (wait for the reset),
  `OUTAGE` (the API kept failing after the CLI's own retries: back off), `SANDBOX` (the OS
  sandbox failed to start), `BROWSER` (a web REVIEW's app or browser did not start);
- not counted, and the run stops: `BUDGET` (the project budget ran out in the session),
  `AUTH` (the endpoint refused the credentials, the billing or the model: a person must act).

What each standing leads to is one table, `core/standing.CONSEQUENCES`.

`cut_short` decides from the CLI's report alone, before verification (a cut session is not
verified: its hand-off files are restored and it runs again); `judged` decides after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import claude_agent_sdk

from session_scheduler.core.clock import Clock
from session_scheduler.core.machine import Outcome
from session_scheduler.core.standing import Standing as Standing  # re-exported: classify decides it
from session_scheduler.run.agent import SessionResult


@dataclass(frozen=True)
class Classified:
    standing: Standing
    reason: str
    resets_at: int | None = None
    """USAGE_LIMIT: when the limit resets (epoch seconds)."""
    unknown_model: str | None = None
    """AUTH: the model name the endpoint does not serve."""


BUNDLED_CLI = str(Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude")
"""The Claude Code CLI bundled with the scheduler (not on PATH): the login hint names its path."""
LOGIN_HELP = (
    f"Claude Code is not logged in or the key is invalid: run `{BUNDLED_CLI} auth login` (subscription) "
    "or set ANTHROPIC_API_KEY, or use --offline-demo to run against the scripted model"
)

OUTAGE_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
CONNECTION_HINTS = ("connection", "econnreset", "socket hang up", "timed out", "network", "fetch failed")
BILLING_HINTS = ("credit balance", "billing", "payment")


def cut_short(
    result: SessionResult, model: str, *, capped_by_session: bool = False, role: str | None = None
) -> Classified | None:
    """A result that is not the agent's doing, decided before verification; None: verify it.

    A session that spent its own cap (`capped_by_session`) is the agent's doing: it is verified
    as it stands, like a session that ran out of time."""
    base_url = result.base_url
    if result.browser_failed and result.num_turns == 0:  # it never ran: nothing to verify
        return Classified(Standing.BROWSER, result.browser_failed)
    if result.rate_limit_resets_at is not None:
        return Classified(Standing.USAGE_LIMIT, "the usage limit was reached", result.rate_limit_resets_at)
    if result.subtype == "error_max_budget_usd" and not capped_by_session:
        return Classified(
            Standing.BUDGET, f"the budget ran out during the session (${result.cost_usd:.2f} spent in it)"
        )
    status = result.api_error_status
    text = " ".join(str(part or "") for part in (result.error, result.terminal_reason)).lower()
    endpoint = f"the endpoint {base_url} (ANTHROPIC_BASE_URL)" if base_url else "the Anthropic API"
    if result.not_an_api:
        return Classified(
            Standing.AUTH,
            f"{endpoint} does not look like the Anthropic API (asked for /v1/messages it answered {result.not_an_api}): "
            "set ANTHROPIC_BASE_URL to the base URL of an Anthropic-compatible API (without /v1/messages), or unset it",
        )
    if status == 404 or "unrecognized_model" in text or "not_found_error" in text:
        return Classified(
            Standing.AUTH,
            f"{endpoint} does not know the model {model!r}: give a model it serves with "
            + (
                f"--{role.lower()}-model (the model of {role} sessions)"
                if role
                else "the role's --<role>-model option (for example --implement-model)"
            ),
            unknown_model=model,
        )
    if status == 402 or any(hint in text for hint in BILLING_HINTS):
        return Classified(
            Standing.AUTH, f"{endpoint} refused the request for billing reasons; check the account's credit"
        )
    if status in (401, 403) or result.not_logged_in:
        where = (
            f"{endpoint} refused the credentials ({status or 'not logged in'}): check ANTHROPIC_API_KEY or "
            "ANTHROPIC_AUTH_TOKEN for that endpoint, or unset ANTHROPIC_BASE_URL"
            if base_url
            else LOGIN_HELP
        )
        return Classified(Standing.AUTH, where)
    if result.terminal_reason == "api_error" or (status in OUTAGE_STATUSES and result.is_error):
        return Classified(
            Standing.OUTAGE,
            f"the model API kept failing ({status or 'no answer'}) after Claude Code's own retries",
        )
    if result.is_error and result.num_turns == 0 and any(hint in text for hint in CONNECTION_HINTS):
        return Classified(
            Standing.OUTAGE, f"the model API could not be reached ({(result.error or '')[:120]})"
        )
    return None


def judged(result: SessionResult, outcome: Outcome) -> Classified:
    """A verified session's standing: a failure whose sandbox did not start is not the agent's."""
    if outcome.ok:
        return Classified(Standing.VERIFIED, "verified")
    if result.sandbox_failed:
        return Classified(Standing.SANDBOX, "the OS sandbox failed to start for a command")
    if result.browser_failed:
        return Classified(Standing.BROWSER, result.browser_failed)
    return Classified(Standing.FAILED, outcome.reason or "failed verification")


BACKOFF_BASE_S = 30.0
BACKOFF_CAP_S = 900.0
LIMIT_MARGIN_S = 60
"""Seconds waited past a usage limit's reset time, so the first request after it is not refused."""


def backoff_s(outages: int, clock: Clock) -> float:
    """The wait before the n-th rerun of a session cut by an outage: min(30 s x 2^(n-1), 15 min),
    with up to 20% jitter (drawn from `clock`) so that many schedulers do not come back at the
    same moment."""
    delay = min(BACKOFF_BASE_S * 2 ** max(outages - 1, 0), BACKOFF_CAP_S)
    return float(delay * (1 + 0.2 * clock.random()))


def receipt(
    result: SessionResult,
    model: str,
    classified: Classified,
    verdict: str | None,
    *,
    estimated_cost: float | None = None,
) -> dict[str, Any]:
    """What one session cost and how it ended (the `receipt` of its session_ended event). A
    session the CLI reported no result for (`result.cut_off`) carries the tokens its transcript
    shows and `estimated_cost`, the scheduler's estimate (pricing.py)."""
    return {
        "model": model,
        "input_tokens": result.input_tokens,
        "cache_read_tokens": result.cache_read_tokens,
        "cache_write_tokens": result.cache_write_tokens,
        "output_tokens": result.output_tokens,
        "cost_usd": round(result.cost_usd if estimated_cost is None else estimated_cost, 6),
        "turns": result.num_turns,
        "tool_calls": result.tool_calls,
        "duration_s": round(result.duration_s, 2),
        "verdict": verdict,
        "retry_reason": None if classified.standing is Standing.VERIFIED else classified.reason,
        "partial": result.cut_off,
        "cost_estimated": estimated_cost is not None,
    }


def partial_receipt(
    model: str, tokens: dict[str, int], reason: str, *, cost_usd: float, duration_s: float
) -> dict[str, Any]:
    """The receipt of a session cut off before the CLI reported: the tokens its transcript shows,
    the scheduler's estimate of their cost, and how long it ran until its last recorded activity."""
    return {
        "model": model,
        **tokens,
        "cost_usd": round(cost_usd, 6),
        "turns": 0,
        "tool_calls": 0,
        "duration_s": round(max(duration_s, 0.0), 2),
        "verdict": None,
        "retry_reason": reason,
        "partial": True,
        "cost_estimated": True,
    }
