"""The design card's `progress` module: a face over `session_scheduler.store.progress`, where the code lives."""

from session_scheduler.store.progress import *  # noqa: F403
