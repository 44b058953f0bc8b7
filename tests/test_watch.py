"""Watching a run: the live console, `status`, notifications, receipts and both budget caps."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import cli_seams, wait_until
from rich.console import Console
from test_lifecycle import CFG, new_project

from scripted_model.scenario import Scenario
from session_scheduler.core.config import AgentConfig
from session_scheduler.core.humane import duration, money, number, outcome, plural
from session_scheduler.core.version import VERSION
from session_scheduler.repo.merge_queue import Landing, Queue
from session_scheduler.run.agent import SessionRequest, SessionResult
from session_scheduler.run.lanes import Lanes
from session_scheduler.store import events
from session_scheduler.store.events import EventLog, Totals, make_event
from session_scheduler.store.records import Records
from session_scheduler.testing.inprocess import InProcessRobotRunner
from session_scheduler.view import status
from session_scheduler.view.cli import main
from session_scheduler.view.live import LiveConsole, cut, status_line
from session_scheduler.view.notify import Notifier, wanted

ONE = {"features": 2}


def totals_of(project: Path) -> Totals:
    return Totals.of(events.read(events.log_path(project)))


class Priced:
    """The in-process robot, each session reported at a price (and, optionally, held at a gate)."""

    def __init__(
        self, cost: float = 0.4, gate: threading.Event | None = None, hold: int | None = None
    ) -> None:
        self.robot = InProcessRobotRunner(Scenario.from_json(ONE))
        self.cost, self.gate, self.hold = cost, gate, hold
        self.entered = threading.Event()
        self.budgets: list[float | None] = []

    async def run(self, request: SessionRequest) -> SessionResult:
        self.budgets.append(request.plan.max_budget_usd)
        if self.gate is not None and request.plan.number == self.hold:
            self.entered.set()
            self.gate.wait(30)
        result = await self.robot.run(request)
        import dataclasses

        return dataclasses.replace(
            result, cost_usd=self.cost, input_tokens=1000, output_tokens=200, cache_read_tokens=50
        )


# -- small things a person reads ---------------------------------------------------------------


def test_numbers_plurals_and_durations_read_as_a_person_writes_them() -> None:
    assert (number(1234567), plural(1, "session"), plural(2, "session"), plural(1200, "feature")) == (
        "1,234,567",
        "1 session",
        "2 sessions",
        "1,200 features",
    )
    assert (duration(5), duration(125), duration(7500)) == ("5 s", "2 min 05 s", "2 h 05 min")
    assert (money(0.01234), money(1234.5)) == ("$0.0123", "$1,234.50")
    assert (
        outcome("interrupted", "interrupted; run the same command again to resume")
        == "interrupted; run the same command again to resume"
    )
    assert outcome("limit", "the budget is spent") == "limit: the budget is spent"


def test_a_long_line_is_cut_with_an_ellipsis() -> None:
    assert cut("abcdef", 4) == "abc…" and cut("abc", 4) == "abc"


def test_version() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and VERSION in result.output


# -- the live console -----------------------------------------------------------------------------


def started(n: int = 3, role: str = "REVIEW", feature: str | None = "F002") -> dict[str, Any]:
    return make_event(
        "session_started",
        "r",
        time.time(),
        {
            "session": n,
            "role": role,
            "model": "opus",
            "feature": feature,
            "branch": "feature/F002",
            "attempt": 2,
            "log_dir": "l",
            "lane": 0,
        },
    )


def console_of(verbosity: str = "normal", terminal: bool = False) -> tuple[LiveConsole, io.StringIO]:
    out = io.StringIO()
    console = Console(file=out, force_terminal=terminal, width=200, highlight=False)
    return LiveConsole(console, verbosity=verbosity, heartbeat_s=3600), out  # type: ignore[arg-type]


def test_a_session_header_names_the_feature_of_how_many_its_branch_attempt_and_clock_time() -> None:
    view, out = console_of()
    view.on_event(
        make_event("features_listed", "r", 1.0, {"session": 1, "features": ["F001", "F002", "F003"]})
    )
    view.on_event(started())
    header = out.getvalue().strip().splitlines()[-1]
    assert header.startswith(
        "=== Session 3: REVIEW (opus) · F002 (feature 2 of 3) · feature/F002 · attempt 2 · "
    )
    assert header.endswith(" ===")


def test_tool_lines_are_cut_normally_whole_when_verbose_and_left_out_when_quiet() -> None:
    line = "  [IMPLEMENT] Bash: " + "x" * 300
    for verbosity, expected in (("normal", cut(line, 110)), ("verbose", line)):
        view, out = console_of(verbosity)
        view.echo(line)
        assert out.getvalue().rstrip("\n") == expected
    view, out = console_of("quiet")
    view.echo(line)
    view.echo("--- Session 2 IMPLEMENT: verified")
    assert out.getvalue() == "--- Session 2 IMPLEMENT: verified\n"


def test_denials_undos_and_warnings_are_highlighted() -> None:
    view, out = console_of(terminal=True)
    view.echo("  DENIED Bash: git push (deny rule)")
    view.echo("  plain line")
    view.close()
    text = out.getvalue()
    assert "\x1b[1;31m  DENIED Bash: git push (deny rule)" in text and "\x1b[1;31m  plain line" not in text


def test_the_status_line_and_the_cost_note_follow_the_events() -> None:
    totals = Totals()
    totals.apply(
        make_event(
            "run_started", "r", 100.0, {"pid": 1, "project": "/p", "version": "x", "cost_basis": "scripted"}
        )
    )
    totals.apply(make_event("features_listed", "r", 101.0, {"session": 1, "features": ["F1", "F2"]}))
    totals.apply(
        make_event(
            "session_ended",
            "r",
            102.0,
            {
                "session": 1,
                "role": "INITIALIZER",
                "feature": None,
                "standing": "verified",
                "reason": "",
                "receipt": {"cost_usd": 1.5, "input_tokens": 12345},
            },
        )
    )
    totals.apply(
        make_event(
            "merge_verified",
            "r",
            103.0,
            {"session": 3, "feature": "F1", "branch": "b", "commit": "c", "tests": "passed"},
        )
    )
    assert (
        status_line(totals, 225.0)
        == "features 1/2 passing · 0 blocked · 1 session · 2 min 05 s in this run · 12,345 tokens · $1.50 est."
    )


def test_a_quiet_agent_gets_a_heartbeat_line(tmp_path: Path) -> None:
    out = io.StringIO()
    view = LiveConsole(Console(file=out, width=200), heartbeat_s=0.5)
    view.on_event(
        make_event(
            "run_started",
            "r",
            time.time(),
            {"pid": 1, "project": str(tmp_path), "version": "x", "cost_basis": "api"},
        )
    )
    view.on_event(started())
    wait_until(
        lambda: "… still working: nothing new from the agent for" in out.getvalue(), "a heartbeat line", 10
    )
    view.close()


def test_the_console_is_copied_into_the_log_folder_from_its_first_line(tmp_path: Path) -> None:
    view, _ = console_of("quiet")
    view.echo("before the run")
    view.echo("  [IMPLEMENT] Bash: ls")  # not shown when quiet, still kept
    view.on_event(
        make_event(
            "run_started",
            "r9",
            time.time(),
            {"pid": 1, "project": str(tmp_path), "version": "x", "cost_basis": "api"},
        )
    )
    view.echo("during the run")
    view.close()
    copy = (tmp_path / ".agent_logs" / "console" / "run-r9.log").read_text()
    assert [line.split(" ", 1)[1] for line in copy.splitlines()] == [
        "before the run",
        "  [IMPLEMENT] Bash: ls",
        "during the run",
    ]


# -- status -----------------------------------------------------------------------------------------


def test_status_while_a_session_runs_and_after_the_run(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    gate = threading.Event()
    runner = Priced(gate=gate, hold=3)
    scheduler = Lanes(project, CFG, runner, echo=lambda _: None)
    thread = threading.Thread(target=scheduler.run)
    thread.start()
    try:
        assert runner.entered.wait(60)
        now = status.status_of(project)
        assert now["running"] is True and now["phase"] == "REVIEW"
        assert now["in_flight"]["session"] == 3 and now["in_flight"]["role"] == "REVIEW"
        assert now["lanes"] == {"0": now["in_flight"]}  # the one lane's session, keyed by its id
        assert now["current_feature"] == "F001" and now["current_branch"] == "feature/F001"
        assert now["features"] == {"total": 2, "passing": 0, "blocked": 0}
        assert now["sessions"]["total"] == 2 and now["sessions"]["by_role"] == {
            "IMPLEMENT": 1,
            "INITIALIZER": 1,
        }
        assert now["cost_usd"] == pytest.approx(0.8) and now["tokens"]["total"] == 2 * 1250
        assert [r["session"] for r in now["recent"]] == [1, 2]
        assert now["last_activity"] is not None and now["waiting"] is None
    finally:
        gate.set()
        thread.join(120)
    after = status.status_of(project)
    totals = totals_of(project)
    assert after["running"] is False and after["run"]["ended"]["status"] == "done"
    assert after["features"] == {"total": 2, "passing": 2, "blocked": 0}
    assert after["sessions"]["total"] == totals.sessions == 5
    assert after["cost_usd"] == pytest.approx(totals.cost_usd) == pytest.approx(2.0)
    assert len(after["recent"]) == 5 and after["in_flight"] is None and after["lanes"] == {}
    assert after["queue"] == []  # one lane: its REVIEW merges, nothing waits in a queue
    Queue(Records(project)).add(Landing("F002", "feature/F002", "a" * 40, 1, 7, time.time() - 30))
    waiting = status.status_of(project)["queue"]
    assert [(e["feature"], e["branch"], e["lane"]) for e in waiting] == [("F002", "feature/F002", 1)]
    assert 29 <= waiting[0]["waiting_s"] < 300


def test_status_json_through_the_cli_and_a_project_that_does_not_exist(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    Lanes(project, CFG, Priced(), echo=lambda _: None).run(max_iterations=2)
    result = CliRunner().invoke(main, ["status", "--project-dir", str(project), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    for key in (
        "phase",
        "current_feature",
        "running",
        "features",
        "sessions",
        "cost_usd",
        "tokens",
        "recent",
    ):
        assert key in data
    assert data["version"] == status.VERSION == 1
    assert data["phase"] == "REVIEW" and data["run"]["ended"]["status"] == "limit"
    text = CliRunner().invoke(main, ["status", "--project-dir", str(project)])
    assert (
        text.exit_code == 0
        and "features: 0/2 passing, 0 blocked" in text.output
        and "sessions: 2 (" in text.output
    )
    missing = CliRunner().invoke(main, ["status", "--project-dir", str(tmp_path / "nope")])
    assert missing.exit_code == 1 and "there is no project at" in missing.output


def test_a_killed_run_is_not_running(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    log = EventLog(project, "dead")
    log.emit("run_started", pid=2**22 + 12345, project=str(project), version="x", cost_basis="api")
    assert status.status_of(project)["running"] is False


def test_dry_run_during_a_run_says_so_instead_of_calling_its_session_cut_short(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    gate = threading.Event()
    runner = Priced(gate=gate, hold=2)
    thread = threading.Thread(target=Lanes(project, CFG, runner, echo=lambda _: None).run)
    thread.start()
    try:
        assert runner.entered.wait(60)
        result = CliRunner().invoke(
            main, ["--project-dir", str(project), "--dry-run"], obj=cli_seams(lambda _: runner)
        )  # type: ignore[arg-type,return-value]
    finally:
        gate.set()
        thread.join(120)
    assert result.exit_code == 0, result.output
    assert f"Project folder: {project}" in result.output
    assert "A run is in progress" in result.output and "session 2 (IMPLEMENT) is running now" in result.output
    assert "--- first message (" in result.output


# -- receipts and budgets --------------------------------------------------------------------------


def test_each_session_leaves_a_receipt_and_totals_per_role_and_feature(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    Lanes(project, CFG, Priced(cost=0.25), echo=lambda _: None).run()
    log = events.read(events.log_path(project))
    receipts = [e for e in log if e["kind"] == "session_ended"]
    assert len(receipts) == 5
    first = receipts[1]
    assert first["role"] == "IMPLEMENT" and first["feature"] == "F001" and first["standing"] == "verified"
    assert {
        k: first["receipt"][k]
        for k in ("model", "input_tokens", "cache_read_tokens", "output_tokens", "cost_usd")
    } == {
        "model": "sonnet",
        "input_tokens": 1000,
        "cache_read_tokens": 50,
        "output_tokens": 200,
        "cost_usd": 0.25,
    }
    totals = totals_of(project)
    assert totals.by_role["REVIEW"].cost_usd == pytest.approx(0.5) and totals.by_feature["F002"].sessions == 2


def test_the_session_cap_is_handed_to_the_cli_and_the_project_budget_starts_no_session_it_cannot_cover(
    tmp_path: Path,
) -> None:
    project = new_project(tmp_path)
    runner = Priced(cost=0.4)
    cfg = AgentConfig(**{**CFG.to_json(), "max_budget_usd": 1.5, "max_session_budget_usd": 0.6})
    report = Lanes(project, cfg, runner, echo=lambda _: None).run().run
    # 1.5 covers two sessions at the cap (0.6 each, 0.4 spent each); then 0.7 is left, then 0.3 < 0.6
    assert runner.budgets == [0.6, 0.6, 0.6]
    assert report.status == "limit" and "less than one session may spend" in report.message
    kinds = [e["kind"] for e in events.read(events.log_path(project))]
    assert kinds.count("session_started") == 3 and "budget_reached" in kinds


def test_the_project_budget_alone_hands_each_session_what_is_left(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    runner = Priced(cost=0.4)
    cfg = AgentConfig(**{**CFG.to_json(), "max_budget_usd": 1.0})
    report = Lanes(project, cfg, runner, echo=lambda _: None).run().run
    assert runner.budgets == [
        pytest.approx(1.0),
        pytest.approx(0.6),
    ]  # then $0.20 is left, less than a session
    assert report.status == "limit" and "less than one session may spend ($0.4000)" in report.message


# -- notifications ----------------------------------------------------------------------------------


def test_only_the_events_a_person_cares_about_are_notified() -> None:
    def event(kind: str, **fields: Any) -> dict[str, Any]:
        return {"kind": kind, **fields}

    assert wanted(event("run_ended", status="done")) and wanted(event("feature_blocked"))
    assert wanted(event("budget_reached")) and wanted(event("limit_wait", why="usage_limit"))
    assert not wanted(event("limit_wait", why="outage")) and not wanted(event("session_ended"))
    assert wanted(event("resumed", cause="usage_limit")) and not wanted(event("resumed", cause="outage"))


def test_a_notify_command_gets_each_event_as_json_on_its_input(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    received = tmp_path / "received.jsonl"
    cfg = AgentConfig(**{**CFG.to_json(), "notify": f"cat >> {received}"})
    notifier = Notifier(str(cfg.notify), project, print)
    log = EventLog(project, "r")
    log.subscribe(notifier)
    scenario = {"features": 1, "reviews": {"F001": ["REJECT", "REJECT"]}}
    report = (
        Lanes(
            project, cfg, InProcessRobotRunner(Scenario.from_json(scenario)), echo=lambda _: None, events=log
        )
        .run()
        .run
    )
    assert report.status == "done"
    for child in notifier.started:
        child.wait(10)
    lines = [json.loads(line) for line in received.read_text().splitlines()]
    assert [(e["kind"], e.get("feature") or e.get("status")) for e in lines] == [
        ("feature_blocked", "F001"),
        ("run_ended", "done"),
    ]
    assert {e["project"] for e in lines} == {str(project)}  # one command can serve several projects


def test_a_failing_or_slow_notify_command_never_holds_the_run_up(tmp_path: Path) -> None:
    warnings: list[str] = []
    slow = Notifier("sleep 30", tmp_path, warnings.append, timeout_s=1.0)
    begun = time.monotonic()
    slow(make_event("feature_blocked", "r", 1.0, {"feature": "F1", "rejections": 2}))
    assert time.monotonic() - begun < 2.0  # started, not waited for
    slow.started[0].wait(10)  # stopped by the watcher after its timeout
    failing = Notifier("exit 3", tmp_path, warnings.append)
    failing(make_event("feature_blocked", "r", 1.0, {"feature": "F1", "rejections": 2}))
    failing.started[0].wait(10)
    wait_until(
        lambda: (
            any("exited with 3" in w for w in warnings)
            and any("still running after 1 s; stopped it" in w for w in warnings)
        ),
        "both commands' warnings",
        10,
    )
    assert "--- feature_blocked: exit 3" in (tmp_path / ".agent_logs" / "notify.log").read_text()


def test_notify_is_an_option_saved_with_the_project(tmp_path: Path, spec_file: Path) -> None:
    project = tmp_path / "app"
    args = [
        "--project-dir",
        str(project),
        "--spec",
        str(spec_file),
        "--notify",
        "true",
        "--max-iterations",
        "1",
    ]
    result = CliRunner().invoke(
        main, args, obj=cli_seams(lambda _: InProcessRobotRunner(Scenario.from_json(ONE)))
    )
    assert result.exit_code == 3, result.output
    assert json.loads((project / ".agent_config.json").read_text())["notify"] == "true"


def test_the_offline_demo_with_a_spec_says_it_builds_its_own_app(tmp_path: Path, spec_file: Path) -> None:
    args = ["--project-dir", str(tmp_path / "app"), "--spec", str(spec_file), "--offline-demo", "--dry-run"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0 and "--offline-demo builds its own small todo app" in result.output


def test_quiet_and_verbose_exclude_each_other() -> None:
    result = CliRunner().invoke(main, ["--project-dir", "x", "--quiet", "--verbose"])
    assert result.exit_code == 2 and "exclude each other" in result.output


def test_a_closed_output_pipe_does_not_stop_the_run(tmp_path: Path) -> None:
    """`... | head`: the console goes quiet, the run and its log copy go on, and run_ended is written."""
    import os
    import subprocess
    import sys

    project = new_project(tmp_path)
    script = (
        "import sys; from pathlib import Path; from rich.console import Console\n"
        "from session_scheduler.view.live import LiveConsole; from session_scheduler.store.events import EventLog; from session_scheduler.run.lanes import Lanes\n"
        "from test_lifecycle import CFG; from test_watch import Priced\n"
        "view = LiveConsole(Console(soft_wrap=True)); log = EventLog(Path(sys.argv[1]), 'r')\n"
        "log.subscribe(view.on_event)\n"
        "report = Lanes(Path(sys.argv[1]), CFG, Priced(), echo=view.echo, events=log).run().run\n"
        "view.close(); sys.stderr.write('status=' + report.status + '\\n')\n"
    )
    tests = str(Path(__file__).resolve().parent)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([tests, str(Path(tests).parent), os.environ.get("PYTHONPATH", "")]),
    }
    producer = subprocess.Popen(
        [sys.executable, "-c", script, str(project)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert producer.stdout is not None
    producer.stdout.readline()
    producer.stdout.close()  # the reader goes away after one line
    _, err = producer.communicate(timeout=120)
    assert producer.returncode == 0 and b"status=done" in err, err.decode()[-2000:]
    kinds = [e["kind"] for e in events.read(events.log_path(project))]
    assert kinds[-1] == "run_ended"
    (copy,) = (project / ".agent_logs" / "console").iterdir()
    assert "=== Session 5: REVIEW" in copy.read_text()
