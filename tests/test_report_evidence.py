"""The report's evidence (issue 20, item 5): each feature's gates, and each review's acceptance
steps with the screenshots (inline), snapshots and console messages its browser left in the
REVIEW session's folder; what is missing is said, and no cited name leads out of the folder."""

from __future__ import annotations

import json
import re
import shutil
import struct
import zlib
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import find_chromium, probe_report

from session_scheduler.core.evidence import Call
from session_scheduler.store import events
from session_scheduler.view.cli import main
from session_scheduler.view.evidence_pages import console_shown
from session_scheduler.view.project_report import ReportData, gather, render_html, render_markdown
from session_scheduler.view.review_evidence import (
    CONSOLE_CHARS,
    ConsoleRead,
    ReviewEvidence,
    console_lines,
    cut_console,
    inside,
)

T0 = 1_800_000_000.0
REVIEW_DIR = ".agent_logs/session_0003_REVIEW"
CONSOLE = (  # as @playwright/mcp 0.0.83's browser_console_messages answers, kept by the scheduler
    "### Result\n"
    "Total messages: 3 (Errors: 1, Warnings: 1)\n\n"
    "[LOG] todo ready @ http://127.0.0.1:8000/app.js:3\n"
    "[WARNING] slow render @ http://127.0.0.1:8000/app.js:9\n"
    "[ERROR] Failed to load resource: the server responded with a status of 404 () @ http://127.0.0.1:8000/favicon.ico:0\n"
)
STEPS = ["Open the page: the list shows <empty>", "Add `tea`: it appears in the list"]


