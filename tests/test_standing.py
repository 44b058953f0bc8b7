"""What each standing leads to is one table (core/standing.CONSEQUENCES), and the loop applies it."""

from __future__ import annotations

import inspect

from session_scheduler.core import standing as table
from session_scheduler.core.standing import CONSEQUENCES, COUNTED, Standing, Then, Wait
from session_scheduler.run import classify
from session_scheduler.run.lanes import Lanes
from session_scheduler.store import events


def test_the_table_covers_every_standing_once() -> None:
    assert set(CONSEQUENCES) == set(Standing)
    assert all(s.consequence is CONSEQUENCES[s] for s in Standing)


def test_what_each_standing_leads_to() -> None:
    then = {s: (c.then, c.wait) for s, c in CONSEQUENCES.items()}
    assert then == {
        Standing.VERIFIED: (Then.TRANSITION, Wait.NONE),
        Standing.FAILED: (Then.TRANSITION, Wait.NONE),
        Standing.INTERRUPTED: (Then.RERUN, Wait.NONE),
        Standing.USAGE_LIMIT: (Then.RERUN, Wait.RESET),
        Standing.OUTAGE: (Then.RERUN, Wait.BACKOFF),
        Standing.SANDBOX: (Then.RERUN_FRESH, Wait.NONE),
        Standing.BROWSER: (Then.RERUN_FRESH, Wait.NONE),
        Standing.BUDGET: (Then.STOP, Wait.NONE),
        Standing.AUTH: (Then.RAISE, Wait.NONE),
    }
    assert CONSEQUENCES[Standing.SANDBOX].retries == 2 and CONSEQUENCES[Standing.SANDBOX].stop
    assert "--max-budget-usd" in CONSEQUENCES[Standing.BUDGET].stop
    assert (
        CONSEQUENCES[Standing.BROWSER].retries == 1 and "browser.log" in CONSEQUENCES[Standing.BROWSER].stop
    )


def test_counted_and_stopping_are_read_from_the_table() -> None:
    assert [s for s in Standing if s.counted] == [Standing.VERIFIED, Standing.FAILED]
    assert [s for s in Standing if s.stops_the_run] == [Standing.BUDGET, Standing.AUTH]
    assert {s.value for s in Standing if s.counted} == COUNTED
    assert events.COUNTED is COUNTED and classify.Standing is Standing  # one table, not restated


def test_the_loop_applies_every_kind_of_consequence_and_decides_no_standing_itself() -> None:
    cut = inspect.getsource(Lanes._cut)  # a session not counted: every consequence but a transition
    assert all(f"Then.{then.name}" in cut for then in Then if then is not Then.TRANSITION)
    assert "standing.counted" in inspect.getsource(Lanes._session)  # a counted one is transitioned
    assert all(f"Wait.{wait.name}" in cut for wait in (Wait.RESET, Wait.BACKOFF))
    decided = [s.name for s in Standing if f"Standing.{s.name}" in cut and s is not Standing.BUDGET]
    assert decided == []  # BUDGET only names the event its stop records
    assert CONSEQUENCES[Standing.SANDBOX].stop == table.SANDBOX_STOP
