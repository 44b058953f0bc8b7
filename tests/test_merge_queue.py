"""The merge queue lands approved work on `main`: merged without a work tree, tested, moved only
from the `main` it was merged onto; conflicts and red tests come back; nothing lands twice."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest
from helpers import sh

from session_scheduler.core import batching
from session_scheduler.core.errors import GitError, SchedulerError, StateError
from session_scheduler.guard import safe_git
from session_scheduler.repo import gitops, merge_queue
from session_scheduler.repo.merge_queue import RETRIES, Conflict, Landed, Landing, Queue, Red, land
from session_scheduler.store.records import Records


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """main with two files; feature/F001 changes a, feature/F002 changes b, feature/F003 changes
    the line of a that F001 changes too."""
    root = tmp_path / "app"
    root.mkdir()
    sh(root, "git init -q -b main && git config user.name t && git config user.email t@t")
    sh(root, "printf 'a1\\na2\\n' > a && printf 'b1\\n' > b && git add a b && git commit -qm base")
    sh(root, "git checkout -qb feature/F001 && sed -i s/a1/A1/ a && git commit -qam F001")
    sh(root, "git checkout -q main && git checkout -qb feature/F002 && echo b2 >> b && git commit -qam F002")
    sh(
        root,
        "git checkout -q main && git checkout -qb feature/F003 && sed -i s/a1/X1/ a && git commit -qam F003",
    )
    sh(root, "git checkout -q main")
    return root


def landing(project: Path, feature: str, lane: int = 0) -> Landing:
    tip = sh(project, f"git rev-parse feature/{feature}")
    return Landing(feature, f"feature/{feature}", tip, lane, review_id=1, queued_at=1.0)


def green(calls: list[str]) -> object:
    def tests(commit: str) -> tuple[bool, str]:
        calls.append(commit)
        return True, "ok"

    return tests


def test_approved_work_lands_as_one_merge_after_its_tests_pass(project: Path) -> None:
    repo = safe_git.open(project)
    before = gitops.head(repo, "main")
    calls: list[str] = []
    result = land(repo, landing(project, "F001"), green(calls))  # type: ignore[arg-type]
    main = gitops.head(repo, "main")
    assert result == Landed(str(main)) and calls == [main]
    assert gitops.parents(repo, str(main)) == [before, landing(project, "F001").tip]
    assert sh(project, "git show main:a") == "A1\na2"
    assert sh(project, "git log -1 --format=%s main") == "Merge feature/F001 (F001)"
    result = land(repo, landing(project, "F002"), green(calls))  # type: ignore[arg-type]
    assert isinstance(result, Landed) and sh(project, "git show main:b") == "b1\nb2"
    assert sh(project, "git status --porcelain") == ""  # the work tree and index were not used


def test_the_review_s_own_merge_lands_as_it_is_while_main_has_not_moved(project: Path) -> None:
    repo = safe_git.open(project)
    base = sh(project, "git rev-parse main")
    sh(project, "git checkout -q -b lane main && git merge -q --no-ff feature/F001 -m 'Merge feature/F001'")
    reviewed = sh(project, "git rev-parse HEAD")
    sh(project, "git checkout -q main")
    calls: list[str] = []
    approved = dataclasses.replace(landing(project, "F001"), merge=reviewed)
    result = land(repo, approved, green(calls))  # type: ignore[arg-type]
    assert result == Landed(reviewed, reviewed=True) and calls == []  # tested in its lane: not again
    assert sh(project, "git rev-parse main") == reviewed and gitops.parents(repo, reviewed)[0] == base

    # main moved since (F002 landed first): the tip is merged onto the new main and tested
    sh(project, f"git update-ref refs/heads/main {base}")
    land(repo, landing(project, "F002"), None)
    result = land(repo, approved, green(calls))  # type: ignore[arg-type]
    main = sh(project, "git rev-parse main")
    assert result == Landed(main) and calls == [main] and main != reviewed
    assert sh(project, "git log -1 --format=%s main") == "Merge feature/F001 (F001)"

    # a "merge" that is not of this tip onto main is never taken as one
    sh(project, f"git update-ref refs/heads/main {base}")
    other = dataclasses.replace(landing(project, "F002"), merge=reviewed)
    result = land(repo, other, green(calls))  # type: ignore[arg-type]
    assert isinstance(result, Landed) and not result.reviewed and result.commit != reviewed


def test_a_review_s_merge_its_lane_left_untested_is_tested_by_the_queue_once_and_red_stays_off(
    project: Path,
) -> None:
    """Its lane expected `main` to move first and left the gates to the queue; `main` did not
    move: the queue runs them on that merge (once) and lands it on green; on red `main` stays
    where it was and the merge is kept under refs/scheduler/red/."""
    repo = safe_git.open(project)
    base = sh(project, "git rev-parse main")
    sh(project, "git checkout -q -b lane main && git merge -q --no-ff feature/F001 -m 'Merge feature/F001'")
    reviewed = sh(project, "git rev-parse HEAD")
    sh(project, "git checkout -q main")
    untested = dataclasses.replace(landing(project, "F001"), merge=reviewed, merge_tested=False)

    def red(commit: str) -> tuple[bool, str]:
        calls.append(commit)
        return False, "1 failed"

    calls: list[str] = []
    assert land(repo, untested, red) == Red(reviewed, "1 failed") and calls == [reviewed]
    assert sh(project, "git rev-parse main") == base
    assert sh(project, f"git rev-parse refs/scheduler/red/F001/{reviewed[:12]}") == reviewed
    calls.clear()
    result = land(repo, untested, green(calls))  # type: ignore[arg-type]
    assert result == Landed(reviewed, reviewed=True) and calls == [reviewed]
    assert sh(project, "git rev-parse main") == reviewed


def test_work_already_on_main_is_never_merged_twice(project: Path) -> None:
    repo = safe_git.open(project)
    first = land(repo, landing(project, "F001"), None)
    calls: list[str] = []
    again = land(repo, landing(project, "F001"), green(calls))  # type: ignore[arg-type]
    assert isinstance(first, Landed) and again == Landed(first.commit, again=True) and calls == []


def test_a_conflict_comes_back_with_its_files_and_main_stays(project: Path) -> None:
    repo = safe_git.open(project)
    land(repo, landing(project, "F001"), None)
    main = gitops.head(repo, "main")
    calls: list[str] = []
    result = land(repo, landing(project, "F003"), green(calls))  # type: ignore[arg-type]
    assert isinstance(result, Conflict) and result.files == ("a",) and "CONFLICT (content)" in result.detail
    assert gitops.head(repo, "main") == main and calls == []


def test_a_red_test_comes_back_with_its_output_and_main_stays(project: Path) -> None:
    repo = safe_git.open(project)
    main = gitops.head(repo, "main")
    result = land(repo, landing(project, "F002"), lambda commit: (False, "1 failed"))
    assert isinstance(result, Red) and result.output == "1 failed"
    assert gitops.head(repo, "main") == main
    assert gitops.ref_sha(repo, f"refs/scheduler/red/F002/{result.commit[:12]}") == result.commit


def test_main_moving_while_the_tests_run_is_merged_onto_again(project: Path) -> None:
    repo = safe_git.open(project)
    calls: list[str] = []

    def tests(commit: str) -> tuple[bool, str]:
        calls.append(commit)
        if len(calls) == 1:  # another landing moved main meanwhile
            sh(project, "git merge -q --no-ff --no-edit feature/F002")
        return True, "ok"

    moved_to: list[str | None] = []
    result = land(repo, landing(project, "F001"), tests)
    moved_to.append(gitops.head(repo, "main"))
    assert isinstance(result, Landed) and len(calls) == 2 and moved_to == [result.commit]
    assert sh(project, "git show main:a") == "A1\na2" and sh(project, "git show main:b") == "b1\nb2"


def test_a_main_that_keeps_moving_is_an_error_after_a_few_tries(project: Path) -> None:
    repo = safe_git.open(project)

    def tests(commit: str) -> tuple[bool, str]:
        sh(project, "git commit -q --allow-empty -m moved")
        return True, "ok"

    with pytest.raises(GitError, match=f"kept moving while feature/F001 was landed \\({RETRIES} tries\\)"):
        land(repo, landing(project, "F001"), tests)


def test_a_merge_driver_the_repository_names_never_runs(project: Path, tmp_path: Path) -> None:
    """A branch's .gitattributes and the repository's config name a merge driver: the scheduler's
    merge runs no command (the file conflicts instead)."""
    marker = tmp_path / "pwned"
    sh(project, f"git config merge.evil.driver 'touch {marker}; false'")
    sh(project, "git checkout -q feature/F003 && echo 'a merge=evil' > .gitattributes")
    sh(project, "git add .gitattributes && git commit -qm attrs && git checkout -q main")
    repo = safe_git.open(project)
    land(repo, landing(project, "F001"), None)
    result = land(repo, landing(project, "F003"), None)
    assert isinstance(result, Conflict) and "a" in result.files and not marker.exists()


def test_the_queue_is_kept_in_the_records_in_order_and_once(tmp_path: Path) -> None:
    records = Records(tmp_path)
    one, two = (Landing(f"F00{n}", f"feature/F00{n}", f"{n}" * 40, n, n, float(n)) for n in (1, 2))
    queue = Queue(records)
    assert queue.pending() == []
    queue.add(one)
    queue.add(two)
    queue.add(one)  # approved again (a rerun): queued once
    assert Queue(records).pending() == [one, two]  # another scheduler's view: from the file
    queue.done(one)
    assert Queue(records).pending() == [two]


def test_a_damaged_queue_file_names_what_to_do(tmp_path: Path) -> None:
    queue = Queue(Records(tmp_path))
    queue.path.parent.mkdir(parents=True)
    queue.path.write_text('{"waiting": [{"feature": "F001"}]}')
    with pytest.raises(StateError, match=r"merge_queue.json is damaged .*; delete it"):
        queue.pending()


def test_the_project_work_tree_follows_main_and_keeps_what_was_changed_there(project: Path) -> None:
    repo = safe_git.open(project)
    (project / "b").write_text("b1\nlocal\n")  # a change the landing does not touch: kept
    land(repo, landing(project, "F001"), None)
    assert (project / "a").read_text() == "A1\na2\n" and sh(project, "git status --porcelain") == "M b"
    (project / "b").write_text("b1\nmine\n")  # one the landing touches: git refuses to follow
    result = land(repo, landing(project, "F002"), None)
    assert isinstance(result, Landed) and gitops.head(repo, "main") == result.commit
    assert (project / "b").read_text() == "b1\nmine\n"
    sh(project, "git checkout -q -- b && git checkout -q -b other main~1")  # another branch: left alone
    sh(project, "git branch -f main main~1")
    land(repo, landing(project, "F002"), None)
    assert (
        sh(project, "git rev-parse --abbrev-ref HEAD") == "other"
        and sh(project, "git status --porcelain") == ""
    )


def test_main_moves_only_while_the_guard_is_held(project: Path) -> None:
    """The lanes read `main` to sync their clones under the same guard: never while it moves."""
    import contextlib

    repo = safe_git.open(project)
    seen: list[tuple[str, str | None]] = []

    @contextlib.contextmanager
    def guard():  # type: ignore[no-untyped-def]
        seen.append(("enter", gitops.head(repo, gitops.MAIN)))
        yield
        seen.append(("exit", gitops.head(repo, gitops.MAIN)))

    before = gitops.head(repo, gitops.MAIN)
    verdict = land(repo, landing(project, "F001"), None, guard=guard())
    assert isinstance(verdict, Landed)
    assert seen == [("enter", before), ("exit", verdict.commit)]


def test_work_begun_on_an_approved_merge_lands_only_once_that_merge_s_work_landed_as_approved(
    project: Path,
) -> None:
    """F002 was begun on M, the REVIEW's merge of F001 waiting to land. It may land once M is on
    `main`, or once every parent of M is (F001 landed by another merge: `main` had moved); not
    while F001's approved tip is not on `main` (sent back, held). A base its tip does not hold
    (the branch never took it) holds nothing back."""
    repo = safe_git.open(project)
    sh(project, "git checkout -q main && git merge -q --no-ff feature/F001 -m M && git branch approved HEAD")
    merge = sh(project, "git rev-parse approved")
    sh(project, "git reset -q --hard HEAD^ && git checkout -q -b feature/F009 approved")
    sh(project, "echo c > c && git add c && git commit -qm F009 && git checkout -q main")
    f009, base = landing(project, "F009"), sh(project, "git rev-parse main")
    unlanded = merge_queue.unlanded_bases
    assert unlanded(repo, f009, base, [merge]) == [merge]  # F001 has not landed: F009 would land it
    assert unlanded(repo, landing(project, "F002"), base, [merge]) == []  # F002 never took it
    sh(project, "git merge -q --no-ff feature/F002 -m other && git merge -q --no-ff feature/F001 -m again")
    moved = sh(project, "git rev-parse main")  # F001 landed, by another merge than M
    assert unlanded(repo, f009, moved, [merge]) == []
    assert unlanded(repo, f009, merge, [merge]) == []  # M itself landed
    assert merge_queue.stacked_on(repo, "feature/F009") == []
    gitops.keep_ref(repo, f"{merge_queue.STACKED}/feature/F009/{merge}", merge)
    assert merge_queue.stacked_on(repo, "feature/F009") == [merge]
    merge_queue.forget_stacked(repo, "feature/F009", [merge])
    assert merge_queue.stacked_on(repo, "feature/F009") == []


def _more(project: Path, *features: str) -> None:
    """Branches that each add a file of their own (they merge with any other cleanly)."""
    for feature in features:
        sh(
            project,
            f"git checkout -q -b feature/{feature} main && echo {feature} > {feature} && git add {feature}",
        )
        sh(project, f"git commit -qm {feature} && git checkout -q main")


def test_a_batch_lands_together_after_one_test_run_each_as_its_own_merge(project: Path) -> None:
    """Three approved branches waiting: merged one after another onto main, tested once on the
    last merge, and main moved once, to it; each lands as its own merge commit, in queue order."""
    _more(project, "F004")
    repo = safe_git.open(project)
    before = gitops.head(repo, "main")
    calls: list[str] = []
    told: list[tuple[str, int]] = []
    queue = [landing(project, f) for f in ("F001", "F002", "F004")]
    verdicts = merge_queue.land_batch(
        repo,
        queue,
        lambda group: green(calls),  # type: ignore[arg-type,return-value]
        settle=lambda entry, verdict, tested: told.append((entry.feature, tested)),
    )
    main = gitops.head(repo, "main")
    assert calls == [main] and told == [("F001", 3), ("F002", 3), ("F004", 3)]
    chain = sh(project, f"git rev-list --first-parent {before}..main").split()
    assert [entry.feature for entry, _ in verdicts] == ["F001", "F002", "F004"]
    assert [verdict for _, verdict in verdicts] == [Landed(commit) for commit in reversed(chain)]
    assert [gitops.parents(repo, c)[1] for c in reversed(chain)] == [entry.tip for entry in queue]
    assert sh(project, "git log --first-parent --format=%s -3 main").splitlines() == [
        "Merge feature/F004 (F004)",
        "Merge feature/F002 (F002)",
        "Merge feature/F001 (F001)",
    ]


def test_a_red_batch_is_bisected_and_only_the_culprit_goes_back(project: Path) -> None:
    """F002 breaks the tests: of F001, F002, F004, F005 the first half is red, its first half
    (F001) green and lands, F002 is then known red without a run and goes back with the last red
    run's output; F004 and F005 are tested together and land. Four runs, one red branch."""
    _more(project, "F004", "F005")
    repo = safe_git.open(project)
    runs: list[tuple[str, ...]] = []

    def tests_for(group: tuple[Landing, ...]) -> merge_queue.Tests:
        def run(commit: str) -> tuple[bool, str]:
            runs.append(tuple(entry.feature for entry in group))
            red = "b2" in sh(project, f"git show {commit}:b")
            return not red, "b2 is not allowed" if red else "ok"

        return run

    queue = [landing(project, f) for f in ("F001", "F002", "F004", "F005")]
    verdicts = dict(
        (entry.feature, verdict) for entry, verdict in merge_queue.land_batch(repo, queue, tests_for)
    )
    assert runs == [("F001", "F002", "F004", "F005"), ("F001", "F002"), ("F001",), ("F004", "F005")]
    assert isinstance(verdicts["F002"], Red) and verdicts["F002"].output == "b2 is not allowed"
    assert gitops.parents(repo, verdicts["F002"].commit)[1] == landing(project, "F002").tip  # its merge, last
    assert all(isinstance(verdicts[f], Landed) for f in ("F001", "F004", "F005"))
    assert sh(project, "git show main:b") == "b1" and sh(project, "git show main:F005") == "F005"
    assert sh(project, "git for-each-ref --format='%(refname)' refs/scheduler/red/").startswith(
        "refs/scheduler/red/F002/"
    )


