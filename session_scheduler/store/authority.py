"""Who may write a project's records: one run at a time, behind a small interface.

`Authority` is what the command line asks before a run writes anything: `hold()` for the whole
run (a second run on the same project fails at once with `AlreadyRunning`), and `holder()`, the
process that holds it, for `status`. `FileAuthority` is the local implementation: a file lock on
`.agent.lock` in the project (another machine's runs would need another implementation).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Protocol

import filelock

from session_scheduler.core.errors import AlreadyRunning
from session_scheduler.core.layout import LOCK_FILE


class Authority(Protocol):
    """The right to run on one project."""

    def hold(self) -> AbstractContextManager[None]:
        """Held for the whole run; raises AlreadyRunning at once when another run holds it."""
        ...

    def holder(self) -> int | None:
        """The process that holds it now (None: nobody, or it cannot say), without taking it."""
        ...


class FileAuthority:
    """The project's lock file (`.agent.lock`), locked with `flock` for as long as a run holds it."""

    def __init__(self, project: Path) -> None:
        self.project = project

    @contextmanager
    def hold(self) -> Iterator[None]:
        lock = filelock.FileLock(str(self.project / LOCK_FILE), timeout=0)
        try:
            lock.acquire()
        except filelock.Timeout:
            raise AlreadyRunning(
                f"another scheduler is already running on {self.project} (lock {LOCK_FILE} is held); "
                "wait for it to finish or stop it first"
            ) from None
        try:
            yield
        finally:
            lock.release()

    def holder(self) -> int | None:
        """Read from /proc/locks: testing the lock by taking it would race a starting run."""
        try:
            inode = (self.project / LOCK_FILE).stat().st_ino
            table = Path("/proc/locks").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        for line in table.splitlines():
            parts = line.split()
            if (
                len(parts) > 5
                and parts[1] in ("FLOCK", "POSIX", "OFDLCK")
                and parts[5].rsplit(":", 1)[-1] == str(inode)
            ):
                pid = int(parts[4]) if parts[4].isdigit() else None
                if pid is not None and pid_alive(pid):
                    return pid
        return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
