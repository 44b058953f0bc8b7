"""What a session cut off before Claude Code reported its cost probably cost (pure).

The CLI reports a session's cost only in its result. A session stopped before that (an idle or
session timeout, a stop at an API error, Ctrl-C, a killed scheduler) has only the tokens its
transcript shows; its cost is estimated from them here, at the rate the CLI charged for the
same model in this project's own receipts, or, before there is one, at the model family's list
price. Anthropic prices each model's token kinds in fixed proportions to its input price (a cache
read 0.1x, a cache write 1.25x, output 5x), so one rate per model is enough.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

WEIGHTS = {"input_tokens": 1.0, "cache_read_tokens": 0.1, "cache_write_tokens": 1.25, "output_tokens": 5.0}
"""Each kind of token in input tokens' worth."""
LIST_INPUT_USD_PER_MTOK = (("opus", 5.0), ("sonnet", 3.0), ("haiku", 1.0))
"""List prices per million input tokens, by the family a model's name contains."""
UNKNOWN_INPUT_USD_PER_MTOK = 3.0


def weighted(tokens: Mapping[str, Any]) -> float:
    """The tokens in input tokens' worth."""
    return sum(weight * float(tokens.get(key) or 0) for key, weight in WEIGHTS.items())


def input_rate(model: str, receipts: Iterable[Mapping[str, Any]]) -> float:
    """USD per input token for `model`: learned from the CLI's own figures in `receipts` (those
    it reported, of the same model), else the family's list price."""
    cost = worth = 0.0
    for receipt in receipts:
        if (
            receipt.get("model") == model
            and not receipt.get("partial")
            and float(receipt.get("cost_usd") or 0) > 0
        ):
            cost += float(receipt["cost_usd"])
            worth += weighted(receipt)
    if cost > 0 and worth > 0:
        return cost / worth
    name = model.lower()
    listed = next(
        (price for family, price in LIST_INPUT_USD_PER_MTOK if family in name), UNKNOWN_INPUT_USD_PER_MTOK
    )
    return listed / 1_000_000


def estimate(model: str, tokens: Mapping[str, Any], receipts: Iterable[Mapping[str, Any]]) -> float:
    """The estimated cost of `tokens` of `model`, in USD."""
    return round(weighted(tokens) * input_rate(model, receipts), 6)
