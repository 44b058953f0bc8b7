"""The bounded brief, the hand-off tools, the history files and validation once per version."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers import state_for
from hypothesis import given, settings
from hypothesis import strategies as st

from session_scheduler.core.config import SessionType
from session_scheduler.core.machine import Backlog, Lane, SessionState, architecture_fixes, feature
from session_scheduler.core.policy import POLICIES, policy
from session_scheduler.core.schemas import HANDOFF_SCHEMAS, schema_error
from session_scheduler.run import brief
from session_scheduler.store import handoff_history, progress
from session_scheduler.store.handoff_tools import PREFIX, SPECS, HandoffTools, permission_rules, tool_names
from session_scheduler.store.records import Records, records_of

T = SessionType


def features(n: int, text: str = "a feature") -> dict[str, Any]:
    return {
        "features": [
            {
                "id": f"F{k:05d}",
                "category": "c",
                "description": f"{text} {k}",
                "steps": ["s1", "s2"],
                "passes": False,
            }
            for k in range(1, n + 1)
        ]
    }


def project_with(
    tmp_path: Path, n: int = 3, sessions: int = 0, reviews: list[dict[str, Any]] | None = None
) -> Path:
    (tmp_path / "feature_list.json").write_text(json.dumps(features(n)))
    entries = [
        {
            "session_id": k,
            "agent_type": "IMPLEMENT",
            "features_touched": [],
            "outcome": "READY_FOR_REVIEW",
            "notes": f"note {k}",
        }
        for k in range(1, sessions + 1)
    ]
    status = {
        "project_name": "p",
        "current_phase": "IMPLEMENT",
        "current_feature": None,
        "current_branch": None,
        "features_completed": 0,
    }
    (tmp_path / "progress.json").write_text(json.dumps({**status, "sessions": entries}))
    (tmp_path / "reviews.json").write_text(json.dumps({"reviews": reviews or [], "fixes": []}))
    return tmp_path


GRADED = [{"step": 1, "passed": True, "evidence": "printed 1"}, {"step": 2, "passed": True, "evidence": "ok"}]
"""A feature's two steps (`features`), each passed with its evidence."""


def review(
    review_id: int, feature_id: str | None, verdict: str = "REQUEST_CHANGES", kind: str = "feature"
) -> dict[str, Any]:
    return {
        "review_id": review_id,
        "feature_id": feature_id,
        "kind": kind,
        "verdict": verdict,
        "issues": {"critical": [], "major": [f"issue of {review_id}"], "minor": []},
    }


# -- the brief --------------------------------------------------------------------------------------


def test_the_brief_has_the_feature_its_steps_neighbours_reviews_and_last_sessions(tmp_path: Path) -> None:
    project = project_with(tmp_path, n=5, sessions=7, reviews=[review(1, "F00003")])
    state = state_for(T.IMPLEMENT, "F00003")
    text = brief.render(brief.gather(project, state, 8, "make test"))
    assert "## Your feature: F00003 (branch `feature/F00003`)" in text and "1. s1" in text
    assert "F00001 a feature 1" in text and "F00005 a feature 5" in text and "F00003 a feature 3;" not in text
    assert (
        "review 1: REQUEST_CHANGES: issue of 1" in text
        and "session 7 IMPLEMENT" in text
        and "session 4 " not in text
    )
    assert "Test command: `make test`" in text
    facts = json.loads(text.rsplit("```json", 1)[1].split("```")[0])
    assert facts == {
        "session": 8,
        "role": "IMPLEMENT",
        "feature": "F00003",
        "branch": "feature/F00003",
        "open_review": None,
        "earlier_reviews": 1,
        "test_command": "make test",
    }


def test_the_brief_numbers_the_acceptance_steps_and_says_when_it_cut_them() -> None:
    steps = ["Run `a` -> prints `1`", "Run `b` -> prints `" + "x" * 300 + "`"]
    facts = brief.Facts(role="REVIEW", session=4, feature={"id": "F1", "description": "d", "steps": steps})
    text = brief.render(facts)
    assert (
        "Acceptance steps (build to them; REVIEW grades each, in order):\n1. Run `a` -> prints `1`\n2. Run `b`"
        in text
    )
    assert "(steps cut to fit the brief: `show_feature F1` has them whole)" in text
    whole = brief.render(
        brief.Facts(role="REVIEW", session=4, feature={"id": "F1", "description": "d", "steps": steps[:1]})
    )
    assert "steps cut" not in whole


def test_a_fix_brief_names_the_failed_acceptance_steps_with_their_evidence() -> None:
    open_review = {
        **review(5, "F1"),
        "acceptance": [
            {"step": 1, "passed": True, "evidence": "printed 1"},
            {"step": 2, "passed": False, "evidence": "printed `3 tea`, not `3 [ ] tea`"},
        ],
    }
    facts = brief.Facts(
        role="FIX",
        session=6,
        feature={"id": "F1", "description": "d", "steps": ["a", "b"]},
        open_review=open_review,
    )
    text = brief.render(facts)
    assert "- acceptance step 2 failed: printed `3 tea`, not `3 [ ] tea`" in text
    assert "step 1 failed" not in text
    assert json.loads(text.rsplit("```json", 1)[1].split("```")[0])["open_review"]["failed_steps"] == [2]


