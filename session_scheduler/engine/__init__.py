"""Engines that run sessions elsewhere than in the scheduler's process, behind the SessionRunner
seam (run/agent.py): Temporal workers (`--engine temporal://...`, the optional extra `temporal`).

What crosses the wire is data (wire.py): the session's request and its result, never a live
object. The scheduler stays the one authority; an engine only runs sessions."""

from __future__ import annotations

import importlib.util

from session_scheduler.core.engine import INSTALL_HINT
from session_scheduler.core.errors import ConfigError


def require_temporal(option: str) -> None:
    """Refuse, in one line, an engine whose SDK is not installed (it is an optional extra)."""
    try:
        found = importlib.util.find_spec("temporalio") is not None
    except (ImportError, ValueError):  # a module blocked or half installed
        found = False
    if not found:
        raise ConfigError(f"{option} needs the Temporal SDK, which is not installed: {INSTALL_HINT}")
