"""The design card's `prompts` module: a face over `session_scheduler.run.prompts`, where the code lives."""

from session_scheduler.run.prompts import *  # noqa: F403
