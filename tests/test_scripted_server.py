"""The scripted model server, alone over HTTP and driving the real bundled Claude Code CLI."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import claude_agent_sdk
import pytest
from claude_agent_sdk import (
    ClaudeAgentOptions,
    RateLimitEvent,
    ResultError,
    ResultMessage,
    SystemMessage,
    query,
)
from helpers import wait_until

from scripted_model import (
    Fault,
    Reply,
    ScriptedModelServer,
    ToolCall,
    Turn,
    gateway_token,
    hermetic_env,
    sdk_env,
)

SESSION_TIMEOUT = 30.0


class ScriptBrain:
    """Serves queued faults first, then plays: Bash, then Write, then a final text."""

    def __init__(self, faults: list[Fault] | None = None, *, repeat: bool = False):
        """faults are served one per request; repeat=True serves the first forever."""
        self.faults = list(faults or [])
        self.repeat = repeat
        self.turns: list[Turn] = []

    def respond(self, turn: Turn) -> Reply | Fault:
        """Answer on content: how many tool calls already have results."""
        self.turns.append(turn)
        if self.faults:
            return self.faults[0] if self.repeat else self.faults.pop(0)
        done = len(turn.exchanges())
        if done == 0:
            bash = {"command": "echo hello > out.txt", "description": "write out.txt"}
            return Reply("Writing out.txt.", (ToolCall("Bash", bash),))
        if done == 1:
            path = str(Path(turn.first_user_text().split()[-1]) / "notes.md")
            return Reply("", (ToolCall("Write", {"file_path": path, "content": "# n\n"}),))
        return Reply("All done.")

    def role_of(self, turn: Turn) -> str | None:
        """Every main-loop request here belongs to the 'coder' role."""
        return "coder" if turn.has_tools else None


class TextBrain:
    """Always answers with one line of text."""

    def respond(self, turn: Turn) -> Reply | Fault:
        """End the turn at once."""
        return Reply("hi")


def run_session(
    server: ScriptedModelServer,
    tmp: Path,
    *,
    max_retries: int = 0,
    auth_token: str | None = None,
    extra_env: dict[str, str] | None = None,
) -> tuple[list[Any], Exception | None]:
    """Run one real CLI session; return every SDK message and what it raised."""
    cwd = tmp / "work"
    cwd.mkdir(exist_ok=True)
    env = sdk_env(server.base_url, tmp, max_retries=max_retries, auth_token=auth_token)
    env.update(extra_env or {})
    options = ClaudeAgentOptions(
        cwd=str(cwd),
        env=env,
        setting_sources=[],
        permission_mode="dontAsk",
        allowed_tools=["Bash", "Write", "Edit", "Read"],
        max_turns=6,
    )
    messages: list[Any] = []

    async def drive() -> None:
        async for message in query(prompt=f"Work in {cwd}", options=options):
            messages.append(message)

    try:
        asyncio.run(asyncio.wait_for(drive(), SESSION_TIMEOUT))
    except Exception as exc:
        return messages, exc
    return messages, None


def result_of(messages: list[Any]) -> ResultMessage:
    """The single ResultMessage of a session."""
    results = [m for m in messages if isinstance(m, ResultMessage)]
    assert len(results) == 1, messages
    return results[0]


def retries_of(messages: list[Any]) -> list[dict[str, Any]]:
    """The data of the api_retry system messages."""
    return [m.data for m in messages if isinstance(m, SystemMessage) and m.subtype == "api_retry"]


def http(
    server: ScriptedModelServer, method: str, path: str, body: bytes | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One plain urllib request; HTTP errors are returned, not raised."""
    request = urllib.request.Request(server.base_url + path, body, method=method)
    request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def messages_body(**extra: Any) -> bytes:
    """A minimal /v1/messages body with one user message."""
    body = {"model": "claude-test", "max_tokens": 10, **extra}
    body.setdefault("messages", [{"role": "user", "content": "hi"}])
    return json.dumps(body).encode()


