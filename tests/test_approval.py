"""Where verified work lands (repo/landing.py) and the person's `approve` and `send-back` on a
project whose work lands on a review branch (run/approval.py), on real git repositories built
here as a run leaves them: the person's branch `develop`, the review branch `agents/2026-11-28`
holding each feature as a `--no-ff` merge of its `feature/F00N` branch, and the queue's
`merge_verified` events. No Claude Code, no network."""

from __future__ import annotations

import calendar
import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from git import exc as git_exc
from helpers import require_runtime

from session_scheduler.core.config import AgentConfig, SessionType
from session_scheduler.core.errors import BadInput, GitError
from session_scheduler.core.machine import Backlog, Lane, WorkItem
from session_scheduler.core.schedule import Schedule
from session_scheduler.core.session import InFlight
from session_scheduler.guard import safe_git
from session_scheduler.repo import adoption, gitops, landing
from session_scheduler.repo.adoption import Adoption
from session_scheduler.run import approval
from session_scheduler.store import events, progress, statefile
from session_scheduler.store.events import EventLog

T = SessionType
REVIEW = "agents/2026-11-28"
NOW = calendar.timegm((2026, 11, 28, 12, 0, 0))  # 2026-11-28 12:00 UTC
FEATURES = ("F001", "F002", "F003")
DEPENDS = {"F002": ("F001",)}
"""F002 builds on F001; F003 stands alone."""
SPEC = "the app the person wants\n"
EXCLUDE = (
    ".agent_logs/",
    ".agent_config.json",
    ".agent_state.json",
    "feature_list.json",
    "progress.json",
    "reviews.json",
)
"""The scheduler's files, kept out of git as the product's `.git/info/exclude` keeps them."""
WORDS = "the list does not sort"
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="the command sandbox needs bubblewrap")


