"""`--notify COMMAND`: run a person's command on the events they care about, never in the run's way.

The command runs through `sh -c` with the event as one JSON object on its standard input, in a
session of its own, its output appended to `.agent_logs/notify.log`. Starting it is all the run
waits for: the event is far smaller than a pipe's buffer, so writing it never blocks, and a
command still running after `TIMEOUT_S` is killed by a watcher thread. A command that fails
or cannot start is noted once on the console and in the log; the run goes on.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from session_scheduler.core.layout import LOG_DIR
from session_scheduler.store.events import NOTIFY_KINDS, Event
from session_scheduler.view import digest

TIMEOUT_S = 60.0
MAX_EVENT_BYTES = 16_384
"""Well under a pipe's buffer (64 KiB on Linux), so the write cannot block."""


def wanted(event: Event) -> bool:
    """The events a person is told about: the run's end (done, halted, a limit), a blocked
    feature, a spent budget, a usage-limit wait and the resumption after it or a restart."""
    if event["kind"] not in NOTIFY_KINDS:
        return False
    if event["kind"] == "limit_wait":
        return bool(event.get("why") == "usage_limit")
    if event["kind"] == "resumed":
        return bool(event.get("cause") in ("usage_limit", "interrupted"))
    return True


class Notifier:
    """An event listener that starts `command` for each wanted event."""

    def __init__(
        self, command: str, project: Path, warn: Callable[[str], None], *, timeout_s: float = TIMEOUT_S
    ) -> None:
        self.command = command
        self.project = project
        self.log = project / LOG_DIR / "notify.log"
        self._warn = warn
        self._timeout_s = timeout_s
        self._warned = False
        self.started: list[subprocess.Popen[bytes]] = []

    def __call__(self, event: Event) -> None:
        if not wanted(event):
            return
        extra = (
            {"digest": digest.lines(digest.digest_of(self.project))} if event["kind"] == "run_ended" else {}
        )
        data = (
            json.dumps({**event, "project": str(self.project), **extra}).encode("utf-8")[:MAX_EVENT_BYTES]
            + b"\n"
        )
        try:
            self.log.parent.mkdir(parents=True, exist_ok=True)
            with self.log.open("ab") as out:
                out.write(f"--- {event['kind']}: {self.command}\n".encode())
                out.flush()
                child = subprocess.Popen(
                    ["/bin/sh", "-c", self.command],
                    stdin=subprocess.PIPE,
                    stdout=out,
                    stderr=out,
                    start_new_session=True,
                )
        except OSError as exc:
            self._problem(f"--notify could not start: {exc}")
            return
        self.started.append(child)
        try:
            assert child.stdin is not None
            child.stdin.write(data)
            child.stdin.close()
        except OSError:  # the command did not read its input: its business
            pass
        threading.Thread(target=self._watch, args=(child,), daemon=True).start()

    def _watch(self, child: subprocess.Popen[bytes]) -> None:
        try:
            code = child.wait(timeout=self._timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(child.pid, signal.SIGKILL)
            self._problem(f"--notify command still running after {self._timeout_s:.0f} s; stopped it")
            return
        if code != 0:
            self._problem(f"--notify command exited with {code} (its output is in {LOG_DIR}/notify.log)")

    def _problem(self, line: str) -> None:
        if not self._warned:
            self._warned = True
            self._warn(f"  WARNING: {line}; the run goes on")