# --- pure parts ---------------------------------------------------------------


def test_turn_pairs_tool_calls_with_results_and_skips_reminders() -> None:
    """exchanges() pairs tool_use with tool_result (str or block list)."""
    reminder = {"type": "text", "text": "<system-reminder>\nignore\n</system-reminder>"}
    body = {
        "model": "m",
        "system": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
        "tools": [{"name": "Bash"}],
        "messages": [
            {"role": "user", "content": [reminder, {"type": "text", "text": "go"}]},
            {"role": "system", "content": "env"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"a": 1}},
                    {"type": "tool_use", "id": "t2", "name": "Read", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t2", "content": "r2"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "is_error": True,
                        "content": [{"type": "text", "text": "boom"}],
                    },
                    reminder,
                ],
            },
        ],
    }
    turn = Turn.from_request(body, "sid")
    assert turn.system == "A\nB" and turn.has_tools and turn.session_id == "sid"
    assert turn.first_user_text() == "go"
    assert turn.last_user_text() == ""
    assert turn.answers_tool_results()
    ex = turn.exchanges()
    assert [(e.tool_use_id, e.name, e.result, e.is_error) for e in ex] == [
        ("t1", "Bash", "boom", True),
        ("t2", "Read", "r2", False),
    ]
    assert ex[0].input == {"a": 1}
    with pytest.raises(TypeError):
        Turn.from_request({"model": "m", "messages": "nope"}, None)


