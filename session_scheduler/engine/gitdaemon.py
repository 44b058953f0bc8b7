"""The exchange served by the scheduler itself (`--git-serve HOST:PORT`): `git daemon` on that
address, serving the one bare repository and nothing else, for workers on other machines to fetch
from and push to (`git://HOST:PORT/exchange.git`); stopped with the run.

Nothing served needs trust: a worker checks that a session's start is what the scheduler sent, and
the scheduler that what it takes back is what the worker reported, by the commits' names carried
by the engine (exchange.py); anyone who can reach the port can only make a session fail."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from session_scheduler.core.errors import ConfigError
from session_scheduler.guard import processes, safe_git

READY_S = 10.0


@contextlib.contextmanager
def served(exchange: Path, address: str, log: Path) -> Iterator[str]:
    """Serve the bare repository `exchange` at `address` (HOST:PORT) while the block runs; the
    URL workers reach it at. `log`: where the daemon's own lines go."""
    host, _, port = address.rpartition(":")
    command = [
        "git",
        "daemon",
        "--reuseaddr",
        "--export-all",
        "--enable=receive-pack",
        "--informative-errors",
        f"--base-path={exchange.parent}",
        f"--listen={host.strip('[]')}",
        f"--port={port}",
        str(exchange),  # the only folder it serves
    ]
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        daemon = subprocess.Popen(  # it dies with the run, even on SIGKILL (a rerun serves the same port)
            processes.tied(command),
            env=_environment(),
            stdout=out,
            stderr=out,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C stops the run, which stops it last
        )
    url = f"git://{address}/{exchange.name}"
    try:
        _until_it_answers(daemon, exchange, url, log)
        yield url
    finally:
        daemon.terminate()
        try:
            daemon.wait(5)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()


def _environment() -> dict[str, str]:
    """The hardened environment of the scheduler's git, over this process's (its PATH, its HOME)."""
    return safe_git.without_location({**os.environ, **safe_git.environment()})


def _until_it_answers(daemon: subprocess.Popen[bytes], exchange: Path, url: str, log: Path) -> None:
    env = safe_git.with_setting(_environment(), "protocol.git.allow", "always")
    deadline = time.monotonic() + READY_S
    while True:
        if daemon.poll() is not None:
            said = log.read_text(errors="replace").strip().splitlines()
            raise ConfigError(
                f"cannot serve the exchange at {url.removeprefix('git://').split('/')[0]} "
                f"({said[-1] if said else 'git daemon ended'}); choose another --git-serve address"
            )
        with contextlib.suppress(subprocess.TimeoutExpired):  # something else there, which does not answer
            answered = subprocess.run(
                ["git", "ls-remote", url], env=env, capture_output=True, cwd=exchange, check=False, timeout=2
            )
            if answered.returncode == 0 and daemon.poll() is None:  # its own answer, not another's
                return
        if time.monotonic() > deadline:
            daemon.terminate()
            raise ConfigError(f"git daemon does not answer at {url} after {READY_S:g} s; see {log}")
        time.sleep(0.1)
