"""The person's morning commands on a project whose work lands on a review branch: `approve`
lands waiting work on their own branch, `send-back` returns a feature to a FIX with their words.

Both run while no run does (they hold the project's lock), change nothing when they refuse (one
line saying why and what to do), and move a branch only by a compare-and-swap of its ref, as the
merge queue does (`merge_queue.land`, the one place a branch moves to verified work). What waits
is read from the records, never from commit messages an agent wrote: a feature is on the review
branch when the queue's `merge_verified` event says where it landed and that commit is still on
the branch; it is approved when `approvals.json` says so.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import git

from session_scheduler.core.config import REVIEWED, TERMINAL, AgentConfig, SessionType, trunk_of
from session_scheduler.core.errors import BadInput, GitError
from session_scheduler.core.humane import plural
from session_scheduler.core.layout import LOG_DIR, SPEC_NAME
from session_scheduler.core.machine import Lane, WorkItem
from session_scheduler.core.schedule import released, wake
from session_scheduler.guard import safe_git
from session_scheduler.repo import gitops, landing, merge_queue
from session_scheduler.run import gating
from session_scheduler.store import progress, statefile
from session_scheduler.store.events import EventLog
from session_scheduler.store.records import Records

APPROVALS = f"{LOG_DIR}/approvals.json"
"""What the person approved: feature -> the commit of their branch that holds it."""
T = SessionType


def approvals(project: Path) -> dict[str, str]:
    path = project / APPROVALS
    if not path.exists():
        return {}
    data = progress.read_json(path)
    approved = data.get("approved") if isinstance(data, dict) else None
    return {str(k): str(v) for k, v in approved.items()} if isinstance(approved, dict) else {}


def record_approval(project: Path, features: Iterable[str], commit: str) -> None:
    known = approvals(project)
    known.update(dict.fromkeys(features, commit))
    progress.atomic_write_json(project / APPROVALS, {"approved": known})


def _forget_approval(project: Path, feature: str) -> None:
    known = approvals(project)
    if known.pop(feature, None) is not None:
        progress.atomic_write_json(project / APPROVALS, {"approved": known})


def waiting(project: Path, config: AgentConfig) -> list[str]:
    """The features on the review branch the person has not approved, in the order they landed
    ([] when the project lands on `main`)."""
    if config.land_on not in REVIEWED or config.review_branch is None or not (project / ".git").is_dir():
        return []
    repo = safe_git.open(project)
    return _pending(
        repo,
        landing.placed(project, repo, config.review_branch),
        approvals(project),
        gitops.head(repo, landing.person_branch(project)),
    )


def _pending(
    repo: git.Repo, landed: dict[str, landing.Placed], done: dict[str, str], yours: str | None
) -> list[str]:
    """Of the features on the review branch, those neither approved nor on the person's branch
    already (`yours`: its commit; a branch the review branch was made from holds earlier work)."""
    left = [f for f in landed if f not in done]
    if not left or yours is None:
        return left
    held = set(str(repo.git.rev_list(yours, "--")).split())  # one walk, however many features
    return [f for f in left if landed[f].merge not in held]


Say = Callable[[str], None]


def approve(project: Path, config: AgentConfig, named: tuple[str, ...], log: EventLog, say: Say) -> str:
    """Approve what waits for the person (all of it, or the `named` features): work a risk rule
    held lands where work lands, then, on a review branch, waiting work lands on the person's
    branch; the gates run on each result. The line that says what landed."""
    if not (project / ".git").is_dir():
        raise BadInput(f"{project} has no git repository; run the project first")
    named = tuple(f.upper() for f in named)  # f001 is F001
    repo = safe_git.open(project)
    saved = statefile.load(project)
    holds = dict(saved.schedule.backlog.held) if saved else {}
    reviewing = config.land_on in REVIEWED and config.review_branch is not None
    if named:
        unknown = [f for f in named if f not in _features(project)]
        if unknown:
            raise BadInput(f"no feature {', '.join(unknown)} in this project; {_known(project)}")
    if not holds and not reviewing:
        raise BadInput(
            "nothing waits for you: this project lands its work on main (--land-on main) and no risk rule "
            "holds any; run it with --land-on review to review work before it reaches your branch"
        )
    releasing = [f for f in holds if not named or f in named]
    if named and not reviewing:
        others = [f for f in named if f not in holds]
        if others:
            raise BadInput(
                f"{', '.join(others)} {'is' if len(others) == 1 else 'are'} not held; waiting for you: "
                f"{', '.join(holds) or 'nothing'}"
            )
    said = []
    if releasing:
        assert saved is not None
        said.append(_release(project, config, repo, saved, releasing, log, say))
    if reviewing:
        try:
            said.append(_approve_review(project, config, named, log, say))
        except BadInput:
            if not said:
                raise
    return "; ".join(said)


def _release(
    project: Path,
    config: AgentConfig,
    repo: git.Repo,
    saved: statefile.Saved,
    features: list[str],
    log: EventLog,
    say: Say,
) -> str:
    """Land the held `features` where work lands, one by one (the gates run on each), and hand
    the schedule on: each passes, and what depends on it may start in the next run."""
    if saved.in_flight:
        raise BadInput("a session of the last run is still to be finished; run the project, then approve")
    trunk = trunk_of(config)
    _refuse_dirty(repo, trunk, "approve")
    records = Records(project)
    queue = merge_queue.Queue(records)
    entries = {entry.feature: entry for entry, _ in queue.held()}
    keeper = gating.Gatekeeper.of(config)
    schedule = saved.schedule
    landed = []
    for feature in features:
        branch = WorkItem(feature_id=feature).branch
        tip = gitops.head(repo, branch)
        entry = entries.get(feature)
        if entry is None or entry.tip != tip:
            if tip is None:
                raise GitError(
                    f"{branch}, held for you, is gone; `send-back {feature} --why ...` builds it again"
                )
            entry = merge_queue.Landing(feature, branch, tip, 0, 0, 0.0)

        def record(results: tuple[Any, ...], feature: str = feature) -> None:
            gating.gated(log, results, "main", feature=feature, lane=None)

        tests = gating.landing_tests(keeper, repo, gitops.head(repo, trunk), trunk, record, say)
        verdict = merge_queue.land(repo, entry, tests, onto=trunk)
        if isinstance(verdict, merge_queue.Conflict):
            raise BadInput(
                f"{feature} conflicts with {trunk} in {', '.join(verdict.files)}; nothing of it moved. "
                f'`send-back {feature} --why "merge {trunk} and resolve"` has a FIX do it'
            )
        if isinstance(verdict, merge_queue.Red):
            raise GitError(
                f"the gates fail on {trunk} with {feature} merged ({verdict.output.strip()[-300:]}); "
                f"nothing of it moved; `send-back {feature} --why ...` returns it"
            )
        log.emit(
            "merge_verified",
            session=schedule.issued,
            feature=feature,
            branch=branch,
            commit=verdict.commit,
            tests="not configured" if tests is None else "passed",
        )
        schedule, _ = released(schedule, feature, config)
        queue.release(feature)
        statefile.save(records, schedule, saved.in_flight)
        landed.append(feature)
    progress.correct_passes(records, schedule.backlog.passing)
    more = [
        f for f in schedule.backlog.features if f not in schedule.backlog.passing | schedule.backlog.blocked
    ]
    return f"released {', '.join(landed)} (held by a risk rule): landed on {trunk}" + (
        f"; run the project again to build the rest ({', '.join(more)})" if more else ""
    )


def _approve_review(
    project: Path, config: AgentConfig, named: tuple[str, ...], log: EventLog, say: Say
) -> str:
    """Land work waiting on the review branch on the person's branch (all, or the `named`)."""
    trunk, repo = _review_project(project, config, "approve")
    target = landing.person_branch(project)
    before = gitops.head(repo, target)
    if before is None:
        raise BadInput(f"your branch {target} is missing; create it (or check it out), then approve again")
    landed = landing.placed(project, repo, trunk)
    done = approvals(project)
    pending = _pending(repo, landed, done, before)
    if named:
        missing = [f for f in named if f not in landed]
        if missing:
            raise BadInput(
                f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not on {trunk}; "
                f"waiting for you: {', '.join(pending) or 'nothing'}"
            )
        chosen = [f for f in pending if f in named]
        if not chosen:
            raise BadInput(
                f"{', '.join(named)}: approved already; waiting for you: {', '.join(pending) or 'nothing'}"
            )
        depends = depends_of(project)
        for feature in chosen:
            needs = [d for d in depends.get(feature, ()) if d not in done and d not in chosen]
            if needs:
                raise BadInput(
                    f"{feature} depends on {', '.join(needs)}, not approved yet; approve {' '.join([*needs, feature])}"
                )
    elif not pending:
        raise BadInput(f"nothing waits for you on {trunk}: every feature on it is approved")
    else:
        chosen = pending
    _refuse_dirty(repo, target, "approve")
    keeper = gating.Gatekeeper.of(config)

    ran: list[str] = []

    def record(results: tuple[Any, ...]) -> None:
        gating.gated(log, results, target, feature=None, lane=None)
        ran.extend(r.name for r in results)

    tests = gating.landing_tests(keeper, repo, before, target, record, say, gitops.head(repo, trunk))
    spec = _spec_in_the_way(project, repo, target, trunk)
    try:
        commit = _land_chosen(repo, trunk, target, chosen, landed, tests, project, named)
        _check_followed(repo, target, before, commit)
    finally:  # the person's copy stays, whatever became of the approval
        if spec is not None and not (project / SPEC_NAME).exists():
            progress.atomic_write_bytes(project / SPEC_NAME, spec)
    record_approval(project, chosen, commit)
    log.emit("approved", features=chosen, onto=target, commit=commit)
    gates = f"; the gates passed there ({', '.join(dict.fromkeys(ran))})" if ran else "; no gate configured"
    return f"approved {', '.join(chosen)}: on {target} at {commit[:10]}{gates}"


