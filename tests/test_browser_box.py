"""REVIEW's browser in its box: the server's command line and the box's rules as data; the launcher
that serves only BROWSER_TOOLS; then a real @playwright/mcp and Chromium in srt against an app in
its own box: it opens, reads, clicks and photographs the app, writes only the evidence folder,
reaches nothing else, sees no secret, lists no forbidden tool, says when its browser does not start,
and leaves nothing running."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import Listener, listening, require_boxed_browser, wait_until

from session_scheduler.core.app import AppSpec
from session_scheduler.guard import browser_box, mcp_client
from session_scheduler.guard import command_sandbox as cs
from session_scheduler.guard.app_box import RunningApp, start_app
from session_scheduler.guard.browser_box import (
    BROWSER_TOOLS,
    FORBIDDEN_TOOLS,
    BrowserDidNotStart,
    RunningBrowser,
    start_browser,
)

# --- pure: the command line and the box as data --------------------------------------------------


def test_check_says_what_the_browser_lacks_here() -> None:
    ready, said = browser_box.readiness(which=lambda _: None)
    assert not ready and "missing" in said and "node (apt-get install nodejs)" in said
    assert "web features' REVIEWs would stop the run" in said


def test_check_says_the_browser_can_start_with_its_version(browser_sandbox: None) -> None:
    assert browser_box.readiness() == (
        True,
        "REVIEW's browser can start: /usr/bin/chromium and @playwright/mcp 0.0.83",
    )


def test_the_server_is_headless_in_memory_and_answers_only_to_its_forwarder_s_host_name() -> None:
    args = browser_box.server_args(Path("/e/evidence"), "/usr/bin/chromium", 41000)
    joined = " ".join(args)
    for flag in ("--headless", "--isolated", "--no-sandbox", "--no-webmcp"):
        assert flag in args
    assert "--executable-path /usr/bin/chromium" in joined and "--output-dir /e/evidence" in joined
    assert "--host 127.0.0.1 --port 8931" in joined and "--allowed-hosts 127.0.0.1:41000" in joined
    assert "--caps" not in args and "--allow-unrestricted-file-access" not in args


def test_the_box_s_script_bridges_to_the_app_and_out_then_runs_the_server() -> None:
    lines = browser_box.boxed_command(
        "UNIX-CONNECT:/a/tmp/app.sock", Path("/b/tmp/mcp.sock"), Path("/e"), "/usr/bin/chromium", 41000
    ).splitlines()
    assert lines[0] == (
        "socat TCP-LISTEN:8000,bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:/a/tmp/app.sock 2>/dev/null &"
    )
    assert lines[1] == "socat UNIX-LISTEN:/b/tmp/mcp.sock,fork,unlink-early TCP:127.0.0.1:8931 2>/dev/null &"
    assert lines[2].startswith(f"exec node {browser_box.LAUNCHER} --headless")
    assert len(lines) == 3


def test_the_box_writes_only_its_evidence_and_temp_reaches_no_domain_and_reads_the_app_s_socket(
    tmp_path: Path,
) -> None:
    evidence, tmp, sock = tmp_path / "evidence", tmp_path / "tmp", tmp_path / "app-tmp" / "app.sock"
    settings = cs.srt_settings(browser_box.box_profile(evidence, tmp, sock), "/rt")
    assert settings["filesystem"]["allowWrite"] == [str(evidence), str(tmp)]
    assert settings["network"] == {"allowedDomains": [], "deniedDomains": [], "allowAllUnixSockets": True}
    assert str(sock) in settings["filesystem"]["allowRead"] and "/run" in settings["filesystem"]["denyRead"]
    assert str(sock.parent) not in settings["filesystem"]["allowRead"]  # the app's temp stays hidden
    assert str(browser_box.LAUNCHER) in settings["filesystem"]["allowRead"]


def test_a_private_temp_too_deep_for_chromium_s_socket_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="too long for a Unix socket"):
        start_browser(tmp_path / "app.sock", tmp_path / "e", tmp_path / ("x" * 70), tmp_path / "log")


def test_the_allowed_and_forbidden_tools_do_not_meet() -> None:
    assert not set(BROWSER_TOOLS) & set(FORBIDDEN_TOOLS)
    assert {"browser_evaluate", "browser_run_code_unsafe", "browser_file_upload"} <= set(FORBIDDEN_TOOLS)


# --- the launcher, without a browser -------------------------------------------------------------


def _launch(tools: object, *args: str) -> subprocess.CompletedProcess[str]:
    if (
        shutil.which("node") is None
        or not (cs.SCHEDULER_DIR / "node_modules" / "@playwright" / "mcp").is_dir()
    ):
        pytest.skip("no node or no @playwright/mcp: `npm ci`")
    env = {"PATH": os.environ["PATH"], "BROWSER_TOOLS": json.dumps(tools)}
    return subprocess.run(
        ["node", str(browser_box.LAUNCHER), *args], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("tools", "says"),
    [
        (["browser_navigate", "browser_no_such_tool"], "has no browser_no_such_tool"),
        ([], "names no tool"),
        ("not a list", "names no tool"),
    ],
)
def test_the_launcher_refuses_to_start_on_a_tool_list_it_cannot_serve_exactly(
    tools: object, says: str
) -> None:
    done = _launch(tools, "--help")
    assert done.returncode == 2 and says in done.stderr and "Usage" not in done.stdout


def test_the_launcher_starts_the_pinned_server_with_the_browser_tools() -> None:
    done = _launch(list(BROWSER_TOOLS), "--version")
    assert done.returncode == 0 and "0.0.83" in done.stdout, done.stderr


# --- a real browser in its box -------------------------------------------------------------------

PAGE = b"""<!doctype html><html><head><title>Box page</title></head><body>
<h1>Hello from the boxed app</h1>
<button onclick="document.getElementById('out').textContent = 'button-was-clicked'">Press me</button>
<p id="out">not clicked yet</p>
</body></html>"""

APP = f"""\
import http.server, os
PAGE = {PAGE!r}
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(PAGE)
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""


