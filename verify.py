"""After every session: check the agent's claims against schemas, invariants and git.

The result is a verified `Outcome`; whatever a failed session left behind is undone
(hand-off files restored from the pre-session copies, `main` reset to its
pre-session commit) so the next session starts from a known state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git

import gitops
from config import AgentConfig, Outcome, SessionState, SessionType
from errors import StateError
from progress import Handoff, atomic_write_json, check_invariants, load_handoff, restore, snapshot


@dataclass(frozen=True)
class PreSession:
    """What the scheduler recorded just before a session started."""

    main: str
    branch_tip: str | None
    handoff: Handoff
    copies: Path
    """The folder holding the pre-session copies of the hand-off files."""


class Rejected(Exception):
    """The session's claim did not hold; the message says why."""


def capture(project: Path, repo: git.Repo, state: SessionState, copies: Path) -> PreSession:
    snapshot(project, copies)
    main = gitops.head(repo, gitops.MAIN)
    if main is None:
        raise StateError("the project's repository has no `main` branch; restore it or start a new project")
    tip = gitops.head(repo, state.current_branch) if state.current_branch else None
    return PreSession(main, tip, load_handoff(project), copies)


def verify_session(
    project: Path,
    repo: git.Repo,
    state: SessionState,
    pre: PreSession,
    config: AgentConfig,
    echo: Callable[[str], None] = print,
) -> Outcome:
    """The verified outcome of the session that just ran in `state`."""
    role = state.next_session
    try:
        try:
            after = load_handoff(project)
        except StateError as exc:
            raise Rejected(str(exc)) from None
        problems = check_invariants(pre.handoff, after, role.value)
        if problems:
            raise Rejected("; ".join(problems))
        return _CHECKS[role](project, repo, state, pre, after, config, echo)
    except Rejected as exc:
        undo(project, repo, state, pre, echo)
        return Outcome(session_type=role, ok=False, reason=str(exc))


def undo(
    project: Path, repo: git.Repo, state: SessionState, pre: PreSession, echo: Callable[[str], None]
) -> None:
    """Put the hand-off files, `main` and the work branch back as they were before the session.

    Whatever the session committed stays reachable under refs/scheduler/undone/ (nothing lost).
    """
    restore(project, pre.copies)
    label = f"session-{state.session_count + 1}"
    main = gitops.head(repo, gitops.MAIN)
    if main is not None and main != pre.main:
        gitops.keep_ref(repo, f"undone/{label}/main", main)
        gitops.set_branch(repo, gitops.MAIN, pre.main)
        echo(f"  undo: `main` reset to {pre.main[:10]}")
    branch = state.current_branch
    tip = gitops.head(repo, branch) if branch else None
    if branch is None or tip is None or tip == pre.branch_tip:
        return
    gitops.keep_ref(repo, f"undone/{label}/{branch}", tip)
    if pre.branch_tip is None:
        gitops.delete_branch(repo, branch)
        echo(f"  undo: {branch} removed (its commits are kept in refs/scheduler/undone/{label})")
    else:
        gitops.set_branch(repo, branch, pre.branch_tip)
        echo(f"  undo: {branch} reset to {pre.branch_tip[:10]}")


def _main_untouched(repo: git.Repo, pre: PreSession, role: SessionType) -> None:
    if gitops.head(repo, gitops.MAIN) != pre.main:
        raise Rejected(f"{role.value} changed `main`; only REVIEW may merge into it")


def _new_commits_on(repo: git.Repo, branch: str | None, pre: PreSession) -> None:
    if branch is None:
        raise Rejected("no branch to work on")
    tip = gitops.head(repo, branch)
    if tip is None:
        raise Rejected(f"branch {branch} does not exist")
    base = pre.branch_tip or pre.main
    if tip == base or not gitops.is_ancestor(repo, base, tip):
        raise Rejected(f"no new commits on {branch} since the session started")


