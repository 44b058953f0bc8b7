"""A project that grows, rule by rule (issue 32): the spec's history, what an extension may do to
the feature list (checked by the session's tool and again by verification), the schedule that
plans a newer spec in the next free lane, and the outbox that appends the new features to the
records as they are by then."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers import sh
from test_verify_rules import World, refused, start

from session_scheduler.core.config import AgentConfig, SessionType
from session_scheduler.core.features import extension_problems
from session_scheduler.core.machine import (
    Backlog,
    GaveUp,
    Lane,
    Outcome,
    SessionState,
    choose_work,
    extends,
    feature,
    transition,
)
from session_scheduler.core.schedule import Schedule, extended, planning, transition_lane
from session_scheduler.core.tasks import Task, extension_coverage
from session_scheduler.repo import gitops
from session_scheduler.repo.adoption import NONE, Adoption
from session_scheduler.run import prompts
from session_scheduler.run.brief import NO_PLANNING
from session_scheduler.run.planning import planning_for, tools_on
from session_scheduler.run.verify import capture, verify_session
from session_scheduler.store import progress, specs, statefile
from session_scheduler.store.handoff_tools import HandoffTools
from session_scheduler.store.outbox import apply, open_outbox
from session_scheduler.store.records import records_of

T = SessionType
CONFIG = AgentConfig()


def entry(fid: str, passes: bool = False, **more: Any) -> dict[str, Any]:
    return {
        "id": fid,
        "category": "c",
        "description": f"does {fid}",
        "steps": ["s"],
        "passes": passes,
        **more,
    }


BEFORE = [entry("F001", True), entry("F002")]


# -- the spec's history -------------------------------------------------------------------------


def test_each_new_spec_is_a_version_and_the_newest_waits_until_a_session_plans_it(tmp_path: Path) -> None:
    spec = tmp_path / "app_spec.txt"
    assert specs.note(tmp_path, 0.0, listed=False) is None and specs.history(tmp_path) == ()  # no spec yet
    spec.write_text("one\n")
    first = specs.note(tmp_path, 86400.0, listed=False)
    assert first is not None and (first.number, first.added_at, first.planned_in) == (
        1,
        "1970-01-02T00:00:00+00:00",
        None,
    )
    assert specs.note(tmp_path, 99.0, listed=False) is None  # the same text is no new version
    assert (
        specs.unplanned(tmp_path) == first and specs.change(tmp_path) == ""
    )  # nothing planned to compare with
    specs.planned(tmp_path, 1)
    assert specs.unplanned(tmp_path) is None and not specs.pending(tmp_path)
    spec.write_text("one\ntwo\n")  # the person's edit in place
    assert specs.pending(tmp_path)
    second = specs.note(tmp_path, 2.0, listed=True)
    assert second is not None and second.number == 2 and specs.unplanned(tmp_path) == second
    change = specs.change(tmp_path)
    assert "+two" in change and "version 1" in change and "version 2" in change
    specs.planned(tmp_path, 7)
    assert [v.planned_in for v in specs.history(tmp_path)] == [1, 7]
    assert (specs.folder(tmp_path) / "v2.txt").read_text() == "one\ntwo\n"


def test_a_built_project_older_than_the_history_counts_its_spec_as_planned(tmp_path: Path) -> None:
    (tmp_path / "app_spec.txt").write_text("one\n")
    first = specs.note(tmp_path, 5.0, listed=True)
    assert (
        first is not None
        and (first.added_at, first.planned_in) == ("", 0)
        and specs.unplanned(tmp_path) is None
    )


def test_a_long_change_is_cut_to_its_budget_and_says_so(tmp_path: Path) -> None:
    text = specs.diff("", "".join(f"line {n} of a long new spec\n" for n in range(2000)), 1, 2)
    assert len(text.encode()) <= specs.CHANGE_BUDGET + 80 and text.endswith(
        "app_spec.txt has the whole new version)"
    )


def test_an_unreadable_history_is_one_line_saying_how_to_fix_it(tmp_path: Path) -> None:
    specs.folder(tmp_path).mkdir(parents=True)
    (specs.folder(tmp_path) / specs.INDEX).write_text("{not json")
    with pytest.raises(Exception, match="restore it from a backup, or delete it"):
        specs.history(tmp_path)


@pytest.mark.parametrize(
    ("old", "new", "added"),
    [
        ("a\nb\n", "a\nb\nc\n", ["c"]),
        ("a\nb\n", "a\n", []),
        ("a\nb\n", "a\nB\n", ["B"]),
        ("a\n", "a\n\n", []),
    ],
)
def test_the_lines_a_new_spec_adds(old: str, new: str, added: list[str]) -> None:
    assert specs.added_lines(old, new) == added


# -- what an extension may do to the list --------------------------------------------------------


@pytest.mark.parametrize(
    ("after", "said"),
    [
        ([*BEFORE, entry("F003")], None),
        ([*BEFORE], None),  # a change that asks for nothing new (a reworded line)
        ([BEFORE[0], entry("F003")], "no longer lists F002: a feature is never removed"),
        (
            [BEFORE[0], {**BEFORE[1], "description": "other"}, entry("F003")],
            "changes F002: a listed feature is never edited",
        ),
        ([{**BEFORE[0], "passes": False}, BEFORE[1], entry("F003")], "changes F001"),
        ([BEFORE[1], BEFORE[0], entry("F003")], "moves listed features: keep them first"),
        ([*BEFORE, entry("F0001")], "at or before the last listed one (F002): F0001"),
        ([*BEFORE, entry("F003", True)], "marks new features as passing (F003)"),
    ],
)
def test_an_extension_only_appends_new_features_after_the_last(
    after: list[dict[str, Any]], said: str | None
) -> None:
    problems = extension_problems(BEFORE, after)
    assert (problems == []) if said is None else any(said in p for p in problems), problems


def test_each_task_of_a_newer_task_list_is_one_feature_old_or_new() -> None:
    tasks = (Task("#2", "two", ""), Task("#3", "three", ""))
    before = [entry("F001", True, task="#1"), entry("F002", True, task="#2")]  # #1 was closed: built
    assert extension_coverage(before, [*before, entry("F003", task="#3")], tasks) == []
    missing = extension_coverage(before, [*before, entry("F003")], tasks)
    assert any('no feature names task "#3"' in p for p in missing)
    twice = extension_coverage(before, [*before, entry("F003", task="#2"), entry("F004", task="#3")], tasks)
    assert any("F002 and F003 name the same task" in p for p in twice)
    assert extension_coverage([], [entry("F001")], ()) == []  # text specs: nothing to cover


def check(
    tmp_path: Path, listed: list[dict[str, Any]], written: list[dict[str, Any]], spec: str = "x\n"
) -> str:
    """What the extend form's check tool answers for `written` over the records' `listed`."""
    records = tmp_path / "records"
    records.mkdir(parents=True)
    (records / "feature_list.json").write_text(json.dumps({"features": listed}))
    workdir = tmp_path / "clone"
    workdir.mkdir()
    (workdir / "feature_list.json").write_text(json.dumps({"features": written}))
    (workdir / "app_spec.txt").write_text(spec)
    tools = HandoffTools(
        records_of(records), T.INITIALIZER, 9, None, None, "b", workdir=workdir, evidence=None
    )
    said, failed = tools.call("check_feature_list", {})
    assert not failed
    return said


def test_the_check_tool_answers_an_extension_at_the_call(tmp_path: Path) -> None:
    nothing = check(tmp_path / "n", BEFORE, BEFORE)
    assert (
        nothing.startswith("feature_list.json is valid and adds no feature: right only when")
        and "after F002" in nothing
    )
    assert (
        check(tmp_path / "a", BEFORE, [*BEFORE, entry("F003")])
        == "feature_list.json is valid: 3 features, 1 of them new"
    )
    assert "changes F001" in check(
        tmp_path / "b", BEFORE, [{**BEFORE[0], "steps": ["t"]}, BEFORE[1], entry("F003")]
    )
    said = check(tmp_path / "c", BEFORE, [*BEFORE, entry("F003")], spec="- [ ] count the tasks\n")
    assert 'no feature names task "task 1"' in said and "Fix them, then check again." in said


# -- the schedule ----------------------------------------------------------------------------------


def built(lanes: int) -> Schedule:
    backlog = Backlog(("F001", "F002"), passing=frozenset({"F001", "F002"}))
    return Schedule(backlog, tuple(Lane(T.DONE) for _ in range(lanes)), cloned=True)


def test_a_newer_spec_is_planned_by_the_next_free_lane_while_the_others_wait_for_its_features() -> None:
    schedule = extended(built(3), CONFIG)
    assert [lane.role for lane in schedule.lanes] == [T.INITIALIZER, T.WAIT, T.WAIT] and planning(schedule)
    assert extends(schedule.view(0)) and not schedule.backlog.to_plan
    assert extended(schedule, CONFIG) == schedule  # planning already
    outcome = Outcome(
        T.INITIALIZER, ok=True, feature_ids=("F001", "F002", "F003", "F004"), depends=(("F004", ("F003",)),)
    )
    after, _ = transition_lane(schedule, 0, outcome, CONFIG)
    assert after.backlog.features == ("F001", "F002", "F003", "F004")
    assert after.backlog.passing == {"F001", "F002"}  # what passed still passes
    assert sorted(lane.work.feature_id for lane in after.lanes if lane.work) == [
        "F003"
    ]  # F004 waits for F003
    assert all(lane.role is not T.DONE for lane in after.lanes[:1])


def test_an_extension_that_fails_every_attempt_leaves_the_list_as_it_was_and_halts_nothing() -> None:
    state = SessionState(
        Backlog(("F001",), passing=frozenset({"F001"})), Lane(T.INITIALIZER, attempts=CONFIG.max_attempts - 1)
    )
    step = transition(state, Outcome(T.INITIALIZER, ok=False, reason="no list"), CONFIG)
    assert step.state.lane.role is T.DONE and not step.state.halt_reason
    assert any(isinstance(e, GaveUp) for e in step.events) and step.state.backlog.features == ("F001",)
    first = transition(
        replace(state, backlog=Backlog()), Outcome(T.INITIALIZER, ok=False, reason="no list"), CONFIG
    )
    assert first.state.lane.role is T.HALTED  # the first list cannot be done without


def test_a_schedule_without_a_feature_list_or_halted_is_not_extended() -> None:
    fresh = Schedule(cloned=True)
    assert extended(fresh, CONFIG) == fresh
    halted = replace(built(1), halt_reason="x")
    assert extended(halted, CONFIG) == halted


def test_a_waiting_plan_comes_before_any_other_work_and_keeps_a_project_unsettled() -> None:
    backlog = Backlog(("F001", "F002"), passing=frozenset({"F001"}), to_plan=True)
    assert not backlog.settled()
    step = choose_work(SessionState(backlog, Lane(T.WAIT)), CONFIG)
    assert step.state.lane == Lane(T.INITIALIZER) and not step.state.backlog.to_plan


def test_a_waiting_plan_is_saved_and_read_back(tmp_path: Path) -> None:
    schedule = replace(built(2), backlog=replace(built(2).backlog, to_plan=True))
    statefile.save(tmp_path, schedule, {})
    loaded = statefile.load(tmp_path)
    assert loaded is not None and loaded.schedule.backlog.to_plan
    statefile.save(tmp_path, built(2), {})
    assert "to_plan" not in json.loads((tmp_path / ".agent_state.json").read_text())["backlog"]


# -- the records -----------------------------------------------------------------------------------


def test_the_new_features_are_appended_to_the_records_as_they_are_when_the_session_is_applied(
    tmp_path: Path,
) -> None:
    project = tmp_path / "p"
    project.mkdir()
    (project / "feature_list.json").write_text(json.dumps({"features": [entry("F001"), entry("F002")]}))
    outbox = open_outbox(records_of(project), tmp_path / "session" / "outbox")
    (outbox.path("feature_list.json")).write_text(
        json.dumps({"features": [entry("F001"), entry("F002"), entry("F003")]})
    )
    landed = {"features": [entry("F001", True), entry("F002")]}  # another lane's work landed meanwhile
    (project / "feature_list.json").write_text(json.dumps(landed))
    apply(outbox, records_of(project), 4)  # not an extension: nothing is appended
    assert json.loads((project / "feature_list.json").read_text()) == landed
    apply(outbox, records_of(project), 4, extension=True)
    after = json.loads((project / "feature_list.json").read_text())["features"]
    assert [f["id"] for f in after] == ["F001", "F002", "F003"] and after[0]["passes"] is True


def test_the_initializer_s_form_picks_its_prompt() -> None:
    listed = SessionState(Backlog(("F001",)), Lane(T.INITIALIZER))
    assert prompts.initializer_form(SessionState(), False) == "new"
    assert prompts.initializer_form(SessionState(), True) == "existing"
    assert prompts.initializer_form(listed, True) == "extend"
    assert (
        prompts.initializer_form(SessionState(Backlog(("F001",)), Lane(T.IMPLEMENT, feature("F001"))), True)
        is None
    )
    for form in ("new", "existing", "extend"):
        assert prompts.render(T.INITIALIZER, {"PROJECT_NAME": "p", "SESSION_ID": 1, "FEATURE_COUNT": 5,
                                              "FEATURES_COMPLETED": 1, "TEST_COMMAND": "./init.sh"}, form=form)  # fmt: skip


# -- verification of the extend form ------------------------------------------------------------------


def extension_world(tmp_path: Path, spec: str = "A small app.\n") -> World:
    """A built project (F001 and F002 pass) just before the INITIALIZER's extend form."""
    project = tmp_path / "app"
    project.mkdir()
    (project / "app_spec.txt").write_text(spec)
    repo = gitops.open_repo(project)
    progress.ensure_handoff_files(project, "app")
    (project / "feature_list.json").write_text(
        json.dumps({"features": [entry("F001", True), entry("F002", True)]})
    )
    sh(project, "printf 'exit 0\\n' > init.sh && git add init.sh && git commit -qm skeleton")
    state = SessionState(
        Backlog(("F001", "F002"), passing=frozenset({"F001", "F002"})), Lane(T.INITIALIZER), session_count=3
    )
    return World(project, repo, state, capture(project, repo, state, project / ".agent_logs" / "pre"))


