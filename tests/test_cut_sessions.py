"""Honest accounting after any ending, and what a person looks for (issue 17, findings 8 to 10):
a session Claude Code reported no result for records the tokens its transcript shows and an
estimated cost; a killed run's session is told as cut (by what, of which run) in `status`, the
summary and the report, ends at its last activity, and is not counted under the run that
resumed it; REVIEW's findings and the work set aside are listed with the commands that bring it
back; a run in its sandbox probe is not "not running"."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from scripted_model.scenario import Scenario
from session_scheduler.core import pricing
from session_scheduler.core.config import AgentConfig
from session_scheduler.run.agent import SessionRequest, SessionResult
from session_scheduler.run.lanes import Lanes
from session_scheduler.run.report import print_summary
from session_scheduler.store import events
from session_scheduler.store.authority import FileAuthority
from session_scheduler.testing.inprocess import InProcessRobotRunner
from session_scheduler.view.project_report import gather, render_html, render_markdown
from session_scheduler.view.status import render, status_of

SPEC = Path(__file__).resolve().parent.parent / "session_scheduler" / "prompts" / "app_spec.txt"
CFG = AgentConfig(feature_count=1, max_attempts=2)
USAGE = {
    "input_tokens": 20_000,
    "cache_read_input_tokens": 10_000,
    "cache_creation_input_tokens": 0,
    "output_tokens": 400,
}


def dead_pid() -> int:
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    return int(proc.stdout)


def new_project(tmp_path: Path) -> Path:
    project = tmp_path / "app"
    project.mkdir()
    (project / "app_spec.txt").write_text(SPEC.read_text())
    return project


# -- the estimate ---------------------------------------------------------------------------------


def test_the_estimate_uses_the_clis_own_rate_for_the_model_else_the_list_price() -> None:
    tokens = {
        "input_tokens": 100_000,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "output_tokens": 1_000,
    }
    # the CLI charged $2/M input and $10/M output for "sonnet" in this project
    seen = [
        {"model": "sonnet", **tokens, "cost_usd": 0.21, "partial": False},
        {"model": "sonnet", **tokens, "cost_usd": 99.0, "partial": True},
    ]  # an estimate never teaches the rate
    assert pricing.estimate("sonnet", tokens, seen) == pytest.approx(0.21)
    assert pricing.estimate("claude-opus-9", tokens, seen) == pytest.approx(
        0.105 * 5
    )  # opus list: $5/M input
    assert pricing.estimate("my-local-model", dict.fromkeys(tokens, 0), seen) == 0.0


# -- a session the CLI reported no result for -------------------------------------------------------


class TimedOutOnce(InProcessRobotRunner):
    """The robot; session 2 is stopped by the idle timeout after its work, so the CLI reported no
    result: its tokens are what the transcript shows (agent.py), its cost unknown."""

    async def run(self, request: SessionRequest) -> SessionResult:
        result = await super().run(request)
        if request.plan.number != 2:
            return dataclasses.replace(result, cost_usd=0.05, input_tokens=10_000, output_tokens=100)
        return dataclasses.replace(
            result,
            cut_off=True,
            terminal_reason="idle_timeout",
            num_turns=1,
            cost_usd=0.0,
            input_tokens=10_000,
            cache_read_tokens=5_000,
            output_tokens=200,
            subtype="error_during_execution",
        )


def test_a_session_stopped_by_a_timeout_records_its_tokens_and_an_estimated_cost(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    lines: list[str] = []
    report = (
        Lanes(project, CFG, TimedOutOnce(Scenario.from_json({"features": 1})), echo=lines.append).run().run
    )
    assert report.status == "done", report.message
    ended = next(
        e for e in events.read(events.log_path(project)) if e["kind"] == "session_ended" and e["session"] == 2
    )
    receipt = ended["receipt"]
    assert (receipt["input_tokens"], receipt["cache_read_tokens"], receipt["output_tokens"]) == (
        10_000,
        5_000,
        200,
    )
    assert receipt["cost_estimated"] and receipt["partial"] and receipt["cost_usd"] > 0
    assert receipt["cost_usd"] == pytest.approx(
        0.05 * (10_000 + 500 + 1_000) / (10_000 + 500), abs=1e-6
    )  # the rate session 1 paid
    assert ended["cut"]["by"] == "idle_timeout" and ended["cut"]["run"] == ended["run"]
    line = next(line for line in lines if line.startswith("--- Session 2 "))
    assert "(1 turn, " in line and "estimated" in line, line
    assert all("(1 turns" not in line for line in lines)
    assert report.totals.cost_usd == pytest.approx(sum(e["receipt"]["cost_usd"] for e in report.totals.ended))


# -- a killed run ---------------------------------------------------------------------------------


class Killed(BaseException):
    """Stands for SIGKILL: nothing of the scheduler's runs after it (its run_ended is removed)."""