def _spec_in_the_way(project: Path, repo: git.Repo, target: str, trunk: str) -> bytes | None:
    """The spec the scheduler placed in the person's work tree, untracked there, removed (its
    bytes returned) when the review branch holds the same file: the person's branch gets it
    tracked, and git would refuse to write over an untracked file."""
    path = project / SPEC_NAME
    if gitops.current_branch(repo) != target or path.is_symlink() or not path.is_file():
        return None
    if str(repo.git.ls_files("--", SPEC_NAME)).strip():
        return None
    data = path.read_bytes()
    theirs = gitops.ref_sha(repo, f"refs/heads/{trunk}")
    try:
        same = theirs is not None and repo.git.rev_parse(f"{theirs}:{SPEC_NAME}") == gitops.with_input(
            repo, data, "hash-object", "--no-filters", "--stdin"
        )
    except git.GitCommandError:
        return None
    if not same:
        return None
    path.unlink()
    return data


def _land_chosen(
    repo: git.Repo,
    trunk: str,
    target: str,
    chosen: list[str],
    landed: dict[str, landing.Placed],
    tests: merge_queue.Tests | None,
    project: Path,
    named: tuple[str, ...],
) -> str:
    """The chosen features landed on the person's branch `target`: the review branch merged
    whole, or each named feature's change applied in turn; the commit `target` is at after."""
    if named:
        first = next(
            iter(landed.values())
        )  # what the review branch held before any feature: the spec, the skeleton
        commit = _apply_each(
            repo, first.base, [landed[f] for f in chosen], target, tests, descriptions(project), landed
        )
    else:
        tip = gitops.head(repo, trunk)
        assert tip is not None
        verdict = merge_queue.land(
            repo,
            merge_queue.Landing(f"approved {' '.join(chosen)}", trunk, tip, 0, 0, 0.0),
            tests,
            onto=target,
        )
        if isinstance(verdict, merge_queue.Conflict):
            raise BadInput(
                f"{trunk} conflicts with your branch {target} in {', '.join(verdict.files)}; nothing moved. Merge "
                f"by hand: `git checkout {trunk} && git merge {target}`, resolve, commit, `git checkout {target}`, "
                "then approve again"
            )
        if isinstance(verdict, merge_queue.Red):
            raise GitError(
                f"the gates fail on {target} with {trunk} merged ({verdict.output.strip()[-300:]}); "
                f"nothing moved; send the culprit back (`send-back FEATURE --why ...`) or fix {target}"
            )
        commit = verdict.commit
    return commit


