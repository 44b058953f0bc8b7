"""Benchmark: the first request each role's session sends, through the real Claude Code CLI.

Runs the README's offline demo (the real CLI against the scripted model, every role, a web REVIEW
included) from a checkout (this one, or `--checkout DIR` for another, e.g. a worktree of an older
commit: the before of a change) and reads the scripted model's request log: for each session, its
first request with tools (one user message), its body and system-prompt bytes. Prints, per role, the
median and the largest first request, and with `--compare DIR` the same for another checkout and the
ratio between them (measured in one run, on one machine).

    .venv/bin/python bench/agents_view.py
    git worktree add /tmp/before <commit> && .venv/bin/python bench/agents_view.py --compare /tmp/before
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def first_requests(checkout: Path, project: Path) -> dict[str, list[tuple[int, int]]]:
    """Per role, (body bytes, system bytes) of each session's first request with tools."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run(
        [sys.executable, "autonomous_agent_demo.py", "--project-dir", str(project), "--offline-demo"],
        cwd=checkout,
        capture_output=True,
        text=True,
        env=env,
    )
    if done.returncode != 0:
        sys.exit(f"the demo in {checkout} failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    log = project / ".agent_logs" / "scripted_model_requests.jsonl"
    seen: set[str] = set()
    by_role: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        sid = entry.get("session_id")
        if not entry.get("has_tools") or entry.get("status") != 200 or sid in seen:
            continue
        seen.add(sid)
        by_role[entry.get("role") or "?"].append((entry["body_bytes"], entry["system_bytes"]))
    return by_role


def summary(by_role: dict[str, list[tuple[int, int]]]) -> dict[str, tuple[float, int, float]]:
    """Per role: median body bytes, largest body bytes, median system bytes."""
    return {
        role: (
            statistics.median(b for b, _ in sizes),
            max(b for b, _ in sizes),
            statistics.median(s for _, s in sizes),
        )
        for role, sizes in sorted(by_role.items())
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--checkout", type=Path, default=ROOT, help="the checkout to measure (default: this one)"
    )
    parser.add_argument(
        "--compare", type=Path, help="another checkout to measure in the same run (the before)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-view-") as tmp:
        after = summary(first_requests(args.checkout.resolve(), Path(tmp) / "after"))
        before = summary(first_requests(args.compare.resolve(), Path(tmp) / "before")) if args.compare else {}
    print("first request of each session, through the real CLI (bytes; median and largest per role)")
    header = f"{'role':13} {'body med':>9} {'body max':>9} {'system med':>10}"
    if before:
        header += f" | {'before med':>10} {'before max':>10} {'smaller by':>10}"
    print(header)
    for role, (median, largest, system) in after.items():
        line = f"{role:13} {median:9.0f} {largest:9d} {system:10.0f}"
        if role in before:
            b_median, b_largest, _ = before[role]
            line += f" | {b_median:10.0f} {b_largest:10d} {1 - median / b_median:10.0%}"
        print(line)


if __name__ == "__main__":
    main()