def git(project: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=project, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


def feature_list(project: Path, passing: tuple[str, ...]) -> None:
    features = [
        {
            "id": f,
            "category": "functional",
            "description": f"feature {f}\nmore words",
            "steps": ["s"],
            "passes": f in passing,
            **({"depends_on": list(DEPENDS[f])} if f in DEPENDS else {}),
        }
        for f in FEATURES
    ]
    progress.atomic_write_json(project / "feature_list.json", {"features": features})


def passes(project: Path) -> dict[str, bool]:
    data = json.loads((project / "feature_list.json").read_text())
    return {f["id"]: f["passes"] for f in data["features"]}


def person_s_repository(project: Path) -> str:
    """A repository on `develop` with one commit of the person's (its sha)."""
    project.mkdir(parents=True)
    git(project, "init", "-q", "-b", "develop")
    (project / ".git" / "info" / "exclude").write_text("\n".join(EXCLUDE) + "\n")
    (project / "README.md").write_text("mine\n")
    git(project, "add", "README.md")
    git(project, "commit", "-qm", "the person's start")
    return git(project, "rev-parse", "HEAD")


def land(project: Path, log: EventLog, feature: str, content: str | None = None) -> str:
    """What the merge queue leaves when `feature` lands on the review branch: a commit on
    `feature/<id>` adding `<id>.txt`, merged `--no-ff`, and its `merge_verified` event; the merge."""
    git(project, "checkout", "-q", "-B", f"feature/{feature}", REVIEW)
    (project / f"{feature}.txt").write_text(content or f"{feature} by an agent\n")
    git(project, "add", f"{feature}.txt")
    git(project, "commit", "-qm", f"{feature}: the work")
    git(project, "checkout", "-q", REVIEW)
    git(project, "merge", "-q", "--no-ff", f"feature/{feature}", "-m", f"Merge feature/{feature} ({feature})")
    merge = git(project, "rev-parse", "HEAD")
    log.emit(
        "merge_verified",
        session=1,
        feature=feature,
        branch=f"feature/{feature}",
        commit=merge,
        tests="passed",
    )
    return merge


@dataclass
class Night:
    """A project after a night on the review branch, its person's `develop` checked out."""

    project: Path
    config: AgentConfig
    log: EventLog
    develop: str
    """`develop` before the morning."""
    merges: dict[str, str] = field(default_factory=dict)

    @property
    def review_tip(self) -> str:
        return git(self.project, "rev-parse", REVIEW)

    def tip(self, branch: str = "develop") -> str:
        return git(self.project, "rev-parse", branch)


def night(
    tmp_path: Path, landed: tuple[str, ...] = ("F001", "F002"), *, spec: bool = False, **options: object
) -> Night:
    project = tmp_path / "p"
    develop = person_s_repository(project)
    config = AgentConfig(land_on="review", review_branch=REVIEW, **options)  # type: ignore[arg-type]
    progress.save_config(project, config.to_json())
    adoption.record(project, Adoption("", "none", "develop"))
    feature_list(project, landed)
    git(project, "branch", REVIEW, "develop")
    if spec:  # the setup commit of an existing repository: the spec alone
        git(project, "checkout", "-q", REVIEW)
        (project / "app_spec.txt").write_text(SPEC)
        git(project, "add", "app_spec.txt")
        git(project, "commit", "-qm", gitops.SPEC_COMMIT)
    log = EventLog(project, "run-1")
    log.emit("run_started", pid=1, project=str(project), version="0", cost_basis="api")
    merges = {f: land(project, log, f) for f in landed}
    git(project, "checkout", "-q", "develop")
    if spec:  # the scheduler placed the spec in the person's work tree, untracked
        (project / "app_spec.txt").write_text(SPEC)
    return Night(project, config, log, develop, merges)


def save_schedule(
    project: Path, passing: tuple[str, ...], in_flight: dict[int, InFlight] | None = None
) -> None:
    backlog = Backlog(features=FEATURES, passing=frozenset(passing), depends=tuple(DEPENDS.items()))
    statefile.save(project, Schedule(backlog, (Lane(T.DONE),), cloned=True), in_flight or {})


def kinds(project: Path, kind: str) -> list[events.Event]:
    return [e for e in events.read(events.log_path(project)) if e["kind"] == kind]


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    said = str(exc.value)
    assert "\n" not in said, said
    return said


# -- landing: where work lands ----------------------------------------------------------------------


def test_only_a_repository_with_commits_defaults_to_a_review_branch(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q", "-b", "main")
    full = tmp_path / "full"
    person_s_repository(full)
    assert [landing.has_commits(p) for p in (plain, empty, full)] == [False, False, True]
    assert [landing.default_land_on(p) for p in (plain, empty, full)] == ["main", "main", "review"]


def test_a_detached_head_counts_as_commits(tmp_path: Path) -> None:
    project = tmp_path / "p"
    person_s_repository(project)
    git(project, "checkout", "-q", "--detach")
    assert landing.default_land_on(project) == "review"


def test_a_review_branch_is_named_by_the_date_with_a_number_when_taken(tmp_path: Path) -> None:
    project = tmp_path / "p"
    assert landing.review_branch_name(project, NOW) == REVIEW  # no folder yet: the date alone
    person_s_repository(project)
    assert landing.review_branch_name(project, NOW) == REVIEW
    git(project, "branch", REVIEW)
    assert landing.review_branch_name(project, NOW) == f"{REVIEW}-2"
    git(project, "branch", f"{REVIEW}-2")
    assert landing.review_branch_name(project, NOW) == f"{REVIEW}-3"


def test_settle_defaults_a_new_project_by_its_repository_and_names_the_review_branch_once(
    tmp_path: Path,
) -> None:
    project = tmp_path / "p"
    person_s_repository(project)
    settled = landing.settle(project, None, AgentConfig(), None, NOW)
    assert (settled.land_on, settled.review_branch) == ("review", REVIEW)
    # a saved name is kept, whatever the date or the branches now
    git(project, "branch", REVIEW)
    kept = landing.settle(project, settled.to_json(), settled, None, NOW + 86400 * 30)
    assert kept.review_branch == REVIEW
    # what the person said, or what was saved, is not replaced by the default
    assert landing.settle(project, None, AgentConfig(), "main", NOW).land_on == "main"
    assert landing.settle(project, {"land_on": "main"}, AgentConfig(), None, NOW).land_on == "main"
    # a new project (no commits) lands on main and names no branch
    new = tmp_path / "new"
    new.mkdir()
    fresh = landing.settle(new, None, AgentConfig(), None, NOW)
    assert (fresh.land_on, fresh.review_branch) == ("main", None)


def test_settle_refuses_main_while_the_review_branch_holds_work_the_person_lacks(tmp_path: Path) -> None:
    done = night(tmp_path)
    saved = done.config.to_json()
    with pytest.raises(BadInput) as refused:
        landing.settle(done.project, saved, AgentConfig(land_on="main"), "main", NOW)
    said = one_line(refused)
    assert "approve" in said and REVIEW in said and "2 commits" in said
    # once the person has it all, the switch is allowed
    git(done.project, "merge", "-q", "--ff-only", REVIEW)
    switched = landing.settle(done.project, saved, AgentConfig(land_on="main"), "main", NOW)
    assert switched.land_on == "main"


def test_settle_allows_main_when_the_review_branch_holds_only_the_spec(tmp_path: Path) -> None:
    done = night(tmp_path, landed=(), spec=True)
    assert git(done.project, "rev-list", "--count", f"develop..{REVIEW}") == "1"
    assert landing.unapproved(done.project, REVIEW) == ""
    switched = landing.settle(done.project, done.config.to_json(), AgentConfig(land_on="main"), "main", NOW)
    assert switched.land_on == "main"


def test_unapproved_counts_the_review_branch_s_own_commits(tmp_path: Path) -> None:
    done = night(tmp_path, landed=("F001",), spec=True)
    assert landing.unapproved(done.project, REVIEW) == "1 commit"
    (done.project / "app_spec.txt").unlink()  # out of the way of the checkouts `land` makes
    land(done.project, done.log, "F002")
    assert landing.unapproved(done.project, REVIEW) == "2 commits"
    assert landing.unapproved(done.project, "agents/missing") == ""
    assert landing.unapproved(tmp_path / "nowhere", REVIEW) == ""


def test_the_person_s_branch_is_the_adopted_one_never_a_review_branch(tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    assert landing.person_branch(project) == "main"  # no record
    adoption.record(project, Adoption("", "none", "develop"))
    assert landing.person_branch(project) == "develop"
    adoption.record(project, Adoption("", "none", REVIEW))
    assert landing.person_branch(project) == "main"
    adoption.record(project, Adoption("", "none", None))  # a detached HEAD, a new repository
    assert landing.person_branch(project) == "main"


def test_placed_finds_features_by_their_merge_on_the_first_parent_line(tmp_path: Path) -> None:
    done = night(tmp_path)
    repo = safe_git.open(done.project)
    found = landing.placed(done.project, repo, REVIEW)
    assert list(found) == ["F001", "F002"]
    for f, item in found.items():
        assert item.merge == done.merges[f] and item.base == git(done.project, "rev-parse", f"{item.merge}^1")
    # a commit reachable from the branch but only through a merge's second parent, and one on
    # another branch, place nothing
    git(done.project, "checkout", "-q", "-b", "feature/F003", REVIEW)
    (done.project / "F003.txt").write_text("x\n")
    git(done.project, "add", "F003.txt")
    git(done.project, "commit", "-qm", "F003: the work")
    side = git(done.project, "rev-parse", "HEAD")
    git(done.project, "checkout", "-q", REVIEW)
    git(done.project, "merge", "-q", "--no-ff", "feature/F003", "-m", "a merge no event names")
    done.log.emit(
        "merge_verified", session=2, feature="F003", branch="feature/F003", commit=side, tests="passed"
    )
    git(done.project, "checkout", "-q", "develop")
    done.log.emit(
        "merge_verified",
        session=2,
        feature="F009",
        branch="feature/F009",
        commit=done.develop,
        tests="passed",
    )
    assert list(landing.placed(done.project, repo, REVIEW)) == ["F001", "F002"]
    assert landing.placed(done.project, repo, "agents/missing") == {}


def test_placed_keeps_the_last_landing_and_drops_what_the_person_sent_back(tmp_path: Path) -> None:
    done = night(tmp_path)
    repo = safe_git.open(done.project)
    git(done.project, "checkout", "-q", REVIEW)
    again = land(done.project, done.log, "F001", "F001 again\n")
    git(done.project, "checkout", "-q", "develop")
    found = landing.placed(done.project, repo, REVIEW)
    assert list(found) == ["F002", "F001"] and found["F001"].merge == again
    # sent back by the scheduler (a conflict, a red test): still where it landed
    done.log.emit("sent_back", feature="F001", branch="feature/F001", why="conflict", review_id=3)
    assert list(landing.placed(done.project, repo, REVIEW)) == ["F002", "F001"]
    # sent back by the person: off the branch until it lands again
    done.log.emit("sent_back", feature="F001", branch="feature/F001", why=landing.PERSON, review_id=4)
    assert list(landing.placed(done.project, repo, REVIEW)) == ["F002"]
    git(done.project, "checkout", "-q", REVIEW)
    back = land(done.project, done.log, "F001", "F001 fixed\n")
    git(done.project, "checkout", "-q", "develop")
    found = landing.placed(done.project, repo, REVIEW)
    assert list(found) == ["F002", "F001"] and found["F001"].merge == back


# -- approve ---------------------------------------------------------------------------------------


def approve(done: Night, *named: str, say: list[str] | None = None) -> str:
    return approval.approve(
        done.project, done.config, named, done.log, (say if say is not None else []).append
    )


def test_approve_merges_the_review_branch_onto_the_person_s_branch_and_records_it(tmp_path: Path) -> None:
    done = night(tmp_path)
    review_tip = done.review_tip
    assert approval.waiting(done.project, done.config) == ["F001", "F002"]
    said = approve(done)
    tip = done.tip()
    assert git(done.project, "rev-parse", f"{tip}^1", f"{tip}^2").splitlines() == [done.develop, review_tip]
    assert said == f"approved F001, F002: on develop at {tip[:10]}; no gate configured"
    assert approval.approvals(done.project) == {"F001": tip, "F002": tip}
    (event,) = kinds(done.project, "approved")
    assert (event["features"], event["onto"], event["commit"]) == (["F001", "F002"], "develop", tip)
    # the person's work tree followed, and nothing waits any more
    assert (done.project / "F002.txt").read_text() == "F002 by an agent\n"
    assert git(done.project, "status", "--porcelain", "--untracked-files=no") == ""
    assert approval.waiting(done.project, done.config) == []
    assert git(done.project, "rev-parse", REVIEW) == review_tip


def test_approve_applies_named_features_one_commit_each_in_landing_order(tmp_path: Path) -> None:
    done = night(tmp_path, landed=FEATURES)
    approve(done, "F002", "F001")
    made = git(done.project, "rev-list", "--reverse", "--parents", f"{done.develop}..develop").splitlines()
    assert len(made) == 2 and all(len(line.split()) == 2 for line in made)  # one parent each: no merge
    subjects = git(done.project, "log", "--reverse", "--format=%s", f"{done.develop}..develop").splitlines()
    assert subjects == ["F001: feature F001", "F002: feature F002"]
    assert git(done.project, "ls-tree", "--name-only", "develop").splitlines() == [
        "F001.txt",
        "F002.txt",
        "README.md",
    ]
    assert approval.waiting(done.project, done.config) == ["F003"]
    # F002's dependency is approved now: F003 alone, then nothing named is left
    assert approve(done, "F003").startswith("approved F003: on develop")
    assert approval.waiting(done.project, done.config) == []


def test_approve_refuses_a_feature_whose_dependency_is_neither_approved_nor_named(tmp_path: Path) -> None:
    done = night(tmp_path)
    with pytest.raises(BadInput) as refused:
        approve(done, "F002")
    said = one_line(refused)
    assert "F002 depends on F001" in said and "approve F001 F002" in said
    assert done.tip() == done.develop and not (done.project / approval.APPROVALS).exists()
    approve(done, "F001")
    assert approve(done, "F002").startswith("approved F002")  # its dependency approved before: fine


@pytest.mark.parametrize(
    ("named", "said"),
    [
        (("F009",), "no feature F009 in this project; its features are F001, F002"),
        (("F003",), f"F003 is not on {REVIEW}; waiting for you: F001, F002"),
    ],
)
def test_approve_refuses_a_feature_unknown_or_not_on_the_review_branch(
    tmp_path: Path, named: tuple[str, ...], said: str
) -> None:
    done = night(tmp_path)
    with pytest.raises(BadInput) as refused:
        approve(done, *named)
    assert said in one_line(refused)
    assert done.tip() == done.develop


def test_approve_refuses_what_is_approved_already_and_nothing_waiting(tmp_path: Path) -> None:
    done = night(tmp_path)
    approve(done, "F001")
    with pytest.raises(BadInput) as refused:
        approve(done, "F001")
    assert "F001: approved already; waiting for you: F002" in one_line(refused)
    approve(done)
    after = done.tip()
    with pytest.raises(BadInput) as refused:
        approve(done)
    assert "nothing waits for you" in one_line(refused)
    assert done.tip() == after and len(kinds(done.project, "approved")) == 2


def test_work_the_person_merged_themselves_waits_no_more(tmp_path: Path) -> None:
    done = night(tmp_path)
    git(done.project, "merge", "-q", "--no-ff", REVIEW, "-m", "the person's own merge")
    assert approval.waiting(done.project, done.config) == []
    with pytest.raises(BadInput, match="nothing waits for you"):
        approve(done)
    land(done.project, done.log, "F003")  # landed after the person's merge: that one waits
    git(done.project, "checkout", "-q", "develop")
    assert approval.waiting(done.project, done.config) == ["F003"]


def test_approve_refuses_a_dirty_person_s_branch_and_moves_nothing(tmp_path: Path) -> None:
    done = night(tmp_path)
    (done.project / "README.md").write_text("mine\nan edit of mine\n")
    with pytest.raises(BadInput) as refused:
        approve(done)
    said = one_line(refused)
    assert "your branch develop is checked out with 1 uncommitted change (README.md)" in said
    assert done.tip() == done.develop and not (done.project / approval.APPROVALS).exists()
    assert (done.project / "README.md").read_text() == "mine\nan edit of mine\n"
    assert kinds(done.project, "approved") == []


def test_approve_is_refused_on_a_project_that_lands_on_main(tmp_path: Path) -> None:
    done, said = night(tmp_path), list[str]()
    with pytest.raises(BadInput) as refused:
        approval.approve(done.project, AgentConfig(), (), done.log, said.append)
    assert "--land-on" in one_line(refused)
    assert approval.waiting(done.project, AgentConfig()) == []
    assert done.tip() == done.develop


@pytest.mark.parametrize("named", [(), ("F001",)], ids=["all", "named"])
def test_approve_refuses_a_change_that_conflicts_with_the_person_s_branch(
    tmp_path: Path, named: tuple[str, ...]
) -> None:
    done = night(tmp_path)
    (done.project / "F001.txt").write_text("the person's own F001.txt\n")
    git(done.project, "add", "F001.txt")
    git(done.project, "commit", "-qm", "mine")
    mine = done.tip()
    with pytest.raises(BadInput) as refused:
        approve(done, *named)
    assert "F001.txt" in one_line(refused)
    assert done.tip() == mine and not (done.project / approval.APPROVALS).exists()
    assert (done.project / "F001.txt").read_text() == "the person's own F001.txt\n"


@needs_bwrap
@pytest.mark.parametrize(
    "named",
    [
        pytest.param((), id="all"),
        pytest.param(("F001",), id="named"),
    ],
)
def test_a_red_gate_leaves_the_person_s_branch_where_it_was(tmp_path: Path, named: tuple[str, ...]) -> None:
    """A gate green on `develop` and red with the work (a gate red on both is excused by design)."""
    require_runtime()
    done = night(tmp_path, test_command="test ! -e F001.txt")
    with pytest.raises(GitError) as refused:
        approve(done, *named)
    assert "the gates fail on develop" in one_line(refused)
    assert done.tip() == done.develop and not (done.project / approval.APPROVALS).exists()
    assert not (done.project / "F001.txt").exists()
    (ran,) = kinds(done.project, "gates_ran")
    assert ran["where"] == "develop" and ran["passed"] is False


def test_the_spec_in_the_person_s_work_tree_is_not_in_the_way(tmp_path: Path) -> None:
    done = night(tmp_path, spec=True)
    assert git(done.project, "status", "--porcelain") == "?? app_spec.txt"
    said = approve(done)
    assert said.startswith("approved F001, F002")
    assert (done.project / "app_spec.txt").read_text() == SPEC
    assert git(done.project, "ls-files", "app_spec.txt") == "app_spec.txt"
    assert git(done.project, "status", "--porcelain") == ""


@needs_bwrap
def test_a_red_gate_on_the_whole_review_branch_moves_nothing_whatever_it_raises(tmp_path: Path) -> None:
    """Whatever the gate's refusal says, `develop` stays where it was and nothing is recorded."""
    require_runtime()
    done = night(tmp_path, test_command="test ! -e F001.txt")
    with pytest.raises((GitError, git_exc.GitCommandError)):
        approve(done)
    assert done.tip() == done.develop and not (done.project / approval.APPROVALS).exists()
    assert not (done.project / "F001.txt").exists() and kinds(done.project, "approved") == []


def test_approving_named_features_keeps_the_spec_in_the_person_s_work_tree(tmp_path: Path) -> None:
    done = night(tmp_path, spec=True)
    assert approve(done, "F001").startswith("approved F001")
    assert (done.project / "app_spec.txt").read_text() == SPEC


def test_another_untracked_file_in_the_way_sends_the_branch_back(tmp_path: Path) -> None:
    done = night(tmp_path, spec=True)
    (done.project / "F002.txt").write_text("the person's scratch\n")
    with pytest.raises(GitError) as refused:
        approve(done)
    assert "untracked files in your work tree are in the way" in one_line(refused)
    assert done.tip() == done.develop and not (done.project / approval.APPROVALS).exists()
    assert (done.project / "F002.txt").read_text() == "the person's scratch\n"
    assert (done.project / "app_spec.txt").read_text() == SPEC  # the spec is put back
    assert git(done.project, "ls-files") == "README.md"
    assert kinds(done.project, "approved") == []


def test_approve_runs_while_another_branch_is_checked_out(tmp_path: Path) -> None:
    done = night(tmp_path)
    git(done.project, "checkout", "-q", REVIEW)
    (done.project / "README.md").write_text("an edit on the review branch's checkout\n")
    approve(done)
    assert git(done.project, "rev-parse", "develop^2") == done.review_tip
    assert gitops.current_branch(safe_git.open(done.project)) == REVIEW


# -- three_way -------------------------------------------------------------------------------------


def test_three_way_gives_a_tree_or_the_paths_that_conflict(tmp_path: Path) -> None:
    done = night(tmp_path)
    repo = safe_git.open(done.project)
    f2 = landing.placed(done.project, repo, REVIEW)["F002"]
    tree = approval.three_way(repo, f2.base, done.develop, f2.merge)
    assert isinstance(tree, str)
    assert git(done.project, "ls-tree", "--name-only", tree).splitlines() == ["F002.txt", "README.md"]
    assert git(done.project, "rev-parse", f"{tree}:F002.txt") == git(
        done.project, "rev-parse", f"{f2.merge}:F002.txt"
    )
    (done.project / "F002.txt").write_text("other\n")
    git(done.project, "add", "F002.txt")
    git(done.project, "commit", "-qm", "mine")
    assert approval.three_way(repo, f2.base, done.tip(), f2.merge) == ("F002.txt",)


# -- send-back -------------------------------------------------------------------------------------


def sent(done: Night) -> Night:
    save_schedule(done.project, tuple(done.merges))
    return done


def send_back(done: Night, feature: str, why: str = WORDS) -> str:
    said: list[str] = []
    return approval.send_back(done.project, done.config, feature, why, done.log, said.append)


@pytest.mark.parametrize(
    ("feature", "why", "said"),
    [
        ("F003", "  \n ", "--why is empty"),
        ("F009", WORDS, "no feature F009 in this project"),
        ("F001", WORDS, f"F002 on {REVIEW} builds on F001: send it back first"),
    ],
    ids=["empty-why", "unknown", "dependent-on-the-branch"],
)
def test_send_back_refuses_and_changes_nothing(tmp_path: Path, feature: str, why: str, said: str) -> None:
    done = sent(night(tmp_path, landed=FEATURES))
    tip, state = done.review_tip, (done.project / ".agent_state.json").read_bytes()
    with pytest.raises(BadInput) as refused:
        send_back(done, feature, why)
    assert said in one_line(refused)
    assert done.review_tip == tip and (done.project / ".agent_state.json").read_bytes() == state
    assert not (done.project / "reviews.json").exists() and kinds(done.project, "sent_back") == []


def test_send_back_refuses_a_feature_not_on_the_review_branch(tmp_path: Path) -> None:
    done = sent(night(tmp_path))
    with pytest.raises(BadInput) as refused:
        send_back(done, "F003")
    assert f"F003 is not on {REVIEW}" in one_line(refused)


def test_send_back_refuses_an_approved_feature(tmp_path: Path) -> None:
    done = sent(night(tmp_path, landed=FEATURES))
    approve(done, "F003")
    with pytest.raises(BadInput) as refused:
        send_back(done, "F003")
    assert "F003 is approved already" in one_line(refused)
    assert kinds(done.project, "sent_back") == []


def test_send_back_refuses_while_a_session_is_in_flight(tmp_path: Path) -> None:
    done = night(tmp_path, landed=FEATURES)
    save_schedule(done.project, FEATURES, {0: InFlight(number=3, log_dir="l", main="m", branch_tip=None)})
    tip = done.review_tip
    with pytest.raises(BadInput) as refused:
        send_back(done, "F003")
    assert "still to be finished" in one_line(refused)
    assert done.review_tip == tip


def test_send_back_refuses_a_project_without_a_schedule(tmp_path: Path) -> None:
    done = night(tmp_path, landed=FEATURES)
    with pytest.raises(BadInput) as refused:
        send_back(done, "F003")
    assert "no schedule yet" in one_line(refused)


def test_send_back_takes_the_change_off_and_returns_it_to_a_fix_with_the_person_s_words(
    tmp_path: Path,
) -> None:
    done = sent(night(tmp_path, landed=FEATURES))
    project, old_tip = done.project, done.review_tip
    old_feature = git(project, "rev-parse", "feature/F002")
    said = send_back(done, "F002", f"  {WORDS}\n")

    # the review branch: one commit on top with F002's change taken off, later work kept
    tip = done.review_tip
    assert git(project, "rev-parse", f"{tip}^@") == old_tip
    assert git(project, "ls-tree", "--name-only", tip).splitlines() == ["F001.txt", "F003.txt", "README.md"]
    # feature/F002: a commit on top of that which puts it back; its old tip kept
    again = git(project, "rev-parse", "feature/F002")
    assert git(project, "rev-parse", f"{again}^@") == tip
    assert git(project, "rev-parse", f"{again}^{{tree}}") == git(project, "rev-parse", f"{old_tip}^{{tree}}")
    assert git(project, "rev-parse", f"refs/scheduler/sent-back/F002/{old_feature[:12]}") == old_feature

    # the records: the person's words as a review, the feature back to a FIX that answers it
    reviews = json.loads((project / "reviews.json").read_text())["reviews"]
    (review,) = [r for r in reviews if r["feature_id"] == "F002"]
    assert review["verdict"] == "REQUEST_CHANGES" and WORDS in review["issues"]["critical"][0]
    assert "scheduler_findings" not in review  # the words once, as the finding
    saved = statefile.load(project)
    assert saved is not None
    backlog = saved.schedule.backlog
    assert backlog.passing == {"F001", "F003"} and backlog.returned == ()
    assert saved.schedule.lanes == (
        Lane(T.FIX, WorkItem("F002"), fix_rounds=1, open_review=review["review_id"]),
    )
    assert passes(project) == {"F001": True, "F002": False, "F003": True}
    (event,) = kinds(project, "sent_back")
    assert (event["feature"], event["branch"], event["why"], event["review_id"]) == (
        "F002",
        "feature/F002",
        "person",
        review["review_id"],
    )
    assert said.startswith("F002 sent back") and f"review {review['review_id']}" in said

    # off the branch: nothing of it waits, and it cannot be sent back twice
    assert approval.waiting(project, done.config) == ["F001", "F003"]
    with pytest.raises(BadInput, match="F002 is not on"):
        send_back(done, "F002")
    # the person's branch never moved
    assert done.tip() == done.develop


def test_a_sent_back_feature_can_then_be_sent_back_below_its_dependent(tmp_path: Path) -> None:
    """Once F002 (which builds on F001) is off the branch, F001 may go too."""
    done = sent(night(tmp_path, landed=FEATURES))
    send_back(done, "F002")
    send_back(done, "F001")
    tree = git(done.project, "ls-tree", "--name-only", REVIEW).splitlines()
    assert tree == ["F003.txt", "README.md"]
    saved = statefile.load(done.project)
    assert saved is not None and saved.schedule.backlog.passing == {"F003"}


def test_a_named_approval_brings_the_review_branch_s_start_first(tmp_path: Path) -> None:
    """What the review branch held before its first feature (the spec, the skeleton) comes with
    the first named approval, as a merge; a later one does not bring it again."""
    done = night(tmp_path, spec=True)
    assert approve(done, "F001").startswith("approved F001")
    start, _feature = git(done.project, "rev-list", "--parents", "-n", "2", "develop").splitlines()[::-1]
    assert len(start.split()) == 3 and git(
        done.project, "log", "-1", "--format=%s", start.split()[0]
    ).startswith("Merge the review branch's start")
    assert git(done.project, "ls-files", "app_spec.txt") == "app_spec.txt"
    assert (done.project / "app_spec.txt").read_text() == SPEC
    assert approve(done, "F002").startswith("approved F002")
    assert len(git(done.project, "rev-list", "--parents", "-n", "1", "develop").split()) == 2  # one parent


def test_a_skeleton_that_conflicts_with_the_person_s_branch_is_refused_in_one_line(tmp_path: Path) -> None:
    done = night(tmp_path, spec=True)
    (done.project / "app_spec.txt").unlink()
    (done.project / "app_spec.txt").write_text("the person's own, different\n")
    git(done.project, "add", "app_spec.txt")
    git(done.project, "commit", "-qm", "mine")
    before = git(done.project, "rev-parse", "develop")
    with pytest.raises(BadInput) as refused:
        approve(done, "F001")
    assert "the project's skeleton" in one_line(refused) and "app_spec.txt" in one_line(refused)
    assert git(done.project, "rev-parse", "develop") == before


def test_a_project_the_scheduler_ran_before_options_were_saved_keeps_main(tmp_path: Path) -> None:
    project = tmp_path / "old"
    person_s_repository(project)
    (project / ".agent_state.json").write_text("{}")  # adopted: a state file of an older release
    assert landing.settle(project, None, AgentConfig(), None, 0.0).land_on == "main"
    (project / ".agent_state.json").unlink()
    assert landing.settle(project, None, AgentConfig(), None, 0.0).land_on == "review"