def _apply_each(
    repo: git.Repo,
    foundation: str,
    chosen: list[landing.Placed],
    target: str,
    tests: merge_queue.Tests | None,
    descriptions: dict[str, str],
    placed: dict[str, landing.Placed],
) -> str:
    """Each chosen feature's change (what its landing added to the review branch) applied on
    top of `target` in turn, one commit each, after the review branch's `foundation` (what it
    held before its first feature: the spec and the project's skeleton, which every feature
    builds on) is merged when `target` lacks it; the gates run once on the last; `target` moves
    only after they pass (from the commit it was at). `placed`: every feature on the review
    branch, in landing order (what a conflict's advice names)."""
    before = gitops.head(repo, target)
    assert before is not None
    tip = before
    if not gitops.is_ancestor(repo, foundation, tip):
        merged = merge_queue.merged_tree(repo, tip, foundation)
        if isinstance(merged, merge_queue.Conflict):
            raise BadInput(
                f"the project's skeleton (what the review branch held before its first feature) conflicts with "
                f"your branch {target} in {', '.join(merged.files)}; merge {foundation[:10]} into {target} by hand, "
                "then approve again"
            )
        message = "Merge the review branch's start: the spec and the project's skeleton"
        tip = str(repo.git.commit_tree(merged, "-p", tip, "-p", foundation, "-m", message)).strip()
    for item in chosen:
        tree = three_way(repo, item.base, tip, item.merge)
        if isinstance(tree, tuple):
            picked = {c.feature for c in chosen}
            earlier = list(placed)[: list(placed).index(item.feature)] if item.feature in placed else []
            missing = _touching(repo, [placed[f] for f in earlier if f not in picked], tree)
            raise BadInput(
                f"{item.feature} does not apply to your branch {target} alone: it conflicts in {', '.join(tree)}"
                + (
                    f", which {', '.join(missing)} changed before it; approve "
                    f"{'it' if len(missing) == 1 else 'them'} with it (`approve {' '.join(sorted({*picked, *missing}))}`)"
                    if missing
                    else ""
                )
                + ", approve everything (`approve`), or merge by hand; nothing moved"
            )
        message = f"{item.feature}: {descriptions.get(item.feature, 'approved')}\n\nApproved from {item.merge[:10]}."
        tip = str(repo.git.commit_tree(tree, "-p", tip, "-m", message)).strip()
    if tests is not None:
        passed, output = tests(tip)
        if not passed:
            gitops.keep_ref(repo, f"red/approve/{tip[:12]}", tip)
            raise GitError(
                f"the gates fail on {target} with {', '.join(i.feature for i in chosen)} ({output.strip()[-300:]}); nothing moved"
            )
    try:
        gitops.move_main(repo, tip, before, target)
    except git.GitCommandError:
        raise GitError(f"{target} moved while approving; run approve again") from None
    return tip


