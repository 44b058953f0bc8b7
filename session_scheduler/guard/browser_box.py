"""REVIEW's browser: @playwright/mcp (pinned in package.json) and a headless Chromium, started by the
scheduler in an srt box of its own that reaches only the app and writes only the session's evidence
folder; its MCP endpoint is on the host's loopback.

The box has the app box's rules (guard/app_box: scrubbed environment, no home folders, Unix sockets
allowed so /run hidden, no user namespaces) with NO allowed domain at all, and writes only
`evidence` (its `--output-dir`: screenshots land there) and its private temp (HOME, Chromium's
profile, and its working folder: outside the project, so what stops a session's leftovers there
never takes the box for one). Two bridges run in it: `127.0.0.1:APP_PORT` -> the app box's Unix socket (the one way
out: APP_ORIGIN is the app), and the server's socket in the private temp -> its port inside, which a
host forwarder serves on a free 127.0.0.1 port. The server serves BROWSER_TOOLS and nothing else
(browser_server.cjs prunes its table: `--caps` cannot remove core tools in 0.0.83).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from session_scheduler.core.errors import SchedulerError
from session_scheduler.guard import app_box, command_sandbox, mcp_client
from session_scheduler.guard.app_box import Forwarder, RunningApp

CHROMIUM = "/usr/bin/chromium"
"""Debian's chromium (`apt-get install chromium`): @playwright/mcp downloads no browser."""
LAUNCHER = Path(__file__).with_name("browser_server.cjs")
NODE_PACKAGES: tuple[str, ...] = ("@playwright/mcp", "playwright", "playwright-core")
"""What the server reads of the scheduler's node_modules (re-opened in the box, read-only)."""
APP_PORT = 8000
APP_ORIGIN = f"http://127.0.0.1:{APP_PORT}"
"""The app, as the browser in the box reaches it."""
SERVER_PORT = 8931
"""The MCP server's port inside the box."""
CHROMIUM_SOCKET = "org.chromium.Chromium.XXXXXX/SingletonSocket"
"""Chromium's own socket in its TMPDIR: it aborts when the path does not fit a Unix socket."""
SOCKET_NAME = "mcp.sock"
"""In the private temp: the server's bridge, which the host forwarder connects to."""
BROWSER_TOOLS: tuple[str, ...] = (
    "browser_navigate",
    "browser_navigate_back",
    "browser_snapshot",
    "browser_click",
    "browser_type",
    "browser_press_key",
    "browser_wait_for",
    "browser_take_screenshot",
    "browser_console_messages",
    "browser_close",
)
"""The tools REVIEW may use: the only ones the server lists or runs."""
FORBIDDEN_TOOLS: tuple[str, ...] = (
    "browser_evaluate",
    "browser_run_code_unsafe",
    "browser_file_upload",
    "browser_drop",
    "browser_webmcp_call",
    "browser_route",
    "browser_set_storage_state",
    "browser_pdf_save",
    "browser_start_tracing",
    "browser_install",
)
"""Tools of @playwright/mcp 0.0.83 that run code, read files or change the network: never served
(the last ones are behind capabilities it is not given, or gone from this version)."""
SRT_MOUNT_POINTS = frozenset(
    {".gitconfig", ".gitmodules", ".bashrc", ".bash_profile", ".zshrc", ".zprofile", ".profile", ".ripgreprc"}
    | {".mcp.json", ".vscode", ".idea", ".claude"}
)
"""What srt (0.0.83) makes, empty, in every writable folder to mount its write-protected files on;
they stay after the box: removed on stop when new and still empty."""
READY_TIMEOUT_S = 90.0
"""Until the server lists its tools (node and Chromium starting on a busy machine)."""
POLL_S = 0.2


def readiness(which: Callable[[str], str | None] = shutil.which) -> tuple[bool, str]:
    """Whether a web REVIEW's browser can start here (Chromium, node, the server's packages): what
    `--check` says. Not having it stops only the REVIEW of a web feature in a project with an app."""
    modules = command_sandbox.SCHEDULER_DIR / "node_modules"
    missing = [
        *([] if os.access(CHROMIUM, os.X_OK) else [f"{CHROMIUM} (apt-get install chromium)"]),
        *([] if which("node") else ["node (apt-get install nodejs)"]),
        *(
            f"{name} (npm ci in {command_sandbox.SCHEDULER_DIR})"
            for name in NODE_PACKAGES
            if not (modules / name).is_dir()
        ),
    ]
    if missing:
        return (
            False,
            f"REVIEW's browser cannot start here: missing {', '.join(missing)}; web features' REVIEWs would stop the run",
        )
    version = json.loads((modules / "@playwright/mcp" / "package.json").read_text(encoding="utf-8")).get(
        "version"
    )
    return True, f"REVIEW's browser can start: {CHROMIUM} and @playwright/mcp {version}"


