"""Time and chance as the scheduler uses them: the real clock, or one a test passes that does
not sleep and draws the same numbers on every run (`testing/seams.VirtualClock`).

Everything in the product that reads the time, waits or draws a random number asks the clock it
was given: the run id, the session folder names set aside, the back-off's jitter, the waits for a
usage limit's reset, a session's duration."""

from __future__ import annotations

import random
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch (wall-clock time: timestamps, run ids, resets)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait that long (a negative wait returns at once)."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary start that never go back (durations)."""
        ...

    def random(self) -> float:
        """A number in [0, 1) (the back-off's jitter)."""
        ...


class SystemClock:
    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(seconds, 0.0))

    def monotonic(self) -> float:
        return time.monotonic()

    def random(self) -> float:
        return self._rng.random()
