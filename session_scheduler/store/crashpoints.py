"""Named points where a test can kill the scheduler, to prove it resumes from anywhere.

With `AGENT_CRASH_AT=<point>` (or `<point>#<n>`: the n-th time it is reached) in the
environment, the scheduler SIGKILLs itself at that point; without it, `reached` does nothing.
The kill suite (tests/test_kills.py, bench/reliability.py) runs the offline demo once per
point and checks that the same command then finishes with the same repository as a run that
was never killed. POINTS lists every point, so a renamed or removed one fails the suite.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

ENV = "AGENT_CRASH_AT"
POINTS: tuple[str, ...] = (
    "repo_opened",
    "recover_set_aside",
    "recover_restored",
    "plan_written",
    "git_prepared",
    "in_progress_saved",
    "cli_message",
    "cli_ended",
    "result_written",
    "merge_tested",
    "undo_branches_reset",
    "verified",
    "post_copied",
    "transitioned",
    "rejected_kept",
    "state_saved",
    "restore_point_copied",
    "status_written",
    "atomic_write_tmp",
    "waiting",
    "stashed",
    "spec_placed",
    "event_half_written",
    "queue_landed",
)
_seen: Counter[str] = Counter()


def reached(point: str) -> None:
    """Kill this process here if the environment asks for it."""
    target = os.environ.get(ENV)
    if not target:
        return
    name, _, nth = target.partition("#")
    if name != point:
        return
    _seen[point] += 1
    if _seen[point] == int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
