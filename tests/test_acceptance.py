"""Acceptance steps: every rule of `acceptance.problems` fires, the review schema takes old and new
reviews, and the robot's REVIEW runs each step and fails the one a seeded bug breaks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scripted_model import demo_app, robot
from scripted_model.scenario import Scenario
from session_scheduler.core.acceptance import problems
from session_scheduler.core.config import AgentConfig
from session_scheduler.core.schemas import REVIEWS, schema_error
from session_scheduler.run.lanes import Lanes
from session_scheduler.testing.inprocess import InProcessRobotRunner

STEPS = ["Run `todo add milk` -> prints `1`", "Run `todo list` -> prints `1 milk`"]
NO_ISSUES: dict[str, list[str]] = {"critical": [], "major": [], "minor": []}


def graded(*passed: bool, evidence: str = "printed it") -> list[dict[str, Any]]:
    return [{"step": n, "passed": ok, "evidence": evidence} for n, ok in enumerate(passed, 1)]


def test_a_pass_with_every_step_passed_and_evidenced_holds() -> None:
    assert problems(STEPS, "PASS", graded(True, True), NO_ISSUES) == []


def test_a_pass_without_results_names_every_step_missing() -> None:
    (problem,) = problems(STEPS, "PASS", None, NO_ISSUES)
    assert "no result for step(s) 1, 2" in problem and "acceptance=" in problem


def test_a_pass_with_one_step_missing_names_it() -> None:
    (problem,) = problems(STEPS, "PASS", graded(True), NO_ISSUES)
    assert "no result for step(s) 2" in problem


def test_a_pass_with_a_failed_step_is_refused() -> None:
    assert problems(STEPS, "PASS", graded(True, False), NO_ISSUES) == [
        "a PASS with failed acceptance step(s) 2: the verdict is REQUEST_CHANGES"
    ]


def test_a_passed_step_without_evidence_is_refused() -> None:
    results = [*graded(True), {"step": 2, "passed": True, "evidence": "  "}]
    (problem,) = problems(STEPS, "PASS", results, NO_ISSUES)
    assert "a passed step needs its evidence" in problem and "step(s) 2" in problem


@pytest.mark.parametrize("step", [0, 3, "1"])
def test_a_result_naming_a_step_that_does_not_exist_is_refused(step: Any) -> None:
    results = [*graded(True, True), {"step": step, "passed": False, "evidence": "x"}]
    assert problems(STEPS, "REJECT", results, NO_ISSUES) == [
        f"acceptance names step {step}, but the feature has 2 step(s) (numbered from 1)"
    ]


def test_a_request_changes_needs_the_results_too() -> None:
    (problem,) = problems(STEPS, "REQUEST_CHANGES", [], {"critical": [], "major": ["x"], "minor": []})
    assert problem.startswith("a REQUEST_CHANGES must grade every acceptance step")


def test_a_request_changes_needs_a_failed_step_or_an_issue() -> None:
    assert problems(STEPS, "REQUEST_CHANGES", graded(True, True), NO_ISSUES) == [
        "a REQUEST_CHANGES names what to change: a failed acceptance step or an issue"
    ]
    assert problems(STEPS, "REQUEST_CHANGES", graded(True, False), NO_ISSUES) == []
    assert problems(STEPS, "REQUEST_CHANGES", graded(True, True), {"minor": ["rename x"]}) == []


def test_a_reject_and_a_feature_without_steps_need_no_results() -> None:
    assert problems(STEPS, "REJECT", None, NO_ISSUES) == []
    assert problems([], "PASS", None, NO_ISSUES) == []
    assert problems([], "PASS", graded(True), NO_ISSUES) == [
        "acceptance names step 1, but the feature has 0 step(s) (numbered from 1)"
    ]


def review(**extra: Any) -> dict[str, Any]:
    return {
        "reviews": [
            {"review_id": 1, "feature_id": "F001", "kind": "feature", "verdict": "PASS", "issues": NO_ISSUES}
            | extra
        ],
        "fixes": [],
    }


def test_the_review_schema_takes_reviews_with_and_without_acceptance() -> None:
    assert schema_error(review(), REVIEWS) is None
    assert schema_error(review(acceptance=graded(True, False)), REVIEWS) is None
    assert "is not of type 'integer'" in str(
        schema_error(review(acceptance=[{"step": "1", "passed": True, "evidence": ""}]), REVIEWS)
    )
    assert "'evidence' is a required property" in str(
        schema_error(review(acceptance=[{"step": 1, "passed": True}]), REVIEWS)
    )


def test_every_demo_step_is_in_the_documented_form() -> None:
    for item in demo_app.FEATURES:
        assert 1 <= len(item.steps) <= 6, item.id
        assert all(robot._STEP.match(step) for step in item.steps), item.id


def test_the_robots_review_fails_the_step_a_seeded_bug_breaks(tmp_path: Path) -> None:
    project = tmp_path / "app"
    project.mkdir()
    spec = Path(__file__).resolve().parent.parent / "session_scheduler" / "prompts" / "app_spec.txt"
    (project / "app_spec.txt").write_text(spec.read_text())
    runner = InProcessRobotRunner(Scenario.from_json({"features": 3, "buggy": ["F003"]}))
    config = AgentConfig(feature_count=3, test_command="bash init.sh")
    report = Lanes(project, config, runner, echo=lambda _: None).run().run
    assert report.status == "done", report.message
    reviews = {r["review_id"]: r for r in json.loads((project / "reviews.json").read_text())["reviews"]}
    first, second = [r for r in reviews.values() if r["feature_id"] == "F003"]
    assert first["verdict"] == "REQUEST_CHANGES"
    assert [r["passed"] for r in first["acceptance"]] == [False, False]
    assert first["acceptance"][0]["evidence"] == "printed `3 tea`, not `3 [ ] tea`"
    assert second["verdict"] == "PASS" and all(r["passed"] for r in second["acceptance"])
    f001 = next(r for r in reviews.values() if r["feature_id"] == "F001")
    assert [r["evidence"] for r in f001["acceptance"]] == [
        "printed `milk`",
        "printed `ValueError: tasks.json is corrupt: Expecting value`",
    ]
