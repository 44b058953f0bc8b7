"""After every session: check the agent's claims against schemas, invariants and git.

The result is a verified `Outcome`; whatever a failed session left behind is undone
(hand-off files restored from the pre-session copies, `main` and the work branch reset
to their pre-session commits) so the retry starts from a known state.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import git

from session_scheduler.core import acceptance
from session_scheduler.core.config import AgentConfig, SessionType, trunk_of
from session_scheduler.core.errors import SpecError, StateError
from session_scheduler.core.features import depends_of
from session_scheduler.core.gates import GateResult, finding
from session_scheduler.core.layout import SPEC_NAME, is_scheduler_path
from session_scheduler.core.machine import Outcome, SessionState, WorkItem, extends
from session_scheduler.core.policy import FAILED, policy
from session_scheduler.core.tasks import Task, coverage_problems, extension_coverage, read_tasks
from session_scheduler.repo import gitops, refs
from session_scheduler.run import browsing, gating
from session_scheduler.run.gating import Check, Gatekeeper
from session_scheduler.run.invariants import check_invariants
from session_scheduler.store import crashpoints
from session_scheduler.store.progress import (
    Handoff,
    atomic_write_json,
    feature_in,
    load_handoff,
    restore,
    scheduler_review,
    snapshot,
)
from session_scheduler.store.records import Records, records_of


@dataclass(frozen=True)
class PreSession:
    """What the scheduler recorded just before a session started."""

    main: str
    branch_tip: str | None
    handoff: Handoff
    copies: Path
    """The folder holding the pre-session copies of the hand-off files."""
    heads: dict[str, str]
    """Every local branch and its commit."""
    packed: refs.Packed = field(default_factory=dict, compare=False, repr=False)
    """The repository's memo of packed-refs (`safe_git.GitMemo`): the copy in `copies` is a link
    to the same version, read once, so `heads` and the copy share their strings."""

    @functools.cached_property
    def heads_record(self) -> dict[str, Any]:
        """`heads` as the state file keeps them: the branches that differ from the copy of
        packed-refs in `copies` (a long project has thousands of branches, nearly all packed)."""
        base = refs.packed_heads(self.copies, self.packed)
        differ = refs.changed(base, self.heads)
        return {
            "heads": {b: self.heads[b] for b in sorted(differ) if b in self.heads},
            "heads_gone": sorted(b for b in differ if b not in self.heads),
        }


def heads_of(record: dict[str, Any], copies: Path) -> dict[str, str]:
    """The branches a `heads_record` in `copies` stands for."""
    gone = set(record.get("heads_gone", []))
    base = refs.packed_heads(copies) if "heads_gone" in record else {}  # older records: every branch
    return {b: sha for b, sha in {**base, **record["heads"]}.items() if b not in gone}


REGULAR_FILES = frozenset({"100644", "100755"})
SYMLINK = "120000"
BUILTIN_DIFF_DRIVERS = frozenset(
    {
        "ada",
        "bash",
        "bibtex",
        "cpp",
        "csharp",
        "css",
        "default",
        "dts",
        "elixir",
        "fortran",
        "fountain",
        "golang",
        "html",
        "ini",
        "java",
        "kotlin",
        "markdown",
        "matlab",
        "objc",
        "pascal",
        "perl",
        "php",
        "python",
        "r",
        "ruby",
        "rust",
        "scheme",
        "tex",
    }
)
"""git's own diff drivers (hunk headers and word patterns only; none runs a command unless config adds one)."""
BUILTIN_MERGE_DRIVERS = frozenset({"text", "binary", "union"})


def code_attributes(text: str) -> list[str]:
    """The attributes in a `.gitattributes` that select a driver that runs a command, as written:
    any `filter=<name>`, and `diff=<name>` / `merge=<name>` other than git's built-ins (a macro
    line, `[attr]name ...`, counts like any other)."""
    found = []
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        for word in words[1:]:
            key, eq, value = word.partition("=")
            if eq and (
                key == "filter"
                or (key == "diff" and value not in BUILTIN_DIFF_DRIVERS)
                or (key == "merge" and value not in BUILTIN_MERGE_DRIVERS)
            ):
                found.append(word)
    return found


class ClaimRefused(Exception):
    """The session's claim did not hold; the message says why."""


