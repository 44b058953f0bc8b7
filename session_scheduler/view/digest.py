"""The morning digest: what the last run landed, what waits for the person and why, what is
blocked and why, and what the run cost, in a few lines. It heads `status` and the report, and
`--notify` sends it with the run's end.

Read from the records alone (the event log, the saved options, the proofs, the review branch
through run/approval.py); nothing here moves anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from session_scheduler.core.config import REVIEWED, AgentConfig, trunk_of
from session_scheduler.core.errors import SchedulerError
from session_scheduler.core.humane import money, plural
from session_scheduler.repo import landing
from session_scheduler.run import approval
from session_scheduler.store import events, progress, statefile
from session_scheduler.store.events import Event, Totals
from session_scheduler.view import proofs


def digest_of(project: Path, log: list[Event] | None = None) -> dict[str, Any] | None:
    """The digest as data (`status --json`'s `digest`); None for a project without saved options."""
    try:
        saved = progress.load_config(project)
    except SchedulerError:
        return None
    if saved is None:
        return None
    config = AgentConfig.from_json(saved)
    log = events.read(events.log_path(project)) if log is None else log
    last = next((e for e in reversed(log) if e["kind"] == "run_started"), None)
    run = str(last["run"]) if last else None
    ran = Totals.of(log, run=run) if run else Totals()
    landed = list(
        dict.fromkeys(
            e["feature"]
            for e in log
            if e["kind"] == "merge_verified" and e.get("feature") and e.get("run") == run
        )
    )
    back: dict[str, None] = {}  # sent back by the person and not landed again since, in order
    for event in log:
        feature = event.get("feature")
        if event["kind"] == "sent_back" and event.get("why") == landing.PERSON and feature:
            back[str(feature)] = None
        elif event["kind"] == "merge_verified" and feature:
            back.pop(str(feature), None)
    landed = [f for f in landed if f not in back]
    blocked: dict[str, str] = {}
    for event in log:
        if event["kind"] == "feature_blocked":
            because = event.get("because")
            blocked[str(event["feature"])] = (
                f"it depends on {because}, which is blocked"
                if because
                else f"rejected {plural(int(event['rejections']), 'time')}"
            )
    try:
        waiting = approval.waiting(project, config)
        state = statefile.load(project)
    except SchedulerError:
        waiting, state = [], None
    holds = state.schedule.backlog.held if state else ()
    return {
        "lands_on": trunk_of(config)
        if config.land_on == "main" or config.review_branch
        else "a review branch",
        "your_branch": landing.person_branch(project) if config.land_on in REVIEWED else None,
        "landed": landed,
        "waiting_for_you": [
            *({"feature": f, "why": f"held: {why}", "proof": _proof(project, f)} for f, why in holds),
            *(
                {"feature": f, "why": "on the review branch, not approved", "proof": _proof(project, f)}
                for f in waiting
            ),
        ],
        "sent_back": list(back),
        "blocked": [{"feature": f, "why": why} for f, why in blocked.items()],
        "cost_usd": round(ran.cost_usd, 6),
        "run": run,
    }


def _proof(project: Path, feature: str) -> str | None:
    try:
        path = proofs.path_of(project, feature)
    except ValueError:
        return None
    return str(path.relative_to(project)) if path.is_file() else None


def lines(digest: dict[str, Any] | None) -> list[str]:
    """The digest for a person: a heading and a line each for what landed, waits, is blocked, cost."""
    if digest is None:
        return []
    out = ["Morning digest (the last run):"]
    where = digest["lands_on"]
    out.append(f"  landed on {where}: {', '.join(digest['landed']) or 'nothing'}")
    waiting = digest["waiting_for_you"]
    held = [w for w in waiting if w["why"].startswith("held: ")]
    for w in held:
        out.append(f"  waiting for you: {w['feature']}, {w['why']} (`approve {w['feature']}` lands it)")
    review = [w for w in waiting if w not in held]
    if review:
        names = ", ".join(w["feature"] for w in review)
        out.append(
            f"  waiting for you: {names} (on {where}, not on {digest['your_branch']}); `approve` lands "
            f"{'it' if len(review) == 1 else 'them'}, `send-back FEATURE --why ...` returns one"
        )
    if waiting:
        out.append(f"  proofs: .agent_logs/{proofs.PROOFS_DIR}/ (one per feature)")
    elif digest["your_branch"]:
        out.append(f"  waiting for you: nothing (your branch {digest['your_branch']} has every feature)")
    back = digest.get("sent_back") or []
    if back:
        out.append(f"  sent back by you: {', '.join(back)} (the next run's FIX answers your words)")
    if digest["blocked"]:
        out.append("  blocked: " + "; ".join(f"{b['feature']} ({b['why']})" for b in digest["blocked"]))
    out.append(f"  the last run cost: {money(digest['cost_usd'])}")
    return out
