"""Several lanes at once, over one schedule (issue 19; not yet on the command line: kills,
usage limits and outages, the console's lanes and the real CLI's lanes come before it is).

One thread per lane runs its sessions, one thread lands approved work; the authority is this
object: the `Schedule`, the project's records, its `main` and the event log, changed only under
`self.lock`. A lane works in its own clone (`repo/workdirs.py`), synced to the project's `main`
before each session; its session writes an outbox (`store/outbox.py`) that is verified in the
lane and then applied to the records, with review ids given out here; its branch is fetched back
into the project. A REVIEW's PASS approves (`Approved`); the merge queue (`repo/merge_queue.py`)
lands approved work on `main` one at a time, tested on the merge, and a conflict or a red test
goes back to a free lane as a FIX against a review the scheduler writes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import anyio
import git

from session_scheduler.core.clock import Clock, SystemClock
from session_scheduler.core.config import TERMINAL, AgentConfig, SessionType
from session_scheduler.core.errors import SchedulerError
from session_scheduler.core.humane import duration
from session_scheduler.core.machine import (
    ARCHITECTURE_BRANCH,
    FEATURE_BRANCH,
    Approved,
    Blocked,
    Event,
    Merged,
    Rejected,
    SessionState,
    WorkItem,
)
from session_scheduler.core.policy import policy
from session_scheduler.core.schedule import IDLE, Schedule, landed, sent_back, transition_lane, wake
from session_scheduler.core.session import SessionFolder
from session_scheduler.core.standing import Then, Wait
from session_scheduler.guard import processes, safe_git
from session_scheduler.repo import gitops, merge_queue, workdirs
from session_scheduler.repo.merge_queue import Conflict, Landed, Landing, Queue, Red
from session_scheduler.run.agent import SessionRequest, SessionResult, SessionRunner
from session_scheduler.run.classify import LIMIT_MARGIN_S, Classified, backoff_s, cut_short, judged, receipt
from session_scheduler.run.plan import brief_for, plan_session, write_plan
from session_scheduler.run.verify import capture, verify_session
from session_scheduler.store import progress, statefile
from session_scheduler.store.events import EventLog, new_run_id
from session_scheduler.store.outbox import apply, open_outbox
from session_scheduler.store.records import Records

T = SessionType


@dataclass(frozen=True)
class LanesReport:
    schedule: Schedule
    sessions: int
    landed: tuple[str, ...]
    """The work items that landed on `main`, in order."""
    sent_back: tuple[str, ...]


class Lanes:
    """Runs `lanes` lanes over the project until every feature passes or is blocked."""

    def __init__(
        self,
        project: Path,
        config: AgentConfig,
        runner: SessionRunner,
        lanes: int,
        *,
        echo: Callable[[str], None] = print,
        events: EventLog | None = None,
        clock: Clock | None = None,
    ) -> None:
        if lanes < 2:
            raise ValueError("lanes run two or more lanes; one lane is the Scheduler (run/scheduler.py)")
        self.project, self.config, self.runner, self.count = project, config, runner, lanes
        self.records = Records(project)
        self.echo = echo
        self.clock = clock or SystemClock()
        self.paused_until = 0.0
        """No lane starts a session before this (clock time): a usage limit's reset, an outage's back-off."""
        self.outages = 0
        self.outage_since: float | None = None
        self.reruns: dict[int, tuple[int, SessionState]] = {}
        """Per lane, the session cut short that it runs again (its number and its state)."""
        self.events = events or EventLog(project, new_run_id())
        self.lock = threading.Condition()
        self.schedule = Schedule()
        self.queue = Queue(self.records)
        self.failed: BaseException | None = None
        self.sessions = 0
        self.landed: list[str] = []
        self.returned: list[str] = []

    # -- the authority ------------------------------------------------------------------------
    def run(self) -> LanesReport:
        gitops.open_repo(self.project)  # made, or checked, before any lane clones it
        saved = statefile.load(self.records)
        state = saved.state if saved else SessionState()
        schedule = (
            saved.schedule
            if saved and len(saved.schedule.lanes) == self.count
            else Schedule.of(state, self.count)
        )
        if not state.backlog.features:
            progress.ensure_handoff_files(self.records, self.project.name)
        self.schedule = wake(schedule, self.config)[0]
        threads = [
            threading.Thread(target=self._guarded, args=(self._lane, n), name=f"lane-{n}")
            for n in range(self.count)
        ]
        threads.append(threading.Thread(target=self._guarded, args=(self._land, None), name="merge-queue"))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if self.failed is not None:
            raise self.failed
        return LanesReport(self.schedule, self.sessions, tuple(self.landed), tuple(self.returned))

    def _guarded(self, body: Callable[[int | None], None], lane: int | None) -> None:
        try:
            body(lane)
        except BaseException as exc:  # any failure stops every lane; the caller raises it
            with self.lock:
                self.failed = self.failed or exc
                self.lock.notify_all()

    def _save(self) -> None:
        self.events.sync()
        statefile.save(self.records, self.schedule, {})

    def _say(self, lane: int | None, line: str) -> None:
        self.echo(f"[{'queue' if lane is None else f'lane {lane}'}] {line}")

    # -- a lane -------------------------------------------------------------------------------
    def _lane(self, lane: int | None) -> None:
        assert lane is not None
        repo = safe_git.open(self.project)  # each thread its own: GitPython's helpers are not shared
        while True:
            self._paused()
            with self.lock:
                while self.failed is None and self.schedule.lanes[lane].role is T.WAIT:
                    self.lock.wait(timeout=1.0)
                if self.failed is not None or self.schedule.lanes[lane].role in TERMINAL:
                    self.lock.notify_all()
                    return
                if lane in self.reruns:  # the same session, from the same start
                    number, view = self.reruns.pop(lane)
                else:
                    view = self.schedule.view(lane)
                    self.schedule, number = self.schedule.issue()
                self._save()
                main = gitops.head(repo, gitops.MAIN)
                assert main is not None
                folder = SessionFolder.of(self.project, number, view.lane.role)
                outbox = open_outbox(self.records, folder.path / "outbox")
            self._session(repo, lane, number, replace(view, session_count=number - 1), main, folder, outbox)

    def _session(
        self,
        repo: git.Repo,
        lane: int,
        number: int,
        state: SessionState,
        main: str,
        folder: SessionFolder,
        outbox: Records,
    ) -> None:
        """One session of the lane: its clone made ready, the session run and verified there,
        then (under the lock) its outbox applied, its branch brought back, its outcome transitioned."""
        role, work = state.lane.role, state.lane.work
        with self.lock:  # what reads the project's repository runs while no worktree is half made there
            clone, workdir = self._ready(repo, lane, role, work, main)
        plan = plan_session(state, self.config, workdir, brief=brief_for(state, self.config, outbox))
        pre = capture(outbox, clone, state, folder.path / SessionFolder.PRE)
        request = SessionRequest(plan, workdir, write_plan(plan, workdir), folder.path, outbox)
        with self.lock:
            self.events.emit(
                "session_started",
                session=number,
                role=role.value,
                model=plan.model,
                feature=work.feature_id if work else None,
                branch=work.branch if work else None,
                attempt=state.lane.attempts + 1,
                log_dir=str(folder.path.relative_to(self.project)),
                lane=lane,
            )
        started = time.time()  # the OS's clock: compared with processes' start times
        result = anyio.run(self.runner.run, request)
        processes.stop_left_in(workdir, started)
        cut = cut_short(result, plan.model, capped_by_session=plan.capped_by_session, role=role.value)
        if cut is not None:
            self._cut(lane, number, state, plan.model, result, cut)
            return
        listed = workdir / "feature_list.json"
        if role is T.INITIALIZER and listed.is_file() and not listed.is_symlink():  # written, not sent
            progress.atomic_write_bytes(outbox.path("feature_list.json"), progress.read_regular(listed))
        outcome = verify_session(outbox, clone, state, pre, self.config, lambda line: self._say(lane, line))
        classified = judged(result, outcome)
        with self.lock:
            applied = apply(outbox, self.records, number)
            if outcome.review_id is not None:
                outcome = replace(
                    outcome, review_id=applied.review_ids.get(outcome.review_id, outcome.review_id)
                )
            if work is not None:
                workdirs.bring_back(repo, workdir, work.branch)
            if role is T.INITIALIZER and outcome.ok:  # its skeleton: main is quiet while it runs alone
                gitops.set_branch(repo, gitops.MAIN, workdirs.take_main(repo, workdir))
            events: tuple[Event, ...] = ()
            if classified.standing.counted:
                self.schedule, events = transition_lane(self.schedule, lane, outcome, self.config)
                self.outages, self.outage_since = 0, None
            for event in events:
                self._act(repo, lane, event, number, outcome.review_id or 0)
            progress.correct_passes(self.records, self.schedule.backlog.passing)
            self.events.emit(
                "session_ended",
                session=number,
                role=role.value,
                feature=work.feature_id if work else None,
                standing=classified.standing.value,
                reason=classified.reason,
                receipt=receipt(result, plan.model, classified, outcome.verdict),
            )
            self.sessions += 1
            self._save()
            verdict = f" {outcome.verdict}" if outcome.verdict else ""
            why = "" if outcome.ok else f" ({outcome.reason})"
            self._say(lane, f"session {number} {role.value}{verdict}: {classified.standing.value}{why}")
            self.lock.notify_all()

    def _paused(self) -> None:
        """Wait while every lane is paused (a usage limit, an outage): one wait for all of them."""
        while True:
            with self.lock:
                delay = self.paused_until - self.clock.now()
                if delay <= 0 or self.failed is not None:
                    return
            self.clock.sleep(min(delay, 60.0))

    def _cut(
        self, lane: int, number: int, state: SessionState, model: str, result: SessionResult, cut: Classified
    ) -> None:
        """A session cut short, not by the agent: a usage limit pauses every lane until its reset,
        an outage backs every lane off (until `--max-outage-minutes`), an interruption reruns at
        once; the lane runs the same session again from the same start. What retrying cannot fix
        (auth, budget, the sandbox) stops every lane."""
        consequence = cut.standing.consequence
        with self.lock:
            self.events.emit(
                "session_ended",
                session=number,
                role=state.lane.role.value,
                feature=state.lane.work.feature_id if state.lane.work else None,
                standing=cut.standing.value,
                reason=cut.reason,
                receipt=receipt(result, model, cut, None),
            )
            if consequence.then is not Then.RERUN:
                raise SchedulerError(f"{cut.reason}; {consequence.stop or 'run the same command again'}")
            now = self.clock.now()
            if consequence.wait is Wait.RESET:
                until = (cut.resets_at or now) + LIMIT_MARGIN_S
            elif consequence.wait is Wait.BACKOFF:
                self.outages += 1
                if self.outage_since is None:  # from the first failed request, the CLI's retries included
                    self.outage_since = now - result.retrying_s
                until = now + backoff_s(self.outages, self.clock)
                if until - self.outage_since > self.config.max_outage_minutes * 60:
                    raise SchedulerError(
                        f"{cut.reason}; gave up after the API failed for longer than --max-outage-minutes "
                        f"{self.config.max_outage_minutes:g}; run the same command again later"
                    )
            else:
                until = now
            self.reruns[lane] = (number, state)
            if until > self.paused_until:
                self.paused_until = until
                self.events.emit("limit_wait", session=number, why=cut.standing.value, until=until)
                self._say(
                    lane,
                    f"{cut.reason}: every lane waits {duration(until - now)}, then session {number} runs again",
                )
            self._save()
            self.lock.notify_all()

    def _ready(
        self, repo: git.Repo, lane: int, role: SessionType, work: WorkItem | None, main: str
    ) -> tuple[git.Repo, Path]:
        """The lane's clone made ready for a session: on the project's `main`, with the work's
        branch as the project has it (none where the project has none), checked out for a role
        that starts on it."""
        clone, remade = workdirs.ensure(repo, self.project, lane)
        if remade:
            self._say(lane, f"its clone was made again: {remade}")
        workdir = Path(clone.working_dir)
        workdirs.sync_main(clone, self.project, main)
        clone.git.checkout("-q", "-f", gitops.MAIN)  # what a session left uncommitted here is not kept
        if work is not None:  # the branch as the project has it (or none, as the project has none)
            if gitops.head(repo, work.branch) is not None:
                workdirs.hand_over(repo, clone, self.project, work.branch)
            elif gitops.head(clone, work.branch) is not None:
                clone.git.branch("-D", work.branch)
            if (
                role is T.FIX
                and work.architecture_review is not None
                and gitops.head(clone, work.branch) is None
            ):
                clone.git.branch(work.branch, main)
            if policy(role).starts_on == "work":
                clone.git.checkout("-q", work.branch)
        return clone, workdir

    def _act(self, repo: git.Repo, lane: int | None, event: Event, number: int, review_id: int = 0) -> None:
        """What the authority does about one event (under the lock); `review_id`: the review that
        approved work (an `Approved` event's)."""
        if isinstance(event, Approved):
            tip = gitops.head(repo, event.work.branch)
            assert tip is not None, f"the approved {event.work.branch} is missing"
            name = event.work.feature_id or event.work.branch
            self.queue.add(Landing(name, event.work.branch, tip, lane or 0, review_id, time.time()))
            self._say(lane, f"{event.work.branch} approved: queued to land on main")
        elif isinstance(event, Rejected):
            tip = gitops.head(repo, event.work.branch)
            if tip is not None:
                gitops.keep_ref(repo, f"rejected/session-{number}/{event.work.branch}", tip)
                gitops.delete_branch(repo, event.work.branch)
        elif isinstance(event, Blocked):
            self._say(lane, f"blocked: {event.feature_id}")
        elif isinstance(event, Merged):
            self.landed.append(event.work.feature_id or event.work.branch)

    # -- the merge queue ----------------------------------------------------------------------
    def _land(self, _: int | None) -> None:
        repo = safe_git.open(self.project)
        while True:
            with self.lock:
                while self.failed is None and not self.queue.pending() and not self.schedule.settled:
                    if all(lane.role in IDLE for lane in self.schedule.lanes):
                        raise SchedulerError(
                            "every lane waits and nothing is in the merge queue: the schedule is stuck "
                            "(a bug); run the project with one lane"
                        )
                    self.lock.wait(timeout=1.0)
                if self.failed is not None or (self.schedule.settled and not self.queue.pending()):
                    self.lock.notify_all()
                    return
                landing = self.queue.pending()[0]
            began = time.time()
            verdict = merge_queue.land(repo, landing, self._tests(repo))
            timing = {
                "waited_s": round(began - landing.queued_at, 3),
                "land_s": round(time.time() - began, 3),
            }
            with self.lock:
                work = _work_of(landing.branch)
                if isinstance(verdict, Landed):
                    self.schedule, events = landed(self.schedule, work, self.config)
                    self.events.emit(
                        "merge_verified",
                        session=self.schedule.issued,
                        feature=work.feature_id,
                        branch=landing.branch,
                        commit=verdict.commit,
                        tests="passed" if self.config.test_command else "not configured",
                        lane=landing.lane,
                        **timing,
                    )
                    self._say(None, f"{landing.branch} landed on main ({verdict.commit[:10]})")
                else:
                    review = self._scheduler_review(work, verdict)
                    self.schedule, events = sent_back(self.schedule, work, review, self.config)
                    self.returned.append(landing.feature)
                    why = "conflict" if isinstance(verdict, Conflict) else "tests"
                    self.events.emit(
                        "sent_back",
                        feature=work.feature_id,
                        branch=landing.branch,
                        why=why,
                        review_id=review,
                        **timing,
                    )
                    self._say(None, f"{landing.branch} sent back to a lane (review {review})")
                for event in events:
                    self._act(repo, None, event, self.schedule.issued)
                self.queue.done(landing)
                progress.correct_passes(self.records, self.schedule.backlog.passing)
                self._save()
                self.lock.notify_all()

    def _tests(self, repo: git.Repo) -> merge_queue.Tests | None:
        command = self.config.test_command
        if not command:
            return None
        return lambda commit: gitops.run_tests_at(
            repo,
            commit,
            command,
            allowed_domains=self.config.allowed_domains,
            sandboxed=self.config.sandbox,
            guard=self.lock,  # the lanes fetch into the project under it
        )

    def _scheduler_review(self, work: WorkItem, verdict: Conflict | Red) -> int:
        """The review that sends work back (under the lock): what conflicted, or the tests' output."""
        if isinstance(verdict, Conflict):
            finding = f"merging onto main conflicts in {', '.join(verdict.files)}; merge main into the branch and resolve"
            detail = verdict.detail
        else:
            finding = "the tests fail on main with this branch merged"
            detail = verdict.output
        data = progress.load_handoff(self.records).reviews or {"reviews": [], "fixes": []}
        reviews = list(data.get("reviews", []))
        review_id = max((int(r["review_id"]) for r in reviews), default=0) + 1
        reviews.append(
            {
                "review_id": review_id,
                "feature_id": work.feature_id,
                "kind": "feature" if work.feature_id else "architecture",
                "verdict": "REQUEST_CHANGES",
                "issues": {"critical": [finding], "major": [], "minor": []},
                "scheduler_findings": [detail.strip()[-1500:]],
            }
        )
        progress.atomic_write_json(self.records.path("reviews.json"), {**data, "reviews": reviews})
        return review_id


def _work_of(branch: str) -> WorkItem:
    """The work item a branch is the work of (`feature/F001`, `arch/4`)."""
    if branch.startswith(FEATURE_BRANCH):
        return WorkItem(feature_id=branch.removeprefix(FEATURE_BRANCH))
    return WorkItem(architecture_review=int(branch.removeprefix(ARCHITECTURE_BRANCH)))
