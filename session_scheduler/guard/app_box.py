"""The project's app, started by the scheduler in a box of its own: the command sandbox's rules
(scrubbed environment, no home folders, network only to the allowed domains through srt's proxy)
with its tree READ-ONLY (it writes only its private temp) and the folder where services keep their
Unix sockets hidden; waited for until it answers HTTP; its output kept in a log; stopped whole.

How it is reached: every sandboxed command has its own network namespace, so inside the box the app
listens on 127.0.0.1:INSIDE_PORT and a `socat` started in the same box bridges that port to a Unix
socket in the private temp; on the host a forwarder thread listens on a free 127.0.0.1 port the OS
chose (each app its own) and carries each connection to that socket. srt refuses Unix sockets inside
its box by default (seccomp), so the box allows them (`Profile.unix_sockets`: srt then gives
bubblewrap `--disable-userns`) and hides SOCKET_DIRS instead. Unconfined (`sandboxed=False`, the
project's --no-sandbox), the app runs with the scheduler's environment and listens on the free host
port directly: no bridge.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import shlex
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from session_scheduler.core.app import AppSpec
from session_scheduler.core.errors import SchedulerError
from session_scheduler.guard import command_sandbox
from session_scheduler.guard.command_sandbox import Profile

INSIDE_PORT = 8000
"""The app's port inside the box (each box has its own network namespace: no two apps collide)."""
SOCKET_NAME = "app.sock"
"""In the private temp: the bridge's end, which the host forwarder connects to."""
SOCKET_DIRS: tuple[str, ...] = ("/run",)
"""Where services keep their Unix sockets (D-Bus, databases, Docker; /var/run links here): hidden,
since the box may create Unix sockets."""
SOCKET_PATH_MAX = command_sandbox.SOCKET_PATH_MAX
"""Bytes of a Unix socket's path, with its terminating NUL (Linux's sun_path)."""
LOG_TAIL = 2000
"""Characters of the app's log quoted when it did not start."""
POLL_S = 0.1
PROBE_TIMEOUT_S = 5.0
"""One readiness request's own timeout."""


class AppDidNotStart(SchedulerError):
    """The app exited before it answered, or never answered: a red gate."""

    def __init__(self, reason: str, log_tail: str) -> None:
        super().__init__(f"{reason}; the end of its log:\n{log_tail}" if log_tail.strip() else reason)
        self.reason = reason
        self.log_tail = log_tail


def box_profile(tree: Path, private_tmp: Path, project: Path, allowed_domains: tuple[str, ...]) -> Profile:
    """The command sandbox's profile for `tree`, made read-only, with Unix sockets allowed and
    SOCKET_DIRS hidden."""
    base = command_sandbox.host_profile(tree, private_tmp, project, allowed_domains)
    return with_unix_sockets(base, writable=(), read_only=(str(tree),))


def with_unix_sockets(base: Profile, *, writable: tuple[str, ...], read_only: tuple[str, ...]) -> Profile:
    """`base` writing only `writable` (and its private temp), reading `read_only` too, allowed to
    make Unix sockets and so with SOCKET_DIRS hidden: the rules every box with a bridge shares."""
    return replace(
        base,
        writable=writable,
        read_only=read_only,
        denied_reads=(*base.denied_reads, *SOCKET_DIRS),
        unix_sockets=True,
    )


def check_socket_path(sock: Path) -> None:
    """ValueError when `sock` is too long for a Unix socket (SOCKET_PATH_MAX)."""
    if len(os.fsencode(sock)) >= SOCKET_PATH_MAX:
        raise ValueError(f"{sock} is too long for a Unix socket: give the box a shorter private temp")


def boxed_command(start: str, sock: Path, port: int = INSIDE_PORT) -> str:
    """What runs in the box: the bridge in the background (its connection errors while the app
    starts are not the app's log), then the app in the foreground: the box ends when the app does."""
    return f"{bridge_out(sock, port)}\n{start}\n"


