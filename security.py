"""The design card's `security` module: a face over `session_scheduler.guard.security`, where the code lives."""

from session_scheduler.guard.security import *  # noqa: F403
