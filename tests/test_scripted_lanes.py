"""The scripted model's larger scenarios with the in-process robot: 16 features, a conflicting
pair, a pair that is red only together (issue 19, section 8)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from scripted_model import demo_app
from scripted_model.scenario import Scenario
from session_scheduler.core.config import AgentConfig
from session_scheduler.run.lanes import Lanes, LanesReport
from session_scheduler.store import events
from session_scheduler.testing.inprocess import InProcessRobotRunner

SPEC = Path(__file__).resolve().parent.parent / "session_scheduler" / "prompts" / "app_spec.txt"
AFTER_F001 = {"F002": ["F001"], "F003": ["F001"]}
LATENCY = 0.2
"""Seconds per model turn: the pair, started together once F001 lands, is reviewed side by side,
so both are approved before either lands (a REVIEW is several turns; a landing is not)."""


def config(features: int) -> AgentConfig:
    return AgentConfig(
        architecture_interval=100, feature_count=features, test_command="bash init.sh", sandbox=False
    )


def new_project(tmp_path: Path) -> Path:
    project = tmp_path / "app"
    project.mkdir()
    (project / "app_spec.txt").write_text(SPEC.read_text())
    return project


def git(project: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=project, capture_output=True, text=True, check=True).stdout


def lanes(tmp_path: Path, scenario: dict[str, Any]) -> tuple[Path, LanesReport, list[dict[str, Any]]]:
    project = new_project(tmp_path)
    runner = InProcessRobotRunner(Scenario.from_json(scenario))
    report = Lanes(project, config(scenario["features"]), runner, 2, echo=lambda _: None).run()
    return project, report, events.read(events.log_path(project))


def assert_built(project: Path, ids: list[str]) -> None:
    """Every feature passes, each merged once, and the project's own tests pass on main."""
    features = json.loads((project / "feature_list.json").read_text())["features"]
    assert [f["id"] for f in features] == ids and all(f["passes"] for f in features)
    merges = git(project, "log", "--merges", "--first-parent", "--format=%s", "main").splitlines()
    merged = [m.split()[1].removeprefix("feature/") for m in merges if m.startswith("Merge feature/")]
    assert sorted(merged) == ids  # each once (the lanes' queue and the one lane's REVIEW name them alike)
    tests = subprocess.run(["bash", "init.sh"], cwd=project, capture_output=True, text=True, check=False)
    assert tests.returncode == 0, tests.stdout + tests.stderr


def test_the_scenario_takes_the_catalogue_then_notes_and_names_its_clashes() -> None:
    assert len(demo_app.FEATURES) == 16 and len({f.id for f in demo_app.FEATURES}) == 16
    assert [f.id for f in demo_app.FEATURES[:6]] == ["F001", "F002", "F003", "F004", "F005", "F006"]
    modules = [p for f in demo_app.FEATURES for p in f.files if p.startswith("todo/")]
    assert len(modules) == len(set(modules)) == 16  # one module each: branches merge cleanly
    scenario = Scenario.from_json(
        {"features": 16, "conflicts": [["F003", "F004", "F005"]], "red_together": [["F006", "F007"]]}
    )
    assert scenario.features == 16 and scenario.conflicting("F004") and not scenario.conflicting("F006")
    assert (scenario.red_part("F006"), scenario.red_part("F007"), scenario.red_part("F003")) == (
        "rewords",
        "pins",
        None,
    )
    assert Scenario().conflicts == () and Scenario().red_together == ()  # the default: no clashes
    assert Scenario.from_json({"features": 64}).features == 64  # past the catalogue: notes
    assert demo_app.feature("F017").files == {"notes/F017.md": "# F017\n\nDone by the scripted agent.\n"}
    for bad in (
        {"features": 129},
        {"features": 17, "web_features": 1},  # the web features' ids come after the catalogue
        {"conflicts": [["F002"]]},
        {"conflicts": [["F002", "F002"]]},
        {"red_together": [["F002", "F003", "F004"]]},
        {"red_together": [["F002", "F003"], ["F003", "F004"]]},
    ):
        with pytest.raises(ValueError, match="scenario is invalid"):
            Scenario.from_json(bad)


