"""Per-role permissions: Claude Code settings, the scope rules (in the system prompt), the file-path hook policy.

Everything here is built as data by pure functions; `plan.write_plan` is the one place
that writes them, after `plan.plan_session` validated the settings (the CLI silently
ignores an invalid settings file, so an unvalidated one would mean no policy at all).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from session_scheduler.core.config import SessionType
from session_scheduler.core.errors import SettingsError
from session_scheduler.core.layout import (
    AGENT_MAY_NOT_WRITE,
    FOLDERS,
    HANDOFF_FILES,
    SANDBOX_DENIED_WRITES,
    SCHEDULER_FILES,
    SETTINGS_FILE,
)
from session_scheduler.core.machine import WorkItem
from session_scheduler.core.policy import policy
from session_scheduler.core.schemas import schema_error
from session_scheduler.guard.bash_policy import simple_commands
from session_scheduler.guard.toolset import base_tools
from session_scheduler.store.handoff_tools import permission_rules, tool_names

FEATURES = HANDOFF_FILES[0]
PERMISSION_MODE: Literal["dontAsk"] = "dontAsk"
"""Anything not allowed is denied without asking (headless; bypass is refused as root)."""

_TOOL = r"(Bash|Read|Edit|Write|MultiEdit|Glob|Grep|LS|NotebookEdit|TodoWrite|WebFetch|WebSearch|Task)"
SETTINGS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["permissions"],
    "properties": {
        "permissions": {
            "type": "object",
            "additionalProperties": False,
            "required": ["allow", "deny", "defaultMode"],
            "properties": {
                "allow": {
                    "type": "array",
                    "items": {"type": "string", "pattern": rf"^({_TOOL}(\(.+\))?|mcp__handoff__[a-z_]+)$"},
                },
                "deny": {"type": "array", "items": {"type": "string", "pattern": rf"^{_TOOL}(\(.+\))?$"}},
                "defaultMode": {"enum": ["default", "acceptEdits", "dontAsk", "plan"]},
            },
        },
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
        "sandbox": {
            "type": "object",
            "additionalProperties": False,
            "required": ["enabled", "failIfUnavailable"],
            "properties": {
                "enabled": {"const": True},
                "failIfUnavailable": {"const": True},
                "autoAllowBashIfSandboxed": {"type": "boolean"},
                "allowUnsandboxedCommands": {"const": False},
                "filesystem": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "allowWrite": {"type": "array", "items": {"type": "string", "minLength": 1}},
                        "denyWrite": {"type": "array", "items": {"type": "string", "minLength": 1}},
                        "denyRead": {"type": "array", "items": {"type": "string", "minLength": 1}},
                        "allowRead": {"type": "array", "items": {"type": "string", "minLength": 1}},
                    },
                },
                "network": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "allowedDomains": {"type": "array", "items": {"type": "string", "minLength": 1}}
                    },
                },
                "credentials": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["envVars"],
                    "properties": {
                        "envVars": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["name", "mode"],
                                "properties": {
                                    "name": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                                    "mode": {"const": "deny"},
                                },
                            },
                        }
                    },
                },
            },
        },
    },
}

INSPECT = [
    "ls",
    "cat",
    "head",
    "tail",
    "wc",
    "grep",
    "pwd",
    "echo",
    "diff",
    "sort",
    "tree",
    "cd",
    "which",
    "stat",
    "file",
    "du",
    "git status",
    "git log",
    "git diff",
    "git show",
    "git branch",
    "git rev-parse",
    "git checkout",
    "git switch",
    "git merge-base",
    "git ls-files",
    "git worktree list",
    "python3 -m json.tool",
    "python -m json.tool",
]
RUN_TESTS = [
    "./init.sh",
    "bash init.sh",
    "sh init.sh",
    "python3 -m unittest",
    "python -m unittest",
    "python3 -m pytest",
    "pytest",
    "npm test",
    "npm run",
    "make test",
]
COMMON_DENY = [
    "git push",
    "git rebase",
    "git filter-branch",
    "git reset --hard HEAD~",
    "git clean",
    "git config",
    "git update-ref",
    "git tag -d",
    "sudo",
    "curl",
    "wget",
    "ssh",
    "scp",
    "nc",
]
"""Commands refused to every role."""


def _bash_rules(prefixes: Iterable[str]) -> list[str]:
    return [f"Bash({p}:*)" for p in prefixes]


def _file_rules(paths: Iterable[str], root: str) -> list[str]:
    return [f"{tool}({root}/{p})" for p in sorted(paths) for tool in ("Edit", "Write")]


def rule_root(project: Path | None) -> str:
    """How the file rules name the project: absolute (`//` + its path) so that a `cd` into a
    subfolder does not move them; `.` (the working folder) where no project is given."""
    return "/" + project.resolve().as_posix() if project is not None else "."


def settings_for(
    role: SessionType, test_command: str | None = None, project: Path | None = None
) -> dict[str, Any]:
    """The Claude Code settings of a role, as data, derived from its policy."""
    rights = policy(role)
    root = rule_root(project)
    tests = RUN_TESTS + ([test_command] if test_command else [])
    allow = (
        [tool for tool in base_tools(role) if tool not in ("Bash", "Edit", "Write")]
        + _bash_rules(INSPECT + tests)
        + _bash_rules(rights.commands + rights.merge_commands)
    )
    refused_files: set[str] = set()
    if rights.writes_code:
        allow += [f"Edit({root}/**)", f"Write({root}/**)"]
        refused_files = set(HANDOFF_FILES) - edited_handoff(role)
    allow += permission_rules(role)
    # Not all of `.git`: Claude Code merges Edit deny rules into the sandbox's denyWrite, and the
    # agent's git writes `.git` from inside the sandbox; the file policy hook keeps the file tools out.
    deny = _bash_rules(COMMON_DENY) + [
        f"{tool}({root}/{p})" for p in SANDBOX_DENIED_WRITES for tool in ("Edit", "Write")
    ]
    deny += [f"{tool}({root}/{p}/**)" for p in SANDBOX_DENIED_WRITES for tool in ("Edit", "Write")]
    deny += _file_rules(refused_files, root) + _bash_rules(rights.refused)
    return {"permissions": {"allow": allow, "deny": deny, "defaultMode": PERMISSION_MODE}}


def _matches(rules: list[str], part: list[str]) -> bool:
    prefixes = [rule[5:-3].split() for rule in rules if rule.startswith("Bash(") and rule.endswith(":*)")]
    return any(part[: len(prefix)] == prefix for prefix in prefixes)


def bash_decision(settings: dict[str, Any], command: str) -> Literal["allow", "deny", "ask"]:
    """What the settings' `Bash(prefix:*)` rules say of a command, part by part, as the CLI
    reads them: any part a deny rule matches denies it; it is allowed when an allow rule
    matches every part; otherwise the CLI would ask (and in dontAsk mode, deny)."""
    permissions = settings["permissions"]
    parts = simple_commands(command)
    if any(_matches(permissions["deny"], part) for part in parts):
        return "deny"
    return "allow" if parts and all(_matches(permissions["allow"], part) for part in parts) else "ask"


def git_rules(settings: dict[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The git command prefixes the settings allow and deny (what the Bash policy holds git to)."""
    permissions = settings["permissions"]

    def prefixes(rules: list[str]) -> tuple[str, ...]:
        return tuple(r[5:-3] for r in rules if r.startswith("Bash(git ") and r.endswith(":*)"))

    return prefixes(permissions["allow"]), prefixes(permissions["deny"])


