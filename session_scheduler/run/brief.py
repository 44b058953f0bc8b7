"""The session brief: what one session needs to know, in a size that does not grow with the project.

`render` is pure: the work item's entry (description, steps), the open review's issues, the
earlier reviews of the feature, the last few sessions' notes, the neighbouring features' titles,
the project's counts and test command, each cut to fit, the whole under `BUDGET` bytes. It ends
with the same facts as one JSON object, for tools and scripts. `gather` reads them from the
hand-off files (the only I/O here).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from session_scheduler.core.errors import StateError
from session_scheduler.core.machine import SessionState
from session_scheduler.core.tasks import Task
from session_scheduler.store.handoff_history import archived_review_count, read_history
from session_scheduler.store.progress import Handoff, load_handoff
from session_scheduler.store.records import Records, records_of

BUDGET = 6_000
"""Bytes a brief may take, whatever the number of features or sessions."""
MAP_BUDGET = 8_000
"""Bytes of the repository map a brief may carry besides its own BUDGET (repo/repomap.py)."""
FIELD = 500
"""Characters of one description, note or issue."""
STEP = 240
"""Characters of one acceptance step."""
STEPS, ISSUES, SESSIONS, NEIGHBOURS, EARLIER = 12, 8, 3, 2, 3
BROWSER = (
    "## Your browser\n"
    "The branch's app runs at {url} for your browser tools (`mcp__browser__*`), which reach that "
    "app and nothing else. Do each acceptance step there as a user would; after each, take a "
    "`browser_snapshot` and a `browser_take_screenshot` (no `filename`) and cite the names their "
    "results give (`Evidence: snapshot saved as ...`) as that step's `snapshot` and `screenshot` in "
    "record_review's acceptance. Read `browser_console_messages` once before you decide. A PASS "
    "without this evidence is refused."
)


def clip(text: Any, limit: int = FIELD) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass(frozen=True)
class Planning:
    """What a planning session (the INITIALIZER in any form, an ARCHITECTURE review) is told
    beyond the hand-off files, read by the caller (run/planning.py)."""

    existing: bool = False
    """The first INITIALIZER plans on a codebase the person had (its `existing` form)."""
    tools: str = ""
    """`existing`: what the person's configuration names to test and check the code (one line)."""
    spec_change: str = ""
    """The extend form: the spec's diff since the last version planned (store/specs.change)."""
    tasks: tuple[Task, ...] = ()
    """The spec's open tasks, when it is a task list or an issues export (core/tasks.py)."""
    repo_map: str = ""
    """The map of the code (repo/repomap.py): the person's, for the existing form; main's, for
    an ARCHITECTURE review."""


NO_PLANNING = Planning()


@dataclass(frozen=True)
class Facts:
    """What the brief says, as plain values."""

    role: str
    session: int
    feature: dict[str, Any] | None = None
    branch: str | None = None
    neighbours: list[tuple[str, str]] = field(default_factory=list)
    open_review: dict[str, Any] | None = None
    earlier_reviews: list[dict[str, Any]] = field(default_factory=list)
    earlier_review_count: int = 0
    recent_sessions: list[dict[str, Any]] = field(default_factory=list)
    features_total: int = 0
    features_passing: int = 0
    test_command: str | None = None
    browser: str | None = None
    """A web feature's REVIEW: the app's address as its browser reaches it."""
    last_fix: dict[str, Any] | None = None
    """A REVIEW after a FIX: that fix's entry (what it fixed, what it left and why)."""
    form: str | None = None
    """The INITIALIZER's form: `new`, `existing` (a codebase the person had) or `extend` (a newer spec)."""
    spec_change: str = ""
    """`extend`: the spec's diff since the last version planned (store/specs.change)."""
    last_features: list[tuple[str, str]] = field(default_factory=list)
    """`extend`: the last features listed (id, description), the newest last."""
    repo_map: str = ""
    """`existing` and ARCHITECTURE: the map of the code (repo/repomap.py), cut to its own budget."""
    tasks: list[tuple[str, str]] = field(default_factory=list)
    """The INITIALIZER of a task list: each open task (ref, title), in the spec's order."""
    tools: str = ""
    """`existing`: what the person's configuration names to test and check the code (one line)."""


