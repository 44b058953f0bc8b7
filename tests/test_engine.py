"""The engine option and its names (pure), the wire format, the error without the extra, the
worker's preflight, and a session's workflow started twice on a real dev server (attached, not
run again)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import fields, replace
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner
from helpers import MACHINE, factory_of, request_for, sh, state_for

from session_scheduler.core.config import AgentConfig, SessionType
from session_scheduler.core.engine import Engine, parse_engine, project_id, workflow_id
from session_scheduler.core.errors import GitError
from session_scheduler.core.session import InFlight
from session_scheduler.guard import safe_git
from session_scheduler.guard.sandbox import Host, Preflight
from session_scheduler.repo import gitops
from session_scheduler.run.agent import Reattachable, SessionRequest, SessionResult
from session_scheduler.run.browsing import BrowserAccess
from session_scheduler.view.cli import main, merge_config

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("given", "engine"),
    [
        (None, None),
        ("inprocess", None),
        ("temporal://local", Engine(None)),
        ("temporal://127.0.0.1:7233", Engine("127.0.0.1:7233")),
        ("temporal://temporal.example.org:7233/", Engine("temporal.example.org:7233")),
        ("temporal://[::1]:7233", Engine("[::1]:7233")),
    ],
)
def test_the_engine_option_is_read_as_a_value(given: str | None, engine: Engine | None) -> None:
    assert parse_engine(given) == engine


@pytest.mark.parametrize(
    "given",
    ["temporal", "http://h:7233", "temporal://h", "temporal://h:0", "temporal://h:99999", "temporal://a b:1"],
)
def test_an_engine_that_is_none_of_them_is_refused_saying_what_to_give(given: str) -> None:
    with pytest.raises(ValueError, match="temporal://"):
        parse_engine(given)


def test_the_engine_is_saved_with_the_project_and_inprocess_takes_it_back() -> None:
    saved = merge_config(None, {"engine": "temporal://127.0.0.1:7233"}).to_json()
    assert saved["engine"] == "temporal://127.0.0.1:7233"
    assert merge_config(saved, {"engine": None}).engine == "temporal://127.0.0.1:7233"
    assert merge_config(saved, {"engine": "temporal://local"}).engine == "temporal://local"
    assert merge_config(saved, {"engine": "inprocess"}).to_json()["engine"] is None
    assert AgentConfig.from_json({}).engine is None


def test_a_malformed_engine_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["--project-dir", str(tmp_path / "p"), "--engine", "temporal://h", "--dry-run"]
    )
    assert result.exit_code == 2 and "--engine" in result.output and "HOST:PORT" in result.output


def test_a_session_s_workflow_is_named_by_project_number_and_attempt(tmp_path: Path) -> None:
    one, other = tmp_path / "a" / "app", tmp_path / "b" / "app"
    assert project_id(one) == project_id(one) != project_id(other)
    assert project_id(one).startswith("app-")
    names = {workflow_id(project_id(one), n, a) for n in (1, 2) for a in (1, 2)}
    assert len(names) == 4
    assert workflow_id("app-0", 7, 2) == "app-0/session-0007/attempt-2"
    with pytest.raises(ValueError):
        workflow_id("app-0", 7, 0)


def test_a_session_s_attempt_is_saved_in_flight_only_past_the_first() -> None:
    first = InFlight(3, "log", "abc", None)
    assert "attempt" not in first.to_json()
    again = InFlight(3, "log", "abc", None, attempt=2)
    assert again.to_json()["attempt"] == 2
    assert InFlight.from_json(again.to_json()) == again
    assert InFlight.from_json(first.to_json()) == first


def _git_project(tmp_path: Path) -> Path:
    project = tmp_path / "p"
    project.mkdir()
    sh(project, "git init -q -b main && git commit -q --allow-empty -m start")
    gitops.ensure_exclude(safe_git.open(project))  # the scheduler's files (its log folder) stay out of git
    return project


def test_a_request_and_a_result_cross_the_wire_as_json_and_come_back_equal(tmp_path: Path) -> None:
    pytest.importorskip("temporalio")
    from session_scheduler.engine import wire

    request = request_for(_git_project(tmp_path), state_for(SessionType.REVIEW, "F002", open_review=4))
    browser = BrowserAccess("http://127.0.0.1:40000/mcp", "http://127.0.0.1:8000", tmp_path / "session")
    request = SessionRequest(
        request.plan,
        request.cwd,
        request.settings_path,
        request.log_dir,
        request.records,
        1,
        browser=browser,
        attempt=3,
    )
    back = wire.request_from_json(json.loads(json.dumps(wire.request_to_json(request))))
    for field in fields(SessionRequest):
        if field.name != "records":
            assert getattr(back, field.name) == getattr(request, field.name), field.name
    assert back.records.root == request.records.root
    result = SessionResult(
        subtype="success",
        is_error=False,
        permission_denials=({"tool_name": "Bash"},),
        policy_refusals={"t": "no"},
    )
    assert wire.result_from_json(json.loads(json.dumps(wire.result_to_json(result)))) == result


BLOCK_TEMPORAL = (
    "import sys; sys.modules['temporalio'] = None; from session_scheduler.view.cli import main; main()"
)


@pytest.mark.parametrize(
    "args",
    [
        ["--project-dir", "{tmp}/p", "--offline-demo", "--engine", "temporal://local"],
        ["worker", "--engine", "temporal://127.0.0.1:7233", "--host", "a"],
    ],
)
def test_without_the_extra_an_engine_is_refused_in_one_line_naming_the_install(
    tmp_path: Path, args: list[str]
) -> None:
    command = [sys.executable, "-c", BLOCK_TEMPORAL, *(a.format(tmp=tmp_path) for a in args)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().count("\n") == 0 and "pip install '.[temporal]'" in done.stderr
    assert not (tmp_path / "p").exists()


def test_a_worker_refuses_to_start_without_its_sandbox() -> None:
    pytest.importorskip("temporalio")
    obj = {"preflight": lambda: Preflight(False, "the OS sandbox does not work here (bwrap is missing)")}
    result = CliRunner().invoke(
        main, ["worker", "--engine", "temporal://127.0.0.1:9", "--host", "a", "--offline-demo"], obj=obj
    )
    assert result.exit_code == 1
    assert "(bwrap is missing); a worker runs sessions only in the OS sandbox" in result.output


@pytest.mark.parametrize(("given", "sessions"), [([], 16), (["--sessions", "2"], 2)])
def test_a_worker_runs_at_most_its_sessions_at_once(
    monkeypatch: pytest.MonkeyPatch, given: list[str], sessions: int
) -> None:
    """`worker --sessions N`: what the host holds reaches the worker (max_concurrent_activities);
    and its machine, read from its environment at its edge, reaches it too (its sessions' sandboxes)."""
    pytest.importorskip("temporalio")
    from session_scheduler.engine import worker

    served: list[int] = []
    machines: list[Host] = []

    async def serve(
        address: str,
        options: object,
        runner: object,
        host: str,
        places: object,
        machine: Host,
        echo: object,
        sessions: int,
    ) -> None:
        served.append(sessions)
        machines.append(machine)

    monkeypatch.setattr(worker, "serve", serve)
    monkeypatch.setenv("MY_SERVICE_TOKEN", "worker's own")
    obj = {"preflight": lambda: Preflight(True, "sandbox ok"), "runners": factory_of(lambda _: _Counting())}
    args = ["worker", "--engine", "temporal://127.0.0.1:9", "--host", "a", "--offline-demo", *given]
    result = CliRunner().invoke(main, args, obj=obj)
    assert result.exit_code == 0, result.output
    assert served == [sessions]
    assert "MY_SERVICE_TOKEN" in machines[0].secret_env


def test_a_worker_s_sessions_are_at_least_one() -> None:
    result = CliRunner().invoke(
        main, ["worker", "--engine", "temporal://127.0.0.1:9", "--host", "a", "--sessions", "0"]
    )
    assert result.exit_code == 2 and "--sessions" in result.output


def test_a_worker_joins_a_server_not_temporal_local() -> None:
    result = CliRunner().invoke(main, ["worker", "--engine", "temporal://local", "--host", "a"])
    assert result.exit_code == 2 and "temporal://HOST:PORT" in result.output


class _Counting:
    """A runner that counts its sessions and says which one it ran."""

    def __init__(self) -> None:
        self.ran: list[tuple[int, int]] = []

    async def run(self, request: SessionRequest) -> SessionResult:
        self.ran.append((request.plan.number, request.attempt))
        return SessionResult(subtype="success", is_error=False, num_turns=len(self.ran))


def test_a_session_started_twice_is_attached_to_and_its_next_attempt_runs_again(tmp_path: Path) -> None:
    """temporal://local: a dev server and a worker of the run's own; the same (number, attempt)
    twice gives the first's result without running it again; attempt 2 runs."""
    pytest.importorskip("temporalio")
    from session_scheduler.engine.temporal import ENGINE_FILE, engine_runners

    project = _git_project(tmp_path)
    request = request_for(project, state_for(SessionType.INITIALIZER))
    counting = _Counting()
    lines: list[str] = []
    factory = engine_runners(Engine(None), project, factory_of(lambda _: counting)(None), MACHINE)
    with factory(lines.append, project / ".agent_logs") as runner:
        assert isinstance(runner, Reattachable)
        number = request.plan.number
        assert not runner.holds(number, 1)  # unknown to the engine: a rerun starts it
        first = anyio.run(runner.run, request)
        assert runner.holds(number, 1) and not runner.holds(number, 2)  # completed: its result is taken
        again = anyio.run(runner.run, request)
        second = anyio.run(
            runner.run,
            SessionRequest(
                request.plan, request.cwd, request.settings_path, request.log_dir, request.records, attempt=2
            ),
        )
    assert counting.ran == [(number, 1), (number, 2)]
    assert first == again and first.num_turns == 1 and second.num_turns == 2
    where = json.loads((request.log_dir / ENGINE_FILE).read_text())
    assert where["host"] == "local" and where["workflow_id"].endswith(f"/session-{number:04d}/attempt-2")
    assert (project / ".agent_logs" / "temporal.db").is_file()
    assert any("ran on local" in line for line in lines)


@pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="no bubblewrap: the worker's preflight refuses first"
)
def test_a_worker_that_cannot_reach_its_server_says_so_in_one_line(tmp_path: Path) -> None:
    pytest.importorskip("temporalio")
    from session_scheduler.engine.devserver import free_port

    command = [
        sys.executable,
        "autonomous_agent_demo.py",
        "worker",
        "--engine",
        f"temporal://127.0.0.1:{free_port()}",
        "--host",
        "a",
        "--offline-demo",
    ]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().startswith("error: cannot reach the Temporal server at 127.0.0.1:")
    assert "(connection refused); start it or check --engine" in done.stderr, done.stderr
    assert done.stderr.strip().count("\n") == 0


