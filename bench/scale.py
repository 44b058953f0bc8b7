"""Scale: is the scheduler correct and cheap at any size? (10 to 10,000 features)

    .venv/bin/python bench/scale.py [--sizes 10,100,1000,10000] [--sessions 20]
    .venv/bin/python bench/scale.py --sizes 1000 --sessions 6 --profile 25

For each size N it builds a project directly (no sessions run): N features, 10N past
session entries in progress.json with their reviews and fixes, `main` holding only the
scheduler's setup commit, a packed branch per merged feature, and a `.agent_state.json` whose lane is IMPLEMENT on the first
open feature. Built projects are cached per size under the temp folder; each measurement
runs on a fresh copy. It then runs the one loop with one lane, `Lanes(...).run(max_iterations=K)`, with a trivial
runner that does, instantly, the least a real agent does for its role, and prints:

1. the scheduler's overhead per session: the wall time between the end of one agent
   session and the start of the next (the post-session work of one plus the pre-session
   work of the next), the runner's own time excluded; the first session's start-up and
   the last one's wind-down count together as one more sample;
2. the bytes an agent must read: its prompt (system prompt + kick-off) plus the files its
   role's prompt tells it to read (`SessionPlan.reads`), as they are when the session starts;
3. the bytes each session adds under `.agent_logs/`.

Then the growth ratios the goals are stated in, each with PASS/FAIL.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import inspect
import io
import json
import math
import os
import pstats
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from session_scheduler.core import machine
from session_scheduler.core.config import AgentConfig, SessionType
from session_scheduler.core.layout import LOG_DIR
from session_scheduler.guard.sandbox import lane_project
from session_scheduler.repo import gitops, workdirs
from session_scheduler.run.agent import SessionRequest, SessionResult, tools_of
from session_scheduler.run.lanes import Lanes
from session_scheduler.store import statefile
from session_scheduler.store.handoff_tools import HandoffTools

ROOT = Path(__file__).resolve().parents[1]

SIZES = (10, 100, 1_000, 10_000)
SESSIONS_PER_FEATURE = 10
"""Past sessions per feature: 10,000 features come with 100,000 past sessions."""
OPEN_FEATURES = 10
"""Features left open (passes false) so there is work to measure; at most half the list."""
BUILD_VERSION = "2"
"""Bump when the generated project changes (the cache key includes it)."""
KB = 1000


GOALS = (
    # (label, metric, larger size, smaller size, largest ratio allowed)
    ("overhead median", "overhead_median_ms", 10_000, 100, 2.0),
    ("bytes to read, IMPLEMENT", "read_implement", 10_000, 10, 1.2),
    ("bytes to read, REVIEW", "read_review", 10_000, 10, 1.2),
    ("log bytes per session", "log_per_session", 10_000, 10, 2.0),
)
OVERHEAD_CEILING_MS = 50.0
"""The goal's absolute bound: median overhead at 10,000 features."""


# -- building a project of size N ---------------------------------------------------------------

VOCABULARY = (
    "task list entry title due date filter sort export import archive label priority note "
    "reminder search undo redo history storage file lock backup restore command option error "
    "message output format json csv column width colour summary report count overdue today "
    "week month recurring tag project owner share sync conflict merge validation"
)
WORDS = tuple(VOCABULARY.split())


def feature_id(number: int) -> str:
    return f"F{number:05d}"