def _touching(repo: git.Repo, items: list[landing.Placed], paths: tuple[str, ...]) -> list[str]:
    """The features of `items` whose landing changed any of `paths`, in their order."""
    wanted = set(paths)
    return [
        item.feature
        for item in items
        if wanted & {c.path for c in gitops.changes(repo, item.base, item.merge)}
    ]


def three_way(repo: git.Repo, base: str, ours: str, theirs: str) -> str | tuple[str, ...]:
    """The tree of `ours` with what `theirs` changed from `base` (a merge of trees in a private
    index: no work tree, no driver); the paths that conflict when it cannot be made alone."""
    with tempfile.TemporaryDirectory() as folder:
        env = {"GIT_INDEX_FILE": os.path.join(folder, "index")}
        repo.git.read_tree("-m", "--aggressive", base, ours, theirs, env=env)
        unmerged = str(repo.git.ls_files("--unmerged", env=env)).splitlines()
        if unmerged:
            return tuple(dict.fromkeys(line.split("\t", 1)[-1] for line in unmerged))
        return str(repo.git.write_tree(env=env)).strip()


def send_back(project: Path, config: AgentConfig, feature: str, why: str, log: EventLog, say: Say) -> str:
    """Take a feature off the review branch and give it back to a FIX that answers the person's
    words (`why`, a review of theirs the next REVIEW sees too); the line that says so."""
    words, feature = " ".join(why.split()), feature.upper()
    if not words:
        raise BadInput(
            '--why is empty: say what is wrong, as you would in a review (--why "the list does not sort")'
        )
    saved = statefile.load(project)
    if saved is None:
        raise BadInput("the project has no schedule yet; run it first")
    if saved.in_flight:
        raise BadInput("a session of the last run is still to be finished; run the project, then send back")
    if feature in dict(saved.schedule.backlog.held):
        return _send_back_held(project, config, saved, feature, words, log)
    trunk, repo = _review_project(project, config, "send-back")
    landed = landing.placed(project, repo, trunk)
    if feature not in landed:
        known = _features(project)
        if feature not in known:
            raise BadInput(f"no feature {feature} in this project; {_known(project)}")
        raise BadInput(f"{feature} is not on {trunk}; only work waiting for you there can be sent back")
    if feature in approvals(project):
        raise BadInput(f"{feature} is approved already (on your branch): revert it there with git")
    later = [f for f in saved.schedule.backlog.dependents(feature) if f in landed]
    if later:
        raise BadInput(
            f"{', '.join(later)} on {trunk} build{'s' if len(later) == 1 else ''} on {feature}: "
            f"send {'it' if len(later) == 1 else 'them'} back first"
        )
    item, tip = landed[feature], gitops.head(repo, trunk)
    assert tip is not None
    undone = three_way(repo, item.merge, tip, item.base)
    if isinstance(undone, tuple):
        after = list(landed)[list(landed).index(feature) + 1 :]
        them = _touching(repo, [landed[f] for f in after], undone) or after
        raise BadInput(
            f"{feature} cannot be taken off {trunk} alone: {', '.join(them)} changed {', '.join(undone)} after it; "
            f"send {'it' if len(them) == 1 else 'them'} back first (`send-back {them[-1]} --why ...`, the last "
            f"first), or approve and fix it on your branch; nothing moved"
        )
    revert = str(repo.git.commit_tree(undone, "-p", tip, "-m", f"Send back {feature}: {words[:200]}")).strip()
    again = three_way(repo, item.base, revert, item.merge)
    assert not isinstance(again, tuple), "a change taken off applies again on top"
    reapplied = str(
        repo.git.commit_tree(
            again, "-p", revert, "-m", f"{feature}: as approved before the person sent it back"
        )
    ).strip()
    branch = WorkItem(feature_id=feature).branch
    old = gitops.head(repo, branch)
    records = Records(project)
    review_id = progress.scheduler_review(records, feature, f"The person sent it back: {words}", "")
    try:
        repo.git.update_ref(f"refs/heads/{trunk}", revert, tip)
    except git.GitCommandError:
        raise GitError(f"{trunk} moved meanwhile; run send-back again") from None
    if old is not None:
        gitops.keep_ref(repo, f"sent-back/{feature}/{old[:12]}", old)
    repo.git.update_ref(f"refs/heads/{branch}", reapplied)
    schedule = saved.schedule
    backlog = replace(
        schedule.backlog,
        passing=schedule.backlog.passing - {feature},
        returned=(*schedule.backlog.returned, (WorkItem(feature_id=feature), review_id)),
    )
    lanes = tuple(Lane(T.WAIT) if lane.role in TERMINAL else lane for lane in schedule.lanes)
    schedule, _ = wake(replace(schedule, backlog=backlog, lanes=lanes), config)
    statefile.save(records, schedule, saved.in_flight)
    progress.correct_passes(records, schedule.backlog.passing)
    log.emit("sent_back", feature=feature, branch=branch, why=landing.PERSON, review_id=review_id)
    return f"{feature} sent back: off {trunk}; the next run's FIX answers review {review_id} (your words)"


