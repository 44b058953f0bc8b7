"""Time, waits and chance come from the clock a run is given: two runs on clocks made alike read
the same times and draw the same back-offs; the system's clock draws anew."""

from __future__ import annotations

import os
from pathlib import Path

from test_lifecycle import new_project
from test_nights import Cutting, overloaded, run

from session_scheduler.core.clock import Clock, SystemClock
from session_scheduler.run.classify import backoff_s
from session_scheduler.store import events
from session_scheduler.testing.seams import START, VirtualClock


def test_a_virtual_clock_moves_only_when_slept_and_draws_from_its_seed() -> None:
    clock: Clock = VirtualClock(seed=3)
    assert (clock.now(), clock.monotonic()) == (START, 0.0)
    clock.sleep(90)
    clock.sleep(-5)  # a wait already over returns at once, like the system's
    assert (clock.now(), clock.monotonic()) == (START + 90, 90.0)
    draws = [VirtualClock(seed=3).random(), VirtualClock(seed=3).random(), VirtualClock(seed=4).random()]
    assert draws[0] == draws[1] != draws[2] and all(0 <= d < 1 for d in draws)


def test_the_system_clock_reads_the_system() -> None:
    import time

    clock = SystemClock()
    assert abs(clock.now() - time.time()) < 5 and abs(clock.monotonic() - time.monotonic()) < 5
    assert 0 <= clock.random() < 1
    assert events.new_run_id().endswith(f"-{os.getpid()}")


def test_the_back_off_jitter_is_drawn_from_the_clock() -> None:
    alike = [[backoff_s(n, VirtualClock(seed=5)) for n in (1, 2, 3)] for _ in range(2)]
    assert alike[0] == alike[1]
    assert alike[0] != [backoff_s(n, VirtualClock(seed=6)) for n in (1, 2, 3)]


def test_two_runs_on_alike_clocks_get_the_same_run_id_timestamps_and_back_offs(tmp_path: Path) -> None:
    seen = []
    for name in ("a", "b"):
        project, clock = new_project(tmp_path, name), VirtualClock(seed=7)
        report, _ = run(project, Cutting({3: [overloaded, overloaded]}, clock))
        assert report.status == "done"  # type: ignore[attr-defined]
        log = events.read(events.log_path(project))
        waits = [e["until"] for e in log if e["kind"] == "limit_wait"]
        seen.append((clock.sleeps, sorted({e["run"] for e in log}), [e["ts"] for e in log], waits))
    assert seen[0] == seen[1]
    sleeps, runs, stamps, waits = seen[0]
    assert runs == [f"20300317T174640-{os.getpid()}"]  # the run began at the clock's START
    assert len(waits) == 2 and stamps[0] == START and stamps == sorted(stamps)  # two back-offs
    other = VirtualClock(seed=8)
    run(new_project(tmp_path, "c"), Cutting({3: [overloaded, overloaded]}, other))
    assert other.sleeps != sleeps  # another seed, other jitter