def test_a_conflict_is_resolved_by_keeping_both_sides_lines() -> None:
    text = "# todo\n<<<<<<< HEAD\n- F003: mine\n||||||| base\n=======\n- F002: theirs\n>>>>>>> main\n"
    assert demo_app.resolve_union(text) == "# todo\n- F003: mine\n- F002: theirs\n"
    same = "a\n<<<<<<< HEAD\nx\n=======\nx\ny\n>>>>>>> main\nz\n"
    assert demo_app.resolve_union(same) == "a\nx\ny\nz\n"


def test_a_conflicting_pair_lands_both_after_one_send_back_for_the_conflict(tmp_path: Path) -> None:
    """F002 and F003 each add their line at the end of README.md, built side by side: the second
    to land conflicts there, goes back to a lane whose FIX merges main and keeps both lines,
    is reviewed again and lands."""
    scenario = {
        "features": 3,
        "depends": AFTER_F001,
        "conflicts": [["F002", "F003"]],
        "turn_latency_s": LATENCY,
    }
    project, report, log = lanes(tmp_path, scenario)
    assert report.landed[0] == "F001" and sorted(report.landed) == ["F001", "F002", "F003"]
    (back,) = [e for e in log if e["kind"] == "sent_back"]
    assert back["why"] == "conflict" and report.sent_back == (back["feature"],)
    assert report.schedule.backlog.rejection_count(back["feature"]) == 0  # a conflict is no rejection
    first = next(f for f in report.landed[1:] if f != back["feature"])
    review = next(
        r
        for r in json.loads((project / "reviews.json").read_text())["reviews"]
        if r["review_id"] == back["review_id"]
    )
    assert "conflicts in README.md" in review["issues"]["critical"][0]
    readme = (project / "README.md").read_text()
    for feature_id in ("F002", "F003"):
        assert readme.count(demo_app.readme_line(demo_app.feature(feature_id))) == 1  # both kept, once
    assert "<<<<<<<" not in readme and ">>>>>>>" not in readme
    fixes = [e for e in log if e["kind"] == "session_started" and e["role"] == "FIX"]
    assert [e["feature"] for e in fixes] == [back["feature"]]
    landed = [e["feature"] for e in log if e["kind"] == "merge_verified"]
    assert landed.index(first) < landed.index(back["feature"])
    assert_built(project, ["F001", "F002", "F003"])


def test_a_pair_red_only_together_lands_both_after_one_send_back_for_the_tests(tmp_path: Path) -> None:
    """F002 rewords the usage message, F003's test pins it: each is green on its branch and the
    first to land is green on main; the second's merge is red, goes back, and its FIX (after
    merging main) makes it green."""
    scenario = {
        "features": 3,
        "depends": AFTER_F001,
        "red_together": [["F002", "F003"]],
        "turn_latency_s": LATENCY,
    }
    project, report, log = lanes(tmp_path, scenario)
    assert sorted(report.landed) == ["F001", "F002", "F003"]
    (back,) = [e for e in log if e["kind"] == "sent_back"]
    assert back["why"] == "tests" and report.sent_back == (back["feature"],)
    assert report.schedule.backlog.rejection_count(back["feature"]) == 1  # a red test is one
    kinds = [(e["kind"], e.get("feature")) for e in log if e["kind"] in ("merge_verified", "sent_back")]
    first = next(f for f in ("F002", "F003") if f != back["feature"])
    assert kinds.index(("merge_verified", first)) < kinds.index(("sent_back", back["feature"]))
    verified = {e["feature"]: e for e in log if e["kind"] == "merge_verified"}
    assert verified[first]["tests"] in ("passed", "passed on the review's merge")  # green on main alone
    review = next(
        r
        for r in json.loads((project / "reviews.json").read_text())["reviews"]
        if r["review_id"] == back["review_id"]
    )
    assert "the tests fail on main with this branch merged" in review["issues"]["critical"][0]
    assert "test_usage_message_is_the_documented_one" in review["scheduler_findings"][0]
    fixes = [e for e in log if e["kind"] == "session_started" and e["role"] == "FIX"]
    assert [e["feature"] for e in fixes] == [back["feature"]]
    assert_built(project, ["F001", "F002", "F003"])


