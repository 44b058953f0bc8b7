"""The merge queue: approved work lands on the authoritative `main`, tested on the merge.

A lane's REVIEW approves a feature (and merges it into its lane's own view of `main`); landing
it on the project's `main` is the scheduler's. `land` merges the approved tip onto the current
`main` without a work tree (`git merge-tree --write-tree`, through the scheduler's hardened git:
no merge driver, hook or filter of the repository runs), runs the test command on the merge (the
caller's `Tests`: a clean worktree inside the command sandbox, `gitops.run_tests_at`), and moves
`main` only when they pass, and only from the `main` the merge was made on (a compare-and-swap of
the ref: a `main` that moved meanwhile is merged onto again). A textual conflict comes back with
its files, a red test with its output, for the feature to go back to its lane as FIX work; a tip
that is on `main` already is not merged again. While `main` has not moved since the lane synced
(always, with one lane), the REVIEW's own merge, verified and tested in its lane, lands as it is:
`main` fast-forwards to it, with no second test run. `land_batch` lands several approved tips
together, as `core/batching.py` plans: merged one after another, tested on the last merge (and,
with several runners, on earlier merges of the chain side by side), narrowed down on red; `land`
is its batch of one.

`Queue` is the order of the approved work waiting to land, kept in the records
(`.agent_logs/merge_queue.json`, written atomically), so that a killed scheduler's next run lands
what was approved and nothing twice.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import git

from session_scheduler.core import batching
from session_scheduler.core.errors import GitError, SchedulerError, StateError
from session_scheduler.core.layout import LOG_DIR
from session_scheduler.core.risk import FileChange
from session_scheduler.repo import gitops
from session_scheduler.store.progress import atomic_write_json, read_json
from session_scheduler.store.records import Records

QUEUE_FILE = f"{LOG_DIR}/merge_queue.json"
STACKED = "stacked"
"""refs/scheduler/stacked/<branch>/<commit>: an approved merge, waiting to land, that a session of
the work of <branch> began on (its lane went on from its own approval instead of waiting)."""
RETRIES = 3
"""How often `land` merges again onto a `main` that moved while it tested (then: an error)."""


@dataclass(frozen=True)
class Landing:
    """Approved work waiting to land: a feature's branch at the tip its REVIEW approved."""

    feature: str
    branch: str
    tip: str
    lane: int
    review_id: int
    queued_at: float
    merge: str | None = None
    """The REVIEW's own merge of the tip onto the `main` its lane synced to, verified in its lane,
    fetched into the project: it lands as it is while `main` has not moved."""
    merge_tested: bool = True
    """Its lane ran the gates on that merge; False: it left them to the queue (it expected `main`
    to move first), which runs them on the merge it lands, that one or its own."""


@dataclass(frozen=True)
class Landed:
    commit: str
    """`main` after it: the merge, or (again) the `main` the tip was already on."""
    again: bool = False
    """The tip was on `main` already: nothing was merged (never twice)."""
    reviewed: bool = False
    """The REVIEW's own verified merge landed as it is (`main` had not moved): tested once, by its
    lane or (`Landing.merge_tested` False) by the queue."""


@dataclass(frozen=True)
class Conflict:
    files: tuple[str, ...]
    detail: str
    """git's own lines about the conflicts (for the FIX session)."""


@dataclass(frozen=True)
class Red:
    commit: str
    """The merge the tests failed on (kept under refs/scheduler/red/, `main` did not move)."""
    output: str


Verdict = Landed | Conflict | Red
Tests = Callable[[str], tuple[bool, str]]
"""The test command run on a commit: (passed, the end of its output)."""


def land(
    repo: git.Repo,
    landing: Landing,
    tests: Tests | None,
    guard: contextlib.AbstractContextManager[object] | None = None,
    onto: str = gitops.MAIN,
) -> Verdict:
    """Land one approved tip on `onto` (`main`, the review branch, or the person's branch when
    they approve; see the module's text); `guard`: held while the branch moves and the work
    tree follows (what reads the branch under it never sees it half moved). A batch of one."""
    ((_, verdict),) = land_batch(repo, [landing], lambda _: tests, guard, onto, cap=1)
    return verdict


Settle = Callable[[Landing, Verdict, int], None]
"""Told of each landing the batch settles, as soon as it is settled: its verdict, and how many
branches the test run that settled it held (0: none ran)."""


@dataclass(frozen=True)
class _Merged:
    """One landing's place in a batch's chain of merges onto `main`."""

    landing: Landing
    commit: str
    reviewed: bool
    """The REVIEW's own merge, as it is (the first of a chain onto the `main` its lane synced to)."""


