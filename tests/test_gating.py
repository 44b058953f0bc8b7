"""The project's gates in the loop: on an IMPLEMENT's or FIX's branch before REVIEW (a red gate
sends the work to FIX with the scheduler's review), on `main` after a merge, in the events."""

from __future__ import annotations

import json
from pathlib import Path

from test_verify_rules import implement, start

from session_scheduler.core.config import AgentConfig
from session_scheduler.core.config import SessionType as T
from session_scheduler.core.gates import Gate, GateSet
from session_scheduler.core.machine import Outcome, feature
from session_scheduler.run.verify import capture
from session_scheduler.store import progress

LINT = Gate("lint", "! grep -rq FIXME .", "lint")
TESTS = Gate("tests", "bash init.sh", "tests")
DECLARED = AgentConfig(gates=GateSet((TESTS, LINT)), sandbox=False)


def test_a_red_gate_on_the_branch_sends_the_implement_to_fix_with_its_output(tmp_path: Path) -> None:
    world = start(tmp_path, T.IMPLEMENT, feature("F001"))
    world.sh(
        "git checkout -qb feature/F001 && echo '# FIXME later' > code.py && git add code.py && git commit -qm feat"
    )
    outcome = world.verify(DECLARED)
    assert outcome.ok and outcome.gates_review == 1
    assert [(r.name, r.passed) for r in outcome.gates] == [("tests", True), ("lint", False)]
    (review,) = progress.load_handoff(world.project).review_list()
    assert review["verdict"] == "REQUEST_CHANGES" and review["feature_id"] == "F001"
    assert "lint" in review["issues"]["critical"][0] and review["session_id"] == world.state.next_number
    assert "gates red on feature/F001: lint; back to FIX with review 1" in world.lines[-1]


def test_green_gates_on_the_branch_go_on_to_review(tmp_path: Path) -> None:
    world = start(tmp_path, T.IMPLEMENT, feature("F001"))
    implement(world)
    outcome = world.verify(DECLARED)
    assert outcome.ok and outcome.gates_review is None and all(r.passed for r in outcome.gates)
    assert progress.load_handoff(world.project).review_list() == []
    assert world.lines[-1] == "  verified: the gates pass on feature/F001 (tests, lint)"


def test_the_bare_test_command_runs_on_main_only_as_before(tmp_path: Path) -> None:
    world = start(tmp_path, T.IMPLEMENT, feature("F001"))
    world.sh("git checkout -qb feature/F001 && printf 'exit 1\\n' > init.sh && git commit -qam red")
    assert world.verify(AgentConfig(test_command="bash init.sh", sandbox=False)) == Outcome(T.IMPLEMENT, True)


def test_gates_are_detected_from_the_commit_the_work_started_from(tmp_path: Path) -> None:
    world = start(tmp_path, T.IMPLEMENT, feature("F001"))
    world.sh(
        "mkdir -p tests && printf 'import unittest\\n' > tests/test_x.py && touch app.py && git add tests app.py && git commit -qm tests"
    )
    world.pre = capture(world.project, world.repo, world.state, world.project / ".agent_logs" / "pre2")
    world.sh(
        "git checkout -qb feature/F001 && printf 'raise SystemExit(1)\\n' > tests/test_x.py && git commit -qam broken"
    )
    outcome = world.verify(AgentConfig(detect_gates=True, sandbox=False))
    assert outcome.gates_review == 1 and [r.name for r in outcome.gates] == ["tests"]


def test_a_fix_whose_gates_are_red_goes_back_to_fix(tmp_path: Path) -> None:
    world = start(tmp_path, T.FIX, feature("F001"), fix_rounds=1, open_review=1)
    world.sh("echo 'FIXME' > more.py && git add more.py && git commit -qm fix")
    data = json.loads((world.project / "reviews.json").read_text())
    data["fixes"].append({"fix_id": 1, "review_id": 1, "issues_fixed": ["x"]})
    (world.project / "reviews.json").write_text(json.dumps(data))
    outcome = world.verify(DECLARED)
    assert outcome.ok and outcome.gates_review == 2