def capture(where: Records | Path, repo: git.Repo, state: SessionState, copies: Path) -> PreSession:
    """The restore point of the hand-off files (from the records) and of the branches (from the
    repository), before a session."""
    records = records_of(where)
    snapshot(records, copies)
    refs.keep_packed(Path(repo.common_dir), copies)
    main = gitops.head(repo, gitops.MAIN)
    if main is None:
        raise StateError("the project's repository has no `main` branch; restore it or start a new project")
    work = state.lane.work
    tip = gitops.head(repo, work.branch) if work else None
    return PreSession(
        main, tip, load_handoff(records), copies, gitops.branches(repo), gitops.memo(repo).packed
    )


def verify_session(
    where: Records | Path,
    repo: git.Repo,
    state: SessionState,
    pre: PreSession,
    config: AgentConfig,
    echo: Callable[[str], None] = print,
    gatekeeper: Gatekeeper | None = None,
    *,
    folder: Path | None = None,
    existing: bool = False,
    queue_tests: bool = False,
) -> Outcome:
    """The verified outcome of the session that just ran in `state` (its hand-off files read
    from the records, its git from the repository; a correction written to the records). The
    project's gates (`gatekeeper`, by default the config's) run on an IMPLEMENT's or FIX's branch
    and on `main` after a REVIEW's merge, unless `queue_tests`: `main` is expected to move before
    the work lands (other work lands first), so the merge queue runs them, once, on the merge it
    lands (this one if `main` did not move after all). `folder`: the session's folder, whose browser ledger and evidence a
    web feature's PASS is checked against (none: the session has no evidence); `existing`: the
    INITIALIZER's existing form, on a codebase the person had (it may commit nothing)."""
    records = records_of(where)
    role = state.lane.role
    try:
        try:
            after = load_handoff(records)
        except StateError as exc:
            raise ClaimRefused(str(exc)) from None
        problems = check_invariants(pre.handoff, after, role, extension=extends(state))
        if problems:
            raise ClaimRefused("; ".join(problems))
        reported_failure(pre.handoff, after, role)
        keeper = gatekeeper or Gatekeeper.of(config)
        ran = Ran(records, repo, state, pre, after, config, echo, keeper, folder, existing, queue_tests)
        return _CHECKS[role](ran)
    except ClaimRefused as exc:
        undo(records, repo, state, pre, echo)
        return Outcome(role, ok=False, reason=str(exc))


def reported_failure(before: Handoff, after: Handoff, role: SessionType) -> None:
    """A session that reports FAILED (its entry in progress.json) is taken at its word: it failed,
    whatever it left, and is retried like any failed session (never sent on to REVIEW)."""
    new = (after.progress or {}).get("sessions", [])[len((before.progress or {}).get("sessions", [])) :]
    for entry in new:
        if entry.get("outcome") == FAILED:
            reason = str(entry.get("notes") or "").strip() or "no reason given"
            raise ClaimRefused(f"{role.value} reported {FAILED}: {reason}")


def undo(
    where: Records | Path, repo: git.Repo, state: SessionState, pre: PreSession, echo: Callable[[str], None]
) -> None:
    """Put the hand-off files and every branch back as they were before the session.

    Whatever the session committed stays reachable under refs/scheduler/undone/ (nothing lost).
    """
    label = f"session-{state.next_number}"
    now = gitops.branches(repo)
    for branch in sorted(refs.changed(pre.heads, now)):
        before, after = pre.heads.get(branch), now.get(branch)
        if after is not None:
            gitops.keep_ref(repo, f"undone/{label}/{branch}", after)
        if before is None:
            gitops.delete_branch(repo, branch)
            echo(f"  undo: {branch} removed (its commits are kept in refs/scheduler/undone/{label})")
        else:
            gitops.set_branch(repo, branch, before)
            echo(f"  undo: {branch} reset to {before[:10]}")
    crashpoints.reached("undo_branches_reset")
    restore(
        where, pre.copies, state.backlog.passing
    )  # last: a checkout above may have removed a wrongly tracked copy