def _send_back_held(
    project: Path, config: AgentConfig, saved: statefile.Saved, feature: str, words: str, log: EventLog
) -> str:
    """A feature a risk rule held goes back to a FIX with the person's words (it never landed)."""
    records = Records(project)
    review_id = progress.scheduler_review(records, feature, f"The person sent it back: {words}", "")
    schedule = saved.schedule
    backlog = replace(
        schedule.backlog,
        held=tuple((f, why) for f, why in schedule.backlog.held if f != feature),
        returned=(*schedule.backlog.returned, (WorkItem(feature_id=feature), review_id)),
    )
    lanes = tuple(Lane(T.WAIT) if lane.role in TERMINAL else lane for lane in schedule.lanes)
    schedule, _ = wake(replace(schedule, backlog=backlog, lanes=lanes), config)
    merge_queue.Queue(records).release(feature)
    statefile.save(records, schedule, saved.in_flight)
    branch = WorkItem(feature_id=feature).branch
    log.emit("sent_back", feature=feature, branch=branch, why=landing.PERSON, review_id=review_id)
    return f"{feature} sent back (it was held for you): the next run's FIX answers review {review_id} (your words)"


def _review_project(project: Path, config: AgentConfig, command: str) -> tuple[str, git.Repo]:
    if config.land_on not in REVIEWED or config.review_branch is None:
        raise BadInput(
            f"this project lands its work on {trunk_of(config)} (--land-on main): nothing waits for you to {command}; "
            "run it with --land-on review to review work before it reaches your branch"
        )
    if not (project / ".git").is_dir():
        raise BadInput(f"{project} has no git repository; run the project first")
    repo = safe_git.open(project)
    if gitops.head(repo, config.review_branch) is None:
        raise BadInput(
            f"{config.review_branch} is missing: no run has landed work yet; run the project first"
        )
    return config.review_branch, repo


