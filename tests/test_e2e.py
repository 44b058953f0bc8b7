"""End-to-end: the user's command, the real bundled Claude Code CLI, the scripted model.

Every test runs `python autonomous_agent_demo.py ...` as a subprocess from the repository
root, exactly as a user would, against the robot agent of `scripted_model/` on 127.0.0.1,
and then judges the run only by what it left behind: the session log folders, the
hand-off files, `.agent_state.json`, the generated project's git history and the
scripted model's request log.

The product process itself gets a hermetic environment pointing at a dead loopback port
(so nothing it starts could reach a real API even if the offline environment leaked);
`--offline-demo` then points the CLI at its own scripted model.

Runs (about 1 s per session on 2 cores):
- `baseline`: 3 features, F002 sent back once, F003 rejected once, an architecture review
  every 2 features that asks for changes (14 sessions, shared by several tests);
- `fault_run`: 2 features with a 429, forbidden calls, invalid JSON and a commit on main;
- a killed-and-resumed copy of the baseline, plus a second instance hitting the lock;
- a run without `--offline-demo` against a server started by the test (custom models, token).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import SkippingClock, group_alive, wait_until

from scripted_model.hermetic import hermetic_env
from scripted_model.offline import RobotBrain
from scripted_model.scenario import Scenario
from scripted_model.server import ScriptedModelServer
from session_scheduler.core import layout
from session_scheduler.core.config import SessionType
from session_scheduler.core.policy import POLICIES
from session_scheduler.core.schemas import HANDOFF_SCHEMAS
from session_scheduler.guard import toolset
from session_scheduler.repo import gitops, workdirs
from session_scheduler.run.invariants import check_invariants
from session_scheduler.store import events, progress, statefile
from session_scheduler.store.authority import FileAuthority

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
ENTRY = "autonomous_agent_demo.py"
RUN_TIMEOUT = 240
DEAD_LOOPBACK = "http://127.0.0.1:9"
"""The discard port: nothing listens there, so a CLI that used it would simply fail."""

INIT, IMPL, REVIEW, FIX, ARCH = "INITIALIZER", "IMPLEMENT", "REVIEW", "FIX", "ARCHITECTURE"

MAIN_SCENARIO: dict[str, Any] = {
    "description": "3 features: F002 sent back once, F003 rejected once, architecture asks for changes",
    "features": 3,
    "reviews": {"F002": ["REQUEST_CHANGES", "PASS"], "F003": ["REJECT", "PASS"]},
    "architecture": ["REQUEST_CHANGES"],
}
MAIN_OPTIONS = ["--architecture-interval", "2"]
MAIN_SEQUENCE = [
    INIT,
    IMPL,  # 2  F001
    REVIEW,  # 3  F001 PASS (1 completed)
    IMPL,  # 4  F002
    REVIEW,  # 5  F002 REQUEST_CHANGES
    FIX,  # 6  F002
    REVIEW,  # 7  F002 PASS (2 completed: an architecture review is due)
    ARCH,  # 8  REQUEST_CHANGES
    FIX,  # 9  arch/<review id>
    REVIEW,  # 10 arch branch PASS
    IMPL,  # 11 F003
    REVIEW,  # 12 F003 REJECT (branch deleted, retried)
    IMPL,  # 13 F003 again
    REVIEW,  # 14 F003 PASS: done
]

FAULT_SCENARIO: dict[str, Any] = {
    "description": "faults: 429, forbidden calls, invalid JSON, commits on main (seen and hidden)",
    "features": 2,
    "faults": [
        {"session": 2, "kind": "http_429", "request": 2},
        {"session": 2, "kind": "forbidden_command", "command": "git push origin main"},
        {"session": 2, "kind": "forbidden_write", "file": ".claude_settings.json"},
        {"session": 3, "kind": "invalid_json", "file": "reviews.json"},
        {"session": 3, "kind": "forbidden_write", "file": "todo/__main__.py"},
        {"session": 4, "kind": "commit_on_main"},
        {"session": 4, "kind": "hidden_commit_on_main"},
    ],
}


# --- helpers ---------------------------------------------------------------------------


def product_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The product process's own environment: hermetic, private HOME, projects under tmp."""
    env = hermetic_env(DEAD_LOOPBACK, tmp / "product-home", max_retries=0)
    env["AGENT_GENERATIONS_DIR"] = str(tmp / "generations")
    env.update(extra)
    return env


def command(project: Path, *args: str) -> list[str]:
    return [sys.executable, ENTRY, "--project-dir", str(project), *args]


def offline_command(project: Path, scenario: Path, *args: str) -> list[str]:
    return command(project, "--offline-demo", "--scenario", str(scenario), *args)


