"""The robot agent behind the scripted model server, and the offline environment for a run."""

from __future__ import annotations

import re
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from scripted_model.hermetic import gateway_token, sdk_env
from scripted_model.protocol import Fault, Reply, Turn
from scripted_model.robot import Ctx, next_step
from scripted_model.scenario import DEMO, Scenario
from scripted_model.server import ScriptedModelServer

_ROLE = re.compile(r"^# YOUR ROLE - ([A-Z]+) AGENT$", re.MULTILINE)
_SESSION = re.compile(r"\bSession (\d+)\b")


class RobotBrain:
    """Answers each request of the real CLI with the robot's next tool calls, or a fault.

    Safe to call from several threads at once (the server's, one per request): the role, the
    session and the conversation come from each request, and the one thing kept (how many
    requests each session has made, for the scenario's HTTP faults) is counted under a lock.
    """

    def __init__(self, scenario: Scenario, sleep: Callable[[float], None] = time.sleep) -> None:
        self.scenario = scenario
        self.sleep = sleep
        self._requests: Counter[int] = Counter()
        self._lock = threading.Lock()

    def role_of(self, turn: Turn) -> str | None:
        match = _ROLE.search(turn.system) or _ROLE.search(turn.first_user_text())
        return match.group(1) if match else None

    def session_of(self, turn: Turn) -> int:
        match = _SESSION.search(turn.first_user_text())
        return int(match.group(1)) if match else 0

    def respond(self, turn: Turn) -> Reply | Fault:
        role = self.role_of(turn)
        if role is None:
            return Reply(text="I was given no role; there is nothing for me to do.")
        session = self.session_of(turn)
        with self._lock:
            self._requests[session] += 1
            count = self._requests[session]
        for fault in self.scenario.http_faults(session):
            if fault.request <= count < fault.request + fault.times:
                reset = int(time.time()) + fault.reset_in_seconds
                return Fault(fault.kind, reset_epoch=reset)  # type: ignore[arg-type]
        results = [exchange.result for exchange in turn.exchanges()]
        step = next_step(role, Ctx(session, self.scenario), results)
        self.sleep(self.scenario.turn_latency_s)  # a real model thinks (the server serves sessions at once)
        if isinstance(step, str):
            return Reply(text=step)
        return Reply(text="", tool_calls=tuple(step))


def robot_server(scenario: Scenario, log_path: Path | None = None) -> ScriptedModelServer:
    """The scripted model server for the robot: concurrent sessions (lanes) are answered at once,
    each taking its own turn latency, not one after another."""
    return ScriptedModelServer(RobotBrain(scenario), log_path=log_path, serialize_brain=False)


@contextmanager
def offline_environment(
    scenario_path: Path | None = None,
    *,
    scenario: Scenario | None = None,
    log_path: Path | None = None,
    max_retries: int = 2,
    api_timeout_ms: int | None = 20000,
) -> Iterator[dict[str, str]]:
    """Run the scripted model on loopback; yield the CLI environment that points at it."""
    chosen = scenario or (Scenario.load(scenario_path) if scenario_path else DEMO)
    with (
        tempfile.TemporaryDirectory(prefix="agent-offline-", ignore_cleanup_errors=True) as home,
        robot_server(chosen, log_path) as server,
    ):
        # A gateway-style token rather than an API key: with it the CLI reads the usage-limit
        # headers, so a scripted usage limit looks to the scheduler like a real one.
        env = sdk_env(server.base_url, Path(home), max_retries=max_retries, auth_token=gateway_token())
        if api_timeout_ms is not None:
            env["API_TIMEOUT_MS"] = str(api_timeout_ms)
        yield env
