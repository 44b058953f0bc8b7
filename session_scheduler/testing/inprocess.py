"""A SessionRunner that plays the robot agent in-process: no CLI, no HTTP, same behaviour.

It executes the robot's tool calls itself (Bash in a subprocess, Write to disk, with the
scheduler's file-path policy applied) so the scheduler's loop can be tested quickly.
The real CLI path is covered by the scripted model server and the end-to-end tests.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import anyio

from scripted_model.protocol import ToolCall
from scripted_model.robot import Ctx, next_step
from scripted_model.scenario import Scenario
from session_scheduler.core.clock import Clock, SystemClock
from session_scheduler.core.evidence import TOOL_PREFIX
from session_scheduler.guard import mcp_client
from session_scheduler.guard.security import bash_decision
from session_scheduler.run.agent import SessionRequest, SessionResult, policy_refusal, tools_of
from session_scheduler.run.browsing import Ledger, refusal
from session_scheduler.store.handoff_tools import PREFIX, HandoffTools

MAX_BATCHES = 50
POLICY = "scheduler policy: "


class InProcessRobotRunner:
    """Runs the robot's script for the request's role directly on the project."""

    def __init__(self, scenario: Scenario | None = None, clock: Clock | None = None) -> None:
        self.scenario = scenario or Scenario()
        self.clock = clock or SystemClock()
        self.requests: list[SessionRequest] = []

    async def run(self, request: SessionRequest) -> SessionResult:
        """The robot's session, in a worker thread: its file and git work never blocks the event
        loop, so sessions of several lanes can run side by side in one process."""
        return await anyio.to_thread.run_sync(self._run, request)

    def _run(self, request: SessionRequest) -> SessionResult:
        self.requests.append(request)
        started = self.clock.monotonic()
        ctx = Ctx(request.plan.number, self.scenario)
        tools = tools_of(request)
        results: list[str] = []
        denials: list[dict[str, object]] = []
        refusals: dict[str, str] = {}
        browser = Browser(request) if request.browser is not None else None
        try:
            turns = self._play(request, ctx, tools, results, denials, refusals, browser)
        finally:
            if browser is not None:
                browser.close()
        return SessionResult(
            subtype="success",
            is_error=False,
            num_turns=turns,
            tool_calls=len(results),
            session_id=f"inprocess-{request.plan.number}",
            permission_denials=tuple(denials),
            policy_refusals=refusals,
            terminal_reason="completed",
            duration_s=self.clock.monotonic() - started,
        )

    def _play(
        self,
        request: SessionRequest,
        ctx: Ctx,
        tools: HandoffTools,
        results: list[str],
        denials: list[dict[str, object]],
        refusals: dict[str, str],
        browser: Browser | None,
    ) -> int:
        """The robot's batches, each call answered, until it ends: the number of turns."""
        turns = 1
        for _ in range(MAX_BATCHES):
            step = next_step(request.plan.role.value, ctx, results)
            self.clock.sleep(self.scenario.turn_latency_s)  # the model's time to answer
            if isinstance(step, str):
                break
            turns += 1
            for call in step:
                if call.name.startswith(PREFIX):  # a refused call is an error answer, not a denial
                    output, denied = tools.call(call.name, call.input)[0], False
                elif call.name.startswith(TOOL_PREFIX):
                    output, denied = (
                        browser.call(call.name, call.input)
                        if browser
                        else (f"unknown tool {call.name}", True)
                    )
                else:
                    output, denied = self._execute(request, call)
                if denied:
                    tool_use_id = f"call-{len(results)}"
                    denials.append(
                        {"tool_name": call.name, "tool_input": call.input, "tool_use_id": tool_use_id}
                    )
                    if output.startswith(POLICY):
                        refusals[tool_use_id] = output.removeprefix(POLICY)
                results.append(output)
        return turns

    @staticmethod
    def _execute(request: SessionRequest, call: ToolCall) -> tuple[str, bool]:
        cwd = Path(request.cwd)
        if call.name == "Bash":
            command = str(call.input["command"])
            if bash_decision(request.plan.settings, command) == "deny":
                return "Permission to use Bash with this command has been denied.", True
            reason = policy_refusal(request, "Bash", call.input)
            if reason is not None:
                return POLICY + reason, True
            proc = subprocess.run(
                ["bash", "-c", command],
                cwd=cwd,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=300,
                check=False,
            )
            output = proc.stdout + proc.stderr
            if proc.returncode != 0:  # the CLI's Bash tool reports failures this way
                output = f"Exit code {proc.returncode}\n{output}"
            return output, False
        if call.name in ("Write", "Edit"):
            target = str(call.input["file_path"])
            reason = policy_refusal(request, call.name, call.input)
            if reason is not None:
                return POLICY + reason, True
            path = cwd / target
            if call.name == "Write":
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(str(call.input["content"]), encoding="utf-8")
                return f"File created successfully at: {path}", False
            text, old = path.read_text(encoding="utf-8"), str(call.input["old_string"])
            if text.count(old) != 1:
                return "<tool_use_error>old_string must occur exactly once</tool_use_error>", False
            path.write_text(text.replace(old, str(call.input["new_string"])), encoding="utf-8")
            return f"The file {path} has been updated.", False
        if call.name == "Read":
            reason = policy_refusal(request, call.name, call.input)
            if reason is not None:
                return POLICY + reason, True
            try:
                text = (cwd / str(call.input["file_path"])).read_text(encoding="utf-8")
            except OSError as exc:
                return f"<tool_use_error>{exc}</tool_use_error>", False
            return "\n".join(f"{n:6}\t{line}" for n, line in enumerate(text.splitlines(), 1)), False
        return f"unknown tool {call.name}", True


class Browser:
    """The session's browser as the CLI serves it: one MCP session (one page) kept for the whole
    session, the scheduler's policy before each call and its ledger after."""

    def __init__(self, request: SessionRequest) -> None:
        assert request.browser is not None
        self.access = request.browser
        self.ledger = Ledger(self.access.folder)
        self.held = mcp_client.Held(self.access.url)

    def call(self, name: str, tool_input: dict[str, Any]) -> tuple[str, bool]:
        reason = refusal(name, tool_input, self.access.app_origin)
        if reason is not None:
            return POLICY + reason, True
        result = self.held.call(name.removeprefix(TOOL_PREFIX), tool_input)
        shown = self.ledger.after_call(name, tool_input, mcp_client.blocks(result), bool(result.is_error))
        return "\n".join(str(b["text"]) if b["type"] == "text" else "[image]" for b in shown), False

    def close(self) -> None:
        self.held.close()
