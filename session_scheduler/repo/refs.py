"""Git refs read from the files git keeps them in by default (loose files under `refs/`, and
`packed-refs`), without starting git: the scheduler asks for a few refs several times a session,
and a long project has thousands of branches, which git packs into one file.

Answers as `git rev-parse --verify` and `git for-each-ref refs/heads/` answer: a loose ref
overrides a packed one, a broken loose ref (empty, garbled, a dangling symbolic ref) is no ref.
"""

from __future__ import annotations

import itertools
import operator
import os
import re
import shutil
from pathlib import Path

from session_scheduler.store import filestat

Packed = dict[tuple[int, int, int], tuple[dict[str, str], dict[str, str]]]
"""What `_read_packed` made of the last versions of packed-refs, by (inode, size, modification
time): git never writes the file in place, it writes a new one and renames it. Kept by the
repository's `safe_git.GitMemo`; a call without one reads the file."""

HEADS = "refs/heads/"
_SHA = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
_MAX_DEPTH = 5
"""Symbolic refs followed at most (git's own limit)."""
_BAD = re.compile(r"\.\.|@\{|//|[\x00-\x20\x7f~^:?*\[\\]")


def valid(ref: str) -> bool:
    """A ref name git accepts (the rules that matter for reading a file by it)."""
    if not ref.startswith("refs/") or ref.endswith("/") or ref.endswith(".") or _BAD.search(ref):
        return False
    return all(part and not part.startswith(".") and not part.endswith(".lock") for part in ref.split("/"))


def sha(common_dir: Path, ref: str, memo: Packed | None = None) -> str | None:
    """The commit `ref` (a full name: refs/heads/main) points at, or None."""
    for _ in range(_MAX_DEPTH):
        if not valid(ref):
            return None
        try:
            text = (common_dir / ref).read_text(encoding="utf-8", errors="replace").strip()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return packed(common_dir, memo).get(ref)
        except OSError:
            return None
        if not text.startswith("ref:"):
            return text if _SHA.fullmatch(text) else None
        ref = text.removeprefix("ref:").strip()
    return None


def heads(common_dir: Path, memo: Packed | None = None) -> dict[str, str]:
    """Every local branch (short name) and the commit it points at."""
    found = dict(_read_packed(common_dir, memo)[1])
    base = common_dir / HEADS
    for folder, _, names in os.walk(base):
        for name in names:
            short = Path(folder, name).relative_to(base).as_posix()
            value = sha(common_dir, HEADS + short, memo)
            if value is None:
                found.pop(short, None)  # a broken loose ref hides a packed one, as in git
            else:
                found[short] = value
    return found


def loose_heads(common_dir: Path) -> int:
    """How many branch files are under refs/heads (not packed)."""
    return sum(len(names) for _, _, names in os.walk(common_dir / HEADS))


def packed_heads(common_dir: Path, memo: Packed | None = None) -> dict[str, str]:
    """The branches in `packed-refs` by short name (not to be changed)."""
    return _read_packed(common_dir, memo)[1]


def keep_packed(common_dir: Path, dest: Path) -> None:
    """Keep this version of `packed-refs` in `dest` (a folder): a hard link, as git never
    writes the file in place (it writes a new one and renames it), else a copy; none if the
    repository has none."""
    source, target = common_dir / "packed-refs", dest / "packed-refs"
    tmp = dest / ".packed-refs.tmp"
    tmp.unlink(missing_ok=True)
    if not source.is_file():
        target.unlink(missing_ok=True)
        return
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copyfile(source, tmp)
    os.replace(tmp, target)
    tmp.unlink(missing_ok=True)  # rename(2) does nothing when both names are links to one file


def changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    """The branches created, deleted or moved from `before` to `after`. In C loops: both can
    list thousands of branches, read from the same packed-refs, so an unchanged branch's commit
    is most often the same string object in both."""
    maybe = itertools.compress(after, map(operator.is_not, after.values(), map(before.get, after)))
    found = {branch for branch in maybe if before.get(branch) != after[branch]}
    found.update(itertools.filterfalse(after.__contains__, before))
    return found


def packed(common_dir: Path, memo: Packed | None = None) -> dict[str, str]:
    """The refs in `packed-refs` (read again only when the file changed; not to be changed)."""
    return _read_packed(common_dir, memo)[0]


def _read_packed(common_dir: Path, memo: Packed | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """(every packed ref, the packed branches by short name)."""
    path = common_dir / "packed-refs"
    sig = filestat.signature(path)
    if sig is None:
        return {}, {}
    key = sig[:3]  # not the change time: a hard link to the file (a kept copy) changes it
    memo = {} if memo is None else memo
    known = memo.get(key)
    if known is not None:
        return known
    found: dict[str, str] = {}
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return {}, {}
    for line in lines:
        if line.startswith(("#", "^")):  # the header, and the commit under an annotated tag
            continue
        value, _, ref = line.partition(" ")
        if _SHA.fullmatch(value) and ref.strip():
            found[ref.strip()] = value
    both = found, {ref.removeprefix(HEADS): value for ref, value in found.items() if ref.startswith(HEADS)}
    memo[key] = both
    while len(memo) > 4:
        del memo[next(iter(memo))]
    return both
