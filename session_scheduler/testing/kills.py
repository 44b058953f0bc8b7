"""The kill suite: the scheduler SIGKILLed at each crash point, then the same command again,
with one lane and with three (the one loop runs both).

Each case runs the offline demo (the real CLI against the scripted model) with
`AGENT_CRASH_AT` set, once per kill in the case, then without it until the run ends. With one
lane the project must end exactly as a run that was never killed: the same features merged on
`main` in the same order, the same `passes`; with three, every feature merged once and passing;
and always valid hand-off and state files, one progress entry per session, every session that
started ended, nothing left half-written or running.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripted_model.hermetic import hermetic_env
from session_scheduler.core.layout import HANDOFF_FILES, LOG_DIR, STATE_FILE
from session_scheduler.guard import processes
from session_scheduler.guard.sandbox import private_tmp
from session_scheduler.repo import workdirs
from session_scheduler.store import crashpoints, events
from session_scheduler.store.progress import load_handoff
from session_scheduler.store.statefile import load
from session_scheduler.testing.hosts import run_command

REPO = Path(__file__).resolve().parents[2]
SCENARIO = {
    "description": "kills: a fix round, a rejection, an undone session, leftovers set aside",
    "features": 2,
    "reviews": {"F001": ["REQUEST_CHANGES", "PASS"], "F002": ["REJECT", "PASS"]},
    "faults": [
        {"session": 2, "kind": "hidden_branch"},
        {"session": 3, "kind": "commit_on_main"},
    ],
}
"""Session 2 makes a branch that is not its own (verification undoes it), session 3 leaves an
edit of main uncommitted (set aside before the next session); F001 is sent back once, F002
rejected once."""
AFTER_A_KILL = ("recover_set_aside", "recover_restored")
"""Points only a run resuming a killed one reaches: each case kills the run first."""
UNREACHED = ("waiting", "stashed")
"""Points the kill scenarios do not reach: a usage limit's wait (bench/reliability.py's night),
a stash of the person's uncommitted work (an existing repository's, when a run opens it)."""
CASES: dict[str, tuple[str, ...]] = {
    **{point: (point,) for point in crashpoints.POINTS if point not in (*AFTER_A_KILL, *UNREACHED)},
    "cli_message#25": ("cli_message#25",),
    "atomic_write_tmp#9": ("atomic_write_tmp#9",),
    "state_saved#4": ("state_saved#4",),
    "event_half_written#9": ("event_half_written#9",),
    "recover_set_aside": ("cli_message#12", "recover_set_aside"),
    "recover_restored": ("transitioned", "recover_restored"),
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
    command = run_command(project, scenario, None, None)
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
    orphans = _orphans(project, 0)
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


# -- the lanes' kill suite ----------------------------------------------------------------------
LANES = 3
LANES_SCENARIO = {
    "description": "lane kills: F001, then three features side by side, two of them conflicting",
    "features": 4,
    "depends": {"F002": ["F001"], "F003": ["F001"], "F004": ["F001"]},
    "conflicts": [["F003", "F004"]],
}
"""F001 first (the others use its store), then F002..F004 in three lanes at once; F003 and F004
edit the same README line, so the second to land is sent back and fixed."""
NAMED_LANE_CASES: dict[str, tuple[str, ...]] = {
    "lanes cli_message#110": ("cli_message#110",),
    "lanes cli_message#170": ("cli_message#170",),
    "lanes state_saved#6": ("state_saved#6",),
    "lanes state_saved#14": ("state_saved#14",),
    "lanes atomic_write_tmp#40": ("atomic_write_tmp#40",),
    "lanes atomic_write_tmp#90": ("atomic_write_tmp#90",),
    "lanes event_half_written#14": ("event_half_written#14",),
    "lanes event_half_written#22": ("event_half_written#22",),
    "lanes event_half_written#28": ("event_half_written#28",),
    "lanes queue_landed#1": ("queue_landed#1",),
    "lanes queue_landed#2": ("queue_landed#2",),
    "lanes repo_opened": ("repo_opened",),
    "lanes twice": ("cli_message#110", "queue_landed#1"),
}
"""Each lanes case: the kills in order, one per run (`point#n`: the n-th time in that run)."""
LANES_EVERY_SCENARIO = {
    **LANES_SCENARIO,
    "description": "lane kills at every point: LANES_SCENARIO with an undone session and a rejection",
    "reviews": {"F002": ["REJECT", "PASS"]},
    "faults": [{"session": 2, "kind": "hidden_branch"}],
}
EVERY_POINT: dict[str, tuple[str, ...]] = {
    **{
        f"lanes {point}": (point,) for point in crashpoints.POINTS if point not in (*AFTER_A_KILL, *UNREACHED)
    },
    "lanes recover_set_aside": ("cli_message#60", "recover_set_aside"),
    "lanes recover_restored": ("transitioned#3", "recover_restored"),
}
"""Every crash point with three lanes too, on LANES_EVERY_SCENARIO (bench/reliability.py runs them)."""
LANE_CASES: dict[str, tuple[str, ...]] = {**NAMED_LANE_CASES, **EVERY_POINT}
LANES_REDUCED = ("lanes cli_message#110", "lanes queue_landed#1", "lanes event_half_written#14")
"""The lanes cases CI runs. `event_half_written#14` is the first `session_ended` after the three
IMPLEMENTs started together (the events before it do not depend on timing): a kill there, after
the session's outbox was applied and its branch brought back but before the state says it
ended, must undo what was applied before the session runs again (run/lanes.py `_resume`)."""
LANES_KNOWN: dict[str, str] = {}
"""Cases that fail because of a known bug (the test marks them expected to fail)."""
SEVERAL_IN_FLIGHT = ("lanes cli_message#110", "lanes cli_message#170", "lanes twice")
"""Cases whose first kill must find two or more sessions in flight (checked in the saved state)."""


def _run_lanes(
    root: Path, project: Path, crash_at: str | None, data: dict[str, Any] = LANES_SCENARIO
) -> subprocess.CompletedProcess[str]:
    env = hermetic_env("http://127.0.0.1:9", root / "product-home", max_retries=0)
    env["AGENT_GENERATIONS_DIR"] = str(root / "generations")
    scenario = root / f"{project.name}-scenario.json"
    scenario.write_text(json.dumps(data))
    launcher = [str(REPO / "autonomous_agent_demo.py")]
    if crash_at:
        env[crashpoints.ENV] = crash_at
    args = ["--project-dir", str(project), "--offline-demo", "--scenario", str(scenario)]
    if not project.exists():  # the first run says how many lanes; the others go on with the saved count
        args += ["--lanes", str(LANES)]
    return subprocess.run(
        [sys.executable, *launcher, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def run_lanes_case(root: Path, name: str) -> list[str]:
    """Kill the lanes' scheduler as the case says, resume until done; what went wrong."""
    project = root / name.replace("#", "-").replace(" ", "-")
    data = LANES_EVERY_SCENARIO if name in EVERY_POINT else LANES_SCENARIO
    problems = []
    for i, kill in enumerate(LANE_CASES[name]):
        proc = _run_lanes(root, project, kill, data)
        if proc.returncode != -9:
            problems.append(
                f"{kill}: the run was not killed there (exit {proc.returncode}): {proc.stderr.strip()[-500:]}"
            )
            continue
        problems += _check_killed(project, kill, several=i == 0 and name in SEVERAL_IN_FLIGHT)
    proc = _run_lanes(root, project, None, data)
    if proc.returncode != 0:
        return [
            *problems,
            f"the resumed run failed (exit {proc.returncode}): {proc.stdout.strip()[-1500:]}"
            f"{proc.stderr.strip()[-1500:]}",
        ]
    return problems + check_lanes_project(project)


