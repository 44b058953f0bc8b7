"""The session loop: plan, prepare, run, verify, transition, save; once per session, until done or a limit."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import git

from session_scheduler.core.clock import Clock, SystemClock
from session_scheduler.core.config import TERMINAL, AgentConfig, SessionType
from session_scheduler.core.errors import NotLoggedIn, SchedulerError, StateError, UnknownModel
from session_scheduler.core.humane import duration, money, plural
from session_scheduler.core.layout import LOG_DIR, SETTINGS_FILE, STATE_FILE
from session_scheduler.core.machine import (
    WORK_BRANCHES,
    Blocked,
    Event,
    GaveUp,
    Outcome,
    Rejected,
    Retry,
    SessionState,
    Step,
    resume,
    transition,
)
from session_scheduler.core.policy import policy
from session_scheduler.core.session import LANE, REATTACHED, InFlight, SessionFolder
from session_scheduler.core.standing import Standing, Then, Wait
from session_scheduler.guard import processes, safe_git
from session_scheduler.guard.browser_box import APP_ORIGIN
from session_scheduler.guard.sandbox import Host, private_tmp
from session_scheduler.repo import git_backup, git_guard, gitops, refs
from session_scheduler.run import browsing, ending
from session_scheduler.run.agent import (
    SessionRequest,
    SessionResult,
    SessionRunner,
    held_by_engine,
    run_session,
)
from session_scheduler.run.browsing import BrowserPlan
from session_scheduler.run.classify import (
    LIMIT_MARGIN_S,
    Classified,
    backoff_s,
    cut_short,
    judged,
)
from session_scheduler.run.gating import Gatekeeper, gated
from session_scheduler.run.opening import open_project, planner_of, run_started, set_aside_foreign_branches
from session_scheduler.run.plan import Planner, SessionPlan, brief_for, outage_so_far, write_plan
from session_scheduler.run.report import RunReport, RunStatus
from session_scheduler.run.verify import PreSession, capture, heads_of, verify_session
from session_scheduler.store import crashpoints, events, handoff_check, handoff_history, progress, statefile
from session_scheduler.store.events import EventLog, Totals, new_run_id
from session_scheduler.store.records import Records

STATE_COPIES = 3
"""Session folders that keep a copy of the state after them (older ones are compacted away)."""


@dataclass(frozen=True)
class Session:
    """One session as it flows through the steps (prepare -> run -> settle -> transition ->
    record): each step takes it and returns it with what the step established."""

    state: SessionState
    """The state the session starts from."""
    folder: SessionFolder
    plan: SessionPlan
    pre: PreSession
    """Where it starts: the hand-off files, main, the branches (verification compares with it)."""
    in_flight: InFlight
    """Its start as the state file keeps it while it is in flight (what a rerun needs)."""
    browser: BrowserPlan | None = None
    """A web feature's REVIEW: the app and the browser started around it."""
    result: SessionResult | None = None
    """run: the CLI's report."""
    classified: Classified | None = None
    """settle: how it counts."""
    outcome: Outcome | None = None
    """settle: the verified outcome (None when it was cut short before verification)."""
    step: Step | None = None
    """transition: the new state and its events (None unless it counts)."""
    after: SessionState | None = None
    """record: the state saved after it (None unless it counts)."""

    @property
    def ran(self) -> SessionResult:
        assert self.result is not None, "the session has not run"
        return self.result

    @property
    def judged(self) -> Classified:
        assert self.classified is not None, "the session has not been settled"
        return self.classified


def log_dir_for(project: Path, number: int, role: SessionType) -> Path:
    return SessionFolder.of(project, number, role).path