def test_the_feature_is_found_where_the_state_puts_it_or_anywhere_else() -> None:
    listed = features(5)["features"]
    order = tuple(f["id"] for f in listed)
    assert brief._position(listed, "F00004", order) == 3
    assert brief._position(listed, "F00004", tuple(reversed(order))) == 3  # the hint is wrong: looked for
    assert brief._position(listed, "F00004", ()) == 3
    assert brief._position(listed, "F00009", order) is None
    assert brief._position(listed[:2], "F00004", order) is None  # the hint is past the list's end


def test_a_fix_brief_names_the_open_review_even_from_the_history(tmp_path: Path) -> None:
    project = project_with(tmp_path, reviews=[review(k, "F00001") for k in range(1, 50)])
    handoff_history.trim(project)  # review 7 moves to the history
    state = state_for(T.FIX, "F00001", open_review=7)
    facts = brief.gather(project, state, 60, None)
    assert facts.open_review is not None and facts.open_review["review_id"] == 7
    assert facts.earlier_review_count == 49
    assert "## Open review 7 (REQUEST_CHANGES): fix these" in brief.render(facts)


@settings(max_examples=40, deadline=None)
@given(
    size=st.sampled_from([1, 10, 10_000]),
    text=st.text(min_size=0, max_size=5_000),
    steps=st.integers(0, 300),
)
def test_the_brief_stays_under_its_budget_whatever_the_project_holds(
    size: int, text: str, steps: int
) -> None:
    entry = {"id": "F1", "description": text * 3, "steps": [text] * steps}
    open_review = {
        "review_id": 9,
        "verdict": "REJECT",
        "issues": {"critical": [text] * 50, "major": [text] * 50, "minor": []},
        "scheduler_findings": [text] * 20,
        "acceptance": [{"step": k, "passed": False, "evidence": text} for k in range(1, 40)],
    }
    facts = brief.Facts(
        role="FIX",
        session=size * 10,
        feature=entry,
        branch="feature/F1",
        neighbours=[(f"F{k}", text) for k in range(4)],
        open_review=open_review,
        earlier_reviews=[open_review] * 3,
        earlier_review_count=size,
        recent_sessions=[
            {"session_id": k, "agent_type": "FIX", "outcome": "FIXED", "notes": text} for k in range(3)
        ],
        features_total=size,
        features_passing=size // 2,
        test_command=text[:200],
    )
    rendered = brief.render(facts)
    assert len(rendered.encode("utf-8")) <= brief.BUDGET
    assert json.loads(rendered.rsplit("```json", 1)[1].split("```")[0])["open_review"]["review_id"] == 9


# -- the hand-off tools ---------------------------------------------------------------------------


def test_each_role_gets_the_tools_its_rights_give_it() -> None:
    assert tool_names(T.IMPLEMENT) == ("brief", "show_feature", "append_session")
    assert tool_names(T.REVIEW) == (
        "brief",
        "show_feature",
        "append_session",
        "record_review",
        "mark_passing",
    )
    assert tool_names(T.FIX) == ("brief", "show_feature", "append_session", "record_fix")
    assert tool_names(T.ARCHITECTURE) == ("brief", "show_feature", "append_session", "record_review")
    assert permission_rules(T.FIX)[-1] == f"{PREFIX}record_fix"


def tools(
    project: Path | Records,
    role: SessionType,
    number: int = 5,
    work: Any = None,
    open_review: int | None = None,
) -> HandoffTools:
    records = records_of(project)
    return HandoffTools(
        records, role, number, work, open_review, "the brief", workdir=records.root, evidence=None
    )


def test_append_session_fills_in_the_session_and_takes_one_entry(tmp_path: Path) -> None:
    project = project_with(tmp_path)
    t = tools(project, T.IMPLEMENT, work=feature("F00002"))
    assert t.call(f"{PREFIX}brief", {}) == ("the brief", False)
    assert t.call("append_session", {"outcome": "READY_FOR_REVIEW", "notes": "done"}) == (
        "appended the entry of session 5 to progress.json",
        False,
    )
    entry = json.loads((project / "progress.json").read_text())["sessions"][-1]
    assert entry == {
        "session_id": 5,
        "agent_type": "IMPLEMENT",
        "features_touched": ["F00002"],
        "outcome": "READY_FOR_REVIEW",
        "commit_range": None,
        "notes": "done",
    }
    assert t.call("append_session", {"outcome": "READY_FOR_REVIEW"}) == (
        "session 5 already has its entry in progress.json",
        True,
    )
    assert t.call("record_review", {"verdict": "PASS", "issues": {}})[1] is True  # not IMPLEMENT's tool
    answer, failed = t.call(
        "append_session", {"outcome": "READY_FOR_REVIEW", "features_touched": ["not an id"]}
    )
    assert failed  # the session already has its entry; a fresh tool checks the schema instead
    fresh = tools(project, T.IMPLEMENT, number=6)
    answer, failed = fresh.call(
        "append_session", {"outcome": "READY_FOR_REVIEW", "features_touched": ["not an id"]}
    )
    assert failed and "would not match its schema" in answer and "does not match '^F[0-9]+$'" in answer


