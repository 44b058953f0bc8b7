"""The `report` page: its figures are the event log's fold, it escapes the project's text, it
fetches nothing, and a real browser (headless Chromium) renders it."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
from html import escape as escape_attr
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from helpers import browse, find_chromium

from session_scheduler.core.errors import StateError
from session_scheduler.core.humane import money
from session_scheduler.store import events
from session_scheduler.view.project_report import ReportData, gather, render_html, render_markdown

HOSTILE = '<script>alert(1)</script> & "quoted" | piped'
T0 = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def _receipt(
    cost: float, seconds: float, verdict: str | None = None, *, partial: bool = False
) -> dict[str, Any]:
    return {
        "model": "sonnet",
        "input_tokens": 1000,
        "cache_read_tokens": 200,
        "cache_write_tokens": 30,
        "output_tokens": 40,
        "cost_usd": 0.0 if partial else cost,
        "turns": 0 if partial else 7,
        "tool_calls": 6,
        "duration_s": 0.0 if partial else seconds,
        "verdict": verdict,
        "retry_reason": None,
        "partial": partial,
    }


def _session(
    log: events.EventLog,
    clock: Clock,
    n: int,
    role: str,
    feature: str | None,
    *,
    cost: float = 0.5,
    standing: str = "verified",
    verdict: str | None = None,
    after: tuple[tuple[str, dict[str, Any]], ...] = (),
    partial: bool = False,
) -> None:
    """One session as the scheduler logs it: started, what it did, ended with its receipt."""
    log.emit(
        "session_started",
        session=n,
        role=role,
        model="sonnet",
        feature=feature,
        branch=f"feature/{feature}" if feature else None,
        attempt=1,
        log_dir=f".agent_logs/session_{n:04d}_{role}",
        lane=0,
    )
    clock.now += 60
    for kind, fields in after:
        log.emit(kind, **{"session": n, **fields} if kind != "feature_blocked" else fields)
    log.emit(
        "session_ended",
        session=n,
        role=role,
        feature=feature,
        standing=standing,
        reason=standing,
        receipt=_receipt(cost, 60, verdict, partial=partial),
    )
    clock.now += 5


def make_project(root: Path, *, ended: bool = True, pid: int | None = None) -> Path:
    """A finished run: 3 features listed; F001 passes, F002 is rejected twice and blocked (with a
    failed session), F003 passes after an outage that is not counted and a REQUEST_CHANGES."""
    project = root / "demo"
    project.mkdir()
    features = [
        {"id": "F001", "description": "Save tasks"},
        {"id": "F002", "description": HOSTILE},
        {"id": "F003", "description": "List tasks"},
    ]
    (project / "feature_list.json").write_text(json.dumps({"features": features}))
    clock = Clock()
    log = events.EventLog(project, "run-1", clock=clock)
    log.emit(
        "run_started",
        pid=os.getpid() if pid is None else pid,
        project=str(project),
        version="0.2.0",
        cost_basis="subscription",
    )
    _session(
        log,
        clock,
        1,
        "INITIALIZER",
        None,
        cost=0.25,
        after=(("features_listed", {"features": ["F001", "F002", "F003"]}),),
    )
    _session(log, clock, 2, "IMPLEMENT", "F001", cost=1.0)
    _session(
        log,
        clock,
        3,
        "REVIEW",
        "F001",
        cost=2.0,
        verdict="PASS",
        after=(
            ("verdict", {"feature": "F001", "review_id": 1, "verdict": "PASS"}),
            (
                "merge_verified",
                {
                    "feature": "F001",
                    "branch": "feature/F001",
                    "commit": "a1b2c3d4e5" + "0" * 30,
                    "tests": "passed",
                },
            ),
        ),
    )
    _session(log, clock, 4, "IMPLEMENT", "F002", cost=1.0)
    _session(
        log,
        clock,
        5,
        "REVIEW",
        "F002",
        cost=2.0,
        verdict="REJECT",
        after=(("verdict", {"feature": "F002", "review_id": 2, "verdict": "REJECT"}),),
    )
    _session(log, clock, 6, "IMPLEMENT", "F002", cost=0.5, standing="failed")
    _session(log, clock, 7, "IMPLEMENT", "F002", cost=1.0)
    _session(
        log,
        clock,
        8,
        "REVIEW",
        "F002",
        cost=2.0,
        verdict="REJECT",
        after=(
            ("verdict", {"feature": "F002", "review_id": 3, "verdict": "REJECT"}),
            ("feature_blocked", {"feature": "F002", "rejections": 2}),
        ),
    )
    _session(log, clock, 9, "IMPLEMENT", "F003", standing="outage", partial=True)
    log.emit("limit_wait", session=9, why="outage", until=clock.now + 30)
    log.emit("resumed", session=9, role="IMPLEMENT", cause="outage")
    _session(log, clock, 9, "IMPLEMENT", "F003", cost=1.0)
    _session(
        log,
        clock,
        10,
        "REVIEW",
        "F003",
        cost=2.0,
        verdict="REQUEST_CHANGES",
        after=(("verdict", {"feature": "F003", "review_id": 4, "verdict": "REQUEST_CHANGES"}),),
    )
    _session(log, clock, 11, "FIX", "F003", cost=0.75)
    _session(
        log,
        clock,
        12,
        "REVIEW",
        "F003",
        cost=2.0,
        verdict="PASS",
        after=(
            ("verdict", {"feature": "F003", "review_id": 5, "verdict": "PASS"}),
            (
                "merge_verified",
                {"feature": "F003", "branch": "feature/F003", "commit": "f" * 40, "tests": "not configured"},
            ),
        ),
    )
    if ended:
        log.emit("run_ended", status="done", message="every feature passes or is blocked", sessions=13)
    return project


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path)


@pytest.fixture
def data(project: Path) -> ReportData:
    return gather(project, now=T0 + 3600)


def test_gather_agrees_with_the_fold(project: Path, data: ReportData) -> None:
    totals = events.Totals.of(events.read(events.log_path(project)))
    assert (data.status, data.cost_basis) == ("done", "subscription")
    assert [(f.id, f.status) for f in data.features] == [
        ("F001", "passing"),
        ("F002", "blocked"),
        ("F003", "passing"),
    ]
    assert (data.passing, data.blocked, len(data.features)) == (2, 1, 3)
    assert (
        (data.sessions, data.failed, data.not_counted)
        == (12, 1, (("outage", 1),))
        == (totals.sessions, totals.failed, (("outage", 1),))
    )
    assert data.cost_usd == pytest.approx(15.5) == totals.cost_usd
    assert data.tokens == 13 * 1270 == totals.spend.total_tokens
    f1, f2, f3 = data.features
    assert (f2.description, f2.attempts, f2.sessions, f2.review, f2.commit) == (
        HOSTILE,
        3,
        5,
        "#3 REJECT",
        "",
    )
    assert (f1.commit, f1.review, f1.tests, f1.cost_usd) == ("a1b2c3d4e5", "#1 PASS", "passed", 3.0)
    assert (f3.attempts, f3.sessions, f3.review, f3.tests, f3.cost_usd) == (
        1,
        4,
        "#5 PASS",
        "not configured",
        5.75,
    )
    assert {r.role: (r.sessions, r.failed, r.cost_usd) for r in data.roles} == {
        "INITIALIZER": (1, 0, 0.25),
        "IMPLEMENT": (5, 1, 4.5),
        "REVIEW": (5, 0, 10.0),
        "FIX": (1, 0, 0.75),
    }
    assert len(data.session_rows) == 13  # every end, also the outage's
    outage = data.session_rows[8]
    assert (outage.number, outage.counted, outage.partial, outage.duration_s) == (9, False, True, 60)
    assert data.listed_at is not None and len(data.blocked_at) == 1


@pytest.mark.parametrize("sessions", [0, 1, 2])
def test_a_project_whose_first_sessions_never_succeeded_renders(tmp_path: Path, sessions: int) -> None:
    """No feature list yet and only failed sessions (a 401, an early Ctrl-C): the page still draws."""
    project = tmp_path / "new"
    project.mkdir()
    clock = Clock()
    log = events.EventLog(project, "run-1", clock=clock)
    log.emit("run_started", pid=1, project=str(project), version="0.2.0", cost_basis="api")
    for n in range(1, sessions + 1):
        _session(log, clock, n, "INITIALIZER", None, standing="failed")
    data = gather(project, now=clock.now)
    page = render_html(data)
    assert "chart-burndown" in page and "0/0" in render_markdown(data)


def test_markdown_has_the_rows(data: ReportData) -> None:
    md = render_markdown(data)
    assert (
        "**done** · 2/3 features passing, 1 blocked · 12 sessions (1 failed) · 16,510 tokens · $15.50" in md
    )
    assert "the CLI's estimate, not money billed" in md
    assert "| F001 | Save tasks | passing | 1 | 2 | $3.00 | a1b2c3d4e5 | #1 PASS | passed |" in md
    assert "| F003 | List tasks | passing | 1 | 4 | $5.75 | ffffffffff | #5 PASS | not configured |" in md
    assert "| IMPLEMENT | 5 | 1 | 7,620 | $4.50 |" in md
    assert "| 9 | IMPLEMENT | F003 | outage |  | 0 | 1 min 00 s | 1,270 | unknown |" in md
    assert "| 12 | REVIEW | F003 | verified | PASS | 7 | 1 min 00 s | 1,270 | $2.00 |" in md
    assert "### Last 10 sessions" in md and "| 2 | IMPLEMENT |" not in md


def test_hostile_text_is_escaped_in_both_formats(data: ReportData) -> None:
    page, md = render_html(data), render_markdown(data)
    assert "<script" not in page and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;quoted&quot;" in page
    assert "<" not in md.replace("\\<", "")  # every < is a Markdown escape, never a tag
    row = next(line for line in md.splitlines() if line.startswith("| F002 "))
    assert r"\<script\>alert(1)\</script\> \& " in row and r"\| piped" in row
    assert len(row.replace(r"\|", "").split("|")) == 11  # the pipe in the text does not add a cell


def test_feature_list_missing_or_invalid_is_tolerated(project: Path) -> None:
    (project / "feature_list.json").write_text("{not json")
    assert [f.description for f in gather(project).features] == ["", "", ""]
    (project / "feature_list.json").write_text('{"features": 3}')
    assert gather(project).passing == 2
    (project / "feature_list.json").unlink()
    assert "F002" in render_markdown(gather(project))


def test_no_event_log_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(StateError, match="run the project first"):
        gather(tmp_path)


def test_run_status_running_and_stopped(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    running = gather(make_project(tmp_path / "a", ended=False))
    assert running.status == "running"
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    (tmp_path / "b").mkdir()
    stopped = gather(make_project(tmp_path / "b", ended=False, pid=int(dead.stdout)))
    assert stopped.status == "stopped" and 'class="status stopped"' in render_html(stopped)


class _Attrs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.attrs: list[tuple[str, str, str]] = []
        self.ids: dict[str, str] = {}
        self._open: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.attrs += [(tag, k, v or "") for k, v in attrs]
        self._open = dict(attrs).get("id")

    def handle_data(self, data: str) -> None:
        if self._open:
            self.ids.setdefault(self._open, data)
            self._open = None


def test_page_makes_no_network_reference(data: ReportData) -> None:
    page = render_html(data)
    parser = _Attrs()
    parser.feed(page)
    linking = [
        (t, k, v)
        for t, k, v in parser.attrs
        if k in ("src", "href", "xlink:href", "action", "srcset", "poster")
    ]
    assert not [a for a in linking if re.match(r"\s*(https?:|//)", a[2], re.I)]
    assert not re.search(r"<script[^>]*\ssrc", page, re.I) and "@import" not in page
    assert not [
        u for u in re.findall(r"url\(([^)]*)\)", page) if not u.strip("'\" ").startswith(("#", "data:"))
    ]
    assert "http://" not in page and "https://" not in page and "<link" not in page


def test_page_names_its_key_figures(data: ReportData) -> None:
    parser = _Attrs()
    parser.feed(render_html(data))
    assert parser.ids["features-passing"] == "2" and parser.ids["features-blocked"] == "1"
    assert (parser.ids["cost-total"], parser.ids["sessions-total"], parser.ids["run-status"]) == (
        "$15.50",
        "12",
        "done",
    )
    assert "not money billed" in parser.ids["cost-note"]


def test_chromium_renders_the_page(data: ReportData, tmp_path: Path) -> None:
    chromium = find_chromium()
    page, png = tmp_path / "report.html", tmp_path / "report.png"
    page.write_text(render_html(data), encoding="utf-8")
    browse(chromium, tmp_path, f"--screenshot={png}", "--window-size=1280,2400", page.as_uri())
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", head[16:24]) == (1280, 2400)
    assert png.stat().st_size > 40_000
    dom = browse(chromium, tmp_path, "--dump-dom", page.as_uri()).stdout.decode()
    assert '<b id="features-passing">2</b>' in dom and f'<b id="cost-total">{money(15.5)}</b>' in dom
    assert all(f">{fid}</td>" in dom for fid in ("F001", "F002", "F003"))
    assert all(f'<svg id="{chart}"' in dom for chart in ("chart-timeline", "chart-cost", "chart-burndown"))
    assert dom.count('<rect class="session') == 13 and "<script" not in dom and "alert(1)" in dom


def _states(root: Path) -> dict[str, Path]:
    """The project states a person may open the report in, built from event logs and hand-off files."""
    made: dict[str, Path] = {}
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    for name in ("no session yet", "only failed sessions", "interrupted first session"):
        project = root / name.replace(" ", "_")
        project.mkdir()
        clock = Clock()
        log = events.EventLog(project, "run-1", clock=clock)
        log.emit("run_started", pid=int(dead.stdout), project=str(project), version="0.2.0", cost_basis="api")
        if name == "only failed sessions":
            for n in (1, 2):
                _session(log, clock, n, "INITIALIZER", None, standing="failed")
            _session(log, clock, 3, "INITIALIZER", None, standing="auth", partial=True)
            log.emit("run_ended", status="error", message="the API refused the key", sessions=3)
        elif name == "interrupted first session":  # killed: a start and no end, no run_ended
            log.emit(
                "session_started",
                session=1,
                role="INITIALIZER",
                model="sonnet",
                feature=None,
                branch=None,
                attempt=1,
                log_dir=".agent_logs/session_0001_INITIALIZER",
                lane=0,
            )
        made[name] = project
    (root / "finished").mkdir()
    finished = make_project(root / "finished")
    (finished / "reviews.json").write_text(
        json.dumps(
            {
                "reviews": [
                    {
                        "review_id": 4,
                        "feature_id": "F003",
                        "kind": "feature",
                        "verdict": "REQUEST_CHANGES",
                        "issues": {"critical": [], "major": ["no test for `list --all`"], "minor": []},
                    }
                ],
                "fixes": [],
            }
        )
    )
    events.append(
        events.log_path(finished),
        events.make_event(
            "set_aside",
            "run-1",
            T0 + 9999,
            {"ref": "refs/scheduler/preexisting/feature/F001", "message": "your branch feature/F001"},
        ),
    )
    made["finished run"] = finished
    return made


PROBE = """<script>
window.addEventListener("load", () => {
  const out = {};
  for (const frame of document.querySelectorAll("iframe")) {
    const doc = frame.contentDocument;
    out[frame.dataset.state] = {
      h2: [...doc.querySelectorAll("h2")].map(h => h.textContent),
      svgs: [...doc.querySelectorAll("svg")].map(s => [s.id, Math.round(s.getBoundingClientRect().width)]),
      status: doc.getElementById("run-status").textContent,
      findings: doc.querySelectorAll("#findings tbody tr").length,
      setAside: doc.querySelectorAll("#set-aside tbody tr").length,
      text: doc.body.innerText,
    };
  }
  const pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def test_chromium_renders_the_report_of_every_project_state(tmp_path: Path) -> None:
    """No session yet, only failed sessions, a first session cut by a kill, a finished run (with
    REVIEW's findings and set-aside work): each page is laid out by one Chromium launch, and
    what it shows is read back from the rendered pages."""
    chromium = find_chromium()
    states = _states(tmp_path)
    frames = "".join(
        f'<iframe data-state="{escape_attr(name)}" width="1280" height="900" srcdoc="{escape_attr(render_html(gather(p, now=T0 + 3600)))}"></iframe>'
        for name, p in states.items()
    )
    index = tmp_path / "states.html"
    index.write_text(f"<!DOCTYPE html><html><body>{frames}{PROBE}</body></html>", encoding="utf-8")
    dom = browse(
        chromium, tmp_path, "--virtual-time-budget=5000", "--dump-dom", index.as_uri()
    ).stdout.decode()
    probe = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert probe, dom[-2000:]
    seen = json.loads(unescape(probe.group(1)))
    assert set(seen) == set(states)
    for name, page in seen.items():
        assert (
            page["h2"][:1] == ["Features"] and "Review findings" in page["h2"] and "Set aside" in page["h2"]
        ), name
        assert any(i == "chart-burndown" and w > 500 for i, w in page["svgs"]), (
            name
        )  # laid out at the page's width
    assert "No session has ended yet." in seen["no session yet"]["text"]
    assert (
        seen["only failed sessions"]["status"] == "stopped" and "auth" in seen["only failed sessions"]["text"]
    )
    killed = seen["interrupted first session"]
    assert killed["status"] == "stopped" and "session 1 INITIALIZER was cut" in killed["text"]
    done = seen["finished run"]
    assert done["status"] == "done" and done["findings"] == 1 and done["setAside"] == 1
    assert (
        "no test for `list --all`" in done["text"]
        and "git branch feature/F001 refs/scheduler/preexisting/feature/F001" not in done["text"]
    )
    assert {i for i, _ in done["svgs"]} == {"chart-timeline", "chart-cost", "chart-burndown"}