def land_batch(
    repo: git.Repo,
    landings: list[Landing],
    tests_for: Callable[[tuple[Landing, ...]], Tests | None],
    guard: contextlib.AbstractContextManager[object] | None = None,
    onto: str = gitops.MAIN,
    cap: int = batching.DEFAULT_CAP,
    settle: Settle | None = None,
    runners: int = 1,
) -> list[tuple[Landing, Verdict]]:
    """Land approved tips on `onto`, in queue order, up to `cap` tested together
    (`core/batching.py`): the set is merged one after another onto `main` (a merge commit each;
    a REVIEW's own merge, as it is, where it was made onto this `main`), the tests run on the
    last merge (`tests_for` the set: None, no tests; a single REVIEW's merge tested in its lane
    runs none), and with `runners` above one on earlier merges of the chain too, side by side;
    green moves `main` to the longest green merge by one compare-and-swap. Red narrows down;
    the culprit alone goes back, with the output of the red run that bounded it. A conflict
    with `main` goes back at once; one only with branches before it in the set waits for the
    next batch (then `main` holds them, and its FIX starts from that `main`). A tip `main`
    holds already lands again without a merge (a kill after it landed). Every landing's
    verdict, in the order they were settled (each also told to `settle` at once)."""
    ref = f"refs/heads/{onto}"
    by_branch = {landing.branch: landing for landing in landings}
    out: list[tuple[Landing, Verdict]] = []

    def settled(landing: Landing, verdict: Verdict, tested: int) -> None:
        out.append((landing, verdict))
        if settle is not None:
            settle(landing, verdict, tested)

    def unlanded(branches: tuple[str, ...]) -> tuple[str, ...]:
        """Of these, those `main` does not hold yet; the others land again, not merged twice
        (they landed before a kill, or while the queue tested)."""
        main = _trunk(repo, onto)
        left = []
        for branch in branches:
            landing = by_branch[branch]
            if not _reviewed_onto(repo, landing, main) and gitops.is_ancestor(repo, landing.tip, main):
                settled(landing, Landed(main, again=True), 0)
            else:
                left.append(branch)
        return tuple(left)

    waiting = unlanded(tuple(by_branch))
    step = batching.plan(waiting, cap, runners)
    last_red: tuple[str, str, int] | None = None  # the red run that bounded a culprit: merge, output, size
    chain: list[_Merged] = []  # the merges the last runs tested, onto `main` (`main` then)
    main = ""
    tested = False  # whether tests ran on them
    moved = 0
    # Each pass settles a landing, narrows a red set (at most `cap.bit_length()` times in a row),
    # defers a branch to the next batch (at most once a batch each), plans the next batch or
    # merges again onto a `main` that moved: more is a planner's bug.
    for _ in range((len(landings) + 1) * (len(landings) + cap.bit_length() + 3) + RETRIES):
        for n, move in enumerate(step.moves):
            if isinstance(move, batching.Land):
                top = chain[len(move.branches) - 1]
                with guard or contextlib.nullcontext():
                    try:
                        repo.git.update_ref(ref, top.commit, main)  # only from the `main` it was merged onto
                    except git.GitCommandError:  # `main` moved meanwhile: merged onto the new one
                        moved += 1
                        if moved >= RETRIES:
                            raise GitError(
                                f"`{onto}` kept moving while {' and '.join(move.branches)} "
                                f"{'was' if len(move.branches) == 1 else 'were'} landed ({RETRIES} tries); "
                                "stop what else writes to the repository and run the same command again"
                            ) from None
                        later = (b.branch for b in step.moves[n + 1 :] if isinstance(b, batching.SendBack))
                        step = batching.plan(
                            unlanded((*move.branches, *later, *step.batch.remaining)), cap, runners
                        )
                        break
                    gitops.follow_main(repo, main, top.commit, onto)
                main = top.commit
                for merged in chain[: len(move.branches)]:
                    settled(
                        merged.landing,
                        Landed(merged.commit, reviewed=merged.reviewed),
                        len(move.branches) if tested else 0,
                    )
                chain = chain[len(move.branches) :]
            elif move.cause == "red":
                assert last_red is not None, "a branch is red only after a red run"
                commit, output, size = last_red
                settled(by_branch[move.branch], _red(repo, by_branch[move.branch], commit, output), size)
        else:
            if isinstance(step.next, batching.Done):
                done = {landing.branch for landing, _ in out}
                left = tuple(branch for branch in waiting if branch not in done)
                if not left:
                    return out
                step = batching.plan(left, cap, runners)  # the next batch
                continue
            sizes = step.next.sizes
            group = tuple(by_branch[branch] for branch in step.next.branches)
            main = _trunk(repo, onto)
            chained = _chain(repo, main, group)
            if isinstance(chained, tuple):
                culprit, conflict = chained
                if culprit is not group[0] and not isinstance(merged_tree(repo, main, culprit.tip), Conflict):
                    # only with work before it in the set: it waits for the next batch, merged onto
                    # the `main` that holds that work (its FIX, if any, then starts from it)
                    step = batching.deferred(step.batch, culprit.branch)
                    continue
                settled(culprit, conflict, 0)
                step = batching.conflicted(step.batch, culprit.branch)
                continue
            chain = chained
            top = chain[-1]
            single = len(chain) == 1 and top.reviewed and top.landing.merge_tested
            runs = [] if single else [(n, tests_for(group[:n])) for n in sizes]
            tested = any(tests is not None for _, tests in runs)
            answers = _run_side_by_side([(tests, chain[n - 1].commit) for n, tests in runs])
            red = next((i for i, (ok, _) in enumerate(answers) if not ok), None)
            if red is not None:
                size = runs[red][0]
                last_red = (chain[size - 1].commit, answers[red][1], size)
            step = batching.after_test(step.batch, tuple(ok for ok, _ in answers) or (True,) * len(sizes))
    raise SchedulerError(
        f"the merge queue made no progress landing {', '.join(by_branch)} (a bug; nothing moved after "
        "the last landing it recorded): run the same command again, and with `--lanes 1` if it recurs"
    )


