"""Run ONE fresh Claude Code session and report what happened, behind a small seam."""

from __future__ import annotations

import gc
import json
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import anyio
import claude_agent_sdk
from claude_agent_sdk import (
    AssistantMessage,
    ClaudeAgentOptions,
    ClaudeSDKError,
    HookMatcher,
    ProcessError,
    RateLimitEvent,
    ResultMessage,
    SystemMessage,
    ToolUseBlock,
    UserMessage,
    query,
)

from session_scheduler.core import evidence
from session_scheduler.core.humane import plural
from session_scheduler.core.session import InFlight, SessionFolder
from session_scheduler.guard import processes, toolset
from session_scheduler.guard.bash_policy import BashContext, bash_refusal
from session_scheduler.guard.security import (
    PERMISSION_MODE,
    file_tool_decision,
    git_rules,
)
from session_scheduler.repo import gitops
from session_scheduler.run import browsing
from session_scheduler.run.browsing import BrowserAccess
from session_scheduler.run.plan import SessionPlan
from session_scheduler.store import crashpoints
from session_scheduler.store.handoff_tools import SERVER, HandoffTools, mcp_server
from session_scheduler.store.records import Records

logging.getLogger("claude_agent_sdk").addHandler(logging.NullHandler())
"""The SDK logs a CLI the runner stopped ("Fatal error in message reader: ... exit code 143") to
stderr by default; the runner reports how each session ended itself, in the session's result."""

SANDBOX_FAILED = "Sandbox is required but failed to initialize"
"""What the CLI answers a Bash call with when bubblewrap or its socat bridges did not start."""
SDK_START_TIMEOUT = "Control request timeout: initialize"
"""What the SDK raises (a plain Exception) when the CLI never answers its start-up request: it
waits at least 60 s, even when the CLI exited at once."""
STOP_POLL_S = 0.5
"""How often a session checks whether its run is stopping."""
UNRETRYABLE_STATUSES = frozenset({401, 402, 403, 404})
"""API answers that retrying cannot fix (credentials, billing, an unknown model): a session stops at the
first instead of waiting out the CLI's retries (classify.cut_short says what the person must do)."""
NOT_LOGGED_IN_HINTS = ("not logged in", "please run /login", "invalid api key", "authentication_error")


@dataclass(frozen=True)
class SessionRequest:
    """One session to run: its plan, the work tree it runs in, the folder it logs in, and the
    project's records, which its hand-off tools write (never the work tree, though today both
    are the project folder)."""

    plan: SessionPlan
    cwd: Path
    """The workdir: the git work tree the agent works in."""
    settings_path: Path
    log_dir: Path
    records: Records
    lane: int | None = None
    """The lane it runs in (its clone); None: a session not run by the lanes (a probe's, a test's)."""
    lanes: int = 1
    """How many lanes the run has: with several, each console line names the session's lane."""
    browser: BrowserAccess | None = None
    """A REVIEW of a web feature: the browser started for it (run/browsing.py); None otherwise."""
    attempt: int = 1
    """Which run of session `plan.number` this is (one more each time it runs again after it was
    cut short): with the session's number, what names it on an engine (core/engine.workflow_id)."""

    @property
    def prefix(self) -> str:
        """What its console lines start with: its lane, when the run has several."""
        return f"[lane {self.lane}] " if self.lane is not None and self.lanes > 1 else ""


