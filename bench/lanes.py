"""Verified features per hour with several lanes (issue 19, item 9), and how close they come to the ceiling.

The spec: the demo app's 16 features (scripted_model/demo_app.py) on the scripted model, with a
dependency DAG (four features on F001, the rest on those, one chain F001 -> F002 -> F009 -> F010)
and one conflicting pair (F012, F013: built side by side, whichever lands second conflicts in
README.md and goes back as FIX work). Every review verdict is PASS. The robot answers each model
turn after `--latency` seconds, so the model's time dominates a session as it does with a real
model; the default (2 s per turn, about 17 s per session) is a scaled-down real latency (real
sessions take minutes) so that the whole benchmark runs in about 22 minutes on two cores.

Runs the same spec with the one loop (run/lanes.py) at 1, 2, 4 and 8 lanes, all through the in-process robot (session_scheduler/testing/
inprocess.py: the robot's tool calls run for real, the model's time is a sleep), with
`test_command="bash init.sh"` run on every landing, and `sandbox=False` (the OS sandbox's `srt`
start per landing and per agent command is slow here, and is not what lanes change). Prints, per
lane count: wall time, verified features per hour, the speed-up over one lane, the ceiling on that
speed-up, sessions, redone sessions (failed or cut short and run again), the sessions beyond the
one-lane run's (a conflict's FIX and REVIEW), work sent back (conflicts), the merge queue's median
wait, and whether the same features passed with nothing merged twice; then where each lane's time
went (the model's sleep, the robot's tools, the lanes loop's steps timed from outside, idle).

The ceiling. With the one-lane run's session times (INITIALIZER alone, then per feature an
IMPLEMENT and a REVIEW; model time plus the scheduler's own time), L lanes cannot finish before
max(critical path, alone + rest / L), the critical path being the INITIALIZER plus the longest
dependency chain of IMPLEMENT + REVIEW, and `alone` the INITIALIZER plus the features every other
feature depends on (F001: 9% of the work here, so 3.5x at 4 lanes is out of reach by construction). `ideal` is what a scheduler with no overhead, no
merge queue and no conflicts reaches claiming features in list order (the first open feature whose
dependencies are merged; the lanes loop claims by the critical path now), with the same session
times.

    .venv/bin/python bench/lanes.py [--lanes 1,2,4,8] [--latency 2] [--save runs.pkl]
    .venv/bin/python bench/lanes.py --load runs.pkl [--lanes 1,4 --conflict F014,F015]  # more runs, same baseline
    .venv/bin/python bench/lanes.py --real-cli --features 6 --lanes 1,3 --latency 1     # through the real CLI
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import pickle
import platform
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from scripted_model.scenario import Scenario
from session_scheduler.core.clock import SystemClock
from session_scheduler.core.config import AgentConfig
from session_scheduler.guard import processes
from session_scheduler.repo import merge_queue
from session_scheduler.run import lanes as lanes_module
from session_scheduler.run.agent import SessionRequest, SessionResult
from session_scheduler.run.lanes import Lanes
from session_scheduler.run.plan import Planner
from session_scheduler.store import events
from session_scheduler.testing.hosts import run_command
from session_scheduler.testing.inprocess import InProcessRobotRunner

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "session_scheduler" / "prompts" / "app_spec.txt"
FEATURES = 16
DEPENDS: dict[str, list[str]] = {
    "F002": ["F001"],  # add
    "F003": ["F001"],  # list
    "F004": ["F001"],  # done
    "F005": ["F001"],  # remove
    "F006": ["F004"],  # stats: counts done items
    "F007": ["F003"],  # count
    "F008": ["F005"],  # clear
    "F009": ["F002"],  # rename
    "F010": ["F009"],  # undo: undoes a rename (the chain F001 -> F002 -> F009 -> F010)
    "F011": ["F003"],  # search
    "F012": ["F003"],  # first
    "F013": ["F003"],  # last
    "F014": ["F002"],  # priority
    "F015": ["F002"],  # tag
    "F016": ["F004"],  # export
}
DEPENDS.update(  # a larger spec's notes (scripted_model): each on a feature two or three steps from F001
    {f"F{n:03d}": [f"F{2 + (n - 17) % 14 if 2 + (n - 17) % 14 != 10 else 11:03d}"] for n in range(17, 129)}
)  # so the chain F001 -> F002 -> F009 -> F010 stays the longest (four features)
CONFLICTS = [["F012", "F013"]]
MORE_CONFLICTS = [["F012", "F013"], ["F040", "F041"]]
"""The conflicting pairs of a spec larger than the catalogue (`--features 64`)."""


def ids(count: int) -> list[str]:
    return [f"F{n:03d}" for n in range(1, count + 1)]


def depends(count: int) -> dict[str, list[str]]:
    """The dependencies among the first `count` features (all of them at 16)."""
    return {f: needs for f, needs in DEPENDS.items() if f in ids(count)}


def scenario_data(
    latency: float, count: int = FEATURES, conflicts: list[list[str]] = CONFLICTS
) -> dict[str, Any]:
    return {
        "description": f"bench/lanes.py: {count} features, a dependency DAG, conflicting pairs",
        "features": count,
        "depends": depends(count),
        "conflicts": [group for group in conflicts if set(group) <= set(ids(count))],
        "turn_latency_s": latency,
    }


def config(count: int = FEATURES) -> AgentConfig:
    return AgentConfig(
        architecture_interval=100, feature_count=count, test_command="bash init.sh", sandbox=False
    )


# -- measuring ---------------------------------------------------------------------------------


class ModelClock(SystemClock):
    """The system clock; it adds up, per thread, the time slept as the model's latency."""

    def __init__(self) -> None:
        super().__init__()
        self.slept: dict[int, float] = defaultdict(float)

    def sleep(self, seconds: float) -> None:
        started = time.monotonic()
        super().sleep(seconds)
        self.slept[threading.get_ident()] += time.monotonic() - started


