"""The kill suite: the scheduler SIGKILLed at each crash point, then the same command again.

Each case runs the offline demo (the real CLI against the scripted model) with
`AGENT_CRASH_AT` set, once per kill in the case, then without it until the run ends. The
project must end exactly as a run that was never killed: the same features merged on `main`
in the same order, the same `passes`, valid hand-off and state files, one progress entry per
session, and nothing left half-written.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from scripted_model.hermetic import hermetic_env
from session_scheduler.core.layout import HANDOFF_FILES, STATE_FILE
from session_scheduler.guard import processes
from session_scheduler.guard.sandbox import private_tmp
from session_scheduler.store import crashpoints, events
from session_scheduler.store.progress import load_handoff
from session_scheduler.store.statefile import load

REPO = Path(__file__).resolve().parents[2]
SCENARIO = {
    "description": "kills: a fix round, a rejection, an undone merge, leftovers set aside",
    "features": 2,
    "reviews": {"F001": ["REQUEST_CHANGES", "PASS"], "F002": ["REJECT", "PASS"]},
    "faults": [
        {"session": 2, "kind": "commit_on_main"},
        {"session": 3, "kind": "invalid_json", "file": "reviews.json"},
    ],
}
CASES: dict[str, tuple[str, ...]] = {
    **{
        point: (point,)
        for point in crashpoints.POINTS
        if point not in ("recover_set_aside", "recover_restored", "waiting")
    },
    "cli_message#25": ("cli_message#25",),
    "atomic_write_tmp#9": ("atomic_write_tmp#9",),
    "state_saved#4": ("state_saved#4",),
    "event_half_written#9": ("event_half_written#9",),
    "recover_set_aside": ("cli_message#12", "recover_set_aside"),
    "recover_restored": ("cli_message#12", "recover_restored"),
    "twice in one session": ("cli_message#8", "cli_message#3"),
}
"""Each case: the kills, in order, one per run (`point#n`: the n-th time the point is reached)."""
REDUCED = (
    "cli_message#25",
    "verified",
    "undo_branches_reset",
    "state_saved#4",
    "atomic_write_tmp#9",
    "recover_restored",
    "event_half_written#9",
)
"""The cases CI runs (the bench runs them all)."""


@dataclass(frozen=True)
class Final:
    """What a finished project is, for comparison."""

    merges: tuple[str, ...]
    passes: tuple[tuple[str, bool], ...]

    @classmethod
    def of(cls, project: Path) -> Final:
        log = _git(project, "log", "--first-parent", "--format=%P|%s", "main").splitlines()
        merges = tuple(
            reversed([line.split("|", 1)[1] for line in log if len(line.split("|")[0].split()) == 2])
        )
        features = json.loads((project / "feature_list.json").read_text())["features"]
        return cls(merges, tuple((f["id"], bool(f["passes"])) for f in features))


def _git(project: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=project, capture_output=True, text=True, check=True).stdout


def _run(root: Path, project: Path, crash_at: str | None) -> subprocess.CompletedProcess[str]:
    env = hermetic_env("http://127.0.0.1:9", root / "product-home", max_retries=0)
    env["AGENT_GENERATIONS_DIR"] = str(root / "generations")
    if crash_at:
        env[crashpoints.ENV] = crash_at
    scenario = root / "scenario.json"
    scenario.write_text(json.dumps(SCENARIO))
    command = [
        sys.executable,
        str(REPO / "autonomous_agent_demo.py"),
        "--project-dir",
        str(project),
        "--offline-demo",
        "--scenario",
        str(scenario),
    ]
    return subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False
    )


def reference(root: Path) -> Final:
    """The project as a run that is never killed leaves it."""
    project = root / "reference"
    proc = _run(root, project, None)
    if proc.returncode != 0:
        raise RuntimeError(
            f"the reference run failed ({proc.returncode}): {proc.stdout[-2000:]}{proc.stderr[-1000:]}"
        )
    return Final.of(project)


def run_case(root: Path, name: str, expected: Final) -> list[str]:
    """Kill the scheduler as the case says, resume until done; what went wrong (empty: nothing)."""
    project = root / name.replace("#", "-").replace(" ", "-")
    problems = []
    for kill in CASES[name]:
        proc = _run(root, project, kill)
        if proc.returncode != -9:
            problems.append(f"{kill}: the run was not killed there (exit {proc.returncode})")
    proc = _run(root, project, None)
    if proc.returncode != 0:
        return [*problems, f"the resumed run failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}"]
    return problems + check_project(project, expected)


def check_project(project: Path, expected: Final) -> list[str]:
    problems = []
    final = Final.of(project)
    if final != expected:
        problems.append(f"ended as {final}, not as the uninterrupted run {expected}")
    try:
        handoff = load_handoff(project)  # every hand-off file parses and validates
        saved = load(project)
    except Exception as exc:  # any failure to read back is what this suite looks for
        return [*problems, f"a file does not read back: {exc}"]
    if saved is None or saved.in_flight:
        problems.append("the state file is missing or still has a session in flight")
    ids = [entry["session_id"] for entry in (handoff.progress or {}).get("sessions", [])]
    if len(ids) != len(set(ids)) or ids != sorted(ids):
        problems.append(f"progress.json session entries are duplicated or out of order: {ids}")
    leftovers = [p.name for p in project.iterdir() if p.name.endswith(".tmp")]
    if leftovers:
        problems.append(f"half-written files were left: {leftovers}")
    missing = [name for name in (*HANDOFF_FILES, STATE_FILE) if not (project / name).is_file()]
    if missing:
        problems.append(f"missing: {missing}")
    orphans = processes.with_tmpdir(private_tmp(project))
    if orphans:
        problems.append(f"processes of the killed run's sessions are still running (pids {orphans})")
    return problems + check_event_log(project, saved.state.session_count if saved else 0)


def check_event_log(project: Path, sessions: int) -> list[str]:
    """Every session that started also ended in the event log (a killed one as interrupted, on
    resume), and the log counts each verified session once."""
    log = events.read(events.log_path(project))
    starts = Counter(e["session"] for e in log if e["kind"] == "session_started")
    ends = Counter(e["session"] for e in log if e["kind"] == "session_ended")
    problems = [
        f"session {n} started {starts[n]} time(s) but ended {ends[n]} time(s)"
        for n in sorted(starts)
        if starts[n] != ends[n]
    ]
    counted = events.Totals.of(log).sessions
    if counted != sessions:
        problems.append(f"the event log counts {counted} sessions, the state {sessions}")
    started = {(e["session"], e["run"]): float(e["ts"]) for e in log if e["kind"] == "session_started"}
    for end in (e for e in log if e["kind"] == "session_ended" and (e.get("cut") or {}).get("by") == "kill"):
        cut, at = end["cut"], started.get((end["session"], end["cut"].get("run")))
        if at is None or not at <= cut["last_activity"] <= end["ts"] or cut["run"] == end["run"]:
            problems.append(
                f"session {end['session']}'s kill is not told as of the killed run, ending at its last activity: {end}"
            )
        if not end["receipt"].get("cost_estimated"):
            problems.append(f"session {end['session']}'s kill has no cost estimate: {end['receipt']}")
    runs = Counter(e["kind"] for e in log if e["kind"] in ("run_started", "run_ended"))
    if runs["run_ended"] < 1:
        problems.append("no run ended in the event log")
    return problems
