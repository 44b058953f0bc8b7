"""The full kill suite and the night's faults, through the real CLI and the scripted model.

    .venv/bin/python bench/reliability.py

Kills the scheduler (SIGKILL) at every crash point of crashpoints.POINTS, resumes with the same
command, and compares the project with a run that was never killed; then runs one night with a
usage-limit window, a 429 burst, a 529 burst beyond the CLI's retries, a cut stream and a silent
turn (on a clock that does not really sleep). Prints faults injected / survived / anything lost.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from click.testing import CliRunner
from helpers import active_sandbox
from test_nights import VirtualClock

from autonomous_agent_demo import main as cli
from scripted_model.kills import CASES, check_project, reference, run_case
from scripted_model.kills import SCENARIO as KILL_SCENARIO

NIGHT_FAULTS = [
    {"session": 2, "kind": "usage_limit", "request": 2, "reset_in_seconds": 1800},
    {"session": 3, "kind": "http_429", "request": 1, "times": 2},
    {"session": 4, "kind": "http_529", "request": 2, "times": 6},
    {"session": 5, "kind": "stream_cut", "request": 2},
    {"session": 6, "kind": "hang", "request": 2},
]


def night(root: Path) -> list[str]:
    """One invocation through all of NIGHT_FAULTS; what went wrong (empty: nothing)."""
    import json

    expected = reference(root / "night-reference")
    scenario = root / "night.json"
    scenario.write_text(json.dumps({**KILL_SCENARIO, "faults": [*KILL_SCENARIO["faults"], *NIGHT_FAULTS]}))
    project = root / "night"
    args = ["--project-dir", str(project), "--offline-demo", "--scenario", str(scenario), "--idle-timeout", "10"]
    result = CliRunner().invoke(cli, args, obj={"preflight": active_sandbox, "clock": VirtualClock(time.time())})
    if result.exit_code != 0:
        return [f"the night ended with exit {result.exit_code}: {result.output[-800:]}"]
    return check_project(project, expected)


def main() -> int:
    started = time.monotonic()
    lost: list[str] = []
    with tempfile.TemporaryDirectory(prefix="reliability-") as tmp:
        root = Path(tmp)
        expected = reference(root / "reference")
        for name in CASES:
            problems = run_case(root / "kills", name, expected)
            print(f"  kill at {name}: {'survived' if not problems else 'LOST: ' + '; '.join(problems)}", flush=True)
            lost += [f"{name}: {p}" for p in problems]
        problems = night(root)
        print(f"  a night of {len(NIGHT_FAULTS)} API faults: {'survived' if not problems else 'LOST: ' + '; '.join(problems)}")
        lost += problems
    injected = sum(len(kills) for kills in CASES.values()) + len(NIGHT_FAULTS)
    failed_cases = len({line.split(":")[0] for line in lost})
    print(f"faults injected {injected}, cases survived {len(CASES) + 1 - failed_cases}/{len(CASES) + 1}, anything lost: {len(lost) or 'nothing'}")
    print(f"({time.monotonic() - started:.0f} s through the real CLI)")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
