"""Unattended nights: usage limits are waited out, outages backed off, and neither counts
against the agent; authentication errors stop at once with one line that names the fix."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import MACHINE, cli_seams, state_for
from test_lifecycle import CFG, SPEC, git, new_project

from scripted_model.scenario import Scenario
from session_scheduler.core.config import AgentConfig, SessionType
from session_scheduler.core.errors import NotLoggedIn
from session_scheduler.core.humane import duration
from session_scheduler.repo.adoption import NONE
from session_scheduler.run.agent import SessionRequest, SessionResult
from session_scheduler.run.classify import BACKOFF_BASE_S, LIMIT_MARGIN_S
from session_scheduler.run.lanes import Lanes
from session_scheduler.run.plan import SessionPlan, plan_session
from session_scheduler.store import events
from session_scheduler.store.events import Totals
from session_scheduler.store.statefile import load
from session_scheduler.testing.inprocess import InProcessRobotRunner
from session_scheduler.testing.seams import START, VirtualClock

SCENARIO = {"features": 2}


class Cutting:
    """The in-process robot, except that the given sessions first end with the given results."""

    def __init__(self, cuts: dict[int, list[Callable[[float], SessionResult]]], clock: VirtualClock) -> None:
        self.robot = InProcessRobotRunner(Scenario.from_json(SCENARIO))
        self.cuts, self.clock, self.numbers = cuts, clock, []

    async def run(self, request: SessionRequest) -> SessionResult:
        self.numbers.append(request.plan.number)
        pending = self.cuts.get(request.plan.number)
        if pending:
            request.log_dir.mkdir(parents=True, exist_ok=True)
            (request.log_dir / "transcript.jsonl").write_text("cut\n")
            return pending.pop(0)(self.clock.now())
        return await self.robot.run(request)


def limit(now: float) -> SessionResult:
    return SessionResult(rate_limit_resets_at=int(now) + 1800, cost_usd=0.25)


def overloaded(now: float) -> SessionResult:
    return SessionResult(subtype="success", terminal_reason="api_error", api_error_status=529, cost_usd=0.1)


def run(project: Path, runner: Cutting, cfg: AgentConfig = CFG) -> tuple[object, list[str]]:
    lines: list[str] = []
    report = Lanes(project, cfg, runner, echo=lines.append, clock=runner.clock).run().run
    return report, lines


def reference(tmp_path: Path) -> tuple[str, dict[str, object]]:
    project = new_project(tmp_path, "reference")
    report, _ = run(project, Cutting({}, VirtualClock()))
    assert report.status == "done"  # type: ignore[attr-defined]
    return git(project, "log", "--first-parent", "--format=%s", "main"), json.loads(
        (project / "feature_list.json").read_text()
    )


def test_a_usage_limit_is_waited_out_and_the_session_run_again(tmp_path: Path) -> None:
    project, clock = new_project(tmp_path), VirtualClock()
    runner = Cutting({2: [limit]}, clock)
    report, lines = run(project, runner)
    assert report.status == "done"  # type: ignore[attr-defined]
    assert runner.numbers[:3] == [1, 2, 2]
    assert sum(clock.sleeps) == 1800 + LIMIT_MARGIN_S  # in steps a Ctrl-C reaches
    assert any(
        "usage limit was reached: waiting until" in line and "then session 2 runs again" in line
        for line in lines
    )
    saved = load(project)
    assert saved is not None and saved.flight() is None
    totals = Totals.of(events.read(events.log_path(project)))
    assert totals.not_counted == {"usage_limit": 1} and totals.failed == 0
    assert totals.cost_usd >= 0.25  # what the cut session spent still counts
    # the cut session's transcript is kept beside the rerun's, never overwritten
    kept = [p.name for p in (project / ".agent_logs").iterdir() if ".interrupted-usage_limit-" in p.name]
    assert len(kept) == 1 and kept[0].startswith("session_0002_IMPLEMENT")
    assert (project / ".agent_logs" / kept[0] / "transcript.jsonl").read_text() == "cut\n"
    # and the night ends where an uninterrupted one ends
    assert (
        git(project, "log", "--first-parent", "--format=%s", "main"),
        json.loads((project / "feature_list.json").read_text()),
    ) == reference(tmp_path)


def test_no_wait_stops_and_a_later_run_waits_for_what_is_left(tmp_path: Path) -> None:
    project, clock = new_project(tmp_path), VirtualClock()
    runner = Cutting({2: [limit]}, clock)
    report, _ = run(project, runner, AgentConfig(**{**CFG.to_json(), "wait_for_limits": False}))
    assert report.status == "limit" and "usage limit reached; it resets at" in report.message  # type: ignore[attr-defined]
    assert clock.sleeps == []
    clock.t += 600  # ten minutes later, the user runs the same command (waiting this time)
    report, lines = run(project, runner)
    assert report.status == "done"  # type: ignore[attr-defined]
    assert sum(clock.sleeps) == 1800 + LIMIT_MARGIN_S - 600
    assert any(
        "Resuming: session 2 (IMPLEMENT) again: it was cut short (usage limit)" in line for line in lines
    )


def test_a_kill_during_the_wait_waits_again_on_the_next_run(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    runner = Cutting({2: [limit]}, VirtualClock(stop_at=1))
    with pytest.raises(KeyboardInterrupt):
        run(project, runner)
    saved = load(project)
    assert saved is not None and saved.flight() is not None
    assert saved.flight().why == "usage_limit" and saved.flight().wait_until == START + 1800 + LIMIT_MARGIN_S
    runner.clock = VirtualClock(START + 100)
    report, _ = run(project, runner)
    assert report.status == "done" and sum(runner.clock.sleeps) == 1800 + LIMIT_MARGIN_S - 100  # type: ignore[attr-defined]


def backoffs(project: Path) -> list[float]:
    """Each wait the run announced (`limit_wait`: from when it began to when it ends)."""
    log = events.read(events.log_path(project))
    return [float(e["until"]) - float(e["ts"]) for e in log if e["kind"] == "limit_wait"]


def test_an_outage_is_backed_off_and_never_counted(tmp_path: Path) -> None:
    project, clock = new_project(tmp_path), VirtualClock()
    runner = Cutting({3: [overloaded, overloaded, overloaded]}, clock)
    report, lines = run(project, runner)
    assert report.status == "done"  # type: ignore[attr-defined]
    assert runner.numbers[:6] == [1, 2, 3, 3, 3, 3]
    waits = backoffs(project)
    assert sum(clock.sleeps) == pytest.approx(sum(waits), abs=0.01)
    assert [round(s / BACKOFF_BASE_S / 2**n, 1) >= 1.0 for n, s in enumerate(waits)] == [True] * 3
    assert [s <= BACKOFF_BASE_S * 2**n * 1.2 for n, s in enumerate(waits)] == [True] * 3
    assert sum("kept failing (529)" in line and "then session 3 runs again" in line for line in lines) == 3
    saved = load(project)
    assert saved is not None
    totals = Totals.of(events.read(events.log_path(project)))
    assert totals.not_counted == {"outage": 3} and totals.failed == 0
    assert len([p for p in (project / ".agent_logs").iterdir() if ".interrupted-outage-" in p.name]) == 3


def test_an_outage_longer_than_the_allowance_stops_the_run_resumably(tmp_path: Path) -> None:
    project, clock = new_project(tmp_path), VirtualClock()
    runner = Cutting({2: [overloaded] * 10}, clock)
    report, _ = run(project, runner, AgentConfig(**{**CFG.to_json(), "max_outage_minutes": 2}))
    assert report.status == "limit"  # type: ignore[attr-defined]
    waited = sum(clock.sleeps)
    assert (
        f"gave up after {duration(waited)} of failing requests, retries and back-off included (--max-outage-minutes 2)"
        in report.message
    )  # type: ignore[attr-defined]
    assert len(backoffs(project)) == 2  # 30 s and 60 s fit in 2 minutes, 120 s more does not
    saved = load(project)
    assert saved is not None and saved.flight() is not None and saved.flight().number == 2


def test_the_outage_allowance_counts_the_clis_own_retries(tmp_path: Path) -> None:
    """An outage session that the CLI had spent 50 s retrying: with one minute allowed, the 30 s
    back-off no longer fits, and the run stops at once instead of backing off."""
    project, clock = new_project(tmp_path), VirtualClock()

    def retried(now: float) -> SessionResult:
        return SessionResult(
            subtype="success", terminal_reason="api_error", api_error_status=529, retrying_s=50
        )

    runner = Cutting({2: [retried] * 3}, clock)
    report, _ = run(project, runner, AgentConfig(**{**CFG.to_json(), "max_outage_minutes": 1}))
    assert report.status == "limit" and clock.sleeps == []  # type: ignore[attr-defined]
    assert "gave up after 50 s of failing requests" in report.message  # type: ignore[attr-defined]


def test_a_session_is_planned_with_what_is_left_of_the_outage_allowance(tmp_path: Path) -> None:
    config = AgentConfig(max_outage_minutes=2)

    def planned(outage_s: float) -> SessionPlan:
        return plan_session(
            state_for(SessionType.IMPLEMENT),
            config,
            tmp_path,
            spent_usd=0.0,
            brief="",
            host=MACHINE,
            outage_s=outage_s,
            adopted=NONE,
        )

    assert planned(100).outage_allowance_s == 20
    assert planned(500).outage_allowance_s == 0


@pytest.mark.parametrize(
    ("result", "message"),
    [
        (
            SessionResult(api_error_status=401, base_url="http://127.0.0.1:8080"),
            "the endpoint http://127.0.0.1:8080 (ANTHROPIC_BASE_URL) refused the credentials (401)",
        ),
        (SessionResult(api_error_status=404), "does not know the model 'sonnet'"),
    ],
)
def test_authentication_and_unknown_models_stop_at_once(
    tmp_path: Path, result: SessionResult, message: str
) -> None:
    project, clock = new_project(tmp_path), VirtualClock()
    runner = Cutting({2: [lambda now: result]}, clock)
    with pytest.raises(NotLoggedIn, match=message.replace("(", r"\(").replace(")", r"\)")):
        run(project, runner)
    assert clock.sleeps == []
    saved = load(project)
    assert saved is not None and saved.flight() is not None and saved.flight().why == "auth"
    report, _ = run(project, runner)  # fixed: the same command resumes with that session
    assert report.status == "done"  # type: ignore[attr-defined]
    assert SPEC.exists()


def test_a_model_the_endpoint_does_not_know_is_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from session_scheduler.view.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.txt").write_text(SPEC.read_text())

    class Unknown:
        async def run(self, request: SessionRequest) -> SessionResult:
            return SessionResult(
                api_error_status=404, error="model: claude-nonexistent", base_url="http://127.0.0.1:9"
            )

    project = tmp_path / "app"
    args = ["--project-dir", str(project), "--spec", "spec.txt", "--initializer-model", "claude-nonexistent"]
    result = CliRunner().invoke(main, args, obj=cli_seams(lambda _: Unknown()))
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1] == (
        "error: the endpoint http://127.0.0.1:9 (ANTHROPIC_BASE_URL) does not know the model 'claude-nonexistent': "
        "give a model it serves with --initializer-model (the model of INITIALIZER sessions)"
    )
    saved = json.loads((project / ".agent_config.json").read_text())
    assert saved["models"]["INITIALIZER"] == "sonnet"


@pytest.mark.parametrize(
    "option", [["--max-budget-usd", "nan"], ["--max-budget-usd", "inf"], ["--max-outage-minutes", "nan"]]
)
def test_numbers_that_are_not_numbers_are_refused(tmp_path: Path, option: list[str]) -> None:
    from session_scheduler.view.cli import main

    result = CliRunner().invoke(
        main, ["--project-dir", str(tmp_path / "p"), "--dry-run", *option], obj=cli_seams(lambda _: None)
    )  # type: ignore[arg-type,return-value]
    assert result.exit_code == 2  # a malformed command line, named by its option
    assert f"Invalid value for '{option[0]}'" in result.output and "not a finite number" in result.output
    assert "Traceback" not in result.output


def test_nothing_is_left_in_the_temp_directory_after_a_run(tmp_path: Path) -> None:
    from session_scheduler.guard.sandbox import private_tmp

    project = new_project(tmp_path)
    report, _ = run(
        project, Cutting({}, VirtualClock()), AgentConfig(**{**CFG.to_json(), "test_command": None})
    )
    assert report.status == "done"  # type: ignore[attr-defined]
    assert not private_tmp(project).exists(), "the sessions' TMPDIR is removed when the run ends"