def test_a_review_is_numbered_after_the_history_and_passing_needs_a_pass_first(tmp_path: Path) -> None:
    project = project_with(tmp_path, reviews=[review(k, "F00009") for k in range(1, 45)])
    handoff_history.trim(project)
    t = tools(project, T.REVIEW, work=feature("F00002"))
    assert t.call("mark_passing", {}) == (
        "record your PASS review first (record_review with verdict PASS), then mark the feature passing",
        True,
    )
    answer, failed = t.call(
        "record_review", {"verdict": "PASS", "issues": {"minor": ["m"]}, "acceptance": GRADED}
    )
    assert not failed and json.loads(answer) == {"review_id": 45, "verdict": "PASS"}
    added = json.loads((project / "reviews.json").read_text())["reviews"][-1]
    assert (added["feature_id"], added["kind"], added["branch"], added["issues"]) == (
        "F00002",
        "feature",
        "feature/F00002",
        {"critical": [], "major": [], "minor": ["m"]},
    )
    assert t.call("mark_passing", {}) == ("F00002 is marked passing", False)
    assert [
        f["id"] for f in json.loads((project / "feature_list.json").read_text())["features"] if f["passes"]
    ] == ["F00002"]
    bad = tools(project, T.REVIEW, number=6, work=feature("F00003")).call(
        "record_review", {"verdict": "MAYBE", "issues": {}}
    )
    assert bad[1] and "would not match its schema" in bad[0]


def test_a_review_records_its_acceptance_results_and_refuses_a_malformed_one(tmp_path: Path) -> None:
    project = project_with(tmp_path)
    graded = GRADED
    bad = tools(project, T.REVIEW, work=feature("F00002")).call(
        "record_review", {"verdict": "PASS", "issues": {}, "acceptance": [{"step": 0, "passed": True}]}
    )
    assert bad[1] and "would not match its schema" in bad[0]
    t = tools(project, T.REVIEW, number=6, work=feature("F00002"))
    assert not t.call("record_review", {"verdict": "PASS", "issues": {}, "acceptance": graded})[1]
    assert json.loads((project / "reviews.json").read_text())["reviews"][-1]["acceptance"] == graded
    spec = next(s for s in SPECS if s.name == "record_review")
    rights = policy(T.REVIEW)
    assert "acceptance" in spec.schema_for(rights)["properties"] and "acceptance" in spec.description_for(
        rights
    )


def test_the_tools_never_change_the_version_the_scheduler_validated(tmp_path: Path) -> None:
    project = Records(project_with(tmp_path, n=4))  # the scheduler's and the tools' records
    before = progress.load_handoff(project)
    t = tools(project, T.REVIEW, work=feature("F00002"))
    assert not t.call("record_review", {"verdict": "PASS", "issues": {}, "acceptance": GRADED})[1]
    assert t.call("mark_passing", {}) == ("F00002 is marked passing", False)
    assert not t.call("append_session", {"outcome": "REVIEWED"})[1]
    after = progress.load_handoff(project)
    assert before.passing() == frozenset() and after.passing() == frozenset({"F00002"})
    assert after.passing() == progress._passing(after.features())  # as the tool told it, as derived
    assert all(not f["passes"] for f in before.features()) and before.review_list() == []
    assert (before.progress or {})["sessions"] == [] and len((after.progress or {})["sessions"]) == 1
    # the entries that did not change are shared, not copied
    assert [a is b for a, b in zip(before.features(), after.features(), strict=True)] == [
        True,
        False,
        True,
        True,
    ]
    assert after.features() == json.loads(project.path("feature_list.json").read_text())["features"]


def test_a_tool_refuses_a_broken_file_and_says_how_to_mend_it(tmp_path: Path) -> None:
    project = project_with(tmp_path)
    (project / "progress.json").write_text("{ not json")
    answer, failed = tools(project, T.IMPLEMENT, work=feature("F00002")).call(
        "append_session", {"outcome": "READY_FOR_REVIEW"}
    )
    assert failed and "is not valid JSON (line 1, column 3" in answer and "fix the file" in answer
    (project / "feature_list.json").write_text(json.dumps({"features": [{"id": "bad"}]}))
    answer, failed = tools(project, T.REVIEW, work=feature("F00002")).call(
        "show_feature", {"feature_id": "F00002"}
    )
    assert failed and "does not match its schema" in answer


