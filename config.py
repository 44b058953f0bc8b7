"""The design card's `config` module: a face over `session_scheduler.core.config`, where the code lives."""

from session_scheduler.core.config import *  # noqa: F403
