"""Where the scheduler's files live in a generated project: every name, written once.

gitops keeps them out of git, security keeps agents from writing them, the scope text
names them, and progress reads and writes them; all from the tuples below.
"""

from __future__ import annotations

FEATURES_FILE = "feature_list.json"
"""The features, their acceptance steps and whether each passes (written by the INITIALIZER)."""
HANDOFF_FILES: tuple[str, ...] = (FEATURES_FILE, "progress.json", "reviews.json")
"""The files sessions hand work over in (git-ignored, so checkouts never change them)."""
STATE_FILE = ".agent_state.json"
CONFIG_FILE = ".agent_config.json"
LOCK_FILE = ".agent.lock"
LOG_DIR = ".agent_logs"
EVENTS_FILE = "events.jsonl"
"""The run's event log, inside LOG_DIR (events.py)."""
CONSOLE_DIR = "console"
"""Inside LOG_DIR: a copy of each run's console output."""
ADOPTION_FILE = "adoption.json"
"""Inside LOG_DIR: the person's CLAUDE.md and branch as the first run found them (adoption.py)."""
SETTINGS_FILE = ".claude_settings.json"
APP_FILE = "app.json"
"""At the project's root, in git: how to start the app (core/app.AppSpec; the INITIALIZER proposes
it, the scheduler validates it, the person may override it; docs/gates.md, "The app gate")."""
CLAUDE_DIR = ".claude"
"""The folder Claude Code creates in its working directory."""

HISTORY_FILES: tuple[str, ...] = (
    "progress_history.jsonl",
    "reviews_history.jsonl",
    "fixes_history.jsonl",
    "reviews_history_counts.json",
)
"""Older hand-off entries, moved out of the files agents write (handoff_history.py)."""

SCHEDULER_FILES: tuple[str, ...] = (
    *HISTORY_FILES,
    STATE_FILE,
    CONFIG_FILE,
    LOCK_FILE,
    LOG_DIR,
    SETTINGS_FILE,
    CLAUDE_DIR,
)
"""Files and folders only the scheduler writes."""
FOLDERS: frozenset[str] = frozenset({LOG_DIR, CLAUDE_DIR})

NEVER_IN_GIT: tuple[str, ...] = HANDOFF_FILES + SCHEDULER_FILES
"""Names no commit may add, whatever a branch's .gitignore says."""
AGENT_MAY_NOT_WRITE: tuple[str, ...] = (*SCHEDULER_FILES, ".git")
"""Top-level names no agent may write to with the file tools (its git writes `.git` from Bash)."""
GIT_CODE_PATHS: tuple[str, ...] = (".git/hooks", ".git/config", ".git/info")
"""Where git finds code to run or rules it obeys: nothing in a session writes them, git included."""
MAIN_REF_PATHS: tuple[str, ...] = (".git/refs/heads/main", ".git/packed-refs")
"""Where `main` is written: unwritable in the sandbox of a role that may not move it (the scheduler
keeps `main` a loose ref, so no commit, reset or script can move it there)."""
SANDBOX_DENIED_WRITES: tuple[str, ...] = (*SCHEDULER_FILES, *GIT_CODE_PATHS)
"""What no sandboxed command may write. Not all of `.git`: the agent's git runs in the sandbox."""


def ignore_pattern(name: str) -> str:
    """The .gitignore line for one of the scheduler's names: the bare name, folders included (a
    sandbox denies writes to them where they are missing by mounting a placeholder there, a
    character device that `git add -A` refuses and that a folder's `name/` would not ignore)."""
    return name


def is_scheduler_path(path: str) -> bool:
    """True for a repository path that is, or lies inside, one of NEVER_IN_GIT."""
    top = path.split("/", 1)[0]
    return top in NEVER_IN_GIT


SPEC_NAME = "app_spec.txt"
"""The spec in the project folder and in git, as sessions read it."""