def test_sixteen_features_pass_with_one_lane(tmp_path: Path) -> None:
    """The INITIALIZER lists all 16 of the catalogue; the one-lane scheduler builds them all."""
    project = new_project(tmp_path)
    ids = [f"F{n:03d}" for n in range(1, 17)]
    Lanes(
        project, config(16), InProcessRobotRunner(Scenario.from_json({"features": 16})), echo=lambda _: None
    ).run()
    assert_built(project, ids)
    for item in demo_app.FEATURES:
        for path in item.files:
            assert (project / path).read_text() == item.files[path]


def test_a_review_whose_merge_conflicts_sends_the_feature_back_and_its_fix_resolves_it(
    tmp_path: Path,
) -> None:
    """F003's first review asks for changes, so F002 lands while F003 is fixed: F003's next REVIEW
    merges onto a `main` that has F002's README line and conflicts (or, if F002 lands later, the
    merge queue finds the conflict): either way a review says where it conflicts, the FIX merges
    main and keeps both lines, and both land."""
    scenario = {
        "features": 3,
        "depends": AFTER_F001,
        "conflicts": [["F002", "F003"]],
        "reviews": {"F003": ["REQUEST_CHANGES", "PASS"]},
        "turn_latency_s": LATENCY,
    }
    project, report, log = lanes(tmp_path, scenario)
    assert sorted(report.landed) == ["F001", "F002", "F003"] and report.landed[-1] == "F003"
    reviews = json.loads((project / "reviews.json").read_text())["reviews"]
    conflicted = [r for r in reviews if any("conflicts in README.md" in i for i in r["issues"]["critical"])]
    assert [r["feature_id"] for r in conflicted] == ["F003"]
    assert all(e["why"] == "conflict" for e in log if e["kind"] == "sent_back")
    readme = (project / "README.md").read_text()
    assert all(readme.count(demo_app.readme_line(demo_app.feature(f))) == 1 for f in ("F002", "F003"))
    assert_built(project, ["F001", "F002", "F003"])


def test_web_features_are_reviewed_in_the_browser_in_two_lanes(tmp_path: Path) -> None:
    """Each lane's web REVIEW gets the app of its own clone's branch and a browser of its own
    (boxed, sandbox on for the boxes); the dead Add button is found and fixed; every PASS cites
    its evidence (verified in the lane, against the lane's session folder)."""
    from helpers import require_boxed_browser

    require_boxed_browser()
    project = new_project(tmp_path)
    scenario = Scenario.from_json({"features": 1, "web_features": 2, "buggy": ["F017"]})
    boxed = AgentConfig(architecture_interval=100, feature_count=1, test_command="bash init.sh")
    report = Lanes(project, boxed, InProcessRobotRunner(scenario), 2, echo=lambda _: None).run()
    assert sorted(report.landed) == ["F001", "F017", "F018"], report.run
    assert_built(project, ["F001", "F017", "F018"])
    log = events.read(events.log_path(project))
    verdicts = [(e["feature"], e["verdict"]) for e in log if e["kind"] == "verdict"]
    assert ("F017", "REQUEST_CHANGES") in verdicts and ("F018", "PASS") in verdicts, verdicts
    ledgers = sorted(project.glob(".agent_logs/session_*_REVIEW/browser.jsonl"))
    assert len(ledgers) == 3, ledgers  # F017 twice, F018 once: F001's REVIEW has no browser
