"""`status`: how a project is doing, read while a run goes on (read-only, no lock, fast).

Everything comes from the event log (a fold, `events.Totals`) and the saved state (the phase,
and the feature list of a project older than the event log). Nothing here imports the
session runner, so the answer comes well within a second.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from session_scheduler.core.errors import StateError
from session_scheduler.core.humane import duration, money, number, outcome, plural
from session_scheduler.core.layout import LOG_DIR
from session_scheduler.core.session import SessionFolder
from session_scheduler.repo.merge_queue import Queue
from session_scheduler.run import findings
from session_scheduler.store import events, specs, statefile
from session_scheduler.store.authority import FileAuthority, pid_alive
from session_scheduler.store.events import CUT_BY, Event, Totals
from session_scheduler.store.records import Records
from session_scheduler.view import digest

RECENT = 5


VERSION = 1
"""The version of the `status --json` object (docs/events.md): raised when a key changes meaning or goes."""


def is_running(totals: Totals) -> bool:
    """A run started, has not ended, and its process is still alive (a killed run is not)."""
    started = totals.run_started
    return started is not None and totals.run_ended is None and pid_alive(int(started["pid"]))


def lock_holder(project: Path) -> int | None:
    """The process holding the project's lock (a scheduler, from before its sandbox probe to its
    end), as the project's authority tells it without taking it."""
    return FileAuthority(project).holder()


def cut_sessions(log: list[Event], totals: Totals, running: bool, project: Path) -> list[dict[str, Any]]:
    """Every session cut off before Claude Code reported, oldest first: by what, the run it
    belonged to, its last recorded activity, and whether it ran again; the sessions of a killed
    run whose end no run has recorded yet come last (their transcript says when they last did
    something)."""
    later_start: dict[int, float] = {}
    for event in log:
        if event["kind"] == "session_started":
            later_start[int(event["session"])] = float(event["ts"])
    found = []
    for event in totals.cut:
        cut, number = event["cut"], int(event["session"])
        found.append(
            {
                "session": number,
                "role": event["role"],
                "feature": event.get("feature"),
                "by": cut.get("by"),
                "run": cut.get("run"),
                "last_activity": _iso(cut.get("last_activity")),
                "standing": event["standing"],
                "resumed": later_start.get(number, 0.0) > float(event["ts"])
                or event["standing"] in events.COUNTED,
            }
        )
    for flight in [] if running else totals.in_flight.values():  # killed with their run
        found.append(
            {
                "session": flight["session"],
                "role": flight["role"],
                "feature": flight.get("feature"),
                "by": "kill",
                "run": flight.get("run"),
                "last_activity": _last_activity(flight, project),
                "standing": None,
                "resumed": False,
            }
        )
    return found


def _last_activity(flight: Event, project: Path) -> str | None:
    """When a killed run's session last did something: its transcript's last write, else its start."""
    transcript = project / str(flight.get("log_dir", "")) / SessionFolder.TRANSCRIPT
    return _iso(
        max(float(flight.get("ts", 0.0)), transcript.stat().st_mtime if transcript.is_file() else 0.0)
    )


