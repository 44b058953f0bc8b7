"""Stand-ins for the scheduler's seams, shared by the tests and the benchmarks."""

from __future__ import annotations

import random

from session_scheduler.guard.sandbox import Preflight

START = 1_900_000_000.0
"""Where a virtual clock starts (any fixed instant: runs that use it are reproducible)."""


class VirtualClock:
    """Time that moves only when the scheduler sleeps, and chance drawn from `seed`: two runs on
    clocks made alike read the same times and draw the same numbers. `stop_at` raises
    KeyboardInterrupt in that sleep."""

    def __init__(self, start: float = START, stop_at: int | None = None, seed: int = 0) -> None:
        self.t, self.sleeps, self.stop_at = start, list[float](), stop_at
        self.start = start
        self._rng = random.Random(seed)

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if self.stop_at is not None and len(self.sleeps) == self.stop_at:
            raise KeyboardInterrupt
        self.t += max(seconds, 0.0)

    def monotonic(self) -> float:
        return self.t - self.start

    def random(self) -> float:
        return self._rng.random()


def active_sandbox() -> Preflight:
    """The preflight's answer on a machine whose OS sandbox works (the real probe runs the CLI)."""
    return Preflight(True, "the OS sandbox is active (a test stand-in)")