def test_an_architecture_review_and_a_fix_of_it(tmp_path: Path) -> None:
    project = project_with(tmp_path)
    answer, _ = tools(project, T.ARCHITECTURE).call(
        "record_review", {"verdict": "REQUEST_CHANGES", "issues": {"major": ["split it"]}}
    )
    review_id = json.loads(answer)["review_id"]
    assert json.loads((project / "reviews.json").read_text())["reviews"][-1]["kind"] == "architecture"
    assert (
        tools(project, T.FIX, 7, architecture_fixes(review_id)).call(
            "record_fix", {"issues_fixed": ["split"]}
        )[1]
        is True
    )  # no open review
    fix = tools(project, T.FIX, 7, architecture_fixes(review_id), open_review=review_id)
    assert json.loads(fix.call("record_fix", {"issues_fixed": ["split it"]})[0]) == {
        "fix_id": 1,
        "review_id": review_id,
    }
    assert fix.call("mark_passing", {})[1] is True
    assert fix.call("show_feature", {"feature_id": "F00002"})[0].startswith('{\n  "id": "F00002"')
    assert fix.call("show_feature", {"feature_id": "F404"}) == (
        "no feature 'F404' in feature_list.json",
        True,
    )


# -- the history files --------------------------------------------------------------------------------


def test_old_entries_move_to_the_history_once_even_when_a_kill_repeats_the_move(tmp_path: Path) -> None:
    project = project_with(
        tmp_path, sessions=45, reviews=[review(k, "F00001" if k % 2 else "F00002") for k in range(1, 41)]
    )
    moved = handoff_history.trim(project)
    assert moved == {"sessions": 25, "reviews": 20}
    kept = json.loads((project / "progress.json").read_text())["sessions"]
    assert [e["session_id"] for e in kept] == list(range(26, 46))
    assert [e["session_id"] for e in handoff_history.read_history(project, "sessions")] == list(range(1, 26))
    assert handoff_history.archived_review_counts(project) == {"F00001": 10, "F00002": 10}
    # a kill after the history was appended but before progress.json was rewritten: the move repeats
    (project / "progress.json").write_text(
        json.dumps(
            {
                **json.loads((project / "progress.json").read_text()),
                "sessions": [*handoff_history.read_history(project, "sessions")[-5:], *kept, *kept[:0]],
            }
        )
    )
    data = json.loads((project / "progress.json").read_text())
    data["sessions"] = [
        {"session_id": k, "agent_type": "IMPLEMENT", "features_touched": [], "outcome": "READY_FOR_REVIEW"}
        for k in range(21, 61)
    ]
    (project / "progress.json").write_text(json.dumps(data))
    handoff_history.trim(project)
    ids = [e["session_id"] for e in handoff_history.read_history(project, "sessions")]
    assert ids == list(range(1, 41)) and len(ids) == len(set(ids))
    assert handoff_history.largest_archived_id(project, "sessions") == 40
    handoff_history.trim(project)  # nothing more to move
    assert handoff_history.archived_review_counts(project) == {"F00001": 10, "F00002": 10}


# -- validation once per version ------------------------------------------------------------------


entry_values = st.fixed_dictionaries(
    {
        "id": st.sampled_from(["F1", "F02", "x", 3]),
        "category": st.sampled_from(["c", ""]),
        "description": st.sampled_from(["d", ""]),
        "steps": st.lists(st.sampled_from(["s", 1]), max_size=2),
        "passes": st.sampled_from([True, False, "no"]),
    }
)
documents = st.one_of(
    st.fixed_dictionaries({"features": st.lists(entry_values, max_size=4)}),
    st.just({}),
    st.just({"features": "x"}),
    st.just([]),
)


@settings(max_examples=400, deadline=None)
@given(documents, documents)
def test_checking_only_what_changed_agrees_with_checking_everything(now: Any, before: Any) -> None:
    whole = schema_error(now, HANDOFF_SCHEMAS["feature_list.json"]) is None
    assert (progress.incremental_schema_error(now, "feature_list.json", None) is None) == whole
    if (
        schema_error(before, HANDOFF_SCHEMAS["feature_list.json"]) is None
    ):  # `before` is always a validated version
        assert (progress.incremental_schema_error(now, "feature_list.json", before) is None) == whole


def test_an_unchanged_file_is_not_read_again_and_a_changed_one_is(tmp_path: Path) -> None:
    project = Records(project_with(tmp_path, n=4))  # what the records remember between reads
    first = progress.load_handoff(project)
    assert progress.load_handoff(project).feature_list is first.feature_list  # the same version: not re-read
    data = features(4)
    data["features"][2]["passes"] = "yes"
    project.path("feature_list.json").write_text(json.dumps(data))
    with pytest.raises(progress.StateError, match=r"at features/2/passes: 'yes' is not of type 'boolean'"):
        progress.load_handoff(project)


