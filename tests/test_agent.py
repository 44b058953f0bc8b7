"""The session runner: options built as data, and the real CLI's not-logged-in answer."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from claude_agent_sdk import ToolUseBlock
from click.testing import CliRunner
from helpers import cli_seams, request_for, state_for

from scripted_model.hermetic import sdk_env
from session_scheduler.core.config import AgentConfig, SessionType
from session_scheduler.guard import processes, toolset
from session_scheduler.run import agent as agent_module
from session_scheduler.run.agent import (
    ClaudeSessionRunner,
    SessionRequest,
    SessionResult,
    build_options,
    describe_tool_call,
)
from session_scheduler.run.classify import LOGIN_HELP
from session_scheduler.view.cli import main


def request(tmp_path: Path) -> SessionRequest:
    return request_for(tmp_path, state_for(SessionType.REVIEW), AgentConfig(max_turns=7))


def test_options_carry_the_role(tmp_path: Path) -> None:
    req = request(tmp_path)
    options = build_options(req, stderr=lambda _: None, env={"X": "1"})
    assert options.model == "opus" and options.max_turns == 7 and options.cwd == str(tmp_path)
    assert options.system_prompt == {
        "type": "preset",
        "preset": "claude_code",
        "append": req.plan.system_prompt,
    }
    assert "# YOUR ROLE - REVIEW AGENT" in req.plan.system_prompt
    assert "# Scope of this session: REVIEW" in req.plan.system_prompt
    assert options.setting_sources == [] and options.settings == str(tmp_path / ".claude_settings.json")
    assert options.permission_mode == "dontAsk" and options.env == {"X": "1", **toolset.SESSION_ENV}
    assert options.hooks is not None and options.hooks["PreToolUse"][0].on_failure == "block"
    assert options.tools == ["Bash", "Read", "Glob", "Grep"], "REVIEW writes no file: no Edit, no Write"
    assert {"Agent", "Task", "Skill", "Workflow", "WebFetch", "WebSearch"} <= set(options.disallowed_tools)
    assert options.skills == [] and options.agents == {} and options.strict_mcp_config


@pytest.mark.anyio
@pytest.mark.parametrize("tool", ["Agent", "Task", "Skill", "Workflow", "WebSearch", "Write", "mcp__x__y"])
async def test_a_tool_outside_the_roles_list_is_refused_in_the_hook(tmp_path: Path, tool: str) -> None:
    refusals: dict[str, str] = {}
    hook = (
        build_options(request(tmp_path), stderr=lambda _: None, refusals=refusals)
        .hooks["PreToolUse"][0]
        .hooks[0]
    )  # type: ignore[index]
    denied = await hook({"tool_name": tool, "tool_input": {}}, "t1", None)
    assert denied["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert f"{tool} is not one of REVIEW's tools" in refusals["t1"]
    for allowed in ("Bash", "Read", "mcp__handoff__record_review"):
        answer = await hook({"tool_name": allowed, "tool_input": {"command": "ls"}}, "t2", None)
        assert answer.get("hookSpecificOutput", {}).get("permissionDecision") != "deny"


@pytest.mark.anyio
async def test_the_file_path_hook_denies_scheduler_files(tmp_path: Path) -> None:
    hook = build_options(request(tmp_path), stderr=lambda _: None).hooks["PreToolUse"][0].hooks[0]  # type: ignore[index]
    denied = await hook(
        {"tool_name": "Write", "tool_input": {"file_path": str(tmp_path / ".claude_settings.json")}},
        None,
        None,
    )
    assert denied["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert await hook({"tool_name": "Read", "tool_input": {"file_path": "reviews.json"}}, None, None) == {}


def test_tool_calls_print_as_one_line() -> None:
    block = ToolUseBlock(id="t", name="Bash", input={"command": "git status\n  --short"})
    assert describe_tool_call(block, Path("/p/app")) == "Bash: git status --short"


def test_tool_call_paths_are_relative_to_the_project() -> None:
    block = ToolUseBlock(id="t", name="Read", input={"file_path": "/p/app/src/todo.py"})
    assert describe_tool_call(block, Path("/p/app")) == "Read: src/todo.py"
    block = ToolUseBlock(id="t", name="Bash", input={"command": "cd /p/app && ls /p/app"})
    assert describe_tool_call(block, Path("/p/app")) == "Bash: cd . && ls ."


def test_not_logged_in_is_recognised_from_the_real_cli(tmp_path: Path) -> None:
    env = sdk_env("http://127.0.0.1:9", tmp_path / "home")  # loopback guard; the CLI stops before any call
    env["ANTHROPIC_API_KEY"] = ""
    result = anyio.run(ClaudeSessionRunner(echo=lambda _: None, env=env).run, request(tmp_path))
    assert result.not_logged_in and result.is_error


def test_not_logged_in_stops_the_run_with_one_line(spec_file: Path) -> None:
    class LoggedOut:
        async def run(self, req: SessionRequest) -> SessionResult:
            return SessionResult(error="Not logged in · Please run /login", not_logged_in=True)

    result = CliRunner().invoke(
        main,
        ["--project-dir", "app", "--spec", str(spec_file)],
        obj=cli_seams(lambda _: LoggedOut()),
    )
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1] == f"error: {LOGIN_HELP}"


def test_an_agent_talking_about_logins_is_not_a_login_failure(tmp_path: Path) -> None:
    from scripted_model.protocol import Reply, Turn
    from scripted_model.server import ScriptedModelServer

    class Talker:
        def respond(self, turn: Turn) -> Reply:
            return Reply(text="Done: users who are not logged in now get a 401 authentication_error.")

    with ScriptedModelServer(Talker()) as server:
        env = sdk_env(server.base_url, tmp_path / "home")
        result = anyio.run(ClaudeSessionRunner(echo=lambda _: None, env=env).run, request(tmp_path))
    assert not result.is_error and not result.not_logged_in


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="no bubblewrap")
def test_a_session_ends_at_its_result_and_stops_what_it_left_in_the_background(tmp_path: Path) -> None:
    """A `run_in_background` task keeps the headless CLI alive after its result: the runner stops
    it and the task at once, and the session counts by its result (not as an idle timeout)."""
    from scripted_model.protocol import Reply, ToolCall, Turn
    from scripted_model.server import ScriptedModelServer

    class Server:
        def respond(self, turn: Turn) -> Reply:
            if not turn.exchanges():
                call = ToolCall(
                    "Bash", {"command": "sleep 300", "description": "dev server", "run_in_background": True}
                )
                return Reply(text="", tool_calls=(call,))
            return Reply(text="Started the dev server; done.")

    req = request_for(tmp_path, state_for(SessionType.IMPLEMENT), AgentConfig(max_turns=5, idle_timeout_s=60))
    with ScriptedModelServer(Server()) as server:
        env = sdk_env(server.base_url, tmp_path / "home")
        started = time.monotonic()
        result = anyio.run(ClaudeSessionRunner(echo=lambda _: None, env=env).run, req)
        took = time.monotonic() - started
    assert result.subtype == "success" and not result.is_error and result.terminal_reason != "idle_timeout"
    assert took < 15, f"the session took {took:.0f} s: it waited for the background task"
    assert processes.left_in(tmp_path, time.time() - took - 1) == [], "the background task is stopped"


@pytest.mark.e2e
@pytest.mark.parametrize(("kind", "status"), [("http_401", 401), ("http_402", 402), ("http_404", 404)])
def test_what_retrying_cannot_fix_stops_the_session_at_the_first_answer(
    tmp_path: Path, kind: str, status: int
) -> None:
    """The CLI retries a rejected key, a billing error or an unknown model like an outage (ten
    tries, minutes): the runner stops at the first such answer, and classify names the fix."""
    from scripted_model.protocol import Fault, Turn
    from scripted_model.server import ScriptedModelServer
    from session_scheduler.run.classify import Standing, cut_short

    class Refusing:
        def respond(self, turn: Turn) -> Fault:
            return Fault(kind)  # type: ignore[arg-type]

    with ScriptedModelServer(Refusing()) as server:
        env = sdk_env(server.base_url, tmp_path / "home", max_retries=10)
        started = time.monotonic()
        result = anyio.run(ClaudeSessionRunner(echo=lambda _: None, env=env).run, request(tmp_path))
        took = time.monotonic() - started
    assert took < 15, f"{kind} took {took:.0f} s"
    assert result.is_error and result.api_error_status == status
    classified = cut_short(result, "opus")
    assert classified is not None and classified.standing is Standing.AUTH


def test_the_login_hint_names_the_bundled_cli_as_it_spells_the_command() -> None:
    from session_scheduler.run.classify import LOGIN_HELP

    assert "/_bundled/claude auth login" in LOGIN_HELP and "`claude login`" not in LOGIN_HELP
    cli = LOGIN_HELP.split("`")[1].removesuffix(" auth login")
    assert Path(cli).is_file(), "the hint names the bundled CLI's path, ready to paste"


@pytest.mark.e2e
def test_the_clis_own_retries_stop_when_the_outage_allowance_is_spent(tmp_path: Path) -> None:
    """An endpoint that always answers 529: the CLI would retry for minutes; the runner stops it
    once its retries pass what is left of --max-outage-minutes (here 6 s) and says how long it retried."""
    from scripted_model.protocol import Fault, Turn
    from scripted_model.server import ScriptedModelServer

    class Overloaded:
        def respond(self, turn: Turn) -> Fault:
            return Fault("http_529")

    req = request_for(tmp_path, state_for(SessionType.IMPLEMENT), AgentConfig(max_outage_minutes=0.1))
    with ScriptedModelServer(Overloaded()) as server:
        env = sdk_env(server.base_url, tmp_path / "home", max_retries=10)
        started = time.monotonic()
        result = anyio.run(ClaudeSessionRunner(echo=lambda _: None, env=env).run, req)
        took = time.monotonic() - started
    assert took < 25, f"the session took {took:.0f} s"
    assert result.api_error_status == 529 and result.terminal_reason == "api_error" and result.retrying_s >= 6


def _silent_cli(tmp_path: Path) -> Path:
    """A 'CLI' that starts and never answers (a CLI stopped, or hung, while it starts)."""
    cli = tmp_path / "silent-claude"
    cli.write_text("#!/bin/sh\nexec sleep 300\n", encoding="utf-8")
    cli.chmod(0o755)
    return cli


def test_a_stop_from_another_thread_ends_a_session_whose_cli_never_answered_within_seconds(
    tmp_path: Path,
) -> None:
    """The SDK waits at least 60 s for a CLI's first answer: a Ctrl-C of the run (`stop`) must
    not wait that long."""
    runner = ClaudeSessionRunner(echo=lambda _: None, cli_path=_silent_cli(tmp_path))
    timer = threading.Timer(1.0, runner.stop)
    timer.start()
    started = time.monotonic()
    result = anyio.run(runner.run, request(tmp_path))
    timer.join()
    assert time.monotonic() - started < 15
    assert result.error == "stopped with its run" and result.is_error


def test_a_cli_that_never_answers_its_start_is_a_failed_session_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the SDK raises after its 60 s (a plain Exception) ends the session with the reason;
    any other exception still propagates."""

    def never_started(**_: object) -> object:
        async def stream() -> Any:
            raise Exception("Control request timeout: initialize")
            yield

        return stream()

    monkeypatch.setattr(agent_module, "query", never_started)
    result = anyio.run(ClaudeSessionRunner(echo=lambda _: None).run, request(tmp_path))
    assert result.is_error and result.error is not None
    assert result.error.startswith("Claude Code did not answer its start-up request (Control request timeout")

    def broken(**_: object) -> object:
        async def stream() -> Any:
            raise RuntimeError("a bug")
            yield

        return stream()

    monkeypatch.setattr(agent_module, "query", broken)
    with pytest.raises(BaseException, match=r"a bug|unhandled errors"):
        anyio.run(ClaudeSessionRunner(echo=lambda _: None).run, request(tmp_path))
