"""Run ONE fresh Claude Code session and report what happened, behind a small seam."""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

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
    query,
)

from config import SessionType
from security import PERMISSION_MODE, path_decision

NOT_LOGGED_IN_HINTS = ("not logged in", "please run /login", "invalid api key", "authentication_error")
LOGIN_HELP = (
    "Claude Code is not logged in: run `claude login` (subscription) or set ANTHROPIC_API_KEY, "
    "or use --offline-demo to run against the scripted model"
)


@dataclass(frozen=True)
class SessionRequest:
    """Everything one session needs; built by the scheduler, run by a SessionRunner."""

    session_type: SessionType
    session_number: int
    model: str
    system_append: str
    prompt: str
    cwd: Path
    settings_path: Path
    max_turns: int
    log_dir: Path
    timeout_s: float | None = None
    """Wall-clock limit of the session; the CLI is stopped when it is reached."""
    max_budget_usd: float | None = None
    """What is left of the project's budget: the CLI ends the session when it is spent."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment for the CLI, merged over the inherited one (empty in normal runs)."""


@dataclass(frozen=True)
class SessionResult:
    """What the CLI reported; the scheduler still verifies every claim against files and git."""

    subtype: str = "error_during_execution"
    is_error: bool = True
    cost_usd: float = 0.0
    input_tokens: int = 0
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
    tool_calls: int = 0
    duration_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["permission_denials"] = list(self.permission_denials)
        return data


class SessionRunner(Protocol):
    """The seam between the scheduler and Claude Code: run one session, return its result."""

    def run(self, request: SessionRequest) -> SessionResult: ...


def _file_policy_hook(request: SessionRequest) -> Callable[..., Any]:
    async def hook(input_data: dict[str, Any], tool_use_id: str | None, context: Any) -> dict[str, Any]:
        tool_input = input_data.get("tool_input") or {}
        target = tool_input.get("file_path") or tool_input.get("notebook_path")
        if not isinstance(target, str):
            return {}
        reason = path_decision(request.session_type, request.cwd, target)
        if reason is None:
            return {}
        return {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": f"scheduler policy: {reason}",
            }
        }

    return hook


def build_options(request: SessionRequest, stderr: Callable[[str], None]) -> ClaudeAgentOptions:
    """The CLI options of a session, as data (no process is started here)."""
    return ClaudeAgentOptions(
        model=request.model,
        cwd=str(request.cwd),
        system_prompt={"type": "preset", "preset": "claude_code", "append": request.system_append},
        settings=str(request.settings_path),
        setting_sources=[],
        permission_mode=PERMISSION_MODE,
        max_turns=request.max_turns,
        max_budget_usd=request.max_budget_usd,
        env=dict(request.env),
        stderr=stderr,
        hooks={
            "PreToolUse": [
                HookMatcher(
                    matcher="Write|Edit|MultiEdit|NotebookEdit",
                    hooks=[_file_policy_hook(request)],
                    on_failure="block",
                )
            ]
        },
    )


