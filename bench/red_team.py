"""The red team through the real CLI: every attack contained, every ordinary command allowed.

    .venv/bin/python bench/red_team.py            # what CI plays (tests/test_red_team.py)
    .venv/bin/python bench/red_team.py --paths    # the one-lane sessions through a lane and a worker

Plays, through the real Claude Code CLI and a scripted model, 200+ attacks in 30+ classes
(symlinks and git, `.git` redirections, nested repositories, attributes, secrets in the
environment and in files, /proc, unix sockets, hard links, the scheduler's own code, LD_PRELOAD,
payloads planted for later: hooks, test files, Python start-up files, shell files, agent
configuration, hand-off files, background processes) and 80+ ordinary commands, several of them
resembling attacks. Then it plays what the scheduler does LATER with whatever was planted: its own
git (gitops), the test command on the commit holding the payloads (run_tests_at), the hand-off
files read back, and a later REVIEW session; a payload that runs outside every sandbox leaves a
marker, which fails the run. The attacks that depend on the machine's `Host` (secrets in the
environment, the home and the CLI's config folder) are played through a lane's clone and through
a worker too (the lane's session received through the exchange), each session's plan checked.
`--paths` plays the whole matrix instead: every one-lane session but the destructive one through a
lane's clone and through a worker (`run_matrix`, about two minutes on 2 cores; not in CI).

Prints `attacks contained X/Y (N classes, K known holes), ordinary commands allowed A/B (R known
refusals), later steps clean L/M`, the attacks per class, the known holes (scripted_model/red_team.py
KNOWN_HOLES, with why), then every failure: an attack not contained, an ordinary command refused,
a later step that failed or let a payload run, a known hole now contained (remove it from the list).
The same run is a test (tests/test_red_team.py). Needs bubblewrap, socat, ripgrep and the sandbox
runtime (`npm ci`). Takes about a minute on 2 cores.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from session_scheduler.testing.red_team import failures, known, run_matrix, run_red_team


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--paths", action="store_true", help="the one-lane sessions through a lane's clone and a worker"
    )
    args = parser.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="red-team-") as tmp:
        report = (run_matrix if args.paths else run_red_team)(Path(tmp))
    print(report.line())
    print("  per class: " + ", ".join(f"{kind} {n}" for kind, n in report.per_class().items()))
    for line in known(report) + failures(report):
        print("  " + line)
    print(f"({time.monotonic() - started:.0f} s through the real CLI)")
    return 1 if failures(report) else 0


if __name__ == "__main__":
    sys.exit(main())
