"""The Temporal runner (`--engine temporal://...`): each session is one workflow on the engine,
named from the saved state (core/engine.workflow_id), whose one activity a worker runs; the
runner awaits its result. Everything else stays in the scheduler (the one authority).

The Temporal client lives on one event loop in a thread of its own (`EngineLoop`); each session's
`run` (called by the lanes through `anyio.run`, each in its own loop) hands its work to it."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from concurrent.futures import CancelledError, Future
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import CancelledError as TemporalCancelledError
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from session_scheduler.core.engine import EXCHANGE, TASK_QUEUE, Engine, project_id, workflow_id
from session_scheduler.core.errors import ConfigError, SchedulerError
from session_scheduler.core.layout import LOG_DIR
from session_scheduler.engine import exchange, gitdaemon, wire
from session_scheduler.engine.connection import (
    CLIENT_LOG,
    connect_error,
    connect_options,
    logged_runtime,
    tls_error,
)
from session_scheduler.engine.devserver import dev_server
from session_scheduler.engine.exchange import Places
from session_scheduler.engine.worker import work
from session_scheduler.engine.workflow import WORKFLOW
from session_scheduler.guard.sandbox import Host
from session_scheduler.repo import workdirs
from session_scheduler.run.agent import SessionRequest, SessionResult, SessionRunner
from session_scheduler.run.runners import Echo, RunnerFactory

T = TypeVar("T")
TRIES = 2
"""A session's tries on the engine: its first, and one more if its worker is lost (never for
what the session ended with)."""
HEARTBEAT_TIMEOUT_S = 10.0
"""A worker silent this long is lost: its session goes to another worker (or to it, when it returns)."""
GRACE_S = 120.0
"""What a session's activity may take beyond the session's own timeout (start, stop, clean up)."""
GIT_DAEMON_LOG = "git-daemon.log"
"""In the run's log folder: what `git daemon` said, when the run serves its exchange."""
ENGINE_FILE = "engine.json"
"""In a session's folder: where it ran on the engine (workflow, host, tries, the engine's overhead)."""
CONNECT_TIMEOUT_S = 20.0
SERVER_GONE_S = 600.0
"""How long a session's start or its awaiting outlasts a server that does not answer (restarted,
cut off): its sessions go on on the workers meanwhile; after it, the run stops (and its rerun
reattaches to them)."""
GONE = (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED)
"""What a server that is not there (yet) answers."""
STOP_TIMEOUT_S = 20.0


