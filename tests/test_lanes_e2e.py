"""Lanes end to end: `python autonomous_agent_demo.py --offline-demo --lanes N --scenario F`, the
real Claude Code CLI against the scripted model, judged by what the run left behind (the event
log, `main`'s history, the records, the project's own tests).

Runs (about 40-60 s each on 2 cores), each combining cases to keep the time down:
- `side_by_side`: 3 lanes, F001 then F002..F004 at once, F003 and F004 conflicting: the lanes'
  sessions overlap, the second of the pair to land is sent back (conflict) and fixed;
- `red_and_chain`: 3 lanes, F004 and F005 red only together, F002 after F001 and F003 after F002:
  the second of the pair to land is sent back (tests), and no dependent starts before its
  dependency landed;
- a usage-limit window hitting one of three sessions in flight (in this process, on a clock that
  skips its sleeps);
- `--lanes 1` as before, and `--lanes 2` saved for the next run.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import SkippingClock, begun_on

from scripted_model.scenario import Scenario
from session_scheduler.repo import workdirs
from session_scheduler.store import events, statefile
from session_scheduler.testing.hosts import product_env, run_command
from session_scheduler.testing.kills import check_lanes_log

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("bwrap") is None, reason="no bubblewrap")]

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 400
LATENCY = 0.2
"""Seconds per model turn: sessions started together stay together (a REVIEW is several turns,
a landing is not), so the pairs below are built and reviewed side by side."""
AFTER_F001 = ["F001"]

SIDE_BY_SIDE: dict[str, Any] = {
    "description": "F001, then F002..F004 in three lanes at once; F003 and F004 edit the same README line",
    "features": 4,
    "depends": {"F002": AFTER_F001, "F003": AFTER_F001, "F004": AFTER_F001},
    "conflicts": [["F003", "F004"]],
    "turn_latency_s": LATENCY,
}
RED_AND_CHAIN: dict[str, Any] = {
    "description": "a chain F001 <- F002 <- F003; F004 and F005 (after F001) red only together",
    "features": 5,
    "depends": {"F002": ["F001"], "F003": ["F002"], "F004": AFTER_F001, "F005": AFTER_F001},
    "red_together": [["F004", "F005"]],
    "turn_latency_s": LATENCY,
}


@dataclass(frozen=True)
class Run:
    project: Path
    proc: subprocess.CompletedProcess[str]
    log: list[dict[str, Any]]


def write_scenario(path: Path, data: dict[str, Any]) -> Path:
    Scenario.from_json(data)  # a typo in a scenario fails here, not mid-run
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def run_demo(
    tmp: Path, project: Path, scenario: dict[str, Any], *options: str, lanes: int | None = None
) -> Run:
    """The scheduler run on `scenario` with `lanes` lanes (None: no --lanes, the project's saved count)."""
    path = write_scenario(tmp / f"{project.name}-scenario.json", scenario)
    command = run_command(project, path, lanes, None, *options)
    proc = subprocess.run(
        command,
        cwd=REPO,
        env=product_env(tmp, "product"),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    return Run(project, proc, events.read(events.log_path(project)) if project.exists() else [])


def explain(proc: subprocess.CompletedProcess[str]) -> str:
    return (
        f"exit {proc.returncode}\n--- stdout (tail)\n{proc.stdout[-5000:]}\n--- stderr\n{proc.stderr[-3000:]}"
    )


def git(project: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=project, capture_output=True, text=True, check=True).stdout


def of(log: list[dict[str, Any]], kind: str, **match: Any) -> list[dict[str, Any]]:
    return [e for e in log if e["kind"] == kind and all(e.get(k) == v for k, v in match.items())]


def assert_built(run: Run, ids: list[str]) -> None:
    """Done: every feature passes, each merged on main exactly once, the records agree, the log
    is whole (see kills.check_lanes_log), nothing in flight."""
    project = run.project
    assert run.proc.returncode == 0, explain(run.proc)
    features = json.loads((project / "feature_list.json").read_text())["features"]
    assert [(f["id"], f["passes"]) for f in features] == [(i, True) for i in ids]
    subjects = git(project, "log", "--merges", "--first-parent", "--format=%s", "main").splitlines()
    merged = Counter(
        s.split()[1].removeprefix("feature/") for s in subjects if s.startswith("Merge feature/")
    )
    assert merged == Counter(ids), subjects
    assert sorted(e["feature"] for e in of(run.log, "merge_verified")) == ids
    saved = statefile.load(project)
    assert saved is not None and saved.in_flight == {} and sorted(saved.state.backlog.passing) == ids
    entries = [e["session_id"] for e in json.loads((project / "progress.json").read_text())["sessions"]]
    assert check_lanes_log(run.log, entries) == []


def spans(log: list[dict[str, Any]]) -> list[tuple[int, int, float, float]]:
    """(session, lane, start, end) of every session of the log."""
    ends = {(e["session"], e["run"]): float(e["ts"]) for e in of(log, "session_ended")}
    return [
        (s["session"], s["lane"], float(s["ts"]), ends[(s["session"], s["run"])])
        for s in of(log, "session_started")
    ]


def overlapping(log: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """The pairs of sessions of different lanes that ran at the same time."""
    found = spans(log)
    return [
        (a[0], b[0])
        for i, a in enumerate(found)
        for b in found[i + 1 :]
        if a[1] != b[1] and a[2] < b[3] and b[2] < a[3]
    ]


@pytest.fixture(scope="module")
def side_by_side(tmp_path_factory: pytest.TempPathFactory) -> Run:
    tmp = tmp_path_factory.mktemp("side-by-side")
    return run_demo(tmp, tmp / "app", SIDE_BY_SIDE, lanes=3)


@pytest.fixture(scope="module")
def red_and_chain(tmp_path_factory: pytest.TempPathFactory) -> Run:
    tmp = tmp_path_factory.mktemp("red-and-chain")
    return run_demo(tmp, tmp / "app", RED_AND_CHAIN, lanes=3)


# -- (a) independent features, three lanes ------------------------------------------------------
def test_three_lanes_build_independent_features_at_once_and_land_each_once(side_by_side: Run) -> None:
    assert_built(side_by_side, ["F001", "F002", "F003", "F004"])
    log = side_by_side.log
    assert [e["lanes"] for e in of(log, "run_started")] == [3]
    assert {e["lane"] for e in of(log, "session_started")} == {0, 1, 2}
    implements = of(log, "session_started", role="IMPLEMENT")
    after_f001 = {e["session"] for e in implements if e["feature"] != "F001"}
    together = {pair for pair in overlapping(log) if set(pair) <= after_f001}
    assert len(together) == 3, f"F002..F004's IMPLEMENT sessions did not all overlap: {overlapping(log)}"
    assert "Lanes: 3, each working in its own clone" in side_by_side.proc.stdout
    calls = [line for line in side_by_side.proc.stdout.splitlines() if "] Bash: " in line]
    assert calls and all(line.startswith("[lane ") for line in calls)  # each tool call says its lane
    assert all(workdirs.path_of(side_by_side.project, n).is_dir() for n in range(3))


# -- (b) a conflict, resolved by a FIX ----------------------------------------------------------
def test_the_second_of_a_conflicting_pair_is_sent_back_fixed_and_lands(side_by_side: Run) -> None:
    log = side_by_side.log
    (back,) = of(log, "sent_back")
    assert back["why"] == "conflict" and back["feature"] in ("F003", "F004")
    first = "F004" if back["feature"] == "F003" else "F003"
    index = log.index(back)
    (landed_first,) = of(log, "merge_verified", feature=first)
    (landed_then,) = of(log, "merge_verified", feature=back["feature"])
    assert index < log.index(landed_then) and log.index(landed_first) < log.index(landed_then)
    # (tested in one batch, the second goes back when it conflicts, before the first lands)
    fixes = [
        e for e in of(log, "session_started", role="FIX", feature=back["feature"]) if log.index(e) > index
    ]
    assert fixes, "no FIX of the work sent back"
    reviews = json.loads((side_by_side.project / "reviews.json").read_text())
    (review,) = [r for r in reviews["reviews"] if r["review_id"] == back["review_id"]]
    assert "merging onto main conflicts in README.md" in review["issues"]["critical"][0]
    readme = git(side_by_side.project, "show", "main:README.md")
    assert "- F003:" in readme and "- F004:" in readme  # the FIX kept both lines


# -- (c) red only together, (d) a dependency chain ----------------------------------------------
def test_a_pair_red_together_is_sent_back_by_the_queue_and_main_stays_green(red_and_chain: Run) -> None:
    assert_built(red_and_chain, ["F001", "F002", "F003", "F004", "F005"])
    log = red_and_chain.log
    backs = of(log, "sent_back")
    assert [(e["why"], e["feature"] in ("F004", "F005")) for e in backs] == [("tests", True)], backs
    (back,) = backs
    (landed_then,) = of(log, "merge_verified", feature=back["feature"])
    assert log.index(back) < log.index(landed_then)
    review = [
        r
        for r in json.loads((red_and_chain.project / "reviews.json").read_text())["reviews"]
        if r["review_id"] == back["review_id"]
    ]
    assert review and review[0]["issues"]["critical"] == ["the tests fail on main with this branch merged"]
    assert git(red_and_chain.project, "rev-parse", "HEAD") == git(red_and_chain.project, "rev-parse", "main")
    tests = subprocess.run(
        ["bash", "init.sh"],
        cwd=red_and_chain.project,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-2000:]


def test_no_dependent_starts_before_its_dependency_landed(red_and_chain: Run) -> None:
    """...or before its own lane approved it (the lane goes on from its approved merge)."""
    log = red_and_chain.log
    for feature, needs in RED_AND_CHAIN["depends"].items():
        for start in of(log, "session_started", feature=feature):
            for need in needs:
                assert begun_on(log, start, need), f"{feature}'s session {start['session']} before {need}"
    # the pair and F002 were built side by side once F001 landed
    first = {
        e["feature"]: e
        for e in reversed(of(log, "session_started", role="IMPLEMENT"))
        if e["feature"] != "F001"
    }
    assert {first[f]["lane"] for f in ("F002", "F004", "F005")} == {0, 1, 2}


# -- (e) a usage-limit window with three lanes in flight ----------------------------------------
def test_a_usage_limit_pauses_every_lane_once_and_the_cut_session_runs_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Session 5 (one of the three IMPLEMENTs started together once F001 landed) hits a usage
    limit at its second request: one wait for every lane, no session starts before the reset,
    session 5 runs again under its number, the run ends done."""
    from click.testing import CliRunner

    from session_scheduler.testing.seams import active_sandbox
    from session_scheduler.view.cli import main

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    scenario = {
        "features": 4,
        "depends": {"F002": AFTER_F001, "F003": AFTER_F001, "F004": AFTER_F001},
        "turn_latency_s": LATENCY,
        "faults": [{"session": 5, "kind": "usage_limit", "request": 2, "reset_in_seconds": 5}],
    }
    path = write_scenario(tmp_path / "limit.json", scenario)
    project = tmp_path / "app"
    clock = SkippingClock()
    args = ["--project-dir", str(project), "--offline-demo", "--scenario", str(path), "--lanes", "3"]
    result = CliRunner().invoke(main, args, obj={"preflight": active_sandbox, "clock": clock})
    assert result.exit_code == 0, result.output[-5000:]
    log = events.read(events.log_path(project))
    (wait,) = of(log, "limit_wait")
    assert wait["session"] == 5 and wait["why"] == "usage_limit"
    assert float(wait["until"]) >= float(wait["ts"]) + 5
    assert result.output.count("every lane waits") == 1
    assert clock.sleeps and sum(clock.sleeps) >= 5  # the lanes waited it out (in short steps)
    # three lanes were in flight when the limit came
    at = float(wait["ts"])
    running = {lane for number, lane, begin, end in spans(log) if begin <= at <= end}
    assert running == {0, 1, 2}, spans(log)
    # nothing started during the wait
    assert not [e for e in of(log, "session_started") if at <= float(e["ts"]) < float(wait["until"])]
    # session 5 was cut and ran again, once, under its number
    fives = [
        (e["kind"], e.get("standing"))
        for e in log
        if e.get("session") == 5 and e["kind"].startswith("session_")
    ]
    assert fives == [
        ("session_started", None),
        ("session_ended", "usage_limit"),
        ("session_started", None),
        ("session_ended", "verified"),
    ]
    assert [e["kind"] for e in of(log, "run_ended")] == ["run_ended"] and of(log, "run_ended")[0][
        "status"
    ] == "done"
    features = json.loads((project / "feature_list.json").read_text())["features"]
    assert all(f["passes"] for f in features) and len(features) == 4
    saved = statefile.load(project)
    assert saved is not None and saved.in_flight == {}


# -- (f) --lanes 1 is today's loop; --lanes 2 is saved -----------------------------------------
def test_one_lane_works_in_a_clone_as_several_do_and_a_lane_count_is_saved(tmp_path: Path) -> None:
    one = run_demo(
        tmp_path,
        tmp_path / "one",
        {"features": 1, "reviews": {"F001": ["REQUEST_CHANGES", "PASS"]}},
        lanes=1,
    )
    assert one.proc.returncode == 0, explain(one.proc)
    roles = [e["role"] for e in of(one.log, "session_started")]
    assert roles == ["INITIALIZER", "IMPLEMENT", "REVIEW", "FIX", "REVIEW"]  # as test_e2e's one lane
    assert (
        "Sessions work in a clone, one.lanes/lane-0" in one.proc.stdout and "[lane 0]" not in one.proc.stdout
    )
    assert workdirs.path_of(one.project, 0).is_dir() and of(one.log, "run_started")[0]["lanes"] == 1
    assert (
        git(one.project, "log", "--merges", "--first-parent", "--format=%s", "main")
        .split("\n")[0]
        .startswith("Merge feature/F001")
    )

    two = tmp_path / "two"
    first = run_demo(tmp_path, two, {"features": 2}, "--max-iterations", "1", lanes=2)
    assert first.proc.returncode == 3, explain(first.proc)  # a limit: the INITIALIZER only
    again = run_demo(tmp_path, two, {"features": 2})  # no --lanes: the saved count
    assert again.proc.returncode == 0, explain(again.proc)
    assert [e["lanes"] for e in of(again.log, "run_started")] == [2, 2]
    assert "Lanes: 2, each working in its own clone" in again.proc.stdout
    assert {e["lane"] for e in of(again.log, "session_started")} == {0, 1}
    assert_built(again, ["F001", "F002"])