def _run_side_by_side(runs: list[tuple[Tests | None, str]]) -> list[tuple[bool, str]]:
    """Each test run on its commit (None: no tests, green), side by side when there are more."""
    if len(runs) <= 1:
        return [(True, "") if tests is None else tests(commit) for tests, commit in runs]
    with ThreadPoolExecutor(max_workers=len(runs), thread_name_prefix="queue-tests") as pool:
        return list(pool.map(lambda run: (True, "") if run[0] is None else run[0](run[1]), runs))


def _trunk(repo: git.Repo, onto: str) -> str:
    main = gitops.head(repo, onto)
    if main is None:
        raise GitError(f"`{onto}` is missing; restore it (see `git reflog`) and run the same command again")
    return main


def _reviewed_onto(repo: git.Repo, landing: Landing, main: str) -> bool:
    """Whether the landing's REVIEW merge was made onto this `main` (it lands as it is)."""
    return landing.merge is not None and gitops.parents(repo, landing.merge) == [main, landing.tip]


def _chain(repo: git.Repo, main: str, group: tuple[Landing, ...]) -> list[_Merged] | tuple[Landing, Conflict]:
    """The group merged one after another onto `main`, or the first that conflicts."""
    chain: list[_Merged] = []
    at = main
    for landing in group:
        if not chain and _reviewed_onto(repo, landing, main):
            assert landing.merge is not None
            chain.append(_Merged(landing, landing.merge, True))
            at = landing.merge
            continue
        merged = merged_tree(repo, at, landing.tip)
        if isinstance(merged, Conflict):
            return landing, merged
        at = str(
            repo.git.commit_tree(
                merged, "-p", at, "-p", landing.tip, "-m", f"Merge {landing.branch} ({landing.feature})"
            )
        ).strip()
        chain.append(_Merged(landing, at, False))
    return chain


def reviewed_ref(branch: str) -> str:
    """Where the project keeps the REVIEW's merge of `branch` while it waits to land."""
    return f"refs/scheduler/reviewed/{branch}"


def stacked_on(repo: git.Repo, branch: str) -> list[str]:
    """The approved merges, waiting to land then, that sessions of the work of `branch` began on."""
    prefix = f"refs/scheduler/{STACKED}/{branch}/"
    return str(repo.git.for_each_ref("--format=%(objectname)", prefix)).split()


def unlanded_bases(repo: git.Repo, landing: Landing, main: str, stacked: list[str]) -> list[str]:
    """Of the approved merges the work of `landing` began on (`stacked_on`), those its tip holds
    whose work has not landed as approved: neither the merge nor every one of its parents is on
    `main` (it was sent back, held, or rebuilt). Landing that tip would land their work unapproved."""
    return [
        base
        for base in stacked
        if not gitops.is_ancestor(repo, base, main)
        and gitops.is_ancestor(repo, base, landing.tip)
        and not all(gitops.is_ancestor(repo, parent, main) for parent in gitops.parents(repo, base))
    ]


def forget_stacked(repo: git.Repo, branch: str, stacked: list[str]) -> None:
    """The records of what the work of `branch` began on (`stacked`), once it landed or was set aside."""
    for base in stacked:
        repo.git.update_ref("-d", f"refs/scheduler/{STACKED}/{branch}/{base}")


def _red(repo: git.Repo, landing: Landing, commit: str, output: str) -> Red:
    """The merge `commit` of `landing`, red: kept under refs/scheduler/red/ (nothing lost)."""
    gitops.keep_ref(repo, f"red/{re.sub(r'[^A-Za-z0-9._-]+', '-', landing.feature)}/{commit[:12]}", commit)
    return Red(commit, output)


