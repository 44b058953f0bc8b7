"""Every verification rule, made to fire: a real repository, one session's doings, `verify_session`.

Each test puts a project in the state a role's session starts from, does what an agent
might do (with git and the hand-off files), and checks the verified outcome: which rule
refused the claim, and that the undo put everything back.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import git
import pytest

from session_scheduler.core.app import AppSpec
from session_scheduler.core.config import AgentConfig, SessionType
from session_scheduler.core.machine import (
    Backlog,
    Lane,
    Outcome,
    SessionState,
    WorkItem,
    architecture_fixes,
    feature,
)
from session_scheduler.repo import gitops
from session_scheduler.run.browsing import Ledger
from session_scheduler.run.verify import PreSession, capture, verify_session
from session_scheduler.store import progress

T = SessionType
CFG = AgentConfig(test_command="bash init.sh")
REVIEW = {"feature_id": "F001", "kind": "feature", "issues": {"critical": [], "major": [], "minor": []}}


def sh(cwd: Path, command: str) -> str:
    return subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, check=True).stdout


def features(
    *passing: str, steps: tuple[str, ...] = ("it works",), category: str = "functional"
) -> dict[str, Any]:
    return {
        "features": [
            {
                "id": f,
                "category": category,
                "description": f"feature {f}",
                "steps": list(steps),
                "passes": f in passing,
            }
            for f in ("F001", "F002")
        ]
    }


@dataclass
class World:
    """A project just before a session of `state.lane.role`, and what was recorded then."""

    project: Path
    repo: git.Repo
    state: SessionState
    pre: PreSession
    lines: list[str] = field(default_factory=list)
    steps: tuple[str, ...] = ()
    category: str = "functional"

    def sh(self, command: str) -> str:
        return sh(self.project, command)

    def write(self, name: str, data: Any) -> None:
        (self.project / name).write_text(json.dumps(data), encoding="utf-8")

    def edit(self, name: str, change: Callable[[dict[str, Any]], None]) -> None:
        data = json.loads((self.project / name).read_text())
        change(data)
        self.write(name, data)

    def add_review(self, verdict: str, review_id: int = 2, **extra: Any) -> None:
        self.edit(
            "reviews.json",
            lambda r: r["reviews"].append({**REVIEW, "review_id": review_id, "verdict": verdict, **extra}),
        )

    def mark_passing(self, *ids: str) -> None:
        self.write("feature_list.json", features(*ids, steps=self.steps, category=self.category))

    def verify(self, config: AgentConfig = CFG, folder: Path | None = None, **more: Any) -> Outcome:
        return verify_session(
            self.project, self.repo, self.state, self.pre, config, self.lines.append, folder=folder, **more
        )

    def head(self, branch: str) -> str | None:
        return gitops.head(self.repo, branch)


def start(
    tmp_path: Path,
    role: SessionType,
    work: WorkItem | None = None,
    steps: tuple[str, ...] = (),
    category: str = "functional",
    **lane: Any,
) -> World:
    """Build the project as the scheduler leaves it before a `role` session on `work`."""
    project = tmp_path / "app"
    project.mkdir()
    (project / "app_spec.txt").write_text("A small app.\n")
    repo = gitops.open_repo(project)
    progress.ensure_handoff_files(project, "app")
    backlog = Backlog()
    if role is not T.INITIALIZER:
        (project / "feature_list.json").write_text(json.dumps(features(steps=steps, category=category)))
        sh(project, "printf 'exit 0\\n' > init.sh && git add init.sh && git commit -qm skeleton")
        backlog = Backlog(("F001", "F002"))
    if work is not None:
        sh(
            project,
            f"git checkout -qb {work.branch} && echo one > one.txt && git add one.txt && git commit -qm one",
        )
        sh(project, "git checkout -q main")
        if role is T.IMPLEMENT:  # the IMPLEMENT session creates its branch itself
            sh(project, f"git branch -D {work.branch}")
        else:
            sh(project, f"git checkout -q {work.branch}")
    if role is T.FIX:
        (project / "reviews.json").write_text(
            json.dumps({"reviews": [{**REVIEW, "review_id": 1, "verdict": "REQUEST_CHANGES"}], "fixes": []})
        )
    state = SessionState(backlog, Lane(role, work, **lane), session_count=3)
    pre = capture(project, repo, state, project / ".agent_logs" / "pre")
    if role is T.INITIALIZER and not steps:  # the list it writes gives each feature 1 to 6 steps
        steps = ("it works",)
    return World(project, repo, state, pre, steps=steps, category=category)


def refused(world: World, rule: str, *, exact: bool = True) -> Outcome:
    """The session is refused for `rule` (the whole reason, unless exact=False), and undone."""
    outcome = world.verify()
    if exact:
        assert outcome == Outcome(world.state.lane.role, False, reason=rule)
    else:
        assert (outcome.role, outcome.ok) == (world.state.lane.role, False) and rule in outcome.reason, (
            outcome
        )
    assert progress.load_handoff(world.project) == world.pre.handoff, "the hand-off files are restored"
    assert gitops.branches(world.repo) == world.pre.heads, "every branch is put back"
    return outcome


# -- INITIALIZER -------------------------------------------------------------------------------


def initialize(world: World, *passing: str) -> None:
    world.mark_passing(*passing)
    world.sh("printf 'exit 0\\n' > init.sh && git add init.sh && git commit -qm skeleton")


def test_initializer_verified(tmp_path: Path) -> None:
    world = start(tmp_path, T.INITIALIZER)
    initialize(world)
    outcome = world.verify()
    assert outcome == Outcome(T.INITIALIZER, True, feature_ids=("F001", "F002"))


def test_initializer_dependencies_reach_the_outcome(tmp_path: Path) -> None:
    world = start(tmp_path, T.INITIALIZER)
    initialize(world)
    listed = features()
    listed["features"][1]["depends_on"] = ["F001"]
    world.write("feature_list.json", listed)
    outcome = world.verify()
    assert outcome == Outcome(
        T.INITIALIZER, True, feature_ids=("F001", "F002"), depends=(("F002", ("F001",)),)
    )


@pytest.mark.parametrize(
    ("first", "second", "problem"),
    [
        (["F002"], ["F001"], "features depend on each other in a circle (F001 -> F002 -> F001)"),
        ([], ["F002"], "F002 depends on itself"),
        ([], ["F009"], "F002 depends on F009, which is not in the list"),
    ],
)
def test_initializer_listing_dependencies_no_feature_could_meet(
    tmp_path: Path, first: list[str], second: list[str], problem: str
) -> None:
    world = start(tmp_path, T.INITIALIZER)
    initialize(world)
    listed = features()
    listed["features"][0]["depends_on"] = first
    listed["features"][1]["depends_on"] = second
    world.write("feature_list.json", listed)
    refused(world, f"feature_list.json: {problem}")


def test_initializer_without_a_feature_list(tmp_path: Path) -> None:
    world = start(tmp_path, T.INITIALIZER)
    world.sh("printf 'exit 0\\n' > init.sh && git add init.sh && git commit -qm skeleton")
    refused(world, "no feature_list.json was written")


def test_initializer_marking_features_passing(tmp_path: Path) -> None:
    world = start(tmp_path, T.INITIALIZER)
    initialize(world, "F002")
    refused(world, "the INITIALIZER marked features as passing")


def test_initializer_that_commits_nothing(tmp_path: Path) -> None:
    world = start(tmp_path, T.INITIALIZER)
    world.mark_passing()
    refused(world, "nothing was committed on `main`")


def test_initializer_creating_a_branch(tmp_path: Path) -> None:
    world = start(tmp_path, T.INITIALIZER)
    initialize(world)
    world.sh("git branch feature/F001 && git branch x")
    refused(world, "INITIALIZER changed branches it does not own: feature/F001, x")


@pytest.mark.parametrize("hidden", [False, True])
def test_initializer_committing_scheduler_files(tmp_path: Path, hidden: bool) -> None:
    world = start(tmp_path, T.INITIALIZER)
    world.mark_passing()
    world.sh(
        "printf 'exit 0\\n' > init.sh && git add init.sh && git add -f progress.json && git commit -qm skeleton"
    )
    if hidden:  # committed, then untracked again: only the commits show it
        world.sh("git rm -q --cached progress.json")
    refused(world, "hand-off or scheduler files were committed: progress.json")


# -- IMPLEMENT ---------------------------------------------------------------------------------


def implement(world: World, branch: str = "feature/F001") -> None:
    world.sh(f"git checkout -qb {branch} && echo code > code.py && git add code.py && git commit -qm feat")


def test_implement_verified(tmp_path: Path) -> None:
    world = start(tmp_path, T.IMPLEMENT, feature("F001"))
    implement(world)
    assert world.verify() == Outcome(T.IMPLEMENT, True)


def test_implement_committing_on_main(tmp_path: Path) -> None:
    world = start(tmp_path, T.IMPLEMENT, feature("F001"))
    implement(world)
    world.sh("git checkout -q main && echo x >> init.sh && git commit -qam stray")
    refused(world, "IMPLEMENT changed `main`; only a REVIEW whose PASS holds merges into it")
    assert "stray" in world.sh("git log --format=%s refs/scheduler/undone/session-4/main")


def test_implement_without_its_branch(tmp_path: Path) -> None:
    world = start(tmp_path, T.IMPLEMENT, feature("F001"))
    refused(world, "branch feature/F001 does not exist")


def test_implement_without_new_commits(tmp_path: Path) -> None:
    world = start(tmp_path, T.IMPLEMENT, feature("F001"))
    world.sh("git branch feature/F001")
    refused(world, "no new commits on feature/F001 since the session started")


def test_implement_on_a_branch_that_does_not_start_from_main(tmp_path: Path) -> None:
    world = start(tmp_path, T.IMPLEMENT, feature("F001"))
    world.sh(
        "git checkout -q --orphan feature/F001 && git rm -rqf . && echo x > x && git add x && git commit -qm orphan"
    )
    refused(world, "no new commits on feature/F001 since the session started")


def test_implement_creating_another_branch(tmp_path: Path) -> None:
    world = start(tmp_path, T.IMPLEMENT, feature("F001"))
    implement(world)
    world.sh("git branch stray")
    refused(world, "IMPLEMENT changed branches it does not own: stray")


def test_implement_committing_claude_md_with_everything_else(tmp_path: Path) -> None:
    """A project's CLAUDE.md is an ordinary file (the person's), not the scheduler's: an agent that
    stages everything, a CLAUDE.md among it, is verified like any other."""
    world = start(tmp_path, T.IMPLEMENT, feature("F001"))
    world.sh("git checkout -qb feature/F001 && echo code > code.py && printf 'Use tabs.\\n' > CLAUDE.md")
    world.sh("git add -A && git commit -qm 'feat: all of it'")
    assert world.sh("git show --name-only --format= feature/F001").split() == ["CLAUDE.md", "code.py"]
    assert world.verify() == Outcome(T.IMPLEMENT, True)


@pytest.mark.parametrize("hidden", [False, True])
def test_implement_committing_a_handoff_file(tmp_path: Path, hidden: bool) -> None:
    world = start(tmp_path, T.IMPLEMENT, feature("F001"))
    implement(world)
    world.sh("git add -f feature_list.json && git commit -qm 'track it'")
    if hidden:
        world.sh("git rm -q --cached feature_list.json")
    refused(world, "hand-off or scheduler files were committed: feature_list.json")


def test_implement_setting_passes(tmp_path: Path) -> None:
    world = start(tmp_path, T.IMPLEMENT, feature("F001"))
    implement(world)
    world.mark_passing("F001")
    refused(world, "IMPLEMENT changed `passes`; only REVIEW may")


def test_implement_rewriting_an_earlier_session_entry(tmp_path: Path) -> None:
    world = start(tmp_path, T.IMPLEMENT, feature("F001"))
    world.edit(
        "progress.json",
        lambda p: p["sessions"].append({"session_id": 1, "agent_type": "IMPLEMENT", "outcome": "x"}),
    )
    world.pre = capture(world.project, world.repo, world.state, world.project / ".agent_logs" / "pre2")
    implement(world)
    world.edit("progress.json", lambda p: p["sessions"][0].update(outcome="rewritten"))
    refused(world, "earlier session entries of progress.json were changed or removed")


def test_every_broken_contract_rule_is_named(tmp_path: Path) -> None:
    world = start(tmp_path, T.IMPLEMENT, feature("F001"))
    implement(world)
    world.mark_passing("F001")
    world.add_review("PASS")
    refused(
        world,
        "IMPLEMENT changed `passes`; only REVIEW may; IMPLEMENT appended a review it may not write (no reviews only)",
    )


def test_a_broken_handoff_file_is_refused_and_restored(tmp_path: Path) -> None:
    world = start(tmp_path, T.IMPLEMENT, feature("F001"))
    implement(world)
    (world.project / "reviews.json").write_text('{"reviews": [')
    refused(world, "reviews.json is not valid JSON (line 1, column", exact=False)


# -- FIX -------------------------------------------------------------------------------------------


def fix(world: World, review_id: int = 1) -> None:
    world.sh("echo fixed >> one.txt && git commit -qam fix")
    world.edit(
        "reviews.json", lambda r: r["fixes"].append({"fix_id": 1, "review_id": review_id, "issues_fixed": []})
    )


def test_fix_verified(tmp_path: Path) -> None:
    world = start(tmp_path, T.FIX, feature("F001"), open_review=1, fix_rounds=1)
    fix(world)
    assert world.verify() == Outcome(T.FIX, True)


def test_fix_recorded_against_the_wrong_review(tmp_path: Path) -> None:
    world = start(tmp_path, T.FIX, feature("F001"), open_review=1, fix_rounds=1)
    fix(world, review_id=7)
    refused(world, "no fix entry for review 1 in reviews.json")


def test_fix_without_new_commits(tmp_path: Path) -> None:
    world = start(tmp_path, T.FIX, feature("F001"), open_review=1, fix_rounds=1)
    world.edit("reviews.json", lambda r: r["fixes"].append({"fix_id": 1, "review_id": 1, "issues_fixed": []}))
    refused(world, "no new commits on feature/F001 since the session started")


def test_fix_merging_into_main(tmp_path: Path) -> None:
    world = start(tmp_path, T.FIX, feature("F001"), open_review=1, fix_rounds=1)
    fix(world)
    world.sh("git checkout -q main && git merge -q --no-ff feature/F001 -m merge")
    refused(world, "FIX changed `main`; only a REVIEW whose PASS holds merges into it")


def test_fix_appending_a_review(tmp_path: Path) -> None:
    world = start(tmp_path, T.FIX, feature("F001"), open_review=1, fix_rounds=1)
    fix(world)
    world.add_review("PASS")
    refused(world, "FIX appended a review it may not write (no reviews only)")


# -- ARCHITECTURE ----------------------------------------------------------------------------------


def test_architecture_verified_with_the_last_appended_review(tmp_path: Path) -> None:
    world = start(tmp_path, T.ARCHITECTURE)
    for review_id, verdict in ((1, "REQUEST_CHANGES"), (2, "PASS"), (3, "REQUEST_CHANGES")):
        world.add_review(verdict, review_id, feature_id=None, kind="architecture")
    assert world.verify() == Outcome(T.ARCHITECTURE, True, verdict="REQUEST_CHANGES", review_id=3)


def test_architecture_without_a_review(tmp_path: Path) -> None:
    world = start(tmp_path, T.ARCHITECTURE)
    refused(world, "no architecture review was appended to reviews.json")


def test_architecture_writing_a_feature_review(tmp_path: Path) -> None:
    world = start(tmp_path, T.ARCHITECTURE)
    world.add_review("PASS")
    refused(world, "ARCHITECTURE appended a review it may not write (architecture reviews only)")


def test_architecture_moving_a_branch(tmp_path: Path) -> None:
    world = start(tmp_path, T.ARCHITECTURE)
    world.add_review("PASS", feature_id=None, kind="architecture")
    world.sh("git branch arch/1")
    refused(world, "ARCHITECTURE changed branches it does not own: arch/1")


# -- REVIEW ----------------------------------------------------------------------------------------


def merge(world: World, branch: str = "feature/F001", how: str = "--no-ff") -> None:
    world.sh(f"git checkout -q main && git merge -q {how} {branch} -m 'Merge {branch}'")


def test_review_pass_verified_with_a_merge_commit(tmp_path: Path) -> None:
    world = start(tmp_path, T.REVIEW, feature("F001"))
    merge(world)
    world.add_review("PASS")
    world.mark_passing("F001")
    outcome = world.verify()
    assert [(r.name, r.passed) for r in outcome.gates] == [("tests", True)]  # the test command is the gate
    assert replace(outcome, gates=()) == Outcome(
        T.REVIEW, True, verdict="PASS", review_id=2, passing=frozenset({"F001"})
    )
    assert any("`bash init.sh` passes on main" in line for line in world.lines)


def test_review_pass_verified_with_a_fast_forward(tmp_path: Path) -> None:
    world = start(tmp_path, T.REVIEW, feature("F001"))
    merge(world, how="--ff-only")
    world.add_review("PASS")
    world.mark_passing("F001")
    assert world.verify().ok


def test_review_without_a_review_of_its_feature(tmp_path: Path) -> None:
    world = start(tmp_path, T.REVIEW, feature("F001"))
    world.add_review("REJECT", feature_id="F002")
    refused(world, "no review of F001 was appended to reviews.json")


@pytest.mark.parametrize("verdict", ["REJECT", "REQUEST_CHANGES"])
def test_review_verdicts_other_than_pass_keep_every_branch(tmp_path: Path, verdict: str) -> None:
    world = start(tmp_path, T.REVIEW, feature("F001"))
    tip = world.head("feature/F001")
    world.add_review(verdict)
    assert world.verify() == Outcome(T.REVIEW, True, verdict=verdict, review_id=2)
    assert gitops.branches(world.repo) == world.pre.heads  # main and every branch where they were
    assert tip is not None and world.head("feature/F001") == tip
    assert not gitops.is_ancestor(world.repo, "feature/F001", "main")  # nothing merged


def test_review_request_changes_that_merges_anyway(tmp_path: Path) -> None:
    world = start(tmp_path, T.REVIEW, feature("F001"))
    merge(world)
    world.add_review("REQUEST_CHANGES")
    refused(world, "REVIEW changed `main`; only a REVIEW whose PASS holds merges into it")


def test_review_request_changes_that_sets_passes(tmp_path: Path) -> None:
    world = start(tmp_path, T.REVIEW, feature("F001"))
    world.add_review("REQUEST_CHANGES")
    world.mark_passing("F001")
    refused(world, "`passes` changed although the verdict is REQUEST_CHANGES")


@pytest.mark.parametrize("passing", [(), ("F002",), ("F001", "F002")])
def test_review_pass_must_set_passes_on_its_feature_alone(tmp_path: Path, passing: tuple[str, ...]) -> None:
    world = start(tmp_path, T.REVIEW, feature("F001"))
    merge(world)
    world.add_review("PASS")
    world.mark_passing(*passing)
    refused(world, f"a PASS must set `passes` on F001 and nothing else (changed: {sorted(passing)})")


STEPS = ("Run `todo add milk` -> prints `1`", "Run `todo list` -> prints `1 milk`")
GRADED = [{"step": 1, "passed": True, "evidence": "printed 1"}, {"step": 2, "passed": True, "evidence": "ok"}]


def test_review_pass_verified_with_every_acceptance_step_passed(tmp_path: Path) -> None:
    world = start(tmp_path, T.REVIEW, feature("F001"), steps=STEPS)
    merge(world)
    world.add_review("PASS", acceptance=GRADED)
    world.mark_passing("F001")
    assert replace(world.verify(), gates=()) == Outcome(
        T.REVIEW, True, verdict="PASS", review_id=2, passing=frozenset({"F001"})
    )


def test_review_pass_without_its_acceptance_results_is_refused(tmp_path: Path) -> None:
    world = start(tmp_path, T.REVIEW, feature("F001"), steps=STEPS)
    merge(world)
    world.add_review("PASS")
    world.mark_passing("F001")
    refused(world, "a PASS must grade every acceptance step: no result for step(s) 1, 2", exact=False)


def test_review_request_changes_without_a_failed_step_or_an_issue_is_refused(tmp_path: Path) -> None:
    world = start(tmp_path, T.REVIEW, feature("F001"), steps=STEPS)
    world.add_review("REQUEST_CHANGES", acceptance=GRADED)
    refused(world, "a REQUEST_CHANGES names what to change: a failed acceptance step or an issue")


def test_review_request_changes_with_a_failed_step_verified(tmp_path: Path) -> None:
    world = start(tmp_path, T.REVIEW, feature("F001"), steps=STEPS)
    world.add_review("REQUEST_CHANGES", acceptance=[GRADED[0], {**GRADED[1], "passed": False}])
    assert world.verify() == Outcome(T.REVIEW, True, verdict="REQUEST_CHANGES", review_id=2)


def test_review_pass_without_a_merge(tmp_path: Path) -> None:
    world = start(tmp_path, T.REVIEW, feature("F001"))
    world.add_review("PASS")
    world.mark_passing("F001")
    refused(
        world,
        "verdict PASS but `main` is not feature/F001 merged into the old `main` (expected one `git merge --no-ff` or a fast-forward)",
    )


def test_review_pass_with_an_extra_commit_on_main(tmp_path: Path) -> None:
    world = start(tmp_path, T.REVIEW, feature("F001"))
    merge(world)
    world.sh("echo more >> init.sh && git commit -qam sneaked")
    world.add_review("PASS")
    world.mark_passing("F001")
    refused(
        world,
        "verdict PASS but `main` is not feature/F001 merged into the old `main` (expected one `git merge --no-ff` or a fast-forward)",
    )


def test_review_pass_merging_a_moved_branch(tmp_path: Path) -> None:
    world = start(tmp_path, T.REVIEW, feature("F001"))
    world.sh("echo more >> one.txt && git commit -qam later")
    merge(world)
    world.add_review("PASS")
    world.mark_passing("F001")
    refused(world, "REVIEW changed branches it does not own: feature/F001")


def test_review_pass_whose_merge_adds_a_scheduler_file(tmp_path: Path) -> None:
    world = start(tmp_path, T.REVIEW, feature("F001"))
    world.sh(
        "git checkout -q main && git merge -q --no-ff --no-commit feature/F001 && touch .claude_settings.json .agent.lock"
    )
    world.sh(
        "git add -f .claude_settings.json .agent.lock && git commit -qm merge && git rm -q --cached .claude_settings.json"
    )
    world.add_review("PASS")
    world.mark_passing("F001")
    refused(world, "hand-off or scheduler files were committed: .agent.lock, .claude_settings.json")


def test_review_pass_whose_tests_fail_on_main_is_undone(tmp_path: Path) -> None:
    world = start(tmp_path, T.REVIEW, feature("F001"))
    world.sh(
        "git checkout -q feature/F001 && printf 'printf \"%%0600d\" 7; exit 1\\n' > init.sh && git commit -qam 'break the tests'"
    )
    world.add_review("REQUEST_CHANGES", review_id=1)
    world.mark_passing("F002")
    world.pre = capture(world.project, world.repo, world.state, world.project / ".agent_logs" / "pre2")
    merge(world)
    merged = world.head("main")
    world.sh("git checkout -q feature/F001")  # the tests run on `main`, not on what is checked out
    world.add_review("PASS")
    world.mark_passing("F001", "F002")
    outcome = world.verify()
    assert [(r.name, r.passed) for r in outcome.gates] == [("tests", False)]
    assert replace(outcome, gates=()) == Outcome(
        T.REVIEW,
        True,
        verdict="REQUEST_CHANGES",
        review_id=2,
        passing=frozenset({"F002"}),
        undone="tests failed on main after the merge; the merge was undone and the PASS counts as REQUEST_CHANGES",
    )
    assert world.head("main") == world.pre.main
    handoff = progress.load_handoff(world.project)
    earlier, review = handoff.review_list()
    assert "verified_verdict" not in earlier and review["verified_verdict"] == "REQUEST_CHANGES"
    assert review["scheduler_findings"] == ["tests failed on main after merging: " + "0" * 499 + "7"]
    assert handoff.passing() == frozenset({"F002"})
    assert world.sh("git rev-parse refs/scheduler/undone/session-4/main").strip() == merged
    assert world.lines == ["  undo: merge reverted, tests fail on main; PASS counts as REQUEST_CHANGES"]


def test_review_pass_the_queue_tests_runs_no_gate_on_its_own_merge(tmp_path: Path) -> None:
    """`main` will move before the work lands: the queue tests what it lands, so the REVIEW's
    merge is not tested here too (one test run per landing): even red tests pass here."""
    world = start(tmp_path, T.REVIEW, feature("F001"))
    world.sh(
        "git checkout -q feature/F001 && printf 'exit 1\\n' > init.sh && git commit -qam 'break the tests'"
    )
    world.pre = capture(world.project, world.repo, world.state, world.project / ".agent_logs" / "pre2")
    merge(world)
    world.add_review("PASS")
    world.mark_passing("F001")
    outcome = world.verify(queue_tests=True)
    assert outcome == Outcome(T.REVIEW, True, verdict="PASS", review_id=2, passing=frozenset({"F001"}))
    assert world.lines == [
        "  verified: the merge; its gates run once, in the merge queue (`main` may move first)"
    ]
    assert world.verify().verdict == "REQUEST_CHANGES"  # without the queue's test: its own, red


def test_review_pass_without_a_test_command_trusts_the_merge(tmp_path: Path) -> None:
    world = start(tmp_path, T.REVIEW, feature("F001"))
    world.sh("printf 'exit 1\\n' > init.sh && git commit -qam 'break the tests'")
    world.pre = capture(world.project, world.repo, world.state, world.project / ".agent_logs" / "pre2")
    merge(world)
    world.add_review("PASS")
    world.mark_passing("F001")
    assert world.verify(AgentConfig()).verdict == "PASS"


def test_review_pass_of_an_architecture_branch_sets_no_passes(tmp_path: Path) -> None:
    world = start(tmp_path, T.REVIEW, architecture_fixes(1))
    merge(world, "arch/1")
    world.add_review("PASS", feature_id=None, branch="arch/1")
    assert replace(world.verify(), gates=()) == Outcome(T.REVIEW, True, verdict="PASS", review_id=2)


def test_review_pass_of_an_architecture_branch_that_sets_passes(tmp_path: Path) -> None:
    world = start(tmp_path, T.REVIEW, architecture_fixes(1))
    merge(world, "arch/1")
    world.add_review("PASS", feature_id=None, branch="arch/1")
    world.mark_passing("F001")
    refused(world, "a PASS must set `passes` on no feature and nothing else (changed: ['F001'])")


def test_review_of_a_deleted_branch(tmp_path: Path) -> None:
    world = start(tmp_path, T.REVIEW, feature("F001"))
    world.pre = PreSession(world.pre.main, None, world.pre.handoff, world.pre.copies, world.pre.heads)
    merge(world)
    world.add_review("PASS")
    world.mark_passing("F001")
    refused(world, "verdict PASS but feature/F001 does not exist")


# -- what makes git run code, committed ------------------------------------------------------------

REPO_CODE = "commits add what makes git run code: {}. The scheduler refuses them unless the project allows it: run again with --allow-repo-code (saved with the project)"


def nest(world: World, path: str = "vendor/lib") -> None:
    """Commit a nested repository as a gitlink on the branch checked out."""
    world.sh(
        f"git init -q {path} && git -C {path} commit -q --allow-empty -m n && git add {path} 2>/dev/null && git commit -qm nested"
    )


def attributes(world: World, text: str, path: str = ".gitattributes") -> None:
    (world.project / path).parent.mkdir(parents=True, exist_ok=True)
    (world.project / path).write_text(text)
    world.sh(f"git add {path} && git commit -qm attributes")


def test_implement_committing_a_nested_repository(tmp_path: Path) -> None:
    world = start(tmp_path, T.IMPLEMENT, feature("F001"))
    implement(world)
    nest(world)
    refused(world, REPO_CODE.format("a nested repository (gitlink) at vendor/lib"))


def test_a_project_may_allow_what_makes_git_run_code(tmp_path: Path) -> None:
    world = start(tmp_path, T.IMPLEMENT, feature("F001"))
    implement(world)
    nest(world)
    attributes(world, "* filter=lfs\n")
    assert world.verify(AgentConfig(allow_repo_code=True)) == Outcome(T.IMPLEMENT, True)


@pytest.mark.parametrize(
    ("text", "selected"),
    [
        ("*.bin filter=lfs diff=lfs merge=lfs -text\n", "filter=lfs, diff=lfs, merge=lfs"),
        ("[attr]evil filter=x\n*.c evil\n", "filter=x"),
        ("*.c diff=evil\n", "diff=evil"),
        ("*.c merge=ours\n", "merge=ours"),
        (
            "*.py diff=python\n*.txt merge=union\n*.md -diff !merge binary\n# *.x filter=y\n\n[attr]b -diff -text\n",
            None,
        ),
        ("filter=x -text\n*.x filter diff merge\n", None),  # a pattern; attributes set without a driver
    ],
)
def test_implement_committing_attributes_that_select_drivers(
    tmp_path: Path, text: str, selected: str | None
) -> None:
    world = start(tmp_path, T.IMPLEMENT, feature("F001"))
    implement(world)
    attributes(world, text)
    if selected is None:
        assert world.verify() == Outcome(T.IMPLEMENT, True)
    else:
        refused(world, REPO_CODE.format(f".gitattributes selecting {selected}"))


def test_fix_committing_attributes_in_a_folder_and_a_link(tmp_path: Path) -> None:
    world = start(tmp_path, T.FIX, feature("F001"), open_review=1, fix_rounds=1)
    fix(world)
    attributes(world, "* filter=x\n", "docs/x.gitattributes")  # not an attributes file
    attributes(world, "* merge=m\n", "sub/.gitattributes")
    world.sh(
        "ln -s sub/.gitattributes .gitattributes && ln -s sub/.gitattributes x.gitattributes && git add . && git commit -qm links"
    )
    refused(
        world,
        REPO_CODE.format(
            ".gitattributes as a symbolic link (git before 2.32 follows it); sub/.gitattributes selecting merge=m"
        ),
    )


def test_a_nested_repository_or_attributes_already_there_may_change_or_go(tmp_path: Path) -> None:
    world = start(tmp_path, T.IMPLEMENT, feature("F001"))
    world.sh("git checkout -q main")
    nest(world)
    attributes(world, "* filter=x\n")
    world.pre = capture(world.project, world.repo, world.state, world.project / ".agent_logs" / "pre2")
    implement(world)
    world.sh(
        "git -C vendor/lib commit -q --allow-empty -m more && git add vendor/lib && git rm -q .gitattributes && git commit -qm moved"
    )
    assert world.verify() == Outcome(T.IMPLEMENT, True)


def test_initializer_committing_a_nested_repository(tmp_path: Path) -> None:
    world = start(tmp_path, T.INITIALIZER)
    initialize(world)
    nest(world, "lib")
    refused(world, REPO_CODE.format("a nested repository (gitlink) at lib"))


def test_review_pass_whose_merge_adds_attributes_that_select_a_filter(tmp_path: Path) -> None:
    world = start(tmp_path, T.REVIEW, feature("F001"))
    attributes(world, "*.txt filter=evil\n")
    world.pre = capture(world.project, world.repo, world.state, world.project / ".agent_logs" / "pre2")
    merge(world)
    world.add_review("PASS")
    world.mark_passing("F001")
    refused(world, REPO_CODE.format(".gitattributes selecting filter=evil"))


# -- the undo --------------------------------------------------------------------------------------


def test_undo_removes_new_branches_and_keeps_their_commits(tmp_path: Path) -> None:
    world = start(tmp_path, T.IMPLEMENT, feature("F001"))
    implement(world)
    tip = world.head("feature/F001")
    world.sh("git branch -f main feature/F001")
    refused(world, "IMPLEMENT changed `main`; only a REVIEW whose PASS holds merges into it")
    assert world.head("feature/F001") is None
    assert world.sh("git rev-parse refs/scheduler/undone/session-4/feature/F001").strip() == tip
    assert world.lines == [
        "  undo: feature/F001 removed (its commits are kept in refs/scheduler/undone/session-4)",
        f"  undo: main reset to {world.pre.main[:10]}",
    ]


def test_capture_needs_main(tmp_path: Path) -> None:
    from session_scheduler.core.errors import StateError

    world = start(tmp_path, T.ARCHITECTURE)
    world.sh("git checkout -q -b other && git branch -D main")
    with pytest.raises(
        StateError,
        match=r"^the project's repository has no `main` branch; restore it or start a new project$",
    ):
        capture(world.project, world.repo, world.state, tmp_path / "copies")


# -- REVIEW of a web feature: the browser's evidence -------------------------------------------

WEB_APP = AppSpec("exec python3 -m http.server $PORT --bind 127.0.0.1", ready_path="/")
WEB_CFG = AgentConfig(test_command="bash init.sh", app=WEB_APP, sandbox=False)
"""The person's app (a static server: it starts in a moment), run unconfined for the app gate."""
WEB_STEPS = ("Open `/` -> the page shows `todo`", "Click `Add` -> the list shows `milk`")