class Scheduler:
    """Runs sessions for one project until every feature passes or is blocked, or a limit.

    Side effects: git in the project (through gitops), the hand-off and state files, the
    session log folders, and whatever the injected `runner` does (it runs the agent).
    `echo` receives the progress lines. Time, waits and chance come from `clock`. The caller
    holds the project's `Authority` (store/authority.py) for the whole run.
    """

    def __init__(
        self,
        project: Path,
        config: AgentConfig,
        runner: SessionRunner,
        *,
        echo: Callable[[str], None] = print,
        clock: Clock | None = None,
        events: EventLog | None = None,
        cost_basis: str = "api",
        host: Host | None = None,
    ) -> None:
        self.clock = clock or SystemClock()
        self.host = host or Host.of(os.environ)  # the edge: a caller that has read it passes it
        """What the sandbox hides on this machine (its homes, the CLI's config, secret variables)."""
        self._planner: Planner | None = None
        """How each session is planned: made when the run opens the project (`_open`)."""
        self._outage_since: float | None = None
        """When the API began failing (clock time), until a session counts again."""
        self._stashes = 0
        self.project = project
        """The workdir: the git work tree sessions work in (today also where the records are)."""
        self.records = Records(project)
        """The project's records (state, hand-off files, history), and what they remember between reads."""
        self.config = config
        self.runner = runner
        self.echo = echo
        self.events = events or EventLog(project, new_run_id(self.clock), clock=self.clock.now)
        self.cost_basis = cost_basis
        self.totals = Totals()
        """The project's totals: the event log folded, kept current as events are appended."""
        self.run_totals = Totals(run=self.events.run)
        """This invocation's (a killed run's session, whose end this run records, is not)."""
        self.count = 0
        self._unrecorded: list[tuple[str, str, str]] = []
        """Stashes noted before the run's first event, recorded once it has one."""
        self._git_guard: git_guard.GitGuard | None = None
        """`.git/config`, `.git/hooks`, `.git/info` as this run found them (taken when it opens the repository)."""
        self._backup: git_backup.Backup | None = None
        """The repository's objects and refs as the session in flight began (git_backup.py)."""
        self.lane = LANE
        """The lane this scheduler runs sessions in (its in-flight record and restore point are keyed by it)."""
        self._attempt = 1
        """Which run of its session the next session is (one more after each cut: `InFlight.attempt`)."""

    # -- state -----------------------------------------------------------------
    def load(self) -> tuple[SessionState, InFlight | None]:
        saved = statefile.load(self.records)
        if saved is None and (self.project / "feature_list.json").exists():
            raise StateError(
                f"{STATE_FILE} is missing but the project has a feature list; restore it from the "
                f"newest {LOG_DIR}/session_*/state.json and run the same command again"
            )
        if saved is None:
            return SessionState(), None
        state = saved.state
        if state.lane.role is SessionType.HALTED:
            self.echo(f"The last run halted ({state.halt_reason}); trying the INITIALIZER again")
        return resume(state), saved.flight(self.lane)

    def save(self, state: SessionState, in_flight: InFlight | None = None) -> None:
        """The state, and the lane's session in flight (None: it has none)."""
        self.events.sync()  # first: the saved state is never ahead of the event log on disk
        statefile.save(self.records, state, {} if in_flight is None else {in_flight.lane: in_flight})

    # -- the loop ----------------------------------------------------------------
    def run(self, max_iterations: int | None = None) -> RunReport:
        """Run sessions until done or a limit (the caller holds the project lock).

        The run's events go to the event log from `run_started` to `run_ended`, whatever ends
        it; a project refused before the loop starts is left as it was, log folder included."""
        try:
            repo = self._open()
            self.totals = Totals.of(events.read(self.events.path))
            self.events.subscribe(self.totals.apply)
            self.events.subscribe(self.run_totals.apply)
            run_started(self.events, self.project, self.cost_basis)
            self._record_set_aside()
            status, message = "error", "an unexpected error (see the traceback)"
            try:
                report = self._loop(repo, max_iterations)
                status, message = report.status, report.message
                if self.count:
                    self._leave_work_tree(repo)
                return report
            except KeyboardInterrupt:
                status, message = "interrupted", "interrupted; run the same command again to resume"
                raise
            except (SchedulerError, git.GitCommandError) as exc:
                message = str(
                    gitops.failed(self.project, exc) if isinstance(exc, git.GitCommandError) else exc
                )
                raise
            finally:
                self.events.emit("run_ended", status=status, message=message, sessions=self.count)
                self.events.sync()
                shutil.rmtree(
                    private_tmp(self.project), ignore_errors=True
                )  # the sessions' TMPDIR: made again next run
        except git.GitCommandError as exc:
            raise gitops.failed(self.project, exc) from None

    def _report(self, status: RunStatus, state: SessionState, message: str) -> RunReport:
        return RunReport(status, state, self.totals, self.run_totals, message, self.count)

    def _open(self) -> git.Repo:
        """The project's repository, after the checks that refuse a project before anything runs."""
        repo, stashed = open_project(self.project, self.records, self.echo, (private_tmp(self.project),))
        self._planner = planner_of(self.project, self.config, self.host)
        self._git_guard = git_guard.baseline(self.project, Path(repo.common_dir))
        for change in self._git_guard.since_last_run:
            self.echo(
                f"  WARNING: {change} since the last run (kept: the repository's settings are guarded during a run only)"
            )
        self._stashes = self._note_stash(stashed)
        return repo

    def _loop(self, repo: git.Repo, max_iterations: int | None) -> RunReport:
        state, interrupted = self.load()
        if (
            state.session_count == 0 and interrupted is None
        ):  # a new project, perhaps in an existing repository
            set_aside_foreign_branches(repo, self.events, self.echo)
        if not state.backlog.features:  # a new project: the files agents append to start empty
            progress.ensure_handoff_files(self.records, self.project.name)
        if interrupted is None:  # a cut session's files are restored from its own copies instead
            self._check_handoff(state, trim=True)
        sandbox_faults = outages = 0
        while state.lane.role not in TERMINAL:
            if state.lane.role is SessionType.WAIT:  # a lane's pause; one lane has none to wait for
                raise StateError(
                    f"{STATE_FILE} says the lane waits for other lanes, but this run has one lane; "
                    f"restore it from the newest {LOG_DIR}/session_*/state.json and run the same command again"
                )
            limit = self._limit_before(max_iterations)
            if limit:
                return self._report("limit", state, limit)
            pre, held = None, None
            self._attempt = 1
            if interrupted and held_by_engine(self.runner, interrupted):  # awaited where it runs
                pre, held = self._reattach(state, interrupted), interrupted
                self._attempt = interrupted.attempt
            elif interrupted:
                stop = self._wait(interrupted)
                if stop:
                    return self._report("limit", state, stop)
                pre = self._recover(repo, state, interrupted)
                self._attempt = interrupted.attempt + 1  # its next run: a new name on an engine
            interrupted = None
            session = self._one_session(repo, state, pre, held)
            standing, why = session.judged.standing, session.judged.reason
            consequence = standing.consequence
            if consequence.then is Then.TRANSITION:
                assert session.after is not None  # a counted session was transitioned and saved
                outages, self._outage_since = 0, None
                state = session.after
            elif consequence.then is Then.RAISE:
                raise (UnknownModel if session.judged.unknown_model else NotLoggedIn)(why)
            elif consequence.then is Then.STOP:
                if standing is Standing.BUDGET:
                    self._budget_reached()
                return self._report("limit", state, f"{why}; {consequence.stop}")
            elif consequence.then is Then.RERUN_FRESH:
                sandbox_faults += 1
                self._set_aside(state, standing.value)
                if sandbox_faults > consequence.retries:
                    self.save(state)
                    return self._report("limit", state, f"{why}; {consequence.stop}")
                self.echo(f"  {why}: {consequence.note}")
            else:  # Then.RERUN, after its wait
                if consequence.wait is Wait.BACKOFF:
                    outages += 1
                    delay = self._outage_stop(session, outages, why)
                    if isinstance(delay, str):
                        return self._report("limit", state, delay)
                    wait_until: float | None = self.clock.now() + delay
                elif consequence.wait is Wait.RESET:
                    wait_until = (session.judged.resets_at or self.clock.now()) + LIMIT_MARGIN_S
                else:
                    wait_until = None
                interrupted = session.in_flight.cut(standing.value, wait_until)
                self.save(state, interrupted)
                if consequence.wait is Wait.BACKOFF:
                    self.echo(f"  {why}; running the session again in {delay:.0f} s (outage {outages})")
        if state.lane.role is SessionType.HALTED:
            return self._report("halted", state, state.halt_reason)
        backlog = state.backlog
        done = (
            f"all {plural(len(backlog.features), 'feature')} pass"
            if not backlog.blocked
            else (
                f"{len(backlog.passing)} of {plural(len(backlog.features), 'feature')} pass, {len(backlog.blocked)} blocked"
            )
        )
        return self._report("done", state, done)

    def _outage_stop(self, session: Session, outages: int, why: str) -> float | str:
        """The back-off before the `outages`-th rerun of a session cut by an outage, or why the
        run stops instead: the outage, from its first failed request, would outlast the allowance."""
        delay = backoff_s(outages, self.clock)
        if self._outage_since is None:  # from the first failed request, the CLI's own retries included
            self._outage_since = self.clock.now() - session.ran.retrying_s
        outage_s = self.clock.now() - self._outage_since
        if outage_s + delay > self.config.max_outage_minutes * 60:
            return (
                f"{why}; gave up after {duration(outage_s)} of failing requests, retries and back-off "
                f"included (--max-outage-minutes {self.config.max_outage_minutes:g}); run the same command again later"
            )
        return delay

    def _wait(self, interrupted: InFlight) -> str | None:
        """Wait until a cut session may run again (a usage limit's reset, an outage's back-off);
        a reason to stop instead when the user asked not to wait (`--no-wait`)."""
        until = interrupted.wait_until
        if until is None or until <= self.clock.now():
            return None
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(until))
        if interrupted.why == Standing.USAGE_LIMIT.value:
            if not self.config.wait_for_limits:
                return f"usage limit reached; it resets at {when}. Run the same command again then to resume"
            minutes = (until - self.clock.now()) / 60
            self.echo(
                f"  usage limit reached: waiting until {when} ({minutes:.0f} min), then session "
                f"{interrupted.number} runs again (stopping now is safe: the same command waits again)"
            )
        self.events.emit(
            "limit_wait", session=interrupted.number, why=interrupted.why or "outage", until=until
        )
        crashpoints.reached("waiting")
        self.clock.sleep(until - self.clock.now())
        return None

    def _limit_before(self, max_iterations: int | None) -> str | None:
        """Why no further session may start in this run, if a limit says so."""
        if max_iterations is not None and self.count >= max_iterations:
            return f"stopped after {plural(self.count, 'session')} (--max-iterations); run the same command again to resume"
        budget, cap, spent = (
            self.config.max_budget_usd,
            self.config.max_session_budget_usd,
            self.totals.cost_usd,
        )
        if budget is not None and spent >= budget:
            self._budget_reached()
            return f"the budget of {money(budget)} is spent ({money(spent)}); raise --max-budget-usd to go on"
        if budget is not None and cap is not None and budget - spent < cap:
            self._budget_reached()
            return (
                f"the project budget has {money(budget - spent)} left, less than one session may spend "
                f"(--max-session-budget-usd {money(cap)}); raise --max-budget-usd to go on"
            )
        return None

    def _budget_reached(self) -> None:
        budget = self.config.max_budget_usd
        self.events.emit(
            "budget_reached", which="project", budget_usd=budget, spent_usd=round(self.totals.cost_usd, 6)
        )

    def _recover(self, repo: git.Repo, state: SessionState, interrupted: InFlight) -> PreSession:
        """A session was cut off: restore its hand-off files and run it again from the same start.

        Its commits stay (they count when the rerun is verified); its log folder is kept
        aside as `*.interrupted-<time>`.
        """
        folder = SessionFolder(Path(interrupted.log_dir))
        old = folder.path
        why = interrupted.why or Standing.INTERRUPTED.value
        if folder.pre.is_dir():
            aside = self._aside(old, why)
            old.rename(aside)
            crashpoints.reached("recover_set_aside")
        else:  # killed again after the folder was set aside, before the rerun saved its own
            earlier = folder.set_aside_copies()
            if not earlier:
                raise StateError(
                    f"the interrupted session's copies are missing ({old}/pre); restore that folder "
                    "from a backup, or restore .agent_state.json from the newest .agent_logs/*/state.json"
                )
            aside = earlier[-1]
        copies = Path(interrupted.copies or aside / SessionFolder.PRE)
        progress.restore(self.records, copies, state.backlog.passing)
        crashpoints.reached("recover_restored")
        work, tip = state.lane.work, interrupted.branch_tip
        branch = work.branch if work else None
        if branch and tip and gitops.head(repo, branch) is None:  # deleted just before the kill
            gitops.create_branch(repo, branch, tip)
        flight = self.totals.in_flight.get(interrupted.lane)
        if flight is not None and flight.get("session") == interrupted.number:  # killed: it never ended
            self._ended_partly(state.lane.role.value, flight, aside / SessionFolder.TRANSCRIPT, killed=True)
        self.events.emit("resumed", session=interrupted.number, role=state.lane.role.value, cause=why)
        cause = "interrupted" if why == Standing.INTERRUPTED.value else f"cut short ({why.replace('_', ' ')})"
        head = "Resuming: session" if self.count == 0 else "Running session"
        self.echo(
            f"{head} {interrupted.number} ({state.lane.role.value}) again: it was {cause}; "
            "hand-off files restored"
        )
        return PreSession(
            interrupted.main,
            tip,
            progress.load_handoff(self.records),
            copies,
            heads_of(interrupted.heads_record, copies),
        )

    def _reattach(self, state: SessionState, held: InFlight) -> PreSession:
        """A killed run's session the engine still holds (running, or ended with a result): awaited,
        not run again, under its number and attempt, and verified against its start as recorded
        (the hand-off files as its copies keep them: what it wrote comes back with its result)."""
        copies = Path(held.copies or Path(held.log_dir) / SessionFolder.PRE)
        role = state.lane.role.value
        self.events.emit("resumed", session=held.number, role=role, cause=REATTACHED)
        self.echo(f"Session {held.number} ({role}) is still on the engine: awaiting it, not running it again")
        return PreSession(
            held.main,
            held.branch_tip,
            progress.load_handoff(Records(copies)),
            copies,
            heads_of(held.heads_record, copies),
        )

    def _leave_work_tree(self, repo: git.Repo) -> None:
        """After a run that ran sessions, leave a clean work tree on `main`, where every verified
        merge lands (not on the branch the last session worked on), and name the branch the person
        had checked out before the first run when that was another one; a tree a session left
        unclean stays as it is, for the next run to set aside. (Not the person's branch itself:
        the spec and the application are on `main`, and a rerun reads the spec from the work tree.)"""
        if gitops.current_branch(repo) != gitops.MAIN and not gitops.dirty(repo):
            repo.git.checkout("-q", gitops.MAIN)
        mine = self.planner.adopted.branch
        if (
            mine
            and mine != gitops.MAIN
            and not mine.startswith(WORK_BRANCHES)
            and gitops.head(repo, mine) is not None
        ):
            self.echo(
                f"  work tree: on main, with the sessions' work; your branch {mine} is as you left it (`git checkout {mine}`)"
            )

    def _note_stash(self, before: int) -> int:
        """Say in one line where uncommitted work went when the scheduler set it aside."""
        entries = gitops.stashes(self.project, self.records.stashes)
        if len(entries) > before:
            ref, _, message = entries[0].partition(": ")
            self.echo(
                f"  set aside: uncommitted work is kept as {ref} ({message}); "
                f"`git stash show -p --include-untracked {ref}` shows it, `git stash pop {ref}` brings it back"
            )
            commit = refs.sha(self.project / ".git", "refs/stash") or ""
            self._unrecorded.append((ref, message, commit))
            self._record_set_aside()
        return len(entries)

    def _record_set_aside(self) -> None:
        if self.totals.run_started is None:
            return
        while self._unrecorded:
            ref, message, commit = self._unrecorded.pop(0)
            self.events.emit("set_aside", ref=ref, message=message, commit=commit)

    def _check_handoff(self, state: SessionState, *, trim: bool = False) -> None:
        """The hand-off files checked before a session reads them (`handoff_check`; on start, `trim`)."""
        if state.backlog.features:
            handoff_check.check(self.records, frozenset(state.backlog.passing), self.echo, trim=trim)

    def _prepare_git(self, repo: git.Repo, state: SessionState) -> None:
        """Check out what the session starts on; nothing an earlier session left is lost."""
        role, work = state.lane.role, state.lane.work
        if gitops.clear_stale_lock(repo):
            self.echo("  removed a stale .git/index.lock left by a stopped session")
        gitops.pack_branches_if_many(repo)
        gitops.keep_loose(repo, gitops.MAIN)  # a file of its own, which the sandbox keeps unwritable
        if role is SessionType.FIX and work is not None and work.architecture_review is not None:
            main = gitops.head(repo, gitops.MAIN)
            assert main is not None
            gitops.create_branch(repo, work.branch, main)
        if policy(role).starts_on == "work":
            if work is None or gitops.head(repo, work.branch) is None:
                raise StateError(
                    f"the branch {work.branch if work else '(none)'} that this {role.value} session works "
                    "on is missing; restore it (its last commits are under refs/scheduler/) and run the "
                    "same command again"
                )
            gitops.checkout(repo, work.branch)
        else:
            gitops.checkout(repo, gitops.MAIN)

    def _one_session(
        self, repo: git.Repo, state: SessionState, pre: PreSession | None, held: InFlight | None = None
    ) -> Session:
        """One session through its steps; each takes the Session and returns it, and none returns
        to the loop before the last: the loop only applies its standing's consequence. `held`: a
        killed run's session the engine still holds, awaited (its start as recorded)."""
        session = self._prepare(repo, state, pre, held)
        session = self._run(repo, session, awaited=held is not None)
        session = self._settle(repo, session)
        session = self._transition(session)
        return self._record(repo, session)

    def _prepare(
        self, repo: git.Repo, state: SessionState, pre: PreSession | None, held: InFlight | None = None
    ) -> Session:
        """Check out what the session starts on, check the hand-off files, write its status and
        brief, plan it, capture where it starts (unless a rerun's start is given), save it as in flight.
        A `held` session (awaited on the engine) is only planned: its start is on record."""
        if held is not None:
            assert pre is not None
            progress.write_status_of(self.records, state, self.lane)
            plan = self._plan(state, "")  # its brief went with it when it started
            return Session(state, SessionFolder(Path(held.log_dir)), plan, pre, held)
        log_dir = log_dir_for(self.project, state.next_number, state.lane.role)
        self._prepare_git(repo, state)
        crashpoints.reached("git_prepared")
        self._stashes = self._note_stash(self._stashes)
        self._check_handoff(state)
        if pre is None:  # a rerun starts from its first try's files, as they were
            handoff_history.trim(self.records)
        progress.write_status_of(self.records, state, self.lane)
        browser = browsing.plan_for(Gatekeeper.of(self.config), repo, self.records, state, log_dir)
        brief = brief_for(state, self.config, self.records, APP_ORIGIN if browser else None)
        plan = self._plan(state, brief)
        if pre is None:  # the restore point: full copies, replaced each session (not kept per session)
            pre = capture(
                self.records, repo, state, progress.restore_point(self.records, SessionFolder.PRE, self.lane)
            )
        self._backup = git_backup.sync(self.project, Path(repo.common_dir))
        if self._backup.error:
            self.echo(f"  WARNING: {self._backup.error}")
        progress.snapshot(self.records, log_dir / SessionFolder.PRE, progress.KEPT_PER_SESSION)
        flight = self._in_flight(plan.number, log_dir, pre)
        self.save(state, flight)
        crashpoints.reached("in_progress_saved")
        return Session(state, SessionFolder(log_dir), plan, pre, flight, browser)

    @property
    def planner(self) -> Planner:
        assert self._planner is not None, "no session is planned before the run opens the project"
        return self._planner

    def _plan(self, state: SessionState, brief: str) -> SessionPlan:
        return self.planner.plan(
            state,
            self.project,
            brief=brief,
            spent_usd=self.totals.cost_usd,
            outage_s=outage_so_far(self._outage_since, self.clock.now()),
        )

    def _run(self, repo: git.Repo, session: Session, *, awaited: bool = False) -> Session:
        """The seam: the plan written, one fresh CLI process (or the robot); then what it left
        running is stopped, the repository repaired and its settings restored; its result and
        denials written to the session folder. `awaited`: a killed run's session, still on the
        engine, whose start was recorded then (no second start)."""
        state, plan, log_dir = session.state, session.plan, session.folder.path
        request = SessionRequest(
            plan,
            self.project,
            self.project / SETTINGS_FILE if awaited else write_plan(plan, self.project),
            log_dir,
            self.records,
            attempt=session.in_flight.attempt,
        )
        crashpoints.reached("plan_written")
        work = plan.work
        started_event = (
            self.events.emit(
                "session_started",
                session=plan.number,
                role=plan.role.value,
                model=plan.model,
                feature=work.feature_id if work else None,
                branch=work.branch if work else None,
                attempt=state.lane.attempts + 1,
                log_dir=str(log_dir.relative_to(self.project)),
                lane=self.lane,
            )
            if not awaited
            else self.totals.in_flight.get(self.lane, {})
        )
        if not plan.sandboxed:
            self.echo(
                "  WARNING: no OS sandbox (--no-sandbox): this session's commands can write outside the project"
            )
        started = time.time()  # the OS's clock, not `self.clock`: compared with processes' start times
        try:
            result = run_session(self.runner, request, session.browser, self.echo)
        except KeyboardInterrupt:
            self._ended_partly(plan.role.value, started_event, log_dir / SessionFolder.TRANSCRIPT)
            raise
        crashpoints.reached("cli_ended")
        left = processes.stop_left_in(self.project, started)
        if left:
            self.echo(
                f"  stopped {plural(len(left), 'process', 'processes')} the session left running in the project (pids {', '.join(map(str, left))})"
            )
        self._restore_git_settings(repo, plan.number)
        ending.write_result(log_dir, result)
        ending.audit(self.events, self.echo, plan, self.project, log_dir, result)
        crashpoints.reached("result_written")
        return replace(session, result=result)

    def _settle(self, repo: git.Repo, session: Session) -> Session:
        """How the session counts: cut short (not the agent's doing: not verified, run again from
        the same start), else verified -> its outcome, and judged."""
        state, plan, pre, result = session.state, session.plan, session.pre, session.ran
        cut = cut_short(result, plan.model, capped_by_session=plan.capped_by_session, role=plan.role.value)
        if cut is not None:
            return replace(session, classified=cut)
        outcome = verify_session(
            self.records, repo, state, pre, self.config, self.echo, folder=session.folder.path
        )
        crashpoints.reached("verified")
        return replace(session, outcome=outcome, classified=judged(result, outcome))

    def _transition(self, session: Session) -> Session:
        """A counted session's outcome through `machine.transition` (pure)."""
        if session.outcome is None or not session.judged.standing.counted:
            return session
        return replace(session, step=transition(session.state, session.outcome, self.config))

    def _record(self, repo: git.Repo, session: Session) -> Session:
        """What the session established, recorded: a cut session is saved as in flight; a verified
        one's post copies and changes go to its folder, its events to the log, and a counted one's
        transition is acted on, saved and copied to its folder."""
        state, plan, pre, result, classified = (
            session.state,
            session.plan,
            session.pre,
            session.ran,
            session.judged,
        )
        log_dir, outcome = session.folder.path, session.outcome
        if outcome is None:
            self.save(state, session.in_flight.cut(classified.standing.value))
            self._ended(plan, result, classified, None)
            self.count += 1
            return session
        progress.snapshot(self.records, progress.restore_point(self.records, SessionFolder.POST))
        progress.snapshot(self.records, log_dir / SessionFolder.POST, progress.KEPT_PER_SESSION)
        self._write_changes(log_dir, pre)
        crashpoints.reached("post_copied")
        self._verified_events(repo, plan, outcome)
        self._ended(plan, result, classified, outcome.verdict)
        self.count += 1
        if session.step is None:
            return session
        return replace(session, after=self._after(repo, state, session.step))

    def _restore_git_settings(self, repo: git.Repo, number: int) -> None:
        """Rebuild what a session damaged in the repository from the scheduler's copy (first: git
        works again), put back what it changed in `.git/config`, `.git/hooks` or `.git/info`, each
        echoed and recorded as an undo; the drivers the config names are read again."""
        damage = git_backup.repair(self._backup) if self._backup is not None else None
        if damage:
            self.echo(f"  undo: {damage}")
            self.events.emit("undo", session=number, reason=damage)
        if self._git_guard is not None:
            for change in git_guard.check_and_restore(self.project, self._git_guard):
                self.echo(f"  undo: {change}; restored as the run found it")
                self.events.emit("undo", session=number, reason=f"{change}; restored as the run found it")
        safe_git.refresh(repo)

    def _write_changes(self, log_dir: Path, pre: PreSession) -> None:
        """What the session changed in feature_list.json (it is not copied per session: it grows
        with the project), beside the copies of the other two hand-off files."""
        try:
            after = progress.load_handoff(self.records)
        except StateError:  # verification restored the pre-session files already
            return
        changed = sorted(after.passing() ^ pre.handoff.passing())
        listed = pre.handoff.feature_list is None and after.feature_list is not None
        data = {"passes": {f: f in after.passing() for f in changed}, "feature_list_written": listed}
        (log_dir / SessionFolder.CHANGES).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")

    def _verified_events(self, repo: git.Repo, plan: SessionPlan, outcome: Outcome) -> None:
        """The events of what verification established: a feature list, a verdict, a merge, an undo."""
        feature = plan.work.feature_id if plan.work else None
        if not outcome.ok or outcome.undone:
            self.events.emit("undo", session=plan.number, reason=outcome.undone or outcome.reason)
        if not outcome.ok:
            return
        if plan.role is SessionType.INITIALIZER:
            self.events.emit("features_listed", session=plan.number, features=list(outcome.feature_ids))
        where = "main" if plan.role is SessionType.REVIEW else "branch"
        gated(self.events, outcome.gates, where, session=plan.number, feature=feature)
        if outcome.verdict is not None:
            self.events.emit(
                "verdict",
                session=plan.number,
                feature=feature,
                review_id=outcome.review_id,
                verdict=outcome.verdict,
            )
        if plan.role is SessionType.REVIEW and outcome.verdict == "PASS" and plan.work is not None:
            self.events.emit(
                "merge_verified",
                session=plan.number,
                feature=feature,
                branch=plan.work.branch,
                commit=gitops.head(repo, gitops.MAIN),
                tests="passed" if outcome.gates else "not configured",
            )

    def _ended(
        self, plan: SessionPlan, result: SessionResult, classified: Classified, verdict: str | None
    ) -> None:
        """The session's one line on the console, and its receipt into the event log."""
        self.echo(
            ending.session_ended(
                self.events, self.totals, self.clock.now(), plan, result, classified, verdict
            )
        )

    def _ended_partly(
        self, role: str, started: dict[str, Any], transcript: Path, *, killed: bool = False
    ) -> None:
        ending.ended_partly(
            self.events, self.totals, self.clock.now(), role, started, transcript, killed=killed
        )

    def _after(self, repo: git.Repo, state: SessionState, step: Step) -> SessionState:
        """Act on the events of a counted session's transition, save its state, keep a restore point."""
        for event in step.events:
            self._act(repo, event, step.state)
        crashpoints.reached("transitioned")
        self.save(step.state)
        crashpoints.reached("state_saved")
        log_dir = log_dir_for(self.project, step.state.session_count, state.lane.role)
        shutil.copy2(self.project / STATE_FILE, log_dir / SessionFolder.STATE)  # a restore point
        self._compact(step.state.session_count - STATE_COPIES)
        crashpoints.reached("restore_point_copied")
        progress.write_status_of(self.records, step.state, self.lane)
        crashpoints.reached("status_written")
        return step.state

    def _compact(self, number: int) -> None:
        """Keep the state's restore points of the last sessions only: the state lists every
        feature, so one copy per session would make the logs grow with the project."""
        for old in (self.project / LOG_DIR).glob(f"{SessionFolder.glob_of(number)}/{SessionFolder.STATE}"):
            old.unlink(missing_ok=True)

    def _act(self, repo: git.Repo, event: Event, new: SessionState) -> None:
        """What the scheduler does about one event of the transition."""
        if isinstance(event, Rejected):
            branch = event.work.branch
            tip, main = gitops.head(repo, branch), gitops.head(repo, gitops.MAIN)
            if tip and main and not gitops.is_ancestor(repo, tip, main):
                gitops.keep_ref(repo, f"rejected/session-{new.session_count}/{branch}", tip)
                crashpoints.reached("rejected_kept")
                gitops.delete_branch(repo, branch)
                self.echo(
                    f"  branch {branch} deleted (rejected; its tip {tip[:10]} is kept under refs/scheduler/rejected/)"
                )
        elif isinstance(event, Blocked):
            ending.blocked(self.events, self.echo, event, new.backlog.rejection_count(event.feature_id))
        elif isinstance(event, Retry):
            self.echo(
                f"  {event.role.value} runs again (attempt {event.attempt} of {self.config.max_attempts})"
            )
        elif isinstance(event, GaveUp):
            self.echo(f"  {event.role.value} failed {plural(self.config.max_attempts, 'time')}; moving on")

    def _set_aside(self, state: SessionState, why: str) -> None:
        """Keep a session's log folder that will be run again under another name."""
        folder = log_dir_for(self.project, state.next_number, state.lane.role)
        if folder.exists():
            folder.rename(self._aside(folder, why))

    def _aside(self, folder: Path, why: str) -> Path:
        """The name a session's log folder is set aside under: `<name>.interrupted-<why>-<clock ns>`."""
        stamp = int(self.clock.now() * 1e9)
        while (aside := SessionFolder(folder).aside(why, stamp)).exists():
            stamp += 1  # a clock that stands still (a test's) sets two aside at one instant
        return aside

    def _in_flight(self, number: int, log_dir: Path, pre: PreSession) -> InFlight:
        """What a rerun of an interrupted session needs: where it started, in which lane."""
        record = pre.heads_record
        return InFlight(
            lane=self.lane,
            number=number,
            log_dir=str(log_dir),
            main=pre.main,
            branch_tip=pre.branch_tip,
            heads=record["heads"],
            heads_gone=tuple(record["heads_gone"]),
            copies=str(pre.copies),
            attempt=self._attempt,
        )