def test_with_three_runners_one_round_tests_three_merges_of_the_chain_side_by_side(project: Path) -> None:
    """`runners=3`: the first round tests the chain after F002, after F004 and after F005 at
    once: all red, so F001 and F002 hold the culprit; the next round tests F001 alone, green: it
    lands, and F002 goes back red without another run, with the output of the run that bounded
    it (after F002). F004 and F005 are tested again (their runs had F002 in them). Three rounds
    and no more, where one runner takes four."""
    _more(project, "F004", "F005")
    repo = safe_git.open(project)
    runs: list[tuple[str, ...]] = []
    started = threading.Barrier(3, timeout=10)  # the first three runs wait for each other: side by side

    def tests_for(group: tuple[Landing, ...]) -> merge_queue.Tests:
        def run(commit: str) -> tuple[bool, str]:
            runs.append(tuple(entry.feature for entry in group))
            if len(runs) <= 3:
                started.wait()
            red = "b2" in sh(project, f"git show {commit}:b")
            return not red, f"red with {len(group)}" if red else "ok"

        return run

    queue = [landing(project, f) for f in ("F001", "F002", "F004", "F005")]
    verdicts = dict(
        (entry.feature, verdict)
        for entry, verdict in merge_queue.land_batch(repo, queue, tests_for, runners=3)
    )
    assert set(runs[:3]) == {("F001", "F002"), ("F001", "F002", "F004"), ("F001", "F002", "F004", "F005")}
    assert runs[3:] == [("F001",), ("F004",), ("F004", "F005")] or runs[3:] == [
        ("F001",),
        ("F004", "F005"),
        ("F004",),
    ]
    assert (
        isinstance(verdicts["F002"], Red) and verdicts["F002"].output == "red with 2"
    )  # the run that bounded it
    assert gitops.parents(repo, verdicts["F002"].commit)[1] == landing(project, "F002").tip
    assert all(isinstance(verdicts[f], Landed) for f in ("F001", "F004", "F005"))
    assert sh(project, "git show main:b") == "b1" and sh(project, "git show main:F005") == "F005"


