"""`report`: the project as one page (HTML) or a few tables (Markdown).

`gather` is the only function that reads files: it folds the event log (`events.Totals`, the
same fold `status` and the run summary use) and the feature descriptions into `ReportData`,
plain values. `render_html` and `render_markdown` are pure. With several lanes the timeline has
a row per lane, the sessions name their lane, and a section shows the merge queue's waits;
one lane's report is what it always was. The HTML page fetches nothing (inline CSS and SVG)
but the evidence files it shows (view/review_evidence.py, view/evidence_pages.py: screenshots
inline, snapshots and console files linked), by their paths relative to the folder it is written
in; every string that comes from the project is escaped.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from session_scheduler.core.errors import StateError
from session_scheduler.core.evidence import is_web
from session_scheduler.core.humane import duration, money, number, outcome, plural
from session_scheduler.core.layout import LOG_DIR
from session_scheduler.run import findings
from session_scheduler.run.findings import Finding, SetAside
from session_scheduler.store import events, statefile
from session_scheduler.store.events import CUT_BY, Event, Totals, lane_of, role_order
from session_scheduler.view import digest, evidence_pages, proofs, review_evidence
from session_scheduler.view.evidence_pages import step_text
from session_scheduler.view.markup import code as _code
from session_scheduler.view.markup import cut as _cut
from session_scheduler.view.markup import md as _md
from session_scheduler.view.status import is_running

ROLE_COLOURS = {
    "INITIALIZER": "#64748b",
    "IMPLEMENT": "#2563eb",
    "REVIEW": "#7c3aed",
    "FIX": "#d97706",
    "ARCHITECTURE": "#0d9488",
}
OTHER_COLOUR = "#a3a3a3"
BASIS_NOTES = {
    "subscription": "the CLI's estimate, not money billed",
    "scripted": "made up by the offline demo's scripted model: the CLI's estimate, not money billed",
}
LAST_SESSIONS = 10
W, LEFT, RIGHT, TOP, BOTTOM = 960, 120, 24, 16, 44
"""Chart geometry in SVG user units: width and the margins around the plot."""


@dataclass(frozen=True)
class FeatureRow:
    id: str
    description: str
    status: str
    """passing, blocked or open."""
    attempts: int
    sessions: int
    cost_usd: float
    commit: str
    review: str
    """'#7 PASS': the last verdict on the feature."""
    tests: str
    passed_at: float | None
    task: str = ""
    """The spec's task it builds (`#12`, `task 3`: core/tasks.py), '' when the spec is text."""

    @property
    def closes(self) -> str:
        """What its description ends with: the task it closes, if any."""
        return f" (closes {self.task})" if self.task else ""


@dataclass(frozen=True)
class SessionRow:
    number: int
    role: str
    feature: str
    standing: str
    counted: bool
    verdict: str
    turns: int
    duration_s: float
    tokens: int
    cost_usd: float
    partial: bool
    start: float
    end: float
    """When it ended: for a session cut off, its last recorded activity (not when a later run noted it)."""
    estimated: bool = False
    """The cost is the scheduler's estimate from the transcript's tokens (the CLI reported none)."""
    cut: str = ""
    """What cut it off before Claude Code reported, and the run it belonged to ('' when nothing did)."""
    lane: int = 0
    """The lane it ran in (0: the one lane, or a log from before lanes)."""

    @property
    def cost(self) -> str:
        if self.estimated:
            return f"~{money(self.cost_usd)} est."
        return "unknown (cut off)" if self.partial else money(self.cost_usd)


@dataclass(frozen=True)
class RoleRow:
    role: str
    sessions: int
    failed: int
    cost_usd: float
    tokens: int


@dataclass(frozen=True)
class QueueWaits:
    """The merge queue's history (lanes): how long approved work waited to land, and what went back."""

    landed: int
    waits: tuple[float, ...]
    """`waited_s` of every landing tried, landed or sent back, in the order they were tried."""
    sent_back: tuple[tuple[str, int], ...]
    """Why (`conflict`, `tests`) -> how many landings went back to a lane."""

    @property
    def median_s(self) -> float:
        return statistics.median(self.waits) if self.waits else 0.0

    @property
    def max_s(self) -> float:
        return max(self.waits, default=0.0)

    @property
    def returned(self) -> int:
        return sum(n for _, n in self.sent_back)


def queue_waits(log: list[Event]) -> QueueWaits | None:
    """The merge queue's waits from the event log; None when no work went through a queue (one lane)."""
    landed, waits, back = 0, [], dict[str, int]()
    for event in log:
        queued = event["kind"] == "sent_back" or (event["kind"] == "merge_verified" and "waited_s" in event)
        if not queued:
            continue
        waits.append(float(event.get("waited_s") or 0.0))
        if event["kind"] == "merge_verified":
            landed += 1
        else:
            why = str(event.get("why"))
            back[why] = back.get(why, 0) + 1
    if not waits:
        return None
    return QueueWaits(landed, tuple(waits), tuple(sorted(back.items())))