def _flight(flight: Event, now: float) -> dict[str, Any]:
    """A session in flight as `status --json` shows it."""
    return {
        "session": flight["session"],
        "role": flight["role"],
        "model": flight["model"],
        "feature": flight.get("feature"),
        "branch": flight.get("branch"),
        "attempt": flight.get("attempt"),
        "started_at": _iso(float(flight["ts"])),
        "running_for_s": round(now - float(flight["ts"]), 1),
    }


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
    log = events.read(events.log_path(project))
    totals = Totals.of(log)
    saved = statefile.load(project)
    running = is_running(totals)
    holder = None if running else lock_holder(project)
    backlog = saved.state.backlog if saved else None
    listed = totals.features or (backlog.features if backlog else ())
    passing = set(totals.passing) | set(backlog.passing if backlog else ())
    blocked = set(totals.blocked) | set(backlog.blocked if backlog else ())
    lane = saved.state.lane if saved else None
    flights = totals.in_flight if running else {}
    flight = totals.flight if running else None
    last_activity = totals.last_ts
    if flight is not None:
        transcript = project / str(flight.get("log_dir", "")) / SessionFolder.TRANSCRIPT
        if transcript.is_file():
            last_activity = max(last_activity or 0.0, transcript.stat().st_mtime)
    waiting = totals.waiting
    started = totals.run_started
    cut = cut_sessions(log, totals, running, project)
    reviews = findings.by_subject(findings.reviews(project, history=False))
    return {
        "version": VERSION,
        "project": str(project),
        "phase": lane.role.value if lane else "NEW",
        "running": running or holder is not None,
        "starting": None
        if holder is None
        else {"pid": holder, "doing": "checking the OS sandbox and the project before the first session"},
        "run": None
        if started is None
        else {
            "id": started["run"],
            "pid": started["pid"],
            "started_at": _iso(float(started["ts"])),
            "ended": None
            if totals.run_ended is None
            else {"status": totals.run_ended["status"], "message": totals.run_ended["message"]},
        },
        "current_feature": flight.get("feature")
        if flight
        else (lane.work.feature_id if lane and lane.work else None),
        "current_branch": flight.get("branch")
        if flight
        else (lane.work.branch if lane and lane.work else None),
        "in_flight": None if flight is None else _flight(flight, now),
        "lanes": {str(lane): _flight(flights[lane], now) for lane in sorted(flights)},
        "features": {
            "total": len(listed),
            "passing": len(passing & set(listed)),
            "blocked": len(blocked & set(listed)),
        },
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
        "recent": [  # the last to end, in session order (lanes end out of it)
            _receipt_line(e) for e in sorted(totals.recent(RECENT), key=lambda e: int(e.get("session") or 0))
        ],
        "last_activity": _iso(last_activity),
        "waiting": None
        if waiting is None or float(waiting["until"]) <= now
        else {
            "why": waiting["why"],
            "until": _iso(float(waiting["until"])),
            "seconds_left": round(float(waiting["until"]) - now),
        },
        "cut": cut[-RECENT:],
        "findings": {
            subject: [
                {
                    "review_id": f.review_id,
                    "verdict": f.verdict,
                    "issues": [{"severity": sev, "text": text} for sev, text in f.issues],
                    "fixed_by": list(f.fixed_by),
                    "acceptance": [
                        {"step": n, "passed": ok, "evidence": evidence} for n, ok, evidence in f.acceptance
                    ],
                }
                for f in found
            ]
            for subject, found in reviews.items()
        },
        "set_aside": [
            {
                "what": a.what,
                "ref": a.ref,
                "message": a.message,
                "present": a.present,
                "show": a.show,
                "restore": a.restore,
                "at": _iso(a.at),
            }
            for a in findings.set_aside(project, totals.set_aside)
        ],
        "queue": [
            {
                "feature": entry.feature,
                "branch": entry.branch,
                "lane": entry.lane,
                "queued_at": _iso(entry.queued_at),
                "waiting_s": round(now - entry.queued_at, 1),
            }
            for entry in Queue(Records(project)).pending()
        ],
        "log": str(Path(LOG_DIR) / events.log_path(project).name),
        "digest": digest.digest_of(project, log),
        "spec": _spec(project),
    }


def _spec(project: Path) -> dict[str, Any] | None:
    """The spec's newest version: when it came, and the session that planned it (None: no history)."""
    try:
        versions = specs.history(project)
    except StateError:
        return None
    if not versions:
        return None
    newest = versions[-1]
    return {
        "version": newest.number,
        "added_at": newest.added_at or None,
        "planned_in": newest.planned_in,
        "waits": specs.pending(project),
    }