def _robot_run(tmp_path: Path, lanes: int) -> tuple[Path, list[dict[str, object]]]:
    from scripted_model.scenario import Scenario
    from session_scheduler.run.lanes import Lanes
    from session_scheduler.store import events
    from session_scheduler.testing.inprocess import InProcessRobotRunner

    spec = Path(__file__).resolve().parent.parent / "session_scheduler" / "prompts" / "app_spec.txt"
    project = tmp_path / "app"
    project.mkdir(parents=True)
    (project / "app_spec.txt").write_text(spec.read_text())
    config = AgentConfig(architecture_interval=100, feature_count=3, gates=GateSet((TESTS,)), sandbox=False)
    runner = InProcessRobotRunner(
        Scenario.from_json(
            {"features": 3, "buggy": ["F003"], "depends": {"F002": ["F001"], "F003": ["F001"]}}
        )
    )
    if lanes == 1:
        assert Lanes(project, config, runner, echo=lambda _: None).run().run.status == "done"
    else:
        assert Lanes(project, config, runner, lanes, echo=lambda _: None).run().run.status == "done"
    return project, events.read(events.log_path(project))


def test_the_robot_s_buggy_feature_is_sent_back_by_its_gates_before_any_review(tmp_path: Path) -> None:
    for lanes in (1, 2):
        project, log = _robot_run(tmp_path / str(lanes), lanes)
        roles = [e["role"] for e in log if e["kind"] == "session_started" and e.get("feature") == "F003"]
        assert roles == ["IMPLEMENT", "FIX", "REVIEW"], (lanes, roles)  # no REVIEW spent on red work
        ran = [
            (e["where"], e["passed"]) for e in log if e["kind"] == "gates_ran" and e.get("feature") == "F003"
        ]
        assert ran[:2] == [("branch", False), ("branch", True)] and ("main", True) in ran, (lanes, ran)
        red = next(e for e in log if e["kind"] == "gates_ran" and not e["passed"])
        assert red["gates"][0]["name"] == "tests" and "FAIL" in red["red"]["tests"]
        first = next(r for r in progress.load_handoff(project).review_list() if r["feature_id"] == "F003")
        assert first["verdict"] == "REQUEST_CHANGES" and "tests" in first["issues"]["critical"][0]


def test_gates_on_the_command_line_are_checked_saved_and_never_weaker_in_silence(
    spec_file: Path, tmp_path: Path
) -> None:
    from click.testing import CliRunner
    from helpers import cli_seams

    from scripted_model.scenario import Scenario
    from session_scheduler.testing.inprocess import InProcessRobotRunner
    from session_scheduler.view.cli import main, resolve_project

    def cli(*args: str) -> object:
        obj = cli_seams(lambda _: InProcessRobotRunner(Scenario.from_json({"features": 1})))
        return CliRunner().invoke(main, ["--project-dir", "g", "--spec", str(spec_file), *args], obj=obj)

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"gates": [{"name": "Lint!", "command": "ruff check ."}]}))
    for given, said in (
        (bad, "the gates are invalid at gates/0/name"),
        (tmp_path / "none.json", "no such file"),
    ):
        refused = cli("--gates", str(given))
        assert refused.exit_code == 2 and said in refused.output, refused.output  # type: ignore[attr-defined]
        assert len(refused.output.strip().splitlines()) == 1  # type: ignore[attr-defined]
        assert not resolve_project("g").exists()  # refused before anything is written
    good = tmp_path / "gates.json"
    good.write_text(json.dumps({"gates": [{"name": "tests", "command": "bash init.sh", "kind": "tests"}]}))
    ran = cli("--gates", str(good), "--max-iterations", "1", "--no-sandbox")
    assert ran.exit_code == 3, ran.output  # type: ignore[attr-defined]
    saved = json.loads((resolve_project("g") / ".agent_config.json").read_text())
    assert saved["gates"]["gates"] == [{"name": "tests", "command": "bash init.sh", "kind": "tests"}]
    again = cli("--gates", "detect", "--max-iterations", "1", "--no-sandbox")
    assert "Gates weaker: the declared gates (tests) are dropped" in again.output  # type: ignore[attr-defined]
    saved = json.loads((resolve_project("g") / ".agent_config.json").read_text())
    assert saved["gates"] is None and saved["detect_gates"] is True
    quiet = cli("--max-iterations", "1", "--no-sandbox")
    assert "Gates weaker" not in quiet.output  # type: ignore[attr-defined]