@dataclass(frozen=True)
class ReportData:
    name: str
    path: str
    status: str
    """done, running or stopped."""
    detail: str
    cost_basis: str
    features: tuple[FeatureRow, ...]
    passing: int
    blocked: int
    sessions: int
    failed: int
    not_counted: tuple[tuple[str, int], ...]
    cost_usd: float
    tokens: int
    roles: tuple[RoleRow, ...]
    session_rows: tuple[SessionRow, ...]
    listed_at: float | None
    blocked_at: tuple[float, ...]
    last_ts: float
    generated_at: float
    findings: tuple[tuple[str, tuple[Finding, ...]], ...] = ()
    """REVIEW's (and ARCHITECTURE's) reviews per feature, in the features' order, then the rest."""
    set_aside: tuple[SetAside, ...] = ()
    lanes: tuple[int, ...] = ()
    """The lanes the sessions ran in, when there were several (else empty: the one lane)."""
    queue: QueueWaits | None = None
    """The merge queue's waits (None: one lane, nothing queued)."""
    steps: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Each feature's acceptance steps, as its feature list says them."""
    evidence: tuple[review_evidence.FeatureEvidence, ...] = ()
    """Each feature's gates and its reviews' graded steps with their browser evidence."""
    root: str = ""
    """The project's folder, absolute: the evidence's paths are relative to it."""
    proofs: tuple[str, ...] = ()
    """The features whose proof is written (view/proofs.py), in the features' order."""
    digest: tuple[str, ...] = ()
    """The morning digest's lines (view/digest.py): what landed, waits for the person, is blocked, cost."""


def gather(project: Path, now: float | None = None) -> ReportData:
    """Everything the report shows, from the project's event log and feature list."""
    log = events.read(events.log_path(project))
    if not log:
        raise StateError(f"{project} has no event log yet: run the project first, then make its report")
    totals = Totals.of(log)
    try:
        saved = statefile.load(project)
    except StateError:
        saved = None  # the event log is the report's source; the state only fills in an old project
    backlog = saved.state.backlog if saved else None
    old_passing, old_blocked = (backlog.passing, backlog.blocked) if backlog else (frozenset(), frozenset())
    listing = _feature_items(project / "feature_list.json")
    described = {fid: str(f.get("description", "")) for fid, f in listing.items()}
    gated = gates_of(log)
    rows = []
    for fid in totals.features or (backlog.features if backlog else ()):
        ev, spend = totals.evidence.get(fid, {}), totals.by_feature.get(fid, events.Spend())
        state = (
            "passing"
            if fid in totals.passing or fid in old_passing
            else "blocked"
            if fid in totals.blocked or fid in old_blocked
            else "open"
        )
        review = f"#{ev['review_id']} {ev['verdict']}" if "verdict" in ev else ""
        rows.append(
            FeatureRow(
                fid,
                described.get(fid, ""),
                state,
                totals.sessions_of_feature(fid, "IMPLEMENT"),
                spend.sessions,
                spend.cost_usd,
                str(ev.get("commit") or "")[:10],
                review,
                gated.get(fid) or str(ev.get("tests") or ""),
                totals.passing.get(fid),
                str(listing.get(fid, {}).get("task") or ""),
            )
        )
    starts: dict[int, tuple[float, int]] = {}
    sessions = []
    for event in log:
        if event["kind"] == "session_started":
            starts[int(event["session"])] = (float(event["ts"]), lane_of(event))
        elif event["kind"] == "session_ended":
            start, lane = starts.get(int(event["session"]), (None, 0))
            sessions.append(_session_row(event, start, lane))
    lanes = sorted({lane for _, lane in starts.values()})
    started = totals.run_started or {}
    grouped = findings.by_subject(findings.reviews(project))
    listed = [r.id for r in rows]
    rest = sorted(
        (s for s in grouped if s not in listed),
        key=lambda s: (s == findings.ARCHITECTURE or s.startswith("arch/"), s),
    )
    order = [fid for fid in listed if fid in grouped] + rest
    reviewed = {fid: [(f.review_id, f.verdict) for f in grouped.get(fid, [])] for fid in listed}
    return ReportData(
        name=project.resolve().name,
        path=str(project),
        cost_basis=str(started.get("cost_basis", "api")),
        **_run_status(totals),
        features=tuple(rows),
        passing=sum(r.status == "passing" for r in rows),
        blocked=sum(r.status == "blocked" for r in rows),
        sessions=totals.sessions,
        failed=totals.failed,
        not_counted=tuple(sorted(totals.not_counted.items())),
        cost_usd=totals.cost_usd,
        tokens=totals.spend.total_tokens,
        roles=tuple(
            RoleRow(role, s.sessions, s.failed, s.cost_usd, s.total_tokens)
            for role, s in sorted(totals.by_role.items(), key=lambda item: role_order(item[0]))
        ),
        session_rows=tuple(sessions),
        listed_at=next((float(e["ts"]) for e in reversed(log) if e["kind"] == "features_listed"), None),
        blocked_at=tuple(sorted(ts for f, ts in totals.blocked.items() if f in totals.features)),
        last_ts=float(totals.last_ts or 0.0),
        generated_at=time.time() if now is None else now,
        findings=tuple((subject, tuple(grouped[subject])) for subject in order),
        set_aside=tuple(findings.set_aside(project, totals.set_aside)),
        lanes=tuple(lanes) if any(lanes) else (),
        queue=queue_waits(log),
        steps=tuple((fid, tuple(str(s) for s in f.get("steps") or [])) for fid, f in listing.items()),
        evidence=review_evidence.gather(
            project,
            log,
            {fid: r for fid, r in reviewed.items() if r or fid in gated},
            frozenset(fid for fid, f in listing.items() if is_web(f)),
        ),
        root=str(project.resolve()),
        proofs=proofs.written(project, (r.id for r in rows)),
        digest=tuple(digest.lines(digest.digest_of(project, log))),
    )


