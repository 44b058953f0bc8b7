"""The design card's `agent` module: a face over `session_scheduler.run.agent`, where the code lives."""

from session_scheduler.run.agent import *  # noqa: F403