def browsed(folder: Path, *, console: bool = True) -> list[dict[str, Any]]:
    """A session folder whose ledger shows two steps' snapshots and screenshots (and the console's
    messages): the acceptance results that cite them."""
    ledger = Ledger(folder)
    for _ in WEB_STEPS:
        ledger.after_call(
            "mcp__browser__browser_snapshot", {}, [{"type": "text", "text": "- heading"}], False
        )
        png = {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
        }
        ledger.after_call("mcp__browser__browser_take_screenshot", {}, [png], False)
    if console:
        ledger.after_call("mcp__browser__browser_console_messages", {}, [{"type": "text", "text": ""}], False)
    return [
        {"step": 1, "passed": True, "evidence": "saw todo", "snapshot": "snapshot-1.yml", "screenshot": "screenshot-2.png"},
        {"step": 2, "passed": True, "evidence": "saw milk", "snapshot": "snapshot-3.yml", "screenshot": "screenshot-4.png"},
    ]  # fmt: skip


def web_pass(
    tmp_path: Path, acceptance: list[dict[str, Any]] | None = None, *, console: bool = True
) -> World:
    world = start(tmp_path, T.REVIEW, feature("F001"), steps=WEB_STEPS, category="web")
    cited = browsed(tmp_path / "session", console=console)
    merge(world)
    world.add_review("PASS", acceptance=cited if acceptance is None else acceptance)
    world.mark_passing("F001")
    return world


