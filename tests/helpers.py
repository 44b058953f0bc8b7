"""Small builders shared by the tests: a session request, an injected runner factory, the
one way a test waits for something to happen (`wait_until`; no test sleeps a fixed time), and
headless Chromium on a local page (`find_chromium`, `browse`)."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import random
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from html import unescape
from pathlib import Path
from typing import Any, TypeVar

import pytest

from scripted_model.scenario import Scenario
from session_scheduler.core.config import AgentConfig, SessionType
from session_scheduler.core.machine import Backlog, Lane, SessionState, feature
from session_scheduler.guard.sandbox import Host
from session_scheduler.repo.adoption import NONE
from session_scheduler.run.agent import SessionRequest, SessionRunner
from session_scheduler.run.plan import plan_session, write_plan
from session_scheduler.run.runners import RunnerFactory
from session_scheduler.store.records import Records
from session_scheduler.testing.seams import active_sandbox

T = TypeVar("T")


def wait_until(condition: Callable[[], T], what: str, timeout: float = 30.0, every: float = 0.02) -> T:
    """Wait for `condition()` to hold and return its value: as soon as it holds, checked every
    `every` seconds; the test fails naming `what` if it still does not hold after `timeout`.
    For what gives no event to wait on (a file appearing, a process showing up in /proc)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


def state_for(role: SessionType, feature_id: str = "F001", **lane: object) -> SessionState:
    """A state whose next session is `role` on one feature (none for INITIALIZER / ARCHITECTURE)."""
    work = (
        feature(feature_id) if role in (SessionType.IMPLEMENT, SessionType.REVIEW, SessionType.FIX) else None
    )
    return SessionState(Backlog((feature_id,)), Lane(role, work, **lane))  # type: ignore[arg-type]


MACHINE = Host.of(os.environ)
"""The machine the tests run on, as a run reads it at its edge (what every session's sandbox hides)."""


def request_for(project: Path, state: SessionState, config: AgentConfig | None = None) -> SessionRequest:
    """A session's request in `project` as one lane plans it: this machine, no brief, nothing
    spent, no outage, no adopted conventions (each stated: `plan_session` has no defaults)."""
    plan = plan_session(
        state,
        config or AgentConfig(),
        project,
        spent_usd=0.0,
        brief="",
        host=MACHINE,
        outage_s=0.0,
        adopted=NONE,
    )
    return SessionRequest(plan, project, write_plan(plan, project), project / "log", Records(project))


def factory_of(
    make: Callable[[Scenario | None], SessionRunner],
) -> Callable[[Scenario | None], RunnerFactory]:
    """Runner factories as the CLI builds them (the offline scenario, or None, bound in), each
    building the given runner."""

    def runners(scenario: Scenario | None) -> RunnerFactory:
        def factory(echo: Callable[[str], None], log_dir: Path) -> AbstractContextManager[SessionRunner]:
            @contextmanager
            def opened() -> Iterator[SessionRunner]:
                yield make(scenario)

            return opened()

        return factory

    return runners


def logged_in() -> str | None:
    """A credentials check stand-in: Claude Code has credentials."""
    return None


def cli_seams(make: Callable[[Scenario | None], SessionRunner]) -> dict[str, object]:
    """What tests hand the CLI (click's obj): the given runner, a sandbox preflight stand-in and
    a credentials check that finds some."""
    return {"runners": factory_of(make), "preflight": active_sandbox, "credentials": logged_in}


def sh(where: Path, command: str) -> str:
    """A bash command in `where` (a test's own git set-up): its output, stripped; fails loudly."""
    return subprocess.run(
        ["bash", "-c", command], cwd=where, check=True, capture_output=True, text=True
    ).stdout.strip()


class Listener:
    """An HTTP server on the host's loopback that counts the requests it got (and answers `reached`)."""

    def __init__(self) -> None:
        self.hits = 0
        listener = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                listener.hits += 1
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"reached")

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]


