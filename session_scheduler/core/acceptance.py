"""A feature review's claim against the feature's acceptance steps (`steps` in feature_list.json).

Pure: the review's verdict, issues and step results (`acceptance`) checked against the feature's
steps; every problem listed, so the refusal says all that is missing at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def problems(
    steps: Sequence[str],
    verdict: str,
    results: Sequence[Mapping[str, Any]] | None,
    issues: Mapping[str, Sequence[str]] | None = None,
) -> list[str]:
    """What is wrong with a review's `acceptance` results (empty when they hold).

    A PASS needs every step passed, each with its evidence; a REQUEST_CHANGES needs the results
    too, and a failed step or an issue to fix; no result may name a step the feature does not have.
    """
    results = list(results or [])
    out = [
        f"acceptance names step {r.get('step')}, but the feature has {len(steps)} step(s) (numbered from 1)"
        for r in results
        if not isinstance(r.get("step"), int) or not 1 <= r["step"] <= len(steps)
    ]
    if not steps or verdict not in ("PASS", "REQUEST_CHANGES"):
        return out
    graded = {r.get("step") for r in results}
    missing = [n for n in range(1, len(steps) + 1) if n not in graded]
    if missing:
        out.append(
            f"a {verdict} must grade every acceptance step: no result for step(s) "
            f"{', '.join(map(str, missing))}; record_review with acceptance=[{{step, passed, evidence}}, ...]"
        )
    failed = [r for r in results if r.get("passed") is not True]
    if verdict == "PASS":
        if failed:
            out.append(
                f"a PASS with failed acceptance step(s) {', '.join(str(r.get('step')) for r in failed)}: "
                "the verdict is REQUEST_CHANGES"
            )
        bare = [
            r.get("step")
            for r in results
            if r.get("passed") is True and not str(r.get("evidence") or "").strip()
        ]
        if bare:
            out.append(
                f"a passed step needs its evidence (what was run and seen): none for step(s) {', '.join(map(str, bare))}"
            )
    elif not failed and not any((issues or {}).values()):
        out.append("a REQUEST_CHANGES names what to change: a failed acceptance step or an issue")
    return out