def test_the_dry_run_says_what_the_gates_are() -> None:
    from session_scheduler.core.app import AppSpec
    from session_scheduler.view.cli import gates_line

    project_app = "; the app: the project's app.json, if any"
    assert (
        gates_line(AgentConfig()) == "none (declare them with --gates FILE, or --gates detect)" + project_app
    )
    assert gates_line(AgentConfig(detect_gates=True)).startswith("detected by a language plugin")
    assert gates_line(AgentConfig(test_command="bash init.sh")) == (
        "tests (`bash init.sh`); run on main after each merge" + project_app
    )
    assert gates_line(DECLARED) == (
        "tests (`bash init.sh`), lint (`! grep -rq FIXME .`); run on each branch and on main" + project_app
    )
    assert gates_line(AgentConfig(app=AppSpec("python3 web.py"))).endswith(
        "; the app: `python3 web.py` (--app)"
    )


def test_the_report_shows_each_feature_s_gates_on_its_branch_and_on_main(tmp_path: Path) -> None:
    from session_scheduler.view import project_report

    project, log = _robot_run(tmp_path, 1)
    data = project_report.gather(project)
    row = next(r for r in data.features if r.id == "F003")
    assert row.tests == "branch: tests passed; main: tests passed"  # the last run of each
    assert project_report.gates_of(
        log[: next(i for i, e in enumerate(log) if e["kind"] == "gates_ran") + 1]
    ) == {"F001": "branch: tests passed"}
    page = project_report.render_html(data)
    assert "<th>Gates</th>" in page
    assert (
        "<li><b>scheduler</b>: …" in page and "FAILED (failures=1)" in page
    )  # the red gate's output, its end
    assert '<ul class="steps"><li>1. Run `' in page  # each graded step says what it asked
    assert "branch: tests passed; main: tests passed" in project_report.render_markdown(data)


def _with_app(tmp_path: Path, app_json: str):  # type: ignore[no-untyped-def]
    """An IMPLEMENT's world whose `main` has this app.json; the branch adds a page."""
    world = start(tmp_path, T.IMPLEMENT, feature("F001"))
    (world.project / "app.json").write_text(app_json)
    world.sh("git add app.json && git commit -qm app")
    world.pre = capture(world.project, world.repo, world.state, world.project / ".agent_logs" / "pre2")
    world.sh(
        "git checkout -qb feature/F001 && echo '<h1>todo</h1>' > index.html && git add index.html && git commit -qm page"
    )
    return world


SERVE = json.dumps({"start": "exec python3 -m http.server $PORT --bind 127.0.0.1", "ready_timeout_s": 20})


def test_the_project_s_app_is_started_and_must_answer_on_the_branch(tmp_path: Path) -> None:
    world = _with_app(tmp_path, SERVE)
    outcome = world.verify(AgentConfig(sandbox=False))
    assert outcome.ok and outcome.gates_review is None
    ((name, passed, output),) = [(r.name, r.passed, r.output) for r in outcome.gates]
    assert (name, passed) == ("app", True) and "the app answered GET /" in output


