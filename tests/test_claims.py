"""Claims checked at the call: each refusal of the hand-off tools fires, says what to do, and writes
nothing; check_feature_list answers with the verification's own problems; a session that reports
FAILED is taken at its word."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_brief_and_tools import GRADED, project_with, tools
from test_verify_rules import WEB_STEPS, browsed, implement, refused, start

from session_scheduler.core.config import SessionType
from session_scheduler.core.features import feature_list_problems
from session_scheduler.core.machine import Outcome, feature
from session_scheduler.core.policy import POLICIES, policy
from session_scheduler.run.browsing import evidence_problems
from session_scheduler.store.handoff_tools import SPECS, HandoffTools
from session_scheduler.store.records import records_of

T = SessionType
NOTHING = "refused, nothing was written: "


def written(project: Path) -> tuple[str, str]:
    return (project / "reviews.json").read_text(), (project / "progress.json").read_text()


# -- record_review ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (
            {"verdict": "PASS", "issues": {}, "acceptance": GRADED[:1]},
            "a PASS must grade every acceptance step: no result for step(s) 2; "
            "record_review with acceptance=[{step, passed, evidence}, ...]",
        ),
        (
            {"verdict": "PASS", "issues": {}},
            "a PASS must grade every acceptance step: no result for step(s) 1, 2",
        ),
        (
            {"verdict": "PASS", "issues": {}, "acceptance": [GRADED[0], {**GRADED[1], "evidence": " "}]},
            "a passed step needs its evidence (what was run and seen): none for step(s) 2",
        ),
        (
            {"verdict": "PASS", "issues": {}, "acceptance": [*GRADED, {**GRADED[0], "step": 3}]},
            "acceptance names step 3, but the feature has 2 step(s) (numbered from 1)",
        ),
        (
            {"verdict": "PASS", "issues": {}, "acceptance": [GRADED[0], {**GRADED[1], "passed": False}]},
            "a PASS with failed acceptance step(s) 2: the verdict is REQUEST_CHANGES",
        ),
        (
            {"verdict": "REQUEST_CHANGES", "issues": {}, "acceptance": GRADED},
            "a REQUEST_CHANGES names what to change: a failed acceptance step or an issue",
        ),
    ],
)
def test_record_review_refuses_a_claim_its_steps_do_not_hold(
    tmp_path: Path, args: dict[str, Any], reason: str
) -> None:
    project = project_with(tmp_path)
    before = written(project)
    answer, failed = tools(project, T.REVIEW, work=feature("F00002")).call("record_review", args)
    assert failed and answer.startswith(NOTHING) and reason in answer, answer
    assert answer.endswith("Record the whole review again, corrected.")
    assert written(project) == before


def test_a_second_review_in_one_session_is_refused(tmp_path: Path) -> None:
    project = project_with(tmp_path)
    t = tools(project, T.REVIEW, work=feature("F00002"))
    assert not t.call("record_review", {"verdict": "PASS", "issues": {}, "acceptance": GRADED})[1]
    before = written(project)
    again = {"verdict": "REQUEST_CHANGES", "issues": {"major": ["x"]}, "acceptance": GRADED}
    assert t.call("record_review", again) == (
        NOTHING + "you already recorded review 1 in this session (verdict PASS); a session records "
        "one review: end it with append_session",
        True,
    )
    assert written(project) == before
    arch = tools(project, T.ARCHITECTURE, number=9)
    assert not arch.call("record_review", {"verdict": "PASS", "issues": {}})[1]
    assert "you already recorded review 2" in arch.call("record_review", {"verdict": "PASS", "issues": {}})[0]


def test_a_refused_claim_leaves_the_session_free_to_record_its_review(tmp_path: Path) -> None:
    project = project_with(tmp_path)
    t = tools(project, T.REVIEW, work=feature("F00002"))
    assert t.call("record_review", {"verdict": "PASS", "issues": {}, "acceptance": GRADED[:1]})[1]
    assert t.call("mark_passing", {})[1]  # the refused PASS counts for nothing
    assert not t.call("record_review", {"verdict": "PASS", "issues": {}, "acceptance": GRADED})[1]
    assert t.call("mark_passing", {}) == ("F00002 is marked passing", False)


def web_tools(project: Path, folder: Path) -> HandoffTools:
    records = records_of(project)
    listed = json.loads((project / "feature_list.json").read_text())
    listed["features"][1].update(category="web", steps=list(WEB_STEPS))
    (project / "feature_list.json").write_text(json.dumps(listed))
    return HandoffTools(
        records,
        T.REVIEW,
        5,
        feature("F00002"),
        None,
        "b",
        workdir=project,
        evidence=evidence_problems(folder),
    )


def test_a_web_pass_is_refused_when_its_sessions_ledger_does_not_show_what_it_cites(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    project = project_with(tmp_path / "p")
    folder = tmp_path / "session"
    folder.mkdir()
    t = web_tools(project, folder)
    answer, failed = t.call("record_review", {"verdict": "PASS", "issues": {}, "acceptance": GRADED})
    assert failed and "the browser was not used" in answer, answer  # the ledger is empty
    cited = browsed(folder)
    forged = [{**cited[0], "snapshot": "snapshot-9.yml"}, cited[1]]
    answer, failed = t.call("record_review", {"verdict": "PASS", "issues": {}, "acceptance": forged})
    assert (
        failed
        and "step 1 cites snapshot 'snapshot-9.yml', which this session's browser did not make" in answer
    )
    assert json.loads((project / "reviews.json").read_text())["reviews"] == []
    assert not t.call("record_review", {"verdict": "PASS", "issues": {}, "acceptance": cited})[1]


# -- append_session --------------------------------------------------------------------------------


@pytest.mark.parametrize("role", list(POLICIES))
def test_append_session_takes_only_the_role_s_outcomes_and_shows_them_as_an_enum(
    tmp_path: Path, role: SessionType
) -> None:
    project = project_with(tmp_path)
    rights = policy(role)
    spec = next(s for s in SPECS if s.name == "append_session")
    assert spec.schema_for(rights)["properties"]["outcome"]["enum"] == [rights.done, "FAILED"]
    assert rights.done in spec.description_for(rights)
    t = tools(project, role, open_review=1)
    spaced = rights.done.lower().replace("_", " ")
    assert t.call("append_session", {"outcome": spaced}) == (
        f"{NOTHING}outcome {spaced!r} is not one of {role.value}'s outcomes: use {rights.done} "
        "(your work is done) or FAILED (with the reason in `notes`)",
        True,
    )
    assert json.loads((project / "progress.json").read_text())["sessions"] == []
    assert not t.call("append_session", {"outcome": rights.done})[1]


def test_failed_needs_its_reason(tmp_path: Path) -> None:
    project = project_with(tmp_path)
    t = tools(project, T.IMPLEMENT, work=feature("F00001"))
    assert t.call("append_session", {"outcome": "FAILED", "notes": "  "}) == (
        NOTHING + "FAILED needs the reason in `notes`: what stopped you, what is left",
        True,
    )
    assert not t.call("append_session", {"outcome": "FAILED", "notes": "the spec contradicts itself"})[1]
    assert t.call("append_session", {"outcome": "FAILED", "notes": "again"})[1]  # once per session


# -- check_feature_list ----------------------------------------------------------------------------


def feature_list(**changes: Any) -> dict[str, Any]:
    listed = [
        {"id": "F001", "category": "c", "description": "d", "steps": ["s"], "passes": False},
        {"id": "F002", "category": "c", "description": "e", "steps": ["s"], "passes": False},
    ]
    for index, change in changes.items():
        listed[int(index[1:])].update(change)
    return {"features": listed}


@pytest.mark.parametrize(
    ("listed", "answer"),
    [
        (feature_list(), "feature_list.json is valid: 2 features"),
        (
            feature_list(f0={"depends_on": ["F001"]}),
            "feature_list.json has 1 problem(s):\n- feature_list.json: F001 depends on itself\n"
            "Fix them, then check again.",
        ),
        (
            feature_list(f0={"depends_on": ["F002"]}, f1={"depends_on": ["F001"]}),
            "circle (F001 -> F002 -> F001)",
        ),
        (feature_list(f1={"depends_on": ["F009"]}), "F002 depends on F009, which is not in the list"),
        (feature_list(f1={"id": "F001"}), "duplicate feature IDs: F001"),
        (
            feature_list(f0={"steps": []}, f1={"steps": list("abcdefg")}),
            "F001 has 0 acceptance steps; give it 1 to 6, each one a reviewer can check\n"
            "- feature_list.json: F002 has 7 acceptance steps",
        ),
        (
            feature_list(f0={"id": "one"}, f1={"passes": "no"}),
            "2 problem(s):\n- feature_list.json at features/0/id: 'one' does not match '^F[0-9]+$'\n"
            "- feature_list.json at features/1/passes: 'no' is not of type 'boolean'",
        ),
    ],
)
def test_check_feature_list_answers_with_every_problem_verification_would_find(
    tmp_path: Path, listed: dict[str, Any], answer: str
) -> None:
    workdir = tmp_path / "clone"
    workdir.mkdir()
    (workdir / "feature_list.json").write_text(json.dumps(listed))
    records = records_of(tmp_path)
    t = HandoffTools(records, T.INITIALIZER, 1, None, None, "b", workdir=workdir, evidence=None)
    said, failed = t.call("check_feature_list", {})
    assert not failed and answer in said, said
    if listed["features"][0]["id"] == "F001":  # the schema holds: the very problems verification lists
        assert all(problem in said for problem in feature_list_problems(listed["features"]))


def test_check_feature_list_is_the_initializer_s_and_says_when_there_is_no_list(tmp_path: Path) -> None:
    t = HandoffTools(records_of(tmp_path), T.INITIALIZER, 1, None, None, "b", workdir=tmp_path, evidence=None)
    said, failed = t.call("check_feature_list", {})
    assert not failed and said.startswith("feature_list.json cannot be checked:") and "is missing" in said
    assert tools(project_with(tmp_path), T.IMPLEMENT).call("check_feature_list", {})[1]


# -- FAILED is taken at its word ------------------------------------------------------------------


@pytest.mark.parametrize("role", [T.IMPLEMENT, T.FIX])
def test_a_session_that_reports_failed_failed(tmp_path: Path, role: SessionType) -> None:
    lane: dict[str, Any] = {"open_review": 1, "fix_rounds": 1} if role is T.FIX else {}
    world = start(tmp_path, role, feature("F001"), **lane)
    implement(world) if role is T.IMPLEMENT else world.sh("echo more >> one.txt && git commit -qam more")
    entry = {
        "session_id": 4,
        "agent_type": role.value,
        "outcome": "FAILED",
        "notes": "the spec contradicts itself",
    }
    world.edit("progress.json", lambda p: p["sessions"].append(entry))
    outcome = refused(world, f"{role.value} reported FAILED: the spec contradicts itself")
    assert outcome == Outcome(
        role, False, reason=f"{role.value} reported FAILED: the spec contradicts itself"
    )


def test_a_hand_written_outcome_outside_the_role_s_list_is_refused_after_the_session(tmp_path: Path) -> None:
    world = start(tmp_path, T.IMPLEMENT, feature("F001"))
    implement(world)
    entry = {"session_id": 4, "agent_type": "IMPLEMENT", "outcome": "READY FOR REVIEW"}
    world.edit("progress.json", lambda p: p["sessions"].append(entry))
    refused(
        world,
        "progress.json: session 4 reports outcome 'READY FOR REVIEW'; IMPLEMENT reports READY_FOR_REVIEW or FAILED",
    )