def _issues(review: dict[str, Any]) -> dict[str, list[str]]:
    issues = review.get("issues") or {}
    return {
        level: [clip(i) for i in (issues.get(level) or [])[:ISSUES]]
        for level in ("critical", "major", "minor")
    }


def _failed_steps(review: dict[str, Any]) -> list[dict[str, Any]]:
    """The review's acceptance results that failed, in step order."""
    return [r for r in review.get("acceptance") or [] if isinstance(r, dict) and r.get("passed") is not True]


def render(facts: Facts) -> str:
    """The brief as Markdown with its facts as JSON at the end, under BUDGET bytes."""
    lines = [f"# Session {facts.session} brief ({facts.role})", ""]
    lines.append(f"Project: {facts.features_passing} of {facts.features_total} features pass.")
    if facts.test_command:
        lines.append(f"Test command: `{clip(facts.test_command, 200)}`")
    feature = facts.feature
    if feature is not None:
        lines += [
            "",
            f"## Your feature: {feature['id']} (branch `{facts.branch}`)",
            clip(feature.get("description")),
            "",
            "Acceptance steps (build to them; REVIEW grades each, in order):",
        ]
        steps = [str(step) for step in feature.get("steps") or []]
        lines += [f"{n}. {clip(step, STEP)}" for n, step in enumerate(steps[:STEPS], 1)]
        if len(steps) > STEPS or any(len(" ".join(step.split())) > STEP for step in steps[:STEPS]):
            lines.append(f"(steps cut to fit the brief: `show_feature {feature['id']}` has them whole)")
    elif facts.branch:
        lines += ["", f"## Your branch: `{facts.branch}`"]
    if facts.form == "extend":
        lines += _extension(facts)
    if facts.tools:
        lines += ["", f"The repository's own configuration names: {clip(facts.tools, 600)}."]
    if facts.tasks:
        lines += _tasks(facts)
    if facts.repo_map:
        lines += ["", facts.repo_map.rstrip("\n")]
    if facts.browser:
        lines += ["", BROWSER.format(url=facts.browser)]
    if facts.neighbours:
        lines += [
            "",
            "Neighbouring features (context only, build none of them): "
            + "; ".join(f"{i} {clip(t, 80)}" for i, t in facts.neighbours),
        ]
    if facts.open_review is not None and facts.open_review.get("conflicts"):
        lines += _conflicts(facts)
    elif facts.open_review is not None:
        review = facts.open_review
        lines += ["", f"## Open review {review.get('review_id')} ({review.get('verdict')}): fix these"]
        for level, items in _issues(review).items():
            lines += [f"- {level}: {item}" for item in items]
        for finding in (review.get("scheduler_findings") or [])[:ISSUES]:
            lines.append(f"- major (found by the scheduler): {clip(finding)}")
        lines += [
            f"- acceptance step {r.get('step')} failed: {clip(r.get('evidence'), 300)}"
            for r in _failed_steps(review)[:STEPS]
        ]
    if facts.earlier_reviews:
        lines += ["", f"## Earlier reviews of this work ({facts.earlier_review_count} in all, newest last)"]
        lines += [
            f"- review {r.get('review_id')}: {r.get('verdict')}: {clip('; '.join(i for items in _issues(r).values() for i in items), 300)}"
            for r in facts.earlier_reviews
        ]
    if facts.last_fix is not None:
        fix = facts.last_fix
        lines += ["", f"## The last fix (fix {fix.get('fix_id')}, for review {fix.get('review_id')})"]
        lines += [f"- fixed: {clip(item, 300)}" for item in (fix.get("issues_fixed") or [])[:ISSUES]]
        if fix.get("notes"):
            lines.append(f"- the FIX's notes (what it left, and why): {clip(fix.get('notes'))}")
    if facts.recent_sessions:
        lines += ["", "## The last sessions"]
        lines += [
            f"- session {s.get('session_id')} {s.get('agent_type')} {s.get('outcome')}: {clip(s.get('notes') or '', 300)}"
            for s in facts.recent_sessions
        ]
    data: dict[str, Any] = {
        "session": facts.session,
        "role": facts.role,
        "feature": feature.get("id") if feature else None,
        "branch": facts.branch,
        "open_review": {
            "review_id": facts.open_review.get("review_id"),
            "issues": _issues(facts.open_review),
            "failed_steps": [r.get("step") for r in _failed_steps(facts.open_review)][:STEPS],
            **(
                {"conflicts": list(facts.open_review["conflicts"])[:STEPS]}
                if facts.open_review.get("conflicts")
                else {}
            ),
        }
        if facts.open_review
        else None,
        "earlier_reviews": facts.earlier_review_count,
        "test_command": clip(facts.test_command, 200) if facts.test_command else None,
        **({"browser": facts.browser} if facts.browser else {}),
        **({"form": facts.form} if facts.form else {}),
        **({"next_id": next_id(facts.features_total, facts.last_features)} if facts.form == "extend" else {}),
    }

    def whole(body: list[str]) -> str:
        return "\n".join([*body, "", "```json", json.dumps(data, ensure_ascii=False), "```", ""])

    budget = BUDGET + min(len(facts.repo_map.encode("utf-8")), MAP_BUDGET)  # the map has a budget of its own
    text = whole(lines)
    while len(text.encode("utf-8")) > budget and len(lines) > 4:  # drop from the least needed end
        lines.pop(-1)
        text = whole([*lines, "- (cut to fit the brief)"])
    if len(text.encode("utf-8")) > budget and data["open_review"]:  # the issues are in the lines kept above
        data["open_review"] = {
            "review_id": data["open_review"]["review_id"],
            "failed_steps": data["open_review"]["failed_steps"],
            "issues": "cut to fit the brief: the review is in reviews.json (or reviews_history.jsonl) under its review_id",
        }
        text = whole([*lines, "- (cut to fit the brief)"])
    return text


