"""Claims checked at the call, through the real CLI against the scripted model: a hand-off tool that
refuses a claim answers with the reason, and the robot, reading it as a model would, corrects the
call within the same session. One small run holds the three faults: the INITIALIZER's first feature
list has a feature that depends on itself (check_feature_list says so), the IMPLEMENT's outcome is
`READY FOR REVIEW` (append_session names READY_FOR_REVIEW), and the REVIEW's first PASS leaves a
step ungraded (record_review names it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_e2e import IMPL, INIT, REVIEW, Run, full_run, load_json, progress_entries, sequence, session_dir

from session_scheduler.store.handoff_tools import PREFIX

pytestmark = pytest.mark.e2e

SCENARIO: dict[str, Any] = {
    "description": "each claim refused once at the call and corrected in the same session",
    "features": 1,
    "faults": [
        {"session": 1, "kind": "self_dependent"},
        {"session": 2, "kind": "spaced_outcome"},
        {"session": 3, "kind": "incomplete_pass"},
    ],
}


@pytest.fixture(scope="module")
def corrected(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return full_run(tmp_path_factory.mktemp("claims"), SCENARIO)


def handoff_calls(project: Path, number: int) -> list[tuple[str, dict[str, Any], str, bool]]:
    """The session's hand-off tool calls as its transcript has them: (tool, input, answer, is_error)."""
    asked: dict[str, tuple[str, dict[str, Any]]] = {}
    made = []
    for line in (session_dir(project, number) / "transcript.jsonl").read_text().splitlines():
        blocks = json.loads(line).get("content")
        for block in blocks if isinstance(blocks, list) else []:
            if str(block.get("name", "")).startswith(PREFIX):
                asked[block["id"]] = (block["name"].removeprefix(PREFIX), block["input"])
            elif block.get("tool_use_id") in asked:
                content = block.get("content")
                text = content if isinstance(content, str) else "".join(c.get("text", "") for c in content)
                made.append((*asked[block["tool_use_id"]], text, bool(block.get("is_error"))))
    return made


def test_each_refused_claim_is_corrected_in_its_own_session(corrected: Run) -> None:
    project = corrected.project
    assert sequence(project) == [INIT, IMPL, REVIEW]  # no session failed, none ran twice
    assert load_json(project / ".agent_state.json")["backlog"]["passing"] == ["F001"]

    checks = [
        (answer, error)
        for tool, _, answer, error in handoff_calls(project, 1)
        if tool == "check_feature_list"
    ]
    assert [error for _, error in checks] == [False, False]
    assert (
        "F001 depends on itself" in checks[0][0] and checks[1][0] == "feature_list.json is valid: 1 features"
    )
    assert "depends_on" not in load_json(project / "feature_list.json")["features"][0]

    entries = [
        (args["outcome"], error)
        for tool, args, _, error in handoff_calls(project, 2)
        if tool == "append_session"
    ]
    assert entries == [("READY FOR REVIEW", True), ("READY_FOR_REVIEW", False)]
    assert [(e["session_id"], e["outcome"]) for e in progress_entries(project)] == [
        (1, "INITIALIZED"),
        (2, "READY_FOR_REVIEW"),
        (3, "REVIEWED"),
    ]

    reviews = [
        (args, answer, error)
        for tool, args, answer, error in handoff_calls(project, 3)
        if tool == "record_review"
    ]
    assert [(len(args["acceptance"]), error) for args, _, error in reviews] == [(1, True), (2, False)]
    assert reviews[0][1].startswith(
        "refused, nothing was written: a PASS must grade every acceptance step: no result for step(s) 2"
    )
    (recorded,) = load_json(project / "reviews.json")["reviews"]
    assert recorded["verdict"] == "PASS" and [r["step"] for r in recorded["acceptance"]] == [1, 2]
