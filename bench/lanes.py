"""Verified features per hour with several lanes (the lanes loop with the in-process robot).

Runs the same spec with today's one-lane scheduler and at 2, 4 (and 8) lanes, the robot answering each turn after a latency
(a real model takes seconds; most of a session is that wait), every feature depending on the
first one (the demo app's store), the test command run on every landing. Prints, per lane count:
wall time, verified features per hour, the speed-up over one lane, sessions, redone sessions
(failed or sent back), the merge queue's median wait, and whether the same features passed
with nothing merged twice. Lanes run through the in-process robot: the real CLI's lanes are not
wired to the command line yet (issue 19), so this measures the schedule, the clones, the
outboxes and the queue, not Claude Code.

    .venv/bin/python bench/lanes.py [--lanes 1,2,4] [--features 6] [--latency 1.0]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from scripted_model.scenario import Scenario
from session_scheduler.core.config import AgentConfig
from session_scheduler.run.lanes import Lanes
from session_scheduler.run.scheduler import Scheduler
from session_scheduler.store import events
from session_scheduler.testing.inprocess import InProcessRobotRunner

SPEC = Path(__file__).resolve().parents[1] / "session_scheduler" / "prompts" / "app_spec.txt"


def one(lanes: int, features: int, latency: float) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="bench-lanes-") as tmp:
        project = Path(tmp) / "app"
        project.mkdir()
        (project / "app_spec.txt").write_text(SPEC.read_text())
        ids = [f"F{n:03d}" for n in range(1, features + 1)]
        scenario = Scenario.from_json(
            {"features": features, "depends": {f: ["F001"] for f in ids[1:]}, "turn_latency_s": latency}
        )
        config = AgentConfig(
            architecture_interval=100, feature_count=features, test_command="bash init.sh", sandbox=False
        )
        started = time.monotonic()
        if lanes == 1:  # today's scheduler: one lane, its REVIEW merges into the project's main
            Scheduler(project, config, InProcessRobotRunner(scenario), echo=lambda _: None).run()
            log = events.read(events.log_path(project))
            landed = tuple(e["feature"] for e in log if e["kind"] == "merge_verified")
            sessions, sent_back = sum(1 for e in log if e["kind"] == "session_ended"), ()
        else:
            report = Lanes(project, config, InProcessRobotRunner(scenario), lanes, echo=lambda _: None).run()
            landed, sessions, sent_back = report.landed, report.sessions, report.sent_back
        wall = time.monotonic() - started
        log = events.read(events.log_path(project))
        waits = [e["waited_s"] for e in log if e["kind"] == "merge_verified" and "waited_s" in e]
        merges = subprocess.run(
            ["git", "log", "--merges", "--first-parent", "--format=%s", "main"],
            cwd=project,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
        failed = sum(1 for e in log if e["kind"] == "session_ended" and e["standing"] == "failed")
        merged = [m for m in merges if m.startswith("Merge feature/")]
        return {
            "lanes": lanes,
            "wall_s": wall,
            "passing": sorted(landed),
            "per_hour": len(landed) / wall * 3600,
            "sessions": sessions,
            "redone": failed + len(sent_back),
            "queue_wait_s": statistics.median(waits) if waits else 0.0,
            "merged_once": len(merged) == len(set(merged)) == len(landed),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", default="1,2,4")
    parser.add_argument("--features", type=int, default=6)
    parser.add_argument("--latency", type=float, default=1.0, help="seconds the model takes per turn")
    args = parser.parse_args()
    rows = [one(int(n), args.features, args.latency) for n in args.lanes.split(",")]
    base = rows[0]
    print(f"{args.features} features, each depending on F001; {args.latency:g} s per model turn")
    print(
        "| lanes | wall (s) | verified features / hour | speed-up | sessions | redone | queue median wait (s) | same features, merged once |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for row in rows:
        same = row["passing"] == base["passing"] and row["merged_once"]
        print(
            f"| {row['lanes']} | {row['wall_s']:.1f} | {row['per_hour']:.0f} | "
            f"{float(row['per_hour']) / float(base['per_hour']):.2f}x | {row['sessions']} | {row['redone']} | "
            f"{float(row['queue_wait_s']):.2f} | {'yes' if same else 'NO'} |"
        )


if __name__ == "__main__":
    main()