def extend_with(world: World, *new: dict[str, Any]) -> None:
    world.edit("feature_list.json", lambda data: data["features"].extend(new))


def test_an_extension_of_a_change_that_asks_for_nothing_new_adds_nothing_and_is_verified(
    tmp_path: Path,
) -> None:
    world = extension_world(tmp_path)
    outcome = world.verify()
    assert outcome.ok and outcome.feature_ids == ("F001", "F002"), outcome


def test_an_extension_that_appends_features_and_commits_nothing_is_verified(tmp_path: Path) -> None:
    world = extension_world(tmp_path)
    extend_with(world, entry("F003"), entry("F004", depends_on=["F003"]))
    outcome = world.verify()
    assert outcome.ok, outcome
    assert outcome.feature_ids == ("F001", "F002", "F003", "F004") and outcome.depends == (
        ("F004", ("F003",)),
    )
    assert outcome.passing == {"F001", "F002"}


@pytest.mark.parametrize(
    ("act", "rule"),
    [
        (
            lambda w: (extend_with(w, entry("F003")), w.sh("echo x >> init.sh && git commit -qam stray")),
            "changed `main`",
        ),
        (
            lambda w: w.edit(
                "feature_list.json",
                lambda d: (d["features"][0].update(description="other"), d["features"].append(entry("F003"))),
            ),
            "changes F001",
        ),
    ],
)
def test_an_extension_that_does_more_than_append_is_refused_and_undone(
    tmp_path: Path, act: Any, rule: str
) -> None:
    world = extension_world(tmp_path)
    act(world)
    refused(world, rule, exact=False)


