"""The full kill suite and the night's faults, through the real CLI and the scripted model.

    .venv/bin/python bench/reliability.py

Kills the scheduler (SIGKILL) at every crash point of crashpoints.POINTS, resumes with the same
command, and compares the project with a run that was never killed; then runs one night with a
usage-limit window, a 429 burst, a 529 burst beyond the CLI's retries, a cut stream and a silent
turn (on a clock that does not really sleep). Prints faults injected / survived / anything lost.

Then times what retrying cannot fix, with the user's own command against an endpoint on loopback
(Claude Code allowed ten retries, the real clock): a rejected key (401), a billing error (402), an
unknown model (404) and a web server that is not an Anthropic API must each end the run in under
15 s with one line naming the cause and the fix; `--max-outage-minutes 1` against an endpoint that
always answers 529 must end within 2 minutes (exit 3). `--stops` runs only these.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from click.testing import CliRunner

from session_scheduler.testing.kills import CASES, check_project, reference, run_case
from session_scheduler.testing.kills import SCENARIO as KILL_SCENARIO
from session_scheduler.testing.seams import VirtualClock, active_sandbox
from session_scheduler.view.cli import main as cli

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
    args = [
        "--project-dir",
        str(project),
        "--offline-demo",
        "--scenario",
        str(scenario),
        "--idle-timeout",
        "10",
    ]
    result = CliRunner().invoke(
        cli, args, obj={"preflight": active_sandbox, "clock": VirtualClock(time.time())}
    )
    if result.exit_code != 0:
        return [f"the night ended with exit {result.exit_code}: {result.output[-800:]}"]
    return check_project(project, expected)


STOP_LIMIT_S = 15.0
OUTAGE_LIMIT_S = 120.0


def timed_stop(root: Path, name: str, base_url: str, *args: str) -> tuple[float, int, str]:
    """The user's command against `base_url`: seconds until it ended, its exit code, its stderr."""
    import os
    import subprocess

    from scripted_model.hermetic import hermetic_env

    env = hermetic_env(base_url, root / name / "home", max_retries=10)
    env["AGENT_GENERATIONS_DIR"] = str(root / name / "generations")
    repo = Path(__file__).resolve().parents[1]
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "autonomous_agent_demo.py", "--project-dir", "app", *args],
        cwd=repo, env={**env, "PYTHONPATH": os.pathsep.join(sys.path)}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    return time.monotonic() - started, done.returncode, done.stderr.strip()


def stops(root: Path) -> list[str]:
    """Time each ending retrying cannot fix; what missed its goal (empty: nothing)."""
    from test_first_run import PlainWebServer

    from scripted_model.protocol import Fault, Turn
    from scripted_model.server import ScriptedModelServer

    def always(kind: str) -> ScriptedModelServer:
        class Brain:
            def respond(self, turn: Turn) -> Fault:
                return Fault(kind)  # type: ignore[arg-type]

        return ScriptedModelServer(Brain())

    missed: list[str] = []
    cases: list[tuple[str, object, tuple[str, ...], int, float]] = [
        (*pair, (), 1, STOP_LIMIT_S) for pair in (
            ("rejected key (401)", always("http_401")),
            ("billing error (402)", always("http_402")),
            ("unknown model (404)", always("http_404")),
            ("web server, not the API (404 page)", PlainWebServer(404)),
            ("web server, not the API (200 page)", PlainWebServer(200)),
        )
    ] + [("529 always, --max-outage-minutes 1", always("http_529"), ("--max-outage-minutes", "1"), 3, OUTAGE_LIMIT_S)]  # fmt: skip
    for number, (name, server, args, code, limit) in enumerate(cases):
        with server as running:  # type: ignore[attr-defined]
            took, exit_code, stderr = timed_stop(root, f"stop-{number}", running.base_url, *args)
        lines = stderr.splitlines()
        ok = exit_code == code and took < limit and len(lines) == 1
        print(
            f"  {name}: {took:.1f} s, exit {exit_code} (goal < {limit:.0f} s, exit {code}): {lines[-1] if lines else '(nothing on stderr)'}",
            flush=True,
        )
        if not ok:
            missed.append(f"{name}: {took:.1f} s, exit {exit_code}, {len(lines)} line(s) on stderr")
    return missed


def main() -> int:
    if "--stops" in sys.argv[1:]:
        with tempfile.TemporaryDirectory(prefix="reliability-") as tmp:
            missed = stops(Path(tmp))
        print(
            f"stops that retrying cannot fix: {'all within their goals' if not missed else 'MISSED: ' + '; '.join(missed)}"
        )
        return 1 if missed else 0
    started = time.monotonic()
    lost: list[str] = []
    with tempfile.TemporaryDirectory(prefix="reliability-") as tmp:
        root = Path(tmp)
        expected = reference(root / "reference")
        for name in CASES:
            problems = run_case(root / "kills", name, expected)
            print(
                f"  kill at {name}: {'survived' if not problems else 'LOST: ' + '; '.join(problems)}",
                flush=True,
            )
            lost += [f"{name}: {p}" for p in problems]
        problems = night(root)
        print(
            f"  a night of {len(NIGHT_FAULTS)} API faults: {'survived' if not problems else 'LOST: ' + '; '.join(problems)}"
        )
        lost += problems
        missed = stops(root)
    injected = sum(len(kills) for kills in CASES.values()) + len(NIGHT_FAULTS)
    failed_cases = len({line.split(":")[0] for line in lost})
    print(
        f"faults injected {injected}, cases survived {len(CASES) + 1 - failed_cases}/{len(CASES) + 1}, anything lost: {len(lost) or 'nothing'}"
    )
    print(
        f"stops that retrying cannot fix: {'all within their goals' if not missed else 'MISSED: ' + '; '.join(missed)}"
    )
    print(f"({time.monotonic() - started:.0f} s through the real CLI)")
    return 1 if lost or missed else 0


if __name__ == "__main__":
    sys.exit(main())