@dataclass
class Call:
    number: int
    role: str
    feature: str | None
    thread: str
    start: float
    end: float
    model_s: float


class TimedRunner:
    """The in-process robot, each session's start, end and model time recorded."""

    def __init__(self, scenario: Scenario) -> None:
        self.clock = ModelClock()
        self.robot = InProcessRobotRunner(scenario, self.clock)
        self.calls: list[Call] = []
        self.lock = threading.Lock()

    async def run(self, request: SessionRequest) -> SessionResult:
        lane = threading.current_thread().name  # the lane's thread (MainThread with one lane)
        return await anyio.to_thread.run_sync(self._run, request, lane)

    def _run(self, request: SessionRequest, lane: str) -> SessionResult:
        name = threading.get_ident()  # anyio's worker threads of every lane share one name
        slept = self.clock.slept[name]
        start = time.monotonic()
        result = self.robot._run(request)
        end = time.monotonic()
        plan = request.plan
        work = plan.work
        call = Call(
            plan.number,
            plan.role.value,
            work.feature_id if work else None,
            lane,
            start,
            end,
            self.clock.slept[name] - slept,
        )
        with self.lock:
            self.calls.append(call)
        return result


@dataclass
class Phases:
    """Seconds spent per phase, per lane thread (the lanes loop's own steps, timed from outside)."""

    seconds: dict[str, dict[str, float]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(float))
    )
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, phase: str, seconds: float) -> None:
        name = threading.current_thread().name
        with self.lock:
            self.seconds[name][phase] += seconds