@dataclass(frozen=True)
class Ran:
    """Everything a role's check needs about the session that just ran."""

    records: Records
    repo: git.Repo
    state: SessionState
    pre: PreSession
    after: Handoff
    config: AgentConfig
    echo: Callable[[str], None]
    gatekeeper: Gatekeeper
    folder: Path | None = None
    """The session's folder (its browser ledger and evidence)."""
    existing: bool = False
    """The INITIALIZER plans on a codebase the person had (its `existing` form): it may commit nothing."""
    queue_tests: bool = False
    """A REVIEW's merge is expected not to land as it is: the queue runs the gates on what lands."""

    @property
    def role(self) -> SessionType:
        return self.state.lane.role

    @property
    def trunk(self) -> str:
        """The branch work lands on, as the person calls it (every clone calls it `main`)."""
        return trunk_of(self.config) if self.config.land_on == "main" or self.config.review_branch else "main"

    @property
    def work(self) -> WorkItem:
        work = self.state.lane.work
        if work is None:
            raise ClaimRefused(f"{self.role.value} ran without a work item")
        return work

    def main_untouched(self) -> None:
        if gitops.head(self.repo, gitops.MAIN) != self.pre.main:
            raise ClaimRefused(
                f"{self.role.value} changed `main`; only a REVIEW whose PASS holds merges into it"
            )

    def only_own_branches_changed(self, verdict: str | None = None) -> None:
        """No branch but those the role's policy gives it was created, moved or deleted."""
        allowed = policy(self.role).branches_it_may_change(self.state.lane.work, verdict)
        now = gitops.branches(self.repo)
        touched = refs.changed(self.pre.heads, now)
        if gitops.MAIN in touched - allowed:
            self.main_untouched()
        if touched - allowed:
            raise ClaimRefused(
                f"{self.role.value} changed branches it does not own: {', '.join(sorted(touched - allowed))}"
            )

    def no_scheduler_files_committed(self, base: str, tip: str) -> None:
        changed = gitops.changed_paths(self.repo, base, tip)
        bad = [p for p in changed if is_scheduler_path(p)]
        if bad:
            raise ClaimRefused(f"hand-off or scheduler files were committed: {', '.join(bad)}")
        local = [p for p in changed if p in self.config.local_files]
        if local:
            raise ClaimRefused(
                f"the project's local files were committed: {', '.join(local)} (the person keeps them out of "
                "git: --local-file); remove them from the branch's commits"
            )

    def no_repo_code_committed(self, base: str, tip: str) -> None:
        """No commit adds what makes git run code: a nested repository (a gitlink, which git enters
        with the nested repository's own config), or a `.gitattributes` that selects a filter, diff
        or merge driver; unless the project allows it (`--allow-repo-code`)."""
        if self.config.allow_repo_code:
            return
        found = []
        for change in gitops.changes(self.repo, base, tip):
            if change.new_mode == gitops.GITLINK and change.old_mode != gitops.GITLINK:
                found.append(f"a nested repository (gitlink) at {change.path}")
            elif change.path.rpartition("/")[2] == ".gitattributes" and change.new_mode == SYMLINK:
                found.append(f"{change.path} as a symbolic link (git before 2.32 follows it)")
            elif change.path.rpartition("/")[2] == ".gitattributes" and change.new_mode in REGULAR_FILES:
                selected = code_attributes(gitops.blob_text(self.repo, change.blob))
                if selected:
                    found.append(f"{change.path} selecting {', '.join(selected)}")
        if found:
            raise ClaimRefused(
                f"commits add what makes git run code: {'; '.join(found)}. The scheduler refuses them unless "
                "the project allows it: run again with --allow-repo-code (saved with the project)"
            )

    def new_commits_on_branch(self) -> None:
        branch = self.work.branch
        tip = gitops.head(self.repo, branch)
        if tip is None:
            raise ClaimRefused(f"branch {branch} does not exist")
        self.only_own_branches_changed()
        base = self.pre.branch_tip or self.pre.main
        if tip == base or not gitops.is_ancestor(self.repo, base, tip):
            raise ClaimRefused(f"no new commits on {branch} since the session started")
        self.no_scheduler_files_committed(base, tip)
        self.no_repo_code_committed(base, tip)

    def new_reviews(self) -> list[dict[str, Any]]:
        """The reviews of the role's own kind that the session appended."""
        new = self.after.review_list()[len(self.pre.handoff.review_list()) :]
        return [r for r in new if r["kind"] == policy(self.role).review_kind]

    def outcome(self, **values: Any) -> Outcome:
        return Outcome(self.role, ok=True, passing=self.after.passing(), **values)


def _initializer(ran: Ran) -> Outcome:
    if ran.after.feature_list is None:
        raise ClaimRefused("no feature_list.json was written")
    if extends(ran.state):
        return _extension(ran)
    uncovered = coverage_problems(ran.after.features(), spec_tasks(ran.repo, ran.pre.main))
    if uncovered:
        raise ClaimRefused("; ".join(uncovered))
    if ran.after.passing():
        raise ClaimRefused("the INITIALIZER marked features as passing")
    ran.only_own_branches_changed()
    main = gitops.head(ran.repo, gitops.MAIN)
    if main is None or (main == ran.pre.main and not ran.existing):
        raise ClaimRefused("nothing was committed on `main`")
    ran.no_scheduler_files_committed(ran.pre.main, main)
    ran.no_repo_code_committed(ran.pre.main, main)
    features = ran.after.features()
    return ran.outcome(feature_ids=tuple(f["id"] for f in features), depends=depends_of(features))