def _new_entries(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return after[len(before) :]


Check = Callable[
    [Path, git.Repo, SessionState, PreSession, Handoff, AgentConfig, Callable[[str], None]], Outcome
]


def _initializer(
    project: Path,
    repo: git.Repo,
    state: SessionState,
    pre: PreSession,
    after: Handoff,
    config: AgentConfig,
    echo: Callable[[str], None],
) -> Outcome:
    if after.feature_list is None:
        raise Rejected("no feature_list.json was written")
    if after.passing():
        raise Rejected("the INITIALIZER marked features as passing")
    main = gitops.head(repo, gitops.MAIN)
    if main is None or main == pre.main:
        raise Rejected("nothing was committed on `main`")
    ids = tuple(f["id"] for f in after.features())
    return Outcome(SessionType.INITIALIZER, ok=True, feature_ids=ids, passing=frozenset())


def _implement(
    project: Path,
    repo: git.Repo,
    state: SessionState,
    pre: PreSession,
    after: Handoff,
    config: AgentConfig,
    echo: Callable[[str], None],
) -> Outcome:
    _main_untouched(repo, pre, SessionType.IMPLEMENT)
    _new_commits_on(repo, state.current_branch, pre)
    return Outcome(SessionType.IMPLEMENT, ok=True, passing=after.passing())


def _fix(
    project: Path,
    repo: git.Repo,
    state: SessionState,
    pre: PreSession,
    after: Handoff,
    config: AgentConfig,
    echo: Callable[[str], None],
) -> Outcome:
    _main_untouched(repo, pre, SessionType.FIX)
    _new_commits_on(repo, state.current_branch, pre)
    fixes = _new_entries(pre.handoff.fix_list(), after.fix_list())
    if not any(fix["review_id"] == state.open_review_id for fix in fixes):
        raise Rejected(f"no fix entry for review {state.open_review_id} in reviews.json")
    return Outcome(SessionType.FIX, ok=True, passing=after.passing())


def _architecture(
    project: Path,
    repo: git.Repo,
    state: SessionState,
    pre: PreSession,
    after: Handoff,
    config: AgentConfig,
    echo: Callable[[str], None],
) -> Outcome:
    _main_untouched(repo, pre, SessionType.ARCHITECTURE)
    reviews = [
        r for r in _new_entries(pre.handoff.review_list(), after.review_list()) if r["kind"] == "architecture"
    ]
    if not reviews:
        raise Rejected("no architecture review was appended to reviews.json")
    review = reviews[-1]
    return Outcome(
        SessionType.ARCHITECTURE,
        ok=True,
        verdict=review["verdict"],
        review_id=review["review_id"],
        passing=after.passing(),
    )


def _review(
    project: Path,
    repo: git.Repo,
    state: SessionState,
    pre: PreSession,
    after: Handoff,
    config: AgentConfig,
    echo: Callable[[str], None],
) -> Outcome:
    feature, branch = state.current_feature, state.current_branch
    reviews = [
        r
        for r in _new_entries(pre.handoff.review_list(), after.review_list())
        if r["kind"] == "feature" and r["feature_id"] == feature
    ]
    if not reviews:
        raise Rejected(f"no review of {feature or branch} was appended to reviews.json")
    review = reviews[-1]
    verdict, review_id = review["verdict"], review["review_id"]
    changed = after.passing() ^ pre.handoff.passing()
    if verdict != "PASS":
        _main_untouched(repo, pre, SessionType.REVIEW)
        if changed:
            raise Rejected(f"`passes` changed although the verdict is {verdict}")
        return Outcome(
            SessionType.REVIEW, ok=True, verdict=verdict, review_id=review_id, passing=after.passing()
        )
    if feature is not None and changed != {feature}:
        raise Rejected(f"a PASS must set `passes` on {feature} and nothing else (changed: {sorted(changed)})")
    if feature is None and changed:
        raise Rejected("a PASS of an architecture branch must not change `passes`")
    tip = gitops.head(repo, branch) if branch else None
    main = gitops.head(repo, gitops.MAIN)
    if tip is None or main is None or not gitops.is_ancestor(repo, tip, main):
        raise Rejected(f"verdict PASS but {branch} is not merged into `main`")
    if not gitops.is_ancestor(repo, pre.main, main):
        raise Rejected("`main` was rewritten instead of merged into")
    if config.test_command:
        passed, output = gitops.run_tests_at(repo, main, config.test_command)
        if not passed:
            return _undo_failed_merge(project, repo, pre, after, review_id, feature, output, echo)
        echo(f"  verified: `{config.test_command}` passes on main")
    return Outcome(SessionType.REVIEW, ok=True, verdict="PASS", review_id=review_id, passing=after.passing())


def _undo_failed_merge(
    project: Path,
    repo: git.Repo,
    pre: PreSession,
    after: Handoff,
    review_id: int,
    feature: str | None,
    output: str,
    echo: Callable[[str], None],
) -> Outcome:
    """Tests fail on `main` after the merge: undo it and turn the PASS into REQUEST_CHANGES."""
    gitops.set_branch(repo, gitops.MAIN, pre.main)
    finding = f"tests failed on main after merging: {output.strip()[-500:]}"
    reviews = dict(after.reviews or {})
    reviews["reviews"] = [
        {**r, "verified_verdict": "REQUEST_CHANGES", "scheduler_findings": [finding]}
        if r["review_id"] == review_id
        else r
        for r in reviews["reviews"]
    ]
    atomic_write_json(project / "reviews.json", reviews)
    features = dict(after.feature_list or {})
    features["features"] = [{**f, "passes": False} if f["id"] == feature else f for f in features["features"]]
    atomic_write_json(project / "feature_list.json", features)
    echo("  undo: merge reverted, tests fail on main; PASS counts as REQUEST_CHANGES")
    return Outcome(
        SessionType.REVIEW,
        ok=True,
        verdict="REQUEST_CHANGES",
        review_id=review_id,
        passing=after.passing() - ({feature} if feature else set()),
    )


_CHECKS: dict[SessionType, Check] = {
    SessionType.INITIALIZER: _initializer,
    SessionType.IMPLEMENT: _implement,
    SessionType.REVIEW: _review,
    SessionType.FIX: _fix,
    SessionType.ARCHITECTURE: _architecture,
}
