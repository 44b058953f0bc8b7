"""The saved record: a round trip loses nothing; a 0.1 state file is upgraded; errors name the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from session_scheduler.core.config import SessionType
from session_scheduler.core.errors import StateError
from session_scheduler.core.machine import Backlog, Lane, SessionState, architecture_fixes, feature
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
]


@pytest.mark.parametrize("state", STATES)
def test_a_saved_state_loads_as_it_was(tmp_path: Path, state: SessionState) -> None:
    statefile.save(
        tmp_path, state, {"number": 3, "log_dir": "l", "main": "m", "branch_tip": None, "heads": {}}
    )
    saved = statefile.load(tmp_path)
    assert saved is not None and saved.state == state
    assert saved.in_progress is not None


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