def gates_of(log: list[Event]) -> dict[str, str]:
    """Per feature, its gates as they last ran on its branch and on `main` (`gates_ran` events):
    "branch: tests passed, lint red; main: tests passed"."""
    return {
        feature: "; ".join(
            f"{where}: "
            + ", ".join(f"{g['name']} {'passed' if g['passed'] else 'red'}" for g in event["gates"])
            for where, event in ran.items()
        )
        for feature, ran in review_evidence.last_gates(log).items()
    }


def _feature_items(path: Path) -> dict[str, dict[str, Any]]:
    """Feature id -> its entry in feature_list.json; {} when it is missing or not readable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        items = data["features"] if isinstance(data, dict) else data
        return {str(f["id"]): f for f in items if isinstance(f, dict) and "id" in f}
    except (OSError, ValueError, TypeError, KeyError):
        return {}


def _session_row(event: Event, started: float | None, lane: int = 0) -> SessionRow:
    receipt, cut = event["receipt"], event.get("cut") if isinstance(event.get("cut"), dict) else None
    end, took = float(event["ts"]), float(receipt.get("duration_s") or 0.0)
    if started is not None and (cut or receipt.get("partial")):  # from its start to its last activity
        start = started
        end = started + took if took > 0 else end
    else:
        start = end - took if took > 0 or started is None else started
    why = f"{CUT_BY.get(str(cut.get('by')), str(cut.get('by')))}, run {cut.get('run')}" if cut else ""
    return SessionRow(
        int(event["session"]),
        str(event["role"]),
        str(event.get("feature") or ""),
        str(event["standing"]),
        event["standing"] in events.COUNTED,
        str(receipt.get("verdict") or ""),
        int(receipt.get("turns") or 0),
        end - start,
        sum(int(receipt.get(k) or 0) for k in events.RECEIPT_TOKENS),
        float(receipt.get("cost_usd") or 0.0),
        bool(receipt.get("partial")),
        start,
        end,
        bool(receipt.get("cost_estimated")),
        why,
        lane,
    )


def _run_status(totals: Totals) -> dict[str, str]:
    ended, flight = totals.run_ended, totals.flight
    if ended is not None:
        return {
            "status": "done" if ended["status"] == "done" else "stopped",
            "detail": f"the last run ended: {outcome(ended['status'], ended['message'])}",
        }
    if is_running(totals):
        now = (
            f": session {flight['session']} {flight['role']} {flight.get('feature') or ''}" if flight else ""
        )
        return {"status": "running", "detail": f"a run is going on{now}".strip()}
    detail = "the last run was stopped before it could record its end"
    if flight is not None:
        detail += (
            f" (killed: session {flight['session']} {flight['role']} {flight.get('feature') or ''} was cut, "
            "run the same command to resume it)"
        ).replace("  ", " ")
    return {"status": "stopped", "detail": detail}


# -- HTML -----------------------------------------------------------------------------------------

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1f2937;margin:0;background:#f8fafc}
main{max-width:1180px;margin:0 auto;padding:24px}
h1{margin:0 0 4px;font-size:26px}h2{font-size:18px;margin:28px 0 8px}
.path,.note,.legend{color:#6b7280;font-size:12px}
.figures{display:flex;flex-wrap:wrap;gap:12px;margin:16px 0}
.figure{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:10px 16px;min-width:120px}
.figure b{display:block;font-size:22px}.figure small{color:#6b7280}
.status{display:inline-block;padding:2px 10px;border-radius:12px;color:#fff;font-weight:600;background:#6b7280}
.status.done{background:#16a34a}.status.running{background:#2563eb}.status.stopped{background:#b45309}
table{border-collapse:collapse;width:100%;background:#fff;font-size:13px}
th,td{border-bottom:1px solid #e5e7eb;padding:5px 8px;text-align:left;vertical-align:top}
th{background:#f1f5f9}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
tr.passing td.st{color:#15803d;font-weight:600}tr.blocked td.st{color:#b91c1c;font-weight:600}
tr.failed td.st{color:#b91c1c}tr.uncounted{color:#9ca3af}
td ul{margin:0;padding-left:16px}small.cut{color:#b45309}
code{font-size:12px}svg{width:100%;height:auto;background:#fff;border:1px solid #e5e7eb;border-radius:8px}
svg text{font:12px system-ui,sans-serif;fill:#374151}.sw{display:inline-block;width:10px;height:10px;margin:0 4px 0 10px}
@media print{body{background:#fff;font-size:11px}main{max-width:none;padding:0}section{break-inside:avoid}
tr{break-inside:avoid}*{-webkit-print-color-adjust:exact;print-color-adjust:exact}}
"""