def refused_web(world: World, rule: str, folder: Path | None) -> None:
    outcome = world.verify(WEB_CFG, folder)
    assert not outcome.ok and rule in outcome.reason, outcome
    assert (
        progress.load_handoff(world.project) == world.pre.handoff
        and gitops.branches(world.repo) == world.pre.heads
    )


def test_a_web_pass_citing_its_sessions_snapshots_and_screenshots_is_verified(tmp_path: Path) -> None:
    world = web_pass(tmp_path)
    outcome = world.verify(WEB_CFG, tmp_path / "session")
    assert outcome.ok and outcome.verdict == "PASS", outcome


def test_a_web_pass_without_the_browser_is_refused(tmp_path: Path) -> None:
    world = web_pass(tmp_path)
    refused_web(world, "a PASS on a web feature needs this session's browser evidence", None)


def test_a_web_pass_citing_nothing_is_refused(tmp_path: Path) -> None:
    world = web_pass(tmp_path, [{"step": n, "passed": True, "evidence": "looked fine"} for n in (1, 2)])
    refused_web(world, "step 1 cites no snapshot", tmp_path / "session")


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        ({"snapshot": "snapshot-9.yml"}, "cites snapshot 'snapshot-9.yml', which this session's browser did not make"),
        ({"snapshot": "screenshot-2.png"}, "cites snapshot 'screenshot-2.png', which this session's browser did not make"),
        ({"screenshot": "screenshot-2.png", "snapshot": "snapshot-1.yml"}, "steps 1 and 2 cite the same snapshot 'snapshot-1.yml'"),
    ],
)  # fmt: skip
def test_a_web_pass_citing_what_its_browser_did_not_make_for_that_step_is_refused(
    tmp_path: Path, change: dict[str, str], rule: str
) -> None:
    cited = browsed(tmp_path / "probe")
    world = web_pass(tmp_path, [cited[0], {**cited[1], **change}])
    refused_web(world, rule, tmp_path / "session")


