"""What a run adds up to: the one-screen summary at its end (figures folded from the event log)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rich.console import Console
from rich.table import Table

from session_scheduler.core.humane import money, number, plural
from session_scheduler.core.machine import SessionState
from session_scheduler.run import findings
from session_scheduler.store.events import COUNTED, CUT_BY, Totals, role_order

RunStatus = Literal["done", "limit", "halted"]


@dataclass(frozen=True)
class RunReport:
    status: RunStatus
    state: SessionState
    totals: Totals
    """The whole project's, from its event log."""
    run_totals: Totals
    """This invocation's."""
    message: str = ""
    sessions_this_run: int = 0


def _spent(totals: Totals, basis: str) -> str:
    tokens = f"{number(totals.spend.total_tokens)} tokens"
    if basis == "api":
        return f"{money(totals.cost_usd)}, {tokens}"
    return f"{tokens}, {money(totals.cost_usd)} (the CLI's estimate, not billed)"


def print_summary(console: Console, report: RunReport) -> None:
    backlog, totals, this = report.state.backlog, report.totals, report.run_totals
    basis = str((this.run_started or totals.run_started or {}).get("cost_basis", "api"))
    table = Table(title="Run summary", show_header=True)
    table.add_column("")
    table.add_column("this run")
    table.add_column("the project")
    table.add_row(
        "features passing", f"+{len(this.passing)}", f"{len(backlog.passing)}/{len(backlog.features)}"
    )
    table.add_row("features blocked", f"+{len(this.blocked)}", ", ".join(sorted(backlog.blocked)) or "none")
    table.add_row("sessions", number(this.sessions), number(totals.sessions))
    for role in sorted(set(totals.sessions_by_role) | set(this.sessions_by_role), key=role_order):
        table.add_row(
            f"  {role}",
            number(this.sessions_by_role.get(role, 0)),
            number(totals.sessions_by_role.get(role, 0)),
        )
    table.add_row("  of them failed", number(this.failed), number(totals.failed))
    not_counted = ", ".join(f"{why} {n}" for why, n in sorted(totals.not_counted.items())) or "none"
    this_not = ", ".join(f"{why} {n}" for why, n in sorted(this.not_counted.items())) or "none"
    table.add_row("cut short, done again", this_not, not_counted)
    denials = ", ".join(f"{role} {n}" for role, n in sorted(totals.denials_by_role.items())) or "none"
    this_denials = ", ".join(f"{role} {n}" for role, n in sorted(this.denials_by_role.items())) or "none"
    table.add_row("tool calls denied", this_denials, denials)
    table.add_row("spent", _spent(this, basis), _spent(totals, basis))
    console.print(table)
    for event in totals.cut:
        if event.get("run") != this.run:  # each cut is told once: by the run that recorded it
            continue
        cut = event["cut"]
        of = (
            "of this run"
            if cut.get("run") == this.run
            else f"of the earlier run {cut.get('run')}, not counted in this one"
        )
        then = (
            f"counted as {event['standing']}"
            if event["standing"] in COUNTED
            else "not counted: the session is done again from its start"
        )
        console.print(
            f"cut: session {event['session']} {event['role']} was {CUT_BY.get(str(cut.get('by')), cut.get('by'))} "
            f"({of}); {then}",
            markup=False,
        )
    project = Path(str((this.run_started or {}).get("project", ".")))
    for aside in findings.set_aside(project, this.set_aside):
        if aside.present:
            console.print(
                f"set aside: {aside.what} kept as {aside.ref} ({aside.message}); `{aside.show}` shows it, "
                f"`{aside.restore}` brings it back",
                markup=False,
            )
    console.print(f"status: {report.status}: {report.message}", markup=False)
    console.print(
        f"{len(backlog.passing)}/{len(backlog.features)} features passing, "
        f"{plural(totals.sessions, 'session')} in all ({number(this.sessions)} in this run)",
        markup=False,
    )
