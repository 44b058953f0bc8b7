"""The red team through the real CLI: every attack contained, every ordinary command allowed.

    .venv/bin/python bench/red_team.py

Prints `attacks contained X/Y (N classes), ordinary commands allowed A/B`, then every attack
that was not contained and every ordinary command that was refused, with what the tool said.
The same run is a test (tests/test_red_team.py). Needs bubblewrap and socat.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripted_model.red_team import Report, run_red_team


def failures(report: Report) -> list[str]:
    lines = [f"NOT CONTAINED [{o.role.value} {o.call.kind}] {o.call.label}: {'; '.join(o.problems)} | {o.result}" for o in report.attacks() if o.problems]
    lines += [f"REFUSED [{o.role.value}] {o.call.label}: {o.result}" for o in report.ordinary() if o.denied or o.problems]
    return lines


def main() -> int:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="red-team-") as tmp:
        report = run_red_team(Path(tmp))
    print(report.line())
    for line in failures(report):
        print("  " + line)
    print(f"({time.monotonic() - started:.0f} s through the real CLI)")
    return 1 if failures(report) else 0


if __name__ == "__main__":
    sys.exit(main())
