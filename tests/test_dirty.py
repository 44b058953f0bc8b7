"""A dirty or hand-edited project never stops the run: work is set aside (and said where),
a missing hand-off file comes back from its newest copy, `passes` is what the scheduler verified."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import cli_seams
from test_lifecycle import CFG, EXPECTED, LIFECYCLE, SPEC, git, new_project, run, sessions

from session_scheduler.view.cli import main


def test_an_existing_repository_with_uncommitted_work_keeps_it_and_the_spec(tmp_path: Path) -> None:
    project = tmp_path / "existing"
    project.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "trunk", str(project)], check=True)
    (project / "notes.md").write_text("mine\n")
    git(project, "add", "notes.md")
    git(project, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-q", "-m", "my notes")
    (project / "notes.md").write_text("mine, edited\n")  # uncommitted work
    (project / "scratch.txt").write_text("untracked\n")  # a stray file
    (project / "app_spec.txt").write_text(SPEC.read_text())  # placed by the CLI, not yet committed
    report, _, lines = run(project, LIFECYCLE)
    assert report.status == "done"
    assert git(project, "show", "main:app_spec.txt") == SPEC.read_text()
    note = next(line for line in lines if "set aside: uncommitted work is kept as stash@{0}" in line)
    assert (
        "`git stash show -p --include-untracked stash@{0}` shows it, `git stash pop stash@{0}` brings it back"
        in note
    )
    # the stash holds the person's work only: it pops back cleanly beside the scheduler's files
    stashed = git(project, "stash", "show", "--include-untracked", "--name-only", "stash@{0}").split()
    assert sorted(stashed) == ["notes.md", "scratch.txt"]
    git(project, "checkout", "-q", "trunk")
    git(project, "stash", "pop", "-q", "stash@{0}")
    assert (project / "notes.md").read_text() == "mine, edited\n" and (project / "scratch.txt").exists()


def test_passes_set_by_hand_are_set_back(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    run(project, LIFECYCLE, max_iterations=2)
    path = project / "feature_list.json"
    data = json.loads(path.read_text())
    for feature in data["features"]:
        feature["passes"] = True
    path.write_text(json.dumps(data))
    report, _, lines = run(project, LIFECYCLE, max_iterations=1)
    assert any(
        "WARNING: `passes` of F001, F002, F003 in feature_list.json did not match" in line for line in lines
    ), lines
    assert report.state.backlog.passing == frozenset()
    report, _, _ = run(project, LIFECYCLE)
    assert report.status == "done"
    assert all(
        f["passes"] is (f["id"] in report.state.backlog.passing)
        for f in json.loads(path.read_text())["features"]
    )


def test_a_missing_handoff_file_comes_back_from_its_newest_copy(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    run(project, LIFECYCLE, max_iterations=3)
    kept = json.loads((project / "reviews.json").read_text())
    (project / "reviews.json").unlink()
    report, _, lines = run(project, LIFECYCLE, max_iterations=1)
    assert any(
        "WARNING: reviews.json was missing; restored from .agent_logs/restore/post/reviews.json" in line
        for line in lines
    ), lines
    assert (
        json.loads((project / "reviews.json").read_text())["reviews"][: len(kept["reviews"])]
        == kept["reviews"]
    )
    assert report.status == "limit"


@pytest.mark.parametrize("where", [".", "/", "HERE"])
def test_the_project_folder_cannot_hold_the_other_projects_or_the_scheduler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    monkeypatch.setenv("AGENT_GENERATIONS_DIR", str(tmp_path / "generations"))
    folder = str(Path(__file__).resolve().parents[1]) if where == "HERE" else where
    result = CliRunner().invoke(main, ["--project-dir", folder], obj=cli_seams(lambda _: None))  # type: ignore[arg-type,return-value]
    assert result.exit_code == 2
    assert "give the project a folder of its own, for example --project-dir my_app" in result.output
    assert not (tmp_path / "generations" / ".git").exists()
    assert CFG.max_attempts == 3


def test_a_project_cleaned_with_git_clean_stops_with_one_line_instead_of_starting_over(
    tmp_path: Path,
) -> None:
    from session_scheduler.core.errors import StateError

    project = new_project(tmp_path)
    run(project, LIFECYCLE, max_iterations=3)
    subprocess.run(["git", "clean", "-xfdq"], cwd=project, check=True)
    main_before = git(project, "rev-parse", "main")
    with pytest.raises(
        StateError, match=r"the hand-off files are gone, but main has \d+ commits? of earlier sessions"
    ):
        run(project, LIFECYCLE)
    assert git(project, "rev-parse", "main") == main_before
    assert not (project / ".agent_logs").exists()


def test_a_person_s_branch_named_as_a_work_branch_is_set_aside_not_taken_over(tmp_path: Path) -> None:
    project = new_project(tmp_path)
    subprocess.run(["git", "init", "-q", "-b", "main", str(project)], check=True)
    (project / "old.txt").write_text("an old attempt\n")
    git(project, "add", "old.txt")
    git(project, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-q", "-m", "mine")
    git(project, "branch", "feature/F001")  # the person's, older than any session
    git(project, "branch", "arch/7")
    git(project, "branch", "featureless")
    old = git(project, "rev-parse", "feature/F001").strip()
    report, _, lines = run(project, LIFECYCLE)
    assert report.status == "done"
    assert git(project, "rev-parse", "refs/scheduler/preexisting/feature/F001").strip() == old
    assert git(project, "rev-parse", "refs/scheduler/preexisting/arch/7").strip() == old
    assert git(project, "rev-parse", "featureless").strip() == old  # not in the scheduler's namespace
    assert any(
        "set aside: your branch feature/F001" in line and "refs/scheduler/preexisting/feature/F001" in line
        for line in lines
    ), lines
    assert sessions(project) == EXPECTED  # the run went as on a new repository
    again, _, lines = run(project, LIFECYCLE)  # a later run sets nothing aside
    assert again.status == "done" and not any("set aside" in line for line in lines)
