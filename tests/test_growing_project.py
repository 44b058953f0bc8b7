"""End-to-end: a project that grows (issue 32), through the real CLI on the offline demo.

A built project is given the same command with an amended spec: the run records the spec's new
version, a planning session (the INITIALIZER's extend form) appends the new features after the
list, and they are built in lanes through the queue, the old features untouched. A spec that only
takes text away is refused in one line and changes nothing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from test_e2e import command, explain, product_env, run, write_scenario

from session_scheduler.run.prompts import EXAMPLE_SPEC
from session_scheduler.store import events, specs

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("bwrap") is None, reason="no bubblewrap")]

ADDED = (
    "- `count [--all]`: print how many open tasks there are; `--all` counts done ones too.\n"
    "- `clear`: delete every done task and print how many it deleted.\n"
)


def git(project: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=project, capture_output=True, text=True, timeout=60, check=False
    ).stdout.strip()


def amended(tmp_path: Path) -> Path:
    """The example spec with two more commands in its command list."""
    text = EXAMPLE_SPEC.read_text(encoding="utf-8")
    anchor = "- `stats`:"
    assert anchor in text
    spec = tmp_path / "spec2.txt"
    spec.write_text(text.replace(anchor, ADDED + anchor), encoding="utf-8")
    return spec


def test_a_built_project_gets_an_amended_spec_and_builds_the_new_features_on_top(tmp_path: Path) -> None:
    project = tmp_path / "generations" / "todo"
    scenario = write_scenario(tmp_path / "scenario.json", {"features": 2})
    env = product_env(tmp_path)
    first = run(command(project, "--offline-demo", "--scenario", str(scenario)), env)
    assert first.returncode == 0, explain(first)
    before = json.loads((project / "feature_list.json").read_text())["features"]
    assert [f["id"] for f in before] == ["F001", "F002"] and all(f["passes"] for f in before)
    built = git(project, "rev-parse", "main")

    # a spec that only takes text away: one line, exit 2, nothing changed
    only_removed = tmp_path / "only_removed.txt"
    only_removed.write_text(
        "".join(
            line for line in EXAMPLE_SPEC.read_text(encoding="utf-8").splitlines(True) if "stats" not in line
        ),
        encoding="utf-8",
    )

    spec_before = (project / "app_spec.txt").read_bytes()
    history_before = (project / ".agent_logs" / "specs" / "specs.json").read_bytes()
    refused = run(command(project, "--offline-demo", "--spec", str(only_removed)), env)
    assert refused.returncode == 2, explain(refused)
    assert "only takes text away" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    assert (project / "app_spec.txt").read_bytes() == spec_before
    assert (project / ".agent_logs" / "specs" / "specs.json").read_bytes() == history_before
    assert git(project, "rev-parse", "main") == built

    # the amended spec: planned first, then built on top of what was built
    grown = run(command(project, "--offline-demo", "--spec", str(amended(tmp_path)), "--lanes", "2"), env)
    assert grown.returncode == 0, explain(grown)
    assert "The spec has a new version (2): its features are planned first" in grown.stdout
    after = json.loads((project / "feature_list.json").read_text())["features"]
    assert [f["id"] for f in after] == ["F001", "F002", "F007", "F008"]
    assert after[:2] == before  # the built features exactly as they were
    assert all(f["passes"] for f in after)
    assert git(project, "merge-base", "--is-ancestor", built, "main") == ""
    assert git(project, "diff", "--stat", built, "main", "--", "todo/cmd_add.py", "todo/cmd_list.py") == ""
    versions = specs.history(project)
    assert [v.number for v in versions] == [1, 2] and all(v.planned_in for v in versions)
    assert (project / ".agent_logs" / "specs" / "v2.txt").read_text() == amended(tmp_path).read_text()
    log = events.read(events.log_path(project))
    listed = [e for e in log if e["kind"] == "features_listed"]
    assert [e.get("added") for e in listed] == [None, ["F007", "F008"]]
    planning = [e for e in log if e["kind"] == "session_started" and e["role"] == "INITIALIZER"]
    assert len(planning) == 2
    assert git(project, "show", "main:app_spec.txt") == amended(tmp_path).read_text().strip()

    shown = run([*command(project)[:2], "status", "--project-dir", str(project)], env)
    assert "spec: version 2 (added " in shown.stdout and "planned in session" in shown.stdout, shown.stdout
    # the same command again: nothing new to plan, nothing runs
    again = run(command(project, "--offline-demo", "--spec", str(amended(tmp_path))), env)
    assert again.returncode == 0, explain(again)
    assert len([e for e in events.read(events.log_path(project)) if e["kind"] == "session_started"]) == len(
        [e for e in log if e["kind"] == "session_started"]
    )


TASK_LIST = """# todo: the tasks

- [x] Set up the repository
- [ ] `add TITLE [--due DATE]`: add a task and print its id
  An empty title is an error.
- [ ] `list [--all]`: print the open tasks, one per line
"""
EXPORT = [
    {
        "number": 12,
        "title": "`add TITLE` should add a task",
        "body": "Print its id.",
        "labels": [{"name": "cli"}],
    },
    {"number": 15, "title": "`list` prints the open tasks", "body": "", "labels": []},
]


@pytest.mark.parametrize(
    ("name", "text", "refs"),
    [("tasks.md", TASK_LIST, ["task 2", "task 3"]), ("issues.json", json.dumps(EXPORT), ["#12", "#15"])],
)
def test_a_task_list_and_an_issues_export_each_become_features_that_name_their_task(
    tmp_path: Path, name: str, text: str, refs: list[str]
) -> None:
    project = tmp_path / "generations" / "todo"
    spec = tmp_path / name
    spec.write_text(text, encoding="utf-8")
    scenario = write_scenario(tmp_path / "scenario.json", {"features": 3})
    env = product_env(tmp_path)
    night = run(command(project, "--offline-demo", "--scenario", str(scenario), "--spec", str(spec)), env)
    assert night.returncode == 0, explain(night)
    features = json.loads((project / "feature_list.json").read_text())["features"]
    assert [f.get("task") for f in features] == [None, *refs]  # the storage foundation closes no task
    assert all(f["passes"] for f in features)
    proof = (project / ".agent_logs" / "proofs" / "F002.md").read_text()
    assert f"Closes: {refs[0]}" in proof


@pytest.mark.parametrize(
    ("name", "text", "said"),
    [
        ("issues.json", '[{"number": 1, "title": "a"', "does not parse as JSON"),
        ("issues.json", "[]", "is an empty issues export"),
        ("tasks.md", "# tasks\n- [x] done already\n", "every task of its list is checked"),
    ],
)
def test_a_task_spec_that_cannot_be_used_is_one_line_and_changes_nothing(
    tmp_path: Path, name: str, text: str, said: str
) -> None:
    project = tmp_path / "generations" / "todo"
    spec = tmp_path / name
    spec.write_text(text, encoding="utf-8")
    refused = run(command(project, "--offline-demo", "--spec", str(spec)), product_env(tmp_path))
    assert refused.returncode == 2, explain(refused)
    assert said in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    assert not project.exists()
