"""REVIEW in a real browser, through the real Claude Code CLI and the real boxes: the offline demo
with its web front and two web features. A feature that works passes with a snapshot and a
screenshot per step; a seeded UI bug (an Add button that does nothing) is found in the browser and
sent back; a REVIEW that tries to leave the app or to name a file outside the evidence folder is
refused; the report shows each feature's gates, steps and screenshots, which load in Chromium."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import find_chromium, probe_report, require_boxed_browser
from test_e2e import init_tools
from test_lanes_e2e import REPO, explain, of, product_env, run_demo

from session_scheduler.core.config import SessionType
from session_scheduler.core.evidence import EVIDENCE_DIR, LEDGER
from session_scheduler.guard.toolset import session_tools

pytestmark = [pytest.mark.e2e]

WEB = {
    "description": "the web front, F017 (add from the page) first built with a button that does nothing, "
    "F018 (done from the page); F018's REVIEW also tries to leave the app and to name a file",
    "features": 1,
    "web_features": 2,
    "buggy": ["F017"],
    "depends": {"F017": ["F001"]},
    "faults": [
        {"session": 9, "kind": "leave_origin"},
        {"session": 9, "kind": "screenshot_filename"},
    ],
}


def reviews(project: Path) -> dict[int, dict[str, object]]:
    listed = json.loads((project / "reviews.json").read_text())["reviews"]
    return {int(r["review_id"]): r for r in listed}


def test_web_features_are_reviewed_in_the_browser_with_evidence_a_dead_button_is_sent_back(
    tmp_path: Path,
) -> None:
    require_boxed_browser()
    run = run_demo(tmp_path, tmp_path / "web", WEB)
    project = run.project
    assert run.proc.returncode == 0, explain(run.proc)
    features = json.loads((project / "feature_list.json").read_text())["features"]
    assert [(f["id"], f["category"], f["passes"]) for f in features][1:] == [
        ("F017", "web", True),
        ("F018", "web", True),
    ]
    roles = [e["role"] for e in of(run.log, "session_started", feature="F017")]
    assert roles == ["IMPLEMENT", "REVIEW", "FIX", "REVIEW"], roles
    verdicts = [(e["feature"], e["verdict"]) for e in of(run.log, "verdict")]
    assert ("F017", "REQUEST_CHANGES") in verdicts and verdicts[-1] == ("F018", "PASS"), verdicts

    by_id = reviews(project)
    sent_back = next(
        r for r in by_id.values() if r["feature_id"] == "F017" and r["verdict"] == "REQUEST_CHANGES"
    )
    failed = [a for a in sent_back["acceptance"] if not a["passed"]]  # type: ignore[union-attr]
    assert failed and failed[0]["step"] == 2, sent_back
    assert any("acceptance step 2 fails" in issue for issue in sent_back["issues"]["major"])  # type: ignore[index]

    started = {e["session"]: e for e in of(run.log, "session_started", role="REVIEW")}
    for verdict in of(run.log, "verdict", verdict="PASS"):
        if verdict["feature"] not in ("F017", "F018"):
            continue
        folder = project / started[verdict["session"]]["log_dir"]
        assert sorted(init_tools(folder)) == sorted(session_tools(SessionType.REVIEW, browser=True))
        review = by_id[verdict["review_id"]]
        cited = [(a["snapshot"], a["screenshot"]) for a in review["acceptance"]]  # type: ignore[union-attr]
        assert len({name for pair in cited for name in pair}) == 2 * len(cited), cited
        for snapshot, screenshot in cited:
            assert (folder / EVIDENCE_DIR / screenshot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            assert "Page URL: http://127.0.0.1:8000/" in (folder / EVIDENCE_DIR / snapshot).read_text()
        ledger = [json.loads(line) for line in (folder / LEDGER).read_text().splitlines()]
        assert {c["tool"] for c in ledger} >= {
            "browser_navigate",
            "browser_snapshot",
            "browser_console_messages",
        }

    nine = project / started[9]["log_dir"]
    refusals = json.loads((nine / "result.json").read_text())["policy_refusals"]
    said = sorted(refusals.values())
    assert len(said) == 2 and said[0].startswith("leave out `filename`"), said
    assert said[1].startswith("the browser stays on the app, http://127.0.0.1:8000: 'http://example.com/'"), (
        said
    )
    assert not list(tmp_path.rglob("escape.png")), "a named screenshot landed somewhere"
    assert "browser: the app of" in run.proc.stdout and "browser: did not start" not in run.proc.stdout

    report = project / ".agent_logs" / "report.html"
    made = subprocess.run(
        [sys.executable, "autonomous_agent_demo.py", "report", "--project-dir", str(project)],
        cwd=REPO, env=product_env(tmp_path, "product"), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    seen = probe_report(find_chromium(), tmp_path, report)
    shots = seen["shots"]
    assert len(shots) >= 6 and all(width > 0 for _, width, _, _ in shots), shots
    assert "Open `/`" in seen["text"] and "app passed" in seen["text"], seen["text"][:2000]