def _refuse_dirty(repo: git.Repo, target: str, command: str) -> None:
    """Refuse while the person's branch is checked out with changes to tracked files (untracked ones stay)."""
    if gitops.current_branch(repo) != target:
        return
    changed = str(repo.git.status("--porcelain", "--untracked-files=no")).splitlines()
    if changed:
        raise BadInput(
            f"your branch {target} is checked out with {plural(len(changed), 'uncommitted change')} "
            f"({changed[0][3:]}{', ...' if len(changed) > 1 else ''}); commit or stash "
            f"{'it' if len(changed) == 1 else 'them'}, then {command} again"
        )


def _check_followed(repo: git.Repo, target: str, before: str, after: str) -> None:
    """The person's work tree, when it has `target` checked out, holds what `target` moved to;
    else `target` goes back to `before` and the refusal says why."""
    if gitops.current_branch(repo) != target or before == after:
        return
    if not str(repo.git.diff("--cached", "--name-only", after)).strip():
        return
    repo.git.update_ref(f"refs/heads/{target}", before, after)
    raise GitError(
        f"untracked files in your work tree are in the way of the approved work, so {target} did not move; "
        "move them aside (`git status`), then approve again"
    )


def _known(project: Path) -> str:
    """The project's feature ids in a few words (feature_list.json lists them with their descriptions)."""
    ids = list(_features(project))
    if not ids:
        return "it has no feature list yet"
    shown = ", ".join(ids) if len(ids) <= 12 else f"{', '.join(ids[:10])} ... {ids[-1]}"
    return f"its features are {shown} (feature_list.json says what each is)"


def _features(project: Path) -> dict[str, dict[str, Any]]:
    listed = progress.load_handoff(Records(project)).feature_list
    features = listed.get("features") if isinstance(listed, dict) else None
    return {str(f["id"]): f for f in features or () if isinstance(f, dict) and "id" in f}


def depends_of(project: Path) -> dict[str, tuple[str, ...]]:
    return {k: tuple(str(d) for d in v.get("depends_on") or ()) for k, v in _features(project).items()}


def descriptions(project: Path) -> dict[str, str]:
    return {
        k: str(v.get("description", "")).splitlines()[0][:72] if v.get("description") else ""
        for k, v in _features(project).items()
    }
