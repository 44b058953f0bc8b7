"""A file's version as its stat shows it, for caches that must not read an unchanged file again."""

from __future__ import annotations

import os
from pathlib import Path

Signature = tuple[int, int, int, int]
"""(inode, size, modification time, change time), nanoseconds. The change time is set by the
kernel on every write, rename or `touch` and cannot be set back from user space, so a file
edited in place and given its old modification time again still gets a new signature."""


def signature(path: Path | str) -> Signature | None:
    """The file's signature, None when it does not exist or cannot be read."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return of(stat)


def of(stat: os.stat_result) -> Signature:
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
