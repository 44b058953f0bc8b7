"""The tools a session of each role is given, from the one role table; everything else is off.

Claude Code offers every session about twenty tools beside ours (subagents, skills, workflows,
web access, cron, worktrees, a memory folder), about 30,000 characters of the first request, and
some of them need no permission. A session gets exactly its role's base tools (`base_tools`: the
file-editing ones only for a role that writes code), the hand-off tools the policy gives it, and
for a web REVIEW the browser's; `OFF_TOOLS` are refused by name as well, and `SESSION_ENV` turns
off what the CLI adds without a tool (deferred tool schemas, the memory folder, bundled skills,
cron). The runner passes these to the SDK and refuses any other tool in its PreToolUse hook.
"""

from __future__ import annotations

from session_scheduler.core import evidence
from session_scheduler.core.config import SessionType
from session_scheduler.core.policy import policy
from session_scheduler.guard.browser_box import BROWSER_TOOLS
from session_scheduler.store.handoff_tools import PREFIX, tool_names

INSPECT_TOOLS = ("Bash", "Read", "Glob", "Grep")
"""Every role's base tools: Bash runs in the OS sandbox and under the role's command policy."""
EDIT_TOOLS = ("Edit", "Write")
"""Only for a role that writes code (the file policy keeps them inside the project)."""
OFF_TOOLS = (
    "Agent",
    "Task",
    "TaskOutput",
    "TaskStop",
    "Skill",
    "Workflow",
    "WebFetch",
    "WebSearch",
    "CronCreate",
    "CronDelete",
    "CronList",
    "ScheduleWakeup",
    "ListAgents",
    "ReportFindings",
    "SendMessage",
    "Monitor",
    "NotebookEdit",
    "EnterWorktree",
    "ExitWorktree",
    "ToolSearch",
)
"""What Claude Code offers that no role gets: work the scheduler would neither see nor end
(subagents, skills, workflows, wake-ups), the network beyond the sandbox, other work trees."""
SESSION_ENV = {
    "ENABLE_TOOL_SEARCH": "false",
    "CLAUDE_CODE_DISABLE_AUTO_MEMORY": "1",
    "CLAUDE_CODE_DISABLE_BUNDLED_SKILLS": "1",
    "CLAUDE_CODE_DISABLE_CRON": "1",
}
"""The CLI's switches for what it adds without a tool: MCP tools listed as deferred (a model would
have to find ours with ToolSearch first), a memory folder outside the project, bundled skills, cron."""


def base_tools(role: SessionType) -> tuple[str, ...]:
    """Claude Code's own tools a session of `role` gets."""
    return INSPECT_TOOLS + (EDIT_TOOLS if policy(role).writes_code else ())


def session_tools(role: SessionType, *, browser: bool = False) -> tuple[str, ...]:
    """Every tool a session of `role` is given, by the name its `init` message lists: its base
    tools, its hand-off tools and, for a web REVIEW (`browser`), the browser's."""
    handoff = tuple(PREFIX + name for name in tool_names(role))
    web = tuple(evidence.TOOL_PREFIX + name for name in BROWSER_TOOLS) if browser else ()
    return base_tools(role) + handoff + web


def tool_refusal(role: SessionType, tool: str, *, browser: bool = False) -> str | None:
    """Why a call of `tool` is refused to a session of `role` (None: it is one of its tools)."""
    allowed = session_tools(role, browser=browser)
    if tool in allowed:
        return None
    return (
        f"{tool} is not one of {role.value}'s tools in this unattended run "
        f"(it has: {', '.join(name.removeprefix('mcp__') for name in allowed)})"
    )