def test_the_sdk_serves_exactly_the_role_s_tools_and_answers_through_them(tmp_path: Path) -> None:
    import anyio

    from session_scheduler.store.handoff_tools import SERVER, mcp_server, sdk_tools

    project = project_with(tmp_path)
    t = tools(project, T.FIX, work=feature("F00001"), open_review=None)
    served = sdk_tools(t)
    assert [tool.name for tool in served] == list(tool_names(T.FIX))
    fix = next(tool for tool in served if tool.name == "record_fix")
    answer = anyio.run(fix.handler, {"issues_fixed": ["x"]})
    assert answer == {
        "content": [{"type": "text", "text": "there is no open review to record a fix for"}],
        "is_error": True,
    }
    brief_tool = next(tool for tool in served if tool.name == "brief")
    assert anyio.run(brief_tool.handler, {}) == {
        "content": [{"type": "text", "text": "the brief"}],
        "is_error": False,
    }
    config = mcp_server(t)
    assert config["type"] == "sdk" and config["name"] == SERVER


def test_a_review_session_entry_keeps_its_verdict_and_review(tmp_path: Path) -> None:
    project = project_with(tmp_path)
    t = tools(project, T.REVIEW, number=9, work=feature("F00001"))
    t.call(
        "append_session",
        {"outcome": "REVIEWED", "verdict": "PASS", "review_id": 3, "commit_range": {"from": "a", "to": "b"}},
    )
    entry = json.loads((project / "progress.json").read_text())["sessions"][-1]
    assert (entry["verdict"], entry["review_id"], entry["commit_range"], entry["features_touched"]) == (
        "PASS",
        3,
        {"from": "a", "to": "b"},
        ["F00001"],
    )
    arch = tools(project, T.ARCHITECTURE, number=10)
    arch.call("append_session", {"outcome": "ARCHITECTURE_REVIEWED"})
    assert json.loads((project / "progress.json").read_text())["sessions"][-1]["features_touched"] == []


def test_a_list_is_trimmed_only_once_it_holds_twice_its_window(tmp_path: Path) -> None:
    project = project_with(tmp_path, sessions=5)
    assert handoff_history.trim(project, window=3) == {}
    project = project_with(tmp_path, sessions=6)
    assert handoff_history.trim(project, window=3) == {"sessions": 3}


def test_the_review_counts_key_architecture_reviews_and_branches_and_survive_a_repeated_move(
    tmp_path: Path,
) -> None:
    reviews = [
        review(1, None, kind="architecture"),
        {**review(2, None), "branch": "arch/1"},
        review(3, "F00001"),
    ] * 1
    reviews = [{**r, "review_id": n + 1} for n, r in enumerate(reviews * 2)]
    project = project_with(tmp_path, reviews=reviews)
    before = (project / "reviews.json").read_text()
    handoff_history.trim(project, window=3)
    counts = {"architecture": 1, "arch/1": 1, "F00001": 1}
    assert handoff_history.archived_review_counts(project) == counts
    (project / "reviews.json").write_text(
        before
    )  # a kill before reviews.json was rewritten: the move runs again
    handoff_history.trim(project, window=3)
    assert handoff_history.archived_review_counts(project) == counts
    assert [r["review_id"] for r in handoff_history.read_history(project, "reviews")] == [1, 2, 3]


def test_the_newest_archived_id_is_read_from_the_end_of_a_large_history(tmp_path: Path) -> None:
    path = handoff_history.history_path(tmp_path, "sessions")
    path.write_text(
        "".join(json.dumps({"session_id": n, "notes": "x" * 100}) + "\n" for n in range(1, 2001)) + "\n\n"
    )
    assert path.stat().st_size > 65_536
    assert handoff_history.largest_archived_id(tmp_path, "sessions") == 2000
    assert handoff_history.largest_archived_id(tmp_path, "fixes") == 0


@pytest.mark.parametrize("size", [10, 70_000, 200_000])
def test_the_newest_archived_id_is_read_whole_however_long_its_entry(tmp_path: Path, size: int) -> None:
    """An entry longer than the block read from the end (long notes, a review with many issues)
    is read whole, its line split across blocks."""
    path = handoff_history.history_path(tmp_path, "reviews")
    path.write_text(
        json.dumps({"review_id": 6, "notes": "a" * 100})
        + "\n"
        + json.dumps({"review_id": 7, "notes": "b" * size})
        + "\n"
    )
    assert handoff_history.largest_archived_id(tmp_path, "reviews") == 7


def test_a_torn_last_line_is_passed_over_and_the_next_move_starts_a_line_of_its_own(tmp_path: Path) -> None:
    """A kill in the middle of an append leaves a torn last line: the newest whole entry still
    names the id moved last (so nothing is moved twice), and the entries moved next are not
    glued onto the torn line (so none is lost)."""
    project = project_with(tmp_path, sessions=6)
    path = handoff_history.history_path(project, "sessions")
    path.write_text('{"session_id":1}\n{"session_id":2,"agent')
    assert handoff_history.largest_archived_id(project, "sessions") == 1
    handoff_history.trim(project, window=3)
    archived = [e["session_id"] for e in handoff_history.read_history(project, "sessions")]
    kept = [e["session_id"] for e in json.loads((project / "progress.json").read_text())["sessions"]]
    assert archived == [1, 2, 3] and kept == [4, 5, 6]
    assert handoff_history.largest_archived_id(project, "sessions") == 3