class BrowserDidNotStart(SchedulerError):
    """The browser's server or its browser did not come up: reported as such, never as a pass."""

    def __init__(self, reason: str, log_tail: str) -> None:
        super().__init__(f"{reason}; the end of its log:\n{log_tail}" if log_tail.strip() else reason)
        self.reason = reason
        self.log_tail = log_tail


class RunningBrowser(RunningApp):
    """The browser's server that answered: `url` (its MCP endpoint on the host's loopback),
    `app_origin` (the app, as the browser reaches it), `evidence`, `log`; `stop()` ends the box
    whole and clears the mount points srt left in the evidence folder."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        url: str,
        log: Path,
        forwarder: Forwarder,
        work: tempfile.TemporaryDirectory[str] | None,
        *,
        app_origin: str,
        evidence: Path,
        found: frozenset[str],
    ) -> None:
        super().__init__(proc, url, log, forwarder, work)
        self.app_origin = app_origin
        self.evidence = evidence
        self._found = found
        """What the evidence folder held before the box started."""

    def stop(self) -> None:
        super().stop()
        for name in sorted(set(os.listdir(self.evidence)) - self._found):
            if name in SRT_MOUNT_POINTS:
                _remove_if_empty(self.evidence / name)


def _remove_if_empty(path: Path) -> None:
    """Remove `path` when it is an empty file or a folder of empty folders (a mount point)."""
    if path.is_symlink():
        return
    if path.is_dir():
        for inner in path.iterdir():
            _remove_if_empty(inner)
        with contextlib.suppress(OSError):
            path.rmdir()
    elif path.is_file() and path.stat().st_size == 0:
        path.unlink()


def server_args(evidence: Path, executable: str, host_port: int, port: int = SERVER_PORT) -> list[str]:
    """The server's command line after `node LAUNCHER`: headless, profile in memory, Chromium's own
    sandbox off (the box is the sandbox, and it may make no user namespace), no WebMCP tools pages
    register, only the host name the forwarder is reached by. Each MCP session has its own page."""
    return [
        "--headless",
        "--isolated",
        "--no-sandbox",
        "--no-webmcp",
        "--executable-path", executable,
        "--output-dir", str(evidence),
        "--host", "127.0.0.1",
        "--port", str(port),
        "--allowed-hosts", f"127.0.0.1:{host_port}",
    ]  # fmt: skip


def boxed_command(
    app: str,
    sock: Path,
    evidence: Path,
    executable: str,
    host_port: int,
    ports: tuple[int, int] = (APP_PORT, SERVER_PORT),
) -> str:
    """The box's script: the bridge to the app (`app`, socat's address of it: its box's socket), the
    server's bridge out, then the server (`ports`: the app's and the server's inside the box)."""
    app_port, server_port = ports
    to_app = shlex.quote(f"TCP-LISTEN:{app_port},bind=127.0.0.1,fork,reuseaddr")
    app = shlex.quote(app)
    server = shlex.join(["node", str(LAUNCHER), *server_args(evidence, executable, host_port, server_port)])
    return f"socat {to_app} {app} 2>/dev/null &\n{app_box.bridge_out(sock, server_port)}\nexec {server}\n"


def box_profile(evidence: Path, private_tmp: Path, app_socket: Path) -> command_sandbox.Profile:
    """Writes `evidence` and the private temp only; reads the server's packages and the app's
    socket besides what every sandboxed command reads; no domain allowed."""
    base = command_sandbox.host_profile(evidence, private_tmp, evidence, ())
    modules = command_sandbox.SCHEDULER_DIR / "node_modules"
    reads = (str(LAUNCHER), *(str(modules / name) for name in NODE_PACKAGES), str(app_socket))
    return app_box.with_unix_sockets(base, writable=(str(evidence),), read_only=reads)