class KilledInSession(InProcessRobotRunner):
    """Session 2's CLI answers twice into its transcript, then the scheduler dies."""

    async def run(self, request: SessionRequest) -> SessionResult:
        if request.plan.number != 2:
            return await super().run(request)
        request.log_dir.mkdir(parents=True, exist_ok=True)
        transcript = request.log_dir / "transcript.jsonl"
        message = {"type": "AssistantMessage", "model": "claude-sonnet", "usage": USAGE}
        transcript.write_text(
            "".join(json.dumps({**message, "message_id": f"m{n}"}) + "\n" for n in range(2))
        )
        raise Killed


def kill_in_session_two(project: Path) -> tuple[str, float]:
    """Run the project until the kill; the log as a kill -9 leaves it. The killed run's id, and
    when its session last did something."""
    with pytest.raises(Killed):
        Lanes(
            project,
            CFG,
            KilledInSession(Scenario.from_json({"features": 1})),
            echo=lambda _: None,
            events=events.EventLog(project, "run-1"),
        ).run()
    log = events.log_path(project)
    kept = [e for e in events.read(log) if e["kind"] != "run_ended"]
    killed_run = kept[0]["run"]
    for event in kept:
        if event["kind"] == "run_started":
            event["pid"] = dead_pid()
    log.write_text("".join(json.dumps(e) + "\n" for e in kept))
    started = next(e for e in kept if e["kind"] == "session_started" and e["session"] == 2)
    last = float(started["ts"]) + 7
    transcript = project / started["log_dir"] / "transcript.jsonl"
    os.utime(transcript, (last, last))
    return killed_run, last