def run(
    cmd: list[str], env: dict[str, str], timeout: float = RUN_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def explain(proc: subprocess.CompletedProcess[str]) -> str:
    return (
        f"exit {proc.returncode}\n--- stdout (tail)\n{proc.stdout[-6000:]}\n--- stderr\n{proc.stderr[-3000:]}"
    )


def write_scenario(path: Path, data: dict[str, Any]) -> Path:
    Scenario.from_json(data)  # a typo in a test scenario should fail here, not mid-run
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


def log_root(project: Path) -> Path:
    return project / layout.LOG_DIR


def session_dirs(project: Path, *, interrupted: bool = False) -> list[Path]:
    """Session log folders in session order (completed ones unless interrupted=True)."""
    dirs = sorted(p for p in log_root(project).glob("session_*") if p.is_dir())
    return [p for p in dirs if (".interrupted-" in p.name) == interrupted]


_SESSION_DIR = re.compile(r"^session_(\d{4})_([A-Z]+)$")


def sequence(project: Path) -> list[str]:
    """Roles of the completed sessions, from the log folder names (sorted)."""
    roles = []
    for number, path in enumerate(session_dirs(project), start=1):
        match = _SESSION_DIR.match(path.name)
        assert match, f"unexpected log folder {path.name}"
        assert int(match.group(1)) == number, f"session numbers are not contiguous at {path.name}"
        roles.append(match.group(2))
    return roles


def session_dir(project: Path, number: int) -> Path:
    (found,) = log_root(project).glob(f"session_{number:04d}_*[A-Z]")
    return found


def load_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def result_of(project: Path, number: int) -> dict[str, Any]:
    data: dict[str, Any] = load_json(session_dir(project, number) / "result.json")
    return data


def state_of(project: Path) -> dict[str, Any]:
    data: dict[str, Any] = load_json(project / layout.STATE_FILE)
    return data


def totals_of(project: Path) -> events.Totals:
    """What the project's event log adds up to (the only place totals are kept)."""
    return events.Totals.of(events.read(events.log_path(project)))


def session_lines(stdout: str) -> dict[int, str]:
    """The product's one-line verdict per session: `--- Session N ROLE[ VERDICT]: ...`."""
    return {int(m.group(1)): m.group(0) for m in re.finditer(r"^--- Session (\d+) .*$", stdout, re.MULTILINE)}


def git(project: Path, *args: str) -> str:
    """A read-only git command in the generated project."""
    return subprocess.run(
        ["git", *args], cwd=project, capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()


def is_ancestor(project: Path, ancestor: str, descendant: str) -> bool:
    proc = subprocess.run(
        ["git", "merge-base", "--is-ancestor", ancestor, descendant], cwd=project, check=False, timeout=60
    )
    return proc.returncode == 0


def branches(project: Path) -> dict[str, str]:
    out = git(project, "for-each-ref", "refs/heads", "--format=%(refname:short) %(objectname)")
    return dict(line.split(" ", 1) for line in out.splitlines())


def first_parent_history(project: Path) -> list[tuple[str, list[str], str]]:
    """(sha, parents, subject) on main's first-parent chain, oldest first."""
    out = git(project, "log", "--first-parent", "--reverse", "--format=%H|%P|%s", "main")
    rows = []
    for line in out.splitlines():
        sha, parents, subject = line.split("|", 2)
        rows.append((sha, parents.split(), subject))
    return rows


def progress_entries(project: Path) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = load_json(project / "progress.json")["sessions"]
    return entries


def final_summary(project: Path) -> dict[str, Any]:
    """What a completed run leaves: compared between a resumed and an uninterrupted run."""
    state = state_of(project)
    return {
        "next_session": state["lane"]["role"],
        "passing": state["backlog"]["passing"],
        "blocked": state["backlog"]["blocked"],
        "features_completed": len(state["backlog"]["passing"]),
        "sequence": sequence(project),
        "main_files": git(project, "ls-tree", "-r", "main", "--name-only").splitlines(),
        "main_blobs": git(project, "ls-tree", "-r", "main").splitlines(),
        "feature_list": load_json(project / "feature_list.json"),
    }


@dataclass(frozen=True)
class Run:
    project: Path
    scenario: Path
    proc: subprocess.CompletedProcess[str]
    env: dict[str, str]


def full_run(tmp: Path, scenario: dict[str, Any], *options: str) -> Run:
    path = write_scenario(tmp / "scenario.json", scenario)
    project = tmp / "app"
    env = product_env(tmp)
    proc = run(offline_command(project, path, *options), env)
    assert proc.returncode == 0, explain(proc)
    return Run(project, path, proc, env)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One uninterrupted run of MAIN_SCENARIO, shared by the tests that only read it."""
    return full_run(tmp_path_factory.mktemp("baseline"), MAIN_SCENARIO, *MAIN_OPTIONS)


@pytest.fixture(scope="module")
def fault_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One run of FAULT_SCENARIO, shared by the fault tests."""
    return full_run(tmp_path_factory.mktemp("faults"), FAULT_SCENARIO)


# --- 1. the sequence of session types --------------------------------------------------


def test_session_sequence_of_the_scenario(baseline: Run) -> None:
    assert sequence(baseline.project) == MAIN_SEQUENCE, baseline.proc.stdout[-4000:]

    state = state_of(baseline.project)
    assert state["lane"]["role"] == "DONE"
    assert state["backlog"]["passing"] == ["F001", "F002", "F003"]
    assert state["backlog"]["blocked"] == []
    assert load_json(baseline.project / "progress.json")["features_completed"] == 3
    assert state["backlog"]["rejections"] == {"F003": 1}
    assert state["architecture_checked_at"] == 2
    assert state["session_count"] == len(MAIN_SEQUENCE)
    assert state["in_flight"] == {}
    totals = totals_of(baseline.project)
    assert totals.failed == 0 and totals.not_counted == {}
    assert totals.sessions_by_role == {
        role: MAIN_SEQUENCE.count(role) for role in sorted((INIT, IMPL, REVIEW, FIX, ARCH))
    }

    reviews = load_json(baseline.project / "reviews.json")["reviews"]
    assert [(r["kind"], r["feature_id"], r["verdict"]) for r in reviews] == [
        ("feature", "F001", "PASS"),
        ("feature", "F002", "REQUEST_CHANGES"),
        ("feature", "F002", "PASS"),
        ("architecture", None, "REQUEST_CHANGES"),
        ("feature", None, "PASS"),  # the arch/<id> branch, merged like a feature branch
        ("feature", "F003", "REJECT"),
        ("feature", "F003", "PASS"),
    ]
    graded = [r.get("acceptance") for r in reviews if r["feature_id"]]  # run through the real CLI's sandbox
    assert all(results and all(step["passed"] for step in results) for results in graded), graded
    assert all(
        line.endswith(")") and "verified" in line for line in session_lines(baseline.proc.stdout).values()
    )
    assert "3/3 features passing, 14 sessions in all (14 in this run)" in baseline.proc.stdout


# --- 2. the generated project's git history --------------------------------------------


def init_tools(folder: Path) -> list[str]:
    """The tools a session's `init` message lists (its transcript's first SystemMessage)."""
    for line in (folder / "transcript.jsonl").read_text(encoding="utf-8").splitlines():
        message = json.loads(line)
        if message.get("type") == "SystemMessage" and message.get("subtype") == "init":
            return list(message["data"]["tools"])
    raise AssertionError(f"no init message in {folder}")


def test_every_session_is_offered_exactly_its_roles_tools(baseline: Run) -> None:
    """Claude Code's other tools (subagents, skills, workflows, web, cron, memory) are off for every
    role, and the hand-off tools are loaded up front (not deferred behind ToolSearch)."""
    seen = set()
    for folder in session_dirs(baseline.project):
        role = SessionType(_SESSION_DIR.match(folder.name).group(2))  # type: ignore[union-attr]
        assert sorted(init_tools(folder)) == sorted(toolset.session_tools(role)), folder.name
        seen.add(role)
    assert seen == set(POLICIES), "every role that runs a session"
    requests = [
        json.loads(line)
        for line in (log_root(baseline.project) / "scripted_model_requests.jsonl").read_text().splitlines()
    ]
    offered = [r["tools"] for r in requests if r["has_tools"]]
    assert offered and all("mcp__handoff__append_session" in tools for tools in offered), (
        "the hand-off tools' schemas are in every request (not deferred behind ToolSearch)"
    )
    assert not any({"ToolSearch", "Agent", "Skill"} & set(tools) for tools in offered)


def test_git_history_of_the_generated_project(baseline: Run, tmp_path: Path) -> None:
    project = baseline.project
    heads = branches(project)
    reviews = load_json(project / "reviews.json")["reviews"]
    (arch_review,) = [r for r in reviews if r["kind"] == "architecture"]
    assert set(heads) == {
        "main",
        "feature/F001",
        "feature/F002",
        "feature/F003",
        f"arch/{arch_review['review_id']}",
    }
    for branch, tip in heads.items():
        assert is_ancestor(project, tip, heads["main"]), f"{branch} is not merged into main"

    history = first_parent_history(project)
    (root, root_parents, _), (init_commit, init_parents, _) = history[0], history[1]
    assert root_parents == []
    assert set(git(project, "ls-tree", "-r", "--name-only", root).splitlines()) == {
        ".gitignore",
        "app_spec.txt",
    }
    assert init_parents == [root]
    initializer_entry = load_json(session_dir(project, 1) / "post" / "progress.json")["sessions"][-1]
    assert initializer_entry["agent_type"] == INIT
    assert initializer_entry["commit_range"]["to"] == init_commit
    merges = history[2:]
    assert [len(parents) for _, parents, _ in merges] == [2] * len(merges), (
        "a commit on main's first-parent history is neither the scheduler's, the INITIALIZER's nor a merge"
    )
    merged_tips = {parents[1] for _, parents, _ in merges}
    assert merged_tips == {tip for branch, tip in heads.items() if branch != "main"}

    # IMPLEMENT and FIX committed on their branches, never on main.
    main_line = {sha for sha, _, _ in history}
    work = [e for e in progress_entries(project) if e["agent_type"] in (IMPL, FIX)]
    assert len(work) == MAIN_SEQUENCE.count(IMPL) + MAIN_SEQUENCE.count(FIX)
    for entry in work:
        to = entry["commit_range"]["to"]
        assert re.fullmatch(r"[0-9a-f]{40}", to), entry
        assert to not in main_line, f"session {entry['session_id']} committed on main"
    merged_work = [e for e in work if e["features_touched"] != ["F003"] or e["session_id"] == 13]
    for entry in merged_work:
        assert is_ancestor(project, entry["commit_range"]["to"], "main"), entry
    # the rejected first attempt of F003 (session 11) was deleted with its branch, never merged
    (rejected,) = [e for e in work if e["session_id"] == 11]
    assert not is_ancestor(project, rejected["commit_range"]["to"], "main")

    # The generated project's own tests pass on a clean export of main.
    export = tmp_path / "main-export"
    export.mkdir()
    archive = tmp_path / "main.tar"
    subprocess.run(["git", "archive", "-o", str(archive), "main"], cwd=project, check=True, timeout=60)
    with tarfile.open(archive) as tar:
        tar.extractall(export, filter="data")
    tests = subprocess.run(
        ["bash", "init.sh"], cwd=export, capture_output=True, text=True, timeout=120, check=False
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert re.search(r"Ran [1-9]\d* tests?", tests.stderr), tests.stderr


# --- 3. the hand-off files after every session -----------------------------------------


def handoff_at(folder: Path) -> progress.Handoff:
    def load(name: str) -> Any:
        path = folder / name
        return load_json(path) if path.exists() else None

    return progress.Handoff(load("feature_list.json"), load("progress.json"), load("reviews.json"))


@pytest.mark.parametrize("which", ["baseline", "fault_run"])
def test_handoff_files_validate_after_every_session(which: str, request: pytest.FixtureRequest) -> None:
    the_run: Run = request.getfixturevalue(which)
    dirs = session_dirs(the_run.project)
    assert dirs
    for folder in dirs:
        role = _SESSION_DIR.match(folder.name).group(2)  # type: ignore[union-attr]
        post = folder / "post"
        names = sorted(p.name for p in post.glob("*.json"))
        assert names == sorted(progress.KEPT_PER_SESSION), f"{folder.name}: post copies {names}"
        changes = load_json(
            folder / "changes.json"
        )  # feature_list.json grows with the project: its changes only
        assert not changes["passes"] or role == REVIEW, f"{folder.name}: {role} changed passes {changes}"
        for path in post.glob("*.json"):
            progress.validate(load_json(path), HANDOFF_SCHEMAS[path.name], f"{folder.name}/post/{path.name}")
        # and the session respected the hand-off contract (for a failed session the post
        # copies are the restored pre-session files, which trivially do)
        problems = check_invariants(handoff_at(folder / "pre"), handoff_at(post), SessionType(role))
        assert problems == [], f"{folder.name}: {problems}"
    # the files the run ends with are valid and are what the restore point's post copies restore
    # (the feature list's copy is a base: restored with the passes the state verified)
    passing = statefile.load(the_run.project).state.backlog.passing  # type: ignore[union-attr]
    for name in layout.HANDOFF_FILES:
        final = progress.read_json(the_run.project / name, HANDOFF_SCHEMAS[name])
        copy = progress.restore_point(the_run.project, "post") / name
        last_post = json.loads(
            progress._with_passes(copy.read_text(), passing) if name == progress.BASE else copy.read_text()
        )
        if name == "progress.json":  # the scheduler writes the DONE status after the last copy
            status = progress.STATUS_FIELDS
            final = {k: v for k, v in final.items() if k not in status}
            last_post = {k: v for k, v in last_post.items() if k not in status}
        assert final == last_post, name


# --- 4. the role's settings reach the CLI ----------------------------------------------


def test_forbidden_calls_are_denied_by_the_cli(fault_run: Run, baseline: Run) -> None:
    project = fault_run.project
    denials = result_of(project, 2)["permission_denials"]
    denied = {
        (d["tool_name"], d["tool_input"].get("command") or d["tool_input"].get("file_path")) for d in denials
    }
    clone = workdirs.path_of(project, 0)  # where the session worked
    assert denied == {("Bash", "git push origin main"), ("Write", str(clone / ".claude_settings.json"))}

    # REVIEW is offered no Write tool at all: its call to write a product file is refused by the
    # CLI as a tool the session does not have (no permission prompt, no denial to count).
    assert result_of(project, 3)["permission_denials"] == []
    review = (session_dir(project, 3) / "transcript.jsonl").read_text(encoding="utf-8")
    assert '"name": "Write"' in review and "No such tool available: Write" in review
    assert "overwritten by the agent" not in git(project, "show", "main:todo/__main__.py")

    # The CLI refused them, on the scheduler's hook (the denial is its tool result in the transcript).
    transcript = (session_dir(project, 2) / "transcript.jsonl").read_text(encoding="utf-8")
    for d in denials:
        results = re.findall(
            rf'"tool_use_id": "{re.escape(d["tool_use_id"])}", "content": "([^"]*)"', transcript
        )
        assert results and all("denied" in text or "scheduler policy" in text for text in results), (
            d,
            results,
        )

    # The audit trail: each denial with the rule that refused it, a line on the console, a count.
    audit = [
        json.loads(line) for line in (session_dir(project, 2) / "denials.jsonl").read_text().splitlines()
    ]
    assert {(a["role"], a["tool"], a["rule"]) for a in audit} == {
        (
            "IMPLEMENT",
            "Bash",
            "scheduler policy: `git push` with these arguments is not among IMPLEMENT's git commands",
        ),
        ("IMPLEMENT", "Write", "scheduler policy: .claude_settings.json belongs to the scheduler"),
    }
    assert "DENIED Bash: git push origin main (scheduler policy: `git push`" in fault_run.proc.stdout
    assert totals_of(project).denials_by_role == {"IMPLEMENT": 3}

    # The Bash policy hook refused the commit on main in session 4, and said why.
    audit = [
        json.loads(line) for line in (session_dir(project, 4) / "denials.jsonl").read_text().splitlines()
    ]
    assert [(a["tool"], a["input"]["command"]) for a in audit] == [
        ("Bash", "git add README.md && git commit -q -m 'stray commit on main'")
    ]
    assert "IMPLEMENT may not change the branch main" in audit[0]["rule"]

    # Sessions without a forbidden call had no denial at all, and the faulty run finished.
    quiet = [n for n in range(1, len(sequence(project)) + 1) if n not in (2, 4)]
    assert all(result_of(project, n)["permission_denials"] == [] for n in quiet)
    assert all(result_of(baseline.project, n)["permission_denials"] == [] for n in range(1, 15))
    assert state_of(project)["lane"]["role"] == "DONE"
    assert state_of(project)["backlog"]["passing"] == ["F001", "F002"]


# --- 5. kill and resume; the lock --------------------------------------------------------


def wait_for(predicate: Any, proc: subprocess.Popen[str], what: str, timeout: float = 120) -> None:
    """Wait until `predicate()` holds once (it is not asked again: a process seen at work may end a
    moment later), failing if the scheduler exits first."""
    seen = wait_until(
        lambda: "seen" if predicate() else "exited" if proc.poll() is not None else "", what, timeout
    )
    if seen == "exited":
        pytest.fail(f"the scheduler exited ({proc.returncode}) before {what}")


@pytest.fixture
def killable() -> Iterator[list[subprocess.Popen[str]]]:
    """Popen'ed schedulers (each its own process group) killed if a test leaves them running."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def transcript_has(folder: Path, text: str) -> bool:
    transcript = folder / "transcript.jsonl"
    return transcript.exists() and text in transcript.read_text(encoding="utf-8")


def main_subject(project: Path) -> str:
    proc = subprocess.run(
        ["git", "log", "-1", "--format=%s", "main"], cwd=project, capture_output=True, text=True, check=False
    )
    return proc.stdout.strip()


KILL_POINTS = {
    # IMPLEMENT F002, right after it created its branch and before it committed
    "implement": (4, IMPL, lambda folder, project: transcript_has(folder, "git checkout -q -b feature/F002")),
    # REVIEW F002 (PASS), after its merge reached its clone's main but before it set `passes`
    "review-after-merge": (
        7,
        REVIEW,
        lambda folder, project: (
            transcript_has(folder, "git merge -q --no-ff feature/F002")
            and main_subject(workdirs.path_of(project, 0)) == "Merge feature/F002"
        ),
    ),
}


@pytest.mark.parametrize("kill_point", list(KILL_POINTS))
def test_kill_and_resume_matches_an_uninterrupted_run(
    kill_point: str, baseline: Run, tmp_path: Path, killable: list[subprocess.Popen[str]]
) -> None:
    number, role, reached = KILL_POINTS[kill_point]
    project = tmp_path / "app"
    env = product_env(tmp_path)
    cmd = offline_command(project, baseline.scenario, *MAIN_OPTIONS)
    out = (tmp_path / "first-run.log").open("w", encoding="utf-8")
    first = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    killable.append(first)

    # A second instance on the same project, while the first holds the lock: refused at once.
    wait_for(lambda: (log_root(project) / "session_0001_INITIALIZER").is_dir(), first, "session 1")
    started = time.monotonic()
    second = run(cmd, env, timeout=60)
    elapsed = time.monotonic() - started
    assert first.poll() is None, "the first scheduler ended before the second instance was refused"
    assert second.returncode != 0, explain(second)
    assert "another scheduler is already running" in second.stdout + second.stderr, explain(second)
    assert elapsed < 20
    assert "=== Session" not in second.stdout  # it ran nothing

    # SIGKILL the whole process group in the middle of the chosen session.
    folder = log_root(project) / f"session_{number:04d}_{role}"
    wait_for(lambda: reached(folder, project), first, f"the middle of session {number}")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    out.close()
    wait_until(lambda: not group_alive(first.pid), "every process of the killed scheduler to end", 10)
    assert not (folder / "result.json").exists(), f"session {number} had already finished: the kill came late"
    assert state_of(project)["in_flight"]["0"]["number"] == number

    # The same command again runs to completion.
    resumed = run(cmd, env)
    assert resumed.returncode == 0, explain(resumed)
    assert f"Resuming: session {number} ({role}) again: it was interrupted" in resumed.stdout
    (interrupted,) = session_dirs(project, interrupted=True)
    assert interrupted.name.startswith(f"{folder.name}.interrupted-")
    assert totals_of(project).not_counted == {"interrupted": 1}
    assert totals_of(project).failed == 0

    assert final_summary(project) == final_summary(baseline.project)
    assert sequence(project) == MAIN_SEQUENCE
    merges = [subject for _, parents, subject in first_parent_history(project) if len(parents) == 2]
    assert merges == [
        subject for _, parents, subject in first_parent_history(baseline.project) if len(parents) == 2
    ]


def test_refused_second_instance_leaves_the_saved_options_alone(baseline: Run, tmp_path: Path) -> None:
    project = tmp_path / "app"
    shutil.copytree(baseline.project, project, symlinks=True)
    saved = (project / progress.CONFIG_FILE).read_text(encoding="utf-8")
    with FileAuthority(project).hold():  # stands in for a running scheduler
        proc = run(
            offline_command(project, baseline.scenario, *MAIN_OPTIONS, "--max-fix-rounds", "1"),
            product_env(tmp_path),
            timeout=60,
        )
    assert proc.returncode != 0 and "another scheduler is already running" in proc.stderr, explain(proc)
    assert (project / progress.CONFIG_FILE).read_text(encoding="utf-8") == saved


# --- 6. faults ---------------------------------------------------------------------------


def test_http_429_is_retried_by_the_cli(fault_run: Run) -> None:
    project = fault_run.project
    assert sequence(project)[:2] == [INIT, IMPL]
    result = result_of(project, 2)
    assert result["is_error"] is False and result["subtype"] == "success", result
    assert result["api_error_status"] is None
    transcript = [json.loads(line) for line in (session_dir(project, 2) / "transcript.jsonl").open()]
    retries = [m for m in transcript if m.get("subtype") == "api_retry"]
    assert len(retries) == 1 and retries[0]["data"]["error_status"] == 429, retries
    assert re.search(r"\[IMPLEMENT\] API retry 1/\d+: rate_limit \(429\)", fault_run.proc.stdout)
    assert re.search(r"--- Session 2 IMPLEMENT: verified", fault_run.proc.stdout)
    assert all(not result_of(project, n)["is_error"] for n in range(1, len(sequence(project)) + 1))


def test_invalid_json_an_agent_writes_in_its_clone_changes_no_record(fault_run: Run) -> None:
    """The records are the project's, written only through the hand-off tools, which validate:
    a REVIEW that writes a broken reviews.json in its clone changes nothing the scheduler reads."""
    project = fault_run.project
    assert sequence(project) == [INIT, IMPL, REVIEW, IMPL, REVIEW]
    lines = session_lines(fault_run.proc.stdout)
    assert "Session 3 REVIEW PASS: verified" in lines[3], lines[3]
    transcript = (session_dir(project, 3) / "transcript.jsonl").read_text(encoding="utf-8")
    assert "this is not json" in transcript  # it did write it, in its clone
    for name in progress.KEPT_PER_SESSION:  # the records after it validate
        progress.validate(load_json(session_dir(project, 3) / "post" / name), HANDOFF_SCHEMAS[name], name)
    merges = [subject for _, parents, subject in first_parent_history(project) if len(parents) == 2]
    assert merges == ["Merge feature/F001", "Merge feature/F002"]
    reviews = load_json(project / "reviews.json")["reviews"]
    assert [(r["feature_id"], r["verdict"]) for r in reviews] == [("F001", "PASS"), ("F002", "PASS")]
    assert state_of(project)["lane"]["role"] == "DONE"


def test_commits_on_main_are_stopped_before_they_land(fault_run: Run) -> None:
    """The Bash policy refuses the commit it sees; the sandbox stops the one in a script: an
    IMPLEMENT's git runs inside it, where `main`'s ref file and packed-refs are unwritable."""
    project = fault_run.project
    lines = session_lines(fault_run.proc.stdout)
    assert "Session 4 IMPLEMENT: verified" in lines[4], lines[4]
    assert re.search(
        r"DENIED Bash: git add README.md && git commit .*IMPLEMENT may not change the branch main",
        fault_run.proc.stdout,
    )
    assert (
        "couldn't set 'refs/heads/main'"
        in (project / ".agent_logs" / "session_0004_IMPLEMENT" / "transcript.jsonl").read_text()
    )
    history = first_parent_history(project)
    assert all(subject != "stray commit on main" for _, _, subject in history)
    assert [len(parents) for _, parents, _ in history[2:]] == [2, 2]
    assert "# stray" not in git(project, "show", "main:README.md")
    assert sequence(project) == [INIT, IMPL, REVIEW, IMPL, REVIEW]
    assert state_of(project)["lane"]["role"] == "DONE"
    assert state_of(project)["backlog"]["passing"] == ["F001", "F002"]
    assert totals_of(project).failed == 0


# --- 7. any Anthropic-compatible endpoint -----------------------------------------------

CUSTOM_MODELS = {
    INIT: "custom-init-model",
    IMPL: "custom-impl-model",
    REVIEW: "custom-review-model",
    FIX: "custom-fix-model",
    ARCH: "custom-arch-model",
}


def test_any_endpoint_gets_the_per_role_models_and_the_token(tmp_path: Path) -> None:
    scenario = Scenario.from_json({"features": 2, "reviews": {"F001": ["REQUEST_CHANGES", "PASS"]}})
    project = tmp_path / "app"
    token = "some-token"
    with ScriptedModelServer(RobotBrain(scenario), log_path=tmp_path / "requests.jsonl") as server:
        env = hermetic_env(server.base_url, tmp_path / "cli-home", auth_token=token)
        env["API_TIMEOUT_MS"] = "20000"
        env["AGENT_GENERATIONS_DIR"] = str(tmp_path / "generations")
        cmd = command(
            project,
            "--architecture-interval", "1",
            "--test-command", "bash init.sh",
            "--initializer-model", CUSTOM_MODELS[INIT],
            "--implement-model", CUSTOM_MODELS[IMPL],
            "--review-model", CUSTOM_MODELS[REVIEW],
            "--fix-model", CUSTOM_MODELS[FIX],
            "--architecture-model", CUSTOM_MODELS[ARCH],
        )  # fmt: skip
        proc = run(cmd, env)
        requests = server.requests
    assert proc.returncode == 0, explain(proc)
    assert "Offline demo" not in proc.stdout
    assert sequence(project) == [INIT, IMPL, REVIEW, FIX, REVIEW, ARCH, IMPL, REVIEW]

    main = [r for r in requests if r["path"].startswith("/v1/messages") and r["has_tools"]]
    assert main and all(r["status"] == 200 for r in main)
    models: dict[str, set[str]] = {}
    for r in main:
        models.setdefault(r["role"], set()).add(r["model"])
    assert models == {role: {model} for role, model in CUSTOM_MODELS.items()}
    # every session the log folders show reached this server, under its own session id
    session_ids = {result_of(project, n)["session_id"] for n in range(1, 9)}
    assert session_ids == {r["session_id"] for r in main}
    # the token reached the server on every request, and no API key was sent instead
    assert {r["auth"] for r in requests} == {f"bearer:{token}"}
    assert state_of(project)["backlog"]["passing"] == ["F001", "F002"]


def test_one_invocation_waits_out_a_usage_limit_and_backs_off_a_529_burst(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real CLI against the scripted model: a usage-limit window in session 2 and a 529 burst
    that outlasts the CLI's own retries in session 3. One invocation finishes, exit 0, having
    waited for the reset and backed off (on a clock that does not really sleep)."""
    from click.testing import CliRunner

    from session_scheduler.testing.seams import active_sandbox
    from session_scheduler.view.cli import main

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    scenario = write_scenario(
        tmp_path / "night.json",
        {
            "features": 1,
            "faults": [
                {"session": 2, "kind": "usage_limit", "request": 2, "reset_in_seconds": 600},
                {"session": 3, "kind": "http_529", "request": 1, "times": 6},
            ],
        },
    )
    clock = SkippingClock()
    project = tmp_path / "night"
    args = ["--project-dir", str(project), "--offline-demo", "--scenario", str(scenario)]
    result = CliRunner().invoke(main, args, obj={"preflight": active_sandbox, "clock": clock})
    assert result.exit_code == 0, result.output
    waited = sum(clock.sleeps)  # in short steps (a Ctrl-C reaches a waiting lane within a second)
    assert 650 <= waited <= 600 + 60 + 5 + 36 + 72  # the reset and its margin, two back-offs (less real time)
    assert "usage limit was reached: waiting until" in result.output
    assert result.output.count("kept failing (529)") >= 2
    state = state_of(project)
    assert state["backlog"]["passing"] == ["F001"] and state["in_flight"] == {}
    assert totals_of(project).not_counted == {"usage_limit": 1, "outage": 2}
    assert totals_of(project).failed == 0 and state["lane"]["attempts"] == 0
    assert sequence(project) == [INIT, IMPL, REVIEW]
    kept = sorted(
        p.name.split(".interrupted-")[1].split("-")[0]
        for p in log_root(project).iterdir()
        if ".interrupted-" in p.name
    )
    assert kept == ["outage", "outage", "usage_limit"]  # every cut transcript kept beside its rerun


def test_no_wait_stops_at_a_usage_limit_and_the_next_run_reruns_the_session(tmp_path: Path) -> None:
    """`--no-wait`: exit 3 with the reset time; the rerun (after the reset) finishes the project."""
    env = product_env(tmp_path)
    project = tmp_path / "limited"
    limited = write_scenario(
        tmp_path / "limited.json",
        {"features": 1, "faults": [{"session": 2, "kind": "usage_limit", "reset_in_seconds": 0}]},
    )
    first = run(offline_command(project, limited, "--no-wait"), env)
    assert first.returncode == 3, explain(first)
    assert "usage limit reached; it resets at" in first.stderr + first.stdout
    state = state_of(project)
    assert state["in_flight"]["0"]["number"] == 2 and state["in_flight"]["0"]["why"] == "usage_limit"
    assert state["lane"]["role"] == IMPL
    assert not (log_root(project) / "session_0002_IMPLEMENT" / "post").exists()
    state["in_flight"]["0"]["wait_until"] = time.time() - 1  # the user comes back after the reset
    (project / layout.STATE_FILE).write_text(json.dumps(state))
    after_reset = write_scenario(tmp_path / "after.json", {"features": 1})
    second = run(offline_command(project, after_reset), env)
    assert second.returncode == 0, explain(second)
    assert "Resuming: session 2 (IMPLEMENT) again: it was cut short (usage limit)" in second.stdout
    assert "waiting until" not in second.stdout
    assert sequence(project) == [INIT, IMPL, REVIEW]
    assert state_of(project)["backlog"]["passing"] == ["F001"]


def test_a_budget_cut_session_is_rerun_once_the_budget_is_raised(tmp_path: Path) -> None:
    """The CLI ends a session whose share of the budget is spent; raising it resumes the run."""
    env = product_env(tmp_path)
    project = tmp_path / "budget"
    scenario = write_scenario(tmp_path / "one.json", {"features": 1})
    first = run(offline_command(project, scenario, "--max-budget-usd", "0.65"), env)
    assert first.returncode == 3, explain(first)
    assert "budget" in first.stdout
    cut = [
        json.loads((d / "result.json").read_text())
        for d in log_root(project).iterdir()
        if (d / "result.json").exists() and "error_max_budget_usd" in (d / "result.json").read_text()
    ]
    assert cut and cut[0]["terminal_reason"] == "budget_exhausted"
    assert totals_of(project).failed == 0
    second = run(offline_command(project, scenario, "--max-budget-usd", "50"), env)
    assert second.returncode == 0, explain(second)
    assert sequence(project) == [INIT, IMPL, REVIEW]
    assert json.loads((project / progress.CONFIG_FILE).read_text())["max_budget_usd"] == 50


def test_status_json_follows_a_live_run_and_agrees_with_its_event_log(tmp_path: Path) -> None:
    """`status --json` polled while the real CLI works: every answer is the fold of a prefix of the
    event log, names the session in flight, and comes back quickly; after the run it says so."""
    env = product_env(tmp_path)
    project = tmp_path / "watched"
    scenario = write_scenario(
        tmp_path / "two.json", {"features": 2, "reviews": {"F001": ["REQUEST_CHANGES", "PASS"]}}
    )
    proc = subprocess.Popen(
        offline_command(project, scenario),
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    snapshots: list[dict[str, Any]] = []
    latencies: list[float] = []
    try:
        while proc.poll() is None:
            if (project / layout.STATE_FILE).exists():
                begun = time.monotonic()
                answer = run(
                    [sys.executable, ENTRY, "status", "--project-dir", str(project), "--json"],
                    env,
                    timeout=60,
                )
                latencies.append(time.monotonic() - begun)
                assert answer.returncode == 0, explain(answer)
                snapshots.append(json.loads(answer.stdout))
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.2)  # the run's end, or the next status call
        out, err = proc.communicate(timeout=RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    live = [s for s in snapshots if s["running"] and s["in_flight"]]
    assert len(live) >= 3, f"only {len(live)} live answers of {len(snapshots)}"
    log = events.read(events.log_path(project))
    prefixes = {
        (t.sessions, round(t.cost_usd, 6), t.spend.total_tokens): t
        for t in (events.Totals.of(log[:k]) for k in range(len(log) + 1))
    }
    for snap in live:
        key = (snap["sessions"]["total"], round(snap["cost_usd"], 6), snap["tokens"]["total"])
        assert key in prefixes, f"status {key} is no prefix of the event log"
        flight = snap["in_flight"]
        started = [e for e in log if e["kind"] == "session_started" and e["session"] == flight["session"]]
        assert started and started[0]["role"] == flight["role"] and started[0]["model"] == flight["model"]
        assert snap["features"]["total"] in (0, 2) and snap["phase"] in (INIT, IMPL, REVIEW, FIX, ARCH)
    assert (
        sorted(latencies)[len(latencies) // 2] < 3.0
    )  # the median answer; bench/offline_demo.py measures it
    final = json.loads(
        run([sys.executable, ENTRY, "status", "--project-dir", str(project), "--json"], env).stdout
    )
    totals = totals_of(project)
    assert final["running"] is False and final["run"]["ended"]["status"] == "done"
    assert final["features"] == {"total": 2, "passing": 2, "blocked": 0}
    assert (
        final["sessions"]["total"] == totals.sessions
        and final["sessions"]["by_role"] == totals.sessions_by_role
    )
    assert final["cost_usd"] == pytest.approx(totals.cost_usd) and final["cost_basis"] == "scripted"
    assert [r["session"] for r in final["recent"]] == [e["session"] for e in totals.recent(5)]
    # the console said what the costs are, and a copy of it is in the log folder
    assert "not money spent" in out
    (copy,) = (log_root(project) / "console").iterdir()
    assert "=== Session 1: INITIALIZER" in copy.read_text()


def test_the_session_cap_ends_a_session_at_its_cap_and_it_is_verified_as_it_stands(tmp_path: Path) -> None:
    """--max-session-budget-usd goes to the CLI: the scripted sessions cost more, so each one ends
    at the cap and, its work unfinished, fails verification; the INITIALIZER gives up (halted)."""
    env = product_env(tmp_path)
    project = tmp_path / "capped"
    scenario = write_scenario(tmp_path / "one.json", {"features": 1})
    proc = run(offline_command(project, scenario, "--max-session-budget-usd", "0.05"), env)
    assert proc.returncode == 1, explain(proc)
    assert "run halted" in proc.stderr
    first = result_of(project, 1)
    ends = [e for e in events.read(events.log_path(project)) if e["kind"] == "session_ended"]
    assert [e["standing"] for e in ends] == ["failed"] * 3
    assert all(0.05 <= e["receipt"]["cost_usd"] < 1.0 for e in ends)
    assert first["subtype"] == "error_max_budget_usd"
    assert json.loads((project / progress.CONFIG_FILE).read_text())["max_session_budget_usd"] == 0.05


def build_at_size(project: Path, features: int, sessions_per_feature: int = 10) -> str:
    """A project as a long night leaves it: `features` features, all but the last few passing,
    ten past sessions per feature in progress.json, a review per passing feature; the first
    open feature is next (IMPLEMENT). Built directly, not by running sessions."""
    project.mkdir(parents=True)
    (project / "app_spec.txt").write_text("A large application.\n")
    repo = gitops.open_repo(project)
    (project / "init.sh").write_text("#!/usr/bin/env bash\nexit 0\n")
    git(project, "add", "init.sh")
    git(project, "commit", "-q", "-m", "chore: init.sh")
    del repo
    ids = [f"F{n:04d}" for n in range(1, features + 1)]
    passing = ids[:-5]
    feature_list = [
        {
            "id": fid,
            "category": "functional",
            "description": f"The user can do thing {fid} and sees it listed with its details",
            "steps": [f"step {k} of {fid}: run the command and check the output" for k in range(1, 4)],
            "passes": fid in passing,
        }
        for fid in ids
    ]
    entries = [
        {
            "session_id": n,
            "agent_type": "IMPLEMENT",
            "features_touched": [ids[(n - 1) % len(ids)]],
            "outcome": "READY_FOR_REVIEW",
            "commit_range": {"from": "a" * 40, "to": "b" * 40},
            "notes": f"session {n}: implemented the thing and its tests, all green",
        }
        for n in range(1, features * sessions_per_feature + 1)
    ]
    reviews = [
        {
            "review_id": k + 1,
            "feature_id": fid,
            "kind": "feature",
            "verdict": "PASS",
            "issues": {"critical": [], "major": [], "minor": ["a small thing"]},
        }
        for k, fid in enumerate(passing)
    ]
    nxt = ids[len(passing)]
    (project / "feature_list.json").write_text(json.dumps({"features": feature_list}, indent=2))
    progress_data = {
        "project_name": project.name,
        "current_phase": IMPL,
        "current_feature": nxt,
        "current_branch": f"feature/{nxt}",
        "features_completed": len(passing),
        "sessions": entries,
    }
    (project / "progress.json").write_text(json.dumps(progress_data, indent=2))
    (project / "reviews.json").write_text(json.dumps({"reviews": reviews, "fixes": []}, indent=2))
    from session_scheduler.core.machine import Backlog, Lane, SessionState, feature
    from session_scheduler.store.statefile import save

    state = SessionState(
        Backlog(tuple(ids), frozenset(passing)),
        Lane(SessionType.IMPLEMENT, feature(nxt)),
        architecture_checked_at=len(passing),
        session_count=len(entries),
    )
    save(project, state, {})
    return nxt


def test_a_project_of_a_thousand_features_runs_sessions_normally(tmp_path: Path) -> None:
    """1,000 features and 10,000 past sessions through the real CLI: the next feature is
    implemented, reviewed, merged and marked passing; no session reads a file whose size grows
    with the project, every request stays small, and the hand-off files agents write stay small."""
    env = product_env(tmp_path)
    project = tmp_path / "big"
    nxt = build_at_size(project, 1000)
    scenario = write_scenario(tmp_path / "plain.json", {"features": 1})
    proc = run(offline_command(project, scenario, "--max-iterations", "2"), env)
    assert proc.returncode == 3, explain(proc)  # stopped by --max-iterations after the two sessions
    state = state_of(project)
    assert nxt in state["backlog"]["passing"] and state["session_count"] == 10_002
    assert git(project, "log", "-1", "--format=%s", "main") == f"Merge feature/{nxt}"
    assert (
        next(f for f in load_json(project / "feature_list.json")["features"] if f["id"] == nxt)["passes"]
        is True
    )
    ends = [e for e in events.read(events.log_path(project)) if e["kind"] == "session_ended"]
    assert [(e["role"], e["standing"]) for e in ends] == [(IMPL, "verified"), (REVIEW, "verified")]
    # what agents write stays small; the older entries are in the history files, once each
    assert (project / "progress.json").stat().st_size < 40_000
    history = [
        json.loads(line)["session_id"]
        for line in (project / "progress_history.jsonl").read_text().splitlines()
    ]
    kept = [e["session_id"] for e in load_json(project / "progress.json")["sessions"]]
    assert history + kept == list(range(1, 10_003))
    # no request to the model carries a whole hand-off file
    requests = [
        json.loads(line)
        for line in (log_root(project) / "scripted_model_requests.jsonl").read_text().splitlines()
    ]
    assert requests and max(r["body_bytes"] for r in requests) < 150_000, max(
        r["body_bytes"] for r in requests
    )


def _can_unshare_network() -> bool:
    if not shutil.which("unshare") or os.geteuid() != 0:
        return False
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False)
    return probe.returncode == 0


@pytest.mark.skipif(not _can_unshare_network(), reason="needs root and unshare -n")
def test_the_offline_demo_runs_in_a_namespace_with_nothing_but_loopback(tmp_path: Path) -> None:
    """A second guard: with no network device but `lo`, the whole lifecycle still completes."""
    project = tmp_path / "isolated"
    scenario = write_scenario(tmp_path / "one.json", {"features": 1})
    inner = shlex.join(offline_command(project, scenario))
    proc = run(
        ["unshare", "-n", "bash", "-c", f"ip link set lo up 2>/dev/null; exec {inner}"], product_env(tmp_path)
    )
    assert proc.returncode == 0, explain(proc)
    assert "1/1 features passing, 3 sessions in all" in proc.stdout


def test_a_hanging_session_is_stopped_by_the_session_timeout(tmp_path: Path) -> None:
    """The model never answers: the session is stopped at its deadline, verified, and retried."""
    env = product_env(tmp_path)
    project = tmp_path / "hang"
    scenario = write_scenario(
        tmp_path / "hang.json", {"features": 1, "faults": [{"session": 2, "kind": "hang", "request": 3}]}
    )
    # 15 s: long enough for a healthy session on a loaded machine, short enough for a test
    proc = run(offline_command(project, scenario, "--session-timeout", "15"), env)
    assert proc.returncode == 0, explain(proc)
    result = json.loads((log_root(project) / "session_0002_IMPLEMENT" / "result.json").read_text())
    assert result["terminal_reason"] == "session_timeout" and 15 <= result["duration_s"] < 45
    assert_cut_with_its_tokens(project, "session_timeout")
    assert sequence(project) == [INIT, IMPL, IMPL, REVIEW]
    assert not processes_in(project), "the stopped CLI process must not outlive its session"


def test_a_silent_session_is_stopped_by_the_idle_timeout_and_healthy_ones_are_not(tmp_path: Path) -> None:
    """The model stops answering mid-session: nothing arrives for 10 s, so the session is stopped
    (long before its hour), retried, and the run finishes; no other session is stopped."""
    env = product_env(tmp_path)
    project = tmp_path / "idle"
    scenario = write_scenario(
        tmp_path / "hang.json", {"features": 1, "faults": [{"session": 2, "kind": "hang", "request": 3}]}
    )
    proc = run(offline_command(project, scenario, "--idle-timeout", "10"), env)
    assert proc.returncode == 0, explain(proc)
    result = json.loads((log_root(project) / "session_0002_IMPLEMENT" / "result.json").read_text())
    assert result["terminal_reason"] == "idle_timeout" and 10 <= result["duration_s"] < 40
    assert "Claude Code sent nothing for 10 s and was stopped (--idle-timeout)" in result["error"]
    assert_cut_with_its_tokens(project, "idle_timeout")
    assert proc.stdout.count("stopped: idle for 10 s") == 1
    assert sequence(project) == [INIT, IMPL, IMPL, REVIEW]
    assert not processes_in(project), "the stopped CLI process must not outlive its session"


def assert_cut_with_its_tokens(project: Path, by: str) -> None:
    """Session 2 was stopped before Claude Code reported: its end says so, with the tokens its
    transcript shows (two requests were answered) and an estimated cost, never 0 tokens and $0."""
    ended = next(
        e for e in events.read(events.log_path(project)) if e["kind"] == "session_ended" and e["session"] == 2
    )
    receipt = ended["receipt"]
    assert ended["cut"]["by"] == by and receipt["partial"] and receipt["cost_estimated"], ended
    assert receipt["input_tokens"] > 0 and receipt["cost_usd"] > 0, receipt


def processes_in(folder: Path) -> list[int]:
    """PIDs whose working directory is `folder` (Linux /proc)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and Path(os.readlink(proc / "cwd")) == folder:
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_an_api_outage_beyond_the_allowance_stops_resumably_without_using_an_attempt(tmp_path: Path) -> None:
    """HTTP 500 on every retry and no outage allowance: exit 3; nothing counted; the rerun finishes."""
    env = product_env(tmp_path)
    project = tmp_path / "outage"
    outage = write_scenario(
        tmp_path / "outage.json",
        {"features": 1, "faults": [{"session": 2, "kind": "http_500", "request": 2, "times": 50}]},
    )
    first = run(offline_command(project, outage, "--max-outage-minutes", "0"), env)
    assert first.returncode == 3, explain(first)
    assert "the model API kept failing (500)" in first.stdout + first.stderr
    assert "--max-outage-minutes 0" in first.stdout + first.stderr
    state = state_of(project)
    assert state["lane"]["role"] == IMPL and state["lane"]["attempts"] == 0
    assert state["in_flight"]["0"]["why"] == "outage" and totals_of(project).failed == 0
    second = run(offline_command(project, write_scenario(tmp_path / "ok.json", {"features": 1})), env)
    assert second.returncode == 0, explain(second)
    assert state_of(project)["backlog"]["passing"] == ["F001"]


@pytest.mark.parametrize(
    "signum",
    [
        pytest.param(
            signal.SIGKILL,
            id="SIGKILL",
            marks=pytest.mark.skipif(
                shutil.which("setpriv") is None, reason="the SIGKILL guard needs util-linux's setpriv"
            ),
        ),
        pytest.param(signal.SIGTERM, id="SIGTERM"),
    ],
)
def test_killing_only_the_scheduler_takes_its_cli_along(tmp_path: Path, signum: int) -> None:
    """`kill` of the scheduler alone (not its group) must not leave a CLI working in its clone."""
    env = product_env(tmp_path)
    project = tmp_path / "alone"
    clone = workdirs.path_of(project, 0)
    scenario = write_scenario(tmp_path / "two.json", {"features": 2})
    proc = subprocess.Popen(
        offline_command(project, scenario),
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(
            lambda: (log_root(project) / "session_0003_REVIEW").exists() and processes_in(clone),
            proc,
            "session 3's CLI at work",
            300,  # two sessions first, on two busy cores
        )
        os.kill(proc.pid, signum)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    wait_until(lambda: not processes_in(clone), "no CLI left in the clone (one outlived its scheduler)", 2)
    resumed = run(offline_command(project, scenario), env)
    assert resumed.returncode == 0, explain(resumed)
    assert state_of(project)["backlog"]["passing"] == ["F001", "F002"]
