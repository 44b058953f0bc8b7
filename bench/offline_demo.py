"""Benchmark: the README's offline demo, end to end, with the real Claude Code CLI.

Runs the whole demo lifecycle three times in one process run: through the real CLI against the
scripted model with the OS sandbox (as users run it), the same without it (`--no-sandbox`: the
sandbox's cost per session is the difference), and with the in-process robot (same scripts, no
CLI); prints wall time, sessions, per-role request counts and context sizes (request bytes, from
the scripted model's request log), and the ratios.

    .venv/bin/python bench/offline_demo.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from scripted_model.scenario import DEMO
from session_scheduler.core.config import AgentConfig
from session_scheduler.run.lanes import Lanes
from session_scheduler.testing.inprocess import InProcessRobotRunner

ROOT = Path(__file__).resolve().parent.parent


def run_cli(project: Path, *extra: str) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "autonomous_agent_demo.py", "--project-dir", str(project), "--offline-demo", *extra],
        cwd=ROOT,
        check=True,
        capture_output=True,
        env={**os.environ},
    )
    return time.perf_counter() - started


def run_inprocess(project: Path) -> float:
    project.mkdir()
    (project / "app_spec.txt").write_text(
        (ROOT / "session_scheduler" / "prompts" / "app_spec.txt").read_text()
    )
    started = time.perf_counter()
    config = AgentConfig(feature_count=6, test_command="bash init.sh")
    report = Lanes(project, config, InProcessRobotRunner(DEMO), echo=lambda _: None).run().run
    assert report.status == "done"
    return time.perf_counter() - started


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        cli_project, local_project = Path(tmp) / "cli", Path(tmp) / "inprocess"
        cli_s = run_cli(cli_project)
        bare_s = run_cli(Path(tmp) / "unsandboxed", "--no-sandbox")
        local_s = run_inprocess(local_project)
        state = json.loads((cli_project / ".agent_state.json").read_text())
        sessions = state["session_count"]
        log = cli_project / ".agent_logs" / "scripted_model_requests.jsonl"
        requests = [json.loads(line) for line in log.read_text().splitlines()]
        by_role: dict[str, list[int]] = defaultdict(list)
        for entry in requests:
            by_role[entry["role"] or "?"].append(entry["body_bytes"])
        print(
            f"offline demo (real CLI):  {cli_s:7.1f} s  {sessions} sessions  "
            f"{cli_s / sessions:5.2f} s/session  {len(state['backlog']['passing'])}/{len(state['backlog']['features'])} passing"
        )
        print(f"real CLI, --no-sandbox:   {bare_s:7.1f} s  {bare_s / sessions:5.2f} s/session")
        print(
            f"the OS sandbox's cost:    {(cli_s - bare_s) / sessions:+5.2f} s/session ({cli_s / bare_s:4.2f}x)"
        )
        print(f"in-process robot:         {local_s:7.1f} s  {local_s / sessions:5.2f} s/session")
        print(f"ratio real CLI / in-process: {cli_s / local_s:5.1f}x")
        print(f"model requests: {len(requests)} ({len(requests) / sessions:.1f} per session)")
        print("context per request (request body bytes) by role:")
        for role, sizes in sorted(by_role.items()):
            print(f"  {role:13} n={len(sizes):3}  mean={statistics.mean(sizes):9.0f}  max={max(sizes):9}")


if __name__ == "__main__":
    main()
