"""Role templates render completely; substitution is strict."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from config import ROLES, AgentConfig, SessionState, SessionType
from errors import PromptError
from prompts import PROMPTS_DIR, TEMPLATES, render, role_variables, substitute

STATES = {
    SessionType.INITIALIZER: SessionState(),
    SessionType.IMPLEMENT: SessionState(
        SessionType.IMPLEMENT, ("F001",), current_feature="F001", current_branch="feature/F001"
    ),
    SessionType.REVIEW: SessionState(
        SessionType.REVIEW, ("F001",), current_feature="F001", current_branch="feature/F001"
    ),
    SessionType.FIX: SessionState(
        SessionType.FIX,
        ("F001",),
        current_feature="F001",
        current_branch="feature/F001",
        open_review_id=3,
        fix_rounds=1,
    ),
    SessionType.ARCHITECTURE: SessionState(SessionType.ARCHITECTURE, ("F001",), features_completed=5),
}


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r.value)
def test_every_role_renders_with_nothing_left_unfilled(role: SessionType, tmp_path: Path) -> None:
    text = render(role, role_variables("app", AgentConfig(), STATES[role], 4))
    assert text.splitlines()[0] == f"# YOUR ROLE - {role.value} AGENT"
    assert not re.search(r"\{\{\s*[A-Za-z_]", text)
    assert "feature_list.json" in text and "Session" not in text.splitlines()[0]


def test_fix_prompt_for_an_architecture_branch_renders(tmp_path: Path) -> None:
    state = SessionState(SessionType.FIX, ("F001",), current_branch="arch/7", open_review_id=7, fix_rounds=1)
    text = render(SessionType.FIX, role_variables("app", AgentConfig(), state, 9))
    assert "arch/7" in text and "review **7**" in text


def test_each_template_begins_with_exactly_one_role_line() -> None:
    for role, name in TEMPLATES.items():
        lines = (PROMPTS_DIR / name).read_text().splitlines()
        assert lines[0] == f"# YOUR ROLE - {role.value} AGENT"
        assert sum(line.startswith("# YOUR ROLE - ") for line in lines) == 1


def test_unknown_or_unfilled_variables_are_named() -> None:
    with pytest.raises(PromptError, match="no value for MISSING"):
        substitute("a {{MISSING}} b", {})
    with pytest.raises(PromptError, match="no value for EMPTY"):
        substitute("{{EMPTY}}", {"EMPTY": None})
    with pytest.raises(PromptError, match="malformed variable"):
        substitute("{{lower}}", {"lower": "x"})
    assert substitute("{{A}}-{{ B }}", {"A": 1, "B": "two"}) == "1-two"


def test_a_template_without_its_role_line_is_refused(tmp_path: Path) -> None:
    for name in ("schemas.md", "review_checklist.md"):
        (tmp_path / name).write_text("x")
    (tmp_path / "coding_prompt.md").write_text("# Some other heading\n")
    with pytest.raises(PromptError, match="must begin with the line"):
        render(SessionType.IMPLEMENT, {}, prompts_dir=tmp_path)


def test_example_spec_ships() -> None:
    assert "todo" in (PROMPTS_DIR / "app_spec.txt").read_text()