def test_two_runners_land_the_green_first_half_of_the_chain_and_keep_the_red_one_off(project: Path) -> None:
    """`runners=2`, F002 last and red: the merges after F004 and after F002 run side by side;
    `main` moves to the first (F001 and F004 land), never to the red one; F005 is then tested
    alone and lands, and F002 goes back with the run that had it."""
    _more(project, "F004", "F005")
    repo = safe_git.open(project)

    def tests_for(group: tuple[Landing, ...]) -> merge_queue.Tests:
        def run(commit: str) -> tuple[bool, str]:
            red = "b2" in sh(project, f"git show {commit}:b")
            return not red, f"red with {len(group)}" if red else "ok"

        return run

    queue = [landing(project, f) for f in ("F001", "F004", "F005", "F002")]
    settled = merge_queue.land_batch(repo, queue, tests_for, runners=2)
    assert [(entry.feature, type(verdict).__name__) for entry, verdict in settled] == [
        ("F001", "Landed"),
        ("F004", "Landed"),
        ("F005", "Landed"),
        ("F002", "Red"),
    ]
    assert sh(project, "git show main:b") == "b1" and sh(project, "git show main:F005") == "F005"
    assert settled[-1][1].output == "red with 4"  # type: ignore[union-attr]


def test_a_branch_that_conflicts_in_a_batch_goes_back_and_the_rest_are_merged_again(project: Path) -> None:
    _more(project, "F004")
    repo = safe_git.open(project)
    calls: list[str] = []
    queue = [landing(project, f) for f in ("F001", "F003", "F004")]
    verdicts = dict(
        (entry.feature, verdict)
        for entry, verdict in merge_queue.land_batch(repo, queue, lambda group: green(calls))  # type: ignore[arg-type,return-value]
    )
    assert isinstance(verdicts["F003"], Conflict) and verdicts["F003"].files == ("a",)
    assert isinstance(verdicts["F001"], Landed) and isinstance(verdicts["F004"], Landed)
    assert calls == [gitops.head(repo, "main")]  # no run for the set with the conflict


