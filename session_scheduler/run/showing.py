"""What a session of one role would receive, as text: `--dry-run --show ROLE` and the conformance
test both read it, so what a person inspects is what the agent gets.

`state_to_show` picks the session (the project's next one when it is of that role, else one of
that role on the project's first open feature); `view` lays out the three things the CLI sends:
the text appended to Claude Code's system prompt, the first message (the brief), and the tools.
Pure: the caller reads the project's state and features and builds the plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from session_scheduler.core import evidence
from session_scheduler.core.config import SessionType
from session_scheduler.core.machine import Backlog, Lane, SessionState, feature
from session_scheduler.guard import toolset
from session_scheduler.run.plan import SessionPlan

T = SessionType


def state_to_show(
    role: SessionType, saved: SessionState, features: Sequence[Mapping[str, Any]]
) -> SessionState:
    """The session of `role` to show: the saved state's own when its next session is of that role;
    otherwise one on the first feature that neither passes nor is blocked (F001 in a new project),
    a FIX answering the last review of it (`reviews`' ids are the caller's to give: review 1 here)."""
    if saved.lane.role is role:
        return saved
    ids = saved.backlog.features or tuple(str(f.get("id")) for f in features) or ("F001",)
    backlog = saved.backlog if saved.backlog.features else Backlog(ids)
    open_ids = [i for i in backlog.features if i not in backlog.passing and i not in backlog.blocked]
    chosen = (open_ids or list(backlog.features))[0]
    if role is T.INITIALIZER:
        lane = Lane(T.INITIALIZER)
    elif role is T.ARCHITECTURE:
        lane = Lane(T.ARCHITECTURE)
    elif role is T.FIX:
        lane = Lane(T.FIX, feature(chosen), fix_rounds=1, open_review=1)
    else:
        lane = Lane(role, feature(chosen))
    return replace(saved, backlog=backlog, lane=lane)


def is_web_review(state: SessionState, features: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the session is a REVIEW of a web feature (it gets the browser's tools and section)."""
    work = state.lane.work
    if state.lane.role is not T.REVIEW or work is None or work.feature_id is None:
        return False
    return any(f.get("id") == work.feature_id and evidence.is_web(f) for f in features)


def view(plan: SessionPlan, *, browser: bool) -> str:
    """What the session receives, in the order the CLI sends it."""
    tools = toolset.session_tools(plan.role, browser=browser)
    return "\n".join(
        [
            f"--- appended to Claude Code's system prompt ({len(plan.system_prompt.encode())} bytes) ---",
            plan.system_prompt,
            f"--- first message ({len(plan.kickoff.encode())} bytes) ---",
            plan.kickoff,
            f"--- tools ({len(tools)}; every other Claude Code tool is off) ---",
            *tools,
            "---",
        ]
    )