class EngineLoop:
    """An asyncio loop in a daemon thread: where the Temporal client (and a local worker) live."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="temporal-engine", daemon=True)
        self.thread.start()

    def submit(self, work: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(work, self.loop)

    def call(self, work: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return self.submit(work).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class TemporalRunner:
    """Runs each session as a workflow on the engine and returns its result (SessionRunner)."""

    def __init__(
        self,
        engine: EngineLoop,
        client: Client,
        project: str,
        remote: str,
        echo: Echo,
        here: SessionRunner | None = None,
        workers: str | None = None,
    ) -> None:
        self.engine, self.client, self.project, self.echo = engine, client, project, echo
        self.remote = remote
        """The exchange sessions go through to the workers and back (exchange.py)."""
        self.workers = workers or remote
        """Where the workers reach it (the URL it is served at, `--git-serve`)."""
        self.here = here
        """The runner of this process: a web REVIEW runs with it, its browser on this machine."""
        self.running: dict[str, WorkflowHandle[Any, Any]] = {}
        """The workflows of the sessions being awaited (touched only on the engine's loop)."""
        self.stopping = False

    def holds(self, number: int, attempt: int) -> bool:
        """Whether the engine has session `number`'s try `attempt` running, or ended with a
        result (Reattachable): a killed scheduler's session, which the rerun awaits."""
        return self.engine.call(self._holds(workflow_id(self.project, number, attempt)), STOP_TIMEOUT_S)

    async def _holds(self, wid: str) -> bool:
        return await self._status(wid) in (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.COMPLETED)

    async def _status(self, wid: str) -> WorkflowExecutionStatus | None:
        """The workflow's status on the engine; None when it has none of that name."""
        try:
            described = await self.client.get_workflow_handle(wid).describe()
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                return None
            raise
        return described.status

    def stop(self) -> None:
        """Cancel every session being awaited (a Ctrl-C of the run): the workers stop their CLIs,
        and each `run` returns a session cut off (the run records it as interrupted)."""
        with suppress(TimeoutError):  # a server gone: nothing to cancel there
            self.engine.call(self._cancel_all(), STOP_TIMEOUT_S)

    async def _cancel_all(self) -> None:
        self.stopping = True
        for handle in list(self.running.values()):
            with suppress(RPCError):
                await handle.cancel(rpc_timeout=timedelta(seconds=5))

    async def run(self, request: SessionRequest) -> SessionResult:
        if request.browser is not None and self.here is not None:  # its app and browser run here
            self.echo(
                f"{request.prefix}  session {request.plan.number} runs here: its browser is this machine's"
            )
            return await self.here.run(request)
        began = time.monotonic()
        number, attempt = request.plan.number, request.attempt
        wid = workflow_id(self.project, number, attempt)
        start = await asyncio.to_thread(exchange.send, request, self.remote, wid)
        job = {
            "request": wire.request_to_json(request),
            "git": {"remote": self.workers, "project": self.project, "start": start},
            "task_queue": TASK_QUEUE,
            "start_to_close_s": request.plan.timeout_s + GRACE_S,
            "heartbeat_timeout_s": HEARTBEAT_TIMEOUT_S,
            "tries": TRIES,
        }
        earlier = workflow_id(self.project, number, attempt - 1) if attempt > 1 else None

        def say(line: str) -> None:
            self.echo(request.prefix + line)

        answer = await asyncio.wrap_future(self.engine.submit(self._session(wid, job, earlier, say)))
        result = wire.result_from_json(answer["result"])
        if answer.get("back") is not None:  # what it left on its worker, where it would have left it here
            await asyncio.to_thread(exchange.take_back, request, self.remote, wid, answer["back"])
        wall = time.monotonic() - began
        where = {
            "workflow_id": wid,
            "host": answer.get("host"),
            "tries": answer.get("try"),
            "wall_s": round(wall, 3),
            "engine_s": None if answer.get("attached") else round(max(wall - result.duration_s, 0.0), 3),
            "attached": answer.get("attached"),
        }
        request.log_dir.mkdir(parents=True, exist_ok=True)
        (request.log_dir / ENGINE_FILE).write_text(json.dumps(where, indent=2), encoding="utf-8")
        tries = f", try {where['tries']}" if where["tries"] != 1 else ""
        if where["host"] is None:  # cancelled with the run before a worker answered
            said = "stopped on the engine"
        elif answer.get("attached") == "ended":  # a killed scheduler's, ended before this run awaited it
            said = f"ran on {where['host']}{tries} (it ended while no scheduler awaited it)"
        elif answer.get("attached") == "running":
            said = f"ran on {where['host']}{tries} (awaited by this run from its middle)"
        else:
            said = f"ran on {where['host']}{tries} (engine {where['engine_s']:.2f} s)"
        self.echo(f"{request.prefix}  session {number} {said}")
        return result

    async def _session(self, wid: str, job: dict[str, Any], earlier: str | None, say: Echo) -> dict[str, Any]:
        """Start the session's workflow, or attach to it (running: await it; completed: its
        result); an earlier attempt's workflow still running (a killed scheduler's) is ended first."""
        if earlier is not None:
            with suppress(RPCError):  # not running (done, or never started)
                await self.client.get_workflow_handle(earlier).terminate("its session runs again")
        found = await _outlasting(lambda: self._status(wid), wid, say)  # a killed scheduler's, awaited
        attached = {WorkflowExecutionStatus.RUNNING: "running", WorkflowExecutionStatus.COMPLETED: "ended"}
        try:
            handle = await _outlasting(
                lambda: self.client.start_workflow(
                    WORKFLOW,
                    job,
                    id=wid,
                    task_queue=TASK_QUEUE,
                    id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
                    id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                ),
                wid,
                say,
            )
        except WorkflowAlreadyStartedError:  # it completed: its result is the session's
            handle = self.client.get_workflow_handle(wid)
        self.running[wid] = handle
        if self.stopping:  # a stop came while it started
            with suppress(RPCError):
                await handle.cancel()
        try:
            answer: dict[str, Any] = await _outlasting(handle.result, wid, say)
            return {**answer, "attached": attached.get(found) if found is not None else None}
        except asyncio.CancelledError:
            await handle.cancel()
            raise
        except WorkflowFailureError as exc:
            if self.stopping and isinstance(exc.cause, TemporalCancelledError):
                stopped = SessionResult(
                    error="stopped with the run (its workflow was cancelled)", cut_off=True
                )
                return {"result": wire.result_to_json(stopped), "host": None, "try": None}
            cause: BaseException | None = exc.cause
            while getattr(cause, "cause", None) is not None:  # the activity's own error, under the workflow's
                cause = getattr(cause, "cause", None)
            raise SchedulerError(
                f"session workflow {wid} failed on the engine: {getattr(cause, 'message', cause)}; "
                "run the same command again"
            ) from None
        finally:
            self.running.pop(wid, None)


async def _outlasting(call: Callable[[], Awaitable[T]], wid: str, say: Echo) -> T:
    """`call()`, again each second while the server does not answer (a restart), for up to
    SERVER_GONE_S (said once, and when it answers again); then a SchedulerError that says what to do."""
    deadline = time.monotonic() + SERVER_GONE_S
    away = False
    while True:
        try:
            answer = await call()
            if away:
                say("  the Temporal server answers again")
            return answer
        except RPCError as exc:
            if exc.status not in GONE:
                raise
            if not away:
                away = True
                say(
                    f"  the Temporal server does not answer ({exc.message}): waiting for it, up to "
                    f"{SERVER_GONE_S / 60:g} min (the sessions go on on their workers)"
                )
            if time.monotonic() > deadline:
                raise SchedulerError(
                    f"the Temporal server has not answered for {SERVER_GONE_S:g} s about {wid} "
                    f"({exc.message}); its sessions go on on the workers: run the same command again "
                    "once the server is back, and it awaits them"
                ) from None
        await asyncio.sleep(1.0)


async def _connect(address: str, options: Mapping[str, Any], timeout_s: float = CONNECT_TIMEOUT_S) -> Client:
    """A client of the server at `address` (`options`: connection.connect_options), tried again
    until `timeout_s` while the server is not up; a TLS failure is said at once (waiting mends none)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await Client.connect(address, **options)
        except RuntimeError as exc:  # the server is not up yet, or not there
            tls = tls_error(exc)
            if tls is not None:
                raise ConfigError(f"cannot connect to the Temporal server at {address}: {tls}") from None
            if time.monotonic() > deadline:
                raise ConfigError(
                    f"cannot reach the Temporal server at {address} ({connect_error(exc)}) after "
                    f"{timeout_s:g} s: start it, or run with --engine inprocess (the engine is "
                    "saved with the project) to run the sessions here"
                ) from None
            await asyncio.sleep(0.5)


def engine_runners(
    engine: Engine,
    project: Path,
    local_runners: RunnerFactory,
    host: Host,
    git_remote: str | None = None,
    git_serve: str | None = None,
) -> RunnerFactory:
    """The run's runner factory on `engine`: sessions on its workers, through the exchange at
    `git_remote` (None: a bare repository in the project's log folder, served with `git daemon`
    at `git_serve` when given, for workers on other machines). For `temporal://local` a
    dev server (its database in the project's log folder) and one worker in this process, with the
    local runner and this machine's `host`, are started for the run and stopped after it. A server
    of one's own is reached with this process's Temporal settings (TLS, API key: connection.py);
    the dev server, plainly."""

    @contextmanager
    def opened(echo: Echo, log_dir: Path) -> Iterator[SessionRunner]:
        options = {} if engine.local else connect_options(os.environ)
        log_dir.mkdir(parents=True, exist_ok=True)
        options["runtime"] = logged_runtime(log_dir / CLIENT_LOG)
        server: AbstractContextManager[str] = (
            dev_server(log_dir) if engine.local else nullcontext(engine.address or "")
        )
        remote = git_remote or str(exchange.ensure_exchange(project / LOG_DIR / EXCHANGE))
        exchange.check(remote)
        serving: AbstractContextManager[str] = (
            gitdaemon.served(Path(remote), git_serve, log_dir / GIT_DAEMON_LOG)
            if git_serve
            else nullcontext(remote)
        )
        loop = EngineLoop()
        try:
            with serving as reached, server as address:
                client = loop.call(_connect(address, options))
                echo(f"Engine: Temporal at {address} ({engine}); sessions run on its workers")
                echo(f"Exchange: {reached}" + (f" (served from {remote})" if reached != remote else ""))
                with local_runners(echo, log_dir) as local:
                    worker = None
                    if engine.local:
                        places = Places(project.parent, workdirs.root_of(project), "-local")
                        worker = loop.submit(work(client, local, "local", places, host, echo))
                    runner = TemporalRunner(loop, client, project_id(project), remote, echo, local, reached)
                    try:
                        yield runner
                    finally:
                        runner.stop()  # what is still running elsewhere (one lane's Ctrl-C leaves run at once)
                        if worker is not None:
                            worker.cancel()
                            with suppress(CancelledError):  # a cancelled worker ends with its cancellation
                                worker.result(30)
        finally:
            loop.close()

    return opened