def validate_settings(settings: dict[str, Any]) -> None:
    """Raise SettingsError unless `settings` match their schema (settings already found valid in
    this process, as each session of a role has the same ones, are not checked again)."""
    text = json.dumps(settings, sort_keys=True)
    if text in _VALID_SETTINGS:
        return
    error = schema_error(settings, SETTINGS_SCHEMA)
    if error is not None:
        raise SettingsError(f"generated {SETTINGS_FILE} is invalid {error}")
    _VALID_SETTINGS.add(text)


_VALID_SETTINGS: set[str] = set()
"""The settings (as canonical JSON) validated in this process: a memo of a pure function of the
constant schema, keyed by content, so the same for every project (tests/test_records.py)."""


def _names(names: tuple[str, ...]) -> str:
    return ", ".join(f"{name}/" if name in FOLDERS else name for name in names)


UNATTENDED = (
    "This run is unattended: nobody reads your messages or answers a question until it ends. Never ask "
    "for confirmation and never wait for an answer; decide within these rules. When you cannot go on, "
    "record your session with `outcome` `FAILED` and the reason in `notes`, then end."
)


STAGING = (
    " Stage the files you changed by name (git add src/x.py tests/test_x.py): what git add -A would add "
    "besides (scratch files, the sandbox's placeholder files) does not belong in a commit."
)