def test_an_extension_that_leaves_a_task_of_the_spec_unbuilt_is_refused(tmp_path: Path) -> None:
    world = extension_world(tmp_path, spec="- [x] the start\n- [ ] count the tasks\n")
    extend_with(world, entry("F003"))
    refused(world, 'no feature names task "task 2"', exact=False)


def test_on_a_person_s_codebase_the_first_list_may_come_without_a_commit(tmp_path: Path) -> None:
    world = start(tmp_path, T.INITIALIZER)
    world.mark_passing()  # the list, no feature passing
    outcome = verify_session(
        world.project, world.repo, world.state, world.pre, AgentConfig(), world.lines.append, existing=True
    )
    assert outcome.ok and outcome.feature_ids == ("F001", "F002"), outcome
    refused(world, "nothing was committed on `main`")  # a new project's INITIALIZER lays its skeleton


def test_the_existing_form_is_told_what_the_person_s_configuration_names(tmp_path: Path) -> None:
    project = tmp_path / "mine"
    project.mkdir()
    sh(project, "git init -q && mkdir tests && echo 'def test_x(): pass' > tests/test_x.py")
    (project / "pyproject.toml").write_text(
        '[project]\nname = "x"\n[project.optional-dependencies]\ndev = ["pytest", "ruff"]\n'
    )
    sh(project, "git add -A && git -c user.name=a -c user.email=b commit -qm start")
    commit = sh(project, "git rev-parse HEAD").strip()
    adopted = Adoption("", "none", "main", 2, commit)
    told = planning_for(SessionState(), project, records_of(project), adopted, None)
    assert told.existing and "tests `python -m pytest -q`" in told.tools and "ruff check" in told.tools
    assert ".venv" not in told.tools
    assert "Repository map of commit" in told.repo_map and (project / ".agent_logs" / "repomap").is_dir()
    assert (
        planning_for(SessionState(), project, records_of(project), replace(adopted, files=0), None).tools
        == ""
    )
    assert tools_on(project, None) == ""  # no commit: nothing to read