def bridge_out(sock: Path, port: int) -> str:
    """The line that carries each connection to the Unix socket `sock` on to 127.0.0.1:`port` in
    the box, in the background (how the host reaches a server in the box)."""
    listen = shlex.quote(f"UNIX-LISTEN:{sock},fork,unlink-early")
    return f"socat {listen} TCP:127.0.0.1:{port} 2>/dev/null &"


def free_port() -> int:
    """A port nobody listens on now (unconfined apps only; the box's forwarder keeps its own)."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return int(probe.getsockname()[1])


class Forwarder:
    """127.0.0.1:<a port the OS chose> on the host -> the box's Unix socket; a thread accepts, a
    thread per direction carries each connection."""

    def __init__(self, sock: Path, name: str = "app-forwarder") -> None:
        self.sock = sock
        self.name = name
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._start(self._accept)

    def _start(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name=f"{self.name}-{self.port}")
        with self._lock:  # finished connections' threads are dropped: a long run keeps no list of them
            self._threads = [*(t for t in self._threads if t.is_alive()), thread]
        thread.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(str(self.sock))
            except OSError:  # the box is not listening (yet): the client sees the connection close
                client.close()
                upstream.close()
                continue
            with self._lock:
                if self._closed:
                    client.close()
                    upstream.close()
                    return
                self._open |= {client, upstream}
            self._start(self._pair, client, upstream)

    def _pair(self, client: socket.socket, upstream: socket.socket) -> None:
        back = threading.Thread(target=_carry, args=(upstream, client), daemon=True)
        back.start()
        _carry(client, upstream)
        back.join()
        with self._lock:
            self._open -= {client, upstream}
        client.close()
        upstream.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            opened, self._open = set(self._open), set()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept
        self.listener.close()
        for conn in opened:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(timeout=5)

    @property
    def alive(self) -> bool:
        with self._lock:
            return any(thread.is_alive() for thread in self._threads)


def _carry(source: socket.socket, target: socket.socket) -> None:
    """Copy one direction until its end, then pass the end on."""
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            target.sendall(data)
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


class RunningApp:
    """An app that answered: its `url` (on the host's loopback) and `log`; `stop()` ends it whole.
    Also what runs a box with a host forwarder (guard/browser_box's RunningBrowser)."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        url: str,
        log: Path,
        forwarder: Forwarder | None,
        work: tempfile.TemporaryDirectory[str] | None,
    ) -> None:
        self.proc = proc
        self.url = url
        self.log = log
        self._forwarder = forwarder
        self._work = work
        self._stopped = False

    @property
    def socket_path(self) -> Path | None:
        """In the box: the Unix socket its bridge listens on (another box, the browser's, reaches
        the app there); None unconfined."""
        return self._forwarder.sock if self._forwarder is not None else None

    @property
    def pid(self) -> int:
        """The process group of the box (srt, its helpers, bubblewrap) or of the unconfined app."""
        return self.proc.pid

    @property
    def forwarding(self) -> bool:
        """True while a thread of the host forwarder runs."""
        return self._forwarder is not None and self._forwarder.alive

    def stop(self) -> None:
        """Kill the app's whole process group (inside the box: its pid namespace goes with it) and
        the forwarder; the log stays. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        command_sandbox.kill_group(self.proc)
        if self._forwarder is not None:
            self._forwarder.close()
        if self._work is not None:
            self._work.cleanup()
            self._work = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()


def start_app(
    spec: AppSpec,
    tree: Path,
    private_tmp: Path,
    log: Path,
    *,
    allowed_domains: tuple[str, ...],
    sandboxed: bool = True,
    project: Path | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> RunningApp:
    """Start `spec.start` in `tree` (in the box unless `sandboxed=False`), its output in `log`, and
    wait until it answers; AppDidNotStart (the reason and the log's tail) when it exits first or
    does not answer within `spec.ready_timeout_s`, with nothing of it left running. `project` is
    the checkout `tree` was made from (its neighbours are hidden; `tree` itself by default). A box
    whose network bridges were late (`command_sandbox.BRIDGES_FAILED`: the app never ran) is
    started again, up to `command_sandbox.BRIDGE_TRIES` times in all."""
    for attempt in range(1, command_sandbox.BRIDGE_TRIES + 1):
        try:
            return _start_once(
                spec, tree, private_tmp, log, allowed_domains, sandboxed, project, clock, sleep
            )
        except AppDidNotStart as exc:
            if command_sandbox.BRIDGES_FAILED not in exc.log_tail or attempt == command_sandbox.BRIDGE_TRIES:
                raise
            sleep(0.5 * attempt)
    raise AssertionError("unreachable")


def _start_once(
    spec: AppSpec,
    tree: Path,
    private_tmp: Path,
    log: Path,
    allowed_domains: tuple[str, ...],
    sandboxed: bool,
    project: Path | None,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> RunningApp:
    private_tmp.mkdir(parents=True, exist_ok=True)
    forwarder: Forwarder | None = None
    work: tempfile.TemporaryDirectory[str] | None = None
    with log.open("wb") as sink:
        if sandboxed:
            sock = private_tmp / SOCKET_NAME
            check_socket_path(sock)
            profile = box_profile(tree, private_tmp, project or tree, allowed_domains)
            forwarder = Forwarder(sock)
            proc, work = spawn_bridged(
                boxed_command(spec.start, sock),
                tree,
                profile,
                forwarder,
                sink,
                {spec.port_env: str(INSIDE_PORT)},
            )
            port = forwarder.port
        else:
            port = free_port()
            proc = subprocess.Popen(
                ["bash", "-c", spec.start], cwd=tree, env={**os.environ, spec.port_env: str(port)},
                stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
    app = RunningApp(proc, f"http://127.0.0.1:{port}", log, forwarder, work)
    try:
        _wait_until_it_answers(app, port, spec, clock, sleep)
    except BaseException:
        app.stop()
        raise
    return app


def spawn_bridged(
    command: str,
    cwd: Path,
    profile: Profile,
    forwarder: Forwarder,
    sink: IO[bytes],
    extra_env: Mapping[str, str],
) -> tuple[subprocess.Popen[bytes], tempfile.TemporaryDirectory[str]]:
    """`command` started in the box of `profile` (srt's settings in a temp folder of the scheduler,
    which the caller removes on stop); the forwarder closed and that folder removed when it does
    not start."""
    work = tempfile.TemporaryDirectory(prefix="agent-box-")
    try:
        proc = command_sandbox.spawn(command, cwd, profile, Path(work.name, "settings.json"), sink, extra_env)
    except BaseException:
        forwarder.close()
        work.cleanup()
        raise
    return proc, work


def _wait_until_it_answers(
    app: RunningApp, port: int, spec: AppSpec, clock: Callable[[], float], sleep: Callable[[float], None]
) -> None:
    deadline = clock() + spec.ready_timeout_s
    last = "no answer"
    while True:
        code = app.proc.poll()
        if code is not None:
            app.stop()
            raise AppDidNotStart(f"the app exited with code {code} before it answered", log_tail(app.log))
        status = answer(port, spec.ready_path)
        if status is not None and status < 500:
            return
        if status is not None:
            last = f"the last answer was {status}"
        if clock() >= deadline:
            app.stop()
            raise AppDidNotStart(
                f"the app did not answer GET {spec.ready_path} below 500 within {spec.ready_timeout_s:g}s ({last})",
                log_tail(app.log),
            )
        sleep(POLL_S)


def answer(port: int, path: str) -> int | None:
    """The status of `GET path` on 127.0.0.1:`port` (no proxy), or None when nothing answers."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=PROBE_TIMEOUT_S)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def log_tail(log: Path) -> str:
    """The end of the app's log (LOG_TAIL characters)."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, log.stat().st_size - 4 * LOG_TAIL))
            return f.read().decode("utf-8", errors="replace")[-LOG_TAIL:]
    except OSError:
        return ""