@contextmanager
def listening() -> Iterator[Listener]:
    """A Listener, served from a thread for as long as the block runs."""
    served = Listener()
    thread = threading.Thread(target=served.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        served.server.shutdown()
        served.server.server_close()


def running(mark: str) -> list[str]:
    """The processes whose command line holds `mark` (arguments are NUL-separated there)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if mark in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                found.append(pid)
    return found


def group_alive(pgid: int) -> bool:
    """Whether any process of the process group is left."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def find_chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("REQUIRE_CHROMIUM") == "1":
            pytest.fail("REQUIRE_CHROMIUM=1 but no chromium on PATH: apt-get install chromium")
        pytest.skip("no chromium on PATH (set REQUIRE_CHROMIUM=1 to make this a failure)")
    return found


def browse(chromium: str, tmp: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """Headless Chromium on a local file, with every host name unresolvable (nothing leaves the machine)."""
    profile = tmp / f"profile{len(list(tmp.glob('profile*')))}"
    command = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={profile}",
        *args,
    ]
    env = {**os.environ, "HOME": str(tmp)}
    return subprocess.run(command, capture_output=True, timeout=60, check=True, env=env)


def require_runtime() -> str:
    """The sandbox runtime `srt`: the tests that need it skip without it, unless
    REQUIRE_SANDBOX_RUNTIME=1 (CI) makes its absence a failure."""
    from session_scheduler.guard import command_sandbox
    from session_scheduler.guard.command_sandbox import SandboxUnavailable

    try:
        return command_sandbox.find_runtime()
    except SandboxUnavailable as exc:
        if os.environ.get("REQUIRE_SANDBOX_RUNTIME") == "1":
            pytest.fail(f"REQUIRE_SANDBOX_RUNTIME=1 but {exc}")
        pytest.skip(f"{exc} (set REQUIRE_SANDBOX_RUNTIME=1 to make this a failure)")


def require_boxed_browser() -> None:
    """srt and Debian's chromium, for REVIEW's browser box: skipped without them, unless
    REQUIRE_SANDBOX_RUNTIME=1 / REQUIRE_CHROMIUM=1 makes their absence a failure."""
    from session_scheduler.guard import browser_box

    require_runtime()
    if not os.access(browser_box.CHROMIUM, os.X_OK):
        if os.environ.get("REQUIRE_CHROMIUM") == "1":
            pytest.fail(f"REQUIRE_CHROMIUM=1 but no {browser_box.CHROMIUM}: apt-get install chromium")
        pytest.skip(f"no {browser_box.CHROMIUM} (set REQUIRE_CHROMIUM=1 to make this a failure)")


PROBE = """<script>
window.addEventListener("load", () => {
  const out = {
    shots: [...document.querySelectorAll("img.evidence")].map(i => [i.getAttribute("src"), i.naturalWidth, i.alt, i.getBoundingClientRect().width]),
    text: document.getElementById("evidence").innerText,
    errors: [...document.querySelectorAll("pre.console .err")].map(e => e.textContent),
  };
  const pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def probe_report(chromium: str, tmp: Path, report: Path) -> dict[str, Any]:
    """The written report, opened where it lies (a copy beside it with a probe script) in Chromium."""
    probe = report.with_name("probe.html")
    probe.write_text(
        report.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8"
    )
    dom = browse(chromium, tmp, "--virtual-time-budget=5000", "--dump-dom", probe.as_uri()).stdout.decode()
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    seen: dict[str, Any] = json.loads(unescape(found.group(1)))
    return seen


class SkippingClock:
    """Real time, except that a sleep skips ahead instead of sleeping: the scripted model sets a
    usage limit's reset from the real clock, so the wait is measured against it however slow
    the machine is. `before_sleep`, when given, runs before each sleep (what happens meanwhile)."""

    def __init__(self, before_sleep: Callable[[], None] | None = None) -> None:
        self.skipped, self.sleeps = 0.0, list[float]()
        self.before_sleep = before_sleep
        self.lock = threading.Lock()

    def now(self) -> float:
        return time.time() + self.skipped

    def sleep(self, seconds: float) -> None:
        with self.lock:  # lanes sleep from several threads
            if self.before_sleep is not None:
                self.before_sleep()
            self.sleeps.append(seconds)
            self.skipped += seconds

    def monotonic(self) -> float:
        return time.monotonic() + self.skipped

    def random(self) -> float:
        return random.random()


def short_tmp() -> Iterator[Path]:
    """A test's folder with a short path: a Unix socket made under it (srt's bridges in a private
    temp, the app box's socket) stays under sun_path's 108 bytes wherever pytest keeps its own
    folders (pytest-xdist adds `popen-gwN/`). Used as the `tmp_path` of the sandbox tests."""
    path = Path(tempfile.mkdtemp(prefix="t-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def begun_on(log: list[dict[str, Any]], start: dict[str, Any], need: str) -> bool:
    """Whether the session `start` (its `session_started` event in the event log `log`) began on
    a `main` that holds feature `need`: `need` landed before it, or the same lane's REVIEW had
    approved `need` before it, and nothing sent it back or held it since (a lane goes on from
    its own approved merge while that waits to land as it is)."""
    before = log[: log.index(start)]
    if any(e["kind"] == "merge_verified" and e.get("feature") == need for e in before):
        return True
    reviews = {
        e["session"]: e.get("lane")
        for e in before
        if e["kind"] == "session_started" and e["role"] == "REVIEW" and e.get("feature") == need
    }
    passed = [
        n
        for n, e in enumerate(before)
        if e["kind"] == "verdict"
        and e.get("feature") == need
        and e["verdict"] == "PASS"
        and reviews.get(e["session"], -1) == start.get("lane")
    ]
    if not passed:
        return False
    after = before[passed[-1] :]
    return not any(e["kind"] in ("sent_back", "held") and e.get("feature") == need for e in after)