def test_the_scripted_model_names_the_hand_off_tools_as_the_scheduler_serves_them() -> None:
    from scripted_model.protocol import HANDOFF_ARGS, HANDOFF_TOOLS

    assert HANDOFF_TOOLS == PREFIX
    served = {
        spec.name: {
            name
            for role in POLICIES
            if spec.allowed(policy(role))
            for name in spec.schema_for(policy(role))["properties"]
        }
        for spec in SPECS
    }
    assert {name: set(args) - set(served[name]) for name, args in HANDOFF_ARGS.items()} == {
        name: set() for name in HANDOFF_ARGS
    }


# -- what each tool writes, refuses and numbers ------------------------------------------------------


def test_a_tool_outside_the_role_is_refused_with_the_tools_it_has_and_a_folder_is_not_records(
    tmp_path: Path,
) -> None:
    t = tools(project_with(tmp_path), T.IMPLEMENT)
    assert t.call(f"{PREFIX}mark_passing", {}) == (
        "IMPLEMENT has no hand-off tool 'mark_passing' (it has: brief, show_feature, append_session)",
        True,
    )
    with pytest.raises(TypeError, match="the hand-off tools write the project's Records, not a folder"):
        HandoffTools(tmp_path, T.IMPLEMENT, 1, None, None, "the brief", workdir=tmp_path, evidence=None)  # type: ignore[arg-type]


def test_a_session_entry_without_an_outcome_or_a_progress_file(tmp_path: Path) -> None:
    project = project_with(tmp_path)
    assert tools(project, T.IMPLEMENT, number=4).call("append_session", {}) == (
        "refused, nothing was written: outcome '' is not one of IMPLEMENT's outcomes: use "
        "READY_FOR_REVIEW (your work is done) or FAILED (with the reason in `notes`)",
        True,
    )
    assert json.loads((project / "progress.json").read_text())["sessions"] == []
    (project / "progress.json").unlink()  # no status fields to append to: refused, never written
    assert tools(project, T.IMPLEMENT, number=5).call("append_session", {"outcome": "READY_FOR_REVIEW"}) == (
        "refused: progress.json would not match its schema at (top level): "
        "'project_name' is a required property",
        True,
    )
    assert not (project / "progress.json").exists()


def test_show_feature_names_what_it_did_not_find(tmp_path: Path) -> None:
    project = project_with(tmp_path)
    t = tools(project, T.IMPLEMENT)
    assert t.call("show_feature", {}) == ("no feature '' in feature_list.json", True)
    (project / "feature_list.json").unlink()
    assert t.call("show_feature", {"feature_id": "F00001"}) == (
        "no feature 'F00001' in feature_list.json",
        True,
    )


def test_a_review_without_a_work_item_writes_a_fresh_reviews_file_and_marks_nothing(tmp_path: Path) -> None:
    project = project_with(tmp_path)
    (project / "reviews.json").unlink()
    t = tools(project, T.REVIEW, number=9)
    answer, failed = t.call(
        "record_review", {"verdict": "PASS", "issues": {"major": ["x"]}, "summary": "looks right"}
    )
    assert not failed and json.loads(answer) == {"review_id": 1, "verdict": "PASS"}
    assert json.loads((project / "reviews.json").read_text()) == {
        "reviews": [
            {
                "review_id": 1,
                "feature_id": None,
                "kind": "feature",
                "verdict": "PASS",
                "issues": {"critical": [], "major": ["x"], "minor": []},
                "session_id": 9,
                "summary": "looks right",
            }
        ],
        "fixes": [],
    }
    assert t.call("mark_passing", {}) == (
        "this review has no feature to mark passing (an architecture branch is merged, not marked)",
        True,
    )
    assert tools(project, T.REVIEW, number=10).call("record_review", {"issues": {}}) == (
        "refused: reviews.json would not match its schema at reviews/1/verdict: "
        "'' is not one of ['PASS', 'REQUEST_CHANGES', 'REJECT']",
        True,
    )


def test_an_architecture_review_names_no_branch_even_with_a_work_item(tmp_path: Path) -> None:
    project = project_with(tmp_path)
    t = tools(project, T.ARCHITECTURE, number=3, work=architecture_fixes(2))
    assert not t.call("record_review", {"verdict": "PASS", "issues": {}, "summary": ""})[1]
    added = json.loads((project / "reviews.json").read_text())["reviews"][-1]
    assert added == {
        "review_id": 1,
        "feature_id": None,
        "kind": "architecture",
        "verdict": "PASS",
        "issues": {"critical": [], "major": [], "minor": []},
        "session_id": 3,
    }