def lane_tmp_dirs(project: Path) -> list[Path]:
    """The private temp folders of the project's sessions: each lane clone's (and the project's own)."""
    return [private_tmp(project), *(private_tmp(workdirs.path_of(project, n)) for n in range(LANES))]


def _orphans(project: Path, wait_s: float = 5.0, *, bridges: bool = True) -> list[int]:
    """The processes the project's sessions left running (given `wait_s` to die with their run).
    `bridges=False`: not counting the CLI sandbox's `socat` bridges, which outlive a killed run by
    design (guard/processes.py: the next run stops them; the check after it counts them)."""
    deadline = time.monotonic() + wait_s
    while True:
        left = [
            pid
            for tmp in lane_tmp_dirs(project)
            for pid in processes.with_tmpdir(tmp)
            if bridges or not _is_bridge(pid)
        ]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _is_bridge(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0] == b"socat"
    except OSError:
        return False


def _check_killed(project: Path, kill: str, *, several: bool) -> list[str]:
    """What a killed run must have left: a state file that reads back, no feature held by two
    lanes, no session's process alive."""
    problems = []
    try:
        saved = load(project)
    except Exception as exc:  # a state file that does not read back is what this suite looks for
        return [f"{kill}: the state file does not read back after the kill: {exc}"]
    if saved is not None:
        held = [lane.work.feature_id for lane in saved.schedule.lanes if lane.work and lane.work.feature_id]
        if len(held) != len(set(held)):
            problems.append(f"{kill}: two lanes hold the same feature in the saved state: {held}")
        if several and len(saved.in_flight) < 2:
            problems.append(
                f"{kill}: only {len(saved.in_flight)} session(s) in flight at the kill (the case wants several)"
            )
    elif several:
        problems.append(f"{kill}: killed before any state was saved")
    orphans = _orphans(project, bridges=False)
    if orphans:
        problems.append(f"{kill}: the killed run's sessions are still running (pids {orphans})")
    return problems


