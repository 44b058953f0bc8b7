"""Which source files the others refer to: a link from a file that mentions a name to each file
that defines it, and the files' PageRank over those links (aider's repository map in spirit).
PURE."""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass

from session_scheduler.core.outline import Definition, Outline

MAX_DEFINERS = 30
"""A name defined by more files than this links nothing (`get`, `__init__`): it tells nothing."""
DAMPING, TOLERANCE, MAX_ROUNDS = 0.85, 1e-6, 50
"""PageRank's damping factor, the change per file at which it stops, and its most iterations
(networkx's defaults)."""
UNNAMED = 0.1
"""A mention of a name counts this much toward a file whose module or folder the mentioning file
never names (no import of it): a local variable `config` is not a use of `bench/config.py`."""
NAME = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
"""An identifier as a mention is counted, in any language, in a file's `Outline.code` (comments
and docstrings out where a grammar finds them; strings kept: an import path or a dotted setting
names a module). A regular expression is three times cheaper than a tree-sitter query for the
identifiers (Django's 5 MB: 0.06 s against 0.19 s) and works for every language."""


def _modules(path: str) -> set[str]:
    """The names an import of the file would mention: its own (`query` for `db/query.py`) and its
    folder's (`db`; a Go or Java package, a JavaScript folder's `index.js`)."""
    folder, _, file_name = path.rpartition("/")
    return {file_name.split(".", 1)[0], folder.rpartition("/")[2]} - {"", "__init__", "index"}


def _names(path: str, definitions: tuple[Definition, ...]) -> set[str]:
    """The names a file defines: its definitions, their members, and, when it defines any, its
    module's name (`query` for `db/query.py`, `db` for `db/__init__.py` or `db/index.js`: an
    empty `__init__.py` is named in every import of its package, and has nothing to show)."""
    if not definitions:
        return set()
    folder, _, file_name = path.rpartition("/")
    stem = file_name.split(".", 1)[0]
    module = folder.rpartition("/")[2] if stem in ("__init__", "index", "mod", "main") else stem
    return {module, *(d.name for d in definitions), *(m for d in definitions for m in d.members)}


def _weight(name: str, definers: int) -> float:
    """How much a mention of `name` tells (aider's weights): a long compound name much, a private
    one little, one that several files define little."""
    weight = 1.0
    if len(name) >= 8 and ("_" in name.strip("_") or (name.lower() != name and name.upper() != name)):
        weight *= 10
    if name.startswith("_"):
        weight *= 0.1
    if definers > 5:
        weight *= 0.1
    return weight


@dataclass(frozen=True)
class Ranking:
    scores: list[float]
    """Each file's PageRank over the links from a file that mentions a name to the files that
    define it, a link weighing the name's `_weight` times the square root of its mentions."""
    referrers: Counter[str]
    """For each name that links (`MAX_DEFINERS`), the files that mention it."""


def rank(paths: list[str], outlines: list[Outline]) -> Ranking:
    """The files' `Ranking`, from each file's path and outline."""
    definers: dict[str, list[int]] = defaultdict(list)
    for i, (path, outline) in enumerate(zip(paths, outlines, strict=True)):
        for name in sorted(_names(path, outline.definitions)):
            definers[name].append(i)
    usable = {name: ids for name, ids in definers.items() if len(name) >= 3 and len(ids) <= MAX_DEFINERS}
    links: dict[tuple[int, int], float] = defaultdict(float)
    referrers: Counter[str] = Counter()
    modules = [_modules(path) for path in paths]
    for source, outline in enumerate(outlines):
        words = NAME.findall(outline.code)
        seen = set(words)
        mentions = Counter(word for word in words if word in usable)
        referrers.update(mentions.keys())
        for name, count in mentions.items():
            weight = _weight(name, len(usable[name])) * math.sqrt(count)
            for target in usable[name]:
                if target != source:
                    links[source, target] += weight if modules[target] & seen else weight * UNNAMED
    return Ranking(_pagerank(len(paths), links), referrers)


def _pagerank(n: int, links: dict[tuple[int, int], float]) -> list[float]:
    """PageRank by power iteration, until the ranks move less than `TOLERANCE` each (at most
    `MAX_ROUNDS`); a file that links nowhere shares its rank with every file."""
    if n == 0:
        return []
    outgoing: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for (source, target), weight in links.items():
        outgoing[source].append((target, weight))
    for source, targets in enumerate(outgoing):
        total = sum(weight for _, weight in targets)
        outgoing[source] = [(target, weight / total) for target, weight in targets]
    rank = [1.0 / n] * n
    for _ in range(MAX_ROUNDS):
        dangling = sum(r for r, targets in zip(rank, outgoing, strict=True) if not targets)
        new = [(1 - DAMPING) / n + DAMPING * dangling / n] * n
        for source, targets in enumerate(outgoing):
            flow = DAMPING * rank[source]
            for target, share in targets:
                new[target] += flow * share
        moved = sum(abs(a - b) for a, b in zip(new, rank, strict=True))
        rank = new
        if moved < n * TOLERANCE:
            break
    return rank
