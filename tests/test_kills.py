"""Killed anywhere, the same command resumes: a reduced set of the kill suite through the real
CLI (bench/reliability.py runs every crash point)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from session_scheduler.store import crashpoints
from session_scheduler.testing.kills import (
    CASES,
    LANE_CASES,
    LANES_KNOWN,
    LANES_REDUCED,
    REDUCED,
    UNREACHED,
    Final,
    check_lanes_log,
    reference,
    run_case,
    run_lanes_case,
)

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("bwrap") is None, reason="no bubblewrap")]


@pytest.fixture(scope="module")
def expected(tmp_path_factory: pytest.TempPathFactory) -> Final:
    return reference(tmp_path_factory.mktemp("reference"))


@pytest.mark.parametrize("case", REDUCED)
def test_a_kill_at_this_point_loses_nothing(case: str, expected: Final, tmp_path: Path) -> None:
    assert run_case(tmp_path, case, expected) == []


def test_the_suite_names_every_crash_point() -> None:
    named = {kill.split("#")[0] for kills in CASES.values() for kill in kills}
    assert named | set(UNREACHED) == set(crashpoints.POINTS)
    assert len(CASES) >= 20


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            case,
            marks=[pytest.mark.xfail(reason=LANES_KNOWN[case], strict=False)] if case in LANES_KNOWN else [],
        )
        for case in LANES_REDUCED
    ],
)
def test_a_kill_with_lanes_in_flight_loses_nothing(case: str, tmp_path: Path) -> None:
    """Three lanes (kills.LANES_SCENARIO) killed at this point, then the same command until done."""
    assert run_lanes_case(tmp_path, case) == []


def test_the_lanes_suite_names_the_points_lanes_reach() -> None:
    named = {kill.split("#")[0] for kills in LANE_CASES.values() for kill in kills}
    assert named | set(UNREACHED) == set(crashpoints.POINTS)
    assert set(LANES_REDUCED) <= set(LANE_CASES)


def _ended(number: int, run: str, ts: float) -> dict[str, object]:
    return {"kind": "session_ended", "session": number, "standing": "verified", "run": run, "ts": ts}


def _started(number: int, run: str, ts: float) -> dict[str, object]:
    return {"kind": "session_started", "session": number, "run": run, "ts": ts, "lane": 0}


def test_a_verified_end_the_next_run_undid_does_not_count_twice() -> None:
    """A kill between a session's end event and the state's save: the next run undoes its results
    (`undo`) and runs it again, so its second verified end is the one that stands."""
    log = [
        _started(3, "a", 1.0),
        _ended(3, "a", 2.0),
        {"kind": "undo", "session": 3, "reason": "half recorded", "run": "b", "ts": 3.0},
        _started(3, "b", 4.0),
        _ended(3, "b", 5.0),
        {"kind": "run_ended", "run": "b", "ts": 6.0},
    ]
    assert check_lanes_log(log, [3]) == []
    without_undo = [event for event in log if event["kind"] != "undo"]
    assert any("verified twice" in problem for problem in check_lanes_log(without_undo, [3]))
    late_undo = [
        *without_undo[:3],
        log[2],
        without_undo[3],
    ]  # an undo of the rerun itself voids nothing before it
    assert any("verified twice" in problem for problem in check_lanes_log(late_undo, [3]))
