"""Per-role permissions: Claude Code settings, CLAUDE.md scope rules, the file-path hook policy.

Everything here is built as data by pure functions; `plan.write_plan` is the one place
that writes them, after `plan.plan_session` validated the settings (the CLI silently
ignores an invalid settings file, so an unvalidated one would mean no policy at all).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any, Literal

from config import SessionType
from errors import SettingsError
from layout import AGENT_MAY_NOT_WRITE, FOLDERS, HANDOFF_FILES, SCHEDULER_FILES, SETTINGS_FILE
from machine import WorkItem
from schemas import schema_error

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
                "allow": {"type": "array", "items": {"type": "string", "pattern": rf"^{_TOOL}(\(.+\))?$"}},
                "deny": {"type": "array", "items": {"type": "string", "pattern": rf"^{_TOOL}(\(.+\))?$"}},
                "defaultMode": {"enum": ["default", "acceptEdits", "dontAsk", "plan"]},
            },
        },
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}

READ_ONLY_TOOLS = ["Read", "Glob", "Grep", "LS", "TodoWrite"]
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
BUILD = [
    "git add",
    "git commit",
    "git mv",
    "git rm",
    "mkdir",
    "touch",
    "cp",
    "mv",
    "chmod",
    "python3",
    "python",
    "pip install",
    "pip3 install",
    "npm install",
    "npm ci",
    "npx",
    "node",
    "make",
]
RUN_APP = ["python3", "python", "node", "npm start"]
"""Reviewers try the feature's steps by running the app itself."""
REVIEW_GIT = ["git merge", "git reset --hard ORIG_HEAD", "git merge --abort"]
DENY_BASH = [
    "git push",
    "git rebase",
    "git filter-branch",
    "git reset --hard HEAD~",
    "git clean",
    "git config",
    "git update-ref",
    "git tag -d",
    "rm -rf",
    "sudo",
    "curl",
    "wget",
    "ssh",
    "scp",
    "nc",
]


def _bash_rules(prefixes: list[str]) -> list[str]:
    return [f"Bash({p}:*)" for p in prefixes]


def _file_rules(paths: list[str]) -> list[str]:
    return [f"{tool}(./{p})" for p in paths for tool in ("Edit", "Write")]


FORBIDDEN_FILES: dict[SessionType, tuple[str, ...]] = {
    SessionType.IMPLEMENT: ("feature_list.json", "reviews.json"),
    SessionType.FIX: ("feature_list.json",),
}
"""Hand-off files a role may not write (enforced by both the settings and the path hook)."""

NEW_BRANCH = ["git checkout -b", "git switch -c", "git checkout -B"]
REWRITE_BRANCHES = [
    "git branch -f",
    "git branch -D",
    "git branch -d",
    "git branch -m",
    "git branch -M",
    "git checkout -f",
    "git commit",
    "git cherry-pick",
    "git revert",
    "git stash",
]
"""Reviewers judge and merge; they never move, delete or add to a branch."""
ROLE_DENIES: dict[SessionType, list[str]] = {
    SessionType.INITIALIZER: _bash_rules(NEW_BRANCH),
    SessionType.REVIEW: _bash_rules(NEW_BRANCH + REWRITE_BRANCHES),
    SessionType.ARCHITECTURE: _bash_rules(NEW_BRANCH + REWRITE_BRANCHES),
    SessionType.IMPLEMENT: _file_rules(list(FORBIDDEN_FILES[SessionType.IMPLEMENT])),
    SessionType.FIX: _file_rules(list(FORBIDDEN_FILES[SessionType.FIX])) + _bash_rules(NEW_BRANCH),
}
"""What a role may not do beyond the common denies (deny rules beat allow rules)."""


