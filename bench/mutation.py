"""Mutation testing of the rules: is every rule of the state machine and of verification tested?

Runs the pinned mutation tester (mutmut, see pyproject.toml) over a copy of the repository,
one target at a time, and prints killed / total, the score over the mutants that are not
equivalent, and every survivor with its diff. A surviving mutant is a rule that a test
should have made fire.

    .venv/bin/python bench/mutation.py                  # both targets
    .venv/bin/python bench/mutation.py machine          # one target
    .venv/bin/python bench/mutation.py --keep           # keep the work folder to inspect it

Equivalent mutants (the code means the same after the change) are listed below, each with
the reason, and also in docs/decisions.md. Their names are mutmut's and change when the
mutated function changes: re-check them after editing a target.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Target:
    sources: tuple[str, ...]
    tests: tuple[str, ...]
    goal: float
    """The share of non-equivalent mutants that must be killed."""


TARGETS: dict[str, Target] = {
    "machine": Target(
        ("session_scheduler/core/machine.py", "session_scheduler/core/schedule.py"),
        ("tests/test_machine.py", "tests/test_schedule.py", "tests/test_growing_rules.py"),
        0.95,
    ),
    "verification": Target(
        ("session_scheduler/run/verify.py", "session_scheduler/run/invariants.py"),
        (
            "tests/test_verify_rules.py",
            "tests/test_progress.py",
            "tests/test_gitops.py",
            "tests/test_growing_rules.py",
            "tests/test_gating.py",
        ),
        0.90,
    ),
    "bash_policy": Target(
        ("session_scheduler/guard/bash_policy.py",),
        ("tests/test_bash_policy.py", "tests/test_policy.py"),
        0.85,
    ),
    "events": Target(("session_scheduler/store/events.py",), ("tests/test_events.py",), 0.85),
    "risk": Target(("session_scheduler/core/risk.py",), ("tests/test_risk.py",), 0.85),
    "handoff": Target(
        ("session_scheduler/store/handoff_tools.py", "session_scheduler/store/handoff_history.py"),
        ("tests/test_brief_and_tools.py",),
        0.85,
    ),
    "refs": Target(
        ("session_scheduler/repo/refs.py", "session_scheduler/store/filestat.py"),
        ("tests/test_gitops.py", "tests/test_progress.py"),
        0.85,
    ),
    "confinement": Target(("session_scheduler/core/confinement.py",), ("tests/test_confinement.py",), 0.85),
    "safe_git": Target(
        ("session_scheduler/guard/safe_git.py",),
        ("tests/test_safe_git.py",),
        0.85,
    ),
    "workdirs": Target(
        ("session_scheduler/repo/workdirs.py",),
        ("tests/test_workdirs.py", "tests/test_lane_confinement.py"),
        0.80,
    ),  # its survivors are mostly git flags that change only output or speed (`--quiet`, `--no-tags`,
    # `--negotiation-tip`, `--not` before commits the walk would reach anyway) and arguments GitPython
    # drops when they become None: behaviour the tests cannot see, so the goal is 80%
    "gates": Target(
        ("session_scheduler/core/gates.py", "session_scheduler/core/languages.py"),
        ("tests/test_gates.py", "tests/test_languages.py"),
        0.85,
    ),
    "evidence": Target(
        ("session_scheduler/core/evidence.py", "session_scheduler/run/browsing.py"),
        ("tests/test_browsing.py", "tests/test_verify_rules.py", "tests/test_report_evidence.py"),
        0.85,
    ),
    "growing": Target(
        (
            "session_scheduler/core/features.py",
            "session_scheduler/core/tasks.py",
            "session_scheduler/store/specs.py",
        ),
        ("tests/test_growing_rules.py", "tests/test_tasks.py", "tests/test_claims.py"),
        0.85,
    ),
    "batching": Target(("session_scheduler/core/batching.py",), ("tests/test_batching.py",), 0.85),
    "toolset": Target(
        ("session_scheduler/guard/toolset.py", "session_scheduler/run/showing.py"),
        (
            "tests/test_agents_view.py",
            "tests/test_agent.py",
            "tests/test_policy.py",
            "tests/test_security.py",
        ),
        0.85,
    ),
}

EQUIVALENT: dict[str, str] = {
    "session_scheduler.run.invariants.x_check_invariants__mutmut_17": "the duplicate-id check run on a list whose features are the "
    "earlier version's but for `passes`: their ids were checked when the list was made, so it finds none",
    **dict.fromkeys(
        (
            "session_scheduler.repo.refs.x__read_packed__mutmut_15",
            "session_scheduler.repo.refs.x__read_packed__mutmut_17",
            "session_scheduler.repo.refs.x__read_packed__mutmut_20",
            "session_scheduler.repo.refs.x_sha__mutmut_5",
            "session_scheduler.repo.refs.x_sha__mutmut_7",
            "session_scheduler.repo.refs.x_sha__mutmut_11",
        ),
        "the codec of a ref file: ref names and commits are ASCII, which every ASCII-compatible codec "
        "(the locale's, `UTF-8` spelled in capitals) reads alike, and anything else is no commit either way",
    ),
    **dict.fromkeys(
        (
            "session_scheduler.repo.refs.x__read_packed__mutmut_24",
            "session_scheduler.repo.refs.x__read_packed__mutmut_25",
        ),
        "skipping the header and the peeled `^` lines by their first character: neither starts with a "
        "commit, so the commit check that follows skips them anyway",
    ),
    "session_scheduler.repo.refs.x__read_packed__mutmut_29": "`rpartition` for `partition`: git writes one space between the commit "
    "and the ref name, and a valid ref name holds no space",
    **dict.fromkeys(
        (
            "session_scheduler.repo.refs.x__read_packed__mutmut_39",
            "session_scheduler.repo.refs.x__read_packed__mutmut_40",
        ),
        "how many parsed versions of packed-refs are kept in mind: one fewer or more changes speed only",
    ),
    **dict.fromkeys(
        (
            "session_scheduler.repo.refs.x_keep_packed__mutmut_10",
            "session_scheduler.repo.refs.x_keep_packed__mutmut_11",
        ),
        "the name of the temporary link, removed before and after use",
    ),
    "session_scheduler.repo.refs.x_valid__mutmut_9": "a name ending in `/` has an empty last component, which the component rule "
    "refuses too",
    "session_scheduler.core.machine.x_architecture_due__mutmut_4": "`checked / interval` for `checked // interval`: with "
    "architecture_checked_at <= completed (it is only ever set to the completed count, which never "
    "shrinks), completed // i > checked / i exactly when completed // i > checked // i",
    "session_scheduler.core.schedule.x__review_before_done__mutmut_11": "lane 1's view for lane 0's: whether "
    "an architecture review is due reads only the shared backlog and counters, the same in every lane's view",
    "session_scheduler.core.schedule.x_resized__mutmut_2": "`>` for `>=`: the same count falls to the other "
    "branch, which finds no lane to drop and keeps every lane",
    "session_scheduler.run.invariants.x__holders__mutmut_2": "the separator of a message listing the roles with a right; every "
    "right in policy.POLICIES belongs to exactly one role, so the join never places it",
    "session_scheduler.run.invariants.x__holders__mutmut_3": "the same separator, upper-cased; never placed for the same reason",
    **dict.fromkeys(
        (
            "session_scheduler.run.invariants.x_check_invariants__mutmut_4",
            "session_scheduler.run.invariants.x_check_invariants__mutmut_6",
            "session_scheduler.run.invariants.x_check_invariants__mutmut_9",
        ),
        "`unchanged` only skips comparing a feature list with itself (the same validated object): "
        "without the shortcut the same checks run and find the same nothing",
    ),
    **dict.fromkeys(
        (
            "session_scheduler.store.handoff_history.x__append__mutmut_15",
            "session_scheduler.store.handoff_history.x__index__mutmut_22",
        ),
        "the codec of a history or index file spelled `UTF-8` in capitals: the same codec",
    ),
    **dict.fromkeys(
        (
            "session_scheduler.store.handoff_history.x__index__mutmut_6",
            "session_scheduler.store.handoff_history.x__index__mutmut_7",
            "session_scheduler.store.handoff_history.x__index__mutmut_8",
            "session_scheduler.store.handoff_history.x__index__mutmut_11",
            "session_scheduler.store.handoff_history.x__index__mutmut_32",
            "session_scheduler.store.handoff_history.x__index__mutmut_33",
        ),
        "the review-count index kept in mind is never found (or never kept): it is read again from "
        "the file at each call, which gives the same counts",
    ),
    "session_scheduler.store.handoff_history.x_trim__mutmut_15": "`changed = None` for `changed = False`: both are false",
    "session_scheduler.store.handoff_tools.xǁHandoffToolsǁ__init____mutmut_9": "`_passed_review = None` for `False`: it is only tested for truth",
    "session_scheduler.store.handoff_tools.xǁHandoffToolsǁ_load__mutmut_5": "a missing progress.json or feature_list.json read as the reviews file's empty "
    "lists: append_session is refused for the same missing status field, and neither holds `features`",
    **dict.fromkeys(
        (
            "session_scheduler.store.handoff_tools.xǁHandoffToolsǁ_record_review__mutmut_7",
            "session_scheduler.store.handoff_tools.xǁHandoffToolsǁ_record_review__mutmut_9",
            "session_scheduler.store.handoff_tools.xǁHandoffToolsǁ_record_fix__mutmut_11",
            "session_scheduler.store.handoff_tools.xǁHandoffToolsǁ_record_fix__mutmut_13",
        ),
        "the default of `setdefault` on reviews.json's lists, never used: a validated reviews.json has "
        "both lists (its schema requires them) and a missing one is read as both lists, empty",
    ),
    **dict.fromkeys(
        (
            "session_scheduler.store.handoff_tools.xǁHandoffToolsǁ_mark_passing__mutmut_37",
            "session_scheduler.store.handoff_tools.xǁHandoffToolsǁ_mark_passing__mutmut_38",
            "session_scheduler.store.handoff_tools.xǁHandoffToolsǁ_mark_passing__mutmut_39",
            "session_scheduler.store.handoff_tools.xǁHandoffToolsǁ_mark_passing__mutmut_42",
            "session_scheduler.store.handoff_tools.xǁHandoffToolsǁ_mark_passing__mutmut_45",
            "session_scheduler.store.handoff_tools.xǁHandoffToolsǁ_mark_passing__mutmut_53",
            "session_scheduler.store.handoff_tools.xǁHandoffToolsǁ_mark_passing__mutmut_56",
            "session_scheduler.store.handoff_tools.xǁHandoffToolsǁ_save__mutmut_23",
            "session_scheduler.store.handoff_tools.xǁHandoffToolsǁ_save__mutmut_27",
        ),
        "what is remembered of the feature list's passing features (a fresh memo, the file parsed "
        "afresh, or nothing handed on): the set is derived again from the same features when asked",
    ),
    **dict.fromkeys(
        (
            "session_scheduler.store.handoff_tools.xǁHandoffToolsǁ_mark_passing__mutmut_41",
            "session_scheduler.store.handoff_tools.xǁHandoffToolsǁ_mark_passing__mutmut_49",
            "session_scheduler.store.handoff_tools.xǁHandoffToolsǁ_mark_passing__mutmut_50",
        ),
        "the file name handed to `validated`: `_load` validated the unchanged file earlier in the same "
        "call, so the remembered version is returned and the name is not used",
    ),
    **dict.fromkeys(
        (
            "session_scheduler.store.handoff_tools.xǁHandoffToolsǁ_save__mutmut_6",
            "session_scheduler.store.handoff_tools.xǁHandoffToolsǁ_save__mutmut_11",
        ),
        "the schema check of a write against no earlier version checks every entry, not only the "
        "changed ones; the unchanged ones were valid in the last validated version, so the verdict is "
        "the same",
    ),
    **dict.fromkeys(
        (
            "session_scheduler.core.confinement.x_reopened__mutmut_19",
            "session_scheduler.core.confinement.x_reopened__mutmut_21",
        ),
        "the deepest region as the greatest path rather than the one of most parts: every region "
        "holding an absolute PATH entry (Host.path keeps only those) is one of the entry's ancestors, "
        "so they form a chain in which each is a prefix of the next, and the greater of two is the "
        "longer",
    ),
    "session_scheduler.core.confinement.xǁHostǁof__mutmut_39": '`XXXX` for `""` as the PATH of an '
    "environment without one: neither is an absolute path, so both give no entries",
}
"""mutant name -> why it cannot change behaviour (filled from the survivors after review)."""

KILLED = {1, 3}
STATUS = {0: "survived", 5: "no tests", 33: "no tests", 34: "skipped", 36: "timeout", 24: "timeout"}


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line and not line.startswith("generations/")]


def prepare(work: Path, target: Target) -> None:
    """Copy the repository into `work` and configure mutmut for one target there."""
    for name in tracked_files():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, work / name)
    copied = sorted({name.split("/", 1)[0] for name in tracked_files()} - set(target.sources) - {"tests"})
    if (REPO / "node_modules").is_dir():  # the browser's server and the sandbox runtime, for the boxes' tests
        shutil.copytree(REPO / "node_modules", work / "node_modules", symlinks=True)
        copied.append("node_modules")
    settings = {
        "source_paths": list(target.sources),
        "also_copy": copied,
        "pytest_add_cli_args_test_selection": list(target.tests),
        "pytest_add_cli_args": ["-p", "no:cacheprovider", "-q"],
    }
    with (work / "pyproject.toml").open("a", encoding="utf-8") as handle:
        handle.write("\n[tool.mutmut]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items()))
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)


def _sandbox_runtime() -> dict[str, str]:
    """The checkout's sandbox runtime for the copy (the copy has no node_modules: tests that run
    the test command in the sandbox would find none), unless one is named already."""
    local = REPO / "node_modules" / ".bin" / "srt"
    return (
        {"AGENT_SANDBOX_RUNTIME": str(local)}
        if local.is_file() and "AGENT_SANDBOX_RUNTIME" not in os.environ
        else {}
    )


def run_mutmut(work: Path, children: int) -> float:
    started = time.monotonic()
    log = work / "mutmut.log"
    with log.open("w", encoding="utf-8") as out:
        proc = subprocess.run(
            [sys.executable, "-m", "mutmut", "run", "--max-children", str(children)],
            cwd=work,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **_sandbox_runtime()},
        )
    if proc.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
        raise SystemExit(f"mutmut failed (exit {proc.returncode}); log tail:\n{tail}")
    return time.monotonic() - started


def results(work: Path, target: Target) -> dict[str, str]:
    """Each mutant's status, from mutmut's per-file records."""
    statuses: dict[str, str] = {}
    for source in target.sources:
        meta = json.loads((work / "mutants" / f"{source}.meta").read_text(encoding="utf-8"))
        for name, code in meta["exit_code_by_key"].items():
            statuses[name] = "killed" if code in KILLED else STATUS.get(code, f"exit {code}")
    return statuses


def show(work: Path, name: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "mutmut", "show", name], cwd=work, capture_output=True, text=True, check=False
    )
    diff = [line for line in proc.stdout.splitlines() if line.startswith(("+ ", "- ", "+\t", "-\t"))]
    return "\n".join(f"      {line.strip()}" for line in diff[:6]) or "      (no diff shown)"


def report(name: str, target: Target, work: Path, seconds: float) -> bool:
    statuses = results(work, target)
    total = len(statuses)
    killed = sum(1 for s in statuses.values() if s == "killed")
    equivalent = [m for m in statuses if statuses[m] != "killed" and m in EQUIVALENT]
    counted = total - len(equivalent)
    score = killed / counted if counted else 1.0
    met = score >= target.goal
    print(f"\n== {name}: {', '.join(target.sources)} (tests: {', '.join(target.tests)}) ==")
    print(f"killed {killed}/{total} mutants in {seconds:.0f} s; {len(equivalent)} equivalent")
    print(
        f"score {score:.1%} of {counted} non-equivalent mutants (goal {target.goal:.0%}): {'met' if met else 'NOT met'}"
    )
    for mutant, status in sorted(statuses.items()):
        if status == "killed":
            continue
        why = EQUIVALENT.get(mutant)
        print(f"  {status}: {mutant}" + (f"  [equivalent: {why}]" if why else ""))
        if not why:
            print(show(work, mutant))
    return met


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "targets", nargs="*", metavar="TARGET", help=f"one of {sorted(TARGETS)} (default: all)"
    )
    parser.add_argument("--children", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--keep", action="store_true", help="keep the work folders")
    args = parser.parse_args()
    unknown = set(args.targets) - set(TARGETS)
    if unknown:
        parser.error(f"unknown target(s) {sorted(unknown)}; choose from {sorted(TARGETS)}")
    all_met = True
    for name in args.targets or list(TARGETS):
        target = TARGETS[name]
        work = Path(tempfile.mkdtemp(prefix=f"mutation-{name}-"))
        try:
            prepare(work, target)
            seconds = run_mutmut(work, args.children)
            all_met &= report(name, target, work, seconds)
        finally:
            if args.keep:
                print(f"  work folder kept: {work}")
            else:
                shutil.rmtree(work, ignore_errors=True)
    return 0 if all_met else 1


if __name__ == "__main__":
    sys.exit(main())