@dataclass(frozen=True)
class SessionResult:
    """What the CLI reported; the scheduler still verifies every claim against files and git."""

    subtype: str = "error_during_execution"
    is_error: bool = True
    cost_usd: float = 0.0
    input_tokens: int = 0
    """Input tokens not read from or written to the prompt cache."""
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    num_turns: int = 0
    session_id: str | None = None
    permission_denials: tuple[dict[str, Any], ...] = ()
    api_error_status: int | None = None
    terminal_reason: str | None = None
    error: str | None = None
    """Why the CLI failed before or instead of a result (process error, exception text)."""
    not_logged_in: bool = False
    rate_limit_resets_at: int | None = None
    """Set when a usage limit rejected the session: epoch seconds when it resets."""
    sandbox_failed: bool = False
    """Claude Code's OS sandbox failed to start for a Bash call (an infrastructure fault)."""
    browser_failed: str | None = None
    """Why the browser of a REVIEW did not start or did not connect (an infrastructure fault)."""
    base_url: str | None = None
    """The endpoint the CLI talked to (ANTHROPIC_BASE_URL), when one was set."""
    policy_refusals: dict[str, str] = field(default_factory=dict)
    """Why the scheduler's policy hook refused a call, by the call's tool_use_id."""
    tool_calls: int = 0
    duration_s: float = 0.0
    retrying_s: float = 0.0
    """How long the CLI had been retrying failed API requests when the session ended (0: it was
    not): the outage began that long before the end, the CLI's own retries included."""
    not_an_api: str | None = None
    """What the endpoint (ANTHROPIC_BASE_URL) answered that no Anthropic API does, when the session
    failed on an answer that suggested it (a 404 or 405, a page instead of JSON): `endpoint_answer`."""
    cut_off: bool = False
    """The CLI reported no result (a timeout, a stop at an API error, an exit without one): the
    tokens are those its transcript shows, and its cost is not known (the scheduler estimates it)."""

    def to_json(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["permission_denials"] = list(self.permission_denials)
        return data


class SessionRunner(Protocol):
    """The seam between the scheduler and Claude Code: run one session, return its result.

    Asynchronous, so that one process may run several sessions in a task group; the scheduler's
    synchronous loop runs each with `anyio.run(runner.run, request)`."""

    async def run(self, request: SessionRequest) -> SessionResult: ...


@runtime_checkable
class Stoppable(Protocol):
    """A runner whose sessions can be stopped from another thread (a Ctrl-C of the run): `stop()`
    stops every session it is running, and their `run` returns. An engine's workers run them
    elsewhere; in this process the CLIs are stopped by their TMPDIR too, but a CLI stopped while it
    starts leaves the SDK waiting 60 s for its first answer."""

    def stop(self) -> None: ...


@runtime_checkable
class Reattachable(Protocol):
    """A runner whose sessions outlive the scheduler (an engine's workers): after a kill of the
    run, a session in flight may still be running there, or have ended with a result. `holds`
    says so for one session's try; `run` with the same request then awaits it (or takes its
    result) instead of starting it again."""

    def holds(self, number: int, attempt: int) -> bool: ...


def reattachable(runner: SessionRunner) -> Reattachable | None:
    """The runner whose sessions outlive the scheduler: `runner`, or the one it wraps (`wrapped`,
    as a runner that checks the sandbox first does); None when sessions run in this process."""
    here: object = runner
    while here is not None:
        if isinstance(here, Reattachable):
            return here
        here = getattr(here, "wrapped", None)
    return None


def held_by_engine(runner: SessionRunner, flight: InFlight) -> bool:
    """Whether a killed run's session in flight is one to await rather than run again: it was
    running (not cut short), its start is on record (its branches, its folder's copies), and the
    engine behind `runner` holds it (running, or ended with a result)."""
    engine = reattachable(runner)
    return (
        engine is not None
        and flight.why is None
        and flight.heads_gone is not None
        and (Path(flight.log_dir) / SessionFolder.PRE).is_dir()
        and engine.holds(flight.number, flight.attempt)
    )


def policy_refusal(
    request: SessionRequest, tool: str, tool_input: dict[str, Any], cwd: Path | None = None
) -> str | None:
    """Why the scheduler's policy refuses a tool call (a tool outside the role's list, the file
    policy, or the Bash policy in the command's working directory), or None when it may run.
    Reads the repository's branches."""
    outside = toolset.tool_refusal(request.plan.role, tool, browser=request.browser is not None)
    if outside is not None:
        return outside
    if tool != "Bash":
        return file_tool_decision(request.plan.role, request.cwd, tool, tool_input)
    branch, branches = gitops.branch_view(request.cwd)
    allowed, refused = git_rules(request.plan.settings)
    context = BashContext(
        role=request.plan.role,
        work=request.plan.work,
        project=request.cwd,
        cwd=cwd or request.cwd,
        branch=branch,
        branches=branches,
        allowed_git=allowed,
        refused_git=refused,
    )
    return bash_refusal(str(tool_input.get("command", "")), context)


def tools_of(request: SessionRequest) -> HandoffTools:
    """The session's hand-off tools (served in this process to the CLI, or called by the robot)."""
    plan = request.plan
    cited = browsing.evidence_problems(request.browser.folder) if request.browser is not None else None
    return HandoffTools(
        request.records,
        plan.role,
        plan.number,
        plan.work,
        plan.open_review,
        plan.brief,
        workdir=request.cwd,
        evidence=cited,
    )


_VETTED = {
    "hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "allow",
        "permissionDecisionReason": "scheduler policy: vetted; runs in the OS sandbox",
    }
}
"""The hook's answer to a sandboxed Bash command its policy vetted. The CLI still applies its deny
rules and still sandboxes the command; what it no longer does is refuse, in headless mode, the
commands it would have asked about (a `for` loop, `find -delete`, a path in `$TMPDIR`)."""


