"""The command line through click's CliRunner, with the in-process robot injected as the runner."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result
from helpers import cli_seams

from scripted_model.scenario import Scenario
from session_scheduler.store import specs
from session_scheduler.store.authority import FileAuthority
from session_scheduler.testing.inprocess import InProcessRobotRunner
from session_scheduler.view.cli import main, resolve_project


def invoke(*args: str, scenario: dict[str, Any] | None = None) -> Result:
    return CliRunner().invoke(
        main,
        list(args),
        obj=cli_seams(lambda _: InProcessRobotRunner(Scenario.from_json(scenario or {"features": 2}))),
    )


def section(output: str, title: str) -> str:
    """The text the dry run prints between `--- <title>` and the next `---` line."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"--- {title}"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("---"))
    return "\n".join(lines[start + 1 : end])


def test_help_explains_every_option() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for option in (
        "--project-dir",
        "--spec",
        "--max-iterations",
        "--architecture-interval",
        "--feature-count",
        "--review-model",
        "--max-fix-rounds",
        "--max-rejections",
        "--dry-run",
        "--offline-demo",
    ):
        assert option in result.output


def test_dry_run_prints_the_initializer_and_launches_nothing(spec_file: Path) -> None:
    result = invoke("--project-dir", "demo", "--spec", str(spec_file), "--dry-run")
    assert result.exit_code == 0, result.output
    assert "Next session: INITIALIZER" in result.output
    assert "Model: sonnet" in result.output
    assert "initializer_prompt.md" in result.output and ".claude_settings.json" in result.output
    assert not resolve_project("demo").exists()
    assert section(result.output, "appended to Claude Code's system prompt").startswith(
        "# YOUR ROLE - INITIALIZER AGENT"
    )
    assert json.loads(section(result.output, "settings"))["permissions"]


def test_a_full_run_through_the_cli_and_a_resume(spec_file: Path) -> None:
    first = invoke("--project-dir", "app", "--spec", str(spec_file), "--max-iterations", "2")
    assert first.exit_code == 3, first.output
    assert "run the same command again to resume" in first.output
    second = invoke("--project-dir", "app", "--spec", str(spec_file))
    assert second.exit_code == 0, second.output
    assert "2/2 features passing" in second.output
    feature_list = json.loads((resolve_project("app") / "feature_list.json").read_text())
    assert all(f["passes"] for f in feature_list["features"])


def test_without_a_spec_a_new_project_uses_the_example_and_says_so() -> None:
    result = invoke("--project-dir", "app", "--max-iterations", "1")
    assert "No --spec given: using the example spec" in result.output
    assert (resolve_project("app") / "app_spec.txt").read_text().startswith("# Application spec")


def test_unreadable_spec_is_a_one_line_error(tmp_path: Path) -> None:
    result = invoke("--project-dir", "app", "--spec", str(tmp_path / "missing.txt"))
    assert result.exit_code == 2
    assert (
        result.output.strip().startswith("error: cannot read spec")
        and len(result.output.strip().splitlines()) == 1
    )
    assert not resolve_project("app").exists()


def test_empty_spec_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n")
    result = invoke("--project-dir", "app", "--spec", str(empty))
    assert result.exit_code == 2 and "is empty" in result.output