def start_browser(
    app_socket: Path | None,
    evidence: Path,
    private_tmp: Path,
    log: Path,
    *,
    sandboxed: bool = True,
    executable: str = CHROMIUM,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    app_port: int | None = None,
) -> RunningBrowser:
    """Start the browser's server in its box, reaching the app behind `app_socket` (RunningApp's
    `socket_path`), and wait until it lists its tools and its browser opens the app;
    BrowserDidNotStart (the reason and the log's tail) otherwise, with nothing of it left running.
    `sandboxed=False` (the project's --no-sandbox) runs the same script without srt, reaching an
    unconfined app (no socket) at `app_port` on the host's loopback."""
    if app_socket is None and (sandboxed or app_port is None):
        raise BrowserDidNotStart("the app has no socket for the browser's box to reach it by", "")
    evidence.mkdir(parents=True, exist_ok=True)
    found = frozenset(os.listdir(evidence))
    private_tmp.mkdir(parents=True, exist_ok=True)
    sock = private_tmp / SOCKET_NAME
    app_box.check_socket_path(private_tmp / CHROMIUM_SOCKET)  # the longer of the two
    forwarder = Forwarder(sock, "browser-forwarder")
    ports = (APP_PORT, SERVER_PORT) if sandboxed else (app_box.free_port(), app_box.free_port())
    target = f"UNIX-CONNECT:{app_socket}" if app_socket is not None else f"TCP:127.0.0.1:{app_port}"
    command = boxed_command(target, sock, evidence, executable, forwarder.port, ports)
    env = {"BROWSER_TOOLS": json.dumps(list(BROWSER_TOOLS))}
    with log.open("wb") as sink:
        if sandboxed:
            assert app_socket is not None
            profile = box_profile(evidence, private_tmp, app_socket)
            proc, work = app_box.spawn_bridged(command, private_tmp, profile, forwarder, sink, env)
        else:
            proc, work = _spawn_unconfined(command, evidence, private_tmp, forwarder, sink, env), None
    url = f"http://127.0.0.1:{forwarder.port}/mcp"
    browser = RunningBrowser(
        proc,
        url,
        log,
        forwarder,
        work,
        app_origin=f"http://127.0.0.1:{ports[0]}",
        evidence=evidence,
        found=found,
    )
    try:
        _wait_until_it_serves(browser, clock, sleep)
        _open_the_app(browser)
    except BaseException:
        browser.stop()
        raise
    return browser


def _spawn_unconfined(
    command: str,
    evidence: Path,
    private_tmp: Path,
    forwarder: Forwarder,
    sink: IO[bytes],
    env: dict[str, str],
) -> subprocess.Popen[bytes]:
    """The same script without srt, still with an environment built from scratch (no credentials)."""
    profile = command_sandbox.host_profile(evidence, private_tmp, evidence, ())
    scrubbed = command_sandbox.scrubbed_env(profile, os.environ.get("PATH", os.defpath))
    Path(scrubbed["HOME"]).mkdir(exist_ok=True)
    try:
        return subprocess.Popen(
            ["bash", "-c", command], cwd=private_tmp, env={**scrubbed, **env},
            stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    except BaseException:
        forwarder.close()
        raise


def _wait_until_it_serves(
    browser: RunningBrowser, clock: Callable[[], float], sleep: Callable[[float], None]
) -> None:
    deadline = clock() + READY_TIMEOUT_S
    last = "no answer"
    while True:
        code = browser.proc.poll()
        if code is not None:
            raise BrowserDidNotStart(
                f"the browser's server exited with code {code} before it answered",
                app_box.log_tail(browser.log),
            )
        try:
            names = mcp_client.run(lambda: mcp_client.tool_names(browser.url, timeout=10))
        except Exception as exc:  # not listening yet, or answering garbage: both mean "not yet"
            last = f"the last try said {type(exc).__name__}: {str(exc)[:200]}"
        else:
            if sorted(names) != sorted(BROWSER_TOOLS):
                raise BrowserDidNotStart(
                    f"the browser's server lists {', '.join(names)}, not exactly {', '.join(BROWSER_TOOLS)}",
                    app_box.log_tail(browser.log),
                )
            return
        if clock() >= deadline:
            raise BrowserDidNotStart(
                f"the browser's server did not list its tools within {READY_TIMEOUT_S:g}s ({last})",
                app_box.log_tail(browser.log),
            )
        sleep(POLL_S)


def _open_the_app(browser: RunningBrowser) -> None:
    """One navigation to the app: proves the browser starts in the box and reaches the app."""
    origin = browser.app_origin
    try:
        result = mcp_client.run(lambda: mcp_client.call(browser.url, "browser_navigate", {"url": origin}))
    except Exception as exc:
        raise BrowserDidNotStart(
            f"the browser's server failed on its first navigation ({type(exc).__name__}: {exc})",
            app_box.log_tail(browser.log),
        ) from exc
    if result.is_error:
        said = [
            line for line in mcp_client.text(result).splitlines() if line.strip() and not line.startswith("#")
        ]
        raise BrowserDidNotStart(
            f"the browser could not open the app at {origin}: {said[0][:300] if said else 'no reason given'}",
            mcp_client.text(result)[-app_box.LOG_TAIL :],
        )