def _branch_rule(role: SessionType, branch: str) -> str:
    """What the role does with branches, from its `branches` and `merges` rights."""
    rights = policy(role)
    if rights.branches == "main":
        return "You commit on `main` and create no branch."
    if rights.branches == "work":
        merge = (
            "; you may `git merge main` into it to bring it up to date"
            if rights.merges == "main"
            else ", and merge nothing"
        )
        return f"You commit only on `{branch}`, never on `main`{merge}."
    if rights.branches == "main_on_pass":
        return (
            f"You commit nothing yourself. On a PASS you merge `{branch}` into `main`, and when the tests "
            "fail on that merge you undo it with `git reset --hard ORIG_HEAD` (the one reset you run); "
            "you never create, move or delete a branch."
        )
    return "You change no branch: no commit, no merge."


def _checking(role: SessionType) -> str:
    """How the role checks behaviour inside its sandbox (what it may run, not what it may not)."""
    rights = policy(role)
    if "python3" not in rights.commands:
        return "- Checking: run the test suite; you start no app and no server."
    return (
        "- Checking: curl and wget are refused, and each command has a network of its own, so a server "
        "started in one command cannot be reached from the next (and one left running is stopped when the "
        "session ends). Check a server through its framework's test client in the tests, or in ONE python3 "
        "command that starts it, requests it with urllib on 127.0.0.1 and stops it. Run acceptance steps "
        "with their data under $TMPDIR (point the app's data file there), so they leave nothing in the work tree."
    )


FORM_SCOPES: dict[str, tuple[str, str]] = {
    "existing": (
        "Plan features on top of the code that is there (feature_list.json); add only what testing them "
        "needs (an init.sh when the project has none); commit on `main` what you added, if anything.",
        "You commit on `main` (what you added, if anything) and create no branch.",
    ),
    "extend": (
        "Append the features of the newer spec to feature_list.json; build nothing and commit nothing.",
        "You commit nothing and create no branch.",
    ),
}
"""The INITIALIZER's other forms (run/prompts.FORMS): its scope and its git rule, in words that
hold for the form (its rights are the role's; verification holds each form to its own)."""


def scope_rules(role: SessionType, work: WorkItem | None, form: str | None = None) -> str:
    """A role's scope in words, appended to its system prompt: generated from the same table as
    the settings and hooks that enforce it (core/policy, guard/toolset), so the two cannot drift.
    `form`: the INITIALIZER's form (`existing`, `extend`), which says its own scope."""
    rights = policy(role)
    scope, git_rule = FORM_SCOPES.get(form or "", (rights.scope, ""))
    feature = (
        (work.feature_id or f"the fixes of architecture review {work.architecture_review}")
        if work
        else "none"
    )
    branch = work.branch if work else "main"
    by_hand = sorted(edited_handoff(role))
    files = (
        f"You edit the project's files with Edit and Write, except {_names(SCHEDULER_FILES)} and .git/ (the scheduler's)."
        if rights.writes_code
        else "You write no file: your hand-off tools record your review."
    )
    handoff = f"The hand-off files ({_names(HANDOFF_FILES)}) are git-ignored; never commit them. " + (
        f"You write {', '.join(by_hand)} yourself; the others change only through your hand-off tools."
        if by_hand
        else "They change only through your hand-off tools, never by hand."
    )
    refused = [rule[5:-3] for rule in settings_for(role)["permissions"]["deny"] if rule.startswith("Bash(")]
    git_refused = ", ".join(r for r in refused if r.startswith("git "))
    other_refused = ", ".join(r for r in refused if not r.startswith("git "))
    lines = [
        f"# Scope of this session: {role.value}",
        "",
        scope,
        f"Current work: {feature}; branch: {branch}.",
        "",
        UNATTENDED,
        "",
        f"- Tools: {', '.join(base_tools(role))} and your hand-off tools (mcp__handoff__...). There are no "
        "subagents, skills, web tools or memory folder: your memory is the project's files and git.",
        f"- Files: work only inside this project folder. {files}",
        f"- {handoff}",
        f"- Git: {git_rule or _branch_rule(role, branch)}{STAGING if rights.writes_code else ''} Refused to you: {git_refused}.",
        "- Commands: every Bash command runs in an OS sandbox: it writes only this project (never .git/hooks, "
        ".git/config or .git/info) and $TMPDIR, reads no home folder or other project, and reaches only the "
        "package registries; credentials are not in its environment. Also refused: "
        f"{other_refused}. A refused command answers with the reason: do not work around it.",
        _checking(role),
        "",
    ]
    return "\n".join(lines)


