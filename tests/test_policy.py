"""One role policy: the prompts, the settings and the path hook all agree with the table."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import state_for

from session_scheduler.core.config import ROLES, AgentConfig, SessionType
from session_scheduler.core.layout import HANDOFF_FILES
from session_scheduler.core.machine import Backlog, Lane, SessionState
from session_scheduler.core.policy import POLICIES, policy
from session_scheduler.guard.security import (
    bash_decision,
    path_decision,
    scope_rules,
    settings_for,
)
from session_scheduler.run.prompts import render, role_variables

T = SessionType
STATES = {
    T.INITIALIZER: SessionState(),
    T.IMPLEMENT: state_for(T.IMPLEMENT),
    T.REVIEW: state_for(T.REVIEW),
    T.FIX: state_for(T.FIX, open_review=3, fix_rounds=1),
    T.ARCHITECTURE: SessionState(Backlog(("F001",)), Lane(T.ARCHITECTURE)),
}


def test_fix_is_told_to_merge_main_and_may() -> None:
    told = render(T.FIX, role_variables("app", AgentConfig(), STATES[T.FIX])) + scope_rules(T.FIX, None)
    assert "`git merge main`" in told
    assert bash_decision(settings_for(T.FIX), "git merge main") == "allow"
    assert bash_decision(settings_for(T.IMPLEMENT), "git merge main") == "ask"


WRITERS = {
    "feature_list.json": ("mark_passing",),
    "progress.json": ("append_session",),
    "reviews.json": ("record_review", "record_fix"),
}
"""The hand-off tools that write each file."""


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r.value)
@pytest.mark.parametrize("name", HANDOFF_FILES)
def test_the_settings_and_the_path_hook_follow_the_table(
    role: SessionType, name: str, tmp_path: Path
) -> None:
    rights = policy(role)
    settings = settings_for(role)["permissions"]
    by_hand = name == "feature_list.json" and rights.creates_feature_list  # every other write: the tools
    assert (path_decision(role, tmp_path, name) is None) is by_hand
    written = f"Edit(./{name})" in settings["allow"] or "Edit(./**)" in settings["allow"]
    denied = f"Edit(./{name})" in settings["deny"]
    assert (written and not denied) is by_hand
    assert (path_decision(role, tmp_path, "src/app.py") is None) is rights.writes_code
    if rights.may_write_handoff(name) and not by_hand:  # what it may change, it changes by a tool
        assert any(f"mcp__handoff__{tool}" in settings["allow"] for tool in WRITERS[name])


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r.value)
def test_the_scope_text_is_the_tables(role: SessionType) -> None:
    from session_scheduler.guard.security import scope_rules

    assert policy(role).scope in scope_rules(role, None)


@pytest.mark.parametrize(
    ("command", "decision"),
    [
        ("git status", "allow"),
        ("git checkout -q main && git log --oneline", "allow"),
        ("git push origin main", "deny"),
        ("git status; git push", "deny"),
        ("ls | nc 127.0.0.1 9", "deny"),
        ("git checkout -b feature/F009", "deny"),
        ("git merge --no-ff feature/F001", "allow"),
        ("rm init.sh.bak", "ask"),
        ("", "ask"),
    ],
)
def test_bash_rules_are_read_like_the_cli_reads_them(command: str, decision: str) -> None:
    assert bash_decision(settings_for(T.REVIEW), command) == decision


@pytest.mark.parametrize(
    ("command", "decision"),
    [  # what the two regexes that split command lines here before got wrong (their answer after #)
        ("git status\ngit push origin main", "deny"),  # allow: a newline was no separator
        ("git status & git push", "deny"),  # allow: nor was `&`
        ('git log "$(git push)"', "deny"),  # allow: nor a command substitution
        ("(git push)", "deny"),  # ask: `(git` was a word
        ("'git' push", "deny"),  # ask: quotes were kept
        ("git log --format='%h;%s'", "allow"),  # ask: split inside quotes
        ("git log --grep='a|b'", "allow"),  # ask
        ("git status # ; git push", "allow"),  # deny: split inside a comment
    ],
)
def test_command_lines_are_split_by_the_shell_parser(command: str, decision: str) -> None:
    assert bash_decision(settings_for(T.REVIEW), command) == decision


def test_a_denial_names_the_rule_of_a_command_on_a_later_line(tmp_path: Path) -> None:
    from session_scheduler.guard.security import denial_rule

    command = {"command": "git status\n(git push origin main)"}
    assert (
        denial_rule(settings_for(T.REVIEW), T.REVIEW, tmp_path, "Bash", command)
        == "deny rule Bash(git push:*)"
    )


def test_every_role_has_a_policy_and_the_ends_have_none() -> None:
    assert set(POLICIES) == set(ROLES)
    with pytest.raises(ValueError, match="runs no session"):
        policy(T.DONE)


@pytest.mark.parametrize(
    ("role", "tool", "tool_input", "rule"),
    [
        (T.IMPLEMENT, "Bash", {"command": "git push origin main"}, "deny rule Bash(git push:*)"),
        (T.IMPLEMENT, "Bash", {"command": "ls && curl -s x"}, "deny rule Bash(curl:*)"),
        (T.REVIEW, "Bash", {"command": "git checkout -b x"}, "deny rule Bash(git checkout -b:*)"),
        (
            T.ARCHITECTURE,
            "Bash",
            {"command": "python3 app.py"},
            "not in ARCHITECTURE's allowed commands (dontAsk mode)",
        ),
        (
            T.REVIEW,
            "Write",
            {"file_path": "src/a.py"},
            "scheduler policy: REVIEW writes no file: it records its work with the hand-off tools",
        ),
        (
            T.IMPLEMENT,
            "Read",
            {"file_path": "/etc/passwd"},
            "scheduler policy: /etc/passwd is outside the project folder",
        ),
        (
            T.IMPLEMENT,
            "WebFetch",
            {"url": "http://x"},
            "WebFetch is not allowed for IMPLEMENT by its permission settings",
        ),
    ],
)
def test_every_denial_names_the_rule_that_refused_it(
    role: SessionType, tool: str, tool_input: dict[str, str], rule: str, tmp_path: Path
) -> None:
    from session_scheduler.guard.security import denial_rule

    assert denial_rule(settings_for(role), role, tmp_path, tool, tool_input) == rule
