"""One small error hierarchy: every known failure says what is wrong and what to do."""

from __future__ import annotations

EXIT_DONE = 0
"""Every feature passes or is blocked."""
EXIT_ERROR = 1
"""Bad input, a failure that needs a person, or a run that halted."""
EXIT_USAGE = 2
"""click's own exit code for a malformed command line."""
EXIT_LIMIT = 3
"""A limit (--max-iterations, a usage limit) stopped a run that the same command resumes."""

EXIT_INTERRUPTED = 130
"""Ctrl-C: the interrupted session runs again when the same command is run again."""


class SchedulerError(Exception):
    """A known failure; the CLI prints it as one line and exits non-zero."""

    exit_code = EXIT_ERROR


class ConfigError(SchedulerError):
    """An option, a spec or a saved config that cannot be used."""


class BadInput(ConfigError):
    """A value on the command line that cannot be used (a missing or unreadable spec, a folder
    given as a file): a malformed command line, exit 2 like click's own usage errors."""

    exit_code = EXIT_USAGE


class SpecError(BadInput):
    """A spec whose task list or issues export cannot be used (core/tasks.py): said in one line
    with where and how to fix it; exit 2 like any other --spec that cannot be used."""


class StateError(SchedulerError):
    """A scheduler or hand-off file that is missing, corrupt or invalid."""


class AlreadyRunning(SchedulerError):
    """Another scheduler holds the project's lock."""


class PromptError(SchedulerError):
    """A role template that cannot be rendered."""


class SettingsError(SchedulerError):
    """Generated Claude Code settings that do not validate."""


class NotLoggedIn(SchedulerError):
    """The endpoint refused the credentials, the billing or the model: a person must act."""


class UnknownModel(NotLoggedIn):
    """The endpoint does not serve a model the options name (the option is not kept)."""


class GitError(SchedulerError):
    """A git operation the scheduler needs failed."""