@pytest.fixture(scope="module")
def sandbox() -> None:
    require_boxed_browser()


@pytest.fixture(scope="module")
def app(sandbox: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningApp]:
    root = tmp_path_factory.mktemp("app")
    (root / "tree").mkdir()
    (root / "tree" / "app.py").write_text(APP)
    with start_app(
        AppSpec("exec python3 app.py", ready_timeout_s=60), root / "tree", root / "tmp", root / "app.log",
        allowed_domains=(),
    ) as running:  # fmt: skip
        yield running


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it (the box's processes, seen from the host)."""
    children: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def rss_kib(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def refused(url: str) -> bool:
    port = int(url.split(":")[2].split("/")[0])
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return True
    return False


@pytest.fixture
def short(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a short path: Chromium's socket lives in the private temp made in it."""
    return tmp_path_factory.mktemp("b")


MEASURED: dict[str, float] = {}


@pytest.fixture(scope="module")
def browser(
    app: RunningApp, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RunningBrowser, list[int]]]:
    """One browser for the module (a box takes seconds on a busy machine): the scheduler's
    environment holds an API key when it starts. Yields it and its processes."""
    root = tmp_path_factory.mktemp("browser")
    assert app.socket_path is not None
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ANTHROPIC_API_KEY", "sk-ant-planted-in-the-scheduler")
        started = time.monotonic()
        running = start_browser(app.socket_path, root / "evidence", root / "tmp", root / "browser.log")
    MEASURED["start_s"] = time.monotonic() - started
    with running:
        pids = descendants(running.pid)
        MEASURED["rss_mib"] = rss_kib(pids) / 1024
        yield running, pids
    wait_until(lambda: not any(alive(pid) for pid in pids), "every process of the box to end", 30)
    assert not running.forwarding and refused(running.url)
    left = {path.name for path in running.evidence.iterdir()}
    assert any(name.endswith(".png") for name in left) and not left & browser_box.SRT_MOUNT_POINTS
    print(f"\nbrowser box: {MEASURED}")


def call(browser: RunningBrowser, *steps: tuple[str, dict[str, object]]) -> list[mcp_client.CallToolResult]:
    return mcp_client.run(lambda: mcp_client.calls(browser.url, list(steps)))


def test_the_browser_opens_reads_clicks_and_photographs_the_app(
    browser: tuple[RunningBrowser, list[int]],
) -> None:
    running, _ = browser
    started = time.monotonic()
    opened, seen = call(running, ("browser_navigate", {"url": running.app_origin}), ("browser_snapshot", {}))
    MEASURED["navigate_and_snapshot_s"] = time.monotonic() - started
    assert not opened.is_error and "Hello from the boxed app" in mcp_client.text(seen)
    ref = next(line for line in mcp_client.text(seen).splitlines() if 'button "Press me"' in line)
    target = ref.split("[ref=")[1].split("]")[0]
    evidence = running.evidence
    _, clicked, after, shot = call(
        running,
        ("browser_navigate", {"url": running.app_origin}),
        ("browser_click", {"element": "Press me button", "target": target}),
        ("browser_snapshot", {}),
        ("browser_take_screenshot", {"type": "png"}),
    )
    assert not clicked.is_error and "button-was-clicked" in mcp_client.text(after), mcp_client.text(after)
    assert not shot.is_error, mcp_client.text(shot)
    (png,) = [evidence / name for name in os.listdir(evidence) if name.endswith(".png")]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def listener() -> Iterator[Listener]:
    with listening() as served:
        yield served


def test_the_browser_reaches_nothing_but_the_app(
    browser: tuple[RunningBrowser, list[int]], listener: Listener
) -> None:
    running, _ = browser
    host, outside = call(
        running,
        ("browser_navigate", {"url": f"http://127.0.0.1:{listener.port}/"}),
        ("browser_navigate", {"url": "http://example.com/"}),
    )
    assert host.is_error and outside.is_error
    assert listener.hits == 0


def test_a_screenshot_outside_the_evidence_folder_is_not_written(
    browser: tuple[RunningBrowser, list[int]], tmp_path: Path
) -> None:
    running, _ = browser
    target = tmp_path / "escaped.png"
    results = call(
        running,
        ("browser_navigate", {"url": running.app_origin}),
        ("browser_take_screenshot", {"filename": str(target)}),
        ("browser_take_screenshot", {"filename": "../escaped-beside.png"}),
    )
    assert results[1].is_error and results[2].is_error  # the server's own check: outside its root
    assert not target.exists() and not (running.evidence.parent / "escaped-beside.png").exists()


def _shoot_into(running: RunningBrowser, root: Path, name: str) -> mcp_client.CallToolResult:
    """A screenshot named `name` from a client that declares `root` as its folder, as Claude Code
    declares its working folder: the server resolves the name there and its own check passes."""
    steps: list[tuple[str, dict[str, object]]] = [
        ("browser_navigate", {"url": running.app_origin}),
        ("browser_take_screenshot", {"filename": name}),
    ]
    return mcp_client.run(lambda: mcp_client.calls(running.url, steps, roots=[root]))[1]


def test_a_client_s_root_the_box_cannot_write_is_refused_by_the_box(
    browser: tuple[RunningBrowser, list[int]],
) -> None:
    running, _ = browser
    if cs.SCHEDULER_DIR.is_relative_to("/tmp"):  # the box has a /tmp of its own: the write lands there
        pytest.skip("a checkout under /tmp is not read-only in the box (its /tmp is the box's own)")
    name = f"escaped-{secrets.token_hex(4)}.png"
    target = cs.SCHEDULER_DIR / "tests" / name  # readable in the box, not writable
    try:
        result = _shoot_into(running, target.parent, name)
        said = mcp_client.text(result)
        assert result.is_error and "read-only file system" in said.lower(), said
        assert not target.exists()
    finally:
        target.unlink(missing_ok=True)


def test_a_client_s_root_in_a_hidden_folder_is_written_only_inside_the_box(
    browser: tuple[RunningBrowser, list[int]], tmp_path: Path
) -> None:
    """The temp folders are hidden in the box by an empty throwaway folder: the write lands there
    and goes with the box, never on the host."""
    running, _ = browser
    _shoot_into(running, tmp_path, "escaped.png")
    assert not (tmp_path / "escaped.png").exists() and not (running.evidence / "escaped.png").exists()


def test_the_box_holds_none_of_the_scheduler_s_secrets(browser: tuple[RunningBrowser, list[int]]) -> None:
    _, pids = browser
    environs = []
    for pid in pids:
        with contextlib.suppress(OSError):
            environs.append(Path(f"/proc/{pid}/environ").read_bytes())
    assert environs and not any(b"ANTHROPIC_API_KEY" in env or b"sk-ant-planted" in env for env in environs)


def test_the_server_lists_exactly_the_browser_tools(browser: tuple[RunningBrowser, list[int]]) -> None:
    running, _ = browser
    names = mcp_client.run(lambda: mcp_client.tool_names(running.url))
    assert sorted(names) == sorted(BROWSER_TOOLS)
    assert not set(names) & set(FORBIDDEN_TOOLS)
    refused_call = call(running, ("browser_evaluate", {"function": "() => 1"}))[0]
    assert refused_call.is_error and "not found" in mcp_client.text(refused_call)


def test_a_browser_that_cannot_start_is_reported_and_leaves_nothing_running(
    app: RunningApp, short: Path
) -> None:
    assert app.socket_path is not None
    before = set(descendants(1))
    with pytest.raises(BrowserDidNotStart) as caught:
        start_browser(
            app.socket_path, short / "evidence", short / "tmp", short / "browser.log",
            executable=str(short / "no-chromium-here"),
        )  # fmt: skip
    assert caught.value.reason.startswith("the browser could not open the app at http://127.0.0.1:8000")
    assert "\n" not in caught.value.reason
    mark = str(short / "evidence")
    wait_until(
        lambda: not [p for p in set(descendants(1)) - before if mark.encode() in _cmdline(p)],
        "the failed box to end",
        30,
    )


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_an_unconfined_browser_serves_the_same_tools_on_ports_of_its_own(
    app: RunningApp, short: Path
) -> None:
    assert app.socket_path is not None
    with start_browser(
        app.socket_path, short / "evidence", short / "tmp", short / "browser.log", sandboxed=False
    ) as running:
        assert running.app_origin != browser_box.APP_ORIGIN
        names = mcp_client.run(lambda: mcp_client.tool_names(running.url))
        seen = call(running, ("browser_navigate", {"url": running.app_origin}), ("browser_snapshot", {}))[1]
    assert sorted(names) == sorted(BROWSER_TOOLS) and "Hello from the boxed app" in mcp_client.text(seen)
    assert not running.forwarding and refused(running.url)


def test_the_wait_reads_the_injected_clock(app: RunningApp, short: Path) -> None:
    """The first try comes before node has even loaded the server; the clock then says time is up."""
    assert app.socket_path is not None
    now = iter([0.0, 1000.0])
    with pytest.raises(BrowserDidNotStart, match="did not list its tools within 90s") as caught:
        start_browser(
            app.socket_path, short / "evidence", short / "tmp", short / "browser.log", sandboxed=False,
            clock=lambda: next(now), sleep=lambda _: None,
        )  # fmt: skip
    assert "\n" not in caught.value.reason