def test_ids_continue_after_the_history_when_the_file_holds_none(tmp_path: Path) -> None:
    project = project_with(tmp_path)
    handoff_history.history_path(project, "reviews").write_text(json.dumps(review(30, "F00001")) + "\n")
    handoff_history.history_path(project, "fixes").write_text(
        json.dumps({"fix_id": 12, "review_id": 30, "issues_fixed": []}) + "\n"
    )
    answer, _ = tools(project, T.REVIEW, work=feature("F00001")).call(
        "record_review", {"verdict": "REJECT", "issues": {}}
    )
    assert json.loads(answer) == {"review_id": 31, "verdict": "REJECT"}
    answer, _ = tools(project, T.FIX, 6, feature("F00001"), open_review=31).call(
        "record_fix", {"issues_fixed": ["x"]}
    )
    assert json.loads(answer) == {"fix_id": 13, "review_id": 31}


def test_a_fix_entry_keeps_what_the_session_fixed_and_fixes_are_numbered_in_turn(tmp_path: Path) -> None:
    project = project_with(tmp_path)
    (project / "reviews.json").unlink()
    first = tools(project, T.FIX, 7, feature("F00001"), open_review=3)
    assert first.call("record_fix", {"issues_fixed": ["the crash", "the typo"], "notes": "both"}) == (
        json.dumps({"fix_id": 1, "review_id": 3}),
        False,
    )
    second = tools(project, T.FIX, 8, feature("F00001"), open_review=3)
    assert json.loads(second.call("record_fix", {"issues_fixed": ["the rest"], "notes": ""})[0]) == {
        "fix_id": 2,
        "review_id": 3,
    }
    assert json.loads((project / "reviews.json").read_text()) == {
        "reviews": [],
        "fixes": [
            {
                "fix_id": 1,
                "review_id": 3,
                "issues_fixed": ["the crash", "the typo"],
                "session_id": 7,
                "notes": "both",
            },
            {"fix_id": 2, "review_id": 3, "issues_fixed": ["the rest"], "session_id": 8},
        ],
    }


def test_marking_passing_keeps_the_features_already_passing_and_needs_the_feature(tmp_path: Path) -> None:
    project = project_with(tmp_path, n=3)
    data = features(3)
    data["features"][0]["passes"] = True
    (project / "feature_list.json").write_text(json.dumps(data))
    records = Records(project)
    t = tools(records, T.REVIEW, work=feature("F00002"))
    assert not t.call("record_review", {"verdict": "PASS", "issues": {}, "acceptance": GRADED})[1]
    assert t.call("mark_passing", {}) == ("F00002 is marked passing", False)
    assert progress.load_handoff(records).passing() == {"F00001", "F00002"}
    assert progress.load_handoff(project).passing() == {"F00001", "F00002"}
    (project / "feature_list.json").unlink()
    gone = tools(project, T.REVIEW, number=6, work=feature("F00003"))
    assert not gone.call("record_review", {"verdict": "PASS", "issues": {}})[1]
    assert gone.call("mark_passing", {}) == ("no feature F00003 in feature_list.json", True)


def test_the_sdk_server_lists_the_role_s_tools_and_calls_them(tmp_path: Path) -> None:
    import anyio
    from mcp import Client

    from session_scheduler.store.handoff_tools import mcp_server

    server = mcp_server(tools(project_with(tmp_path), T.FIX))["instance"]

    async def session() -> tuple[list[str], Any]:
        async with Client(server) as client:
            listed = await client.list_tools()
            return [t.name for t in listed.tools], await client.call_tool("brief", {})

    names, answer = anyio.run(session)
    assert names == list(tool_names(T.FIX))
    assert [c.text for c in answer.content] == ["the brief"] and not answer.is_error


# -- what the history keeps ------------------------------------------------------------------------------