def check_lanes_project(project: Path) -> list[str]:
    """A lanes project after its run ended: every feature passes, each merged once on `main`,
    the files read back, one progress entry per session, nothing left running or half-written,
    no feature held by two lanes at once, every cut session run again."""
    problems = []
    features = json.loads((project / "feature_list.json").read_text())["features"]
    ids = [f["id"] for f in features]
    if len(ids) != LANES_SCENARIO["features"] or not all(f["passes"] for f in features):
        problems.append(f"not every feature passes: {[(f['id'], f['passes']) for f in features]}")
    subjects = _git(project, "log", "--merges", "--first-parent", "--format=%s", "main").splitlines()
    merged = Counter(
        s.split()[1].removeprefix("feature/") for s in subjects if s.startswith("Merge feature/")
    )
    if merged != Counter(ids):
        problems.append(f"main's merges are not each feature once: {dict(merged)}")
    try:
        handoff = load_handoff(project)  # every hand-off file parses and validates
        saved = load(project)
    except Exception as exc:  # any failure to read back is what this suite looks for
        return [*problems, f"a file does not read back: {exc}"]
    if saved is None or saved.in_flight:
        problems.append("the state file is missing or still has a session in flight")
    elif sorted(saved.state.backlog.passing) != sorted(ids):
        problems.append(f"the state's passing features are {saved.state.backlog.passing}")
    entries = [entry["session_id"] for entry in (handoff.progress or {}).get("sessions", [])]
    if len(entries) != len(set(entries)):
        problems.append(f"progress.json has a session's entry twice: {entries}")
    leftovers = [
        p.name for folder in (project, project / LOG_DIR) for p in folder.iterdir() if p.name.endswith(".tmp")
    ]
    if leftovers:
        problems.append(f"half-written files were left: {leftovers}")
    missing = [name for name in (*HANDOFF_FILES, STATE_FILE) if not (project / name).is_file()]
    if missing:
        problems.append(f"missing: {missing}")
    orphans = _orphans(project, 0)
    if orphans:
        problems.append(f"processes of the run's sessions are still running (pids {orphans})")
    log = events.read(events.log_path(project))
    return problems + check_lanes_log(log, entries)


def _standing_verified(log: list[dict[str, Any]]) -> list[int]:
    """The sessions whose verified end stands: an end the next run undid (a kill between the
    end's event and the state's save: `undo` before the session runs again) does not."""
    standing: list[int] = []
    voidable: set[int] = set()  # verified ends no session start has followed yet
    for event in log:
        kind, number = event["kind"], int(event.get("session") or 0)
        if kind == "session_ended" and event["standing"] == "verified":
            standing.append(number)
            voidable.add(number)
        elif kind == "session_started":
            voidable.discard(number)
        elif kind == "undo" and number in voidable:
            standing.remove(number)
            voidable.discard(number)
    return standing


