"""Per-role settings and scope rules: validated, different per role, written before each session."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import request_for, state_for

from session_scheduler.core.config import ROLES, SessionType
from session_scheduler.core.errors import SettingsError
from session_scheduler.guard.security import path_decision, settings_for, validate_settings

T = SessionType


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r.value)
def test_settings_validate_for_every_role(role: SessionType) -> None:
    validate_settings(settings_for(role, "bash init.sh"))


def test_settings_differ_per_role() -> None:
    allows = {role: frozenset(settings_for(role)["permissions"]["allow"]) for role in ROLES}
    denies = {role: frozenset(settings_for(role)["permissions"]["deny"]) for role in ROLES}
    assert len({(allows[r], denies[r]) for r in ROLES}) == len(ROLES)
    assert "Edit(./feature_list.json)" in denies[T.IMPLEMENT] and "Bash(git checkout -b:*)" in denies[T.FIX]
    assert "Bash(git commit:*)" in allows[T.IMPLEMENT]
    assert "Bash(git commit:*)" not in allows[T.REVIEW]
    assert "Bash(git merge:*)" in allows[T.REVIEW] and "Bash(git merge:*)" not in allows[T.IMPLEMENT]
    assert "Edit(./**)" not in allows[T.REVIEW] and "Edit(./**)" not in allows[T.ARCHITECTURE]
    assert "Edit(./feature_list.json)" not in allows[T.ARCHITECTURE]
    for role in ROLES:
        deny = settings_for(role)["permissions"]["deny"]
        assert "Bash(git push:*)" in deny and not any(
            "CLAUDE.md" in rule for rule in deny
        )  # the person's file


def test_an_invalid_settings_file_is_refused() -> None:
    with pytest.raises(SettingsError, match="invalid"):
        validate_settings({"permissions": {"allow": ["Bash(ls"], "deny": [], "defaultMode": "dontAsk"}})
    with pytest.raises(SettingsError):
        validate_settings({"permissions": {"allow": [], "deny": [], "defaultMode": "bypassPermissions"}})


def test_role_files_are_written_and_the_person_s_claude_md_is_not(tmp_path: Path) -> None:
    (tmp_path / "CLAUDE.md").write_text("Always use tabs.\n")
    request = request_for(tmp_path, state_for(T.REVIEW, "F002"))
    assert (
        json.loads(request.settings_path.read_text())["permissions"]
        == settings_for(T.REVIEW, None, tmp_path)["permissions"]
    )
    assert json.loads(request.settings_path.read_text()) == request.plan.settings
    assert (
        tmp_path / "CLAUDE.md"
    ).read_text() == "Always use tabs.\n"  # the scope travels in the system prompt
    scope = request.plan.scope
    assert scope.startswith("# Scope of this session: REVIEW") and scope in request.plan.system_prompt
    assert "feature/F002" in scope


def test_the_scope_names_every_scheduler_file() -> None:
    from session_scheduler.core.layout import HANDOFF_FILES, SCHEDULER_FILES
    from session_scheduler.guard.security import scope_rules

    text = scope_rules(T.IMPLEMENT, None)
    assert all(name in text for name in (*SCHEDULER_FILES, *HANDOFF_FILES))


@pytest.mark.parametrize(
    ("role", "target", "allowed"),
    [
        (T.IMPLEMENT, "src/app.py", True),
        (T.IMPLEMENT, "progress.json", False),  # only through append_session
        (T.INITIALIZER, "feature_list.json", True),
        (T.INITIALIZER, "progress.json", False),
        (T.IMPLEMENT, "CLAUDE.md", True),  # the person's file, never read by the CLI nor handed on
        (T.IMPLEMENT, "src/CLAUDE.md", True),
        (T.IMPLEMENT, ".claude_settings.json", False),
        (T.IMPLEMENT, ".agent_state.json", False),
        (T.IMPLEMENT, ".git/config", False),
        (T.IMPLEMENT, "../outside.txt", False),
        (T.IMPLEMENT, "/etc/passwd", False),
        (T.REVIEW, "reviews.json", False),
        (T.REVIEW, "feature_list.json", False),  # an invitation to set `passes` by hand,
        (T.REVIEW, "src/app.py", False),
        (T.ARCHITECTURE, "reviews.json", False),
        (T.ARCHITECTURE, "feature_list.json", False),
        (T.FIX, "tests/test_app.py", True),
        (T.FIX, "feature_list.json", False),
        (T.IMPLEMENT, "reviews.json", False),
    ],
)
def test_file_path_policy(role: SessionType, target: str, allowed: bool, tmp_path: Path) -> None:
    assert (path_decision(role, tmp_path, target) is None) is allowed
    assert (path_decision(role, tmp_path, str(tmp_path / target)) is None) is allowed