def render(status: dict[str, Any]) -> list[str]:
    """The status as a few lines for a person."""
    features, sessions = status["features"], status["sessions"]
    starting = status.get("starting")
    state = (
        f"starting ({starting['doing']}; pid {starting['pid']})"
        if starting
        else "running"
        if status["running"]
        else "not running"
    )
    lines = [f"{status['project']}: {state}, phase {status['phase']}", *digest.lines(status.get("digest"))]
    flight, lanes, queue = status["in_flight"], status.get("lanes", {}), status.get("queue", [])
    if set(lanes) - {"0"} or queue:  # several lanes: each one's session, then the merge queue
        for lane, f in sorted(lanes.items(), key=lambda item: int(item[0])):
            lines.append(
                f"  lane {lane}: {f['feature'] or '-'} · {f['role']} · session {f['session']}"
                f", since {f['started_at']} ({duration(f['running_for_s'])})"
            )
        for entry in queue:
            lines.append(
                f"  merge queue: {entry['feature']} (lane {entry['lane']}, {entry['branch']})"
                f" waiting for {duration(entry['waiting_s'])}"
            )
    elif flight:
        where = " · ".join(str(x) for x in (flight["feature"], flight["branch"]) if x)
        lines.append(
            f"  now: session {flight['session']} {flight['role']} ({flight['model']})"
            f"{' · ' + where if where else ''}, running for {duration(flight['running_for_s'])}"
        )
    if status["waiting"]:
        wait = status["waiting"]
        lines.append(
            f"  waiting ({wait['why'].replace('_', ' ')}) until {wait['until']} ({duration(wait['seconds_left'])} left)"
        )
    lines.append(
        f"  features: {features['passing']}/{features['total']} passing, {features['blocked']} blocked"
    )
    spec = status.get("spec")
    if spec and spec["version"] > 1:
        planned = "waits to be planned" if spec["waits"] else f"planned in session {spec['planned_in']}"
        lines.append(f"  spec: version {spec['version']} (added {spec['added_at'] or 'earlier'}), {planned}")
    by_role = ", ".join(f"{role} {n}" for role, n in sessions["by_role"].items()) or "none"
    lines.append(f"  sessions: {number(sessions['total'])} ({by_role}); {sessions['failed']} failed")
    basis = "" if status["cost_basis"] == "api" else " (the CLI's estimate, not billed)"
    lines.append(f"  spent: {number(status['tokens']['total'])} tokens, {money(status['cost_usd'])}{basis}")
    if status["recent"]:
        lines.append(f"  last {plural(len(status['recent']), 'session')}:")
        for r in status["recent"]:
            verdict = f" {r['verdict']}" if r["verdict"] else ""
            lines.append(
                f"    {r['session']:>4} {r['role']:<12} {r['feature'] or '-':<7} {r['outcome']}{verdict}  {money(r['cost_usd'])}"
            )
    for c in status.get("cut", []):
        where = f" · {c['feature']}" if c["feature"] else ""
        after = (
            "; not counted, done again from its start afterwards"
            if c["resumed"] and c["standing"] not in events.COUNTED
            else f"; counted as {c['standing']}"
            if c["standing"] in events.COUNTED
            else "; not resumed yet: run the same command to resume it"
        )
        lines.append(
            f"  cut: session {c['session']} {c['role']}{where}, {CUT_BY.get(str(c['by']), str(c['by']))} "
            f"(run {c['run']}), last activity {c['last_activity'] or 'unknown'}{after}"
        )
    lines += _findings_lines(status.get("findings", {}))
    for a in status.get("set_aside", []):
        if a["present"]:
            lines.append(
                f"  set aside: {a['ref']} ({a['message']}): `{a['show']}` shows it, `{a['restore']}` brings it back"
            )
        else:
            lines.append(
                f"  set aside earlier: {a['ref']} ({a['message']}), no longer there (brought back or dropped)"
            )
    lines.append(f"  last activity: {status['last_activity'] or 'none yet'}")
    run = status["run"]
    if run and run["ended"] and not status["running"]:
        lines.append(f"  last run ended: {outcome(run['ended']['status'], run['ended']['message'])}")
    return lines


FINDING_LINES = 5
TEXT_WIDTH = 90


def _findings_lines(found: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The latest review that raised issues, of the features (and architecture) whose reviews
    did, newest last; every review is in the report."""
    latest = []
    for subject, reviews in found.items():
        raised = [r for r in reviews if r["issues"]]
        if raised:
            latest.append((subject, raised[-1], reviews[-1]))
    latest.sort(key=lambda item: item[1]["review_id"])
    if not latest:
        return []
    lines = ["  review findings (latest per feature that had any; `report` lists them all):"]
    for subject, review, last in latest[-FINDING_LINES:]:
        counts: dict[str, int] = {}
        for issue in review["issues"]:
            counts[issue["severity"]] = counts.get(issue["severity"], 0) + 1
        tally = ", ".join(f"{n} {sev}" for sev, n in counts.items())
        fixed = f", fixed by fix #{', #'.join(map(str, review['fixed_by']))}" if review["fixed_by"] else ""
        since = f"; then #{last['review_id']} {last['verdict']}" if last is not review else ""
        text = " ".join(review["issues"][0]["text"].split())  # one line, whatever the agent wrote
        text = text if len(text) <= TEXT_WIDTH else text[: TEXT_WIDTH - 1] + "…"
        lines.append(
            f"    {subject:<7} #{review['review_id']} {review['verdict']} ({tally}{fixed}): {text}{since}"
        )
    return lines
