"""The event log: appended whole, read back whole or not at all, folded into the only totals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session_scheduler.store import events
from session_scheduler.store.events import EventLog, Totals, make_event
from session_scheduler.testing.seams import VirtualClock


def receipt(cost: float = 0.0, tokens: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "model": "sonnet",
        "input_tokens": tokens,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "output_tokens": 0,
        "cost_usd": cost,
        "turns": 1,
        "tool_calls": 1,
        "duration_s": 1.0,
        "verdict": None,
        "retry_reason": None,
        "partial": False,
        **extra,
    }


def ended(
    n: int, role: str, standing: str, feature: str | None = "F1", cost: float = 1.0, tokens: int = 10
) -> dict[str, Any]:
    return {
        "session": n,
        "role": role,
        "feature": feature,
        "standing": standing,
        "reason": "",
        "receipt": receipt(cost, tokens),
    }


def test_an_event_has_its_kind_fields_and_nothing_unknown_is_written(tmp_path: Path) -> None:
    log = EventLog(tmp_path, "r1", clock=lambda: 100.0)
    event = log.emit("feature_blocked", feature="F2", rejections=2)
    assert event == {
        "v": 1,
        "ts": 100.0,
        "run": "r1",
        "kind": "feature_blocked",
        "feature": "F2",
        "rejections": 2,
    }
    assert events.read(events.log_path(tmp_path)) == [event]
    with pytest.raises(ValueError, match="unknown event kind"):
        log.emit("something_else")
    with pytest.raises(ValueError, match="lacks rejections"):
        log.emit("feature_blocked", feature="F2")
    assert len(events.read(events.log_path(tmp_path))) == 1


def test_listeners_get_each_event_after_it_is_on_disk(tmp_path: Path) -> None:
    log = EventLog(tmp_path, "r1")
    seen: list[int] = []
    log.subscribe(lambda e: seen.append(len(events.read(log.path))))
    log.emit("undo", session=1, reason="x")
    log.emit("undo", session=2, reason="y")
    assert seen == [1, 2]


def test_a_torn_last_line_is_skipped_and_the_next_event_starts_a_new_line(tmp_path: Path) -> None:
    path = events.log_path(tmp_path)
    first = make_event("undo", "r", 1.0, {"session": 1, "reason": "a"})
    events.append(path, first)
    with path.open("ab") as handle:  # a kill in the middle of the next write
        handle.write(b'{"v":1,"ts":2.0,"run":"r","kind":"undo","sess')
    assert events.read(path) == [first]
    second = make_event("undo", "r", 3.0, {"session": 2, "reason": "b"})
    events.append(path, second)
    assert events.read(path) == [first, second]


def test_foreign_lines_are_skipped(tmp_path: Path) -> None:
    path = events.log_path(tmp_path)
    path.parent.mkdir(parents=True)
    good = make_event("undo", "r", 1.0, {"session": 1, "reason": "a"})
    path.write_bytes(
        b"not json\n[1,2]\n"
        + json.dumps({"kind": "nope"}).encode()
        + b"\n\xff\xfe\n"
        + json.dumps(good).encode()
        + b"\n"
    )
    assert events.read(path) == [good]


@settings(max_examples=60, deadline=None)
@given(cut=st.integers(min_value=0, max_value=10_000))
def test_any_cut_of_the_log_reads_as_a_prefix_of_its_events(
    tmp_path_factory: pytest.TempPathFactory, cut: int
) -> None:
    folder = tmp_path_factory.mktemp("cut")
    path = events.log_path(folder)
    written = [make_event("undo", "r", float(n), {"session": n, "reason": "é" * n}) for n in range(12)]
    for event in written:
        events.append(path, event)
    data = path.read_bytes()
    path.write_bytes(data[: cut % (len(data) + 1)])
    read = events.read(path)
    assert read == written[: len(read)]


def test_the_fold_counts_a_session_once_as_it_last_ended_and_adds_up_every_spend() -> None:
    log = [
        make_event(
            "run_started", "r1", 1.0, {"pid": 1, "project": "/p", "version": "x", "cost_basis": "api"}
        ),
        make_event("features_listed", "r1", 2.0, {"session": 1, "features": ["F1", "F2"]}),
        make_event(
            "session_started",
            "r1",
            3.0,
            {
                "session": 2,
                "role": "IMPLEMENT",
                "model": "m",
                "feature": "F1",
                "branch": "feature/F1",
                "attempt": 1,
                "log_dir": "l",
                "lane": 0,
            },
        ),
        make_event("session_ended", "r1", 4.0, ended(2, "IMPLEMENT", "failed")),
        make_event(
            "session_ended", "r1", 5.0, ended(2, "IMPLEMENT", "verified")
        ),  # killed before the save, run again
        make_event("session_ended", "r1", 6.0, ended(3, "REVIEW", "outage", cost=0.5)),
        make_event("session_ended", "r1", 7.0, ended(3, "REVIEW", "verified", cost=2.0, tokens=5)),
        make_event(
            "merge_verified",
            "r1",
            8.0,
            {"session": 3, "feature": "F1", "branch": "feature/F1", "commit": "abc", "tests": "passed"},
        ),
        make_event("feature_blocked", "r1", 9.0, {"feature": "F2", "rejections": 2}),
        make_event(
            "denial", "r1", 9.5, {"session": 3, "role": "REVIEW", "tool": "Bash", "input": {}, "rule": "x"}
        ),
    ]
    totals = Totals.of(log)
    assert totals.sessions == 2 and totals.failed == 0
    assert totals.sessions_by_role == {"IMPLEMENT": 1, "REVIEW": 1}
    assert totals.cost_usd == pytest.approx(4.5)
    assert totals.spend.tokens["input_tokens"] == 35
    assert totals.not_counted == {"outage": 1}
    assert totals.by_feature["F1"].cost_usd == pytest.approx(4.5)
    assert totals.by_feature["F1"].sessions == 2
    assert totals.sessions_of_feature("F1", "IMPLEMENT") == 1
    assert set(totals.passing) == {"F1"} and set(totals.blocked) == {"F2"}
    assert totals.evidence["F1"] == {"commit": "abc", "tests": "passed"}
    assert totals.denials_by_role == {"REVIEW": 1}
    assert totals.in_flight == {}  # session 2 ended
    assert [e["session"] for e in totals.recent(2)] == [3, 3]


def test_a_failed_session_that_counts_again_later_moves_between_the_counts() -> None:
    totals = Totals()
    totals.apply(make_event("session_ended", "r", 1.0, ended(4, "FIX", "verified")))
    totals.apply(make_event("session_ended", "r", 2.0, ended(4, "FIX", "failed")))
    assert (totals.sessions, totals.failed, totals.by_role["FIX"].failed) == (1, 1, 1)


def test_the_fold_of_one_run_leaves_out_the_others() -> None:
    log = [
        make_event("session_ended", "r1", 1.0, ended(1, "INITIALIZER", "verified", cost=1.0)),
        make_event("session_ended", "r2", 2.0, ended(2, "IMPLEMENT", "verified", cost=2.0)),
    ]
    assert Totals.of(log, run="r2").cost_usd == 2.0 and Totals.of(log).cost_usd == 3.0


def test_a_session_in_flight_and_a_wait_until_the_next_session_starts() -> None:
    totals = Totals()
    start = {
        "session": 5,
        "role": "REVIEW",
        "model": "opus",
        "feature": "F3",
        "branch": "feature/F3",
        "attempt": 1,
        "log_dir": "l",
        "lane": 0,
    }
    totals.apply(make_event("session_started", "r", 1.0, start))
    assert totals.flight is not None and totals.flight["session"] == 5 and list(totals.in_flight) == [0]
    totals.apply(make_event("session_ended", "r", 2.0, ended(5, "REVIEW", "usage_limit")))
    totals.apply(make_event("limit_wait", "r", 3.0, {"session": 5, "why": "usage_limit", "until": 99.0}))
    assert totals.in_flight == {} and totals.waiting is not None
    totals.apply(make_event("session_started", "r", 4.0, start))
    assert totals.waiting is None


def test_a_run_id_says_when_and_which_process() -> None:
    import os

    assert events.new_run_id(VirtualClock(0.0)) == f"19700101T000000-{os.getpid()}"
    assert events.new_run_id().endswith(f"-{os.getpid()}")


def test_an_event_is_one_compact_line_and_nan_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "events.jsonl"
    events.append(path, make_event("undo", "r", 1.23456, {"session": 1, "reason": "a b"}))
    events.append(path, make_event("undo", "r", 2.0, {"session": 2, "reason": "c"}))
    assert path.read_bytes() == (
        b'{"v":1,"ts":1.235,"run":"r","kind":"undo","session":1,"reason":"a b"}\n'
        b'{"v":1,"ts":2.0,"run":"r","kind":"undo","session":2,"reason":"c"}\n'
    )
    assert path.stat().st_mode & 0o777 == 0o644 & ~_umask()
    with pytest.raises(ValueError):
        events.append(path, make_event("undo", "r", 3.0, {"session": 3, "reason": float("nan")}))
    with pytest.raises(ValueError, match="lacks feature, rejections"):
        make_event("feature_blocked", "r", 1.0, {})


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_failing_listener_is_reported_and_the_others_still_hear(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = EventLog(tmp_path, "r1", clock=lambda: 5.0)
    heard: list[dict[str, Any]] = []

    def broken(event: dict[str, Any]) -> None:
        raise RuntimeError("boom")

    log.subscribe(broken)
    log.subscribe(heard.append)
    event = log.emit("undo", session=1, reason="x")
    assert (
        heard == [event]
        and "a listener of the event log failed on undo: RuntimeError('boom')" in capsys.readouterr().err
    )


def test_every_fact_of_the_fold() -> None:
    start = {
        "session": 2,
        "role": "IMPLEMENT",
        "model": "m",
        "feature": "F1",
        "branch": "b",
        "attempt": 1,
        "log_dir": "l",
        "lane": 0,
    }
    log = [
        make_event(
            "run_started", "r", 10.0, {"pid": 1, "project": "/p", "version": "x", "cost_basis": "api"}
        ),
        make_event("features_listed", "r", 11.0, {"session": 1, "features": ["F1", "F2", "F3"]}),
        make_event(
            "denial", "r", 12.0, {"session": 2, "role": "IMPLEMENT", "tool": "Bash", "input": {}, "rule": "x"}
        ),
        make_event(
            "denial", "r", 12.5, {"session": 2, "role": "IMPLEMENT", "tool": "Bash", "input": {}, "rule": "x"}
        ),
        make_event(
            "denial", "r", 12.7, {"session": 3, "role": "REVIEW", "tool": "Write", "input": {}, "rule": "y"}
        ),
        make_event("session_started", "r", 13.0, start),
        make_event(
            "session_ended",
            "r",
            14.0,
            {**ended(2, "IMPLEMENT", "outage"), "receipt": {"cost_usd": None, "input_tokens": None}},
        ),
        make_event("session_ended", "r", 15.0, ended(3, "REVIEW", "outage", cost=0.5)),
        make_event("session_ended", "r", 16.0, ended(4, "FIX", "failed", cost=0.5)),
        make_event("session_ended", "r", 16.5, ended(5, "FIX", "failed", cost=0.5)),
        make_event("session_ended", "r", 17.0, ended(6, "REVIEW", "verified", cost=0.5)),
        make_event(
            "merge_verified",
            "r",
            17.5,
            {"session": 6, "feature": "F1", "branch": "b", "commit": "c", "tests": "passed"},
        ),
        make_event("feature_blocked", "r", 18.0, {"feature": "F2", "rejections": 2}),
        make_event("limit_wait", "r", 18.5, {"session": 7, "why": "usage_limit", "until": 99.0}),
        {"v": 1, "ts": 19.0, "run": "r", "kind": "from_a_newer_version"},
        make_event("run_ended", "r", 20.0, {"status": "limit", "message": "m", "sessions": 5}),
    ]
    totals = Totals.of(log)
    assert (totals.first_ts, totals.last_ts) == (10.0, 20.0)
    assert (
        totals.features == ("F1", "F2", "F3")
        and totals.passing == {"F1": 17.5}
        and totals.blocked == {"F2": 18.0}
    )
    assert totals.denials_by_role == {"IMPLEMENT": 2, "REVIEW": 1}
    assert totals.not_counted == {"outage": 2}
    assert (totals.failed, totals.by_role["FIX"].failed, totals.by_role["FIX"].sessions) == (2, 2, 2)
    assert totals.cost_usd == pytest.approx(2.0) and totals.spend.tokens["input_tokens"] == 40
    assert totals.run_ended is not None and totals.run_ended["status"] == "limit" and totals.waiting is None
    assert [e["session"] for e in totals.recent(2)] == [5, 6] and len(totals.recent()) == 5
    assert totals.sessions_of_feature("F1", "FIX") == 2 and totals.sessions_of_feature("F1", "IMPLEMENT") == 0


def test_sync_puts_what_was_appended_on_disk_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real = events.os.fsync
    monkeypatch.setattr(
        events.os, "fsync", lambda fd: (synced.append(events.os.readlink(f"/proc/self/fd/{fd}")), real(fd))
    )
    log = EventLog(tmp_path, "r1")
    log.sync()
    assert synced == []  # nothing appended yet
    log.emit("undo", session=1, reason="x")
    log.emit("undo", session=2, reason="y")
    assert synced == []  # appends alone are not synced
    log.sync()
    log.sync()
    assert synced == [str(log.path)]
    events.append(log.path, make_event("undo", "r", 1.0, {"session": 3, "reason": "z"}))  # durable by default
    assert synced == [str(log.path)] * 2


def test_the_scheduler_syncs_the_log_before_each_save_of_its_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_lifecycle import LIFECYCLE, new_project, run

    from session_scheduler.run import lanes as scheduler

    order: list[str] = []
    appended, sync, save = events.append, EventLog.sync, scheduler.statefile.save
    monkeypatch.setattr(events, "append", lambda *a, **k: (order.append("append"), appended(*a, **k))[1])
    monkeypatch.setattr(EventLog, "sync", lambda self: (order.append("sync"), sync(self))[1])
    monkeypatch.setattr(scheduler.statefile, "save", lambda *a, **k: (order.append("save"), save(*a, **k))[1])
    run(new_project(tmp_path), LIFECYCLE, max_iterations=3)
    assert order.count("save") >= 6 and order[-1] == "sync"
    for n, step in enumerate(order):
        if step == "save":
            assert order[n - 1] == "sync", order[max(n - 4, 0) : n + 1]


def test_each_lane_has_its_own_session_in_flight() -> None:
    """Sessions in flight are kept by lane: one ending leaves the other lane's; `flight` is the
    one that started last; an event written before lanes is lane 0's."""
    totals = Totals()

    def start(number: int, lane: int) -> dict[str, object]:
        base = {"session": number, "role": "IMPLEMENT", "model": "m", "feature": f"F{number}"}
        return {**base, "branch": f"feature/F{number}", "attempt": 1, "log_dir": "l", "lane": lane}

    before_lanes = make_event("session_started", "r", 1.0, start(5, 0))
    del before_lanes["lane"]
    totals.apply(before_lanes)
    totals.apply(make_event("session_started", "r", 2.0, start(6, 1)))
    assert sorted(totals.in_flight) == [0, 1] and totals.flight is not None and totals.flight["session"] == 6
    totals.apply(make_event("session_ended", "r", 3.0, ended(6, "IMPLEMENT", "verified")))
    assert list(totals.in_flight) == [0] and totals.flight is not None and totals.flight["session"] == 5
    totals.apply(make_event("session_started", "r", 4.0, start(7, 0)))
    assert list(totals.in_flight) == [0] and totals.in_flight[0]["session"] == 7
