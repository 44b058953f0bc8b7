"""What a run adds up to: the project's running totals and the one-screen summary."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rich.console import Console
from rich.table import Table

from agent import SessionResult
from config import SessionType
from machine import Outcome, SessionState

RunStatus = Literal["done", "limit", "halted"]


@dataclass
class Stats:
    """Running totals over the whole project (kept in `.agent_state.json`)."""

    sessions_by_type: dict[str, int] = field(default_factory=dict)
    failed_sessions: int = 0
    interrupted_sessions: int = 0
    cost_usd: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    denials_by_role: dict[str, int] = field(default_factory=dict)
    """Tool calls refused by the permission settings, the hooks or the sandbox, per role."""
    not_counted: dict[str, int] = field(default_factory=dict)
    """Sessions that were run again without using an attempt, by why (classify.Standing)."""

    def add(self, role: SessionType, result: SessionResult, outcome: Outcome) -> None:
        """A verified session: it counts for its role, and as a failure when it did not hold."""
        self.sessions_by_type[role.value] = self.sessions_by_type.get(role.value, 0) + 1
        self.failed_sessions += 0 if outcome.ok else 1
        self.spent(role, result)

    def uncounted(self, role: SessionType, result: SessionResult, why: str) -> None:
        """A session cut short by no fault of the agent: what it spent counts, the session does not."""
        self.not_counted[why] = self.not_counted.get(why, 0) + 1
        self.spent(role, result)

    def spent(self, role: SessionType, result: SessionResult) -> None:
        self.cost_usd += result.cost_usd
        self.input_tokens += result.input_tokens
        self.output_tokens += result.output_tokens
        if result.permission_denials:
            self.denials_by_role[role.value] = self.denials_by_role.get(role.value, 0) + len(result.permission_denials)

    @property
    def sessions(self) -> int:
        return sum(self.sessions_by_type.values())


@dataclass(frozen=True)
class RunReport:
    status: RunStatus
    state: SessionState
    stats: Stats
    message: str = ""
    sessions_this_run: int = 0


def print_summary(console: Console, report: RunReport) -> None:
    backlog, stats = report.state.backlog, report.stats
    table = Table(title="Run summary", show_header=False)
    table.add_row("features passing", f"{len(backlog.passing)}/{len(backlog.features)}")
    table.add_row("features blocked", ", ".join(sorted(backlog.blocked)) or "none")
    table.add_row("sessions", f"{stats.sessions} ({report.sessions_this_run} in this run)")
    for role, n in sorted(stats.sessions_by_type.items()):
        table.add_row(f"  {role}", str(n))
    table.add_row("failed / interrupted", f"{stats.failed_sessions} / {stats.interrupted_sessions}")
    denials = ", ".join(f"{role} {n}" for role, n in sorted(stats.denials_by_role.items()))
    table.add_row("tool calls denied", denials or "none")
    table.add_row("tokens in / out", f"{stats.input_tokens} / {stats.output_tokens}")
    table.add_row("total cost", f"${stats.cost_usd:.4f}")
    table.add_row("status", f"{report.status}: {report.message}")
    console.print(table)
    console.print(f"{len(backlog.passing)}/{len(backlog.features)} features passing, {stats.sessions} sessions")
