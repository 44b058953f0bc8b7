"""What makes a feature list valid beyond its schema (pure): unique ids, 1 to 6 acceptance steps
per feature, and dependencies that can all be met.

The one place these rules live: verification checks the list an INITIALIZER wrote (run/invariants),
and the INITIALIZER's `check_feature_list` tool answers with the same problems before it commits.
"""

from __future__ import annotations

import graphlib
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

MIN_STEPS, MAX_STEPS = 1, 6
"""How many acceptance steps a feature has: each one a reviewer can check."""


def depends_of(features: Sequence[Mapping[str, Any]]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Feature -> the features it depends on (`depends_on`), for those that have any, in list order."""
    return tuple((f["id"], tuple(f["depends_on"])) for f in features if f.get("depends_on"))


def dependency_problems(features: Sequence[Mapping[str, Any]]) -> list[str]:
    """What is wrong with the feature list's dependencies: a feature that depends on itself or on
    one not in the list, or features that depend on each other in a circle (none could start)."""
    ids = {f["id"] for f in features}
    problems = []
    for name, needs in depends_of(features):
        for need in needs:
            if need == name:
                problems.append(f"feature_list.json: {name} depends on itself")
            elif need not in ids:
                problems.append(f"feature_list.json: {name} depends on {need}, which is not in the list")
    if problems:
        return problems
    try:
        graphlib.TopologicalSorter(dict(depends_of(features))).prepare()
    except graphlib.CycleError as exc:
        circle = " -> ".join(reversed(exc.args[1]))
        problems.append(f"feature_list.json: features depend on each other in a circle ({circle})")
    return problems


def feature_list_problems(features: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every problem of a new feature list whose schema holds (empty when it is valid): duplicate
    ids, a feature without 1 to 6 steps, and the dependencies' problems (`dependency_problems`)."""
    twice = sorted(name for name, n in Counter(f["id"] for f in features).items() if n > 1)
    if twice:
        return [f"feature_list.json has duplicate feature IDs: {', '.join(twice)}"]
    problems = [
        f"feature_list.json: {f['id']} has {len(f['steps'])} acceptance steps; give it "
        f"{MIN_STEPS} to {MAX_STEPS}, each one a reviewer can check"
        for f in features
        if not MIN_STEPS <= len(f["steps"]) <= MAX_STEPS
    ]
    return problems + dependency_problems(features)


def _number(feature_id: str) -> int:
    return int(feature_id[1:]) if feature_id[1:].isdigit() else -1


def extension_problems(before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every problem of `after` as an extension of the list `before` (empty when it extends it,
    with no new feature too: a change that asks for nothing new, a reworded line): a feature the
    project has was removed, edited, moved or had its `passes` changed; a new feature's id is not
    after the last id, or it is marked passing. Each is said
    so that the session can correct its list in place (extension_problems runs in its check tool
    and again in verification)."""
    problems: list[str] = []
    kept = {f["id"]: f for f in after}
    last = before[-1]["id"] if before else "F000"
    gone = [f["id"] for f in before if f["id"] not in kept]
    if gone:
        problems.append(
            f"feature_list.json no longer lists {', '.join(gone)}: a feature is never removed; put each back "
            "exactly as it was"
        )
    edited = [f["id"] for f in before if f["id"] in kept and dict(kept[f["id"]]) != dict(f)]
    if edited:
        problems.append(
            f"feature_list.json changes {', '.join(edited)}: a listed feature is never edited (its passes "
            "included); put each back exactly as it was, and add a new feature that says what it changes"
        )
    if not gone and [f["id"] for f in after[: len(before)]] != [f["id"] for f in before]:
        problems.append(
            f"feature_list.json moves listed features: keep them first, in their order, and add the new "
            f"ones after {last}"
        )
    new = [f for f in after if f["id"] not in {g["id"] for g in before}]
    early = [f["id"] for f in new if _number(f["id"]) <= _number(last)]
    if early:
        problems.append(
            f"feature_list.json gives new features ids at or before the last listed one ({last}): "
            f"{', '.join(early)}; number new features from F{_number(last) + 1:03d} on"
        )
    done = [f["id"] for f in new if f.get("passes")]
    if done:
        problems.append(
            f"feature_list.json marks new features as passing ({', '.join(done)}): a new feature starts "
            "with passes false"
        )
    return problems