def test_history_lines_are_compact_json_readable_by_all(tmp_path: Path) -> None:
    project = project_with(tmp_path, sessions=4)
    old = os.umask(0o022)
    try:
        assert handoff_history.trim(project, window=2) == {"sessions": 2}
    finally:
        os.umask(old)
    path = handoff_history.history_path(project, "sessions")
    first = {
        "session_id": 1,
        "agent_type": "IMPLEMENT",
        "features_touched": [],
        "outcome": "READY_FOR_REVIEW",
        "notes": "note 1",
    }
    assert path.read_text().splitlines()[0] == json.dumps(first, separators=(",", ":"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_moves_after_whole_lines_add_no_blank_line(tmp_path: Path) -> None:
    """A move after a history that ends its last line well appends right after it."""
    project = project_with(tmp_path, sessions=4)
    handoff_history.trim(project, window=2)
    data = json.loads((project / "progress.json").read_text())
    data["sessions"] += [{**data["sessions"][-1], "session_id": k} for k in (5, 6)]
    (project / "progress.json").write_text(json.dumps(data))
    handoff_history.trim(project, window=2)
    text = handoff_history.history_path(project, "sessions").read_text()
    assert [json.loads(line)["session_id"] for line in text.split("\n")[:-1]] == [1, 2, 3, 4]


def test_the_newest_archived_id_of_an_empty_history_is_none(tmp_path: Path) -> None:
    handoff_history.history_path(tmp_path, "reviews").write_text("\n  \n")
    assert handoff_history.largest_archived_id(tmp_path, "reviews") == 0


def test_a_torn_line_inside_the_history_loses_only_itself(tmp_path: Path) -> None:
    path = handoff_history.history_path(tmp_path, "fixes")
    path.write_text('{"fix_id":1}\n{"fix_id":2,"rev{"fix_id":2}\n{"fix_id":3}\n')
    assert [e["fix_id"] for e in handoff_history.read_history(tmp_path, "fixes")] == [1, 3]


def test_each_list_is_trimmed_on_its_own_and_an_untrimmed_file_is_left_as_it_is(tmp_path: Path) -> None:
    project = project_with(tmp_path, sessions=3, reviews=[review(1, "F00001")])
    (project / "progress.json").unlink()  # no progress file: the reviews file is trimmed all the same
    data = json.loads((project / "reviews.json").read_text())
    data["fixes"] = [{"fix_id": k, "review_id": 1, "issues_fixed": []} for k in range(1, 7)]
    (project / "reviews.json").write_text(json.dumps(data))
    assert handoff_history.trim(project, window=3) == {"fixes": 3}
    kept = json.loads((project / "reviews.json").read_text())
    assert [f["fix_id"] for f in kept["fixes"]] == [4, 5, 6] and kept["reviews"] == data["reviews"]
    assert [f["fix_id"] for f in handoff_history.read_history(project, "fixes")] == [1, 2, 3]
    text = (project / "reviews.json").read_text()
    project_with(tmp_path, sessions=2)
    before = (project / "progress.json").read_text()
    assert handoff_history.trim(project, window=3) == {}
    assert (project / "progress.json").read_text() == before and (
        project / "reviews.json"
    ).read_text() != text


def test_entries_without_an_id_do_not_stop_a_move(tmp_path: Path) -> None:
    project = project_with(tmp_path, sessions=6, reviews=[review(k, "F00001") for k in range(1, 7)])
    data = json.loads((project / "progress.json").read_text())
    del data["sessions"][0]["session_id"]
    (project / "progress.json").write_text(json.dumps(data))
    data = json.loads((project / "reviews.json").read_text())
    del data["reviews"][0]["review_id"]
    (project / "reviews.json").write_text(json.dumps(data))
    assert handoff_history.trim(project, window=3) == {"sessions": 3, "reviews": 3}
    assert [e.get("session_id") for e in handoff_history.read_history(project, "sessions")][-2:] == [2, 3]
    assert [e.get("review_id") for e in handoff_history.read_history(project, "reviews")][-2:] == [2, 3]
    assert handoff_history.archived_review_counts(project)["F00001"] >= 2


def test_the_review_counts_kept_in_mind_follow_each_move(tmp_path: Path) -> None:
    records = Records(project_with(tmp_path, reviews=[review(k, "F00001") for k in range(1, 7)]))
    assert handoff_history.trim(records, window=3) == {"reviews": 3}
    assert handoff_history.archived_review_counts(records) == {"F00001": 3}
    assert handoff_history.archived_review_counts(records) == {"F00001": 3}  # unchanged: as kept
    data = json.loads(records.path("reviews.json").read_text())
    data["reviews"] += [review(7, None)]  # neither a feature nor a branch
    data["reviews"] += [review(k, "F00002") for k in range(8, 11)]
    records.path("reviews.json").write_text(json.dumps(data))
    assert handoff_history.trim(records, window=3) == {"reviews": 4}
    assert handoff_history.archived_review_counts(records) == {"F00001": 6, "": 1}
    assert handoff_history.trim(records, window=1) == {"reviews": 2}  # counted after what was kept
    assert handoff_history.archived_review_counts(records) == {"F00001": 6, "": 1, "F00002": 2}
    archived = handoff_history.read_history(records.root, "reviews")
    assert [r["review_id"] for r in archived] == list(range(1, 10))


def test_a_fix_whose_review_is_only_a_merge_conflict_is_told_to_merge_and_nothing_else(
    tmp_path: Path,
) -> None:
    project = project_with(tmp_path)
    review_id = progress.scheduler_review(
        project,
        "F00002",
        "merging onto main conflicts in README.md",
        "CONFLICT (content)",
        conflicts=("README.md",),
    )
    assert progress.load_handoff(project).review_list()[-1]["conflicts"] == ["README.md"]  # the schema holds
    state = SessionState(
        Backlog(("F00001", "F00002")), Lane(T.FIX, feature("F00002"), fix_rounds=1, open_review=review_id)
    )
    text = brief.render(brief.gather(project, state, 9, None))
    assert "## `main` moved under your branch: merge it and resolve" in text
    assert "- `README.md`" in text and "`git merge main`" in text and "Change nothing else." in text
    assert "fix these" not in text and '"conflicts": ["README.md"]' in text
    red = progress.scheduler_review(
        project, "F00002", "the tests fail on main with this branch merged", "1 failed"
    )
    text = brief.render(
        brief.gather(project, replace(state, lane=replace(state.lane, open_review=red)), 9, None)
    )
    assert "fix these" in text and "moved under your branch" not in text