def words(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def fake_sha(rng: random.Random) -> str:
    return f"{rng.getrandbits(160):040x}"


def make_feature(rng: random.Random, number: int, passes: bool) -> dict[str, Any]:
    """One feature of about 400 bytes as written with indent=2."""
    return {
        "id": feature_id(number),
        "category": rng.choice(("functional", "functional", "storage", "cli", "quality")),
        "description": f"The user can {words(rng, 7, 10)}, and the app reports {words(rng, 2, 3)}",
        "steps": [f"Step {i + 1}: {words(rng, 4, 7)}" for i in range(rng.randint(3, 4))],
        "passes": passes,
    }


# One passing feature's history: rejected once, then accepted after a fix round.
FEATURE_HISTORY = (
    ("IMPLEMENT", None),
    ("REVIEW", "REQUEST_CHANGES"),
    ("FIX", None),
    ("REVIEW", "REQUEST_CHANGES"),
    ("FIX", None),
    ("REVIEW", "REJECT"),
    ("IMPLEMENT", None),
    ("REVIEW", "REQUEST_CHANGES"),
    ("FIX", None),
    ("REVIEW", "PASS"),
)
OUTCOMES = {
    "IMPLEMENT": "READY_FOR_REVIEW",
    "REVIEW": "REVIEWED",
    "FIX": "FIXED",
    "ARCHITECTURE": "ARCHITECTURE_REVIEWED",
}


@dataclass
class History:
    """progress.json's sessions and reviews.json's reviews and fixes, appended in order."""

    rng: random.Random
    sessions: list[dict[str, Any]] = field(default_factory=list)
    reviews: list[dict[str, Any]] = field(default_factory=list)
    fixes: list[dict[str, Any]] = field(default_factory=list)

    def session(self, role: str, fid: str | None, verdict: str | None) -> None:
        rng = self.rng
        entry: dict[str, Any] = {
            "session_id": len(self.sessions) + 1,
            "agent_type": role,
            "features_touched": [fid] if fid else [],
            "outcome": OUTCOMES[role],
            "commit_range": {"from": fake_sha(rng), "to": fake_sha(rng)},
            "notes": f"{words(rng, 12, 18)}.",
        }
        if verdict is not None:
            review = {
                "review_id": len(self.reviews) + 1,
                "feature_id": fid,
                "kind": "feature" if fid else "architecture",
                "verdict": verdict,
                "issues": {
                    "critical": [f"src/{rng.choice(WORDS)}.py: {words(rng, 6, 10)}"]
                    if verdict == "REJECT"
                    else [],
                    "major": [f"src/{rng.choice(WORDS)}.py: {words(rng, 6, 10)}"]
                    if verdict != "PASS"
                    else [],
                    "minor": [f"tests/test_{rng.choice(WORDS)}.py: {words(rng, 4, 8)}"],
                },
            }
            self.reviews.append(review)
            entry.update(verdict=verdict, review_id=review["review_id"])
        if role == "FIX":
            open_review = self.reviews[-1]
            self.fixes.append(
                {
                    "fix_id": len(self.fixes) + 1,
                    "review_id": open_review["review_id"],
                    "issues_fixed": [
                        i for level in ("critical", "major", "minor") for i in open_review["issues"][level]
                    ],
                }
            )
        self.sessions.append(entry)


def open_count(n: int) -> int:
    return min(OPEN_FEATURES, n // 2)


def generate(n: int) -> tuple[list[dict[str, Any]], History]:
    """N features (all but the last `open_count(n)` passing) and 10N past sessions: ten per
    passing feature (FEATURE_HISTORY), the rest architecture reviews spread evenly."""
    rng = random.Random(n)
    passing = n - open_count(n)
    features = [make_feature(rng, i, i <= passing) for i in range(1, n + 1)]
    history = History(rng)
    architecture = SESSIONS_PER_FEATURE * n - len(FEATURE_HISTORY) * passing
    done = 0
    for k in range(passing):
        fid = feature_id(k + 1)
        for role, verdict in FEATURE_HISTORY:
            history.session(role, fid, verdict)
        while done < architecture * (k + 1) // passing:
            history.session("ARCHITECTURE", None, "PASS")
            done += 1
    assert len(history.sessions) == SESSIONS_PER_FEATURE * n
    return features, history


def write_json(path: Path, data: Any) -> None:
    """As the scheduler and agents write the hand-off files (indent=2)."""
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def save_state(project: Path, state: machine.SessionState) -> None:
    """statefile.save, whichever of its running totals (`stats`, `in_progress`) it still takes."""
    params = inspect.signature(statefile.save).parameters
    extra = {
        name: value
        for name, value in (("stats", {}), ("in_progress", None), ("in_flight", {}))
        if name in params
    }
    statefile.save(project, state, **extra)


def pack_merged_branches(project: Path, merged: list[str]) -> None:
    """A branch per merged feature, packed into `.git/packed-refs` as `git gc` leaves them (the
    scheduler keeps merged branches; a long project has thousands)."""
    main = git(project, "rev-parse", "main")
    lines = [f"{main} refs/heads/feature/{fid}" for fid in merged]
    (project / ".git" / "packed-refs").write_text(
        "# pack-refs with: peeled fully-peeled sorted \n"
        + "\n".join(sorted(lines, key=lambda line: line.split(" ")[1]))
        + "\n",
        encoding="utf-8",
    )


def cache_key(n: int) -> str:
    """The cached project is rebuilt when the generator or the modules that shape it change."""
    digest = hashlib.sha256(BUILD_VERSION.encode())
    for module in (gitops, statefile, machine):
        digest.update(Path(inspect.getfile(module)).read_bytes())
    return f"n{n}-{digest.hexdigest()[:12]}"


def build(cache: Path, n: int, rebuild: bool = False) -> tuple[Path, float, bool]:
    """The pristine project of size N (built once, then cached), the seconds its build took,
    and whether it came from the cache."""
    pristine = cache / cache_key(n) / "project"
    done = pristine.parent / "built.json"  # beside the project: an untracked file in it would be stashed
    if pristine.is_dir() and done.is_file() and not rebuild:
        return pristine, float(read_json(done)["build_s"]), True
    started = time.perf_counter()
    shutil.rmtree(pristine.parent, ignore_errors=True)
    pristine.mkdir(parents=True)
    shutil.copyfile(ROOT / "session_scheduler" / "prompts" / "app_spec.txt", pristine / "app_spec.txt")
    gitops.open_repo(pristine)  # `main` with the scheduler's own setup commit
    features, history = generate(n)
    ids = tuple(f["id"] for f in features)
    passing = frozenset(f["id"] for f in features if f["passes"])
    first_open = next(f["id"] for f in features if not f["passes"])
    write_json(pristine / "feature_list.json", {"features": features})
    write_json(
        pristine / "progress.json",
        {
            "project_name": pristine.name,
            "current_phase": "IMPLEMENT",
            "current_feature": first_open,
            "current_branch": f"feature/{first_open}",
            "features_completed": len(passing),
            "sessions": history.sessions,
        },
    )
    write_json(pristine / "reviews.json", {"reviews": history.reviews, "fixes": history.fixes})
    pack_merged_branches(pristine, sorted(passing))
    rejected = sorted({r["feature_id"] for r in history.reviews if r["verdict"] == "REJECT"})
    state = machine.SessionState(
        backlog=machine.Backlog(
            features=ids, passing=passing, blocked=frozenset(), rejections=tuple((fid, 1) for fid in rejected)
        ),
        lane=machine.Lane(role=SessionType.IMPLEMENT, work=machine.feature(first_open)),
        architecture_checked_at=len(passing),
        session_count=len(history.sessions),
    )
    save_state(pristine, state)
    build_s = time.perf_counter() - started
    write_json(done, {"features": n, "build_s": build_s})
    return pristine, build_s, False


# -- the trivial agent ------------------------------------------------------------------------


def git(cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


@dataclass
class Call:
    role: SessionType
    started: float
    ended: float
    prompt_bytes: int
    file_bytes: int
    log_bytes: int = 0
    """Bytes under the log folder when the session started."""


class TrivialRunner:
    """Does, instantly, the least a real agent does for its role; times itself.

    IMPLEMENT: one small commit on the work branch and a session entry in progress.json.
    REVIEW: a PASS review in reviews.json, `git merge --no-ff` into `main`, `passes` set on
    the feature, a session entry. Before any of it, it notes the bytes the agent would read.
    """

    def __init__(self, profiler: cProfile.Profile | None = None) -> None:
        self.calls: list[Call] = []
        self.profiler = profiler
        """When given: off during each session, on between sessions (the scheduler's work only)."""

    async def run(self, request: SessionRequest) -> SessionResult:
        if self.profiler is not None:
            self.profiler.disable()
        try:
            return self._run(request)
        finally:
            if self.profiler is not None:
                self.profiler.enable()

    def _run(self, request: SessionRequest) -> SessionResult:
        project = lane_project(Path(request.cwd))  # the session works in a clone beside it
        assert project is not None, f"{request.cwd} is not a lane's clone"
        logs = folder_bytes(project / LOG_DIR)
        started = time.perf_counter()
        plan, cwd = request.plan, Path(request.cwd)
        prompt = len(plan.system_prompt.encode("utf-8")) + len(plan.kickoff.encode("utf-8"))
        files = sum((cwd / name).stat().st_size for name in plan.reads if (cwd / name).is_file())
        tools = tools_of(request)  # the hand-off tools the session is served, as an agent calls them
        if plan.work is None or plan.work.feature_id is None:
            raise RuntimeError(
                f"the bench's runner has no script for a {plan.role.value} session without a feature"
            )
        fid, branch = plan.work.feature_id, plan.work.branch
        if plan.role is SessionType.IMPLEMENT:
            start = git(cwd, "rev-parse", "main")
            git(cwd, "checkout", "-q", "-B", branch, "main")
            module = f"src/{fid.lower()}.py"
            (cwd / "src").mkdir(exist_ok=True)
            (cwd / module).write_text(
                f'"""{fid}."""\n\n\ndef run() -> str:\n    return "{fid}"\n', encoding="utf-8"
            )
            git(cwd, "add", module)
            git(cwd, "commit", "-q", "--no-verify", "-m", f"feat({fid}): the feature")
            self._session_entry(tools, fid, start, git(cwd, "rev-parse", "HEAD"))
        elif plan.role is SessionType.REVIEW:
            git(cwd, "checkout", "-q", "main")
            git(cwd, "merge", "-q", "--no-ff", "--no-verify", branch, "-m", f"Merge {branch}")
            steps = json.loads(tools.call("show_feature", {"feature_id": fid})[0])["steps"]
            graded = [{"step": n, "passed": True, "evidence": "ran it"} for n in range(1, len(steps) + 1)]
            answer, failed = tools.call(
                "record_review",
                {
                    "verdict": "PASS",
                    "issues": {"critical": [], "major": [], "minor": []},
                    "acceptance": graded,
                },
            )
            review_id = json.loads(answer)["review_id"] if not failed else 0
            tools.call("mark_passing", {})
            end = git(cwd, "rev-parse", "HEAD")
            self._session_entry(tools, fid, "", end, verdict="PASS", review_id=review_id)
        else:
            raise RuntimeError(f"the bench's runner has no script for {plan.role.value}")
        ended = time.perf_counter()
        self.calls.append(Call(plan.role, started, ended, prompt, files, logs))
        return SessionResult(
            subtype="success",
            is_error=False,
            num_turns=1,
            session_id=f"scale-{plan.number}",
            terminal_reason="completed",
            duration_s=ended - started,
        )

    @staticmethod
    def _session_entry(tools: HandoffTools, fid: str, start: str, end: str, **extra: Any) -> None:
        answer, failed = tools.call(
            "append_session",
            {
                "outcome": OUTCOMES[tools.role.value],
                "features_touched": [fid],
                "commit_range": {"from": start, "to": end},
                "notes": "scale bench: the least a real agent does",
                **extra,
            },
        )
        if failed:
            raise RuntimeError(f"append_session refused: {answer}")


# -- measuring ---------------------------------------------------------------------------------


def folder_bytes(folder: Path) -> int:
    """Bytes under the log folder, but for its restore points (copies of the hand-off files,
    replaced each session) and the outbox of the session in flight (removed once applied): they
    do not grow with the number of sessions."""
    total = 0
    for dirpath, dirs, names in os.walk(folder):
        if Path(dirpath) == folder and "restore" in dirs:
            dirs.remove("restore")
        if "outbox" in dirs:  # a session's while it runs, removed once applied
            dirs.remove("outbox")
        for name in names:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
    return total


WARM_UP = 5
"""Sessions whose log bytes are not counted: the first ones also write the restore point (one
copy of the hand-off files, replaced each session) and the first state copies that later
sessions compact away."""


def steady_log_growth(calls: list[Call], before: int, after: int) -> float:
    """Bytes the logs grow by per session once the run is past its first sessions."""
    if len(calls) <= WARM_UP:
        return (after - before) / max(len(calls), 1)
    return (after - calls[WARM_UP].log_bytes) / (len(calls) - WARM_UP)


def p90(values: list[float]) -> float:
    """Nearest-rank 90th percentile."""
    ordered = sorted(values)
    return ordered[max(math.ceil(0.9 * len(ordered)) - 1, 0)]


@dataclass
class Row:
    features: int
    past_sessions: int
    sessions: int
    overhead_ms: list[float]
    read_implement: float
    read_review: float
    log_per_session: float
    build_s: float
    cached: bool
    measure_s: float
    problems: list[str]

    @property
    def overhead_median_ms(self) -> float:
        return statistics.median(self.overhead_ms)

    @property
    def overhead_p90_ms(self) -> float:
        return p90(self.overhead_ms)


def config() -> AgentConfig:
    return AgentConfig(sandbox=False, test_command=None, architecture_interval=1_000_000)


def fresh_copy(pristine: Path, work: Path) -> Path:
    """A copy of the built project, with no lane clone (a clone the last measurement left would
    hold its branches: a state no project's own run leaves)."""
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(workdirs.root_of(work), ignore_errors=True)
    shutil.copytree(pristine, work, symlinks=True)
    return work


def passing_count(project: Path) -> int:
    """Features whose `passes` is true in feature_list.json (the hand-off contract, not the state file)."""
    return sum(1 for f in read_json(project / "feature_list.json")["features"] if f.get("passes") is True)


def session_count(project: Path) -> int | None:
    """The saved session count, where the state file still has one."""
    try:
        saved = statefile.load(project)
    except Exception:  # the state file's form is the scheduler's own business
        return None
    return getattr(getattr(saved, "state", None), "session_count", None)


def check(project: Path, passing: int, count: int | None, sessions: int, lines: list[str]) -> list[str]:
    """Every session must have been verified: the count moved on and the features passed."""
    problems = []
    after = session_count(project)
    if count is not None and after is not None and after != count + sessions:
        problems.append(f"session_count {count} -> {after}, expected +{sessions}")
    gained = passing_count(project) - passing
    if gained != sessions // 2:
        problems.append(f"{gained} feature(s) passed, expected {sessions // 2}")
    failed = [
        line.strip() for line in lines if "FAILED" in line or ("WARNING" in line and "sandbox" not in line)
    ]
    return problems + failed[:3]


def run_sessions(
    project: Path, sessions: int, runner: TrivialRunner, lines: list[str]
) -> tuple[float, float]:
    loop = Lanes(project, config(), runner, echo=lines.append)
    started = time.perf_counter()
    loop.run(max_iterations=sessions)
    return started, time.perf_counter()


def measure(pristine: Path, work: Path, n: int, sessions: int, build_s: float, cached: bool) -> Row:
    started = time.perf_counter()
    project = fresh_copy(pristine, work)
    passing, count = passing_count(project), session_count(project)
    logs_before = folder_bytes(project / LOG_DIR)
    runner, lines = TrivialRunner(), []
    run_start, run_end = run_sessions(project, sessions, runner, lines)
    calls = runner.calls
    problems = check(project, passing, count, sessions, lines)
    if len(calls) != sessions:
        problems.append(f"the runner ran {len(calls)} session(s), expected {sessions}")
    # Between two agent sessions: the post-session work of one and the pre-session work of
    # the next. The first one's start-up and the last one's wind-down make one more sample.
    overhead = [calls[i + 1].started - calls[i].ended for i in range(len(calls) - 1)]
    if calls:
        overhead.append((calls[0].started - run_start) + (run_end - calls[-1].ended))
    by_role = {
        role: [c.prompt_bytes + c.file_bytes for c in calls if c.role is role]
        for role in (SessionType.IMPLEMENT, SessionType.REVIEW)
    }
    logs_after = folder_bytes(project / LOG_DIR)
    row = Row(
        features=n,
        past_sessions=SESSIONS_PER_FEATURE * n,
        sessions=len(calls),
        overhead_ms=[s * 1000 for s in overhead] or [math.nan],
        read_implement=statistics.median(by_role[SessionType.IMPLEMENT] or [math.nan]),
        read_review=statistics.median(by_role[SessionType.REVIEW] or [math.nan]),
        log_per_session=steady_log_growth(calls, logs_before, logs_after),
        build_s=build_s,
        cached=cached,
        measure_s=0.0,
        problems=problems,
    )
    shutil.rmtree(work, ignore_errors=True)
    row.measure_s = time.perf_counter() - started
    return row


def profile(pristine: Path, work: Path, sessions: int, top: int) -> str:
    """cProfile of the scheduler's work between sessions: from the end of the first session to
    the end of the run (the start-up and the runner's own time left out). SCALE_SORT picks the
    sort key (default `cumulative`); SCALE_CALLERS, comma-separated names, adds their callers."""
    project = fresh_copy(pristine, work)
    profiler = cProfile.Profile()
    runner, lines = TrivialRunner(profiler), []
    run_sessions(project, sessions, runner, lines)
    profiler.disable()
    shutil.rmtree(work, ignore_errors=True)
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats(os.environ.get("SCALE_SORT", "cumulative")).print_stats(top)
    for name in os.environ.get("SCALE_CALLERS", "").split(","):
        if name:
            stats.print_callers(name)
    return out.getvalue()


# -- the report ---------------------------------------------------------------------------------


def table(rows: list[Row]) -> str:
    head = (
        "| features | past sessions | sessions measured | overhead median (ms) | overhead p90 (ms) "
        "| read IMPLEMENT (KB) | read REVIEW (KB) | log per session (KB) | build (s) | measure (s) |"
    )
    lines = [head, "|" + "---:|" * 10]
    for r in rows:
        lines.append(
            f"| {r.features:,} | {r.past_sessions:,} | {r.sessions} | {r.overhead_median_ms:,.1f} | "
            f"{r.overhead_p90_ms:,.1f} | {r.read_implement / KB:,.1f} | {r.read_review / KB:,.1f} | "
            f"{r.log_per_session / KB:,.1f} | {r.build_s:,.2f}{'*' if r.cached else ''} | {r.measure_s:,.1f} |"
        )
    return "\n".join(lines)


def goals(rows: list[Row]) -> str:
    by_size = {r.features: r for r in rows}
    lines = ["| goal | measured | verdict |", "|---|---:|---|"]
    for label, metric, large, small, limit in GOALS:
        goal = (
            f"{label} {large:,} vs {small:,}: {'<' if metric.startswith('overhead') else 'within'} {limit:g}x"
        )
        if large not in by_size or small not in by_size:
            lines.append(f"| {goal} | n/a | not measured (needs both sizes) |")
            continue
        ratio = getattr(by_size[large], metric) / getattr(by_size[small], metric)
        ok = ratio < limit if metric.startswith("overhead") else ratio <= limit
        if metric == "overhead_median_ms":
            median = by_size[large].overhead_median_ms
            goal += f", median < {OVERHEAD_CEILING_MS:g} ms at {large:,}"
            ok = ok and median < OVERHEAD_CEILING_MS
            lines.append(f"| {goal} | {ratio:,.2f}x, {median:,.0f} ms | {'PASS' if ok else 'FAIL'} |")
        else:
            lines.append(f"| {goal} | {ratio:,.2f}x | {'PASS' if ok else 'FAIL'} |")
    return "\n".join(lines)


def parse_sizes(text: str) -> list[int]:
    return sorted({int(part.replace("_", "").replace(",", "")) for part in text.split(",") if part.strip()})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="feature counts, comma-separated")
    parser.add_argument(
        "--sessions", type=int, default=20, help="sessions measured per size (IMPLEMENT+REVIEW pairs x2)"
    )
    parser.add_argument(
        "--sessions-at",
        action="append",
        default=[],
        metavar="N=K",
        help="sessions measured at size N (e.g. 10000=6), overriding --sessions there",
    )
    parser.add_argument(
        "--cache-dir", type=Path, default=Path(tempfile.gettempdir()) / "scheduler-scale-bench"
    )
    parser.add_argument("--rebuild", action="store_true", help="build the projects again even if cached")
    parser.add_argument(
        "--profile", type=int, metavar="TOP", help="profile instead of measuring; print the TOP functions"
    )
    args = parser.parse_args(argv)
    overrides = {
        int(k.replace(",", "")): int(v) for k, v in (item.split("=", 1) for item in args.sessions_at)
    }
    rows: list[Row] = []
    say: Callable[[str], None] = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    for n in parse_sizes(args.sizes):
        wanted = overrides.get(n, args.sessions)
        sessions = max(2, min(wanted, 2 * open_count(n)) // 2 * 2)  # whole IMPLEMENT+REVIEW pairs
        say(f"size {n:,}: building (or reusing) the project ...")
        pristine, build_s, cached = build(args.cache_dir, n, args.rebuild)
        how = "cached; its build took" if cached else "built in"
        say(f"size {n:,}: {how} {build_s:.1f} s ({pristine}); running {sessions} sessions ...")
        work = pristine.parent / "work"
        if args.profile:
            print(f"## cProfile, {n:,} features, {sessions} sessions (cumulative)\n")
            print(profile(pristine, work, sessions, args.profile))
            continue
        row = measure(pristine, work, n, sessions, build_s, cached)
        say(f"size {n:,}: measured in {row.measure_s:.1f} s")
        for problem in row.problems:
            say(f"  PROBLEM: {problem}")
        rows.append(row)
    if args.profile:
        return 0
    print(table(rows))
    print()
    print(goals(rows))
    print()
    print(
        "Overhead: wall time between one agent session's end and the next one's start (the runner's own "
        "time excluded); the run's start-up and wind-down count as one sample. Read: prompt + the files "
        "plan declares (prompts.READS), at the session's start. KB = 1,000 bytes. Build *: from the cache (the time "
        "its build took); measure: copying the project, the sessions and the checks."
    )
    bad = [r for r in rows if r.problems]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