def _refused(reason: str) -> dict[str, Any]:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": f"scheduler policy: {reason}",
        }
    }


def _policy_hook(request: SessionRequest, refusals: dict[str, str]) -> Callable[..., Any]:
    """The PreToolUse hook: runs in this process before the CLI's own rules; a crash blocks the call.
    Each refusal's reason is kept in `refusals` by tool_use_id, for the audit trail."""

    async def hook(input_data: dict[str, Any], tool_use_id: str | None, context: Any) -> dict[str, Any]:
        tool_input = input_data.get("tool_input") or {}
        tool = str(input_data.get("tool_name") or "")
        cwd = input_data.get("cwd")
        reason = policy_refusal(request, tool, tool_input, Path(cwd) if cwd else None)
        if reason is None:
            return _VETTED if tool == "Bash" and request.plan.sandboxed else {}
        refusals[str(tool_use_id)] = reason
        return _refused(reason)

    return hook


def build_options(
    request: SessionRequest,
    stderr: Callable[[str], None],
    env: dict[str, str] | None = None,
    refusals: dict[str, str] | None = None,
) -> ClaudeAgentOptions:
    """The CLI options of a session, as data (no process is started here)."""
    plan = request.plan
    refusals = {} if refusals is None else refusals
    servers: dict[str, Any] = {SERVER: mcp_server(tools_of(request))}
    hooks: dict[Any, list[HookMatcher]] = {
        "PreToolUse": [
            # every tool (None matches all): a tool the CLI offers beside the role's list is refused
            HookMatcher(matcher=None, hooks=[_policy_hook(request, refusals)], on_failure="block"),
        ]
    }
    if request.browser is not None:
        servers[evidence.SERVER] = {"type": "http", "url": request.browser.url}
        before, after = browsing.hooks(request.browser, refusals)
        matcher = f"{evidence.TOOL_PREFIX}.*"
        hooks["PreToolUse"].append(HookMatcher(matcher=matcher, hooks=[before], on_failure="block"))
        hooks["PostToolUse"] = [HookMatcher(matcher=matcher, hooks=[after])]
    return ClaudeAgentOptions(
        model=plan.model,
        cwd=str(request.cwd),
        system_prompt={"type": "preset", "preset": "claude_code", "append": plan.system_prompt},
        settings=str(request.settings_path),
        setting_sources=[],
        permission_mode=PERMISSION_MODE,
        max_turns=plan.max_turns,
        max_budget_usd=plan.max_budget_usd,
        env={**(env or {}), **toolset.SESSION_ENV},
        stderr=stderr,
        tools=list(toolset.base_tools(plan.role)),
        disallowed_tools=list(toolset.OFF_TOOLS),
        skills=[],
        agents={},
        mcp_servers=servers,
        strict_mcp_config=True,
        hooks=hooks,
    )


