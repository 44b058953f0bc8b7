"""The live console of a run: what a person watching sees, and a copy of it in the log folder.

Lines come in two ways: as text (`echo`, from the scheduler and the session runner) and as
events (`on_event`, from the event log), which give the session headers and keep the status
line current. On a terminal the status line stays at the bottom (rich `Live`); otherwise
every line is plain text and the status is printed after each session. With several lanes the
status is a few lines: the run's, one per lane (its role, feature, session and since when) and
the merge queue's waiting work, and each session header names its lane; one lane's console is
the one-session console it always was. A heartbeat line
says so when the agent has been quiet for a while. `--quiet` leaves out tool calls and API
retries; `--verbose` prints them uncut.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Literal

from rich.console import Console
from rich.live import Live
from rich.text import Text

from session_scheduler.core.humane import duration, money, number, plural
from session_scheduler.core.layout import CONSOLE_DIR, LOG_DIR
from session_scheduler.repo.merge_queue import Landing, Queue
from session_scheduler.store import events
from session_scheduler.store.events import Event, Totals, lane_of
from session_scheduler.store.records import Records

Verbosity = Literal["quiet", "normal", "verbose"]
HIGHLIGHTED = ("DENIED", "undo:", "WARNING", "blocked:", "set aside:")
"""Console lines a person watching should not miss."""
TOOL_LINE_WIDTH = 110
HEARTBEAT_S = 60.0


def is_tool_line(line: str) -> bool:
    """A tool call or an API retry line of the session runner: `  [ROLE] ...`."""
    return line.startswith("  [") and "] " in line[:20]


def cut(line: str, width: int) -> str:
    """The line, cut to `width` characters with an ellipsis where it was cut."""
    return line if len(line) <= width else line[: width - 1] + "…"


def status_line(totals: Totals, now: float) -> str:
    """features passing / blocked / total, sessions, elapsed, tokens and cost so far."""
    started = totals.run_started
    basis = (started or {}).get("cost_basis", "api")
    features = len(totals.features)
    parts = [
        f"features {len(totals.passing)}/{features} passing" if features else "features: not listed yet",
        f"{len(totals.blocked)} blocked",
        plural(totals.sessions, "session"),
    ]
    if started is not None:
        parts.append(f"{duration(now - float(started['ts']))} in this run")
    tokens = f"{number(totals.spend.total_tokens)} tokens"
    cost = money(totals.cost_usd)
    parts += [cost, tokens] if basis == "api" else [tokens, f"{cost} est."]
    return " · ".join(parts)


def lane_lines(totals: Totals, lanes: Iterable[int], waiting: list[Landing], now: float) -> list[str]:
    """With several lanes: one line per lane (its role, feature, session and since when, or idle),
    then the merge queue's waiting work (each feature and for how long) when something waits.
    Only the sessions of the run going on count (a killed run's session is not running)."""
    run = (totals.run_started or {}).get("run")
    flights = {lane: e for lane, e in totals.in_flight.items() if run is None or e.get("run") == run}
    lines = []
    for lane in sorted(set(lanes) | set(flights)):
        flight = flights.get(lane)
        if flight is None:
            lines.append(f"lane {lane}: idle")
            continue
        ts = float(flight["ts"])
        parts = [str(flight["role"]), str(flight.get("feature") or "-"), f"session {flight['session']}"]
        since = time.strftime("%H:%M:%S", time.localtime(ts))
        lines.append(f"lane {lane}: {' · '.join(parts)} · since {since} ({duration(max(now - ts, 0.0))})")
    if waiting:
        queued = ", ".join(
            f"{entry.feature} waiting {duration(max(now - entry.queued_at, 0.0))}" for entry in waiting
        )
        lines.append(f"queue: {queued}")
    return lines


COST_NOTE = {
    "api": "",
    "subscription": "Costs shown are Claude Code's estimate: a subscription login is not billed per token, so tokens come first.",
    "scripted": "Costs shown are Claude Code's estimate for the scripted model's made-up token counts, not money spent.",
}


class LiveConsole:
    """Prints a run for a person; `echo` and `on_event` are what the run is given."""

    def __init__(
        self,
        console: Console,
        *,
        verbosity: Verbosity = "normal",
        clock: Callable[[], float] = time.time,
        heartbeat_s: float = HEARTBEAT_S,
        queue: Callable[[], list[Landing]] | None = None,
    ) -> None:
        """`queue`: the merge queue's waiting work (by default, once the run has started, the
        project's queue as its records hold it)."""
        self.console = console
        self.verbosity = verbosity
        self.totals = Totals()
        self._clock = clock
        self._heartbeat_s = heartbeat_s
        self._copy: IO[str] | None = None
        self._early: list[str] = []
        self._last_activity = self._last_beat = clock()
        self._lock = threading.RLock()
        self._live: Live | None = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._lanes: set[int] = set()
        """The run's lanes (its run_started says how many; a session in a lane past the first
        says so too); empty while the run has one lane."""
        self._queue = queue

    # -- the two inputs ------------------------------------------------------------------------
    def echo(self, line: str) -> None:
        self._last_activity = self._clock()
        if is_tool_line(line):
            if self.verbosity == "quiet":
                self._keep(line)
                return
            if self.verbosity == "normal":
                line = cut(line, TOOL_LINE_WIDTH)
        flagged = line.lstrip().startswith(HIGHLIGHTED)
        self._print(line, "bold red" if flagged else None)

    def on_event(self, event: Event) -> None:
        self._last_activity = self._clock()
        with self._lock:
            self.totals.apply(event)
        kind = event["kind"]
        if kind == "session_started" and (self._lanes or lane_of(event) > 0):
            with self._lock:
                self._lanes |= {0, lane_of(event)}
        if kind == "run_started":
            if int(event.get("lanes") or 1) > 1:
                with self._lock:
                    self._lanes = set(range(int(event["lanes"])))
            if self._queue is None:
                self._queue = Queue(Records(Path(event["project"]))).pending
            self._open_copy(Path(event["project"]), event["run"])
            with self._lock:
                self.totals = Totals.of(events.read(events.log_path(Path(event["project"]))))
            note = COST_NOTE.get(str(event.get("cost_basis")), "")
            if note:
                self._print(note, "dim")
        elif kind == "session_started":
            self._print("")
            self._print(self._header(event), "bold")
        elif kind == "session_ended" and not self._live:  # not a terminal: the run's line, once a session
            self._print(f"  {self._status_lines()[0]}", "dim")  # (each lane's own lines say the rest)
        elif kind == "run_ended":
            self.close()

    # -- rendering -----------------------------------------------------------------------------
    def _header(self, event: Event) -> str:
        feature, features = event.get("feature"), self.totals.features
        where = ""
        if feature:
            place = (
                f" (feature {features.index(feature) + 1} of {len(features)})" if feature in features else ""
            )
            where = f" · {feature}{place}"
        branch = f" · {event['branch']}" if event.get("branch") else ""
        if not feature and str(event.get("branch") or "").startswith("arch/"):
            branch += f" (the fixes of architecture review {str(event['branch']).removeprefix('arch/')})"
        attempt = f" · attempt {event['attempt']}" if int(event.get("attempt") or 1) > 1 else ""
        clock = time.strftime("%H:%M:%S", time.localtime(float(event["ts"])))
        lane = f"[lane {lane_of(event)}] " if self._lanes else ""  # as the lanes' own lines are
        return f"{lane}=== Session {event['session']}: {event['role']} ({event['model']}){where}{branch}{attempt} · {clock} ==="

    def _print(self, line: str, style: str | None = None) -> None:
        with self._lock:
            # rich answers a closed pipe (`| head`) with SystemExit after silencing the console:
            # the run goes on, and the copy in the log folder keeps every line
            with contextlib.suppress(SystemExit):
                self.console.print(line, markup=False, highlight=False, style=style, soft_wrap=True)
            self._keep(line)

    def _keep(self, line: str) -> None:
        stamped = f"{time.strftime('%H:%M:%S')} {line}\n"
        if self._copy is None:
            self._early.append(stamped)
        else:
            self._copy.write(stamped)
            self._copy.flush()

    def _open_copy(self, project: Path, run: str) -> None:
        folder = project / LOG_DIR / CONSOLE_DIR
        folder.mkdir(parents=True, exist_ok=True)
        with self._lock:
            self._copy = (folder / f"run-{run}.log").open("a", encoding="utf-8")
            self._copy.writelines(self._early)
            self._early.clear()
        self.start()

    # -- the status line and the heartbeat -----------------------------------------------------
    def start(self) -> None:
        """Start the ticker (and, on a terminal, the status line at the bottom)."""
        if self._ticker is not None:
            return
        if self.console.is_terminal and self.verbosity != "quiet":
            self._live = Live(
                console=self.console, get_renderable=self._status, refresh_per_second=1, transient=True
            )
            self._live.start()
        self._ticker = threading.Thread(target=self._tick, daemon=True)
        self._ticker.start()

    def _status(self) -> Text:
        return Text("\n".join(self._status_lines()), style="reverse")

    def _status_lines(self) -> list[str]:
        """The run's status line; with several lanes, then a line per lane and the queue's."""
        now = self._clock()
        with self._lock:
            lines = [status_line(self.totals, now)]
            if self._lanes:
                lines += lane_lines(self.totals, self._lanes, self._waiting(), now)
        return lines

    def _waiting(self) -> list[Landing]:
        """The merge queue's waiting work; [] when it cannot be read (the status never stops a run)."""
        try:
            return self._queue() if self._queue is not None else []
        except Exception:
            return []

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            now = self._clock()
            with self._lock:
                running = bool(self.totals.in_flight)
                quiet_for = now - self._last_activity
                due = now - max(self._last_activity, self._last_beat) >= self._heartbeat_s
            if running and due:
                self._last_beat = now
                self._print(f"  … still working: nothing new from the agent for {duration(quiet_for)}", "dim")

    def close(self) -> None:
        self._stop.set()
        if self._live is not None:
            self._live.stop()
            self._live = None
        with self._lock:
            if self._copy is not None:
                self._copy.close()
                self._copy = None
