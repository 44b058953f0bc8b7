"""A Temporal worker (`autonomous_agent_demo.py worker --engine temporal://HOST:PORT --host NAME`):
runs the sessions of the pool's task queue with the local runner (the real CLI, its OS sandbox,
the policy hook and the hand-off tools, exactly as in the scheduler's own process), heartbeating
while each runs, each in its own clone of the lane made from the exchange (exchange.py): it shares
nothing with the scheduler but the exchange and the engine. A session's CLI dies with its worker
(run/agent.guarded_cli: PR_SET_PDEATHSIG); when its heartbeat stops, Temporal gives the session to
another worker (or to it, when it returns), which starts it again from the same start."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.worker import Worker

from session_scheduler.core.engine import TASK_QUEUE, WORKER_SESSIONS
from session_scheduler.core.errors import ConfigError
from session_scheduler.core.humane import plural
from session_scheduler.engine import exchange, wire
from session_scheduler.engine.connection import connect_error, tls_error
from session_scheduler.engine.exchange import Places
from session_scheduler.engine.workflow import NOT_RETRIED, RUN_SESSION, SessionWorkflow
from session_scheduler.guard import processes
from session_scheduler.guard.sandbox import Host
from session_scheduler.run.agent import SessionRunner

HEARTBEAT_S = 1.0
SERVER_WAIT_S = 600.0
"""How long a session's result waits for a server that does not answer (a restart) before it is
reported anyway."""
"""How often a running session's activity tells the server it is alive."""


class SessionActivity:
    """The activity: one session run by `runner` on this worker, its result returned as data once
    the server answers (`server`: whether it does; the SDK gives up reporting a result after a few
    seconds of a server away, and the session would then run again from its start). `host` names
    the worker; `machine` is what its sessions' sandboxes hide here, read at the worker's edge."""

    def __init__(
        self,
        runner: SessionRunner,
        host: str,
        places: Places,
        machine: Host,
        echo: Callable[[str], None] = print,
        server: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        self.runner, self.host, self.places, self.echo, self.server = runner, host, places, echo, server
        self.machine = machine

    @activity.defn(name=RUN_SESSION)
    async def run_session(self, job: dict[str, Any]) -> dict[str, Any]:
        info = activity.info()
        beat = asyncio.create_task(_heartbeat())  # from the start: putting a lost try back takes a moment
        try:
            request = wire.request_from_json(job["request"])
            session = f"[{self.host}] session {request.plan.number}"
            project = str(job["git"]["project"]).rsplit("-", 1)[0]  # its name, without the path's digest
            self.echo(
                f"{session} ({request.plan.role.value}) of {project} starts"
                + ("" if request.lane is None else f" in lane {request.lane}")
            )
            if info.attempt > 1:  # an earlier try's worker was lost mid-session
                self.echo(f"{session}: try {info.attempt}, from its start")
            shared = job["git"]
            remote, workflow, start = shared["remote"], str(info.workflow_id), shared["start"]
            here = await asyncio.to_thread(
                exchange.receive,
                request,
                remote,
                workflow,
                start,
                shared["project"],
                self.places,
                self.machine,
            )
            began = time.time()  # the OS's clock: processes' start times
            result = await self.runner.run(here)
            processes.stop_left_in(here.cwd, began)
            back = await asyncio.to_thread(exchange.send_back, here, remote, workflow, start)
            shutil.rmtree(here.log_dir, ignore_errors=True)  # the scheduler has it now (its clone stays)
            self.echo(f"{session} ended ({result.subtype}, {result.duration_s:.0f} s)")
            await self._until_the_server_answers(session)
        except (
            Exception
        ) as exc:  # a fault of the runner or the request is the scheduler's to see, never retried
            raise ApplicationError(
                f"{type(exc).__name__}: {exc}", type=NOT_RETRIED, non_retryable=True
            ) from exc
        finally:
            beat.cancel()
        return {"result": wire.result_to_json(result), "host": self.host, "try": info.attempt, "back": back}

    async def _until_the_server_answers(self, session: str) -> None:
        """Wait (heartbeating) until the server answers, up to SERVER_WAIT_S: a result reported to a
        server away is lost, and its session runs again."""
        if self.server is None:
            return
        deadline = time.monotonic() + SERVER_WAIT_S
        away = False
        while time.monotonic() < deadline:
            with contextlib.suppress(RPCError, RuntimeError):
                if await self.server():
                    break
            if not away:
                away = True
                self.echo(f"{session}: the Temporal server does not answer; its result waits for it")
            await asyncio.sleep(1.0)
        if away:
            self.echo(f"{session}: reporting its result")


async def _heartbeat() -> None:
    while True:
        activity.heartbeat()
        await asyncio.sleep(HEARTBEAT_S)


def worker_of(
    client: Client,
    runner: SessionRunner,
    host: str,
    places: Places,
    machine: Host,
    echo: Callable[[str], None],
    sessions: int = WORKER_SESSIONS,
) -> Worker:
    """A worker of the pool's task queue: the session workflow and its activity, at most
    `sessions` of them at once (`machine`: what its sessions' sandboxes hide here)."""
    return Worker(
        client,
        task_queue=TASK_QUEUE,
        workflows=[SessionWorkflow],
        activities=[
            SessionActivity(
                runner, host, places, machine, echo, client.service_client.check_health
            ).run_session
        ],
        identity=f"{host}@{os.getpid()}",
        max_concurrent_activities=sessions,
        # heartbeats reach the server each second (not 0.8 x the timeout): a cancellation, which comes
        # back with a heartbeat's answer, reaches the session within about a second
        max_heartbeat_throttle_interval=timedelta(seconds=HEARTBEAT_S),
    )


async def work(
    client: Client,
    runner: SessionRunner,
    host: str,
    places: Places,
    machine: Host,
    echo: Callable[[str], None],
    sessions: int = WORKER_SESSIONS,
) -> None:
    """Run a worker until cancelled (its sessions are cancelled with it: their CLIs stop); made
    in the loop it runs on. What an earlier worker's sessions left running here is stopped first."""
    left = await asyncio.to_thread(places.stop_left)
    if left:
        echo(
            f"Worker {host}: stopped {plural(len(left), 'process', 'processes')} an earlier worker's sessions left running"
        )
    await worker_of(client, runner, host, places, machine, echo, sessions).run()


async def serve(
    address: str,
    options: Mapping[str, Any],
    runner: SessionRunner,
    host: str,
    places: Places,
    machine: Host,
    echo: Callable[[str], None],
    sessions: int = WORKER_SESSIONS,
) -> None:
    """Connect to the server at `address` (`options`: connection.connect_options) and work for it,
    `sessions` at once at most, its lanes' clones and sessions' folders in `places`, its sessions'
    sandboxes built on `machine` (this host, read at the worker's edge), until cancelled."""
    try:
        client = await Client.connect(address, **options)
    except RuntimeError as exc:
        tls = tls_error(exc)
        if tls is not None:
            raise ConfigError(f"cannot connect to the Temporal server at {address}: {tls}") from None
        raise ConfigError(
            f"cannot reach the Temporal server at {address} ({connect_error(exc)}); start it or check --engine"
        ) from None
    echo(f"Worker {host} on {address}, task queue {TASK_QUEUE}, {sessions} sessions at once at most")
    await work(client, runner, host, places, machine, echo, sessions)