class _Endless:
    """A runner whose session runs until it is cancelled (a Ctrl-C must reach it on its worker)."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.cancelled = threading.Event()

    async def run(self, request: SessionRequest) -> SessionResult:
        self.started.set()
        try:
            await anyio.sleep_forever()
        finally:
            self.cancelled.set()
        raise AssertionError("unreachable")


def test_stopping_the_runner_cancels_the_sessions_on_their_workers(tmp_path: Path) -> None:
    """The run's Ctrl-C (lanes call `stop`): each session's workflow is cancelled, its worker
    cancels the session, and `run` returns a session cut off."""
    pytest.importorskip("temporalio")
    from session_scheduler.engine.temporal import engine_runners
    from session_scheduler.run.agent import Stoppable

    project = _git_project(tmp_path)
    request = request_for(project, state_for(SessionType.INITIALIZER))
    endless = _Endless()
    results: list[SessionResult] = []
    factory = engine_runners(Engine(None), project, factory_of(lambda _: endless)(None), MACHINE)
    with factory(lambda line: None, project / ".agent_logs") as runner:
        assert isinstance(runner, Stoppable) and isinstance(runner, Reattachable)
        lane = threading.Thread(target=lambda: results.append(anyio.run(runner.run, request)))
        lane.start()
        assert endless.started.wait(30)
        assert runner.holds(request.plan.number, 1)  # running: a killed scheduler's rerun awaits it
        began = time.monotonic()
        runner.stop()
        lane.join(30)
        assert not lane.is_alive() and endless.cancelled.is_set()
        stopped_s = time.monotonic() - began
        print(f"stopped in {stopped_s:.2f} s")
        assert stopped_s < 5
        assert not runner.holds(request.plan.number, 1)  # cancelled with the run: it runs again
    assert results[0].cut_off and results[0].is_error and "stopped with the run" in (results[0].error or "")


@pytest.mark.parametrize(
    ("said", "plain"),
    [
        (
            'Failed client connect: Server connection error: tonic::transport::Error(Transport, ConnectError("tcp connect error", 127.0.0.1:1, Os { code: 111, kind: ConnectionRefused }))',
            "connection refused",
        ),
        ("Failed client connect: dns error: failed to lookup", "dns error"),
        ("Failed client connect: operation timed out", "timed out"),
        ("Something else: detail", "Something else"),
    ],
)
def test_a_connection_error_is_said_plainly(said: str, plain: str) -> None:
    pytest.importorskip("temporalio")
    from session_scheduler.engine.connection import connect_error

    assert connect_error(RuntimeError(said)) == plain


def test_a_session_s_result_waits_for_the_server_to_answer(tmp_path: Path) -> None:
    """A session that ends while the server is away keeps its result until the server answers
    (the SDK gives up reporting it after a few seconds, and the session would run again)."""
    pytest.importorskip("temporalio")
    import asyncio

    from temporalio.testing import ActivityEnvironment

    from session_scheduler.engine import wire
    from session_scheduler.engine.exchange import Places, ensure_exchange, send
    from session_scheduler.engine.worker import SessionActivity

    project = _git_project(tmp_path)
    request = request_for(project, state_for(SessionType.INITIALIZER))
    answers: list[bool | Exception] = [RuntimeError("tcp connect error"), False, True]
    asked: list[float] = []

    async def server() -> bool:
        asked.append(time.monotonic())
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    lines: list[str] = []
    counting = _Counting()
    session = SessionActivity(counting, "host-a", Places(tmp_path / "worker"), MACHINE, lines.append, server)
    remote = str(ensure_exchange(tmp_path / "exchange.git"))
    wid = workflow_id("p", request.plan.number, 1)
    start = send(request, remote, wid)
    job = {
        "request": wire.request_to_json(request),
        "git": {"remote": remote, "project": "p", "start": start},
    }
    environment = ActivityEnvironment()
    environment.info = replace(environment.info, workflow_id=wid)
    answer = asyncio.run(environment.run(session.run_session, job))
    assert answer["host"] == "host-a" and counting.ran == [(request.plan.number, 1)]
    assert len(asked) == 3 and answers == []  # reported once the server answered
    number = request.plan.number
    assert lines[0].startswith(f"[host-a] session {number} (INITIALIZER) of {project.name} starts")
    assert f"[host-a] session {number}: the Temporal server does not answer; its result waits for it" in lines
    assert lines[-1] == f"[host-a] session {number}: reporting its result"


def test_a_web_review_runs_in_this_process_where_its_browser_is(tmp_path: Path) -> None:
    """A REVIEW given a browser (its app and browser started on this machine) runs with this
    process's runner, never on a worker that could not reach them; other sessions go to the engine."""
    pytest.importorskip("temporalio")
    from session_scheduler.engine.temporal import TemporalRunner

    request = request_for(_git_project(tmp_path), state_for(SessionType.REVIEW, "F002", open_review=4))
    browser = BrowserAccess("http://127.0.0.1:40000/mcp", "http://127.0.0.1:8000", tmp_path / "session")
    here = _Counting()
    lines: list[str] = []
    runner = TemporalRunner(None, None, "p", str(tmp_path / "x.git"), lines.append, here)  # type: ignore[arg-type]
    result = anyio.run(runner.run, replace(request, browser=browser, lane=2, lanes=3))
    assert here.ran == [(request.plan.number, 1)] and result.num_turns == 1
    assert lines == [f"[lane 2]   session {request.plan.number} runs here: its browser is this machine's"]
    with pytest.raises(GitError) as refused:  # without a browser: to the engine, through the exchange
        anyio.run(runner.run, request)
    assert str(refused.value) == (
        f"cannot push to the exchange {tmp_path / 'x.git'}: fatal: '{tmp_path / 'x.git'}' does not appear "
        "to be a git repository"
    )
