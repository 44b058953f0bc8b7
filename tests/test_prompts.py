"""Role templates render completely; substitution is strict."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import state_for

from session_scheduler.core.config import ROLES, AgentConfig, SessionType
from session_scheduler.core.errors import PromptError
from session_scheduler.core.machine import Backlog, Lane, SessionState, architecture_fixes
from session_scheduler.run.prompts import PARTS, PROMPTS_DIR, TEMPLATES, render, role_variables, substitute

STATES = {
    SessionType.INITIALIZER: SessionState(),
    SessionType.IMPLEMENT: state_for(SessionType.IMPLEMENT),
    SessionType.REVIEW: state_for(SessionType.REVIEW),
    SessionType.FIX: state_for(SessionType.FIX, open_review=3, fix_rounds=1),
    SessionType.ARCHITECTURE: SessionState(
        Backlog(("F001",), passing=frozenset({"F001"})), Lane(SessionType.ARCHITECTURE)
    ),
}


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r.value)
def test_every_role_renders_with_nothing_left_unfilled(role: SessionType, tmp_path: Path) -> None:
    text = render(role, role_variables("app", AgentConfig(), STATES[role]))
    assert text.splitlines()[0] == f"# YOUR ROLE - {role.value} AGENT"
    assert not re.search(r"\{\{\s*[A-Za-z_]", text)
    assert "feature_list.json" in text and "Session" not in text.splitlines()[0]


def test_fix_prompt_for_an_architecture_branch_renders(tmp_path: Path) -> None:
    state = SessionState(
        Backlog(("F001",)), Lane(SessionType.FIX, architecture_fixes(7), fix_rounds=1, open_review=7)
    )
    text = render(SessionType.FIX, role_variables("app", AgentConfig(), state))
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
    for name in PARTS.values():
        (tmp_path / name).write_text("x")
    (tmp_path / "coding_prompt.md").write_text("# Some other heading\n")
    with pytest.raises(PromptError, match="must begin with the line"):
        render(SessionType.IMPLEMENT, {}, prompts_dir=tmp_path)


def test_the_example_spec_is_what_a_new_project_without_spec_gets(tmp_path: Path) -> None:
    """The shipped example is a real spec that validates the product's own fallback path."""
    from session_scheduler.view.cli import place_spec

    lines: list[str] = []
    place_spec(tmp_path, None, lines.append, 0.0)
    assert (tmp_path / "app_spec.txt").read_bytes() == (PROMPTS_DIR / "app_spec.txt").read_bytes()
    assert len((tmp_path / "app_spec.txt").read_text().split()) > 50 and "example spec" in lines[0]


@pytest.mark.parametrize("test_command", [None, "make check"])
def test_the_test_command_is_named_once(test_command: str | None) -> None:
    text = render(
        SessionType.IMPLEMENT,
        role_variables("app", AgentConfig(test_command=test_command), STATES[SessionType.IMPLEMENT]),
    )
    expected = test_command or "./init.sh"
    assert f"(`{expected}`)" in text and "`./init.sh` or" not in text


def test_review_writes_its_verdict_once_after_the_merge_held() -> None:
    text = render(SessionType.REVIEW, role_variables("app", AgentConfig(), STATES[SessionType.REVIEW]))
    merge, retest = text.index("git merge --no-ff"), text.index("run the test suite again on `main`")
    append = text.index("Record your review")
    assert merge < retest < append
    assert "change your verdict" not in text