def run_session(
    runner: SessionRunner,
    request: SessionRequest,
    browser: browsing.BrowserPlan | None,
    say: Callable[[str], None],
) -> SessionResult:
    """Run one session (the one bridge from the loop to the async runner); a web REVIEW's app and
    browser started around it. When they do not start the session does not run: its result says
    why (`browser_failed`), which counts as the browser's fault, never the agent's."""
    if browser is None:
        return anyio.run(runner.run, request)
    started = time.monotonic()
    try:
        with browser.opened() as access:
            say(
                f"  browser: the app of {browser.tip[:10]} and a browser for the REVIEW, ready in "
                f"{time.monotonic() - started:.1f} s (evidence in {evidence.EVIDENCE_DIR}/)"
            )
            return anyio.run(runner.run, replace(request, browser=access))
    except browsing.NoBrowser as exc:
        say(f"  browser: did not start: {exc}")
        return SessionResult(error=str(exc), browser_failed=str(exc))


def describe_tool_call(block: ToolUseBlock, project: Path) -> str:
    """One line for a tool call, paths relative to the project (the console cuts it to width)."""
    data = block.input
    detail = data.get("command") or data.get("file_path") or data.get("pattern") or ""
    if block.name.startswith("mcp__"):  # a hand-off tool: its name and its main argument
        detail = " ".join(str(data[k]) for k in ("verdict", "outcome", "feature_id") if k in data)
        return f"{block.name.removeprefix('mcp__').replace('__', '.')}{': ' + detail if detail else ''}"
    detail = " ".join(str(detail).split()).replace(f"{project}/", "").replace(str(project), ".")
    return f"{block.name}: {detail}"