def _conflicts(facts: Facts) -> list[str]:
    """A FIX whose review is only a merge conflict with `main`: a small session, said as one."""
    review = facts.open_review or {}
    files = [clip(f, 200) for f in review.get("conflicts") or []][:STEPS]
    return [
        "",
        f"## `main` moved under your branch: merge it and resolve (review {review.get('review_id')})",
        "Your work was reviewed and approved; other features landed on `main` while it waited, and "
        f"merging `{facts.branch}` onto `main` now conflicts in:",
        *(f"- `{name}`" for name in files),
        f"Do only this: on `{facts.branch}`, `git merge main`; resolve each conflict keeping what both "
        "sides meant (your feature and what landed); run the tests; commit the merge; record the fix. "
        "Change nothing else.",
    ]


def next_id(total: int, last: list[tuple[str, str]]) -> str:
    """The first id after the list's last (`F` and at least three digits, as the list numbers them)."""
    number = max((int(i[1:]) for i, _ in last if i[1:].isdigit()), default=total)
    return f"F{number + 1:03d}"


def _extension(facts: Facts) -> list[str]:
    """The extend form's part of the brief: what changed, where the list ends, the next id."""
    lines = [
        "",
        "## The spec changed: plan its new features",
        f"The project lists {facts.features_total} features; the last ones are:",
        *(f"- {i}: {clip(d, 160)}" for i, d in facts.last_features),
        f"Number the new features from {next_id(facts.features_total, facts.last_features)} on.",
        "",
        "What changed in app_spec.txt (`+` lines are new, `-` lines are gone):",
        "```diff",
        facts.spec_change or "(no earlier version is kept: compare app_spec.txt with the features listed)",
        "```",
    ]
    return lines


def _tasks(facts: Facts) -> list[str]:
    """The tasks a task-list spec holds: each becomes one feature that names it in `task`."""
    return [
        "",
        f"## The spec is a task list: {len(facts.tasks)} open tasks",
        "Each task below becomes exactly one feature whose `task` is the task's ref (a feature may "
        "also have no task: a foundation others build on). The tasks' bodies are in app_spec.txt.",
        *(f"- `{ref}`: {clip(title, 120)}" for ref, title in facts.tasks[:TASKS]),
        *([f"- ... and {len(facts.tasks) - TASKS} more in app_spec.txt"] if len(facts.tasks) > TASKS else []),
    ]