def test_a_branch_that_conflicts_only_with_one_before_it_waits_for_that_one_to_land(project: Path) -> None:
    """F003 merges onto `main` alone, but not after F001 (both change a's first line): it leaves
    the batch, F001 is tested and lands, and then F003 goes back, conflicting with the `main`
    its FIX will start from (the one that holds F001), not with work still in the queue."""
    repo = safe_git.open(project)
    calls: list[str] = []
    queue = [landing(project, f) for f in ("F001", "F003")]
    settled = merge_queue.land_batch(repo, queue, lambda group: green(calls))  # type: ignore[arg-type,return-value]
    assert [(entry.feature, type(verdict).__name__) for entry, verdict in settled] == [
        ("F001", "Landed"),
        ("F003", "Conflict"),
    ]
    assert sh(project, "git show main:a").startswith("A1")  # F001's line: what F003's FIX merges
    assert len(calls) == 1


def test_a_branch_deferred_for_one_before_it_lands_when_that_one_goes_back(project: Path) -> None:
    """F003 conflicts only with F001, which is red: F001 goes back, and F003, merged onto a
    `main` without it, is tested and lands."""
    repo = safe_git.open(project)

    def tests_for(group: tuple[Landing, ...]) -> merge_queue.Tests:
        return lambda commit: (group[-1].feature != "F001", "F001 breaks the tests")

    queue = [landing(project, f) for f in ("F001", "F003")]
    settled = dict(
        (entry.feature, verdict) for entry, verdict in merge_queue.land_batch(repo, queue, tests_for)
    )
    assert isinstance(settled["F001"], Red) and isinstance(settled["F003"], Landed)
    assert sh(project, "git show main:a").startswith("X1")