def describe_tool_call(block: ToolUseBlock) -> str:
    """One concise line for a tool call."""
    data = block.input
    detail = data.get("command") or data.get("file_path") or data.get("pattern") or ""
    detail = " ".join(str(detail).split())
    return f"{block.name}: {detail[:100]}"


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
    """Runs a session through claude-agent-sdk and its bundled Claude Code CLI."""

    def __init__(self, echo: Callable[[str], None] = print, cli_path: Path | None = None) -> None:
        self._echo = echo
        self._cli_path = cli_path

    def run(self, request: SessionRequest) -> SessionResult:
        return anyio.run(self._run, request)

    async def _run(self, request: SessionRequest) -> SessionResult:
        request.log_dir.mkdir(parents=True, exist_ok=True)
        stderr_lines: list[str] = []
        values: dict[str, Any] = {}
        counter = [0]
        started = time.monotonic()
        with (request.log_dir / "transcript.jsonl").open("w", encoding="utf-8") as transcript:
            with anyio.move_on_after(request.timeout_s) as deadline:
                try:
                    options = build_options(request, stderr_lines.append)
                    options.cli_path = self._cli_path or guarded_cli(request.log_dir)
                    async for message in query(prompt=request.prompt, options=options):
                        transcript.write(
                            json.dumps({"type": type(message).__name__, **_plain(message)}) + "\n"
                        )
                        self._observe(request, message, values, counter)
                except ProcessError as exc:
                    tail = _tail(stderr_lines) or str(exc)
                    values.setdefault("error", f"Claude Code exited with {exc.exit_code}: {tail}")
                except ClaudeSDKError as exc:
                    values.setdefault("error", f"{type(exc).__name__}: {exc}")
            if deadline.cancelled_caught:
                values.update(
                    error=f"the session ran out of its {request.timeout_s:.0f} s and was stopped",
                    terminal_reason="session_timeout",
                    is_error=True,
                )
                self._echo(f"  [{request.session_type.value}] stopped: session timeout")
        (request.log_dir / "cli_stderr.log").write_text("\n".join(stderr_lines), encoding="utf-8")
        result_text = str(values.pop("result_text", None) or "")
        if values.get("is_error", True):  # an agent's own words never count as a login failure
            text = " ".join([str(values.get("error") or ""), result_text, _tail(stderr_lines)]).lower()
            values["not_logged_in"] = any(hint in text for hint in NOT_LOGGED_IN_HINTS)
        return SessionResult(tool_calls=counter[0], duration_s=time.monotonic() - started, **values)

    def _observe(
        self, request: SessionRequest, message: Any, values: dict[str, Any], counter: list[int]
    ) -> None:
        """Print tool calls and retries; keep what the result record needs."""
        role = request.session_type.value
        if isinstance(message, AssistantMessage):
            for block in message.content:
                if isinstance(block, ToolUseBlock):
                    counter[0] += 1
                    self._echo(f"  [{role}] {describe_tool_call(block)}")
        elif isinstance(message, RateLimitEvent) and message.rate_limit_info.status == "rejected":
            values["rate_limit_resets_at"] = message.rate_limit_info.resets_at or int(time.time())
        elif isinstance(message, SystemMessage) and message.subtype == "api_retry":
            data = message.data
            status = data.get("error_status") or "no status"
            self._echo(
                f"  [{role}] API retry {data.get('attempt')}/{data.get('max_retries')}: "
                f"{data.get('error', '')} ({status}), next in {data.get('retry_delay_ms')} ms"
            )
        elif isinstance(message, ResultMessage):
            values.update(_from_result(message))


def _from_result(message: ResultMessage) -> dict[str, Any]:
    usage = message.usage or {}
    return {
        "subtype": message.subtype,
        "is_error": message.is_error,
        "cost_usd": float(message.total_cost_usd or 0.0),
        "input_tokens": int(usage.get("input_tokens", 0))
        + int(usage.get("cache_read_input_tokens", 0))
        + int(usage.get("cache_creation_input_tokens", 0)),
        "output_tokens": int(usage.get("output_tokens", 0)),
        "num_turns": message.num_turns,
        "session_id": message.session_id,
        "permission_denials": tuple(message.permission_denials or ()),
        "api_error_status": message.api_error_status,
        "terminal_reason": message.terminal_reason,
        "result_text": message.result,
    }


def _plain(message: Any) -> dict[str, Any]:
    try:
        return dict(
            json.loads(json.dumps(message.__dict__, default=lambda o: getattr(o, "__dict__", str(o))))
        )
    except (TypeError, ValueError):
        return {"repr": repr(message)[:2000]}


def _tail(lines: list[str], n: int = 5) -> str:
    return " | ".join(line.strip() for line in lines[-n:] if line.strip())