@contextmanager
def timed_phases(phases: Phases) -> Iterator[None]:
    """Wraps, for the run, the lanes loop's steps with timers (the module's names, not its code)."""
    names = {
        "clone sync": (Lanes, "_ready"),
        "verify": (lanes_module, "verify_session"),
        "capture": (lanes_module, "capture"),
        "plan": (Planner, "plan"),
        "outbox apply": (lanes_module, "apply"),
        "save state": (Lanes, "_save"),
        "stop leftovers": (processes, "stop_left_in"),
        "land (merge + tests)": (merge_queue, "land"),
    }
    saved: list[tuple[object, str, Callable[..., Any]]] = []

    def wrap(phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            try:
                return fn(*args, **kwargs)
            finally:
                phases.add(phase, time.monotonic() - started)

        return timed

    for phase, (owner, attr) in names.items():
        fn = getattr(owner, attr)
        saved.append((owner, attr, fn))
        setattr(owner, attr, wrap(phase, fn))
    try:
        yield
    finally:
        for owner, attr, fn in saved:
            setattr(owner, attr, fn)


class TimedCondition:
    """The lanes loop's lock, with the time each thread waits to take it added up (not `wait()`)."""

    def __init__(self, phases: Phases) -> None:
        self.inner = threading.Condition()
        self.phases = phases

    def __enter__(self) -> bool:
        started = time.monotonic()
        self.inner.acquire()
        self.phases.add("lock wait", time.monotonic() - started)
        return True

    def __exit__(self, *exc: object) -> None:
        self.inner.release()

    def acquire(self, *args: Any, **kwargs: Any) -> bool:
        started = time.monotonic()
        got = self.inner.acquire(*args, **kwargs)
        self.phases.add("lock wait", time.monotonic() - started)
        return got

    def release(self) -> None:
        self.inner.release()

    def wait(self, timeout: float | None = None) -> bool:
        return self.inner.wait(timeout)

    def notify_all(self) -> None:
        self.inner.notify_all()


# -- one run -----------------------------------------------------------------------------------


@dataclass
class Row:
    lanes: int
    wall_s: float
    passing: list[str]
    sessions: int
    redone: int
    """Sessions that ended failed or cut short and ran again."""
    sent_back: int
    """Landings or REVIEW merges sent back (a conflict or a red test): each costs a FIX and a REVIEW."""
    conflicts: int
    queue_wait_s: float
    land_s: float
    merged_once: bool
    calls: list[Call]
    phases: dict[str, dict[str, float]]
    started: float
    note: str = ""

    @property
    def per_hour(self) -> float:
        return len(self.passing) / self.wall_s * 3600


def one(lanes: int, latency: float, count: int = FEATURES, conflicts: list[list[str]] = CONFLICTS) -> Row:
    scenario = Scenario.from_json(scenario_data(latency, count, conflicts))
    with tempfile.TemporaryDirectory(prefix="bench-lanes-") as tmp:
        project = Path(tmp) / "app"
        project.mkdir()
        (project / "app_spec.txt").write_text(SPEC.read_text())
        runner = TimedRunner(scenario)
        phases = Phases()
        started = time.monotonic()
        loop = Lanes(project, config(count), runner, lanes, echo=lambda _: None)
        loop.lock = TimedCondition(phases)  # type: ignore[assignment]
        with timed_phases(phases):
            loop.run()
        wall = time.monotonic() - started
        log = events.read(events.log_path(project))
        merges = subprocess.run(
            ["git", "log", "--merges", "--first-parent", "--format=%s", "main"],
            cwd=project,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
        passing = sorted(
            f["id"]
            for f in json.loads((project / "feature_list.json").read_text())["features"]
            if f.get("passes")
        )
    verified = [e for e in log if e["kind"] == "merge_verified"]
    landed = [e["feature"] for e in verified]
    merged = [m.split()[1] for m in merges if m.startswith("Merge feature/")]
    back = [e for e in log if e["kind"] == "sent_back"]
    review_conflicts = [
        e for e in log if e["kind"] == "verdict" and e["verdict"] == "REQUEST_CHANGES"
    ]  # every verdict is PASS but for a REVIEW whose own merge onto main conflicts
    ended = [e for e in log if e["kind"] == "session_ended"]
    waits = [e["waited_s"] for e in verified + back if "waited_s" in e]
    lands = [e["land_s"] for e in verified + back if "land_s" in e]
    return Row(
        lanes=lanes,
        wall_s=wall,
        passing=passing,
        sessions=len(ended),
        redone=sum(1 for e in ended if e["standing"] != "verified"),
        sent_back=len(back) + len(review_conflicts),
        conflicts=sum(1 for e in back if e["why"] == "conflict") + len(review_conflicts),
        queue_wait_s=statistics.median(waits) if waits else 0.0,
        land_s=statistics.median(lands) if lands else 0.0,
        merged_once=sorted(landed) == sorted(set(landed)) == passing and len(merged) == len(set(merged)),
        calls=sorted(runner.calls, key=lambda c: c.start),
        phases={k: dict(v) for k, v in phases.seconds.items()},
        started=started,
    )


# -- the ceiling -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ceiling:
    critical_s: float
    work_s: float
    init_s: float
    prefix_s: float
    """What runs alone: the INITIALIZER and the features every other feature depends on (F001)."""
    durations: dict[str, float]
    """Feature -> seconds of its sessions in the one-lane run (each from its start to the next one's)."""

    def bound(self, lanes: int) -> float:
        """The shortest a run with this many lanes can take."""
        return max(self.critical_s, self.prefix_s + (self.work_s - self.prefix_s) / lanes)

    def ideal(self, lanes: int) -> float:
        """List scheduling with no overhead: each free lane claims the first open feature whose
        dependencies are merged and runs its IMPLEMENT and REVIEW; the merge is instant."""
        features = sorted(self.durations)
        passing: set[str] = set()
        held: set[str] = set()
        clock = self.init_s
        running: list[tuple[float, str]] = []
        free = lanes
        while len(passing) < len(features):
            while free:
                ready = [
                    f
                    for f in features
                    if f not in passing and f not in held and passing.issuperset(DEPENDS.get(f, ()))
                ]
                if not ready:
                    break
                f = ready[0]
                held.add(f)
                free -= 1
                heapq.heappush(running, (clock + self.durations[f], f))
            clock, f = heapq.heappop(running)
            passing.add(f)
            held.discard(f)
            free += 1
        return clock


def ceiling(base: Row) -> Ceiling:
    """Session durations of the one-lane run: from a session's start to the next one's (the
    scheduler's time between them counted with the session, the last one to the run's end)."""
    calls = base.calls
    ends = [c.start for c in calls[1:]] + [base.started + base.wall_s]
    durations: dict[str, float] = {}
    init = calls[0].start - base.started
    for call, end in zip(calls, ends, strict=True):
        if call.feature is None:  # the INITIALIZER (and an architecture review, none at this interval)
            init += end - call.start
        else:
            durations[call.feature] = durations.get(call.feature, 0.0) + end - call.start
    memo: dict[str, float] = {}

    def path(f: str) -> float:
        if f not in memo:
            memo[f] = durations[f] + max((path(d) for d in DEPENDS.get(f, ())), default=0.0)
        return memo[f]

    features = sorted(durations)
    alone = [f for f in features if all(f in ancestors(g) for g in features if g != f)]
    return Ceiling(
        critical_s=init + max(path(f) for f in features),
        work_s=init + sum(durations.values()),
        init_s=init,
        prefix_s=init + sum(durations[f] for f in alone),
        durations=durations,
    )


def ancestors(feature: str) -> set[str]:
    """The features `feature` depends on, directly or through others."""
    found: set[str] = set()
    todo = list(DEPENDS.get(feature, ()))
    while todo:
        f = todo.pop()
        if f not in found:
            found.add(f)
            todo.extend(DEPENDS.get(f, ()))
    return found


# -- where the time goes -----------------------------------------------------------------------


def breakdown(row: Row) -> dict[str, float]:
    """Seconds of lane time (lanes x wall) by what a lane was doing."""
    total = row.lanes * row.wall_s
    model = sum(c.model_s for c in row.calls)
    tools = sum(c.end - c.start - c.model_s for c in row.calls)
    out = {"model latency": model, "robot's tools (git, tests)": tools}
    lane_phases: dict[str, float] = defaultdict(float)
    for thread, phases in row.phases.items():
        if thread.startswith("lane-"):
            for phase, seconds in phases.items():
                lane_phases[phase] += seconds
    # capture and verify include the git they run; the clone sync is inside its lock
    for phase, seconds in sorted(lane_phases.items(), key=lambda kv: -kv[1]):
        out[f"scheduler: {phase}"] = seconds
    out["idle or other (waiting for a claimable feature, the queue, the rest)"] = total - sum(out.values())
    return out


# -- the real CLI ------------------------------------------------------------------------------


def real_cli(lanes: int, latency: float, count: int = FEATURES) -> Row:
    """The same spec through the real Claude Code CLI and the scripted model's server
    (`autonomous_agent_demo.py --offline-demo --lanes N --scenario FILE`)."""
    with tempfile.TemporaryDirectory(prefix="bench-lanes-cli-") as tmp:
        project = Path(tmp) / "app"
        scenario = Path(tmp) / "scenario.json"
        scenario.write_text(json.dumps(scenario_data(latency, count)))
        command = run_command(
            project,
            scenario,
            lanes,
            None,
            "--architecture-interval",
            "100",
            "--feature-count",
            str(count),
            "--test-command",
            "bash init.sh",
            "--quiet",  # with the OS sandbox, as a person runs it: without it the CLI's own caution refuses
            # commands a REVIEW's acceptance steps run (a path in $TMPDIR), in headless mode
        )
        started, epoch = time.monotonic(), time.time()
        proc = subprocess.run(command, cwd=tmp, capture_output=True, text=True, check=False)
        wall = time.monotonic() - started
        if proc.returncode != 0:
            raise SystemExit(
                f"{' '.join(command)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
            )
        log = events.read(events.log_path(project))
        passing = sorted(
            f["id"]
            for f in json.loads((project / "feature_list.json").read_text())["features"]
            if f.get("passes")
        )
        merges = subprocess.run(
            ["git", "log", "--merges", "--first-parent", "--format=%s", "main"],
            cwd=project,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
    verified = [e for e in log if e["kind"] == "merge_verified"]
    back = [e for e in log if e["kind"] == "sent_back"]
    review_conflicts = [e for e in log if e["kind"] == "verdict" and e["verdict"] == "REQUEST_CHANGES"]
    ended = [e for e in log if e["kind"] == "session_ended"]
    waits = [e["waited_s"] for e in verified + back if "waited_s" in e]
    landed = [e["feature"] for e in verified]
    merged = [m.split()[1] for m in merges if m.startswith("Merge feature/")]
    return Row(
        lanes=lanes,
        wall_s=wall,
        passing=passing,
        sessions=len(ended),
        redone=sum(1 for e in ended if e["standing"] != "verified"),
        sent_back=len(back) + len(review_conflicts),
        conflicts=sum(1 for e in back if e["why"] == "conflict") + len(review_conflicts),
        queue_wait_s=statistics.median(waits) if waits else 0.0,
        land_s=0.0,
        merged_once=sorted(landed) == sorted(set(landed)) == passing and len(merged) == len(set(merged)),
        calls=cli_calls(log, started - epoch),
        phases={},
        started=started,
    )


def cli_calls(log: list[dict[str, Any]], offset: float) -> list[Call]:
    """The sessions of a real CLI's run from its event log (times moved onto the monotonic clock;
    the model's share is not measured, so no breakdown is printed for these runs)."""
    started = {e["session"]: e for e in log if e["kind"] == "session_started"}
    calls = []
    for e in log:
        if e["kind"] == "session_ended" and e["session"] in started:
            begin = started[e["session"]]
            calls.append(
                Call(
                    e["session"],
                    e["role"],
                    begin.get("feature"),
                    f"lane-{begin.get('lane', 0)}",
                    begin["ts"] + offset,
                    e["ts"] + offset,
                    0.0,  # the CLI's turns are not the model's requests: not measured here
                )
            )
    return sorted(calls, key=lambda c: c.start)


# -- the table ---------------------------------------------------------------------------------


def machine() -> str:
    mem = next(
        (
            line.split()[1]
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        ),
        "0",
    )
    return (
        f"{os.cpu_count()} cores (nproc {shutil.which('nproc') and subprocess.check_output(['nproc'], text=True).strip()}), "
        f"{int(mem) / 2**20:.1f} GiB, {platform.system()} {platform.release()}, Python {platform.python_version()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--lanes", default=None, help="lane counts, comma-separated (default 1,2,4,8; 1,4 with --real-cli)"
    )
    parser.add_argument(
        "--latency",
        type=float,
        default=None,
        help="seconds the model takes per turn (default 2; 3 with --real-cli)",
    )
    parser.add_argument(
        "--real-cli", action="store_true", help="run through the real CLI and the scripted model's server"
    )
    parser.add_argument(
        "--features",
        type=int,
        default=FEATURES,
        help="the first N features with their dependencies: past 16, notes (a file each) on F002 to F016, "
        "and a second conflicting pair (F040, F041)",
    )
    parser.add_argument(
        "--conflict",
        default=None,
        help="the conflicting pair (default F012,F013, and F040,F041 past 40 features)",
    )
    parser.add_argument(
        "--save", type=Path, help="write each run's measurements to this file (pickle) as it ends"
    )
    parser.add_argument(
        "--load", type=Path, help="print the tables of runs saved with --save instead of running"
    )
    args = parser.parse_args()
    counts = [int(n) for n in (args.lanes or ("1,4" if args.real_cli else "1,2,4,8")).split(",")]
    latency = args.latency if args.latency is not None else (3.0 if args.real_cli else 2.0)
    if counts[0] != 1:
        raise SystemExit("--lanes: the first count is the baseline and must be 1")
    conflicts = (
        [args.conflict.split(",")]
        if args.conflict
        else MORE_CONFLICTS
        if args.features > FEATURES
        else CONFLICTS
    )
    print(f"machine: {machine()}")
    print(
        f"spec: {json.dumps({k: v for k, v in scenario_data(latency, args.features, conflicts).items() if k != 'description'})}; "
        f"{'the real CLI, sandboxed' if args.real_cli else 'the in-process robot, no sandbox'}; test command on every landing",
        flush=True,
    )
    rows: list[Row] = pickle.loads(args.load.read_bytes()) if args.load else []
    for n in counts[1:] if args.load and args.lanes else [] if args.load else counts:
        if args.real_cli:
            row = real_cli(n, latency, args.features)
        else:
            row = one(n, latency, args.features, conflicts)
        if conflicts not in (CONFLICTS, MORE_CONFLICTS):
            row.note = f"conflicting pair {'/'.join(conflicts[0])}"
        rows.append(row)
        print(f"  {n} lane{'s' if n > 1 else ''}: {row.wall_s:.1f} s, {row.sessions} sessions", flush=True)
        if args.save:
            args.save.write_bytes(pickle.dumps(rows))
    counts = [row.lanes for row in rows]
    base = rows[0]
    bound = ceiling(base) if base.calls else None
    print()
    print(
        "| lanes | wall (s) | verified features / hour | speed-up | ceiling (critical path, work / lanes) | ideal list schedule "
        "| sessions | redone | extra sessions vs 1 lane | sent back (conflicts) | queue median wait (s) "
        "| same features, merged once |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for row in rows:
        same = row.passing == base.passing and row.merged_once and len(row.passing) == len(ids(args.features))
        speed = row.per_hour / base.per_hour
        if bound is not None:
            ceil = f"{base.wall_s / bound.bound(row.lanes):.2f}x"
            ideal = f"{base.wall_s / bound.ideal(row.lanes):.2f}x"
        else:
            ceil = ideal = "-"
        print(
            f"| {row.lanes} | {row.wall_s:.1f} | {row.per_hour:.0f} | {speed:.2f}x | {ceil} | {ideal} | {row.sessions} | "
            f"{row.redone} ({row.redone / row.sessions:.0%}) | "
            f"{row.sessions - base.sessions} ({(row.sessions - base.sessions) / row.sessions:.1%}) | "
            f"{row.sent_back} ({row.conflicts}) | "
            f"{row.queue_wait_s:.2f} | {'yes' if same else 'NO'} |{f' {row.note}' if row.note else ''}"
        )
    if bound is None:
        return
    print()
    print(
        f"ceiling from the one-lane run: INITIALIZER {bound.init_s:.1f} s alone, all sessions {bound.work_s:.1f} s, "
        f"critical path {bound.critical_s:.1f} s (INITIALIZER + the longest dependency chain), "
        f"alone {bound.prefix_s:.1f} s = {bound.prefix_s / bound.work_s:.1%} (INITIALIZER + F001: every other feature needs "
        f"F001's store); the ceiling at L lanes is one-lane time / max(critical path, alone + rest / L)"
    )
    for lanes in counts:
        print(
            f"  {lanes} lanes: at least {bound.bound(lanes):.1f} s (speed-up at most {base.wall_s / bound.bound(lanes):.2f}x), "
            f"ideal list schedule {bound.ideal(lanes):.1f} s ({base.wall_s / bound.ideal(lanes):.2f}x)"
        )
    if not any(c.model_s for row in rows for c in row.calls):
        return  # real CLI runs: the model's share is not measured
    print()
    print("where each run's lane time went (seconds summed over lanes; % of lanes x wall):")
    print("| lanes | " + " | ".join(["what", "seconds", "%"]) + " |")
    print("|---:|---|---:|---:|")
    for row in rows:
        if not any(c.model_s for c in row.calls):
            continue  # a real CLI's run
        total = row.lanes * row.wall_s
        for what, seconds in breakdown(row).items():
            print(f"| {row.lanes} | {what} | {seconds:.1f} | {seconds / total:.0%} |")
        if row.lanes > 1:
            queue = row.phases.get("merge-queue", {})
            for what, seconds in queue.items():
                print(
                    f"| {row.lanes} | merge queue thread: {what} | {seconds:.1f} | {seconds / row.wall_s:.0%} of wall |"
                )
        for role in ("INITIALIZER", "IMPLEMENT", "REVIEW", "FIX"):
            mine = [c for c in row.calls if c.role == role]
            if mine:
                print(
                    f"| {row.lanes} | {role}: {len(mine)} sessions, mean model {statistics.mean(c.model_s for c in mine):.1f} s, "
                    f"mean tools {statistics.mean(c.end - c.start - c.model_s for c in mine):.2f} s | | |"
                )
        models = [c.model_s for c in row.calls]
        if models:
            per = statistics.mean(c.end - c.start - c.model_s for c in row.calls)
            print(
                f"| {row.lanes} | per session: model {statistics.mean(models):.1f} s, tools {per:.2f} s "
                f"(median session {statistics.median(c.end - c.start for c in row.calls):.1f} s) | | |"
            )


if __name__ == "__main__":
    main()
