"""The saved record: a round trip loses nothing; a 0.1 state file is upgraded; errors name the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from session_scheduler.core.config import SessionType
from session_scheduler.core.errors import StateError
from session_scheduler.core.machine import Backlog, Lane, SessionState, architecture_fixes, feature
from session_scheduler.core.schedule import Schedule
from session_scheduler.core.session import InFlight
from session_scheduler.core.standing import Standing
from session_scheduler.store import statefile

STATES = [
    SessionState(),
    SessionState(
        Backlog(("F001", "F002"), frozenset({"F001"}), frozenset({"F002"}), (("F002", 2),)),
        Lane(SessionType.FIX, feature("F002"), attempts=1, fix_rounds=2, open_review=5),
        architecture_checked_at=1,
        session_count=9,
    ),
    SessionState(Backlog(("F001",)), Lane(SessionType.REVIEW, architecture_fixes(3)), session_count=4),
    SessionState(lane=Lane(SessionType.HALTED), halt_reason="INITIALIZER failed 3 times: x"),
    SessionState(
        Backlog(("F001", "F002", "F003"), depends=(("F002", ("F001",)), ("F003", ("F001", "F002")))),
        Lane(SessionType.IMPLEMENT, feature("F001")),
        session_count=1,
    ),
]


@pytest.mark.parametrize("state", STATES)
def test_a_saved_state_loads_as_it_was(tmp_path: Path, state: SessionState) -> None:
    statefile.save(tmp_path, state, {0: InFlight(number=3, log_dir="l", main="m", branch_tip=None)})
    saved = statefile.load(tmp_path)
    assert saved is not None and saved.state == state
    assert saved.flight() is not None


def test_no_state_file_is_a_new_project(tmp_path: Path) -> None:
    assert statefile.load(tmp_path) is None


def test_a_state_file_of_version_0_1_is_upgraded(tmp_path: Path) -> None:
    old = {
        "next_session": "FIX",
        "features": ["F001", "F002"],
        "passing": ["F001"],
        "blocked": [],
        "rejections": {"F002": 1},
        "current_feature": None,
        "current_branch": "arch/7",
        "features_completed": 1,
        "architecture_checked_at": 1,
        "fix_rounds": 1,
        "attempts": 0,
        "open_review_id": 7,
        "session_count": 6,
        "halt_reason": "",
        "in_progress": None,
        "stats": {"failed_sessions": 1},
    }
    (tmp_path / ".agent_state.json").write_text(json.dumps(old))
    saved = statefile.load(tmp_path)
    assert saved is not None  # the totals of older versions are ignored: the event log keeps them
    assert saved.state == SessionState(
        Backlog(("F001", "F002"), frozenset({"F001"}), rejections=(("F002", 1),)),
        Lane(SessionType.FIX, architecture_fixes(7), fix_rounds=1, open_review=7),
        architecture_checked_at=1,
        session_count=6,
    )
    old.update(next_session="REVIEW", current_feature="F002", current_branch="feature/F002")
    (tmp_path / ".agent_state.json").write_text(json.dumps(old))
    saved = statefile.load(tmp_path)
    assert saved is not None and saved.state.lane.work == feature("F002")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{ not json", "is not valid JSON"),
        ('{"backlog": {}, "lane": {"role": "IMPLEMENT"}, "session_count": 1}', "does not match its schema"),
        ('{"next_session": "FIX", "current_branch": "arch/x"}', "invalid literal"),
        ('["a list"]', "does not match its schema"),
    ],
)
def test_a_broken_state_file_names_its_restore_point(tmp_path: Path, content: str, problem: str) -> None:
    (tmp_path / ".agent_state.json").write_text(content)
    with pytest.raises(StateError, match=problem) as caught:
        statefile.load(tmp_path)
    assert "session_*/state.json" in str(caught.value)


def test_non_utf8_bytes_are_a_state_error(tmp_path: Path) -> None:
    (tmp_path / ".agent_state.json").write_bytes(b'{"lane": "\xff"}')
    with pytest.raises(StateError, match="not UTF-8"):
        statefile.load(tmp_path)


IN_FLIGHT_FORMS = [
    {"number": 2, "log_dir": "x", "main": "abc", "branch_tip": None, "heads": {}},  # 0.1: every branch
    {
        "number": 5,
        "log_dir": "/p/.agent_logs/session_0005_REVIEW",
        "main": "m" * 40,
        "branch_tip": "t" * 40,
        "heads": {"feature/F001": "t" * 40},
        "heads_gone": ["feature/F000"],
        "copies": "/p/.agent_logs/restore/pre",
    },
    {
        "number": 5,
        "log_dir": "l",
        "main": "m",
        "branch_tip": None,
        "heads": {},
        "heads_gone": [],
        "copies": "c",
        "why": "usage_limit",
        "wait_until": 1800060,
    },
    {
        "number": 5,
        "log_dir": "l",
        "main": "m",
        "branch_tip": None,
        "heads": {},
        "why": "outage",
        "wait_until": 1.5,
    },
]


@pytest.mark.parametrize("form", IN_FLIGHT_FORMS)
def test_the_session_in_flight_is_saved_as_every_earlier_version_saved_it(
    tmp_path: Path, form: dict[str, object]
) -> None:
    """An earlier version's one `in_progress` is read as lane 0's InFlight, and written back byte
    for byte as lane 0's value of `in_flight`."""
    data = {**statefile.to_json(STATES[0]), "in_progress": form}
    (tmp_path / ".agent_state.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    saved = statefile.load(tmp_path)
    flight = saved.flight() if saved else None
    assert saved is not None and flight is not None
    assert json.dumps(flight.to_json()) == json.dumps(form)
    assert flight.number == form["number"] and flight.lane == 0
    statefile.save(tmp_path, saved.state, saved.in_flight)
    written = json.loads((tmp_path / ".agent_state.json").read_text(encoding="utf-8"))
    assert written["in_flight"] == {"0": form} and "in_progress" not in written


def test_each_lane_keeps_its_own_session_in_flight(tmp_path: Path) -> None:
    """The in-flight record is keyed by lane: two lanes' sessions are saved and read back apart,
    in lane order, and a lane with none has no entry."""
    flights = {
        3: InFlight(number=7, log_dir="b", main="m", branch_tip="t", lane=3),
        0: InFlight(number=6, log_dir="a", main="m", branch_tip=None, why="outage", wait_until=2.0),
    }
    statefile.save(tmp_path, STATES[0], flights)
    written = json.loads((tmp_path / ".agent_state.json").read_text(encoding="utf-8"))
    assert list(written["in_flight"]) == ["0", "3"]
    saved = statefile.load(tmp_path)
    assert saved is not None and saved.in_flight == flights
    assert saved.flight(3) == flights[3] and saved.flight(1) is None


@pytest.mark.parametrize("why", [s.value for s in Standing if not s.counted])
def test_a_session_cut_for_any_reason_not_counted_is_saved_and_read_back(tmp_path: Path, why: str) -> None:
    """A REVIEW whose browser did not start (why: browser) or whose sandbox failed is saved as in
    flight like an interrupted one; the state file's schema once refused these, and the run crashed."""
    flights = {0: InFlight(number=6, log_dir="a", main="m", branch_tip=None, why=why, wait_until=2.0)}
    statefile.save(tmp_path, STATES[0], flights)
    saved = statefile.load(tmp_path)
    assert saved is not None and saved.in_flight == flights


@pytest.mark.parametrize("key", ["-1", "01", "lane0", "10000"])
def test_an_in_flight_record_keyed_by_no_lane_id_is_refused(tmp_path: Path, key: str) -> None:
    form = {"number": 2, "log_dir": "x", "main": "abc", "branch_tip": None, "heads": {}}
    data = {**statefile.to_json(STATES[0]), "in_flight": {key: form}}
    (tmp_path / ".agent_state.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(StateError, match=r"does not match|in_flight"):
        statefile.load(tmp_path)


def test_a_cut_session_in_flight_keeps_its_start() -> None:
    start = InFlight.from_json(IN_FLIGHT_FORMS[1])
    assert start is not None
    cut = start.cut("outage", 12.0)
    assert (cut.why, cut.wait_until, cut.heads, cut.copies) == ("outage", 12.0, start.heads, start.copies)
    assert list(cut.to_json()) == [*IN_FLIGHT_FORMS[1], "why", "wait_until"]
    assert InFlight.from_json(None) is None


def test_a_schedule_of_several_lanes_is_saved_and_read_back_whole(tmp_path: Path) -> None:
    """Every lane, the session numbers handed out, and the merge queue's work; lane 0 is also
    the state a one-lane reader sees."""
    backlog = Backlog(
        ("F001", "F002", "F003"),
        frozenset({"F003"}),
        depends=(("F002", ("F001",)),),
        landing=(feature("F001"),),
        returned=((architecture_fixes(4), 9),),
        held=(("F002", "manifests: it changes package.json"),),
    )
    lanes = (
        Lane(SessionType.REVIEW, feature("F002")),
        Lane(SessionType.WAIT),
        Lane(SessionType.FIX, feature("F003"), 1, 1, 6),
    )
    schedule = Schedule(backlog, lanes, architecture_checked_at=1, session_count=8, issued=11, cloned=True)
    statefile.save(tmp_path, schedule, {})
    saved = statefile.load(tmp_path)
    assert saved is not None and saved.schedule == schedule
    assert saved.state == SessionState(backlog, lanes[0], 1, 8)
    written = json.loads((tmp_path / ".agent_state.json").read_text(encoding="utf-8"))
    assert written["issued"] == 11 and len(written["lanes"]) == 3 and written["lane"] == written["lanes"][0]
    assert written["backlog"]["landing"] == [{"feature": "F001"}]
    assert written["backlog"]["returned"] == [{"work": {"architecture_review": 4}, "review_id": 9}]
    assert written["backlog"]["held"] == [{"feature": "F002", "why": "manifests: it changes package.json"}]


def test_one_lane_saves_what_every_earlier_version_saved(tmp_path: Path) -> None:
    statefile.save(
        tmp_path, Schedule(Backlog(("F001",)), (Lane(SessionType.IMPLEMENT, feature("F001")),)), {}
    )
    written = json.loads((tmp_path / ".agent_state.json").read_text(encoding="utf-8"))
    assert "lanes" not in written and "issued" not in written
    assert set(written["backlog"]) == {"features", "passing", "blocked", "rejections"}
    saved = statefile.load(tmp_path)
    assert saved is not None and saved.schedule.issued == 0 and len(saved.schedule.lanes) == 1