def test_unwritable_project_dir(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = invoke("--project-dir", str(blocker / "app"))
    assert result.exit_code == 1
    assert "cannot create project dir" in result.output


def test_a_spec_on_resume_that_only_takes_text_away_is_refused_and_one_that_adds_is_a_new_version(
    spec_file: Path, tmp_path: Path
) -> None:
    assert invoke("--project-dir", "app", "--spec", str(spec_file), "--max-iterations", "1").exit_code == 3
    project = resolve_project("app")
    held = (project / "app_spec.txt").read_bytes()
    shorter = tmp_path / "shorter.txt"
    shorter.write_text("".join(spec_file.read_text().splitlines(True)[:-3]))
    result = invoke("--project-dir", "app", "--spec", str(shorter))
    assert result.exit_code == 2
    assert "only takes text away from the spec this project was built from" in result.output
    assert (project / "app_spec.txt").read_bytes() == held  # nothing changed
    assert invoke("--project-dir", "app", "--spec", str(shorter), "--dry-run").exit_code == 2
    same = invoke("--project-dir", "app", "--spec", str(spec_file), "--max-iterations", "1")
    assert same.exit_code == 3, same.output
    longer = tmp_path / "longer.txt"
    longer.write_text(spec_file.read_text() + "- `count`: print how many tasks there are.\n")
    grown = invoke("--project-dir", "app", "--spec", str(longer), "--max-iterations", "1")
    assert grown.exit_code == 3, grown.output
    assert (
        "The spec has a new version (2)" in grown.output
        and (project / "app_spec.txt").read_text() == longer.read_text()
    )
    assert [v.number for v in specs.history(project)] == [1, 2]


def test_a_second_instance_is_refused_at_once(spec_file: Path) -> None:
    project = resolve_project("app")
    project.mkdir(parents=True)
    with FileAuthority(project).hold():
        result = invoke("--project-dir", "app", "--spec", str(spec_file))
    assert result.exit_code == 1
    assert "another scheduler is already running" in result.output


def test_options_are_saved_reused_and_overridden(spec_file: Path) -> None:
    invoke(
        "--project-dir",
        "app",
        "--spec",
        str(spec_file),
        "--max-iterations",
        "1",
        "--architecture-interval",
        "7",
        "--review-model",
        "custom-review",
    )
    saved = json.loads((resolve_project("app") / ".agent_config.json").read_text())
    assert saved["architecture_interval"] == 7 and saved["models"]["REVIEW"] == "custom-review"
    invoke("--project-dir", "app", "--max-iterations", "1", "--architecture-interval", "4")
    saved = json.loads((resolve_project("app") / ".agent_config.json").read_text())
    assert saved["architecture_interval"] == 4 and saved["models"]["REVIEW"] == "custom-review"


def test_corrupt_state_file_is_a_clear_error_and_loses_nothing(spec_file: Path) -> None:
    invoke("--project-dir", "app", "--spec", str(spec_file), "--max-iterations", "1")
    state = resolve_project("app") / ".agent_state.json"
    state.write_text("{ not json")
    result = invoke("--project-dir", "app")
    assert result.exit_code == 1
    assert ".agent_state.json is not valid JSON" in result.output and "Restore it" in result.output
    assert state.read_text() == "{ not json"


def test_invalid_saved_config_is_a_clear_error(spec_file: Path) -> None:
    invoke("--project-dir", "app", "--spec", str(spec_file), "--max-iterations", "1")
    (resolve_project("app") / ".agent_config.json").write_text('{"architecture_interval": 0}')
    result = invoke("--project-dir", "app")
    assert result.exit_code == 1 and "architecture_interval" in result.output


def test_bad_option_values_are_usage_errors() -> None:
    result = invoke("--project-dir", "app", "--architecture-interval", "0")
    assert result.exit_code == 2


def test_a_corrupt_handoff_file_between_runs_is_named_with_where_to_restore_it(spec_file: Path) -> None:
    invoke("--project-dir", "app", "--spec", str(spec_file), "--max-iterations", "2")
    features = resolve_project("app") / "feature_list.json"
    features.write_text('{"features": [}')
    result = invoke("--project-dir", "app")
    assert result.exit_code == 1
    last = result.output.strip().splitlines()[-1]
    assert "feature_list.json is not valid JSON" in last and "session_*/post/" in last
    assert features.read_text() == '{"features": [}'


def test_the_state_restore_point_named_in_the_error_really_restores(spec_file: Path) -> None:
    invoke("--project-dir", "app", "--spec", str(spec_file), "--max-iterations", "3")
    project = resolve_project("app")
    state = project / ".agent_state.json"
    state.write_text("{ not json")
    assert invoke("--project-dir", "app").exit_code == 1
    newest = sorted(project.glob(".agent_logs/session_*/state.json"))[-1]
    state.write_text(newest.read_text())
    result = invoke("--project-dir", "app")
    assert result.exit_code == 0, result.output
    assert "2/2 features passing" in result.output


def test_a_saved_lane_that_waits_with_nothing_to_wait_for_takes_its_work_again(spec_file: Path) -> None:
    invoke("--project-dir", "app", "--spec", str(spec_file), "--max-iterations", "2")
    path = resolve_project("app") / ".agent_state.json"
    state = json.loads(path.read_text())
    assert state["lanes"][0]["role"] == "REVIEW"
    state["lanes"][0] = {"role": "WAIT", "work": None}
    path.write_text(json.dumps(state))
    result = invoke("--project-dir", "app", "--max-iterations", "1")
    assert result.exit_code == 3, result.output  # one session ran: the lane chose its work again
    assert json.loads(path.read_text())["lanes"][0]["role"] in ("REVIEW", "IMPLEMENT")


def test_a_missing_state_file_in_a_started_project_is_refused(spec_file: Path) -> None:
    invoke("--project-dir", "app", "--spec", str(spec_file), "--max-iterations", "2")
    (resolve_project("app") / ".agent_state.json").unlink()
    result = invoke("--project-dir", "app")
    assert result.exit_code == 1
    assert ".agent_state.json is missing but the project has a feature list" in result.output


def test_a_non_utf8_spec_is_kept_byte_for_byte_and_accepted_on_resume(tmp_path: Path) -> None:
    spec = tmp_path / "latin1.txt"
    spec.write_bytes("Caf\xe9 menu app\n".encode("latin-1"))
    assert invoke("--project-dir", "app", "--spec", str(spec), "--max-iterations", "1").exit_code == 3
    assert (resolve_project("app") / "app_spec.txt").read_bytes() == spec.read_bytes()
    assert invoke("--project-dir", "app", "--spec", str(spec), "--max-iterations", "1").exit_code == 3


def test_a_deleted_handoff_file_without_any_copy_is_an_error_not_a_fresh_start(spec_file: Path) -> None:
    invoke("--project-dir", "app", "--spec", str(spec_file), "--max-iterations", "3")
    project = resolve_project("app")
    (project / "reviews.json").unlink()
    for copy in [
        *project.glob(".agent_logs/session_*/post/reviews.json"),
        *project.glob(".agent_logs/restore/**/reviews.json"),
    ]:
        copy.unlink()
    result = invoke("--project-dir", "app")
    assert result.exit_code == 1
    assert "reviews.json is missing" in result.output and ".agent_logs/restore/post/" in result.output


def test_dry_run_names_an_interrupted_session(spec_file: Path) -> None:
    invoke("--project-dir", "app", "--spec", str(spec_file), "--max-iterations", "1")
    state_path = resolve_project("app") / ".agent_state.json"
    state = json.loads(state_path.read_text())
    state["in_flight"] = {"0": {"number": 2, "log_dir": "x", "main": "abc", "branch_tip": None, "heads": {}}}
    state_path.write_text(json.dumps(state))
    result = invoke("--project-dir", "app", "--dry-run")
    assert "Next session: IMPLEMENT (a rerun of session 2, which was cut short)" in result.output


def test_dry_run_shows_exactly_the_system_prompt_and_settings_the_session_gets(spec_file: Path) -> None:
    invoke("--project-dir", "app", "--spec", str(spec_file), "--max-iterations", "2")
    dry = invoke("--project-dir", "app", "--dry-run")
    assert "Next session: REVIEW" in dry.output and "Branch: feature/F001" in dry.output
    robot = InProcessRobotRunner(Scenario.from_json({"features": 2}))
    result = CliRunner().invoke(
        main, ["--project-dir", "app", "--max-iterations", "1"], obj=cli_seams(lambda _: robot)
    )
    assert result.exit_code == 3, result.output
    (request,) = robot.requests
    assert section(dry.output, "appended to Claude Code's system prompt").rstrip(
        "\n"
    ) == request.plan.system_prompt.rstrip("\n")
    assert "# Scope of this session: REVIEW" in request.plan.system_prompt
    assert json.loads(section(dry.output, "settings")) == request.plan.settings


def test_a_budget_that_is_not_a_number_is_refused_before_anything_is_saved() -> None:
    for value in ("nan", "inf"):
        result = invoke("--project-dir", "app", "--max-budget-usd", value)
        assert (
            result.exit_code == 2
            and f"Invalid value for '--max-budget-usd': '{value}' is not a finite number" in result.output
        )
        assert not (resolve_project("app") / ".agent_config.json").exists()


def test_errors_go_to_stderr(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["--project-dir", "app", "--spec", str(tmp_path / "missing.txt")])
    assert (
        result.exit_code == 2 and result.stdout == "" and result.stderr.startswith("error: cannot read spec")
    )


def test_a_project_dir_that_is_a_file_is_refused_in_one_line_and_kept(tmp_path: Path) -> None:
    afile = tmp_path / "notes.txt"
    afile.write_text("mine\n")
    result = invoke("--project-dir", str(afile))
    assert result.exit_code == 1 and f"--project-dir {afile} is a file, not a folder" in result.output
    assert afile.read_text() == "mine\n"


def _tree(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in folder.rglob("*")
        if p.is_file()
    }


def test_a_bad_task_spec_is_one_line_on_stderr_and_leaves_the_project_as_it_was(
    spec_file: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "issues.json"
    broken.write_text('[\n  {"number": 1, "title": "Add"}\n  {"number": 2, "title": "List"}\n]\n')
    checked = tmp_path / "todo.md"
    checked.write_text("# Todo\n\n- [x] Add a task\n- [x] List the tasks\n")
    for spec, said in (
        (
            broken,
            f"error: spec {broken} does not parse as JSON (Expecting ',' delimiter at line 3, column 3)",
        ),
        (checked, f"error: spec {checked}: every task of its list is checked (done)"),
    ):
        new = invoke("--project-dir", "fresh", "--spec", str(spec))
        assert new.exit_code == 2 and new.stdout == "", new.output
        assert new.stderr.startswith(said) and len(new.stderr.strip().splitlines()) == 1, new.stderr
        assert not resolve_project("fresh").exists()
    assert invoke("--project-dir", "app", "--spec", str(spec_file), "--max-iterations", "1").exit_code == 3
    project = resolve_project("app")
    before = _tree(project)
    for args in (("--spec", str(broken)), ("--spec", str(checked), "--dry-run")):
        result = invoke("--project-dir", "app", *args)
        assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.output
        assert _tree(project) == before


def test_a_task_list_spec_is_taken_and_kept(tmp_path: Path) -> None:
    spec = tmp_path / "issues.json"
    spec.write_text(json.dumps([{"number": 4, "title": "Add a task", "body": "", "labels": []}]))
    result = invoke("--project-dir", "app", "--spec", str(spec), "--max-iterations", "1")
    assert result.exit_code == 3, result.output
    assert (resolve_project("app") / "app_spec.txt").read_bytes() == spec.read_bytes()


def test_a_newer_spec_that_cannot_be_planned_ends_the_run_halted_and_the_next_run_plans_it(
    spec_file: Path, tmp_path: Path
) -> None:
    assert invoke("--project-dir", "app", "--spec", str(spec_file)).exit_code == 0
    project = resolve_project("app")
    longer = tmp_path / "longer.txt"
    longer.write_text(spec_file.read_text() + "- `count [--all]`: print how many open tasks there are.\n")
    broken = [{"session": n, "kind": "invalid_json", "file": "feature_list.json"} for n in range(1, 40)]
    failed = invoke("--project-dir", "app", "--spec", str(longer), scenario={"features": 2, "faults": broken})
    assert failed.exit_code == 1, failed.output
    assert (
        "the spec's version 2 could not be planned into features (the INITIALIZER gave up:" in failed.output
    )
    assert "the features listed before it are done" in failed.output
    assert [f["id"] for f in json.loads((project / "feature_list.json").read_text())["features"]] == [
        "F001",
        "F002",
    ]
    assert specs.unplanned(project) is not None
    again = invoke("--project-dir", "app", "--spec", str(longer))
    assert again.exit_code == 0, again.output
    listed = json.loads((project / "feature_list.json").read_text())["features"]
    assert [f["id"] for f in listed] == ["F001", "F002", "F007"] and all(f["passes"] for f in listed)
    assert specs.unplanned(project) is None


def test_a_repository_with_code_and_no_spec_is_refused_in_one_line_and_left_as_it_was(tmp_path: Path) -> None:
    project = resolve_project("mine")
    project.mkdir(parents=True)
    (project / "app.py").write_text("print('mine')\n")
    git = ["git", "-C", str(project), "-c", "user.name=me", "-c", "user.email=me@x"]
    for command in (["init", "-q"], ["add", "app.py"], ["commit", "-qm", "mine"]):
        subprocess.run([*git, *command], check=True, capture_output=True)
    result = invoke("--project-dir", "mine")
    assert result.exit_code == 2
    assert "is a repository with code of its own and no app_spec.txt: give --spec FILE" in result.output
    assert sorted(p.name for p in project.iterdir()) == [".git", "app.py"]


def test_the_dry_run_of_a_built_project_given_a_newer_spec_shows_the_planning_session(
    spec_file: Path, tmp_path: Path
) -> None:
    assert invoke("--project-dir", "app", "--spec", str(spec_file)).exit_code == 0
    assert "Nothing to run" in invoke("--project-dir", "app", "--dry-run").output
    longer = tmp_path / "longer.txt"
    longer.write_text(spec_file.read_text() + "- `count`: print how many tasks there are.\n")
    shown = invoke("--project-dir", "app", "--spec", str(longer), "--dry-run")
    assert shown.exit_code == 0, shown.output
    assert "A newer spec waits to be planned" in shown.output and "Next session: INITIALIZER" in shown.output
    assert "initializer_extend_prompt.md" in shown.output and "Commit nothing." in shown.output
    assert (resolve_project("app") / "app_spec.txt").read_text() == spec_file.read_text()  # nothing written
