"""bench/queue_sim.py, run small: every feature counted once, batching never slower than one
branch at a time, and with a fast suite the two policies agree."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "queue_sim.py"


def queue_sim() -> ModuleType:
    spec = importlib.util.spec_from_file_location("queue_sim", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["queue_sim"] = module
    spec.loader.exec_module(module)
    return module


SIM = queue_sim()


def night(lanes: int, test_s: float, cap: int, seed: int = 1, **more: object) -> Any:
    return SIM.simulate(SIM.Model(lanes, test_s, cap, hours=3.0, **more), random.Random(seed))


def test_the_lanes_loop_s_queue_is_not_the_limit_at_16_lanes_with_a_5_minute_suite() -> None:
    """Issue 33's goal, at 5% red: batches of 8 one run at a time fall far behind; 4 runs side by
    side on batches of 32 (what `batching.runners_for(16)` gives the lanes loop) keep up."""
    results = SIM.run((16,), (1.0, 300.0), 1, SIM.Model(hours=3.0))
    (_, fast1, fast4), (_, slow1, slow4) = results
    assert (slow4.model.runners, slow4.model.cap) == (4, 32)
    assert slow4.per_hour >= 0.9 * fast4.per_hour
    assert slow1.per_hour < 0.75 * fast1.per_hour
    assert "is NOT the limit" in SIM.verdict(fast4, slow4) and "IS the limit" in SIM.verdict(fast1, slow1)


@pytest.mark.parametrize("runners", [2, 4])
def test_a_red_branch_never_lands_side_by_side(runners: int) -> None:
    result = night(16, 300.0, 8 * runners, runners=runners, red_rate=0.3)
    assert result.sent_back > 0
    assert result.landed + result.unfinished + result.untouched == result.model.backlog


@pytest.mark.parametrize(
    ("lanes", "test_s", "cap"), [(1, 300.0, 1), (4, 1.0, 8), (8, 300.0, 8), (8, 300.0, 1)]
)
def test_every_feature_is_counted_once(lanes: int, test_s: float, cap: int) -> None:
    result = night(lanes, test_s, cap, red_rate=0.2)
    assert result.landed > 0
    if lanes == 1:  # `main` moved only by the lane's own work: each REVIEW's merge lands as it is
        assert (result.runs, result.as_reviewed) == (0, result.landed)  # (red: its lane's run found it)
    assert result.sent_back > 0
    assert result.landed + result.unfinished + result.untouched == result.model.backlog
    assert result.unfinished <= lanes + result.queued  # a lane holds one; the queue the rest


def test_a_small_backlog_lands_whole_and_the_hour_ends_at_the_last_landing() -> None:
    result = night(4, 300.0, 8, features=12)
    assert (result.landed, result.unfinished, result.untouched) == (12, 0, 0)
    assert result.elapsed_s < 3 * 3600


@pytest.mark.parametrize("lanes", [4, 16])
@pytest.mark.parametrize("seed", [1, 2])
def test_batched_is_never_slower_than_one_at_a_time(lanes: int, seed: int) -> None:
    for test_s in (1.0, 300.0):
        one, batched = (night(lanes, test_s, cap, seed) for cap in (1, 8))
        assert batched.per_hour >= 0.97 * one.per_hour, (test_s, one.per_hour, batched.per_hour)


def test_with_a_slow_suite_batching_lands_more() -> None:
    one, batched = (night(16, 300.0, cap) for cap in (1, 8))
    assert batched.per_hour > 1.5 * one.per_hour
    assert one.utilisation > 0.9  # one at a time, the queue is the limit


@pytest.mark.parametrize("lanes", [4, 16])
def test_with_a_fast_suite_the_policies_agree(lanes: int) -> None:
    one, batched = (night(lanes, 1.0, cap) for cap in (1, 8))
    assert abs(batched.per_hour - one.per_hour) <= 0.03 * one.per_hour
    assert batched.utilisation < 0.05


def test_a_seed_is_one_night_and_no_red_sends_nothing_back() -> None:
    assert night(8, 300.0, 8, seed=5) == night(8, 300.0, 8, seed=5)
    assert night(8, 300.0, 8, red_rate=0.0).sent_back == 0


def test_the_table_has_a_row_per_lane_count_and_suite_and_says_whether_the_queue_limits() -> None:
    results = SIM.run((2, 4), (1.0, 300.0), 1, SIM.Model(hours=1.0))
    text = SIM.table(results)
    assert len(text.splitlines()) == 2 + 4
    assert "| 4 | 5 min |" in text
    line = SIM.verdict(results[0][2], results[1][2])
    assert "the queue IS the limit" in line or "the queue is NOT the limit" in line