TASKS = 40
"""Tasks a brief names by ref and title (the rest are counted; app_spec.txt has them all)."""
LAST_FEATURES = 5
"""Features the extend form's brief names at the end of the list (the rest are in feature_list.json)."""


def gather(
    where: Records | Path,
    state: SessionState,
    number: int,
    test_command: str | None,
    browser: str | None = None,
    planning: Planning = NO_PLANNING,
) -> Facts:
    """The facts of the session about to run in `state`, from the hand-off files (the records');
    `browser`: the app's address for a web REVIEW's browser; `planning`, what a planning session
    is told of a newer spec, a task list and the code (read by the caller)."""
    records = records_of(where)
    project = records.root
    role, lane = state.lane.role.value, state.lane
    handoff = _handoff(records)
    features, reviews = handoff.features(), handoff.review_list()
    sessions = list((handoff.progress or {}).get("sessions", []))
    work = lane.work
    feature_id = work.feature_id if work else None
    at = _position(features, feature_id, state.backlog.features) if feature_id else None
    feature = features[at] if at is not None else None
    neighbours: list[tuple[str, str]] = []
    if at is not None:
        near = features[max(at - NEIGHBOURS, 0) : at] + features[at + 1 : at + 1 + NEIGHBOURS]
        neighbours = [(str(f.get("id")), str(f.get("description", ""))) for f in near]
    branch = work.branch if work else None

    def ours(review: dict[str, Any]) -> bool:
        if role == "ARCHITECTURE":
            return review.get("kind") == "architecture"
        if feature_id:
            return review.get("feature_id") == feature_id
        return bool(branch) and review.get("kind") == "feature" and review.get("branch") == branch

    mine = [r for r in reviews if ours(r)]
    count = len(mine) + archived_review_count(  # older ones moved to the history
        records, "architecture" if role == "ARCHITECTURE" else str(feature_id or branch or "")
    )
    open_review = None
    if lane.open_review is not None:
        found = [r for r in reviews if r.get("review_id") == lane.open_review]
        found = found or [
            r for r in read_history(project, "reviews") if r.get("review_id") == lane.open_review
        ]
        open_review = found[-1] if found else None
    ids = {r.get("review_id") for r in mine}
    fixes = [f for f in handoff.fix_list() if f.get("review_id") in ids] if role == "REVIEW" else []
    form = None
    if role == "INITIALIZER":
        form = "extend" if features else ("existing" if planning.existing else "new")
    return Facts(
        form=form,
        spec_change=planning.spec_change if form == "extend" else "",
        tasks=[(t.ref, t.title) for t in planning.tasks] if form else [],
        tools=planning.tools if form == "existing" else "",
        last_features=[(str(f.get("id")), str(f.get("description", ""))) for f in features[-LAST_FEATURES:]]
        if form == "extend"
        else [],
        repo_map=planning.repo_map if role in ("INITIALIZER", "ARCHITECTURE") else "",
        last_fix=fixes[-1] if fixes else None,
        role=role,
        session=number,
        feature=feature,
        branch=branch,
        neighbours=neighbours,
        open_review=open_review if role == "FIX" else None,
        earlier_reviews=mine[-EARLIER:],
        earlier_review_count=count,
        recent_sessions=sessions[-SESSIONS:],
        features_total=len(features),
        features_passing=len(handoff.passing()),
        test_command=test_command,
        browser=browser,
    )


def _position(features: list[dict[str, Any]], feature_id: str, order: tuple[str, ...]) -> int | None:
    """Where a feature is in the list: first where the state's order puts it (the list keeps
    that order: only `passes` changes after the INITIALIZER), else wherever it is."""
    try:
        n = order.index(feature_id)
    except ValueError:
        n = -1
    if 0 <= n < len(features) and features[n].get("id") == feature_id:
        return n
    return next((n for n, f in enumerate(features) if f.get("id") == feature_id), None)


def _handoff(records: Records) -> Handoff:
    """The hand-off files as validated (read once per version); empty where one is broken:
    verification, not the brief, judges broken files."""
    try:
        return load_handoff(records)
    except StateError:
        return Handoff(None, None, None)