def test_an_app_the_work_breaks_is_a_red_gate_held_against_it(tmp_path: Path) -> None:
    world = start(tmp_path, T.IMPLEMENT, feature("F001"))
    (world.project / "app.json").write_text(
        json.dumps({"start": "exec python3 serve.py", "ready_timeout_s": 20})
    )
    (world.project / "serve.py").write_text(
        "import http.server, os\nhttp.server.test(http.server.SimpleHTTPRequestHandler, port=int(os.environ['PORT']), bind='127.0.0.1')\n"
    )
    world.sh("git add app.json serve.py && git commit -qm app")
    world.pre = capture(world.project, world.repo, world.state, world.project / ".agent_logs" / "pre2")
    world.sh(
        "git checkout -qb feature/F001 && printf 'print(\"broken\")\\nraise SystemExit(3)\\n' > serve.py && git commit -qam break"
    )
    outcome = world.verify(AgentConfig(sandbox=False))
    assert outcome.gates_review == 1, outcome
    ((result),) = outcome.gates
    assert result.name == "app" and not result.passed and "broken" in result.output
    (review,) = progress.load_handoff(world.project).review_list()
    assert "app" in review["issues"]["critical"][0]


def test_an_app_json_that_does_not_validate_is_a_red_gate_the_work_is_not_blamed_for(tmp_path: Path) -> None:
    for n, (app_json, said) in enumerate(
        (
            ('{"start": ', "app.json is not JSON"),
            (json.dumps({"start": "x", "ready_path": "no-slash"}), "app.json is invalid"),
        )
    ):
        (tmp_path / str(n)).mkdir()
        world = _with_app(tmp_path / str(n), app_json)
        outcome = world.verify(AgentConfig(sandbox=False))
        ((result),) = outcome.gates
        assert result.name == "app" and not result.passed and said in result.output
        assert outcome.gates_review is None and "(app): not held against it" in world.lines[-2]


def test_the_person_s_app_overrides_the_project_s(tmp_path: Path) -> None:
    from session_scheduler.core.app import AppSpec

    world = _with_app(tmp_path, '{"start": ')  # the project's is broken; the person's is used
    outcome = world.verify(AgentConfig(sandbox=False, app=AppSpec.from_json(json.loads(SERVE))))
    assert [(r.name, r.passed) for r in outcome.gates] == [("app", True)]


def test_the_app_on_the_command_line_is_checked_and_saved(spec_file: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner
    from helpers import cli_seams

    from scripted_model.scenario import Scenario
    from session_scheduler.testing.inprocess import InProcessRobotRunner
    from session_scheduler.view.cli import main, resolve_project

    def cli(*args: str) -> object:
        obj = cli_seams(lambda _: InProcessRobotRunner(Scenario.from_json({"features": 1})))
        return CliRunner().invoke(main, ["--project-dir", "a", "--spec", str(spec_file), *args], obj=obj)

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"start": "x", "port_env": "HOME"}))
    refused = cli("--app", str(bad))
    assert refused.exit_code == 2 and f"--app {bad} is invalid at port_env" in refused.output  # type: ignore[attr-defined]
    assert len(refused.output.strip().splitlines()) == 1 and not resolve_project("a").exists()  # type: ignore[attr-defined]
    good = tmp_path / "app.json"
    good.write_text(SERVE)
    assert cli("--app", str(good), "--dry-run").exit_code == 0  # type: ignore[attr-defined]
    ran = cli("--app", str(good), "--max-iterations", "1", "--no-sandbox")
    assert ran.exit_code == 3, ran.output  # type: ignore[attr-defined]
    saved = json.loads((resolve_project("a") / ".agent_config.json").read_text())
    assert saved["app"]["start"] == json.loads(SERVE)["start"]
    cli("--app", "none", "--max-iterations", "1", "--no-sandbox")
    assert json.loads((resolve_project("a") / ".agent_config.json").read_text())["app"] is None


