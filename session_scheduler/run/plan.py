"""One session plan: everything a session needs, built by one pure function from state and config.

Every path builds a session through `plan_session`: one lane and the lanes (through one
`Planner`, made when the run opens the project), a worker (which re-roots the plan it is sent,
engine/exchange.py), `--dry-run`, the red team and the benchmarks. Everything a plan needs is a
required argument, so a caller that forgets one (the machine's `Host`, the adopted conventions,
the outage so far) is a type error, never a session with a weaker sandbox or without the
person's rules. `write_plan` is the one writer that puts the role's settings on disk. What the
agent reads in its system prompt is exactly `SessionPlan.system_prompt` (the role's
instructions, its scope, and the project's own conventions when it has them), whichever caller
built it. Nothing is written into the project's files: its CLAUDE.md is the person's
(adoption.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from session_scheduler.core.config import AgentConfig, SessionType, get_model_for_session
from session_scheduler.core.layout import SETTINGS_FILE
from session_scheduler.core.machine import SessionState, WorkItem
from session_scheduler.core.policy import policy
from session_scheduler.guard.sandbox import Host, lane_project, sandbox_settings
from session_scheduler.guard.security import scope_rules, settings_for, validate_settings
from session_scheduler.repo.adoption import Adoption, section
from session_scheduler.run import brief as briefs
from session_scheduler.run.prompts import READS, initializer_form, kickoff, render, role_variables
from session_scheduler.store.progress import atomic_write_json
from session_scheduler.store.records import Records


@dataclass(frozen=True)
class SessionPlan:
    """What one session runs with; the runner adds only where it runs (folders)."""

    number: int
    role: SessionType
    model: str
    work: WorkItem | None
    instructions: str
    """The role's rendered prompt template."""
    scope: str
    """The role's scope in words."""
    kickoff: str
    """The first user message (with the session brief)."""
    brief: str
    """What the session needs to know, bounded in size (brief.py)."""
    reads: tuple[str, ...]
    """The project files its prompt tells the agent to read (prompts.READS)."""
    open_review: int | None
    settings: dict[str, Any]
    """The validated Claude Code settings of the role."""
    max_turns: int
    timeout_s: float
    idle_timeout_s: float
    max_budget_usd: float | None
    """The session's cap handed to the CLI: what is left of the project's budget, or the
    session's own cap where that is lower. The CLI ends the session when it is spent."""
    capped_by_session: bool = False
    """The session's own cap (--max-session-budget-usd) is the binding one."""
    outage_allowance_s: float | None = None
    """How long the CLI may go on retrying failed API requests in this session before it is stopped
    (what is left of --max-outage-minutes); None: no limit."""
    conventions: str = ""
    """The project's own conventions section (its first-run CLAUDE.md), "" when it had none."""

    @property
    def sandboxed(self) -> bool:
        return "sandbox" in self.settings

    @property
    def system_prompt(self) -> str:
        """Appended to Claude Code's preset system prompt: the CLI reads no CLAUDE.md itself with
        `setting_sources=[]`, so the scope and the project's own conventions travel here."""
        prompt = f"{self.instructions}\n\n{self.scope}"
        return f"{prompt}\n{self.conventions}" if self.conventions else prompt


def plan_session(
    state: SessionState,
    config: AgentConfig,
    project: Path,
    *,
    spent_usd: float,
    brief: str,
    host: Host,
    outage_s: float,
    adopted: Adoption,
) -> SessionPlan:
    """The plan of the session about to run in `state` in `project` (its work tree: the project, or
    a lane's clone; reads only the shipped templates). Every piece is required: `spent_usd`, what
    the project has spent (its budget's rest caps the session); `brief`, rendered by the caller
    (`brief_for`); `host`, what the sandbox hides on this machine, read from its environment at
    the caller's edge; `outage_s`, how long the API has been failing; `adopted`, what the project
    was before the first run (its CLAUDE.md reaches the session)."""
    role, work = state.lane.role, state.lane.work
    form = initializer_form(state, adopted.files > 0)
    name = (lane_project(project) or project).name  # a lane's clone: the session builds its project
    settings = settings_for(role, config.test_command, project)
    if config.sandbox:
        settings.update(
            sandbox_settings(
                project, config.allowed_domains, host, protect_main=not policy(role).may_move_main
            )
        )
    validate_settings(settings)
    left = None if config.max_budget_usd is None else max(config.max_budget_usd - spent_usd, 0.0)
    cap = config.max_session_budget_usd
    capped_by_session = cap is not None and (left is None or cap <= left)
    return SessionPlan(
        number=state.next_number,
        role=role,
        model=get_model_for_session(role, config),
        work=work,
        instructions=render(role, role_variables(name, config, state), form=form),
        scope=scope_rules(role, work, form),
        kickoff=kickoff(role, state.next_number, brief),
        brief=brief,
        reads=READS.get(role, ()),
        open_review=state.lane.open_review,
        settings=settings,
        max_turns=config.max_turns,
        timeout_s=config.session_timeout_s,
        idle_timeout_s=config.idle_timeout_s,
        max_budget_usd=cap if capped_by_session else left,
        capped_by_session=capped_by_session,
        outage_allowance_s=max(config.max_outage_minutes * 60 - outage_s, 0.0),
        conventions=section(adopted),
    )


@dataclass(frozen=True)
class Planner:
    """How a run plans each of its sessions, whatever runs them (one lane or the lanes): the same
    `plan_session` with the same machine and project facts, read once when the run opens the
    project (run/opening.planner_of); what changes from session to session is an argument."""

    config: AgentConfig
    host: Host
    """What the sandbox hides on this machine (its homes, the CLI's config, secret variables)."""
    adopted: Adoption
    """The person's CLAUDE.md and branch as the first run found them."""

    def plan(
        self, state: SessionState, workdir: Path, *, brief: str, spent_usd: float, outage_s: float
    ) -> SessionPlan:
        """The plan of the session about to run in `state` in `workdir` (the project, or a lane's clone)."""
        return plan_session(
            state,
            self.config,
            workdir,
            spent_usd=spent_usd,
            brief=brief,
            host=self.host,
            outage_s=outage_s,
            adopted=self.adopted,
        )


def outage_so_far(since: float | None, now: float) -> float:
    """How long the API has been failing (`since`: its first failed request, clock time; None: it is not)."""
    return 0.0 if since is None else now - since


def brief_for(
    state: SessionState,
    config: AgentConfig,
    records: Records | Path,
    browser: str | None = None,
    planning: briefs.Planning = briefs.NO_PLANNING,
) -> str:
    """The brief of the session about to run in `state`, read from the project's hand-off files
    (`browser`: the app's address, for a web REVIEW given a browser; `planning`, what a planning
    session is told of a newer spec, a task list and the code: run/planning.py)."""
    return briefs.render(
        briefs.gather(records, state, state.next_number, config.test_command, browser, planning)
    )


def write_plan(plan: SessionPlan, folder: Path) -> Path:
    """Write the role's settings file into `folder`; return it (the scope and the conventions are
    in the system prompt: no CLAUDE.md is written).

    The sandbox's private temp folder is created too: sandboxed commands can write nowhere else
    outside the code."""
    if plan.sandboxed:
        Path(plan.settings["env"]["TMPDIR"]).mkdir(mode=0o700, exist_ok=True)
    settings = folder / SETTINGS_FILE
    atomic_write_json(settings, plan.settings, durable=False)
    return settings