def png(width: int, height: int) -> bytes:
    """A real PNG image, one colour."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    rows = b"".join(b"\x00" + b"\x20\x80\xd0" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def _started(log: events.EventLog, n: int, role: str, feature: str | None, log_dir: str) -> None:
    log.emit(
        "session_started",
        session=n,
        role=role,
        model="sonnet",
        feature=feature,
        branch=None,
        attempt=1,
        log_dir=log_dir,
        lane=0,
    )


def _ended(log: events.EventLog, n: int, role: str, feature: str | None) -> None:
    receipt = {"cost_usd": 0.5, "turns": 3, "duration_s": 30.0, "partial": False}
    log.emit(
        "session_ended",
        session=n,
        role=role,
        feature=feature,
        standing="verified",
        reason="verified",
        receipt=receipt,
    )


def _gates(log: events.EventLog, feature: str, where: str, lint: bool) -> None:
    gates = [
        {"name": "tests", "kind": "tests", "passed": True, "seconds": 1.5},
        {"name": "lint", "kind": "lint", "passed": lint, "seconds": 0.25},
    ]
    red = {} if lint else {"lint": "todo/web.py:3:1: F401 `os` imported but unused"}
    log.emit("gates_ran", where=where, passed=lint, gates=gates, red=red, feature=feature)


def make_project(root: Path) -> Path:
    """F001 (web) implemented, gated on its branch (lint red) and on main, reviewed in the browser
    by session 3 (review #1: two steps, each with a snapshot and a screenshot, and the console);
    F002 (a CLI) reviewed by session 5 without a browser (review #2)."""
    project = root / "demo"
    project.mkdir()
    features = [
        {"id": "F001", "category": "web", "description": "Add a task in the page", "steps": STEPS},
        {"id": "F002", "category": "functional", "description": "List tasks", "steps": ["Run `todo list`"]},
    ]
    (project / "feature_list.json").write_text(json.dumps({"features": features}))
    now = [T0]
    log = events.EventLog(project, "run-1", clock=lambda: now[0])
    log.emit("run_started", pid=1, project=str(project), version="0.2.0", cost_basis="api")
    for n, role, feature in ((1, "INITIALIZER", None), (2, "IMPLEMENT", "F001"), (3, "REVIEW", "F001")):
        _started(log, n, role, feature, f".agent_logs/session_{n:04d}_{role}")
        if n == 1:
            log.emit("features_listed", session=1, features=["F001", "F002"])
        if n == 2:
            _gates(log, "F001", "branch", lint=False)
        if n == 3:
            log.emit("verdict", session=3, feature="F001", review_id=1, verdict="PASS")
            _gates(log, "F001", "main", lint=True)
        now[0] += 60
        _ended(log, n, role, feature)
    for n, role in ((4, "IMPLEMENT"), (5, "REVIEW")):
        _started(log, n, role, "F002", f".agent_logs/session_{n:04d}_{role}")
        if n == 5:
            log.emit("verdict", session=5, feature="F002", review_id=2, verdict="PASS")
        _ended(log, n, role, "F002")
    log.emit("run_ended", status="done", message="every feature passes or is blocked", sessions=5)
    folder = project / REVIEW_DIR
    (folder / "evidence").mkdir(parents=True)
    (project / ".agent_logs/session_0005_REVIEW").mkdir()
    calls = [
        Call(1, "browser_navigate", {"url": "http://127.0.0.1:8000/"}, False, "http://127.0.0.1:8000/", None),
        Call(2, "browser_snapshot", {}, False, "http://127.0.0.1:8000/", "snapshot-2.yml"),
        Call(3, "browser_take_screenshot", {}, False, None, "screenshot-3.png"),
        Call(4, "browser_type", {"target": "e5", "text": "tea"}, False, None, None),
        Call(5, "browser_snapshot", {}, False, "http://127.0.0.1:8000/", "snapshot-5.yml"),
        Call(6, "browser_take_screenshot", {}, False, None, "screenshot-6.png"),
        Call(7, "browser_console_messages", {}, False, None, "console-7.txt"),
    ]
    (folder / "browser.jsonl").write_text("".join(json.dumps(c.to_json()) + "\n" for c in calls))
    (folder / "evidence/snapshot-2.yml").write_text('- list "tasks" [ref=e3]\n')
    (folder / "evidence/snapshot-5.yml").write_text('- list "tasks" [ref=e3]:\n  - listitem: tea\n')
    (folder / "evidence/screenshot-3.png").write_bytes(png(40, 24))
    (folder / "evidence/screenshot-6.png").write_bytes(png(32, 20))
    (folder / "evidence/console-7.txt").write_text(CONSOLE)
    graded = [
        {
            "step": 1,
            "passed": True,
            "evidence": "the list is empty",
            "snapshot": "snapshot-2.yml",
            "screenshot": "screenshot-3.png",
        },
        {
            "step": 2,
            "passed": True,
            "evidence": "tea is listed",
            "snapshot": "snapshot-5.yml",
            "screenshot": "screenshot-6.png",
        },
    ]
    reviews = [
        {
            "review_id": 1,
            "feature_id": "F001",
            "kind": "feature",
            "verdict": "PASS",
            "issues": {},
            "acceptance": graded,
        },
        {
            "review_id": 2,
            "feature_id": "F002",
            "kind": "feature",
            "verdict": "PASS",
            "issues": {},
            "acceptance": [{"step": 1, "passed": True, "evidence": "printed 2 tasks"}],
        },
    ]
    (project / "reviews.json").write_text(json.dumps({"reviews": reviews, "fixes": []}))
    return project


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path)


def _review(data: ReportData, feature: str) -> ReviewEvidence:
    return next(f for f in data.evidence if f.feature == feature).reviews[-1]


def _cite(project: Path, step: int, **cited: str) -> None:
    """Make review #1's result for `step` cite other names."""
    path = project / "reviews.json"
    data = json.loads(path.read_text())
    data["reviews"][0]["acceptance"][step - 1].update(cited)
    path.write_text(json.dumps(data))


def test_gather_ties_each_review_to_the_evidence_of_its_session(project: Path) -> None:
    data = gather(project, now=T0)
    f1, f2 = data.evidence
    assert [(g.where, g.name, g.passed, g.output) for g in f1.gates] == [
        ("branch", "tests", True, ""),
        ("branch", "lint", False, "todo/web.py:3:1: F401 `os` imported but unused"),
        ("main", "tests", True, ""),
        ("main", "lint", True, ""),
    ]
    (review,) = f1.reviews
    assert (review.review_id, review.verdict, review.session, review.missing) == (1, "PASS", 3, ())
    assert [(s.step, s.passed, s.evidence) for s in review.steps] == [
        (1, True, "the list is empty"),
        (2, True, "tea is listed"),
    ]
    shot, snap = review.steps[1].screenshot, review.steps[1].snapshot
    assert shot is not None and shot.file == f"{REVIEW_DIR}/evidence/screenshot-6.png" and not shot.problem
    assert snap is not None and snap.file == f"{REVIEW_DIR}/evidence/snapshot-5.yml"
    assert [(c.name, c.text, c.left_out) for c in review.console] == [("console-7.txt", CONSOLE, 0)]
    assert data.root == str(project.resolve())
    (plain,) = f2.reviews  # reviewed without a browser: its steps, nothing to show or miss
    assert (plain.browser, plain.session, [s.screenshot for s in plain.steps]) == (False, 5, [None])


def test_the_page_shows_each_step_with_its_screenshot_inline(project: Path, tmp_path: Path) -> None:
    data = gather(project, now=T0)
    page = render_html(data)  # written in the project's .agent_logs/ by default
    imgs = re.findall(r'<a href="([^"]+)"><img class="evidence" src="([^"]+)" alt="([^"]+)">', page)
    assert [(a, s, unescape(alt)) for a, s, alt in imgs] == [
        (
            "session_0003_REVIEW/evidence/screenshot-3.png",
            "session_0003_REVIEW/evidence/screenshot-3.png",
            f"Screenshot of step 1: {STEPS[0]}",
        ),
        (
            "session_0003_REVIEW/evidence/screenshot-6.png",
            "session_0003_REVIEW/evidence/screenshot-6.png",
            f"Screenshot of step 2: {STEPS[1]}",
        ),
    ]
    assert '<a class="snapshot" href="session_0003_REVIEW/evidence/snapshot-5.yml">' in page
    assert (
        '<pre class="snapshot">- list &quot;tasks&quot; [ref=e3]:\n  - listitem: tea\n</pre>' in page
    )  # folded
    assert "the list shows &lt;empty&gt;" in page and "<empty>" not in page
    assert '<span class="err">[ERROR] Failed to load resource' in page and ", 1 error line</summary>" in page
    assert '<span class="err">[WARNING]' not in page
    assert "<pre class=output>todo/web.py:3:1: F401 `os` imported but unused</pre>" in page
    assert 'id="evidence-F001"' in page and 'id="review-1"' in page
    elsewhere = render_html(data, str(tmp_path / "shared" / "reports"))
    assert 'src="../../demo/.agent_logs/session_0003_REVIEW/evidence/screenshot-3.png"' in elsewhere


def test_markdown_links_the_screenshots_and_snapshots(project: Path) -> None:
    md = render_markdown(gather(project, now=T0), str(project))
    assert f"![step 1]({REVIEW_DIR}/evidence/screenshot-3.png)" in md
    assert f"[snapshot snapshot-2.yml]({REVIEW_DIR}/evidence/snapshot-2.yml)" in md
    assert f"Console ([console-7.txt]({REVIEW_DIR}/evidence/console-7.txt), 1 error line):" in md
    assert "- step 1 passed: Open the page: the list shows \\<empty\\> (the list is empty)" in md
    assert "Gates: branch: tests passed in" in md and "lint red in" in md
    assert "- step 1 passed: Run `todo list` (printed 2 tasks)" in md  # F002: no browser, no links


def test_markdown_on_standard_output_links_from_the_current_folder(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["report", "--project-dir", str(project), "--format", "md"])
    assert result.exit_code == 0, result.output
    assert f"![step 2](demo/{REVIEW_DIR}/evidence/screenshot-6.png)" in result.output


def test_console_lines_mark_errors() -> None:
    assert console_lines(CONSOLE + "TypeError: x is undefined\n    at add (app.js:4)") == [
        (False, "### Result"),
        (False, "Total messages: 3 (Errors: 1, Warnings: 1)"),
        (False, ""),
        (False, "[LOG] todo ready @ http://127.0.0.1:8000/app.js:3"),
        (False, "[WARNING] slow render @ http://127.0.0.1:8000/app.js:9"),
        (True, CONSOLE.splitlines()[-1]),
        (True, "TypeError: x is undefined"),
        (False, "    at add (app.js:4)"),
    ]


def test_a_long_console_is_cut_at_a_line_and_keeps_its_later_errors() -> None:
    noise = "".join(f"[LOG] tick {n} @ http://127.0.0.1:8000/app.js:1\n" for n in range(200))
    text = noise + "[ERROR] boom @ http://127.0.0.1:8000/app.js:7\n" + "[LOG] after\n"
    head, left_out, later = cut_console(text)
    assert len(head) <= CONSOLE_CHARS and head.endswith("\n") and text.startswith(head)
    assert left_out == len(text) - len(head) and later == ("[ERROR] boom @ http://127.0.0.1:8000/app.js:7",)
    lines, errors = console_shown(ConsoleRead("console-9.txt", "x/console-9.txt", head, left_out, later))
    assert lines[-2:] == [
        (False, f"… {left_out} more characters in the file; the error lines among them:"),
        (True, "[ERROR] boom @ http://127.0.0.1:8000/app.js:7"),
    ]
    assert errors == "1 error line" and cut_console("short\n") == ("short\n", 0, ())
    many = noise + "[ERROR] again\n" * 50
    assert console_shown(ConsoleRead("c", "c", *cut_console(many)))[1] == "20 or more error lines"


def test_missing_evidence_is_said_and_never_breaks_the_report(project: Path) -> None:
    folder = project / REVIEW_DIR
    (folder / "evidence/screenshot-6.png").unlink()
    (folder / "evidence/console-7.txt").unlink()
    (folder / "evidence/screenshot-3.png").write_text("not an image")
    with (folder / "browser.jsonl").open("a") as ledger:
        ledger.write('{"call": 8, "tool": "browser_cl\n{"tool": "browser_click"}\n')
    data = gather(project, now=T0)
    review = _review(data, "F001")
    assert [s.screenshot.problem for s in review.steps if s.screenshot] == [
        "screenshot-3.png is not a PNG image",
        "screenshot-6.png is missing from session_0003_REVIEW/evidence",
    ]
    assert review.missing == (
        "line 8 of session_0003_REVIEW/browser.jsonl is not JSON: skipped",
        "line 9 of session_0003_REVIEW/browser.jsonl is not a browser call: skipped",
        "console-7.txt is missing from session_0003_REVIEW/evidence",
    )
    page, md = render_html(data), render_markdown(data)
    assert "<img" not in page and "screenshot: screenshot-6.png is missing" in page
    assert "line 8 of session_0003_REVIEW/browser.jsonl is not JSON" in md
    (folder / "browser.jsonl").unlink()
    assert _review(gather(project), "F001").missing == (
        "no browser call is recorded in .agent_logs/session_0003_REVIEW/browser.jsonl (not used, or the ledger is gone)",
    )
    shutil.rmtree(folder)
    gone = _review(gather(project), "F001")
    assert gone.missing == ("the session folder .agent_logs/session_0003_REVIEW is gone",)
    assert {s.snapshot.problem for s in gone.steps if s.snapshot} == {
        "its session's folder is not known or not there"
    }
    assert "is gone" in render_html(gather(project)) and "is gone" in render_markdown(gather(project))


def test_a_web_review_without_browser_evidence_says_so(project: Path) -> None:
    _cite(project, 1, snapshot="", screenshot="")
    _cite(project, 2, snapshot="", screenshot="")
    shutil.rmtree(project / REVIEW_DIR / "evidence")
    (project / REVIEW_DIR / "browser.jsonl").unlink()
    review = _review(gather(project), "F001")
    assert review.browser and review.missing == (
        "no browser call is recorded in .agent_logs/session_0003_REVIEW/browser.jsonl (not used, or the ledger is gone)",
    )
    assert render_html(gather(project)).count("no screenshot cited") == 2


@pytest.mark.parametrize(
    "name",
    [
        "../browser.jsonl",
        "../../../../etc/passwd",
        "screenshot-3.png/..",
        "snapshot-2.yml",
        "<img src=x onerror=alert(1)>",
    ],
)
def test_a_cited_name_that_is_not_a_screenshot_name_is_refused(project: Path, name: str) -> None:
    _cite(project, 1, screenshot=name)
    page = render_html(gather(project))
    shot = _review(gather(project), "F001").steps[0].screenshot
    assert (
        shot is not None
        and shot.file is None
        and "is not a name the scheduler gives a screenshot" in shot.problem
    )
    assert ".." not in re.findall(r'src="([^"]*)"', page)[0] and page.count("<img") == 1


def test_a_symlink_out_of_the_evidence_folder_is_not_followed(project: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "screenshot-3.png").write_bytes(png(8, 8))
    (outside / "console-7.txt").write_text("[ERROR] secret")
    evidence = project / REVIEW_DIR / "evidence"
    (evidence / "screenshot-3.png").unlink()
    (evidence / "screenshot-3.png").symlink_to(outside / "screenshot-3.png")
    shot = _review(gather(project), "F001").steps[0].screenshot
    assert shot is not None and (shot.file, shot.problem) == (
        None,
        "screenshot-3.png is a symbolic link: not followed",
    )
    shutil.rmtree(evidence)
    evidence.symlink_to(outside)  # the whole folder
    review = _review(gather(project), "F001")
    assert review.console == () and "secret" not in render_html(gather(project))
    assert "the evidence folder of session_0003_REVIEW is a symbolic link: not followed" in review.missing
    assert inside(project / REVIEW_DIR, "screenshot-3.png", "screenshot") == (
        None,
        "the evidence folder of session_0003_REVIEW is a symbolic link: not followed",
    )


def test_a_session_folder_outside_the_log_folder_is_not_followed(project: Path, tmp_path: Path) -> None:
    """An event log that names a folder out of `.agent_logs` (by `..` or a link) leads nowhere."""
    shutil.copytree(project / REVIEW_DIR, tmp_path / "session_0003_REVIEW")
    log = events.log_path(project)
    text = log.read_text().replace(f'"{REVIEW_DIR}"', '"../session_0003_REVIEW"')
    log.write_text(text)
    review = _review(gather(project), "F001")
    assert review.console == () and review.missing == (
        "the session folder '../session_0003_REVIEW' is not inside .agent_logs: not followed",
    )
    log.write_text(text.replace('"../session_0003_REVIEW"', '".agent_logs/linked"'))
    (project / ".agent_logs/linked").symlink_to(tmp_path / "session_0003_REVIEW")
    assert "is not inside .agent_logs: not followed" in _review(gather(project), "F001").missing[0]


def test_a_review_the_scheduler_wrote_in_another_session_has_no_browser_evidence(project: Path) -> None:
    """A red gate's review is written by the scheduler after an IMPLEMENT: no browser was due."""
    data = json.loads((project / "reviews.json").read_text())
    data["reviews"].append(
        {
            "review_id": 3,
            "feature_id": "F001",
            "kind": "feature",
            "verdict": "REQUEST_CHANGES",
            "issues": {},
            "scheduler_findings": ["the gate lint is red"],
        }
    )
    (project / "reviews.json").write_text(json.dumps(data))
    event = {"session": 2, "feature": "F001", "review_id": 3, "verdict": "REQUEST_CHANGES"}
    events.append(events.log_path(project), events.make_event("verdict", "run-1", T0 + 999, event))
    nameless = {"session": 3, "feature": "F001", "review_id": None, "verdict": "PASS"}  # read, never a crash
    events.append(events.log_path(project), events.make_event("verdict", "run-1", T0 + 999, nameless))
    (f1,) = [f for f in gather(project).evidence if f.feature == "F001"]
    assert [r.review_id for r in f1.reviews] == [1]


@pytest.mark.parametrize("where", ["default", "elsewhere"])
def test_chromium_loads_every_screenshot_of_the_written_report(
    project: Path, tmp_path: Path, where: str
) -> None:
    """The report as `report` writes it (in .agent_logs/, or with --output in another folder):
    every screenshot loads (naturalWidth > 0), drawn no wider than its limit; the gates, the
    steps and the console's errors are on the page."""
    chromium = find_chromium()
    output = tmp_path / "shared" / "report.html"
    output.parent.mkdir()
    args = ["report", "--project-dir", str(project)] + (
        ["--output", str(output)] if where == "elsewhere" else []
    )
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    report = output if where == "elsewhere" else project / ".agent_logs" / "report.html"
    seen = probe_report(chromium, tmp_path, report)
    assert [(src.rsplit("/", 1)[-1], width) for src, width, _, _ in seen["shots"]] == [
        ("screenshot-3.png", 40),
        ("screenshot-6.png", 32),
    ]
    assert all(
        alt.startswith("Screenshot of step ") and 0 < drawn <= 360 for _, _, alt, drawn in seen["shots"]
    )
    assert "lint red" in seen["text"] and "todo/web.py:3:1: F401" in seen["text"]
    assert (
        STEPS[0] in seen["text"] and STEPS[1] in seen["text"] and "Review #1 PASS (session 3)" in seen["text"]
    )
    assert seen["errors"] == [CONSOLE.splitlines()[-1]]


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)


def test_the_page_with_evidence_stays_one_file_that_fetches_nothing(project: Path) -> None:
    page = render_html(gather(project, now=T0))
    parser = _Tags()
    parser.feed(page)
    assert "script" not in parser.tags and "link" not in parser.tags and "iframe" not in parser.tags
    assert not re.findall(r'(?:src|href)="(?:https?:|//|/)', page)