def test_hermetic_env_keeps_the_cli_on_loopback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Proxies and foreign API settings go; loopback URL, dummy key, dirs come."""
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "real-looking-token")
    monkeypatch.setenv("CLAUDE_CODE_USE_BEDROCK", "1")
    env = hermetic_env("http://127.0.0.1:9", tmp_path, max_retries=3)
    assert "HTTPS_PROXY" not in env and "CLAUDE_CODE_USE_BEDROCK" not in env
    assert "ANTHROPIC_AUTH_TOKEN" not in env and env["ANTHROPIC_API_KEY"]
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert env["CLAUDE_CODE_MAX_RETRIES"] == "3"
    assert env["NO_PROXY"] == env["no_proxy"] == "127.0.0.1,localhost"
    assert Path(env["HOME"]).is_dir() and Path(env["CLAUDE_CONFIG_DIR"]).is_dir()
    assert env["PATH"]
    token_env = hermetic_env("http://127.0.0.1:9", tmp_path, auth_token="tok")
    assert token_env["ANTHROPIC_AUTH_TOKEN"] == "tok"
    assert "ANTHROPIC_API_KEY" not in token_env
    blanked = sdk_env("http://127.0.0.1:9", tmp_path)
    assert blanked["HTTPS_PROXY"] == "" and blanked["ANTHROPIC_AUTH_TOKEN"] == ""
    with pytest.raises(ValueError, match="loopback"):
        hermetic_env("https://api.anthropic.com", tmp_path)


# --- the HTTP surface ---------------------------------------------------------


def test_http_surface_without_the_cli(tmp_path: Path) -> None:
    """Probes, 404, 400, count_tokens, side calls, JSON and SSE answers, the log."""
    brain = ScriptBrain()
    log = tmp_path / "requests.jsonl"
    with ScriptedModelServer(brain, log) as server:
        assert http(server, "GET", "/")[0] == 200
        assert http(server, "HEAD", "/")[0] == 200
        status, _, raw = http(server, "POST", "/v1/other", b"{}")
        assert status == 404 and json.loads(raw)["type"] == "error"
        status, _, raw = http(server, "POST", "/v1/messages", b"{not json")
        assert status == 400
        assert json.loads(raw)["error"]["type"] == "invalid_request_error"
        status, _, raw = http(server, "POST", "/v1/messages?beta=true", b"[1]")
        assert status == 400

        body = messages_body()
        status, _, raw = http(server, "POST", "/v1/messages/count_tokens", body)
        assert status == 200 and json.loads(raw) == {"input_tokens": len(body) // 4}

        status, _, raw = http(server, "POST", "/v1/messages", messages_body())
        side = json.loads(raw)
        assert status == 200 and side["content"][0]["type"] == "text"
        assert brain.turns == []  # side calls never reach the brain

        tools = [{"name": "Bash", "input_schema": {}}]
        status, _, raw = http(server, "POST", "/v1/messages", messages_body(tools=tools))
        answer = json.loads(raw)
        assert status == 200 and answer["stop_reason"] == "tool_use"
        assert answer["usage"]["input_tokens"] > 0
        tool_ids = [b["id"] for b in answer["content"] if b["type"] == "tool_use"]

        streamed = messages_body(tools=tools, stream=True)
        status, headers, raw = http(server, "POST", "/v1/messages?beta=true", streamed)
        assert status == 200 and headers["content-type"] == "text/event-stream"
        events = re.findall(r"^event: (\w+)$", raw.decode(), flags=re.MULTILINE)
        assert events[0] == "message_start" and events[-2:] == [
            "message_delta",
            "message_stop",
        ]
        assert "content_block_delta" in events
        datas = [json.loads(d) for d in re.findall(r"^data: (.*)$", raw.decode(), re.MULTILINE)]
        tool_ids += [
            d["content_block"]["id"]
            for d in datas
            if d["type"] == "content_block_start" and d["content_block"]["type"] == "tool_use"
        ]
        assert len(tool_ids) == len(set(tool_ids)) == 2
        assert datas[-2]["delta"]["stop_reason"] == "tool_use"
        assert http(server, "GET", "/")[0] == 200  # still alive after bad requests

    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines == server.requests
    assert [e["status"] for e in lines] == [404, 400, 400, 200, 200, 200, 200]
    assert lines[-1]["has_tools"] and lines[-1]["stream"] and lines[-1]["role"] == "coder"
    assert lines[-3]["has_tools"] is False and lines[-3]["role"] is None
    assert lines[-1]["tool_calls"] == ["Bash"] and lines[-1]["n_messages"] == 1


def test_stop_releases_a_hanging_request() -> None:
    """A hang holds the client until stop(), and stop() itself returns at once."""
    failures: list[BaseException] = []
    server = ScriptedModelServer(ScriptBrain([Fault("hang")], repeat=True)).start()

    def client() -> None:
        try:
            http(server, "POST", "/v1/messages", messages_body(tools=[{"name": "Bash"}]))
        except Exception as exc:
            failures.append(exc)

    thread = threading.Thread(target=client)
    thread.start()
    wait_until(lambda: server.requests, "the hanging request", 10)
    assert thread.is_alive() and server.requests[0]["fault"] == "hang"
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 2
    thread.join(timeout=2)
    assert not thread.is_alive() and failures


# --- the real CLI -------------------------------------------------------------


def test_cli_session_runs_tools_through_the_brain(tmp_path: Path) -> None:
    """Bash, then Write, then text: files exist, success, the brain saw results."""
    brain = ScriptBrain()
    with ScriptedModelServer(brain, tmp_path / "log.jsonl") as server:
        messages, error = run_session(server, tmp_path)
    assert error is None, error
    result = result_of(messages)
    assert result.subtype == "success" and not result.is_error, result
    assert result.num_turns == 3 and (result.total_cost_usd or 0) > 0
    work = tmp_path / "work"
    assert (work / "out.txt").read_text() == "hello\n"
    assert (work / "notes.md").read_text() == "# n\n"
    main = [r for r in server.requests if r["has_tools"]]
    assert len(main) == 3
    assert {r["session_id"] for r in main} == {result.session_id}
    assert all(r["role"] == "coder" and r["status"] == 200 for r in main)
    last = brain.turns[-1].exchanges()
    assert [e.name for e in last] == ["Bash", "Write"]
    assert not any(e.is_error for e in last), last
    assert len({e.tool_use_id for e in last}) == 2


@pytest.mark.parametrize(
    ("kind", "status", "error_name"),
    [("http_429", 429, "rate_limit"), ("http_529", 529, "overloaded")],
)
def test_cli_retries_a_429_or_529_and_succeeds(
    tmp_path: Path, kind: Any, status: int, error_name: str
) -> None:
    """One 429/529: an api_retry message (~0.5 s backoff), then success."""
    with ScriptedModelServer(ScriptBrain([Fault(kind)])) as server:
        messages, error = run_session(server, tmp_path, max_retries=2)
    assert error is None, error
    assert result_of(messages).subtype == "success"
    retries = retries_of(messages)
    assert [(r["error_status"], r["error"]) for r in retries] == [(status, error_name)]
    assert [r["status"] for r in server.requests][:2] == [status, 200]


def test_cli_gives_up_on_a_persistent_500(tmp_path: Path) -> None:
    """500 forever: 1 + max_retries requests, then is_error and ResultError."""
    with ScriptedModelServer(ScriptBrain([Fault("http_500")], repeat=True)) as server:
        messages, error = run_session(server, tmp_path, max_retries=1)
    result = result_of(messages)
    assert result.is_error and result.subtype == "success"
    assert result.api_error_status == 500 and result.terminal_reason == "api_error"
    assert isinstance(error, ResultError) and error.api_error_status == 500
    assert len(server.requests) == 2 and len(retries_of(messages)) == 1


def test_cli_stream_cut_falls_back_to_a_non_streaming_request(tmp_path: Path) -> None:
    """A cut stream with max_retries=0 is re-asked once with stream:false."""
    with ScriptedModelServer(ScriptBrain([Fault("stream_cut")])) as server:
        messages, error = run_session(server, tmp_path)
    assert error is None, error
    assert result_of(messages).subtype == "success"
    first, second = server.requests[:2]
    assert (first["fault"], first["stream"]) == ("stream_cut", True)
    assert (second["fault"], second["stream"]) == (None, False)


def test_cli_stream_cut_forever_ends_with_econnreset(tmp_path: Path) -> None:
    """Cut every time: streaming attempts, one non-streaming one, then the error."""
    brain = ScriptBrain([Fault("stream_cut")], repeat=True)
    with ScriptedModelServer(brain) as server:
        messages, error = run_session(server, tmp_path)
    result = result_of(messages)
    assert result.is_error and result.api_error_status is None
    assert "ECONNRESET" in (result.result or "")
    assert isinstance(error, ResultError)
    assert [r["stream"] for r in server.requests] == [True, False]


def test_cli_hang_times_out_with_api_timeout_ms(tmp_path: Path) -> None:
    """API_TIMEOUT_MS bounds a silent server; without it the CLI waits ~6 min."""
    brain = ScriptBrain([Fault("hang")], repeat=True)
    started = time.monotonic()
    with ScriptedModelServer(brain) as server:
        messages, error = run_session(server, tmp_path, extra_env={"API_TIMEOUT_MS": "1000"})
    assert time.monotonic() - started < 10
    result = result_of(messages)
    assert result.is_error and "timed out" in (result.result or "")
    assert isinstance(error, ResultError)
    assert [r["fault"] for r in server.requests] == ["hang"]


def test_cli_usage_limit_with_gateway_token_is_a_rate_limit_event(
    tmp_path: Path,
) -> None:
    """With a claude-gateway token: RateLimitEvent(rejected, five_hour), no retry."""
    reset = int(time.time()) + 7200
    brain = ScriptBrain([Fault("usage_limit", reset_epoch=reset)], repeat=True)
    with ScriptedModelServer(brain) as server:
        messages, error = run_session(server, tmp_path, max_retries=2, auth_token=gateway_token())
    events = [m for m in messages if isinstance(m, RateLimitEvent)]
    assert len(events) == 1
    info = events[0].rate_limit_info
    assert (info.status, info.resets_at, info.rate_limit_type) == (
        "rejected",
        reset,
        "five_hour",
    )
    result = result_of(messages)
    assert result.is_error and result.api_error_status == 429
    assert "5-hour limit" in (result.result or "")
    assert isinstance(error, ResultError)
    assert len(server.requests) == 1 and not retries_of(messages)


def test_cli_usage_limit_with_api_key_is_a_plain_429(tmp_path: Path) -> None:
    """With an API key the unified headers are ignored: no event, a 429 error."""
    brain = ScriptBrain([Fault("usage_limit")], repeat=True)
    with ScriptedModelServer(brain) as server:
        messages, error = run_session(server, tmp_path, max_retries=2)
    assert not [m for m in messages if isinstance(m, RateLimitEvent)]
    result = result_of(messages)
    assert result.is_error and result.api_error_status == 429
    assert isinstance(error, ResultError)
    assert len(server.requests) == 1  # x-should-retry: false


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_cli_connects_only_to_loopback(tmp_path: Path) -> None:
    """Under strace, the CLI in hermetic_env opens no socket beyond 127.0.0.1."""
    cli = Path(str(claude_agent_sdk.__file__)).parent / "_bundled" / "claude"
    trace = tmp_path / "strace.txt"
    with ScriptedModelServer(TextBrain()) as server:
        env = hermetic_env(server.base_url, tmp_path, auth_token=gateway_token())
        argv = ["strace", "-f", "-e", "trace=connect", "-o", str(trace)]
        argv += [str(cli), "-p", "say hi", "--output-format", "json"]
        done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    inet = [line for line in trace.read_text().splitlines() if "AF_INET" in line]
    assert inet, "the CLI made no TCP connection at all"
    assert all('inet_addr("127.0.0.1")' in line for line in inet), inet


def test_a_scenario_names_dependencies_and_the_robot_takes_its_time_for_each_turn() -> None:
    from scripted_model.offline import RobotBrain
    from scripted_model.scenario import Scenario

    scenario = Scenario.from_json({"features": 2, "depends": {"F002": ["F001"]}, "turn_latency_s": 2.5})
    assert scenario.depends == {"F002": ("F001",)} and scenario.turn_latency_s == 2.5
    slept: list[float] = []
    brain = RobotBrain(scenario, sleep=slept.append)
    body = {
        "model": "m",
        "system": "# YOUR ROLE - INITIALIZER AGENT",
        "messages": [{"role": "user", "content": "This is session 1."}],
        "tools": [{"name": "Bash"}],
    }
    reply = brain.respond(Turn.from_request(body, "sid"))
    assert isinstance(reply, Reply) and reply.tool_calls and slept == [2.5]
    for bad in ({"turn_latency_s": -1}, {"depends": {"F2x": []}}, {"depends": {"F002": "F001"}}):
        with pytest.raises(ValueError, match="scenario is invalid"):
            Scenario.from_json(bad)


# --- several sessions at once (lanes) -----------------------------------------


def robot_turn(role: str, session: int, results: list[tuple[str, dict[str, Any], str]]) -> dict[str, Any]:
    """A /v1/messages body of the robot's session `session` in `role`, its earlier tool calls
    (name, input, result) answered, one per turn."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"Session {session}. Work in /work."}]
    for n, (name, args, result) in enumerate(results):
        tool_id = f"toolu_{session}_{n}"
        messages.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": tool_id, "name": name, "input": args}],
            }
        )
        messages.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": result}]}
        )
    return {
        "model": "m",
        "max_tokens": 100,
        "system": f"# YOUR ROLE - {role} AGENT",
        "messages": messages,
        "tools": [{"name": "Bash"}],
    }