WRITE_TOOLS = frozenset({"Write", "Edit", "MultiEdit", "NotebookEdit"})
READ_TOOLS = frozenset({"Read", "Glob", "Grep", "LS"})


def tool_target(tool: str, tool_input: dict[str, Any]) -> str | None:
    """The path a file tool call works on (None when it names none: the working directory)."""
    for key in ("file_path", "notebook_path", "path"):
        value = tool_input.get(key)
        if isinstance(value, str) and value:
            return value
    pattern = tool_input.get("pattern")
    if tool == "Glob" and isinstance(pattern, str) and pattern.startswith(("/", "~", "..")):
        return re.split(r"[*?\[{]", pattern, maxsplit=1)[0] or "/"  # the part before the first wildcard
    return None


def file_tool_decision(role: SessionType, project: Path, tool: str, tool_input: dict[str, Any]) -> str | None:
    """Why a file tool call is refused (outside the project, a scheduler file to write, a role's
    limits), or None when it is allowed. Symlinks, `..` and `~` are resolved first."""
    target = tool_target(tool, tool_input)
    if target is None:
        return None
    if tool in WRITE_TOOLS:
        return path_decision(role, project, target)
    return None if inside(project, target) else f"{target} is outside the project folder"


def inside(project: Path, target: str) -> PurePosixPath | None:
    """`target`'s path relative to the project (symlinks, `..` and `~` resolved), or None outside it."""
    root = project.resolve()
    path = Path(target).expanduser()
    resolved = (path if path.is_absolute() else root / path).resolve()
    return PurePosixPath(resolved.relative_to(root).as_posix()) if resolved.is_relative_to(root) else None


def path_decision(role: SessionType, project: Path, target: str) -> str | None:
    """Why a Write/Edit of `target` by `role` is refused, or None when it is allowed."""
    rel = inside(project, target)
    if rel is None:
        return f"{target} is outside the project folder"
    if rel.parts and rel.parts[0] in AGENT_MAY_NOT_WRITE:
        return f"{rel} belongs to the scheduler"
    if str(rel) in HANDOFF_FILES and str(rel) not in edited_handoff(role):
        return (
            f"{rel} is written only through the hand-off tools ({', '.join(tool_names(role))}), never by hand"
        )
    if not policy(role).writes_code:
        return f"{role.value} writes no file: it records its work with the hand-off tools"
    return None


def edited_handoff(role: SessionType) -> frozenset[str]:
    """The hand-off files a role writes with the file tools: only the feature list, by the role
    that creates it; every other hand-off write goes through the hand-off tools."""
    return frozenset({FEATURES}) if policy(role).creates_feature_list else frozenset()


def _first_match(rules: list[str], command: str) -> str | None:
    parts = simple_commands(command)
    for rule in rules:
        if rule.startswith("Bash(") and rule.endswith(":*)"):
            prefix = rule[5:-3].split()
            if any(part[: len(prefix)] == prefix for part in parts):
                return rule
    return None


def denial_rule(
    settings: dict[str, Any], role: SessionType, project: Path, tool: str, tool_input: dict[str, Any]
) -> str:
    """Which rule refused a tool call the CLI reported as denied (for the audit trail)."""
    if tool == "Bash":
        command = str(tool_input.get("command", ""))
        matched = _first_match(settings["permissions"]["deny"], command)
        if matched:
            return f"deny rule {matched}"
        return f"not in {role.value}'s allowed commands (dontAsk mode)"
    reason = file_tool_decision(role, project, tool, tool_input)
    if reason is not None:
        return f"scheduler policy: {reason}"
    return f"{tool} is not allowed for {role.value} by its permission settings"