def test_a_third_version_is_compared_with_the_second_and_planning_keeps_each_version_s_time(
    tmp_path: Path,
) -> None:
    specs.planned(tmp_path, 1)  # no history yet: nothing to mark
    spec = tmp_path / "app_spec.txt"
    for number, text in enumerate(("one\n", "one\ntwo\n", "one\ntwo\nthree\n"), 1):
        spec.write_text(text)
        specs.note(tmp_path, 86400.0 * number, listed=False)
        if number < 3:
            specs.planned(tmp_path, number)
    change = specs.change(tmp_path)
    assert "(version 2)" in change and "(version 3)" in change and "+three" in change and "+two" not in change
    specs.planned(tmp_path, 9)
    assert [v.added_at[:10] for v in specs.history(tmp_path)] == ["1970-01-02", "1970-01-03", "1970-01-04"]


def test_new_ids_are_held_after_the_last_one_however_long_the_list() -> None:
    before = [entry("F001", True), entry("F002", True), entry("F005")]
    said = extension_problems(before, [*before, entry("F0005")])
    assert any(
        "at or before the last listed one (F005): F0005; number new features from F006 on" in p for p in said
    )
    assert extension_problems(before, [*before, entry("F006")]) == []


def test_an_architecture_review_is_shown_the_map_of_main_and_other_roles_none(tmp_path: Path) -> None:
    project = tmp_path / "built"
    project.mkdir()
    sh(project, "git init -q && mkdir app && printf 'def add(a, b):\\n    return a + b\\n' > app/core.py")
    sh(project, "git add -A && git -c user.name=a -c user.email=b commit -qm built")
    main = sh(project, "git rev-parse HEAD").strip()
    review = SessionState(Backlog(("F001",), passing=frozenset({"F001"})), Lane(T.ARCHITECTURE))
    told = planning_for(review, project, records_of(project), NONE, main)
    assert "Repository map of commit" in told.repo_map and "def add(a, b)" in told.repo_map
    assert not told.existing and told.tasks == () and told.spec_change == ""
    implement = SessionState(Backlog(("F001",)), Lane(T.IMPLEMENT, feature("F001")))
    assert planning_for(implement, project, records_of(project), NONE, main) == NO_PLANNING
    assert planning_for(review, project, records_of(project), NONE, None).repo_map == ""  # no commit, no map
