"""What a person looks for after a night: REVIEW's findings per feature, and the work the
scheduler set aside, each with the command that brings it back. Read-only, no git process
(`status` stays fast): reviews from `reviews.json` and its history, stashes from git's reflog.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from session_scheduler.repo import refs
from session_scheduler.store import handoff_history
from session_scheduler.store.events import Event

SEVERITIES = ("critical", "major", "minor")
ARCHITECTURE = "architecture"
"""The key architecture reviews are filed under (they name no feature)."""


@dataclass(frozen=True)
class Finding:
    """One review: its verdict and the issues it raised, by severity."""

    review_id: int
    subject: str
    """The feature id, `architecture`, or the branch an architecture review's fixes were reviewed on."""
    verdict: str
    issues: tuple[tuple[str, str], ...]
    """(severity, text), critical first."""
    fixed_by: tuple[int, ...]
    """The fix entries that answered it."""
    acceptance: tuple[tuple[int, bool, str], ...] = ()
    """(step, passed, evidence) of each acceptance step it graded, in its order (none before
    reviews graded steps)."""

    def steps(self) -> str:
        """'2 of 3 steps passed; step 3 failed: printed `x`' ('' when it graded none)."""
        if not self.acceptance:
            return ""
        passed = sum(1 for _, ok, _ in self.acceptance if ok)
        failed = [f"step {n} failed: {evidence}" for n, ok, evidence in self.acceptance if not ok]
        return "; ".join([f"{passed} of {len(self.acceptance)} steps passed", *failed])

    def counts(self) -> str:
        """'1 critical, 2 major' ('no issues' when it raised none)."""
        found = [(s, sum(1 for sev, _ in self.issues if sev == s)) for s in SEVERITIES]
        return ", ".join(f"{n} {s}" for s, n in found if n) or "no issues"


def _entries(project: Path, key: str, current: dict[str, Any] | None, history: bool) -> list[dict[str, Any]]:
    items = handoff_history.read_history(project, key) if history else []
    items += list((current or {}).get(key) or []) if isinstance(current, dict) else []
    seen: dict[Any, dict[str, Any]] = {}
    for item in items:
        if isinstance(item, dict):
            seen[item.get(handoff_history.IDS[key])] = item  # moved and still present (a kill mid-move): once
    return list(seen.values())


def reviews(project: Path, *, history: bool = True) -> list[Finding]:
    """Every review in `reviews.json` (and, with `history`, the older ones moved out of it), in
    review order; a file missing or unreadable gives what the rest has."""
    try:
        current = json.loads((project / "reviews.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        current = None
    fixes: dict[int, list[int]] = {}
    for fix in _entries(project, "fixes", current, history):
        try:
            fixes.setdefault(int(fix["review_id"]), []).append(int(fix["fix_id"]))
        except (KeyError, TypeError, ValueError):
            continue
    found = []
    for review in _entries(project, "reviews", current, history):
        try:
            number = int(review["review_id"])
        except (KeyError, TypeError, ValueError):
            continue
        raw: dict[str, Any] = review["issues"] if isinstance(review.get("issues"), dict) else {}
        issues = tuple(
            (sev, " ".join(str(text).split()))
            for sev in SEVERITIES
            for text in (raw.get(sev) or [])
            if isinstance(raw.get(sev), list)
        ) + tuple(  # what the scheduler found (a red gate's output, a conflict): its end
            ("scheduler", _tail(" ".join(str(text).split()), SCHEDULER_CHARS))
            for text in (review.get("scheduler_findings") or [])
            if isinstance(review.get("scheduler_findings"), list)
        )
        subject = (
            review.get("feature_id")
            or (ARCHITECTURE if review.get("kind") == ARCHITECTURE else review.get("branch"))
            or "?"
        )
        graded = review.get("acceptance")
        graded = graded if isinstance(graded, list) else []
        acceptance = tuple(
            (int(r.get("step") or 0), r.get("passed") is True, " ".join(str(r.get("evidence") or "").split()))
            for r in graded
            if isinstance(r, dict)
        )
        found.append(
            Finding(
                number,
                str(subject),
                str(review.get("verdict") or "?"),
                issues,
                tuple(sorted(fixes.get(number, ()))),
                acceptance,
            )
        )
    return sorted(found, key=lambda f: f.review_id)


SCHEDULER_CHARS = 400
"""How much of the end of the scheduler's own finding (a red gate's output) a report shows."""


def _tail(text: str, chars: int) -> str:
    return text if len(text) <= chars else "…" + text[-(chars - 1) :]


def by_subject(found: list[Finding]) -> dict[str, list[Finding]]:
    """The reviews of each feature (and `architecture`), in review order."""
    grouped: dict[str, list[Finding]] = {}
    for finding in found:
        grouped.setdefault(finding.subject, []).append(finding)
    return grouped


@dataclass(frozen=True)
class SetAside:
    """Work the scheduler moved out of the way, and how to get it back."""

    what: str
    """`stash` (uncommitted work) or `branch` (a person's branch named as a work branch)."""
    ref: str
    """Where it is now: `stash@{n}` as the stash list numbers it today, or the kept ref."""
    message: str
    present: bool
    """False when it is no longer there (popped or dropped already)."""
    show: str
    restore: str
    at: float


def _stash_positions(git_dir: Path) -> dict[str, int]:
    """Stash commit -> its position in `git stash list` now (stash@{0} is the newest)."""
    try:
        lines = (
            (git_dir / "logs" / "refs" / "stash").read_text(encoding="utf-8", errors="replace").splitlines()
        )
    except OSError:
        return {}
    commits = [line.split(" ", 2)[1] for line in lines if line.count(" ") >= 2]
    return {commit: len(commits) - 1 - i for i, commit in enumerate(commits)}


def set_aside(project: Path, recorded: list[Event]) -> list[SetAside]:
    """The `set_aside` events of the log, each resolved against the repository as it is now."""
    git_dir = project / ".git"
    positions = _stash_positions(git_dir)
    found = []
    for event in recorded:
        ref, message, at = str(event["ref"]), str(event["message"]), float(event["ts"])
        if ref.startswith("refs/"):
            branch = ref.removeprefix("refs/scheduler/preexisting/")
            found.append(
                SetAside(
                    "branch",
                    ref,
                    message,
                    refs.sha(git_dir, ref) is not None,
                    f"git log {ref}",
                    f"git branch {branch} {ref}",
                    at,
                )
            )
            continue
        commit = event.get("commit")
        if commit:
            position = positions.get(str(commit))
            present, ref = (
                position is not None,
                f"stash@{{{position}}}" if position is not None else str(commit)[:10],
            )
        else:  # recorded before stash commits were: the ref as it was then
            present = bool(positions)
        found.append(
            SetAside(
                "stash",
                ref,
                message,
                present,
                f"git stash show -p --include-untracked {ref}",
                f"git stash pop {ref}",
                at,
            )
        )
    return found
