"""Worker processes standing in for hosts (`autonomous_agent_demo.py worker`, each with a folder of
its own) and the environment the product's processes run in against the scripted model: shared by
the end-to-end tests of the engine and of the lanes (tests/test_engine_e2e.py, tests/test_lanes_e2e.py)
and their benchmarks (bench/engine.py, bench/lanes.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TypeVar

from scripted_model.hermetic import hermetic_env

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
CONNECT_TIMEOUT_S = 60.0


def product_env(tmp: Path, name: str) -> dict[str, str]:
    """A process's environment: a home of its own under `tmp`, no real endpoint, projects under
    `tmp`/generations, its output unbuffered."""
    env = hermetic_env("http://127.0.0.1:9", tmp / f"{name}-home", max_retries=0)
    env["AGENT_GENERATIONS_DIR"] = str(tmp / "generations")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_command(
    project: Path, scenario: Path, lanes: int | None, address: str | None, *more: str
) -> list[str]:
    """The scheduler's command line on the scripted model (from any folder): `lanes` lanes (None:
    no `--lanes`, the project's saved count), the sessions on the workers of the server at
    `address` (None: in the scheduler's own process), `more` options."""
    engine = ["--engine", f"temporal://{address}"] if address else []
    return [
        sys.executable,
        str(REPO / "autonomous_agent_demo.py"),
        "--project-dir",
        str(project),
        "--offline-demo",
        "--scenario",
        str(scenario),
        *(["--lanes", str(lanes)] if lanes is not None else []),
        *more,
        *engine,
    ]


def wait_for(condition: Callable[[], T], what: str, timeout: float, every: float = 0.02) -> T:
    """`condition()`'s value once it holds (checked every `every` seconds); TimeoutError naming
    `what` if it still does not after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)
    return value


class Host:
    """A worker process standing in for a host: its own folder, its own output file; at most
    `sessions` sessions at once (None: the worker's default)."""

    def __init__(
        self, tmp: Path, name: str, address: str, scenario: Path, sessions: int | None = None
    ) -> None:
        self.tmp, self.name, self.address, self.scenario = tmp, name, address, scenario
        self.sessions = sessions
        self.folder = tmp / name
        self.output = self.folder / "worker.out"
        self.proc: subprocess.Popen[bytes] | None = None
        self._out: IO[bytes] | None = None

    def start(self) -> None:
        self.folder.mkdir(exist_ok=True)
        if self._out is not None:  # started again (after a kill)
            self._out.close()
        self._out = self.output.open("ab")
        command = [
            sys.executable,
            "autonomous_agent_demo.py",
            "worker",
            "--engine",
            f"temporal://{self.address}",
            "--host",
            self.name,
            "--offline-demo",
            "--scenario",
            str(self.scenario),
            "--work-dir",
            str(self.folder),
        ]
        if self.sessions is not None:
            command += ["--sessions", str(self.sessions)]
        self.proc = subprocess.Popen(
            command,
            cwd=REPO,
            env=product_env(self.tmp, self.name),
            stdout=self._out,
            stderr=subprocess.STDOUT,
        )
        wait_for(
            lambda: f"Worker {self.name}" in self.text(), f"worker {self.name} connected", CONNECT_TIMEOUT_S
        )

    def text(self) -> str:
        return self.output.read_text(errors="replace") if self.output.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._out is not None:
            self._out.close()
            self._out = None