def merged_tree(repo: git.Repo, main: str, tip: str) -> str | Conflict:
    """The merged tree of `main` and `tip`, or the conflict (no work tree, no index touched)."""
    status, out, err = repo.git.merge_tree(
        "--write-tree", "--name-only", main, tip, with_extended_output=True, with_exceptions=False
    )
    if status == 0:
        return str(out).splitlines()[0]
    if status != 1:  # 1: conflicts; anything else is git failing
        raise GitError(f"git merge-tree failed in {repo.working_dir}: {str(err).strip()[-300:]}")
    head, _, messages = str(out).partition("\n\n")
    files = tuple(dict.fromkeys(line for line in head.splitlines()[1:] if line))
    return Conflict(files, messages.strip()[-2000:])


class Queue:
    """The approved work waiting to land, oldest first, and the work a risk rule holds for the
    person, in the records (crash-safe: every change is one atomic write; a landing is removed
    only after `main` holds it, or once it is held)."""

    def __init__(self, records: Records) -> None:
        self.path = records.path(QUEUE_FILE)

    def _read(self) -> tuple[list[Landing], list[tuple[Landing, str]]]:
        if not self.path.exists():
            return [], []
        try:
            data = read_json(self.path)
            waiting = [Landing(**entry) for entry in data["waiting"]]
            held = [
                (Landing(**{k: v for k, v in entry.items() if k != "why"}), str(entry["why"]))
                for entry in data.get("held", [])
            ]
        except (KeyError, TypeError, StateError) as exc:
            raise StateError(
                f"{self.path} is damaged ({exc}); delete it (the lanes' approved branches are kept, "
                "and their REVIEW runs again) and run the same command again"
            ) from None
        return waiting, held

    def pending(self) -> list[Landing]:
        return self._read()[0]

    def held(self) -> list[tuple[Landing, str]]:
        """The landings a risk rule holds for the person, with the rule's words, oldest first."""
        return self._read()[1]

    def add(self, landing: Landing) -> None:
        """Queue approved work (a tip queued already is not queued twice)."""
        waiting, held = self._read()
        if any(entry.tip == landing.tip for entry in waiting):
            return
        self._write([*waiting, landing], held)

    def done(self, landing: Landing) -> None:
        """Take a landing off the queue: it landed, or went back to its lane."""
        waiting, held = self._read()
        self._write([entry for entry in waiting if entry != landing], held)

    def hold(self, landing: Landing, why: str) -> None:
        """Move a landing from the queue to the person's: it waits for their approval."""
        waiting, held = self._read()
        kept = [(entry, w) for entry, w in held if entry.feature != landing.feature]
        self._write([entry for entry in waiting if entry != landing], [*kept, (landing, why)])

    def release(self, feature: str) -> None:
        """The person approved a held feature (it landed)."""
        waiting, held = self._read()
        self._write(waiting, [(entry, why) for entry, why in held if entry.feature != feature])

    def _write(self, waiting: list[Landing], held: list[tuple[Landing, str]]) -> None:
        data: dict[str, Any] = {"waiting": [asdict(entry) for entry in waiting]}
        if held:
            data["held"] = [{**asdict(entry), "why": why} for entry, why in held]
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.path, data)


NAMED_AT_MOST = 500
"""`file_changes` names at most this many paths to `git ls-tree` (more: it lists the whole tree)."""


def file_changes(repo: git.Repo, base: str, tip: str, *, sizes_too: bool = True) -> list[FileChange]:
    """What `tip` changes since it forked from `base` (their merge base), file by file, as the
    risk rules see it (renames as a removal and an addition; a binary file deletes no lines);
    `sizes_too`: each file's size after (else None, one git command fewer)."""
    listing = str(
        repo.git.diff(
            "--numstat", "-z", "--no-renames", f"{base}...{tip}", "--", strip_newline_in_stdout=False
        )
    )
    deleted: dict[str, int] = {}
    for entry in filter(None, listing.split("\0")):
        _, gone, path = entry.split("\t", 2)
        deleted[path] = int(gone) if gone.isdigit() else 0
    if not deleted or not sizes_too:
        return [FileChange(path, gone, None) for path, gone in deleted.items()]
    sizes: dict[str, int] = {}
    named = (
        sorted(deleted) if len(deleted) <= NAMED_AT_MOST else []
    )  # else the whole tree: no huge command line
    tree = str(repo.git.ls_tree("-r", "-l", "-z", tip, "--", *named, strip_newline_in_stdout=False))
    for entry in filter(None, tree.split("\0")):
        header, path = entry.split("\t", 1)
        size = header.split()[3]
        if size.isdigit():
            sizes[path] = int(size)
    return [FileChange(path, gone, sizes.get(path)) for path, gone in deleted.items()]