def settings_for(role: SessionType, test_command: str | None = None) -> dict[str, Any]:
    """The Claude Code settings of a role, as data."""
    tests = RUN_TESTS + ([test_command] if test_command else [])
    allow = list(READ_ONLY_TOOLS) + _bash_rules(INSPECT + tests)
    if role in (SessionType.INITIALIZER, SessionType.IMPLEMENT, SessionType.FIX):
        allow += [*_bash_rules(BUILD), "Edit(./**)", "Write(./**)"]
    elif role is SessionType.REVIEW:
        allow += _bash_rules(REVIEW_GIT + RUN_APP) + _file_rules(list(HANDOFF_FILES))
    elif role is SessionType.ARCHITECTURE:
        allow += _file_rules(["reviews.json", "progress.json"])
    else:
        raise SettingsError(f"{role} runs no session")
    deny = _bash_rules(DENY_BASH) + [f"{tool}(./{p})" for p in AGENT_MAY_NOT_WRITE for tool in ("Edit", "Write")]
    deny += [f"{tool}(./{p}/**)" for p in AGENT_MAY_NOT_WRITE for tool in ("Edit", "Write")]
    deny += ROLE_DENIES.get(role, [])
    return {"permissions": {"allow": allow, "deny": deny, "defaultMode": PERMISSION_MODE}}


def validate_settings(settings: dict[str, Any]) -> None:
    error = schema_error(settings, SETTINGS_SCHEMA)
    if error is not None:
        raise SettingsError(f"generated {SETTINGS_FILE} is invalid {error}")


SCOPES: dict[SessionType, str] = {
    SessionType.INITIALIZER: "Write the feature list, init.sh and the project skeleton; commit on `main`.",
    SessionType.IMPLEMENT: "Implement ONE feature on its `feature/<ID>` branch; never commit on `main`.",
    SessionType.REVIEW: "Review and merge; write only the hand-off files, never product code.",
    SessionType.FIX: "Fix the open review's issues on the same branch; never merge, never set `passes`.",
    SessionType.ARCHITECTURE: "Review the whole codebase; write only reviews.json and progress.json.",
}


def _names(names: tuple[str, ...]) -> str:
    return ", ".join(f"{name}/" if name in FOLDERS else name for name in names)


def scope_rules(role: SessionType, work: WorkItem | None) -> str:
    """The CLAUDE.md text of a role: its scope in words (the settings and hooks enforce it)."""
    feature = (work.feature_id or "none (architecture fixes)") if work else "none"
    branch = work.branch if work else "main"
    return "\n".join(
        [
            f"# Scope of this session: {role.value}",
            "",
            SCOPES[role],
            f"Current feature: {feature}; branch: {branch}.",
            "",
            "- Work only inside this project folder.",
            f"- Never edit {_names(SCHEDULER_FILES)} or .git/ directly: they belong to the scheduler.",
            f"- The hand-off files ({_names(HANDOFF_FILES)}) are git-ignored:",
            "  edit them in place, keep them valid JSON, never commit them.",
            "- Stage explicit paths; no `git add -A`, no push, no rebase, no history rewriting.",
            "- Commands outside your role's permissions are denied: do not try to work around them.",
            "",
        ]
    )


def path_decision(role: SessionType, project: Path, target: str) -> str | None:
    """Why a Write/Edit of `target` by `role` is refused, or None when it is allowed."""
    root = project.resolve()
    path = Path(target) if Path(target).is_absolute() else root / target
    resolved = path.resolve()
    if not resolved.is_relative_to(root):
        return f"{target} is outside the project folder"
    rel = PurePosixPath(resolved.relative_to(root).as_posix())
    if rel.parts and rel.parts[0] in AGENT_MAY_NOT_WRITE:
        return f"{rel} belongs to the scheduler"
    if str(rel) in FORBIDDEN_FILES.get(role, ()):
        return f"{role.value} may not write {rel}"
    if role in (SessionType.REVIEW, SessionType.ARCHITECTURE):
        allowed = HANDOFF_FILES if role is SessionType.REVIEW else ("reviews.json", "progress.json")
        if str(rel) not in allowed:
            return f"{role.value} may write only {', '.join(allowed)}, not {rel}"
    return None
