"""`status`: how a project is doing, read while a run goes on (read-only, no lock, fast).

Everything comes from the event log (a fold, `events.Totals`) and the saved state (the phase,
and the feature list of a project older than the event log). Nothing here imports the
session runner, so the answer comes well within a second.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import events
import statefile
from events import Event, Totals
from humane import duration, money, number, outcome, plural
from layout import LOG_DIR

RECENT = 5


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_running(totals: Totals) -> bool:
    """A run started, has not ended, and its process is still alive (a killed run is not)."""
    started = totals.run_started
    return started is not None and totals.run_ended is None and pid_alive(int(started["pid"]))


def _iso(ts: float | None) -> str | None:
    return None if ts is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _receipt_line(event: Event) -> dict[str, Any]:
    receipt = event["receipt"]
    return {
        "session": event["session"],
        "role": event["role"],
        "feature": event.get("feature"),
        "outcome": event["standing"],
        "verdict": receipt.get("verdict"),
        "reason": event.get("reason", ""),
        "cost_usd": receipt.get("cost_usd", 0.0),
        "tokens": sum(int(receipt.get(k) or 0) for k in events.RECEIPT_TOKENS),
        "ended_at": _iso(float(event["ts"])),
    }


def status_of(project: Path, now: float | None = None) -> dict[str, Any]:
    """The project's status as the documented `status --json` object (docs/events.md)."""
    now = time.time() if now is None else now
    totals = Totals.of(events.read(events.log_path(project)))
    saved = statefile.load(project)
    running = is_running(totals)
    backlog = saved.state.backlog if saved else None
    listed = totals.features or (backlog.features if backlog else ())
    passing = set(totals.passing) | set(backlog.passing if backlog else ())
    blocked = set(totals.blocked) | set(backlog.blocked if backlog else ())
    lane = saved.state.lane if saved else None
    flight = totals.in_flight if running else None
    last_activity = totals.last_ts
    if flight is not None:
        transcript = project / str(flight.get("log_dir", "")) / "transcript.jsonl"
        if transcript.is_file():
            last_activity = max(last_activity or 0.0, transcript.stat().st_mtime)
    waiting = totals.waiting
    started = totals.run_started
    return {
        "project": str(project),
        "phase": lane.role.value if lane else "NEW",
        "running": running,
        "run": None if started is None else {
            "id": started["run"],
            "pid": started["pid"],
            "started_at": _iso(float(started["ts"])),
            "ended": None if totals.run_ended is None else {"status": totals.run_ended["status"], "message": totals.run_ended["message"]},
        },
        "current_feature": flight.get("feature") if flight else (lane.work.feature_id if lane and lane.work else None),
        "current_branch": flight.get("branch") if flight else (lane.work.branch if lane and lane.work else None),
        "in_flight": None if flight is None else {
            "session": flight["session"],
            "role": flight["role"],
            "model": flight["model"],
            "feature": flight.get("feature"),
            "branch": flight.get("branch"),
            "attempt": flight.get("attempt"),
            "started_at": _iso(float(flight["ts"])),
            "running_for_s": round(now - float(flight["ts"]), 1),
        },
        "features": {"total": len(listed), "passing": len(passing & set(listed)), "blocked": len(blocked & set(listed))},
        "sessions": {
            "total": totals.sessions,
            "by_role": totals.sessions_by_role,
            "failed": totals.failed,
            "not_counted": dict(sorted(totals.not_counted.items())),
        },
        "cost_usd": round(totals.cost_usd, 6),
        "cost_basis": (started or {}).get("cost_basis", "api"),
        "tokens": {**totals.spend.tokens, "total": totals.spend.total_tokens},
        "denials_by_role": dict(sorted(totals.denials_by_role.items())),
        "recent": [_receipt_line(e) for e in totals.recent(RECENT)],
        "last_activity": _iso(last_activity),
        "waiting": None if waiting is None or float(waiting["until"]) <= now else {
            "why": waiting["why"],
            "until": _iso(float(waiting["until"])),
            "seconds_left": round(float(waiting["until"]) - now),
        },
        "log": str(Path(LOG_DIR) / events.log_path(project).name),
    }


def render(status: dict[str, Any]) -> list[str]:
    """The status as a few lines for a person."""
    features, sessions = status["features"], status["sessions"]
    state = "running" if status["running"] else "not running"
    lines = [f"{status['project']}: {state}, phase {status['phase']}"]
    flight = status["in_flight"]
    if flight:
        where = " · ".join(str(x) for x in (flight["feature"], flight["branch"]) if x)
        lines.append(
            f"  now: session {flight['session']} {flight['role']} ({flight['model']})"
            f"{' · ' + where if where else ''}, running for {duration(flight['running_for_s'])}"
        )
    if status["waiting"]:
        wait = status["waiting"]
        lines.append(f"  waiting ({wait['why'].replace('_', ' ')}) until {wait['until']} ({duration(wait['seconds_left'])} left)")
    lines.append(f"  features: {features['passing']}/{features['total']} passing, {features['blocked']} blocked")
    by_role = ", ".join(f"{role} {n}" for role, n in sessions["by_role"].items()) or "none"
    lines.append(f"  sessions: {number(sessions['total'])} ({by_role}); {sessions['failed']} failed")
    basis = "" if status["cost_basis"] == "api" else " (the CLI's estimate, not billed)"
    lines.append(f"  spent: {number(status['tokens']['total'])} tokens, {money(status['cost_usd'])}{basis}")
    if status["recent"]:
        lines.append(f"  last {plural(len(status['recent']), 'session')}:")
        for r in status["recent"]:
            verdict = f" {r['verdict']}" if r["verdict"] else ""
            lines.append(f"    {r['session']:>4} {r['role']:<12} {r['feature'] or '-':<7} {r['outcome']}{verdict}  {money(r['cost_usd'])}")
    lines.append(f"  last activity: {status['last_activity'] or 'none yet'}")
    run = status["run"]
    if run and run["ended"] and not status["running"]:
        lines.append(f"  last run ended: {outcome(run['ended']['status'], run['ended']['message'])}")
    return lines