def review_opened(session: int, feature: str) -> list[tuple[str, dict[str, Any], str]]:
    """A REVIEW's `pwd` and brief, answered (its lane's clone, its feature)."""
    facts = json.dumps({"feature": feature, "branch": f"feature/{feature}", "earlier_reviews": 0})
    return [
        ("Bash", {"command": "pwd"}, f"/lanes/{session}"),
        ("mcp__handoff__brief", {}, f"Your brief.\n```json\n{facts}\n```"),
    ]


def test_the_robot_brain_keeps_interleaved_sessions_apart() -> None:
    """Two sessions' requests, interleaved, get what each would get alone (everything comes from
    the request), and a scenario's fault counts only its own session's requests."""
    from scripted_model.offline import RobotBrain
    from scripted_model.scenario import Scenario

    scenario = Scenario.from_json({"faults": [{"session": 5, "kind": "http_500", "request": 2}]})
    turns = [
        ("IMPLEMENT", 5, []),
        ("REVIEW", 3, review_opened(3, "F003")),
        ("REVIEW", 3, review_opened(3, "F003")),
        ("IMPLEMENT", 5, review_opened(5, "F002")),
        ("REVIEW", 4, review_opened(4, "F004")),
    ]
    together = RobotBrain(scenario, sleep=lambda _: None)
    answers = [together.respond(Turn.from_request(robot_turn(*t), None)) for t in turns]
    assert answers[3] == Fault("http_500", reset_epoch=answers[3].reset_epoch)  # type: ignore[union-attr]
    for turn, answer in zip(turns, answers, strict=True):
        if isinstance(answer, Fault):
            continue
        alone = RobotBrain(Scenario(), sleep=lambda _: None).respond(
            Turn.from_request(robot_turn(*turn), None)
        )
        assert answer == alone
    assert (
        isinstance(answers[1], Reply)
        and answers[1].tool_calls[0].input["command"] == "git checkout -q feature/F003"
    )
    assert (
        isinstance(answers[4], Reply)
        and answers[4].tool_calls[0].input["command"] == "git checkout -q feature/F004"
    )