def spec_tasks(repo: git.Repo, commit: str) -> tuple[Task, ...]:
    """The open tasks of the spec committed in `commit`, when it is a task list (the work tree's
    copy is the agent's to change; the commit is not)."""
    try:
        data = repo.git.cat_file("blob", f"{commit}:{SPEC_NAME}", stdout_as_string=False)
        return read_tasks(bytes(data), SPEC_NAME)[1]
    except (git.GitCommandError, SpecError):
        return ()


def _extension(ran: Ran) -> Outcome:
    """The extend form: new features appended after the list the project has (check_invariants
    checked the list; none, when the change asks for nothing new), the project's git left as it
    was (it plans; it builds nothing)."""
    uncovered = extension_coverage(
        ran.pre.handoff.features(), ran.after.features(), spec_tasks(ran.repo, ran.pre.main)
    )
    if uncovered:
        raise ClaimRefused("; ".join(uncovered))
    ran.main_untouched()
    ran.only_own_branches_changed()
    features = ran.after.features()
    return ran.outcome(feature_ids=tuple(f["id"] for f in features), depends=depends_of(features))


def _implement(ran: Ran) -> Outcome:
    ran.main_untouched()
    ran.new_commits_on_branch()
    return _gated(ran)


def _gated(ran: Ran) -> Outcome:
    """The work's branch through the project's gates: all green, it goes to REVIEW; a red gate
    sends it back to FIX with a review the scheduler writes (the gates' output in it)."""
    check = ran.gatekeeper.plan(ran.repo, ran.pre.main, branch=True)
    if check is None:
        return ran.outcome()
    branch = ran.work.branch
    tip = gitops.head(ran.repo, branch)
    assert tip is not None  # new_commits_on_branch checked it
    ran.echo(f"  gates: running {', '.join(check.names)} on {branch}")
    results = ran.gatekeeper.check(ran.repo, tip, check)
    failed, excused = gating.held(ran.gatekeeper, ran.repo, ran.pre.main, check, results)
    if excused:
        ran.echo(gating.excused_line(excused, ran.trunk))
    if not failed:
        ran.echo(f"  verified: the gates pass on {branch} ({gating.names(results)})")
        return ran.outcome(gates=results)
    review_id = scheduler_review(
        ran.records,
        ran.work.feature_id,
        f"the project's gates are red on {branch}: {gating.names(failed)}",
        finding(failed, f"on {branch}"),
        session=ran.state.next_number,
    )
    ran.echo(f"  gates red on {branch}: {gating.names(failed)}; back to FIX with review {review_id}")
    return ran.outcome(gates=results, gates_review=review_id)


def _fix(ran: Ran) -> Outcome:
    ran.main_untouched()
    ran.new_commits_on_branch()
    fixes = ran.after.fix_list()[len(ran.pre.handoff.fix_list()) :]
    review = ran.state.lane.open_review
    if not any(fix["review_id"] == review for fix in fixes):
        raise ClaimRefused(f"no fix entry for review {review} in reviews.json")
    return _gated(ran)


def _architecture(ran: Ran) -> Outcome:
    ran.only_own_branches_changed()
    reviews = ran.new_reviews()
    if not reviews:
        raise ClaimRefused("no architecture review was appended to reviews.json")
    return ran.outcome(verdict=reviews[-1]["verdict"], review_id=reviews[-1]["review_id"])


