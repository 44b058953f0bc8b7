"""Processes a session left running in the project (dev servers, test runners): found and stopped.

Linux only (it reads /proc); elsewhere nothing is found. After a session, only processes started
since it began count, so a person's editor or shell in the project is never touched, and
neither are the scheduler's own process, its ancestors and its own git helpers (GitPython keeps
`git cat-file --batch-check` running as a child of the scheduler, in the project). When a run
starts, what the sessions of a killed run left (the CLI, its sandbox's `socat` bridges, an
agent's server) is found by the project's private TMPDIR in its environment, which the
sessions' processes, and nothing of a person's, carry.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

PROC = Path("/proc")


def _ancestors() -> set[int]:
    found, pid = set(), os.getpid()
    while pid > 1:
        found.add(pid)
        try:
            pid = int(_stat(pid)[1])
        except (OSError, ValueError, IndexError):
            break
    return found


def _stat(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (state, parent, ...)."""
    return (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()


def _own_git_helper(pid: int) -> bool:
    """A git process whose parent is this process: the scheduler's own (an agent's git is a
    descendant of the CLI, never a child of the scheduler)."""
    return int(_stat(pid)[1]) == os.getpid() and (PROC / str(pid) / "comm").read_text().strip() == "git"


def _started_at(pid: int) -> float:
    """When a process started, in epoch seconds."""
    ticks = int(_stat(pid)[19])
    boot = next(
        int(line.split()[1]) for line in (PROC / "stat").read_text().splitlines() if line.startswith("btime")
    )
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _matching(test: Callable[[int], bool]) -> list[int]:
    """The processes (never this one nor its parents) `test` holds for, one that ends meanwhile
    or cannot be read not among them."""
    mine, found = _ancestors(), []
    try:
        pids = [int(name) for name in os.listdir(PROC) if name.isdigit()]
    except OSError:
        return []
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError, StopIteration):
            if pid not in mine and test(pid):
                found.append(pid)
    return sorted(found)


def left_in(folder: Path, since: float) -> list[int]:
    """The processes started at or after `since` (epoch seconds) whose working directory is
    `folder` or inside it (never this process nor its parents)."""
    root = str(folder.resolve())

    def inside(pid: int) -> bool:
        cwd = os.readlink(f"{PROC}/{pid}/cwd")
        here = cwd == root or cwd.startswith(root.rstrip("/") + "/")
        return here and _started_at(pid) >= since - 1 and not _own_git_helper(pid)

    return _matching(inside)


def with_tmpdir(tmpdir: Path) -> list[int]:
    """The processes (never this one nor its parents) whose environment's TMPDIR is `tmpdir`."""
    want = f"TMPDIR={tmpdir}".encode()
    return _matching(lambda pid: want in (PROC / str(pid) / "environ").read_bytes().split(b"\0"))


def naming(folder: Path) -> list[int]:
    """The processes (never this one nor its parents) whose command line names a path inside
    `folder`: the sandbox's bridges of a session's CLI (`socat UNIX-LISTEN:<its TMPDIR>/...`),
    which outlive a CLI that was killed."""
    want = str(folder).rstrip("/").encode() + b"/"
    return _matching(lambda pid: want in (PROC / str(pid) / "cmdline").read_bytes())


def stop_left_in(folder: Path, since: float, grace_s: float = 2.0) -> list[int]:
    """Stop what a session started at `since` left running in `folder`: SIGTERM, then SIGKILL
    after `grace_s`."""
    return stop(left_in(folder, since), grace_s)


def stop_with_tmpdir(tmpdir: Path, grace_s: float = 2.0) -> list[int]:
    """Stop what the sessions of an earlier run left running (their TMPDIR is `tmpdir`): called
    while the caller holds the project's authority, so no session of its own is running."""
    return stop(sorted(set(with_tmpdir(tmpdir)) | set(naming(tmpdir))), grace_s)


def stop(pids: list[int], grace_s: float) -> list[int]:
    """SIGTERM, then SIGKILL after `grace_s` for what did not end; waits until they are gone."""
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    _wait_gone(pids, grace_s)
    killed = [pid for pid in pids if _alive(pid)]
    for pid in killed:
        _signal(pid, signal.SIGKILL)
    _wait_gone(killed, KILL_WAIT_S)  # SIGKILL is not instant on a loaded machine
    return pids


def _wait_gone(pids: list[int], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.05)


KILL_WAIT_S = 2.0
"""How long stop_left_in waits for what it killed to be gone (a zombie is gone: it runs nothing)."""


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, signum)


def _alive(pid: int) -> bool:
    try:
        state = _stat(pid)[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def tied(command: list[str], signame: str = "TERM") -> list[str]:
    """`command` made to get `signame` when this process dies, even by SIGKILL (Linux, with
    `setpriv`; as it is elsewhere): a server the run starts never outlives it."""
    setpriv = shutil.which("setpriv")
    if sys.platform != "linux" or setpriv is None:
        return command
    return [setpriv, "--pdeathsig", signame, "--", *command]