def test_a_session_cut_by_a_kill_is_told_counted_and_drawn_honestly(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    killed_run, last = kill_in_session_two(project)

    before = status_of(project)
    assert not before["running"]
    assert before["cut"] == [
        {
            "session": 2,
            "role": "IMPLEMENT",
            "feature": "F001",
            "by": "kill",
            "run": killed_run,
            "last_activity": before["cut"][0]["last_activity"],
            "standing": None,
            "resumed": False,
        }
    ]
    text = "\n".join(render(before))
    assert f"cut: session 2 IMPLEMENT · F001, killed with its run (run {killed_run})" in text
    assert "not resumed yet: run the same command to resume it" in text
    assert "killed: session 2 IMPLEMENT F001 was cut" in gather(project).detail

    lines: list[str] = []
    scheduler = Lanes(
        project,
        CFG,
        InProcessRobotRunner(Scenario.from_json({"features": 1})),
        echo=lines.append,
        events=events.EventLog(project, "run-2"),
    )
    report = scheduler.run().run
    assert report.status == "done", report.message
    ended = next(
        e for e in events.read(events.log_path(project)) if e["kind"] == "session_ended" and e["session"] == 2
    )
    assert ended["standing"] == "interrupted" and ended["run"] == scheduler.events.run
    assert ended["cut"] == {"by": "kill", "run": killed_run, "last_activity": round(last, 3)}
    receipt = ended["receipt"]
    assert (receipt["input_tokens"], receipt["cache_read_tokens"], receipt["output_tokens"]) == (
        40_000,
        20_000,
        800,
    )
    assert receipt["cost_estimated"] and receipt["cost_usd"] > 0, "a kill's tokens are not free"
    assert receipt["duration_s"] == pytest.approx(7, abs=0.01)

    # the summary: the earlier run's interruption is not this run's
    assert report.run_totals.not_counted == {} and report.totals.not_counted == {"interrupted": 1}
    assert report.run_totals.cost_usd == pytest.approx(report.totals.cost_usd - receipt["cost_usd"])
    console = Console(record=True, width=250, file=io.StringIO())
    print_summary(console, report)
    summary = console.export_text()
    assert (
        f"cut: session 2 IMPLEMENT was killed with its run (of the earlier run {killed_run}, not counted in this one); not counted: the session is done again from its start"
        in summary
    )
    row = next(r for r in summary.splitlines() if "cut short, done again" in r)
    assert row.split("│")[2].strip() == "none", row

    # status after the resume, and the report: the bar ends at its last activity, not at the resume
    after = status_of(project)
    assert [(c["session"], c["by"], c["run"], c["resumed"]) for c in after["cut"]] == [
        (2, "kill", killed_run, True)
    ]
    assert f"killed with its run (run {killed_run})" in "\n".join(render(after))
    assert "; not counted, done again from its start afterwards" in "\n".join(render(after))
    data = gather(project)
    row2 = next(r for r in data.session_rows if r.number == 2 and r.standing == "interrupted")
    assert row2.end == pytest.approx(last, abs=0.01) and row2.duration_s == pytest.approx(7, abs=0.01)
    assert row2.estimated and f"run {killed_run}" in row2.cut
    page, md = render_html(data), render_markdown(data)
    assert f"cut: killed with its run, run {killed_run}" in page and "unknown" not in page
    assert (
        f"session 2 IMPLEMENT F001: killed with its run, run {killed_run}, 7 s until its last activity" in md
    )


def test_a_run_that_holds_the_lock_before_its_first_event_is_starting_not_new(tmp_path: Path) -> None:
    project = tmp_path / "app"
    project.mkdir()
    assert status_of(project)["running"] is False
    with FileAuthority(project).hold():  # what a run holds during its sandbox probe, before run_started
        status = status_of(project)
        assert status["running"] is True and status["starting"]["pid"] == os.getpid()
        assert (
            render(status)[0]
            == f"{project}: starting (checking the OS sandbox and the project before the first session; pid {os.getpid()}), phase NEW"
        )
    assert status_of(project)["starting"] is None


# -- findings and set-aside work ----------------------------------------------------------------------


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def reviewed_project(tmp_path: Path) -> tuple[Path, str]:
    """Two features reviewed (one sent back, fixed, passed; one rejected), an architecture review
    in the history file, and one stash of the scheduler's, then one of the person's on top."""
    project = tmp_path / "app"
    project.mkdir()
    _git(project, "init", "-q", "-b", "main")
    (project / "a.txt").write_text("1\n")
    _git(project, "add", "a.txt")
    _git(project, "commit", "-q", "-m", "first")
    (project / "a.txt").write_text("2\n")
    _git(project, "stash", "push", "-q", "-m", "scheduler: leftovers before checking out main")
    ours = _git(project, "rev-parse", "refs/stash")
    (project / "a.txt").write_text("3\n")
    _git(project, "stash", "push", "-q", "-m", "the person's own")
    reviews = {
        "reviews": [
            {
                "review_id": 2,
                "feature_id": "F001",
                "kind": "feature",
                "verdict": "REQUEST_CHANGES",
                "issues": {"critical": [], "major": ["no test for\n  `add --due`"], "minor": ["typo"]},
                "acceptance": [
                    {"step": 1, "passed": True, "evidence": "printed `1`"},
                    {"step": 2, "passed": False, "evidence": "printed <b>nothing</b>"},
                ],
            },
            {
                "review_id": 3,
                "feature_id": "F001",
                "kind": "feature",
                "verdict": "PASS",
                "issues": {"critical": [], "major": [], "minor": []},
            },
            {
                "review_id": 4,
                "feature_id": "F002",
                "kind": "feature",
                "verdict": "REJECT",
                "issues": {"critical": ["wrong | approach <b>"], "major": [], "minor": []},
            },
        ],
        "fixes": [{"fix_id": 1, "review_id": 2, "issues_fixed": ["no test"]}],
    }
    (project / "reviews.json").write_text(json.dumps(reviews))
    (project / "reviews_history.jsonl").write_text(
        json.dumps(
            {
                "review_id": 1,
                "feature_id": None,
                "kind": "architecture",
                "verdict": "REQUEST_CHANGES",
                "issues": {"critical": [], "major": ["split the store"], "minor": []},
            }
        )
        + "\n"
    )
    log = events.EventLog(project, "run-1")
    log.emit("run_started", pid=dead_pid(), project=str(project), version="0", cost_basis="api")
    log.emit(
        "set_aside",
        ref="stash@{0}",
        message="On main: scheduler: leftovers before checking out main",
        commit=ours,
    )
    log.emit(
        "set_aside", ref="refs/scheduler/preexisting/feature/F001", message="your branch feature/F001 (abc)"
    )
    return project, ours


def test_status_and_the_report_list_review_findings_and_set_aside_work(tmp_path: Path) -> None:
    project, _ = reviewed_project(tmp_path)
    status = status_of(project)
    text = "\n".join(render(status))
    assert (
        "    F001    #2 REQUEST_CHANGES (1 major, 1 minor, fixed by fix #1): no test for `add --due`; then #3 PASS"
        in text
    )
    assert "    F002    #4 REJECT (1 critical): wrong | approach <b>" in text
    assert [r["review_id"] for r in status["findings"]["F001"]] == [2, 3]
    assert status["findings"]["F001"][0]["acceptance"] == [
        {"step": 1, "passed": True, "evidence": "printed `1`"},
        {"step": 2, "passed": False, "evidence": "printed <b>nothing</b>"},
    ]
    assert status["findings"]["F001"][1]["acceptance"] == []  # a review from before steps were graded
    # the person stashed on top of ours: ours is stash@{1} now, and the commands say so
    assert (
        "  set aside: stash@{1} (On main: scheduler: leftovers before checking out main): "
        "`git stash show -p --include-untracked stash@{1}` shows it, `git stash pop stash@{1}` brings it back"
    ) in text
    assert (
        "set aside earlier: refs/scheduler/preexisting/feature/F001 (your branch feature/F001 (abc)), no longer there"
        in text
    )

    data = gather(project)
    assert [(s, [f.review_id for f in found]) for s, found in data.findings] == [
        ("F001", [2, 3]),
        ("F002", [4]),
        ("architecture", [1]),
    ]
    page, md = render_html(data), render_markdown(data)
    assert "<li><b>major</b>: no test for `add --due`</li>" in page and "wrong | approach &lt;b&gt;" in page
    assert "<code>git stash pop stash@{1}</code>" in page and "split the store" in page
    assert (
        ": <b>failed</b> (printed &lt;b&gt;nothing&lt;/b&gt;)</li>" in page
        and ": passed (printed `1`)</li>" in page
        and '<ul class="steps"><li>1. ' in page
    )
    assert (
        "| F001 | #2 | REQUEST_CHANGES | major: no test for `add --due`; minor: typo | 1 of 2 steps passed; "
        r"step 2 failed: printed \<b\>nothing\</b\> | #1 |" in md
    )
    assert r"| F002 | #4 | REJECT | critical: wrong \| approach \<b\> |  |  |" in md
    assert (
        "- stash `stash@{1}` (On main: scheduler: leftovers before checking out main): "
        "`git stash show -p --include-untracked stash@{1}` shows it, `git stash pop stash@{1}` brings it back"
        in md
    )

    _git(project, "stash", "drop", "-q", "stash@{1}")
    assert "no longer there (brought back or dropped)" in "\n".join(render(status_of(project)))


def test_markdown_keeps_code_spans_and_escapes_what_is_not_one(tmp_path: Path) -> None:
    from session_scheduler.view.project_report import _md

    assert _md("`add TITLE [--due DATE]` adds a task") == "`add TITLE [--due DATE]` adds a task"
    assert _md("`a|b` and [x]") == r"`a\|b` and \[x\]"
    assert _md("a stray ` backtick <b>") == r"a stray \` backtick \<b\>"
    from session_scheduler.view.markup import md

    assert md("`list | grep Eggs` | x", cell=False) == r"`list | grep Eggs` \| x"  # a list item: kept


def test_status_lists_roles_in_one_order_whatever_ended_first(tmp_path: Path) -> None:
    project = tmp_path / "app"
    project.mkdir()
    log = events.EventLog(project, "run-1")
    log.emit("run_started", pid=dead_pid(), project=str(project), version="0", cost_basis="api")
    receipt: dict[str, Any] = {"model": "m", "cost_usd": 0.1}
    for n, role in enumerate(("FIX", "ARCHITECTURE", "REVIEW", "INITIALIZER", "IMPLEMENT"), 1):
        log.emit(
            "session_ended",
            session=n,
            role=role,
            feature=None,
            standing="verified",
            reason="",
            receipt=receipt,
        )
    assert "sessions: 5 (INITIALIZER 1, IMPLEMENT 1, REVIEW 1, FIX 1, ARCHITECTURE 1)" in "\n".join(
        render(status_of(project))
    )
    assert [r.role for r in gather(project).roles] == [
        "INITIALIZER",
        "IMPLEMENT",
        "REVIEW",
        "FIX",
        "ARCHITECTURE",
    ]
