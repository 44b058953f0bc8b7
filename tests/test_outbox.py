"""Sessions of several lanes write their own outboxes; the scheduler applies each to the records
after verification, giving review and fix ids out there, once, and never taking `passes`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from session_scheduler.core.config import SessionType
from session_scheduler.core.errors import StateError
from session_scheduler.core.machine import feature
from session_scheduler.store import handoff_history, progress
from session_scheduler.store.handoff_tools import HandoffTools
from session_scheduler.store.outbox import Applied, apply, open_outbox
from session_scheduler.store.records import Records

T = SessionType


def records_with(root: Path, reviews: int = 0) -> Records:
    root.mkdir(parents=True, exist_ok=True)
    listed = [
        {"id": f"F00{n}", "category": "c", "description": "d", "steps": ["s"], "passes": False}
        for n in (1, 2, 3)
    ]
    (root / "feature_list.json").write_text(json.dumps({"features": listed}))
    progress.ensure_handoff_files(root, "app")
    data = json.loads((root / "reviews.json").read_text())
    data["reviews"] = [
        {"review_id": k, "feature_id": "F001", "kind": "feature", "verdict": "REQUEST_CHANGES",
         "issues": {"critical": [], "major": [], "minor": []}, "session_id": k}
        for k in range(1, reviews + 1)
    ]  # fmt: skip
    (root / "reviews.json").write_text(json.dumps(data))
    return Records(root)


def review_in(outbox: Records, number: int, feature_id: str, verdict: str = "PASS") -> dict[str, Any]:
    tools = HandoffTools(
        outbox, T.REVIEW, number, feature(feature_id), None, "brief", workdir=outbox.root, evidence=None
    )
    graded = [{"step": 1, "passed": verdict == "PASS", "evidence": "ran it"}]
    answer, error = tools.call("record_review", {"verdict": verdict, "issues": {}, "acceptance": graded})
    assert not error, answer
    if verdict == "PASS":
        assert not tools.call("mark_passing", {})[1]
    assert not tools.call("append_session", {"outcome": "REVIEWED"})[1]
    return json.loads(answer)


def test_two_lanes_reviews_get_their_ids_from_the_records_in_the_order_applied(tmp_path: Path) -> None:
    records = records_with(tmp_path / "app", reviews=3)
    a = open_outbox(records, tmp_path / "s7" / "outbox")
    b = open_outbox(records, tmp_path / "s8" / "outbox")
    assert review_in(a, 7, "F001")["review_id"] == review_in(b, 8, "F002")["review_id"] == 4  # provisional
    assert apply(a, records, 7) == Applied({4: 4}, {}, 2)
    assert apply(b, records, 8) == Applied({4: 5}, {}, 2)
    after = progress.load_handoff(records)
    assert [(r["review_id"], r["feature_id"], r["session_id"]) for r in after.review_list()][-2:] == [
        (4, "F001", 7),
        (5, "F002", 8),
    ]
    assert [e["session_id"] for e in after.progress["sessions"]] == [7, 8]  # type: ignore[index]
    assert after.passing() == frozenset()  # `passes` is the schedule's: set when work lands


def test_applying_again_after_a_kill_adds_nothing_twice(tmp_path: Path) -> None:
    records = records_with(tmp_path / "app")
    box = open_outbox(records, tmp_path / "s2" / "outbox")
    review_in(box, 2, "F001", "REQUEST_CHANGES")
    first = apply(box, records, 2)
    assert first.entries == 2 and apply(box, records, 2) == Applied({}, {}, 0)
    assert len(progress.load_handoff(records).review_list()) == 1


def test_a_fix_is_numbered_after_the_records_and_its_history(tmp_path: Path) -> None:
    records = records_with(tmp_path / "app", reviews=2)
    handoff_history.history_path(records.root, "fixes").write_text('{"fix_id":6}\n')
    box = open_outbox(records, tmp_path / "s5" / "outbox")
    assert (box.root / "fixes_history.jsonl").samefile(records.path("fixes_history.jsonl"))
    tools = HandoffTools(box, T.FIX, 5, feature("F001"), 2, "brief", workdir=box.root, evidence=None)
    assert json.loads(tools.call("record_fix", {"issues_fixed": ["x"]})[0])["fix_id"] == 7
    other = open_outbox(records, tmp_path / "s4" / "outbox")  # another lane's fix lands first
    assert not HandoffTools(other, T.FIX, 4, feature("F002"), 1, "b", workdir=other.root, evidence=None).call(
        "record_fix", {"issues_fixed": []}
    )[1]
    assert apply(other, records, 4).fix_ids == {7: 7}
    applied = apply(box, records, 5)
    assert applied.fix_ids == {7: 8} and applied.review_ids == {}
    fixes = progress.load_handoff(records).fix_list()
    assert [(f["fix_id"], f["review_id"], f["session_id"]) for f in fixes] == [(7, 1, 4), (8, 2, 5)]


def test_the_initializer_s_feature_list_is_applied_and_a_later_one_is_not(tmp_path: Path) -> None:
    root = tmp_path / "app"
    root.mkdir()
    progress.ensure_handoff_files(root, "app")
    records = Records(root)
    box = open_outbox(records, tmp_path / "s1" / "outbox")
    assert not (box.root / "feature_list.json").exists()
    listed = {"features": [{"id": "F001", "category": "c", "description": "d", "steps": [], "passes": False}]}
    (box.root / "feature_list.json").write_text(json.dumps(listed))
    apply(box, records, 1)
    assert json.loads(records.path("feature_list.json").read_text()) == listed
    (box.root / "feature_list.json").write_text(
        json.dumps({"features": [{**listed["features"][0], "id": "F009"}]})
    )
    apply(box, records, 1)
    assert json.loads(records.path("feature_list.json").read_text()) == listed


def test_an_outbox_entry_that_breaks_the_schema_is_refused_not_written(tmp_path: Path) -> None:
    records = records_with(tmp_path / "app")
    box = open_outbox(records, tmp_path / "s3" / "outbox")
    data = json.loads(box.path("progress.json").read_text())
    data["sessions"].append({"session_id": 3, "agent_type": "NOBODY", "outcome": "x"})
    box.path("progress.json").write_text(json.dumps(data))
    before = records.path("progress.json").read_text()
    with pytest.raises(StateError):
        apply(box, records, 3)
    assert records.path("progress.json").read_text() == before