def _colour(role: str) -> str:
    return ROLE_COLOURS.get(role, OTHER_COLOUR)


def _table(ident: str, heads: list[str], rows: list[tuple[str, list[str]]], numeric: set[int]) -> str:
    """A table of already-escaped cells; each row comes with its class."""
    th = "".join(f"<th{' class=num' if i in numeric else ''}>{h}</th>" for i, h in enumerate(heads))
    body = "".join(
        f'<tr class="{cls}">'
        + "".join(
            f'<td class="{"num" if i in numeric else "st" if h in ("Status", "Standing") else ""}">{c}</td>'
            for i, (h, c) in enumerate(zip(heads, cells, strict=True))
        )
        + "</tr>"
        for cls, cells in rows
    )
    return f'<table id="{ident}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def _svg(ident: str, title: str, height: int, body: list[str], x_label: str, y_label: str) -> str:
    mid = TOP + (height - TOP - BOTTOM) / 2
    return (
        f'<svg id="{ident}" viewBox="0 0 {W} {height}" role="img" aria-labelledby="{ident}-t">'
        f'<title id="{ident}-t">{escape(title)}</title>{"".join(body)}'
        f'<line x1="{LEFT}" y1="{height - BOTTOM}" x2="{W - RIGHT}" y2="{height - BOTTOM}" stroke="#9ca3af"/>'
        f'<text x="{(LEFT + W - RIGHT) / 2}" y="{height - 6}" text-anchor="middle">{escape(x_label)}</text>'
        f'<text transform="translate(14 {mid}) rotate(-90)" text-anchor="middle">{escape(y_label)}</text></svg>'
    )


def _x_ticks(height: int, x: Callable[[float], float], t0: float, span: float) -> list[str]:
    y = height - BOTTOM
    return [
        f'<line x1="{x(t0 + span * k / 4):.1f}" y1="{y}" x2="{x(t0 + span * k / 4):.1f}" y2="{y + 4}" stroke="#9ca3af"/>'
        f'<text x="{x(t0 + span * k / 4):.1f}" y="{y + 17}" text-anchor="{"end" if k == 4 else "middle"}">'
        f"{duration(span * k / 4)}</text>"
        for k in range(5)
    ]


def _timeline(rows: tuple[SessionRow, ...], lanes: tuple[int, ...] = ()) -> str:
    """One bar per session: a row per role, or with several lanes a row per lane (colour: role)."""
    t0, t1 = min(r.start for r in rows), max(r.end for r in rows)

    def row_of(r: SessionRow) -> str:
        return f"lane {r.lane}" if lanes else r.role

    names = (
        [f"lane {n}" for n in sorted(set(lanes) | {r.lane for r in rows})]
        if lanes
        else sorted({r.role for r in rows}, key=role_order)
    )
    lane, height = 28, TOP + 28 * len(names) + BOTTOM

    def x(t: float) -> float:
        return LEFT + (t - t0) / max(t1 - t0, 1e-9) * (W - LEFT - RIGHT)

    body = [
        f'<text x="{LEFT - 8}" y="{TOP + lane * i + 18}" text-anchor="end">{escape(name)}</text>'
        for i, name in enumerate(names)
    ]
    for r in rows:
        look = (
            'stroke="#dc2626" stroke-width="2.5"'
            if r.standing == "failed"
            else ""
            if r.counted
            else 'fill-opacity="0.3" stroke="#6b7280" stroke-dasharray="3 2"'
        )
        where = f" (lane {r.lane})" if lanes else ""
        tip = f"Session {r.number} {r.role} {r.feature}{where}: {r.standing} {r.verdict}, {duration(r.duration_s)}, {money(r.cost_usd)}"
        body.append(
            f'<rect class="session {escape(r.standing)}" x="{x(r.start):.1f}" y="{TOP + lane * names.index(row_of(r)) + 4}" '
            f'width="{max(x(r.end) - x(r.start), 2):.1f}" height="{lane - 8}" fill="{_colour(r.role)}" {look}>'
            f"<title>{escape(tip)}</title></rect>"
        )
    return _svg(
        "chart-timeline",
        f"Session timeline: one bar per session, by {'lane' if lanes else 'role'}",
        height,
        body + _x_ticks(height, x, t0, t1 - t0),
        "time since the first session started",
        "",
    )


