"""One role policy: the prompts, the settings and the path hook all agree with the table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import state_for

from session_scheduler.core.config import ROLES, AgentConfig, SessionType
from session_scheduler.core.layout import HANDOFF_FILES
from session_scheduler.core.machine import Backlog, Lane, SessionState, architecture_fixes
from session_scheduler.core.policy import POLICIES, policy
from session_scheduler.guard.bash_policy import BashContext, bash_refusal
from session_scheduler.guard.security import (
    bash_decision,
    git_rules,
    path_decision,
    scope_rules,
    settings_for,
)
from session_scheduler.run.prompts import render, role_variables

T = SessionType
COMMAND_WORDS = ("git", "./init.sh", "bash", "sh", "python3", "python", "npm", "pytest", "make", "ls", "cat")
STATES = {
    T.INITIALIZER: SessionState(),
    T.IMPLEMENT: state_for(T.IMPLEMENT),
    T.REVIEW: state_for(T.REVIEW),
    T.FIX: state_for(T.FIX, open_review=3, fix_rounds=1),
    T.ARCHITECTURE: SessionState(Backlog(("F001",)), Lane(T.ARCHITECTURE)),
}


def commands_told(role: SessionType, state: SessionState, config: AgentConfig) -> list[str]:
    """Every command the role's own instructions tell it to run (not the ones they forbid)."""
    text = render(role, role_variables("app", config, state)) + scope_rules(role, state.lane.work)
    spans = re.findall(r"`([^`\n]+)`", text)
    return [span for span in spans if span.split()[0] in COMMAND_WORDS]


CASES = [(role, STATES[role]) for role in ROLES] + [
    (T.FIX, SessionState(Backlog(("F001",)), Lane(T.FIX, architecture_fixes(7), fix_rounds=1, open_review=7)))
]


@pytest.mark.parametrize(("role", "state"), CASES, ids=lambda c: getattr(c, "value", ""))
@pytest.mark.parametrize("test_command", [None, "bash init.sh"])
def test_every_command_a_prompt_tells_its_role_to_run_is_allowed(
    role: SessionType, state: SessionState, test_command: str | None
) -> None:
    config = AgentConfig(test_command=test_command)
    told = commands_told(role, state, config)
    assert told, f"{role.value}'s prompt names no command at all"
    settings = settings_for(role, test_command)
    refused = [command for command in told if bash_decision(settings, command) != "allow"]
    assert refused == [], f"{role.value} is told to run commands its policy refuses: {refused}"
    work = state.lane.work
    start = work.branch if work is not None and policy(role).starts_on == "work" else "main"
    allowed, denied = git_rules(settings)
    branches = frozenset({"main", work.branch} if work else {"main"})
    context = BashContext(role, work, Path("/project"), Path("/project"), start, branches, allowed, denied)
    assert bash_refusal("\n".join(told), context) is None, (
        f"{role.value}'s Bash policy refuses what it is told to run"
    )


def test_fix_is_told_to_merge_main_and_may() -> None:
    assert "git merge main" in commands_told(T.FIX, STATES[T.FIX], AgentConfig())
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