def test_a_gate_red_on_main_before_the_work_is_not_held_against_it(tmp_path: Path) -> None:
    broken_install = AgentConfig(gates=GateSet((TESTS, LINT), install="exit 7"), sandbox=False)
    world = start(tmp_path, T.IMPLEMENT, feature("F001"))
    world.sh("echo FIXME > skeleton.txt && git add skeleton.txt && git commit -qm skeleton")
    world.pre = capture(world.project, world.repo, world.state, world.project / ".agent_logs" / "pre2")
    implement(world)
    outcome = world.verify(DECLARED)  # lint is red on main already: not this work's
    assert outcome.ok and outcome.gates_review is None and [r.passed for r in outcome.gates] == [True, False]
    assert "gates red on main before this work too (lint): not held against it" in world.lines[-2]
    world = start(tmp_path / "x", T.IMPLEMENT, feature("F001")) if (tmp_path / "x").mkdir() is None else None
    assert world is not None
    implement(world)
    outcome = world.verify(broken_install)  # an install that fails everywhere is the gates' problem
    assert outcome.gates_review is None and [r.name for r in outcome.gates] == ["install"]
    assert "(install): not held against it; fix the gates" in world.lines[-2]


def test_detection_keeps_the_person_s_test_command_as_the_tests_gate(tmp_path: Path) -> None:
    world = start(tmp_path, T.IMPLEMENT, feature("F001"))
    world.sh(
        "printf '[tool.ruff]\\n' > pyproject.toml && mkdir tests && touch app.py && git add -A && git commit -qm py"
    )
    world.pre = capture(world.project, world.repo, world.state, world.project / ".agent_logs" / "pre2")
    implement(world)
    outcome = world.verify(AgentConfig(test_command="bash init.sh", detect_gates=True, sandbox=False))
    assert [(r.name, r.command) for r in outcome.gates][:1] == [("tests", "bash init.sh")]
    assert [r.kind for r in outcome.gates] == ["tests", "lint"]


def test_the_demo_s_web_front_is_started_on_every_branch_and_a_feature_that_breaks_it_is_fixed(
    tmp_path: Path,
) -> None:
    from scripted_model.scenario import Scenario
    from session_scheduler.run.lanes import Lanes
    from session_scheduler.store import events
    from session_scheduler.testing.inprocess import InProcessRobotRunner

    spec = Path(__file__).resolve().parent.parent / "session_scheduler" / "prompts" / "app_spec.txt"
    for lanes in (1, 2):
        project = tmp_path / str(lanes) / "app"
        project.mkdir(parents=True)
        (project / "app_spec.txt").write_text(spec.read_text())
        scenario = {"features": 2, "web": True, "app_broken": ["F002"], "depends": {"F002": ["F001"]}}
        runner = InProcessRobotRunner(Scenario.from_json(scenario))
        config = AgentConfig(
            architecture_interval=100, feature_count=2, test_command="bash init.sh", sandbox=False
        )
        if lanes == 1:
            assert Lanes(project, config, runner, echo=lambda _: None).run().run.status == "done"
        else:
            assert Lanes(project, config, runner, lanes, echo=lambda _: None).run().run.status == "done"
        log = events.read(events.log_path(project))
        ran = [
            (e["where"], [(g["name"], g["passed"]) for g in e["gates"]])
            for e in log
            if e["kind"] == "gates_ran"
        ]
        assert ("branch", [("app", False)]) in ran and ("branch", [("app", True)]) in ran, ran
        red = next(e for e in log if e["kind"] == "gates_ran" and not e["passed"])
        assert red["feature"] == "F002" and "no port to listen on" in red["red"]["app"]
        roles = [e["role"] for e in log if e["kind"] == "session_started" and e.get("feature") == "F002"]
        assert roles == ["IMPLEMENT", "FIX", "REVIEW"], (lanes, roles)
        assert all(g == ("app", True) for where, gates in ran if where != "branch" for g in gates[-1:]), ran