def guarded_cli(folder: Path) -> Path | None:
    """A wrapper around the bundled CLI that dies with this process, even on SIGKILL (Linux).

    Without it, a scheduler killed mid-session would leave its CLI running beside the
    resumed one. Returns None where `setpriv` or the bundled CLI is missing.
    """
    bundled = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    setpriv = shutil.which("setpriv")
    if sys.platform != "linux" or setpriv is None or not bundled.is_file():
        return None
    wrapper = folder / "claude-guarded"
    wrapper.write_text(f'#!/bin/sh\nexec {setpriv} --pdeathsig KILL -- "{bundled}" "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    return wrapper


class ClaudeSessionRunner:
    """Runs a session through claude-agent-sdk and its bundled Claude Code CLI.

    Side effects: starts the CLI process (which runs the agent's tools in the project), and
    writes the session's transcript, stderr and result into its log folder. `env` is merged
    over the inherited environment of the CLI (the offline demo points it at the scripted
    model); `echo` receives one line per tool call and retry.
    """

    def __init__(
        self,
        echo: Callable[[str], None] = print,
        *,
        env: dict[str, str] | None = None,
        cli_path: Path | None = None,
    ) -> None:
        self._echo = echo
        self._env = dict(env or {})
        self._cli_path = cli_path
        self._stopping = threading.Event()

    def stop(self) -> None:
        """Stop every session this runner runs, within a second (`Stoppable`); sessions started
        afterwards stop at once."""
        self._stopping.set()

    def _say(self, request: SessionRequest, line: str) -> None:
        """One console line of the session (prefixed with its lane when it runs in one of several)."""
        self._echo(f"{request.prefix}{line.lstrip()}" if request.prefix else line)

    async def run(self, request: SessionRequest) -> SessionResult:
        request.log_dir.mkdir(parents=True, exist_ok=True)
        stderr_lines: list[str] = []
        values: dict[str, Any] = {
            "policy_refusals": {},
            "base_url": self._env.get("ANTHROPIC_BASE_URL") or os.environ.get("ANTHROPIC_BASE_URL") or None,
        }
        counter = [0]
        started, since = time.monotonic(), time.time()
        last = [started]
        idle, stopped = anyio.CancelScope(), anyio.CancelScope()
        with (SessionFolder(request.log_dir).transcript).open("w", encoding="utf-8") as transcript:
            with anyio.move_on_after(request.plan.timeout_s) as deadline:
                async with anyio.create_task_group() as watch:
                    watch.start_soon(
                        _watchdog, idle, last, request.plan.idle_timeout_s, stopped, self._stopping
                    )
                    with idle, stopped:
                        try:
                            options = build_options(
                                request, stderr_lines.append, self._env, values["policy_refusals"]
                            )
                            options.cli_path = self._cli_path or guarded_cli(request.log_dir)
                            stream = query(prompt=request.plan.kickoff, options=options)
                            try:
                                with anyio.CancelScope() as after_result:
                                    async for message in stream:
                                        last[0] = time.monotonic()
                                        crashpoints.reached("cli_message")
                                        transcript.write(
                                            json.dumps({"type": type(message).__name__, **_plain(message)})
                                            + "\n"
                                        )
                                        transcript.flush()  # a killed scheduler's next run reads its tokens from it
                                        self._observe(request, message, values, counter)
                                        if isinstance(message, ResultMessage):  # the session is over: the CLI
                                            # gets a moment to exit, then whatever it left running is stopped
                                            after_result.deadline = anyio.current_time() + CLI_EXIT_GRACE_S
                            finally:
                                left = await _close(stream, request.cwd, since)
                                if left:
                                    self._say(
                                        request,
                                        f"  [{request.plan.role.value}] stopped {plural(len(left), 'process', 'processes')} left running after the result (pids {', '.join(map(str, left))})",
                                    )
                        except _StopAtOnce:
                            cause = (
                                "which retrying cannot fix"
                                if values["api_error_status"] in UNRETRYABLE_STATUSES
                                else "past the outage allowance (--max-outage-minutes)"
                            )
                            self._say(
                                request,
                                f"  [{request.plan.role.value}] stopped: the API answered {values['api_error_status'] or 'nothing'}, {cause}",
                            )
                        except ProcessError as exc:
                            tail = _tail(stderr_lines) or str(exc)
                            values.setdefault("error", f"Claude Code exited with {exc.exit_code}: {tail}")
                        except ClaudeSDKError as exc:
                            values.setdefault("error", f"{type(exc).__name__}: {exc}")
                        except Exception as exc:  # the SDK's own: a CLI that never answered its start
                            if not str(exc).startswith(SDK_START_TIMEOUT):
                                raise
                            values.setdefault(
                                "error",
                                f"Claude Code did not answer its start-up request ({exc}): it exited or hung "
                                f"while starting; {_tail(stderr_lines) or 'it wrote nothing on stderr'}",
                            )
                    watch.cancel_scope.cancel()
            plan = request.plan
            if stopped.cancelled_caught:
                values.update(error="stopped with its run", is_error=True)
            for cut, reason, why, line in (
                (
                    idle.cancelled_caught,
                    "idle_timeout",
                    f"Claude Code sent nothing for {plan.idle_timeout_s:.0f} s and was stopped (--idle-timeout)",
                    f"idle for {plan.idle_timeout_s:.0f} s",
                ),
                (
                    deadline.cancelled_caught,
                    "session_timeout",
                    f"the session ran out of its {plan.timeout_s:.0f} s and was stopped",
                    "session timeout",
                ),
            ):
                if cut:
                    values.update(error=why, terminal_reason=reason, is_error=True)
                    self._say(request, f"  [{plan.role.value}] stopped: {line}")
        (SessionFolder(request.log_dir).cli_stderr).write_text("\n".join(stderr_lines), encoding="utf-8")
        if "subtype" not in values:  # no result: what the model calls used, as the transcript shows it
            values.update(tokens_in_transcript(SessionFolder(request.log_dir).transcript), cut_off=True)
        result_text = str(values.pop("result_text", None) or "")
        if values.get("is_error", True):  # an agent's own words never count as a login failure
            text = " ".join([str(values.get("error") or ""), result_text, _tail(stderr_lines)]).lower()
            values["not_logged_in"] = any(hint in text for hint in NOT_LOGGED_IN_HINTS)
            if values["base_url"] and (
                values.get("api_error_status") in NOT_API_STATUSES or any(h in text for h in NOT_API_HINTS)
            ):
                values["not_an_api"] = await anyio.to_thread.run_sync(endpoint_answer, values["base_url"])
        ended = time.monotonic()
        retrying_since = values.pop("retrying_since", None)
        retrying = (
            ended - retrying_since if retrying_since is not None and values.get("is_error", True) else 0.0
        )
        return SessionResult(tool_calls=counter[0], duration_s=ended - started, retrying_s=retrying, **values)

    def _observe(
        self, request: SessionRequest, message: Any, values: dict[str, Any], counter: list[int]
    ) -> None:
        """Print tool calls and retries; keep what the result record needs."""
        role = request.plan.role.value
        if isinstance(message, AssistantMessage):
            for block in message.content:
                if isinstance(block, ToolUseBlock):
                    counter[0] += 1
                    self._say(request, f"  [{role}] {describe_tool_call(block, request.cwd)}")
        elif isinstance(message, UserMessage) and SANDBOX_FAILED in str(message.content):
            values["sandbox_failed"] = True
        elif isinstance(message, RateLimitEvent) and message.rate_limit_info.status == "rejected":
            values["rate_limit_resets_at"] = message.rate_limit_info.resets_at or int(time.time())
        elif isinstance(message, SystemMessage) and message.subtype == "init" and request.browser:
            status = next(
                (
                    s.get("status")
                    for s in message.data.get("mcp_servers") or []
                    if s.get("name") == evidence.SERVER
                ),
                "not listed",
            )
            if status != "connected":  # a failed MCP server does not fail the session: this says it
                values["browser_failed"] = f"the browser's MCP server did not connect (status: {status})"
                self._say(request, f"  [{role}] {values['browser_failed']}")
        elif isinstance(message, SystemMessage) and message.subtype == "api_retry":
            data = message.data
            now = time.monotonic()
            values.setdefault("retrying_since", now)
            allowance = request.plan.outage_allowance_s
            if data.get("error_status") in UNRETRYABLE_STATUSES or (
                allowance is not None and now - values["retrying_since"] > allowance
            ):
                # retrying cannot fix it, or the outage allowance is spent: the CLI would retry on for minutes
                values.update(
                    api_error_status=data.get("error_status"),
                    error=str(data.get("error") or ""),
                    is_error=True,
                    terminal_reason="api_error",
                )
                raise _StopAtOnce
            status = data.get("error_status") or "no status"
            self._say(
                request,
                f"  [{role}] API retry {data.get('attempt')}/{data.get('max_retries')}: "
                f"{data.get('error', '')} ({status}), next in {data.get('retry_delay_ms')} ms",
            )
        elif isinstance(message, ResultMessage):
            values.update(_from_result(message))


class _StopAtOnce(Exception):
    """The session cannot succeed (the API refused credentials, billing or the model): stop it now."""


CLI_EXIT_GRACE_S = 1.0
"""How long the CLI gets to exit by itself once its result is in, before what it left is stopped."""
CLOSE_WAIT_S = 20.0
"""How long closing the SDK's stream may take: its transport waits at most about 15 s for the CLI to
exit (stdin closed, then SIGTERM, then SIGKILL), and must not be cut short, or the CLI is reaped
after the event loop has closed."""


async def _close(stream: Any, folder: Path, since: float) -> list[int]:
    """End the CLI's stream and stop what is left in the project: a `run_in_background` task
    keeps the headless CLI alive after its result (the caller waits CLI_EXIT_GRACE_S for it to
    exit), and a CLI that exited may leave such tasks behind. The pids stopped (none when the CLI
    ended cleanly)."""
    stopped = await anyio.to_thread.run_sync(processes.stop_left_in, folder, since)
    with anyio.move_on_after(CLOSE_WAIT_S):
        await stream.aclose()
    gc.collect()  # the SDK's process transports, now unreachable, are finalized while this loop still runs:
    await anyio.sleep(0)  # finalized after it closes, each printed "Event loop is closed" on stderr
    return stopped


async def _watchdog(
    idle: anyio.CancelScope,
    last: list[float],
    limit_s: float,
    stopped: anyio.CancelScope,
    stopping: threading.Event,
) -> None:
    """Cancel `idle` once nothing has arrived for `limit_s` (`last[0]`: when something last did),
    `stopped` once the run stops (`stopping`, checked every `STOP_POLL_S`)."""
    while True:
        if stopping.is_set():
            stopped.cancel()
            return
        if time.monotonic() - last[0] >= limit_s:
            idle.cancel()
            return
        await anyio.sleep(min(limit_s / 4, STOP_POLL_S))


def _from_result(message: ResultMessage) -> dict[str, Any]:
    usage = message.usage or {}
    return {
        "subtype": message.subtype,
        "is_error": message.is_error,
        "cost_usd": float(message.total_cost_usd or 0.0),
        **tokens_of(usage),
        "num_turns": message.num_turns,
        "session_id": message.session_id,
        "permission_denials": tuple(message.permission_denials or ()),
        "api_error_status": message.api_error_status,
        "terminal_reason": message.terminal_reason,
        "result_text": message.result,
    }


def tokens_of(usage: dict[str, Any]) -> dict[str, int]:
    """The four token counts of an API usage record, as a receipt names them."""
    return {
        "input_tokens": int(usage.get("input_tokens") or 0),
        "cache_read_tokens": int(usage.get("cache_read_input_tokens") or 0),
        "cache_write_tokens": int(usage.get("cache_creation_input_tokens") or 0),
        "output_tokens": int(usage.get("output_tokens") or 0),
    }


NOT_API_STATUSES = frozenset({404, 405, 501})
"""Answers a web server gives to a POST it does not serve (the Messages API answers 404 only to an unknown model)."""
NOT_API_HINTS = ("malformed response", "html")
"""What the CLI says when an answer was not the API's JSON or stream (a page, an empty body)."""


def endpoint_answer(base_url: str, timeout_s: float = 5.0) -> str | None:
    """What `base_url` answers that no Anthropic API does, or None when it looks like one (or
    cannot be reached). Asked with an empty Messages request, without credentials: any
    Anthropic-compatible API answers that with a JSON error object; a web server that is not one
    answers a page."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        base_url.rstrip("/") + "/v1/messages",
        data=b"{}",
        headers={"content-type": "application/json", "anthropic-version": "2023-06-01"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            status, kind, body = response.status, response.headers.get_content_type(), response.read(65536)
    except urllib.error.HTTPError as exc:
        status, kind, body = exc.code, exc.headers.get_content_type(), exc.read(65536)
    except (OSError, ValueError):
        return None
    try:
        if isinstance(json.loads(body), dict):
            return None
    except ValueError:
        pass
    page = (
        "an HTML page"
        if b"<html" in body[:2048].lower() or kind == "text/html"
        else f"{kind}, not JSON"
        if body.strip()
        else "an empty body"
    )
    return f"HTTP {status} with {page}"


def tokens_in_transcript(path: Path) -> dict[str, int]:
    """What the model calls of a session cut off before its result used, from its transcript
    (each model message once: the CLI repeats a message's usage on each of its blocks)."""
    seen: dict[str, dict[str, int]] = {}
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    for n, line in enumerate(lines):
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if (
            isinstance(message, dict)
            and message.get("type") == "AssistantMessage"
            and isinstance(message.get("usage"), dict)
        ):
            seen[str(message.get("message_id") or n)] = tokens_of(message["usage"])
    return {key: sum(t[key] for t in seen.values()) for key in tokens_of({})}


def _plain(message: Any) -> dict[str, Any]:
    try:
        return dict(
            json.loads(json.dumps(message.__dict__, default=lambda o: getattr(o, "__dict__", str(o))))
        )
    except (TypeError, ValueError):
        return {"repr": repr(message)[:2000]}


def _tail(lines: list[str], n: int = 5) -> str:
    return " | ".join(line.strip() for line in lines[-n:] if line.strip())