def _review(ran: Ran) -> Outcome:
    feature, branch = ran.work.feature_id, ran.work.branch
    reviews = [r for r in ran.new_reviews() if r["feature_id"] == feature]
    if not reviews:
        raise ClaimRefused(f"no review of {feature or branch} was appended to reviews.json")
    verdict, review_id = reviews[-1]["verdict"], reviews[-1]["review_id"]
    entry = feature_in(ran.records, ran.after, feature) if feature is not None else None
    steps = (entry or {}).get("steps") or []
    if wrong := acceptance.problems(steps, verdict, reviews[-1].get("acceptance"), reviews[-1]["issues"]):
        raise ClaimRefused("; ".join(wrong))
    if browsing.review_app(ran.gatekeeper, ran.repo, ran.pre.main, entry) is not None:
        cited = browsing.evidence_problems(ran.folder)
        if wrong := cited(steps, verdict, reviews[-1].get("acceptance")):
            raise ClaimRefused("; ".join(wrong))
    changed = ran.after.passing() ^ ran.pre.handoff.passing()
    if verdict != "PASS":
        ran.only_own_branches_changed()
        if changed:
            raise ClaimRefused(f"`passes` changed although the verdict is {verdict}")
        return ran.outcome(verdict=verdict, review_id=review_id)
    if changed != ({feature} if feature else set()):
        raise ClaimRefused(
            f"a PASS must set `passes` on {feature or 'no feature'} and nothing else "
            f"(changed: {sorted(changed)})"
        )
    ran.only_own_branches_changed(verdict)
    tip, main = ran.pre.branch_tip, gitops.head(ran.repo, gitops.MAIN)
    if tip is None or main is None:
        raise ClaimRefused(f"verdict PASS but {branch} does not exist")
    merged = main == tip and gitops.is_ancestor(ran.repo, ran.pre.main, tip)
    merged = merged or gitops.parents(ran.repo, main) == [ran.pre.main, tip]
    if not merged:
        raise ClaimRefused(
            f"verdict PASS but `main` is not {branch} merged into the old `main` "
            "(expected one `git merge --no-ff` or a fast-forward)"
        )
    ran.no_scheduler_files_committed(ran.pre.main, main)
    ran.no_repo_code_committed(ran.pre.main, main)
    if ran.queue_tests:  # its gates run once, on the merge that lands
        ran.echo("  verified: the merge; its gates run once, in the merge queue (`main` may move first)")
        return ran.outcome(verdict="PASS", review_id=review_id)
    check = ran.gatekeeper.plan(ran.repo, ran.pre.main, branch=False)
    if check is None:
        return ran.outcome(verdict="PASS", review_id=review_id)
    results = ran.gatekeeper.check(ran.repo, main, check)
    crashpoints.reached("merge_tested")
    failed, excused = gating.held(ran.gatekeeper, ran.repo, ran.pre.main, check, results)
    if excused:
        ran.echo(gating.excused_line(excused, ran.trunk))
    if failed:
        return _undo_failed_merge(ran, main, review_id, failed, results)
    ran.echo(f"  verified: {_passed(check, ran.trunk)}")
    return ran.outcome(verdict="PASS", review_id=review_id, gates=results)


def _passed(check: Check, trunk: str) -> str:
    if check.gates is not None and check.gates.source == "test_command" and check.names == ["tests"]:
        return f"`{check.gates.gates[0].command}` passes on {trunk}"
    return f"the gates pass on {trunk} ({', '.join(check.names)})"


def _undo_failed_merge(
    ran: Ran, merged: str, review_id: int, failed: list[GateResult], results: tuple[GateResult, ...]
) -> Outcome:
    """A gate (the tests) fails on `main` after the merge: undo it and turn the PASS into
    REQUEST_CHANGES."""
    feature = ran.work.feature_id
    gitops.keep_ref(ran.repo, f"undone/session-{ran.state.next_number}/main", merged)
    gitops.set_branch(ran.repo, gitops.MAIN, ran.pre.main)
    what = "tests" if [r.kind for r in failed] == ["tests"] else f"the gates ({gating.names(failed)})"
    output = "\n".join(r.output.strip() for r in failed)
    finding = f"{what} failed on main after merging: {output.strip()[-500:]}"
    reviews = dict(ran.after.reviews or {})
    reviews["reviews"] = [
        {**r, "verified_verdict": "REQUEST_CHANGES", "scheduler_findings": [finding]}
        if r["review_id"] == review_id
        else r
        for r in reviews["reviews"]
    ]
    atomic_write_json(ran.records.path("reviews.json"), reviews)
    features = dict(ran.after.feature_list or {})
    features["features"] = [{**f, "passes": False} if f["id"] == feature else f for f in features["features"]]
    atomic_write_json(ran.records.path("feature_list.json"), features)
    ran.echo(f"  undo: merge reverted, {what} fail on main; PASS counts as REQUEST_CHANGES")
    return Outcome(
        SessionType.REVIEW,
        ok=True,
        verdict="REQUEST_CHANGES",
        review_id=review_id,
        passing=ran.after.passing() - {feature},
        undone=f"{what} failed on main after the merge; the merge was undone and the PASS counts as REQUEST_CHANGES",
        gates=results,
    )


_CHECKS: dict[SessionType, Callable[[Ran], Outcome]] = {
    SessionType.INITIALIZER: _initializer,
    SessionType.IMPLEMENT: _implement,
    SessionType.REVIEW: _review,
    SessionType.FIX: _fix,
    SessionType.ARCHITECTURE: _architecture,
}