def check_lanes_log(log: list[dict[str, Any]], entries: list[int]) -> list[str]:
    """The lanes' event log: every session that started ended, sessions numbered once each
    (a rerun keeps its number), no feature held by two lanes at once, every session a killed
    run left in flight resumed and run again."""
    starts = [e for e in log if e["kind"] == "session_started"]
    ends = [e for e in log if e["kind"] == "session_ended"]
    started, ended = Counter(e["session"] for e in starts), Counter(e["session"] for e in ends)
    problems = [
        f"session {n} started {started[n]} time(s) but ended {ended[n]} time(s)"
        for n in sorted(started)
        if started[n] != ended[n]
    ]
    verified = sorted(_standing_verified(log))
    if len(verified) != len(set(verified)):
        problems.append(f"a session number was verified twice: {verified}")
    if sorted(entries) != [n for n in verified if n in set(entries)]:
        problems.append(f"progress entries {sorted(entries)} are not of verified sessions {verified}")
    # each session's hold on its feature: from its start to its end (a killed one's: its last activity)
    end_of = {}
    for end in ends:
        cut = end.get("cut") or {}
        key = (end["session"], cut.get("run", end["run"]))
        end_of[key] = float(cut["last_activity"]) if cut.get("by") == "kill" else float(end["ts"])
    holds = []
    for start in starts:
        until = end_of.get((start["session"], start["run"]))
        if until is None:
            problems.append(f"session {start['session']} of run {start['run']} has no end told as of its run")
            continue
        if start.get("feature"):
            holds.append((start["feature"], start["lane"], float(start["ts"]), until, start["session"]))
    for i, (feature, lane, begin, until, number) in enumerate(holds):
        for other, lane2, begin2, until2, number2 in holds[i + 1 :]:
            if other == feature and lane != lane2 and begin < until2 and begin2 < until:
                problems.append(
                    f"{feature} was held by lanes {lane} (session {number}) and {lane2} (session {number2}) at once"
                )
    runs = [e["run"] for e in log if e["kind"] == "run_started"]
    finished = {e["run"] for e in log if e["kind"] == "run_ended"}
    for killed in (run for run in runs if run not in finished):
        later = runs[runs.index(killed) + 1 :]
        cut = sorted(
            e["session"]
            for e in ends
            if (e.get("cut") or {}).get("run") == killed and (e.get("cut") or {}).get("by") == "kill"
        )
        in_flight = sorted(
            s["session"]
            for s in starts
            if s["run"] == killed
            and (s["session"], killed) in end_of
            and not any(e["session"] == s["session"] and e["run"] == killed for e in ends)
        )
        if cut != in_flight:
            problems.append(f"run {killed} was killed with sessions {in_flight} in flight, told cut: {cut}")
        for number in in_flight:
            resumed = [
                e for e in log if e["kind"] == "resumed" and e["session"] == number and e["run"] in later
            ]
            again = [s for s in starts if s["session"] == number and s["run"] in later]
            if len(resumed) != 1 or not again:
                problems.append(
                    f"session {number}, cut by the kill of run {killed}, was resumed {len(resumed)} time(s) "
                    f"and started again {len(again)} time(s)"
                )
    if not finished:
        problems.append("no run ended in the event log")
    return problems


def main(argv: list[str]) -> int:
    """`python -m session_scheduler.testing.kills ROOT [CASE ...]`: run the lanes' cases (all of
    them by default) under ROOT, one after another; print each one's problems; exit 1 if any."""
    import tempfile

    root = Path(argv[0]) if argv else Path(tempfile.mkdtemp(prefix="lane-kills-"))
    failed = 0
    for name in argv[1:] or list(LANE_CASES):
        began = time.monotonic()
        problems = run_lanes_case(root, name)
        known = " (known: " + LANES_KNOWN[name] + ")" if name in LANES_KNOWN and problems else ""
        print(f"{name}: {time.monotonic() - began:.0f} s, {problems or 'ok'}{known}", flush=True)
        failed += bool(problems) and not known
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