def test_the_robot_server_answers_concurrent_sessions_at_once() -> None:
    """Three sessions' requests at the same moment, each model turn taking 1 s: answered side by
    side (about 1 s, not 3), each with its own session's next step."""
    from scripted_model.offline import robot_server
    from scripted_model.scenario import Scenario

    sessions = {3: "F003", 4: "F004", 6: "F006"}
    answers: dict[int, dict[str, Any]] = {}

    def client(session: int) -> None:
        body = json.dumps(robot_turn("REVIEW", session, review_opened(session, sessions[session]))).encode()
        status, _, raw = http(server, "POST", "/v1/messages", body)
        assert status == 200
        answers[session] = json.loads(raw)

    with robot_server(Scenario.from_json({"turn_latency_s": 1.0})) as server:
        threads = [threading.Thread(target=client, args=(s,)) for s in sessions]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=10)
        elapsed = time.monotonic() - started
    assert sorted(answers) == [3, 4, 6] and elapsed < 2.5, elapsed
    for session, feature in sessions.items():
        calls = [b["input"]["command"] for b in answers[session]["content"] if b["type"] == "tool_use"]
        assert calls == [f"git checkout -q feature/{feature}", "bash init.sh 2>&1"]
    assert sorted(r["role"] for r in server.requests) == ["REVIEW"] * 3


def test_a_client_gone_mid_answer_prints_no_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C stops the CLIs with the run: their connections reset while answers are written.
    That is not the model's error (no traceback); any other error still prints one."""
    from scripted_model.server import _HTTPServer

    server = _HTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler, bind_and_activate=False)
    for error in (ConnectionResetError(104, "Connection reset by peer"), BrokenPipeError(32, "Broken pipe")):
        try:
            raise error
        except ConnectionError:
            server.handle_error(None, ("127.0.0.1", 1))
    assert capsys.readouterr().err == ""
    try:
        raise ValueError("a bug of the model's")
    except ValueError:
        server.handle_error(None, ("127.0.0.1", 1))
    assert "ValueError: a bug of the model's" in capsys.readouterr().err
    server.server_close()