def test_a_batch_of_one_is_what_lands_one_at_a_time(project: Path) -> None:
    """`cap=1`: each branch tested alone, in order (the same planner, not a second path); a tip
    main holds already lands again without a merge or a run."""
    _more(project, "F004")
    repo = safe_git.open(project)
    calls: list[str] = []
    land(repo, landing(project, "F004"), None)
    queue = [landing(project, f) for f in ("F001", "F002", "F004")]
    verdicts = merge_queue.land_batch(repo, queue, lambda group: green(calls), cap=1)  # type: ignore[arg-type,return-value]
    assert [(entry.feature, type(verdict)) for entry, verdict in verdicts] == [
        ("F004", Landed),
        ("F001", Landed),
        ("F002", Landed),
    ]
    assert verdicts[0][1] == Landed(verdicts[0][1].commit, again=True) and len(calls) == 2  # type: ignore[union-attr]


def test_a_tip_that_lands_another_way_while_the_batch_is_tested_is_not_merged_twice(project: Path) -> None:
    """While F001 and F002 are tested together, F001 lands another way (`main` moves to it): the
    compare-and-swap fails, F001 lands again with no merge of its own, F002 is merged and tested anew."""
    repo = safe_git.open(project)
    runs: list[str] = []

    def tests(commit: str) -> tuple[bool, str]:
        if not runs:
            sh(project, "git merge -q --no-ff --no-edit feature/F001")
        runs.append(commit)
        return True, "ok"

    queue = [landing(project, f) for f in ("F001", "F002")]
    verdicts = merge_queue.land_batch(repo, queue, lambda group: tests)
    assert [(entry.feature, verdict.again) for entry, verdict in verdicts] == [
        ("F001", True),
        ("F002", False),
    ]  # type: ignore[union-attr]
    assert len(runs) == 2
    assert sh(project, "git log --first-parent --format=%s -2 main").splitlines() == [
        "Merge feature/F002 (F002)",
        "Merge branch 'feature/F001'",
    ]


def test_a_planner_that_makes_no_progress_is_an_error_not_a_loop(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should `core/batching.py` ever answer a red run with the same run again, the queue stops
    with an error that says what to do, after a bounded number of passes."""
    _more(project, "F004")
    repo = safe_git.open(project)
    runs: list[str] = []
    monkeypatch.setattr(
        merge_queue.batching, "after_test", lambda batch, passed: batching.plan(batch.testing)
    )

    def tests_for(group: tuple[Landing, ...]) -> merge_queue.Tests:
        def run(commit: str) -> tuple[bool, str]:
            runs.append(commit)
            return False, "red"

        return run

    before = gitops.head(repo, "main")
    queue = [landing(project, f) for f in ("F001", "F004")]
    with pytest.raises(SchedulerError, match="made no progress landing feature/F001, feature/F004"):
        merge_queue.land_batch(repo, queue, tests_for)
    assert 1 < len(runs) <= 3 * (2 + 4 + 3) + merge_queue.RETRIES
    assert gitops.head(repo, "main") == before  # nothing landed