def _cost_chart(data: ReportData) -> str:
    rows, roles = data.session_rows, [r.role for r in data.roles]
    height, top = 260, max(data.cost_usd, 1e-9)
    cum = {role: [0.0] for role in roles}
    for r in rows:
        for role in roles:
            cum[role].append(cum[role][-1] + (r.cost_usd if r.role == role else 0.0))

    def pt(i: int, v: float) -> str:
        return f"{LEFT + i / max(len(rows), 1) * (W - LEFT - RIGHT):.1f},{height - BOTTOM - v / top * (height - TOP - BOTTOM):.1f}"

    base = [0.0] * (len(rows) + 1)
    body = []
    for role in roles:
        upper = [b + c for b, c in zip(base, cum[role], strict=True)]
        points = [pt(i, v) for i, v in enumerate(upper)] + [
            pt(i, base[i]) for i in reversed(range(len(base)))
        ]
        body.append(
            f'<polygon points="{" ".join(points)}" fill="{_colour(role)}" fill-opacity="0.8">'
            f"<title>{escape(role)}: {money(cum[role][-1])}</title></polygon>"
        )
        base = upper
    for frac in (0, 0.5, 1):
        y = pt(0, top * frac).split(",")[1]
        body.append(
            f'<text x="{LEFT - 8}" y="{y}" text-anchor="end" dy="4">{money(top * frac) if frac and data.cost_usd else "$0"}</text>'
        )
    body += [
        f'<text x="{pt(i, 0).split(",")[0]}" y="{height - BOTTOM + 17}" text-anchor="middle">{i}</text>'
        for i in sorted({0, len(rows) // 2, len(rows)})
    ]
    return _svg(
        "chart-cost",
        "Cumulative cost per role, session by session",
        height,
        body,
        "sessions, in the order they ended",
        "cost",
    )


def _burndown(data: ReportData) -> str:
    total, height = len(data.features), 240
    t0 = data.listed_at if data.listed_at is not None else data.last_ts
    t1 = max(data.last_ts, t0)  # equal when nothing happened after the list (or none was written)

    def x(t: float) -> float:
        return LEFT + (t - t0) / max(t1 - t0, 1e-9) * (W - LEFT - RIGHT)

    def y(n: float) -> float:
        return height - BOTTOM - n / max(total, 1) * (height - TOP - BOTTOM)

    path, left = [f"M{x(t0):.1f},{y(total):.1f}"], total
    for ts in sorted(f.passed_at for f in data.features if f.passed_at is not None):
        left -= 1
        path.append(f"H{x(ts):.1f}V{y(left):.1f}")
    path.append(f"H{x(t1):.1f}")
    body = [
        f'<path d="{"".join(path)}" fill="none" stroke="#16a34a" stroke-width="2.5">'
        f"<title>Features not yet passing: {total} listed, {left} left</title></path>"
    ]
    body += [
        f'<text x="{LEFT - 8}" y="{y(n):.1f}" dy="4" text-anchor="end">{n}</text>'
        for n in (range(total + 1) if total <= 10 else (0, total // 2, total))
    ]
    body += [
        f'<circle cx="{x(ts):.1f}" cy="{y(0) - 6}" r="5" fill="#dc2626"><title>a feature was blocked</title></circle>'
        for ts in data.blocked_at
    ]
    return _svg(
        "chart-burndown",
        "Burndown: features not yet passing over time",
        height,
        body + _x_ticks(height, x, t0, t1 - t0),
        "time since the features were listed",
        "not yet passing",
    )


def _summary_figures(data: ReportData) -> list[tuple[str, str, str]]:
    uncounted = ", ".join(f"{n} {why.replace('_', ' ')}" for why, n in data.not_counted)
    return [
        ("features-passing", str(data.passing), f"of {plural(len(data.features), 'feature')} passing"),
        ("features-blocked", str(data.blocked), "blocked"),
        (
            "sessions-total",
            number(data.sessions),
            f"sessions, {data.failed} failed" + (f"; not counted: {uncounted}" if uncounted else ""),
        ),
        ("cost-total", money(data.cost_usd), f"spent ({data.cost_basis})"),
        ("tokens-total", number(data.tokens), "tokens"),
    ]


def render_html(data: ReportData, base: str | None = None) -> str:
    """The report as one HTML page, written in the folder `base` (default: the project's log
    folder): nothing is fetched, and the evidence files are linked relative to `base`."""
    note = BASIS_NOTES.get(
        data.cost_basis, "" if data.cost_basis == "api" else "the CLI's estimate, not money billed"
    )
    figures = "".join(
        f'<div class="figure"><b id="{i}">{escape(v)}</b><small>{escape(t)}</small></div>'
        for i, v, t in _summary_figures(data)
    )
    feature_rows = [
        (
            f.status,
            [
                escape(f.id),
                escape(f.description + f.closes),
                escape(f.status),
                str(f.attempts),
                str(f.sessions),
                money(f.cost_usd),
                f"<code>{escape(f.commit)}</code>",
                escape(f.review),
                escape(f.tests),
            ],
        )
        for f in data.features
    ]
    role_rows = [
        (
            "",
            [
                f'<span class="sw" style="background:{_colour(r.role)}"></span>{escape(r.role)}',
                str(r.sessions),
                str(r.failed),
                number(r.tokens),
                money(r.cost_usd),
            ],
        )
        for r in data.roles
    ]
    session_rows = [
        (
            "uncounted" if not r.counted else r.standing,
            [
                str(r.number),
                *([str(r.lane)] if data.lanes else []),
                escape(r.role),
                escape(r.feature),
                escape(r.standing)
                + (f'<br><small class="cut">cut: {escape(r.cut)}</small>' if r.cut else ""),
                escape(r.verdict),
                str(r.turns),
                duration(r.duration_s),
                number(r.tokens),
                escape(r.cost),
            ],
        )
        for r in data.session_rows
    ]
    session_heads = ["#", "Role", "Feature", "Standing", "Verdict", "Turns", "Duration", "Tokens", "Cost"]
    session_numeric = {0, 5, 6, 7, 8}
    if data.lanes:
        session_heads.insert(1, "Lane")
        session_numeric = {0, 1, 6, 7, 8, 9}
    rows_by = "Rows: lanes. " if data.lanes else ""
    charts = (
        (
            f"<h2>Session timeline</h2>{_timeline(data.session_rows, data.lanes)}<p class=legend>{rows_by}Colour: role. Solid: verified; "
            f"red outline: failed; faded, dashed: not counted (the session runs again).</p>"
            f"<h2>Cost per role</h2>{_cost_chart(data)}"
        )
        if data.session_rows
        else "<p>No session has ended yet.</p>"
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>Report: {escape(data.name)}</title><style>{CSS}{evidence_pages.CSS}</style></head><body><main>
<header><h1>{escape(data.name)} <span id="run-status" class="status {escape(data.status)}">{escape(data.status)}</span></h1>
<div class="path">{escape(data.path)} · {escape(data.detail)} · made {time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(data.generated_at))}</div>
<div class="figures">{figures}</div>{f'<p class="note" id="cost-note">Cost: {escape(note)}.</p>' if note else ""}</header>{_digest_html(data)}
<section><h2>Features</h2>{_table("features", ["Feature", "Description", "Status", "Attempts", "Sessions", "Cost", "Merge", "Review", "Gates"], feature_rows, {3, 4, 5})}</section>{_proofs_html(data, base)}
<section>{charts}{_table("roles", ["Role", "Sessions", "Failed", "Tokens", "Cost"], role_rows, {1, 2, 3, 4})}</section>
<section><h2>Burndown</h2>{_burndown(data)}<p class=legend>Features not yet passing; a red dot marks a feature blocked.</p></section>
<section><h2>Review findings</h2>{_findings_html(data)}</section>
<section id="evidence"><h2>Evidence</h2><p class="legend">Per feature: its gates as they last ran, and each review's acceptance steps with the screenshots and snapshots its browser took (click a screenshot to open it whole).</p>{evidence_pages.evidence_html(data.evidence, dict(data.steps), _titles(data), data.root, _base(data, base))}</section>
<section><h2>Set aside</h2>{_set_aside_html(data)}</section>{_queue_html(data.queue)}
<section><h2>Sessions</h2>{_table("sessions", session_heads, session_rows, session_numeric)}</section>
</main></body></html>
"""


def _digest_html(data: ReportData) -> str:
    """The morning digest, first thing after the header (nothing for a project without options)."""
    if not data.digest:
        return ""
    heading, *rest = data.digest
    items = "".join(f"<li>{escape(line.strip())}</li>" for line in rest)
    return f'<section id="digest"><h2>{escape(heading.rstrip(":"))}</h2><ul>{items}</ul></section>'


def _queue_words(queue: QueueWaits) -> tuple[str, str]:
    """What the merge queue did, and how long work waited in it, in words."""
    back = ", ".join(
        f"{n} for {'a conflict' if why == 'conflict' else 'red tests' if why == 'tests' else why}"
        for why, n in queue.sent_back
    )
    did = f"{queue.landed} landed, {queue.returned} sent back to a lane" + (f" ({back})" if back else "")
    waited = (
        f"waited {duration(queue.median_s)} (median), {duration(queue.max_s)} at most, "
        f"over {plural(len(queue.waits), 'landing')} tried"
    )
    return did, waited


def _queue_html(queue: QueueWaits | None) -> str:
    """The merge queue's section (lanes only: one lane has no queue, and no section)."""
    if queue is None:
        return ""
    figures = [
        ("queue-landed", str(queue.landed), "landed from the queue"),
        ("queue-median-wait", duration(queue.median_s), "median wait to land"),
        ("queue-max-wait", duration(queue.max_s), "longest wait"),
        *((f"queue-sent-back-{why}", str(n), f"sent back: {why}") for why, n in queue.sent_back),
    ]
    boxes = "".join(
        f'<div class="figure"><b id="{escape(i)}">{escape(v)}</b><small>{escape(t)}</small></div>'
        for i, v, t in figures
    )
    did, waited = _queue_words(queue)
    return (
        f'\n<section><h2>Merge queue</h2><div class="figures">{boxes}</div>'
        f'<p class="legend" id="queue-summary">{escape(did)}; {escape(waited)}.</p></section>'
    )


def _findings_html(data: ReportData) -> str:
    if not data.findings:
        return '<p id="findings-none">No review yet.</p>'
    rows = []
    texts = dict(data.steps)
    shown = {r.review_id for f in data.evidence for r in f.reviews}
    for subject, found in data.findings:
        for f in found:
            issues = "".join(f"<li><b>{escape(sev)}</b>: {escape(text)}</li>" for sev, text in f.issues)
            fixed = ", ".join(f"#{n}" for n in f.fixed_by)
            steps = "".join(
                f"<li>{n}. {escape(_cut(step_text(texts, subject, n), ISSUE_CHARS))}: "
                f"{'passed' if ok else '<b>failed</b>'} ({escape(_cut(evidence, ISSUE_CHARS))})</li>"
                for n, ok, evidence in f.acceptance
            )
            rows.append(
                (
                    "findings" if f.issues else "",
                    [
                        escape(subject),
                        f'<a href="#review-{f.review_id}">#{f.review_id}</a>'
                        if f.review_id in shown
                        else f"#{f.review_id}",
                        escape(f.verdict),
                        f"<ul>{issues}</ul>" if issues else "none",
                        f'<ul class="steps">{steps}</ul>' if steps else "",
                        escape(fixed),
                    ],
                )
            )
    return _table(
        "findings",
        ["Feature", "Review", "Verdict", "Issues raised", "Acceptance steps", "Fixed by"],
        rows,
        set(),
    )


def _proof_links(data: ReportData, base: str | None) -> list[tuple[str, str, str]]:
    """(feature, its proof's address relative to the report's folder, its description)."""
    titles, root = _titles(data), Path(data.root)
    return [
        (
            fid,
            evidence_pages.link(
                data.root, str(proofs.path_of(root, fid).relative_to(root)), _base(data, base)
            ),
            titles[fid],
        )
        for fid in data.proofs
    ]


def _proofs_html(data: ReportData, base: str | None) -> str:
    items = "".join(
        f'<li><a href="{escape(href)}">{escape(fid)}</a>: {escape(title)}</li>'
        for fid, href, title in _proof_links(data, base)
    )
    return f'\n<section id="proofs"><h2>Proofs</h2><ul>{items}</ul></section>' if items else ""


def _set_aside_html(data: ReportData) -> str:
    if not data.set_aside:
        return '<p id="set-aside-none">Nothing was set aside: the scheduler moved none of your work.</p>'
    rows = [
        (
            "" if a.present else "uncounted",
            [
                escape(a.what),
                f"<code>{escape(a.ref)}</code>",
                escape(a.message),
                f"<code>{escape(a.show)}</code>" if a.present else "no longer there",
                f"<code>{escape(a.restore)}</code>" if a.present else "",
            ],
        )
        for a in data.set_aside
    ]
    return _table("set-aside", ["What", "Kept as", "Why", "Look at it", "Bring it back"], rows, set())


# -- Markdown -------------------------------------------------------------------------------------


def _md_table(heads: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)] + [
        "| " + " | ".join(r) + " |" for r in rows
    ]


def _base(data: ReportData, base: str | None) -> str:
    return base if base is not None else os.path.join(data.root, LOG_DIR)


def _titles(data: ReportData) -> dict[str, str]:
    return {f.id: f.description for f in data.features}


def render_markdown(data: ReportData, base: str | None = None) -> str:
    """The same facts as Markdown, to paste into an issue or a chat; the evidence files are
    linked relative to the folder `base` (default: the project's log folder)."""
    note = "" if data.cost_basis == "api" else BASIS_NOTES.get(data.cost_basis, BASIS_NOTES["subscription"])
    lines = [
        f"## Report: {_md(data.name)}",
        "",
        f"**{data.status}** · {data.passing}/{len(data.features)} features passing, {data.blocked} blocked · "
        f"{plural(data.sessions, 'session')} ({data.failed} failed) · {number(data.tokens)} tokens · "
        f"{money(data.cost_usd)}{' (' + _md(note) + ')' if note else ''}",
        "",
        *(
            [
                f"### {data.digest[0].rstrip(':')}",
                "",
                *(f"- {_md(line.strip())}" for line in data.digest[1:]),
                "",
            ]
            if data.digest
            else []
        ),
        "### Features",
        "",
    ]
    lines += _md_table(
        ["Feature", "Description", "Status", "Attempts", "Sessions", "Cost", "Merge", "Review", "Gates"],
        [
            [
                _md(f.id),
                _md(f.description[:100] + ("…" if len(f.description) > 100 else "") + f.closes),
                f.status,
                str(f.attempts),
                str(f.sessions),
                money(f.cost_usd),
                _md(f.commit),
                _md(f.review),
                _md(f.tests),
            ]
            for f in data.features
        ],
    )
    if data.proofs:
        lines += ["", "### Proofs", ""]
        lines += [f"- [{_md(fid)}]({href}): {_md(title)}" for fid, href, title in _proof_links(data, base)]
    lines += ["", "### Cost per role", ""]
    lines += _md_table(
        ["Role", "Sessions", "Failed", "Tokens", "Cost"],
        [
            [_md(r.role), str(r.sessions), str(r.failed), number(r.tokens), money(r.cost_usd)]
            for r in data.roles
        ],
    )
    last = data.session_rows[-LAST_SESSIONS:]
    lines += ["", f"### Last {plural(len(last), 'session')}", ""]
    lines += _md_table(
        [
            "#",
            *(["Lane"] if data.lanes else []),
            "Role",
            "Feature",
            "Standing",
            "Verdict",
            "Turns",
            "Duration",
            "Tokens",
            "Cost",
        ],
        [
            [
                str(r.number),
                *([str(r.lane)] if data.lanes else []),
                _md(r.role),
                _md(r.feature),
                _md(r.standing),
                _md(r.verdict),
                str(r.turns),
                duration(r.duration_s),
                number(r.tokens),
                _md(r.cost.removesuffix(" (cut off)")),
            ]
            for r in last
        ],
    )
    if data.lanes:
        lines += ["", "### Lanes", ""]
        lines += _md_table(["Lane", "Sessions", "Busy", "Features"], _lane_rows(data))
    if data.queue is not None:
        did, waited = _queue_words(data.queue)
        lines += ["", "### Merge queue", "", f"{did}; {waited}."]
    cut = [r for r in data.session_rows if r.cut]
    if cut:
        lines += ["", "### Cut off before Claude Code reported", ""]
        lines += [
            f"- session {r.number} {_md(r.role)}{' ' + _md(r.feature) if r.feature else ''}: {_md(r.cut)}, "
            f"{duration(r.duration_s)} until its last activity, {number(r.tokens)} tokens, {_md(r.cost)}"
            for r in cut
        ]
    lines += ["", "### Review findings", ""]
    rows = [
        [
            _md(subject),
            f"#{f.review_id}",
            _md(f.verdict),
            "; ".join(f"{sev}: {_md(_cut(text, ISSUE_CHARS))}" for sev, text in f.issues) or "none",
            _md(_cut(f.steps(), ISSUE_CHARS)),
            ", ".join(f"#{n}" for n in f.fixed_by),
        ]
        for subject, found in data.findings
        for f in found
    ]
    lines += (
        _md_table(["Feature", "Review", "Verdict", "Issues raised", "Acceptance steps", "Fixed by"], rows)
        if rows
        else ["No review yet."]
    )
    lines += ["", "### Evidence"]
    lines += evidence_pages.evidence_markdown(
        data.evidence, dict(data.steps), _titles(data), data.root, _base(data, base)
    )
    lines += ["", "### Set aside", ""]
    if data.set_aside:
        lines += [
            f"- {a.what} {_code(a.ref)} ({_md(a.message)}): "
            + (
                f"{_code(a.show)} shows it, {_code(a.restore)} brings it back"
                if a.present
                else "no longer there"
            )
            for a in data.set_aside
        ]
    else:
        lines.append("Nothing was set aside.")
    return "\n".join(lines) + "\n"


def _lane_rows(data: ReportData) -> list[list[str]]:
    """Per lane: its sessions, how long they ran together, and the features they worked on."""
    rows = []
    for lane in data.lanes:
        ran = [r for r in data.session_rows if r.lane == lane]
        features = list(dict.fromkeys(r.feature for r in ran if r.feature))
        rows.append(
            [
                str(lane),
                str(len(ran)),
                duration(sum(r.duration_s for r in ran)),
                _md(", ".join(features)) or "-",
            ]
        )
    return rows


ISSUE_CHARS = 300
"""An issue's text in the Markdown table is cut to this (the HTML page has it whole)."""