def test_a_web_pass_whose_evidence_file_is_gone_or_a_link_is_refused(tmp_path: Path) -> None:
    world = web_pass(tmp_path)
    shot = tmp_path / "session" / "evidence" / "screenshot-4.png"
    shot.unlink()
    shot.symlink_to(tmp_path / "session" / "evidence" / "screenshot-2.png")
    refused_web(
        world,
        "cites screenshot 'screenshot-4.png', which this session's browser did not make",
        tmp_path / "session",
    )


def test_a_web_pass_that_never_read_the_console_is_refused(tmp_path: Path) -> None:
    world = web_pass(tmp_path, console=False)
    refused_web(world, "reads the console's messages (browser_console_messages)", tmp_path / "session")


def test_a_web_feature_in_a_project_without_an_app_needs_no_browser(tmp_path: Path) -> None:
    world = web_pass(tmp_path, [{"step": n, "passed": True, "evidence": "ran it"} for n in (1, 2)])
    assert world.verify(CFG, None).ok


def test_a_web_request_changes_needs_no_evidence(tmp_path: Path) -> None:
    world = start(tmp_path, T.REVIEW, feature("F001"), steps=WEB_STEPS, category="web")
    world.add_review(
        "REQUEST_CHANGES", acceptance=[{"step": n, "passed": False, "evidence": "no button"} for n in (1, 2)]
    )
    assert world.verify(WEB_CFG, None).ok


@pytest.mark.parametrize("named", [True, False])
def test_implement_committing_a_local_file_the_person_keeps_out_of_git(tmp_path: Path, named: bool) -> None:
    world = start(tmp_path, T.IMPLEMENT, feature("F001"))
    implement(world)
    world.sh("echo KEY=1 > .env && git add -f .env && git commit -qm env")
    outcome = world.verify(replace(CFG, local_files=(".env",) if named else ()))
    if not named:  # a file like any other
        assert outcome == Outcome(T.IMPLEMENT, True)
        return
    assert not outcome.ok and outcome.reason.startswith("the project's local files were committed: .env"), (
        outcome
    )
    assert gitops.branches(world.repo) == world.pre.heads, "every branch is put back"
