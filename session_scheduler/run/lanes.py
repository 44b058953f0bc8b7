"""The one loop: lanes over one schedule, each in a clone (`--lanes N`, one lane included).

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

import contextlib
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Generic, TypeVar

import git

from session_scheduler.core import batching, risk
from session_scheduler.core.clock import Clock, SystemClock
from session_scheduler.core.config import TERMINAL, AgentConfig, SessionType, risk_rules, trunk_of
from session_scheduler.core.errors import (
    BadInput,
    GitError,
    NotLoggedIn,
    SchedulerError,
    StateError,
    UnknownModel,
)
from session_scheduler.core.gates import GateResult
from session_scheduler.core.humane import duration, money, plural
from session_scheduler.core.layout import FEATURES_FILE, LOG_DIR, SETTINGS_FILE, STATE_FILE
from session_scheduler.core.machine import (
    ARCHITECTURE_BRANCH,
    FEATURE_BRANCH,
    Approved,
    Blocked,
    Event,
    GaveUp,
    Merged,
    Outcome,
    Rejected,
    Retry,
    SessionState,
    WorkItem,
    extends,
)
from session_scheduler.core.policy import policy
from session_scheduler.core.schedule import (
    IDLE,
    Schedule,
    extended,
    held,
    landed,
    planning,
    resized,
    restarted,
    resumed,
    sent_back,
    transition_lane,
    unready,
    wake,
)
from session_scheduler.core.session import REATTACHED, InFlight, SessionFolder
from session_scheduler.core.standing import Standing, Then, Wait
from session_scheduler.guard import processes, safe_git
from session_scheduler.guard.browser_box import APP_ORIGIN
from session_scheduler.guard.sandbox import Host, private_tmp
from session_scheduler.repo import gitops, merge_queue, workdirs
from session_scheduler.repo.merge_queue import (
    STACKED,
    Conflict,
    Landed,
    Landing,
    Queue,
    Red,
    Verdict,
    reviewed_ref,
)
from session_scheduler.run import browsing, ending, gating
from session_scheduler.run.agent import (
    SessionRequest,
    SessionResult,
    SessionRunner,
    Stoppable,
    held_by_engine,
    reattachable,
    run_session,
)
from session_scheduler.run.classify import LIMIT_MARGIN_S, Classified, backoff_s, cut_short, judged
from session_scheduler.run.gating import Gatekeeper, gated
from session_scheduler.run.opening import (
    check_local_files,
    name_the_person_s_branch,
    note_stash,
    open_project,
    planner_of,
    run_started,
    set_aside_foreign_branches,
)
from session_scheduler.run.plan import Planner, SessionPlan, brief_for, outage_so_far, write_plan
from session_scheduler.run.planning import planning_for
from session_scheduler.run.prompts import initializer_form
from session_scheduler.run.report import RunReport, RunStatus
from session_scheduler.run.verify import PreSession, capture, heads_of, verify_session
from session_scheduler.store import crashpoints, events, handoff_check, progress, specs, statefile
from session_scheduler.store.events import EventLog, Totals, new_run_id
from session_scheduler.store.outbox import OUTBOX, apply, open_outbox
from session_scheduler.store.records import Records

T = SessionType
R = TypeVar("R")
APPLYING = "applying"
"""A lane's copies of the records taken just before its session's results are applied (a restore point)."""


QUIET_WAIT_S = 0.25
"""How long the merge queue lets lanes that are preparing a session go first, at most, before it
takes the lock to land or to record a landing."""


class Beside(Generic[R]):
    """A step run in a thread beside the caller's, joined later: its value is returned there,
    its failure raised there."""

    def __init__(self, step: Callable[[], R]) -> None:
        self.failure: BaseException | None = None
        self.value: R | None = None
        self.thread = threading.Thread(target=self._run, args=(step,), daemon=True)
        self.thread.start()

    def _run(self, step: Callable[[], R]) -> None:
        try:
            self.value = step()
        except BaseException as exc:  # raised in the caller's thread, by `join`
            self.failure = exc

    def join(self) -> R | None:
        self.thread.join()
        if self.failure is not None:
            raise self.failure
        return self.value


class Quiet:
    """The authority's lock, taken once no lane is preparing its next session (or after
    `QUIET_WAIT_S`): the merge queue's landing and its records wait for a session to start,
    rather than a session for them (re-entrant, as the lock is; usable again and again)."""

    def __init__(self, lanes: Lanes) -> None:
        self.lanes = lanes

    def __enter__(self) -> None:
        lanes = self.lanes
        lanes.lock.acquire()
        deadline = time.monotonic() + QUIET_WAIT_S
        while lanes.preparing and lanes.failed is None:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            lanes.lock.wait(left)

    def __exit__(self, *_: object) -> None:
        self.lanes.lock.release()


@dataclass(frozen=True)
class LanesReport:
    schedule: Schedule
    sessions: int
    landed: tuple[str, ...]
    """The work items that landed on `main`, in order."""
    sent_back: tuple[str, ...]
    run: RunReport


STOPPING = (
    "stopping: the running sessions are stopped and saved as interrupted (a few seconds); "
    "the same command resumes them"
)


class Lanes:
    """Runs `lanes` lanes over the project until every feature passes or is blocked, or a limit."""

    def __init__(
        self,
        project: Path,
        config: AgentConfig,
        runner: SessionRunner,
        lanes: int = 1,
        *,
        echo: Callable[[str], None] = print,
        events: EventLog | None = None,
        clock: Clock | None = None,
        cost_basis: str = "api",
        host: Host | None = None,
    ) -> None:
        if lanes < 1:
            raise ValueError("lanes run one lane or more")
        self.project, self.config, self.runner, self.count = project, config, runner, lanes
        self.runners = batching.runners_for(lanes)
        """The merge queue's test runs side by side (prefixes of a batch's chain of merges)."""
        self.trunk = trunk_of(config)
        """Where verified work lands in the project's repository (`main`, or the review branch):
        what every lane's clone calls `main`."""
        self.records = Records(project)
        self.echo = echo
        self.clock = clock or SystemClock()
        self.host = host or Host.of(os.environ)  # the edge: a caller that has read it passes it
        """What the sandbox hides on this machine (its homes, the CLI's config, secret variables)."""
        self._planner: Planner | None = None
        """How each session is planned, as the one-lane scheduler plans it: made when the run opens the project."""
        self.cost_basis = cost_basis
        self.paused_until = 0.0
        """No lane starts a session before this (clock time): a usage limit's reset, an outage's back-off."""
        self.outages = 0
        self.fresh_reruns = 0
        """Sessions run again in this run because their sandbox or browser did not start (every lane's)."""
        self.outage_since: float | None = None
        """When the API began failing (clock time), until a session counts again."""
        self.reruns: dict[int, tuple[int, SessionState]] = {}
        """Per lane, the session cut short that it runs again (its number and its state)."""
        self.outboxes: dict[int, Records] = {}
        """Each lane's last outbox: what it remembers (its restore copies, the history index) the next keeps."""
        self.flights: dict[int, InFlight] = {}
        """Per lane, the session in flight (saved with the schedule: what a rerun after a kill needs)."""
        self.stacks: dict[int, tuple[WorkItem, str, str]] = {}
        """Per lane, the work its REVIEW approved last, that REVIEW's merge, and the `main` it was
        merged onto, while it may land as it is: the lane's next sessions start on that merge
        (`_start`) instead of waiting for it to land."""
        self.checking: dict[int, Beside[None]] = {}
        """Per lane, the thread checking its clone as its last session left it (`_left_by`): the
        lane's next session joins it before it touches the clone, so the lane's records are kept
        and its next session chosen meanwhile."""
        self.checked: dict[int, git.Repo] = {}
        """Per lane, its clone as its last session left it: opened, checked (`workdirs.inspect`) and
        cleared of leftovers right after that session, for its next session's `_ready` (nothing
        else runs in a lane's clone between its sessions)."""
        self.carriers: dict[int, git.Repo] = {}
        """Per lane, the project's repository opened for the threads beside the lane's that bring
        its work into the project (`_bring_back`, `_take_merge`; one at a time per lane): opened
        once, so what it remembers (the branches in packed-refs) is read once."""
        self.held: dict[int, InFlight] = {}
        """Per lane, a killed run's session that the engine still holds (running on a worker, or
        ended there with a result): the lane awaits it instead of running it again."""
        self.events = events or EventLog(project, new_run_id(self.clock), clock=self.clock.now)
        self.totals = Totals()
        self.run_totals = Totals(run=self.events.run)
        self.lock = threading.Condition()
        self.preparing: set[int] = set()
        """Lanes between taking their next session and its start (under the lock): the queue's
        landing waits for them (`Quiet`)."""
        self.quiet = Quiet(self)
        self.schedule = Schedule()
        self.queue = Queue(self.records)
        self.failed: BaseException | None = None
        self.stopped = ""
        """Why no lane starts another session in this run (a limit), once one says so."""
        self.unplanned = ""
        """Why a newer spec's planning gave up in this run ("": it did not): the run does not end done."""
        self.max_iterations: int | None = None
        self.started = 0
        """Sessions started in this run (reruns included): what --max-iterations counts."""
        self.sessions = 0
        self.working = lanes
        self.alive = 0
        """Threads (lanes and the queue) still running."""
        """Lanes whose thread still runs (the merge queue stops once none does and nothing waits)."""
        self.landed: list[str] = []
        self.returned: list[str] = []

    # -- the authority ------------------------------------------------------------------------
    def run(self, max_iterations: int | None = None) -> LanesReport:
        """Run the lanes until done or a limit (the caller holds the project lock); the run's
        events go to the event log from `run_started` to `run_ended`, whatever ends it."""
        self.max_iterations = max_iterations
        tmp_dirs = [private_tmp(workdirs.path_of(self.project, n)) for n in range(self.count)]
        # a killed run's sessions on an engine's workers may still run: only those not awaited are stopped (`_resume`)
        repo, stashes = open_project(
            self.project,
            self.records,
            self.echo,
            [] if reattachable(self.runner) else tmp_dirs,
            self.trunk,
        )
        check_local_files(self.project, repo, self.config.local_files)
        stashed = note_stash(self.project, self.records, stashes, self.echo)
        self._planner = planner_of(self.project, self.config, self.host)
        self.totals = Totals.of(events.read(self.events.path))
        self.events.subscribe(self.totals.apply)
        self.events.subscribe(self.run_totals.apply)
        run_started(self.events, self.project, self.cost_basis, lanes=self.count)
        if stashed:
            ref, message, commit = stashed
            self.events.emit("set_aside", ref=ref, message=message, commit=commit)
        status, message = "error", "an unexpected error (see the traceback)"
        try:
            report = self._run(repo)
            status, message = report.run.status, report.run.message
            if self.sessions:
                name_the_person_s_branch(repo, self._planner.adopted.branch, self.echo, self.trunk)
            return report
        except KeyboardInterrupt:
            status, message = "interrupted", "interrupted; run the same command again to resume"
            raise
        except SchedulerError as exc:
            message = str(exc)
            raise
        except git.GitCommandError as exc:  # in any lane or the queue: one line, as with one lane
            failure = gitops.failed(self.project, exc)
            message = str(failure)
            raise failure from None
        finally:
            self.events.emit("run_ended", status=status, message=message, sessions=self.sessions)
            self.events.sync()
            for tmp in tmp_dirs:
                shutil.rmtree(tmp, ignore_errors=True)

    def _run(self, repo: git.Repo) -> LanesReport:
        saved = statefile.load(self.records)
        if saved is None and (self.project / "feature_list.json").exists():
            raise StateError(
                f"{STATE_FILE} is missing but the project has a feature list; restore it from the "
                f"newest {LOG_DIR}/session_*/state.json"
            )
        state = saved.state if saved else SessionState()
        schedule = replace(saved.schedule if saved else Schedule.of(state, self.count), cloned=True)
        try:
            schedule = resized(schedule, self.count)
        except ValueError as exc:
            raise BadInput(f"--lanes {self.count}: {exc}") from None
        if schedule.lanes[0].role is T.HALTED:
            self.echo(f"The last run halted ({schedule.halt_reason}); trying the INITIALIZER again")
            schedule = resumed(schedule)
        added = specs.note(self.records, self.clock.now(), listed=bool(schedule.backlog.features))
        if specs.unplanned(self.records) and not planning(schedule) and schedule.backlog.features:
            version = added or specs.history(self.records)[-1]
            self.echo(f"The spec has a new version ({version.number}): its features are planned first")
            schedule = extended(schedule, self.config)
        if state.session_count == 0 and not (saved and saved.in_flight):  # perhaps an existing repository
            set_aside_foreign_branches(repo, self.events, self.echo)
        if not state.backlog.features:
            progress.ensure_handoff_files(self.records, self.project.name)
        self.schedule = wake(schedule, self.config)[0]
        self._reconcile_queue(repo)
        for lane, flight in (saved.in_flight if saved else {}).items():
            self._resume(repo, lane, flight)
        if self.schedule.backlog.features:  # older entries to the history, unless a session is in flight
            self._check_handoff(trim=not (saved and saved.in_flight))
        self._save()
        threads = [
            threading.Thread(target=self._guarded, args=(self._lane, n), name=f"lane-{n}")
            for n in range(self.count)
        ]
        threads.append(threading.Thread(target=self._guarded, args=(self._land, None), name="merge-queue"))
        self.alive = len(threads)
        for thread in threads:
            thread.start()
        try:
            self._wait_for_threads()
        except KeyboardInterrupt as stop:  # Ctrl-C, a stop signal: every lane's session is stopped
            with self.lock:
                self.failed = self.failed or stop
                self.lock.notify_all()
            self.echo(STOPPING)
            with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C: they are being stopped
                for n in range(self.count):
                    processes.stop_with_tmpdir(private_tmp(workdirs.path_of(self.project, n)))
                if isinstance(self.runner, Stoppable):  # sessions on an engine's workers
                    self.runner.stop()
            while True:  # a second Ctrl-C while they stop does not leave them running
                try:
                    self._wait_for_threads()
                    break
                except KeyboardInterrupt:
                    continue
            with self.lock:
                self._save()
            raise
        for thread in threads:
            thread.join()
        if self.failed is not None:
            raise self.failed
        if self.schedule.backlog.features:  # where each lane ended (its work landed since, perhaps)
            for lane in range(self.count):
                progress.write_status_of(self.records, self.schedule.view(lane), lane)
        return LanesReport(
            self.schedule, self.sessions, tuple(self.landed), tuple(self.returned), self._report()
        )

    def _wait_for_threads(self) -> None:
        """Until every lane's and the queue's thread has ended (counted by the threads, not
        `Thread.join`: a Ctrl-C that interrupts a join can leave a running thread looking ended)."""
        with self.lock:
            while self.alive:
                self.lock.wait(timeout=0.5)

    def _report(self) -> RunReport:
        state = self.schedule.view(0)
        if self.schedule.lanes[0].role is T.HALTED:
            return self._ran("halted", state, self.schedule.halt_reason)
        if not self.schedule.settled:
            return self._ran("limit", state, self.stopped or "stopped")
        waiting = specs.unplanned(self.records) if self.unplanned else None
        if waiting is not None:  # the features listed before are done; the newer spec is not planned
            return self._ran(
                "halted",
                state,
                f"the spec's version {waiting.number} could not be planned into features (the INITIALIZER "
                f"gave up: {self.unplanned}); the features listed before it are done. Fix app_spec.txt "
                "or give --spec again",
            )
        backlog = state.backlog
        done = (
            f"all {plural(len(backlog.features), 'feature')} pass"
            if not backlog.blocked and not backlog.held
            else f"{len(backlog.passing)} of {plural(len(backlog.features), 'feature')} pass, {len(backlog.blocked)} blocked"
        )
        if backlog.held:
            names = [f for f, _ in backlog.held]
            after = len(backlog.waiting_for_person()) - len(names)
            done += (
                f"; waiting for you, held by a risk rule: {', '.join(names)} (`approve {' '.join(names)}` "
                f"lands {'it' if len(names) == 1 else 'them'})"
                + (
                    f", and {plural(after, 'feature')} that build{'s' if after == 1 else ''} on {'it' if len(names) == 1 else 'them'}"
                    if after
                    else ""
                )
            )
        return self._ran("done", state, done)

    def _ran(self, status: RunStatus, state: SessionState, message: str) -> RunReport:
        return RunReport(status, state, self.totals, self.run_totals, message, self.sessions)

    def _resume(self, repo: git.Repo, lane: int, flight: InFlight) -> None:
        """A session a killed or stopped run left in flight runs again in its lane, under its
        number, from a clone made ready again; its folder is set aside, and its end is recorded
        if the killed run recorded none. A run killed while it applied the session's results
        (`copies` names the records as they were before) is undone first: the records come back
        from those copies and the work's branch to the tip it had (the killed run's kept under
        refs/scheduler/undone/), so the session does not run again on top of itself."""
        role = self.schedule.lanes[lane].role
        folder = Path(flight.log_dir)
        why = flight.why or Standing.INTERRUPTED.value
        if self._still_held(repo, lane, flight):
            self.held[lane] = flight
            self.reruns[lane] = (flight.number, self.schedule.view(lane))
            self.flights[lane] = flight
            self.events.emit("resumed", session=flight.number, role=role.value, cause=REATTACHED, lane=lane)
            self._say(
                lane,
                f"Session {flight.number} ({role.value}) is still on the engine: awaiting it, not running it again",
            )
            return
        if reattachable(self.runner):  # what it left running here (open_project stopped none)
            processes.stop_with_tmpdir(private_tmp(workdirs.path_of(self.project, lane)))
        if flight.copies is not None and Path(flight.copies).is_dir():
            progress.restore(self.records, Path(flight.copies), self.schedule.backlog.passing)
            crashpoints.reached("recover_restored")
            main = gitops.head(repo, self.trunk)
            if (
                role is T.INITIALIZER
                and not self.schedule.backlog.features
                and main is not None
                and main != flight.main
            ):  # its skeleton, taken (an extension commits nothing: main moved by the queue stays)
                gitops.keep_ref(repo, f"undone/session-{flight.number}/{gitops.MAIN}", main)
                gitops.move_main(repo, flight.main, main, self.trunk)
            work = self.schedule.lanes[lane].work
            tip = gitops.head(repo, work.branch) if work else None
            if work is not None and tip != flight.branch_tip:
                if tip is not None:
                    gitops.keep_ref(repo, f"undone/session-{flight.number}/{work.branch}", tip)
                if flight.branch_tip is None:
                    gitops.delete_branch(repo, work.branch)
                else:
                    gitops.set_branch(repo, work.branch, flight.branch_tip)
            self.events.emit(  # its end, if the killed run recorded one, no longer stands: it runs again
                "undo", session=flight.number, reason="its results were half recorded when the run was killed"
            )
            self._say(
                lane, f"session {flight.number}'s results, half recorded when the run was killed, were undone"
            )
        self._end_unended(lane, flight.number, role, SessionFolder(folder), killed=True)
        if folder.is_dir():
            folder.rename(_aside(folder, why, self.clock))
            crashpoints.reached("recover_set_aside")
        self.reruns[lane] = (flight.number, self.schedule.view(lane))
        self.flights[lane] = flight
        if flight.wait_until is not None and flight.wait_until > self.paused_until:
            self.paused_until = flight.wait_until
        self.events.emit("resumed", session=flight.number, role=role.value, cause=why, lane=lane)
        cause = "interrupted" if why == Standing.INTERRUPTED.value else f"cut short ({why.replace('_', ' ')})"
        self._say(lane, f"Resuming: session {flight.number} ({role.value}) again: it was {cause}")

    def _still_held(self, repo: git.Repo, lane: int, flight: InFlight) -> bool:
        """Whether a killed run's session is one to await rather than run again: it was running
        (not cut short, not half recorded), its start is on record (its folder's copies, its
        branches), it needs no browser of the killed run's, and the engine holds it."""
        return (
            flight.copies is None
            and browsing.plan_for(
                Gatekeeper.of(self.config), repo, self.records, self.schedule.view(lane), Path(flight.log_dir)
            )
            is None
            and held_by_engine(self.runner, flight)
        )

    def _reconcile_queue(self, repo: git.Repo) -> None:
        """The merge queue's file and the schedule agree (a kill between writing one and the other):
        approved work the schedule does not know is approved again by its rerun REVIEW; work
        the schedule knows as approved, and the file lost, is queued again at its branch's tip."""
        waiting = {landing.branch for landing in self.queue.pending()}
        approved = {work.branch: work for work in self.schedule.backlog.landing}
        for landing in self.queue.pending():
            if landing.branch not in approved:
                self.queue.done(landing)
        for branch, work in approved.items():
            tip = gitops.head(repo, branch)
            if branch not in waiting and tip is not None:
                self.queue.add(Landing(work.feature_id or branch, branch, tip, 0, 0, time.time()))

    def _guarded(self, body: Callable[[int | None], None], lane: int | None) -> None:
        try:
            body(lane)
        except BaseException as exc:  # any failure stops every lane; the caller raises it
            with self.lock:
                self.failed = self.failed or exc
                self.lock.notify_all()
        finally:
            with self.lock:
                self.working -= lane is not None
                self.alive -= 1
                self.lock.notify_all()

    def _check_handoff(self, *, trim: bool = False) -> None:
        """The records' hand-off files checked, as one lane checks them (`handoff_check`; under the lock)."""
        if self.schedule.backlog.features:
            handoff_check.check(self.records, frozenset(self.schedule.backlog.passing), self.echo, trim=trim)

    def _save(self) -> None:
        self.events.sync()
        statefile.save(self.records, self.schedule, self.flights)
        crashpoints.reached("state_saved")

    def _say(self, lane: int | None, line: str) -> None:
        """One line of a lane's (None: the queue's), named after it when there are several; with
        one, the session's own lines as they are and the loop's notes indented under them."""
        if self.count == 1:
            self.echo(line if line.startswith(("--- ", "  ", "[")) else f"  {line}")
        else:
            self.echo(f"[{'queue' if lane is None else f'lane {lane}'}] {line.removeprefix('--- ')}")

    # -- a lane -------------------------------------------------------------------------------
    def _lane(self, lane: int | None) -> None:
        assert lane is not None
        try:
            self._sessions(lane)
        except BaseException:
            self._settle(lane, raising=False)
            raise
        self._settle(lane)

    def _sessions(self, lane: int) -> None:
        repo = safe_git.open(self.project)  # each thread its own: GitPython's helpers are not shared
        while True:
            with self.lock:
                while (
                    self.failed is None
                    and not self.stopped
                    and (self.schedule.lanes[lane].role is T.WAIT or self._held_back(lane))
                ):
                    self.lock.wait(timeout=1.0)
                if (
                    self.failed is not None
                    or self.stopped
                    or self.schedule.lanes[lane].role in TERMINAL
                    or self._limit(lane)
                ):
                    self.lock.notify_all()
                    return
                if self._unready(repo, lane):
                    continue
                attempt, before = 1, None
                held = self.held.pop(lane, None)
                if lane in self.reruns:  # the same session, from the same start
                    number, view = self.reruns.pop(lane)
                    before = self.flights.get(lane)
                    if held is not None:  # still on the engine: the same try, awaited
                        attempt = held.attempt
                    elif (
                        before is not None and before.number == number
                    ):  # its next run: a new name on an engine
                        attempt = before.attempt + 1
                else:
                    view = self.schedule.view(lane)
                    self.schedule, number = self.schedule.issue()
                main, _ = self._start(repo, lane)
                folder = SessionFolder.of(self.project, number, view.lane.role)
                work = view.lane.work
                waits = self.paused_until > self.clock.now()
                self.flights[lane] = held or InFlight(
                    number,
                    str(folder.path),
                    main,
                    gitops.head(repo, work.branch) if work else None,
                    why=before.why if waits and before is not None and before.number == number else None,
                    wait_until=self.paused_until if waits else None,
                    lane=lane,
                    attempt=attempt,
                )  # a pause it waits out at its start (`_session`) holds after a stop, and says why
                self.started += 1
                self.preparing.add(lane)
                self._save()
                crashpoints.reached("in_progress_saved")
                if held is None:  # what the session reads: the records checked, its lane's status
                    self._check_handoff()
                    progress.write_status_of(self.records, view, lane)
                outbox = (
                    Records(folder.path / OUTBOX)
                    if held
                    else open_outbox(self.records, folder.path / OUTBOX, self.outboxes.get(lane))
                )  # a held session's outbox is the one it writes to
                self.outboxes[lane] = outbox
                spent = self.totals.cost_usd + self._per_session() * (self._running() - 1)
                outage_s = outage_so_far(self.outage_since, self.clock.now())  # the authority's
            self._session(
                repo,
                lane,
                number,
                replace(view, session_count=number - 1),
                folder,
                outbox,
                spent,
                attempt,
                held=held,
                outage_s=outage_s,
            )

    def _prepared(self, lane: int) -> None:
        """Lane `lane`'s session is ready to start (under the lock): the queue goes on."""
        self.preparing.discard(lane)
        self.lock.notify_all()

    def _limit(self, lane: int) -> bool:
        """Whether a limit keeps every lane from starting another session in this run (under the
        lock; it says why once, in `stopped`)."""
        if (
            self.max_iterations is not None
            and self.started >= self.max_iterations
            and lane not in self.reruns
        ):
            self.stopped = (
                f"stopped after {plural(self.started, 'session')} (--max-iterations); "
                "run the same command again to resume"
            )
        budget, spent = self.config.max_budget_usd, self.totals.cost_usd
        if budget is not None and spent >= budget:
            self._budget_reached()
            self.stopped = (
                f"the budget of {money(budget)} is spent ({money(spent)}); raise --max-budget-usd to go on"
            )
        elif budget is not None and not self._running() and budget - spent < self._per_session():
            self._budget_reached()
            self.stopped = (
                f"the project budget has {money(budget - spent)} left, less than one session may spend "
                f"({money(self._per_session())}); raise --max-budget-usd to go on"
            )
        return bool(self.stopped)

    def _held_back(self, lane: int) -> bool:
        """Whether the lane waits for a session of another lane to end before it starts one: the
        budget left covers the sessions in flight, but not one more (under the lock)."""
        budget = self.config.max_budget_usd
        if budget is None or not self._running():
            return False
        left = budget - self.totals.cost_usd
        return left < self._per_session() * (self._running() + 1)

    def _running(self) -> int:
        return sum(1 for flight in self.flights.values() if flight.why is None)

    def _per_session(self) -> float:
        """What one session may spend: --max-session-budget-usd, or else the mean so far."""
        cap = self.config.max_session_budget_usd
        if cap is not None:
            return cap
        counted = self.totals.spend.sessions
        return self.totals.cost_usd / counted if counted else 0.0

    def _budget_reached(self) -> None:
        self.events.emit(
            "budget_reached",
            which="project",
            budget_usd=self.config.max_budget_usd,
            spent_usd=round(self.totals.cost_usd, 6),
        )

    def _session(
        self,
        repo: git.Repo,
        lane: int,
        number: int,
        state: SessionState,
        folder: SessionFolder,
        outbox: Records,
        spent: float,
        attempt: int = 1,
        *,
        held: InFlight | None = None,
        outage_s: float = 0.0,
    ) -> None:
        """One session of the lane: its clone made ready, the session run and verified there,
        then (under the lock) its outbox applied, its branch brought back, its outcome transitioned.
        `spent`: the project's spending, the other lanes' sessions in flight counted as spending
        what one session may (what is left is this session's budget). `held`: a killed run's
        session the engine still holds, awaited where it runs (its clone, its start as recorded)."""
        role, work = state.lane.role, state.lane.work
        self._settle(lane)
        if held is None:
            with self.lock:  # what reads the project's repository runs while no worktree is half made there
                start = self._start(repo, lane)  # read with the clone made: the queue may have moved it
                clone, workdir = self._ready(repo, lane, role, work, start, number)
                if extends(state):  # the list as it is, for the session to append to
                    progress.atomic_write_bytes(
                        workdir / FEATURES_FILE, outbox.path(FEATURES_FILE).read_bytes(), durable=False
                    )
                crashpoints.reached("git_prepared")
        else:
            self.checked.pop(lane, None)  # the session it awaits runs in the clone
            workdir = workdirs.path_of(self.project, lane)
            clone = safe_git.open(workdir)
        browser = (
            browsing.plan_for(Gatekeeper.of(self.config), clone, outbox, state, folder.path)
            if held is None
            else None
        )
        assert self._planner is not None, "no session is planned before the run opens the project"
        brief = brief_for(
            state,
            self.config,
            outbox,
            APP_ORIGIN if browser else None,
            planning_for(
                state,
                self.project,
                self.records,
                self._planner.adopted,
                gitops.head(clone, gitops.MAIN) if role is T.ARCHITECTURE else None,
            ),
        )
        plan = self._planner.plan(state, workdir, brief=brief, spent_usd=spent, outage_s=outage_s)
        copies = progress.restore_point(self.records, SessionFolder.PRE, lane)  # full copies, the lane's
        if held is None:
            pre = capture(outbox, clone, state, copies)
            progress.snapshot(outbox, folder.path / SessionFolder.PRE, progress.KEPT_PER_SESSION)
            settings = write_plan(plan, workdir)
            crashpoints.reached("plan_written")
            with self.lock:  # its start's branches on record: what a rerun that awaits it verifies against
                flight = self.flights.get(lane)
                if flight is not None:
                    record = pre.heads_record
                    self.flights[lane] = replace(
                        flight, heads=record["heads"], heads_gone=tuple(record["heads_gone"])
                    )
                    self._save()
                self._prepared(lane)
        else:
            record = {"heads": dict(held.heads), "heads_gone": list(held.heads_gone or ())}
            pre = PreSession(
                held.main,
                held.branch_tip,
                progress.load_handoff(Records(copies)),
                copies,
                heads_of(record, copies),
            )
            settings = workdir / SETTINGS_FILE  # as the killed run wrote it for the session
            with self.lock:
                self._prepared(lane)
        request = SessionRequest(
            plan, workdir, settings, folder.path, outbox, lane, self.count, attempt=attempt
        )
        while held is None:  # no session starts while every lane is paused, however late the pause came
            self._paused()
            with self.lock:
                if self.failed is not None:  # stopped before it started: it runs next time (`_resume`)
                    self._stopping(lane, number, role, folder)
                    return
                if self.paused_until > self.clock.now():
                    continue
                flight = self.flights.get(lane)
                if flight is not None and (flight.why or flight.wait_until):  # the wait is over: it runs
                    self.flights[lane] = replace(flight, why=None, wait_until=None)
                    self._save()
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
                break
        if not plan.sandboxed:
            self._say(
                lane,
                "WARNING: no OS sandbox (--no-sandbox): this session's commands can write outside its clone",
            )
        started = time.time() if held is None else 0.0  # the OS's clock: processes' start times
        result = run_session(self.runner, request, browser, lambda line: self._say(lane, line))
        crashpoints.reached("cli_ended")
        left = processes.stop_left_in(workdir, started)
        if left:
            self._say(
                lane,
                f"stopped {plural(len(left), 'process', 'processes')} the session left running in its clone (pids {', '.join(map(str, left))})",
            )
        ending.write_result(folder.path, result)
        crashpoints.reached("result_written")
        ending.audit(self.events, lambda line: self._say(lane, line), plan, workdir, folder.path, result)
        if self._stopping(lane, number, role, folder):
            return
        cut = cut_short(result, plan.model, capped_by_session=plan.capped_by_session, role=role.value)
        if cut is not None:
            self._cut(lane, number, state, plan, result, cut)
            return
        with self.lock:  # `main` will move before its merge lands: work ahead of it, or another REVIEW
            moves = role is T.REVIEW and (
                bool(self.schedule.backlog.landing)
                or gitops.head(repo, self.trunk) != pre.main
                or any(other.role is T.REVIEW for n, other in enumerate(self.schedule.lanes) if n != lane)
            )
        listed = workdir / FEATURES_FILE
        if role is T.INITIALIZER and listed.is_file() and not listed.is_symlink():  # written, not sent
            progress.atomic_write_bytes(outbox.path(FEATURES_FILE), progress.read_regular(listed))
        outcome = verify_session(
            outbox,
            clone,
            state,
            pre,
            self.config,
            lambda line: self._say(lane, line),
            folder=folder.path,
            existing=initializer_form(state, self._planner.adopted.files > 0) == "existing",
            queue_tests=moves,  # else the queue tests its own merge: one test run per landing
        )
        classified = judged(result, outcome)
        crashpoints.reached("verified")
        merging = (  # an approval's merge, taken while the records are applied (a scheduler's ref only)
            Beside(lambda: self._take_merge(lane, work, clone))
            if role is T.REVIEW and work is not None and outcome.ok and outcome.verdict == "PASS"
            else None
        )
        with self.lock:
            flight = self.flights.get(lane)
            if flight is not None:  # what a kill before this block's save is undone to (`_resume`)
                applying = progress.restore_point(self.records, APPLYING, lane)
                progress.snapshot(self.records, applying)
                self.flights[lane] = replace(flight, copies=str(applying))
                self._save()
            bringing = (  # its branch, brought back while the records are applied (undone by `_resume`)
                Beside(lambda: self._bring_back(lane, work, clone))
                if work is not None and role is not T.REVIEW
                else None
            )
            applied = apply(outbox, self.records, number, extension=extends(state) and outcome.ok)
            if classified.standing.counted:  # the records' newest good copies (restore/post, its folder)
                progress.snapshot(self.records, progress.restore_point(self.records, SessionFolder.POST))
                progress.snapshot(self.records, folder.path / SessionFolder.POST, progress.KEPT_PER_SESSION)
            ending.write_changes(outbox, folder.path, pre.handoff)  # its own: the queue may land meanwhile
            crashpoints.reached("post_copied")
            if outcome.review_id is not None:
                outcome = replace(
                    outcome, review_id=applied.review_ids.get(outcome.review_id, outcome.review_id)
                )
            if outcome.gates_review is not None:
                outcome = replace(
                    outcome, gates_review=applied.review_ids.get(outcome.gates_review, outcome.gates_review)
                )
            merge = merging.join() if merging is not None else None
            if bringing is not None:
                bringing.join()
            elif work is not None:  # a REVIEW's, left where it was (quick)
                workdirs.bring_back(repo, clone, work.branch, self.trunk)
            self.checking[lane] = Beside(lambda: self._left_by(lane, number))  # joined by `_settle`
            if role is T.INITIALIZER and outcome.ok:  # every spec so far is planned into features
                specs.planned(self.records, number)
            if (
                role is T.INITIALIZER and outcome.ok and not extends(state)
            ):  # its skeleton: main is quiet while it runs alone
                skeleton = workdirs.take_main(repo, clone, trunk=self.trunk)
                before = gitops.head(repo, self.trunk)
                assert before is not None, "the project has a main from its setup commit on"
                gitops.move_main(repo, skeleton, before, self.trunk)
            self._verified_events(number, role, work, outcome)
            events: tuple[Event, ...] = ()
            if classified.standing.counted:
                self.schedule, events = transition_lane(
                    self.schedule, lane, outcome, self.config, stack=role is T.REVIEW and not moves
                )
                self.outages, self.outage_since = 0, None
            for event in events:
                self._act(
                    repo, lane, event, number, outcome.review_id or 0, clone, tested=not moves, merge=merge
                )
                if isinstance(event, GaveUp) and event.role is T.INITIALIZER:  # an extension's: no halt
                    self.unplanned = event.reason
            crashpoints.reached("transitioned")
            progress.correct_passes(self.records, self.schedule.backlog.passing)
            if classified.standing.counted:  # what the lane does next (DONE at the end)
                progress.write_status_of(self.records, self.schedule.view(lane), lane)
                crashpoints.reached("status_written")
            line = ending.session_ended(
                self.events, self.totals, self.clock.now(), plan, result, classified, outcome.verdict
            )
            self.sessions += 1
            self.flights.pop(lane, None)
            self._save()
            if classified.standing.counted:
                ending.keep_restore_point(self.records, folder.path, number)
                crashpoints.reached("restore_point_copied")
            shutil.rmtree(folder.path / OUTBOX, ignore_errors=True)  # applied: the records and post/ hold it
            self._say(lane, line)
            if classified.standing.consequence.then is Then.RERUN_FRESH:  # verified, but not its doing
                self.reruns[lane] = (number, state)
                self._fresh(lane, number, role, classified)
                self._save()
            self.lock.notify_all()

    def _settle(self, lane: int, *, raising: bool = True) -> None:
        """The check of the lane's clone after its last session ended (`_left_by`): its failure
        raised here (not under the lock: the check may set leftovers aside, which takes it)."""
        checking = self.checking.pop(lane, None)
        if checking is not None:
            if raising:
                checking.join()
            else:  # the lane already fails: its clone is left alone before the run stops
                checking.thread.join()

    def _left_by(self, lane: int, number: int) -> None:
        """The lane's clone checked as session `number` left it, in a thread of its own beside the
        lane's (`Beside`) while the session's results are recorded and its approved work lands,
        not before the next session (which would wait for it). What it left uncommitted is set
        aside and told; the clone, opened, waits in `checked`."""
        clone, _ = workdirs.inspect(workdirs.path_of(self.project, lane))
        if clone is None:  # `_ready` makes it again, and says why
            return
        gitops.clear_stale_locks(clone)
        if gitops.abort_unfinished(clone) or gitops.dirty(clone):  # (rare) kept through the
            # project's repository, opened here: the lane's thread uses its own meanwhile
            self._keep_leftovers(safe_git.open(self.project), clone, lane, number, by=True)
        self.checked[lane] = clone

    def _carrier(self, lane: int) -> git.Repo:
        if lane not in self.carriers:
            self.carriers[lane] = safe_git.open(self.project)
        return self.carriers[lane]

    def _bring_back(self, lane: int, work: WorkItem, clone: git.Repo) -> None:
        """The lane's branch of `work` brought into the project from its `clone`, in a thread of
        its own (`Beside`; the lane's thread leaves the clone alone meanwhile)."""
        workdirs.bring_back(self._carrier(lane), clone, work.branch, self.trunk)

    def _take_merge(self, lane: int, work: WorkItem, clone: git.Repo) -> str:
        """The REVIEW's merge in the lane's `clone`, taken into the project as the work's reviewed
        ref, in a thread of its own (`Beside`): what `_act` queues if the REVIEW approves."""
        return workdirs.take_main(self._carrier(lane), clone, reviewed_ref(work.branch), self.trunk)

    @staticmethod
    def _stacked_on(repo: git.Repo, work: WorkItem, merge: str) -> None:
        """Work begins on `merge`, approved and waiting to land: recorded in the project before
        its session starts (what the queue checks before it lands the work: `_land`)."""
        name = f"{STACKED}/{work.branch}/{merge}"
        if gitops.ref_sha(repo, f"refs/scheduler/{name}") != merge:
            gitops.keep_ref(repo, name, merge)

    def _fresh(self, lane: int, number: int, role: SessionType, cut: Classified) -> bool:
        """A session whose sandbox or browser did not start runs again under its number, its
        folder set aside, as one lane's does: a few times in a run, then every lane stops (under
        the lock). Whether the run stops."""
        consequence = cut.standing.consequence
        self.fresh_reruns += 1
        folder = SessionFolder.of(self.project, number, role).path
        if folder.is_dir():
            folder.rename(_aside(folder, cut.standing.value, self.clock))
        if self.fresh_reruns > consequence.retries:
            self.stopped = self.stopped or f"{cut.reason}; {consequence.stop}"
            return True
        self._say(lane, f"{cut.reason}: {consequence.note}")
        return False

    def _end_unended(
        self, lane: int, number: int, role: SessionType, folder: SessionFolder, *, killed: bool
    ) -> None:
        """The end of the lane's session `number` recorded from its transcript, if no end was
        (a killed run's, or one this run stops)."""
        started = self.totals.in_flight.get(lane)
        if started is not None and started.get("session") == number:
            ending.ended_partly(
                self.events,
                self.totals,
                self.clock.now(),
                role.value,
                started,
                folder.transcript,
                killed=killed,
            )

    def _stopping(self, lane: int, number: int, role: SessionType, folder: SessionFolder) -> bool:
        """Whether the run is being stopped (Ctrl-C, a stop signal: its sessions' CLIs were
        stopped with it): then the session ended cut off, not by the agent, and runs again next
        time under its number; nothing of it is verified."""
        with self.lock:
            if not isinstance(self.failed, KeyboardInterrupt):
                return False
            self._end_unended(lane, number, role, folder, killed=False)
            flight = self.flights.get(lane)
            if flight is not None:
                self.flights[lane] = flight.cut(Standing.INTERRUPTED.value, flight.wait_until)
            self._save()
            return True

    def _verified_events(
        self, number: int, role: SessionType, work: WorkItem | None, outcome: Outcome
    ) -> None:
        """What verification established (the one-lane scheduler's events, but the merge: the queue's)."""
        if not outcome.ok or outcome.undone:
            self.events.emit("undo", session=number, reason=outcome.undone or outcome.reason)
        if not outcome.ok:
            return
        if role is T.INITIALIZER:
            had = set(self.schedule.backlog.features)  # before the transition: the list it extended
            added = [f for f in outcome.feature_ids if f not in had]
            more = {"added": added} if had else {}
            self.events.emit("features_listed", session=number, features=list(outcome.feature_ids), **more)
            if had:
                self.echo(
                    f"  planned {plural(len(added), 'new feature')} for the new spec: {', '.join(added)}"
                    if added
                    else "  planned no new feature: the spec's change asks for nothing new"
                )
        where = self.trunk if role is T.REVIEW else "branch"  # the REVIEW's merge (onto its clone's `main`)
        gated(
            self.events,
            outcome.gates,
            where,
            session=number,
            feature=work.feature_id if work else None,
            lane=None,
        )
        if outcome.verdict is not None:
            self.events.emit(
                "verdict",
                session=number,
                feature=work.feature_id if work else None,
                review_id=outcome.review_id,
                verdict=outcome.verdict,
            )

    def _paused(self) -> None:
        """Wait while every lane is paused (a usage limit, an outage): one wait for all of them."""
        while True:
            with self.lock:
                delay = self.paused_until - self.clock.now()
                if delay <= 0 or self.failed is not None:
                    return
            self.clock.sleep(min(delay, 1.0))  # in short steps: a Ctrl-C reaches a waiting lane soon

    def _cut(
        self,
        lane: int,
        number: int,
        state: SessionState,
        plan: SessionPlan,
        result: SessionResult,
        cut: Classified,
    ) -> None:
        """A session cut short, not by the agent: a usage limit pauses every lane until its reset
        (or, with --no-wait, stops the run), an outage backs every lane off (until
        `--max-outage-minutes`), an interruption reruns at once; the lane runs the same session
        again from the same start. What retrying cannot fix stops every lane: credentials and
        an unknown model as errors, the budget as a limit, the sandbox as an error."""
        consequence = cut.standing.consequence
        with self.lock:
            self._say(
                lane,
                ending.session_ended(self.events, self.totals, self.clock.now(), plan, result, cut, None),
            )
            flight = self.flights.get(lane)
            if flight is not None:
                self.flights[lane] = flight.cut(cut.standing.value)
            self.reruns[lane] = (number, state)
            self.lock.notify_all()
            if consequence.then is Then.RAISE:
                self._save()
                raise (UnknownModel if cut.unknown_model else NotLoggedIn)(cut.reason)
            if consequence.then is Then.STOP:
                if cut.standing is Standing.BUDGET:
                    self._budget_reached()
                self.stopped = self.stopped or f"{cut.reason}; {consequence.stop}"
                self._save()
                return
            if consequence.then is Then.RERUN_FRESH and self._fresh(lane, number, state.lane.role, cut):
                self._save()
                return
            if consequence.then not in (Then.RERUN, Then.RERUN_FRESH):
                self._save()
                raise SchedulerError(f"{cut.reason}; {consequence.stop or 'run the same command again'}")
            cut_folder = SessionFolder.of(self.project, number, state.lane.role).path
            if consequence.then is Then.RERUN and cut_folder.is_dir():  # its transcript kept beside the rerun
                cut_folder.rename(_aside(cut_folder, cut.standing.value, self.clock))
            now = self.clock.now()
            if consequence.wait is Wait.RESET:
                until = (cut.resets_at or now) + LIMIT_MARGIN_S
                if not self.config.wait_for_limits:
                    self.stopped = self.stopped or (
                        f"usage limit reached; it resets at {_utc(until)}. Run the same command again then to resume"
                    )
            elif consequence.wait is Wait.BACKOFF:
                self.outages += 1
                if self.outage_since is None:  # from the first failed request, the CLI's retries included
                    self.outage_since = now - result.retrying_s
                until = now + backoff_s(self.outages, self.clock)
                if until - self.outage_since > self.config.max_outage_minutes * 60:
                    self.stopped = self.stopped or (
                        f"{cut.reason}; gave up after {duration(now - self.outage_since)} of failing requests, "
                        f"retries and back-off included (--max-outage-minutes {self.config.max_outage_minutes:g}); "
                        "run the same command again later"
                    )
            else:
                until = now
            if flight is not None:
                self.flights[lane] = flight.cut(cut.standing.value, until)
            waits = until > self.paused_until and not self.stopped
            if waits:
                self.paused_until = until
                self.events.emit("limit_wait", session=number, why=cut.standing.value, until=until)
                who = "every lane waits" if self.count > 1 else "waiting"
                self._say(
                    lane,
                    f"{cut.reason}: {who} until {_utc(until)} ({duration(until - now)}), then session {number} "
                    "runs again (stopping now is safe: the same command waits again)",
                )
            self._save()
            if waits:
                crashpoints.reached("waiting")
            self.lock.notify_all()

    def _unready(self, repo: git.Repo, lane: int) -> bool:
        """Whether lane `lane` does not begin the feature it is to implement next now (under the
        lock): one that depends on work not passing yet whose approved tip the commit it would
        begin on does not hold (the lane's own approved merge of it did not stay the one to land
        as it is: sent back, held, `main` moved; or a killed run's lane, which begins on `main`).
        While that work still waits in the merge queue the lane waits for it; once it does not,
        the lane gives the feature back and takes other work. No feature is begun without what
        it depends on."""
        rerun = self.reruns.get(lane)
        state = rerun[1] if rerun is not None else self.schedule.view(lane)
        work = state.lane.work
        if lane in self.held or state.lane.role is not T.IMPLEMENT or work is None or work.feature_id is None:
            return False
        backlog = self.schedule.backlog
        needs = [f for f in backlog.needs(work.feature_id) if f not in backlog.passing]
        if not needs:
            return False
        start, _ = self._start(repo, lane)
        tips = {landing.feature: landing.tip for landing in self.queue.pending()}
        if all(f in tips and gitops.is_ancestor(repo, tips[f], start) for f in needs):
            return False  # begun on what it depends on: its lane's approved merge, or landed already
        if any(w.feature_id in needs for w in backlog.landing):
            self.lock.wait(timeout=1.0)  # it lands, or goes back, soon: then this is asked again
            return True
        self.reruns.pop(lane, None)
        self.flights.pop(lane, None)
        self.schedule, events = unready(self.schedule, lane, self.config)
        self._say(lane, f"{work.feature_id} waits for what it depends on to land; the lane takes other work")
        for event in events:
            self._act(repo, None, event, self.schedule.issued)
        self._save()
        self.lock.notify_all()
        return True

    def _start(self, repo: git.Repo, lane: int) -> tuple[str, str]:
        """The commit lane `lane`'s next session starts on, and the project's ref that holds it
        (under the lock): the project's `main`, or, while the lane's last approved work waits to
        land as it is (`main` has not moved since), that REVIEW's merge."""
        main = gitops.head(repo, self.trunk)
        assert main is not None, "the project has a main from its setup commit on"
        stack = self.stacks.get(lane)
        if stack is not None:
            work, merge, onto = stack
            if work in self.schedule.backlog.landing and main == onto:
                return merge, reviewed_ref(work.branch)
            del self.stacks[lane]  # landed (`main` is that merge now), sent back or held
        return main, f"refs/heads/{self.trunk}"

    def _ready(
        self,
        repo: git.Repo,
        lane: int,
        role: SessionType,
        work: WorkItem | None,
        start: tuple[str, str],
        number: int,
    ) -> tuple[git.Repo, Path]:
        """The lane's clone made ready for session `number`: what the last session left
        uncommitted set aside and named, its `main` at `start` (the project's `main`, or the
        lane's approved merge waiting to land: a commit and the project's ref that holds it; work
        begun there is recorded under refs/scheduler/stacked/, what the queue checks before it
        lands it), with the work's branch as the project has it (none where the project has none),
        checked out for a role that starts on it."""
        main, _ = start
        if work is not None and main != gitops.head(repo, self.trunk):
            self._stacked_on(repo, work, main)
        checked = self.checked.pop(lane, None)
        clone, remade = (checked, None) if checked else workdirs.ensure(repo, self.project, lane, self.trunk)
        if remade:
            self._say(lane, f"its clone was made again: {remade}")
        elif checked is None:
            self._keep_leftovers(repo, clone, lane, number)
        try:
            self._check_out(repo, clone, role, work, start)
        except (
            GitError,
            git.GitCommandError,
        ) as refused:  # a clone that will not take main: made again, once
            shutil.rmtree(str(clone.working_dir))
            clone, _ = workdirs.ensure(repo, self.project, lane, self.trunk)
            why = refused if isinstance(refused, GitError) else "git could not check the session's branch out"
            self._say(lane, f"its clone was made again: {why}")
            self._check_out(repo, clone, role, work, start)
        return clone, Path(clone.working_dir)

    def _check_out(
        self,
        repo: git.Repo,
        clone: git.Repo,
        role: SessionType,
        work: WorkItem | None,
        start: tuple[str, str],
    ) -> None:
        """The clone on the project's `main`, with the work's branch as the project has it (none
        where the project has none), the one its role starts on checked out (`-f`: what a session
        left uncommitted was kept before)."""
        main, source = start
        workdirs.sync_main(clone, self.project, main, source)
        branch = gitops.MAIN
        if work is not None:
            if gitops.head(repo, work.branch) is not None:
                workdirs.hand_over(repo, clone, self.project, work.branch)
            elif gitops.head(clone, work.branch) is not None:
                if gitops.current_branch(clone) == work.branch:
                    clone.git.checkout("-q", "-f", gitops.MAIN)
                clone.git.branch("-D", work.branch)
            if (
                role is T.FIX
                and work.architecture_review is not None
                and gitops.head(clone, work.branch) is None
            ):
                clone.git.branch(work.branch, main)
            if policy(role).starts_on == "work":
                branch = work.branch
        clone.git.checkout("-q", "-f", branch)
        gitops.keep_loose(clone, gitops.MAIN)  # a file of its own, which a session's sandbox keeps unwritable
        if self.config.local_files:  # the untracked files the person named, and no other
            workdirs.place_local_files(self.project, clone, self.config.local_files)

    def _keep_leftovers(
        self, repo: git.Repo, clone: git.Repo, lane: int, number: int, *, by: bool = False
    ) -> None:
        """What the lane's last session left uncommitted, kept in the project and told (as one
        lane's stash is), so that the next session starts clean and nothing is lost; `number`:
        that next session, or (`by`) the session that left it."""
        message = f"uncommitted work left in lane {lane}'s clone {'by' if by else 'before'} session {number}"
        name = f"leftovers/lane-{lane}/session-{number}"
        ref = workdirs.keep_leftovers(repo, clone, name, message, guard=self.lock)
        if ref is None:
            return
        with self.lock:
            self._say(
                lane,
                f"set aside: {message} is kept as {ref}; `git stash show -p --include-untracked {ref}` "
                f"shows it, `git stash apply {ref}` brings it back",
            )
            self.events.emit("set_aside", ref=ref, message=message, commit=gitops.ref_sha(repo, ref) or "")

    def _act(
        self,
        repo: git.Repo,
        lane: int | None,
        event: Event,
        number: int,
        review_id: int = 0,
        clone: git.Repo | None = None,
        *,
        tested: bool = True,
        merge: str | None = None,
    ) -> None:
        """What the authority does about one event (under the lock); `review_id`: the review that
        approved work (an `Approved` event's); `clone`: the lane's, opened (else opened here);
        `tested`: its verification ran the gates on the REVIEW's merge (else the queue runs them);
        `merge`: that merge, already taken into the project (else taken here)."""
        if isinstance(event, Approved):
            tip = gitops.head(repo, event.work.branch)
            assert tip is not None, f"the approved {event.work.branch} is missing"
            name = event.work.feature_id or event.work.branch
            merge = merge or (  # the REVIEW's verified merge in its clone: it lands as it is if main stays
                workdirs.take_main(
                    repo,
                    clone or workdirs.path_of(self.project, lane),
                    reviewed_ref(event.work.branch),
                    self.trunk,
                )
                if lane is not None
                else None
            )
            self.queue.add(
                Landing(name, event.work.branch, tip, lane or 0, review_id, time.time(), merge, tested)
            )
            main = gitops.head(repo, self.trunk)
            if lane is not None and merge is not None and tested and main is not None:
                self.stacks[lane] = (event.work, merge, main)  # its next session starts on the merge
            self._say(lane, f"{event.work.branch} approved: queued to land on {self.trunk}")
        elif isinstance(event, Rejected):
            tip = gitops.head(repo, event.work.branch)
            if tip is not None:
                gitops.keep_ref(repo, f"rejected/session-{number}/{event.work.branch}", tip)
                crashpoints.reached("rejected_kept")
                gitops.delete_branch(repo, event.work.branch)
                self._say(
                    lane,
                    f"branch {event.work.branch} deleted (rejected; its tip {tip[:10]} is kept under refs/scheduler/rejected/)",
                )
        elif isinstance(event, Blocked):
            rejections = self.schedule.backlog.rejection_count(event.feature_id)
            ending.blocked(self.events, lambda line: self._say(lane, line), event, rejections)
        elif isinstance(event, Merged):
            self.landed.append(event.work.feature_id or event.work.branch)
        elif isinstance(event, Retry):
            self._say(
                lane, f"{event.role.value} runs again (attempt {event.attempt} of {self.config.max_attempts})"
            )
        elif isinstance(event, GaveUp):
            self._say(
                lane, f"{event.role.value} failed {plural(self.config.max_attempts, 'time')}; moving on"
            )

    # -- the merge queue ----------------------------------------------------------------------
    def _land(self, _: int | None) -> None:
        repo = safe_git.open(self.project)
        while True:
            with self.lock:
                while not self._queue_done() and not self.queue.pending():
                    if not self.stopped and all(lane.role in IDLE for lane in self.schedule.lanes):
                        raise SchedulerError(
                            "every lane waits and nothing is in the merge queue: the schedule is stuck "
                            "(a bug); run the project with one lane"
                        )
                    self.lock.wait(timeout=1.0)
                if self._queue_done():
                    self.lock.notify_all()
                    return
                waiting = self.queue.pending()
            self._land_next(repo, waiting)

    def _land_next(self, repo: git.Repo, waiting: list[Landing]) -> None:
        """The next batch of what waits landed or sent back (`merge_queue.land_batch`), each
        landing recorded as soon as it is settled."""
        began = time.time()
        batch, stacked = self._batch(repo, waiting)
        if not batch:  # the first was set aside or held: the queue is read again
            return
        configured = self._tests(repo, batch[0]) is not None

        def settle(landing: Landing, verdict: Verdict, tested: int) -> None:
            self._landed(repo, landing, verdict, tested, configured, began, stacked[landing.branch])

        def tests_for(group: tuple[Landing, ...]) -> merge_queue.Tests | None:
            """Runs side by side each get their own handle on the project's repository (a
            handle's memo is not shared between threads)."""
            return self._tests(repo if self.runners == 1 else safe_git.open(self.project), *group)

        merge_queue.land_batch(
            repo,
            batch,
            tests_for,
            guard=self.quiet,
            onto=self.trunk,
            cap=batching.cap_for(self.runners),
            settle=settle,
            runners=self.runners,
        )

    def _batch(self, repo: git.Repo, waiting: list[Landing]) -> tuple[list[Landing], dict[str, list[str]]]:
        """The landings the queue tests together next, in queue order, up to `batching.cap_for` its runners,
        and the approved merges each began on (`merge_queue.stacked_on`). One held by a risk rule
        waits for the person instead; the first begun on approved work that did not land as
        approved is done again (`_restart`: nothing is landed then, the queue is read again);
        a later one begun on work not on `main` yet waits for a batch of its own."""
        main = gitops.head(repo, self.trunk)
        assert main is not None, "the project has a main from its setup commit on"
        batch: list[Landing] = []
        stacked: dict[str, list[str]] = {}
        for landing in waiting[: batching.cap_for(self.runners)]:
            on = merge_queue.stacked_on(repo, landing.branch)
            bases = merge_queue.unlanded_bases(repo, landing, main, on)
            if bases and batch:
                break  # after what it began on has landed (or not)
            if bases:
                with self.lock:
                    self._restart(repo, landing, bases)
                merge_queue.forget_stacked(repo, landing.branch, on)
                return [], {}
            why = self._risk(repo, landing)
            if why is not None:
                with self.lock:
                    self._hold(repo, landing, why)
                if not batch:
                    return [], {}
                continue
            batch.append(landing)
            stacked[landing.branch] = on
        return batch, stacked

    def _landed(
        self,
        repo: git.Repo,
        landing: Landing,
        verdict: Verdict,
        tested: int,
        tests_configured: bool,
        began: float,
        stacked: list[str],
    ) -> None:
        """What one landing of a batch came to, recorded (the queue's thread): landed on `main`, or
        sent back to a lane as a FIX; `tested`: the branches the test run that settled it held."""
        if isinstance(verdict, Landed):
            crashpoints.reached("queue_landed")
        timing = {"waited_s": round(began - landing.queued_at, 3), "land_s": round(time.time() - began, 3)}
        with self.quiet:
            work = _work_of(landing.branch)
            if isinstance(verdict, Landed):
                self.schedule, events = landed(self.schedule, work, self.config)
                self.events.emit(
                    "merge_verified",
                    session=self.schedule.issued,
                    feature=work.feature_id,
                    branch=landing.branch,
                    commit=verdict.commit,
                    tests=(
                        "not configured"
                        if not tests_configured
                        else "passed on the review's merge"
                        if verdict.reviewed and landing.merge_tested
                        else "landed before"
                        if verdict.again
                        else "passed"
                    ),
                    **({"batch": tested} if tested > 1 else {}),
                    lane=landing.lane,
                    **timing,
                )
                together = (
                    f", tested with {plural(tested - 1, 'other branch', 'other branches')}"
                    if tested > 1
                    else ""
                )
                self._say(None, f"{landing.branch} landed on {self.trunk} ({verdict.commit[:10]}{together})")
            else:
                review = self._scheduler_review(work, verdict)
                self.schedule, events = sent_back(
                    self.schedule, work, review, self.config, rejection=isinstance(verdict, Red)
                )
                self.returned.append(landing.feature)
                why = "conflict" if isinstance(verdict, Conflict) else "tests"
                self.events.emit(
                    "sent_back",
                    feature=work.feature_id,
                    branch=landing.branch,
                    why=why,
                    review_id=review,
                    **({"batch": tested} if tested > 1 else {}),
                    **timing,
                )
                cause = (
                    f"it conflicts with {self.trunk} in {', '.join(verdict.files) or 'the merge'}"
                    if isinstance(verdict, Conflict)
                    else f"the tests fail on {self.trunk} with it merged"
                )
                self._say(None, f"{landing.branch} sent back to a lane as a FIX: {cause} (review {review})")
            for event in events:
                self._act(repo, None, event, self.schedule.issued)
            self.queue.done(landing)
            progress.correct_passes(self.records, self.schedule.backlog.passing)
            self._save()
            self.lock.notify_all()
        if isinstance(verdict, Landed):  # (a kill before this leaves records that change nothing)
            merge_queue.forget_stacked(repo, landing.branch, stacked)

    def _risk(self, repo: git.Repo, landing: Landing) -> str | None:
        """Why a risk rule holds this landing for the person (None: none does, or it is no feature's)."""
        rules = risk_rules(self.config)
        trunk = gitops.head(repo, self.trunk)
        if not rules or _work_of(landing.branch).feature_id is None or trunk is None:
            return None
        sizes = any(rule.file_bytes_over is not None for rule in rules)
        return risk.held_by(rules, merge_queue.file_changes(repo, trunk, landing.tip, sizes_too=sizes))

    def _restart(self, repo: git.Repo, landing: Landing, bases: list[str]) -> None:
        """Approved work begun on an approved merge that did not land as approved (under the
        lock): it would bring that merge's work onto `main` unapproved, so it is set aside (its
        branch kept under refs/scheduler/rejected/) and done again from `main`."""
        work = _work_of(landing.branch)
        self.schedule, events = restarted(self.schedule, work, self.config)
        self.queue.done(landing)
        self.returned.append(landing.feature)
        self.events.emit(
            "sent_back", feature=work.feature_id, branch=landing.branch, why=STACKED, review_id=0
        )
        self._say(
            None,
            f"{landing.branch} was begun on {', '.join(b[:10] for b in bases)}, approved work that did not "
            f"land as approved: it is done again from {self.trunk}",
        )
        for event in (Rejected(work), *events):
            self._act(repo, None, event, self.schedule.issued)
        progress.correct_passes(self.records, self.schedule.backlog.passing)
        self._save()
        self.lock.notify_all()

    def _hold(self, repo: git.Repo, landing: Landing, why: str) -> None:
        """The landing waits for the person (under the lock): off the queue, held in the schedule;
        the lane that waited for it takes other work."""
        work = _work_of(landing.branch)
        self.schedule, events = held(self.schedule, work, why, self.config)
        self.queue.hold(landing, why)
        self.events.emit("held", feature=work.feature_id, branch=landing.branch, why=why)
        self._say(None, f"{landing.branch} waits for you ({why}): `approve {work.feature_id}` lands it")
        for event in events:
            self._act(repo, None, event, self.schedule.issued)
        self._save()
        self.lock.notify_all()

    def _queue_done(self) -> bool:
        """The merge queue stops: on a failure, or once nothing waits to land and nothing more
        will (every lane is done, or every lane's thread has stopped: a limit). Under the lock."""
        if self.failed is not None:
            return True
        return not self.queue.pending() and (self.schedule.settled or self.working == 0)

    def _tests(self, repo: git.Repo, *landings: Landing) -> merge_queue.Tests | None:
        """The project's gates on the merge of `landings` (one after another; None: no gate to
        run); their results are an event, named for the last (with the set when there are more)."""
        keeper = Gatekeeper.of(self.config, guard=self.lock)  # the lanes fetch into the project under it
        last = landings[-1]

        def record(results: tuple[GateResult, ...]) -> None:
            with self.lock:
                gated(
                    self.events,
                    results,
                    self.trunk,
                    feature=_work_of(last.branch).feature_id,
                    lane=last.lane,
                    batch=[landing.feature for landing in landings] if len(landings) > 1 else None,
                )

        return gating.landing_tests(
            keeper,
            repo,
            gitops.head(repo, self.trunk),
            self.trunk,
            record,
            lambda line: self._say(None, line),
        )

    def _scheduler_review(self, work: WorkItem, verdict: Conflict | Red) -> int:
        """The review that sends work back (under the lock): what conflicted, or the tests' output."""
        if isinstance(verdict, Conflict):
            finding = f"merging onto main conflicts in {', '.join(verdict.files)}; merge main into the branch and resolve"
            return progress.scheduler_review(
                self.records, work.feature_id, finding, verdict.detail, conflicts=tuple(verdict.files)
            )
        finding = "the tests fail on main with this branch merged"
        return progress.scheduler_review(self.records, work.feature_id, finding, verdict.output)


def _work_of(branch: str) -> WorkItem:
    """The work item a branch is the work of (`feature/F001`, `arch/4`)."""
    if branch.startswith(FEATURE_BRANCH):
        return WorkItem(feature_id=branch.removeprefix(FEATURE_BRANCH))
    return WorkItem(architecture_review=int(branch.removeprefix(ARCHITECTURE_BRANCH)))


def _utc(at: float) -> str:
    """A clock time as a person reads it in a message (a usage limit's reset, a wait's end)."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def _aside(folder: Path, why: str, clock: Clock) -> Path:
    """The name a session's folder is set aside under when the session runs again."""
    stamp = int(clock.now() * 1e9)
    while (aside := SessionFolder(folder).aside(why, stamp)).exists():
        stamp += 1  # a clock that stands still (a test's) sets two aside at one instant
    return aside
