"""A feature's proof (view/proofs.py): each section says what the records and git hold for it and
nothing else, says so where they hold nothing, cuts a long file list, is rewritten whole, and the
report links every proof written."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from helpers import sh

from session_scheduler.core.evidence import Call
from session_scheduler.guard import safe_git
from session_scheduler.store import events
from session_scheduler.store.progress import ensure_handoff_files
from session_scheduler.view import proofs
from session_scheduler.view.project_report import gather, render_html, render_markdown

T0 = 1_800_000_000.0
REVIEW_DIR = ".agent_logs/session_0006_REVIEW"
STEPS = ["Open the page: the list shows <nothing>", "Add `tea`: it appears", "Reload: tea is still there"]
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
CONSOLE = "[LOG] ready @ http://127.0.0.1:8000/app.js:3\n[ERROR] favicon 404 @ http://127.0.0.1:8000/:0\n"


def _receipt(cost: float, seconds: float, **more: Any) -> dict[str, Any]:
    return {"model": "sonnet", "cost_usd": cost, "turns": 4, "duration_s": seconds, "partial": False, **more}


def _session(
    log: events.EventLog, now: list[float], n: int, role: str, feature: str, *, ends: int = 1, **more: Any
) -> None:
    """A session started and ended (`ends` times: a kill made it run again), 60 s and $0.25 a try,
    with the events `more["during"]` holds (kind, fields) between its start and its end."""
    for _ in range(ends):
        log.emit(
            "session_started",
            session=n,
            role=role,
            model="sonnet",
            feature=feature,
            branch=f"feature/{feature}",
            attempt=1,
            log_dir=f".agent_logs/session_{n:04d}_{role}",
            lane=0,
        )
        for kind, fields in more.get("during", ()):
            log.emit(kind, **fields)
        now[0] += 60
        log.emit(
            "session_ended",
            session=n,
            role=role,
            feature=feature,
            standing="verified",
            reason="verified",
            receipt=_receipt(0.25, 60.0, **more.get("receipt", {})),
        )
        now[0] += 10


def _gates(where: str, feature: str, lint: bool) -> tuple[str, dict[str, Any]]:
    gates = [
        {"name": "tests", "kind": "tests", "passed": True, "seconds": 2.0},
        {"name": "lint", "kind": "lint", "passed": lint, "seconds": 0.5},
    ]
    red = {} if lint else {"lint": "todo/web.py:3:1: F401 `os` imported but unused"}
    return "gates_ran", {"where": where, "passed": lint, "gates": gates, "red": red, "feature": feature}


def _records(project: Path) -> None:
    """F002 (web, depends on F001): implemented (2), reviewed REQUEST_CHANGES (3, review #1),
    fixed with a red lint on its branch (4: the scheduler's review #2), fixed again (5, killed
    once), passed by review #3 (6) with screenshots and the console; F001's session 1 is not its."""
    features = [
        {
            "id": "F001",
            "category": "functional",
            "description": "Save tasks",
            "steps": ["Run it"],
            "passes": True,
        },
        {
            "id": "F002",
            "category": "web",
            "description": "Add a task in the page <b>now</b>",
            "steps": STEPS,
            "passes": True,
            "depends_on": ["F001"],
        },
    ]
    (project / "feature_list.json").write_text(json.dumps({"features": features}))
    issues = {
        "critical": ["the list forgets <tasks> on reload"],
        "major": ["no empty state"],
        "minor": ["the button is grey", "a typo"],
    }
    graded = [
        {"step": 1, "passed": True, "evidence": "the list is empty", "screenshot": "screenshot-3.png"},
        {"step": 2, "passed": True, "evidence": "tea is listed", "snapshot": "snapshot-4.yml"},
    ]
    reviews = [
        {
            "review_id": 1,
            "feature_id": "F002",
            "kind": "feature",
            "verdict": "REQUEST_CHANGES",
            "issues": issues,
        },
        {
            "review_id": 2,
            "feature_id": "F002",
            "kind": "feature",
            "verdict": "REQUEST_CHANGES",
            "issues": {"critical": ["a gate is red on the branch: lint"], "major": [], "minor": []},
            "scheduler_findings": ["lint: F401 `os` imported but unused"],
        },
        {
            "review_id": 3,
            "feature_id": "F002",
            "kind": "feature",
            "verdict": "PASS",
            "issues": {"critical": [], "major": [], "minor": []},
            "acceptance": graded,
        },
        {
            "review_id": 4,
            "feature_id": "F001",
            "kind": "feature",
            "verdict": "REQUEST_CHANGES",
            "issues": {"critical": ["F001 only"], "major": [], "minor": []},
        },
    ]
    fixes = [{"fix_id": 2, "review_id": 2, "issues_fixed": ["removed the unused import"]}]
    (project / "reviews.json").write_text(json.dumps({"reviews": reviews, "fixes": fixes}))
    moved = {"fix_id": 1, "review_id": 1, "issues_fixed": ["tasks kept in localStorage", "an empty state"]}
    (project / "fixes_history.jsonl").write_text(json.dumps(moved) + "\n")
    now = [T0]
    log = events.EventLog(project, "run-1", clock=lambda: now[0])
    log.emit("run_started", pid=1, project=str(project), version="0.2.0", cost_basis="api")
    _session(log, now, 1, "IMPLEMENT", "F001")
    _session(log, now, 2, "IMPLEMENT", "F002", during=[_gates("branch", "F002", lint=True)])
    verdict = ("verdict", {"session": 3, "feature": "F002", "review_id": 1, "verdict": "REQUEST_CHANGES"})
    _session(log, now, 3, "REVIEW", "F002", during=[verdict])
    _session(log, now, 4, "FIX", "F002", during=[_gates("branch", "F002", lint=False)])
    _session(log, now, 5, "FIX", "F002", ends=2, receipt={"cost_estimated": True})
    verdict = ("verdict", {"session": 6, "feature": "F002", "review_id": 3, "verdict": "PASS"})
    _session(log, now, 6, "REVIEW", "F002", during=[verdict, _gates("main", "F002", lint=True)])
    landed = {"session": 6, "feature": "F002", "branch": "feature/F002", "commit": "abc", "tests": "passed"}
    log.emit("merge_verified", **landed)
    folder = project / REVIEW_DIR / "evidence"
    folder.mkdir(parents=True)
    (folder / "screenshot-3.png").write_bytes(PNG)
    (folder / "snapshot-4.yml").write_text('- list "tasks":\n  - listitem: tea\n')
    (folder / "console-5.txt").write_text(CONSOLE)
    calls = [
        Call(3, "browser_take_screenshot", {}, False, None, "screenshot-3.png"),
        Call(4, "browser_snapshot", {}, False, "http://127.0.0.1:8000/", "snapshot-4.yml"),
        Call(5, "browser_console_messages", {}, False, None, "console-5.txt"),
    ]
    (project / REVIEW_DIR / "browser.jsonl").write_text(
        "".join(json.dumps(c.to_json()) + "\n" for c in calls)
    )


def _repo(project: Path, files: int = 1) -> tuple[str, str]:
    """main with two files; feature/F002 changes one, renames one, adds a picture and `files`
    new files; merged onto main without fast-forward: (main before, the merge)."""
    sh(
        project,
        "git init -q --initial-branch=main && printf 'a\\nb\\nc\\n' > app.py && echo old > notes.txt"
        " && git add app.py notes.txt && git commit -qm base",
    )
    base = sh(project, "git rev-parse HEAD")
    sh(
        project,
        "git checkout -qb feature/F002 && printf 'a\\nB\\nc\\nd\\n' > app.py && git mv notes.txt docs.txt"
        " && printf '\\211PNG\\0\\1\\2' > pic.png"
        f" && for i in $(seq 1 {files}); do echo $i > new_$i.py; done"
        " && git add app.py pic.png new_*.py && git commit -qm F002"
        " && git checkout -q main && git merge -q --no-ff -m 'merge F002' feature/F002",
    )
    return base, sh(project, "git rev-parse HEAD")


@pytest.fixture
def landed(tmp_path: Path) -> tuple[Path, str, str]:
    project = tmp_path / "demo"
    project.mkdir()
    _records(project)
    base, commit = _repo(project)
    return project, base, commit


def _proof(landed: tuple[Path, str, str], **kw: Any) -> str:
    project, base, commit = landed
    return proofs.text(project, safe_git.open(project), "F002", base=base, commit=commit, where="main", **kw)


def _section(proof: str, title: str) -> str:
    """The text of one `## ` section."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", proof, re.S | re.M)
    assert match, f"no section {title!r} in:\n{proof}"
    return match.group(1)


def test_the_title_says_where_it_landed(landed: tuple[Path, str, str]) -> None:
    proof = _proof(landed)
    lines = proof.splitlines()
    assert lines[0] == r"# F002: Add a task in the page \<b\>now\</b\>"
    assert lines[2] == f"Landed on `main` at `{landed[2][:10]}`."
    assert _section(proof, "Risk").strip() == "No risk rule matched."


def test_a_risk_is_said_in_the_title_and_its_section(landed: tuple[Path, str, str]) -> None:
    proof = _proof(landed, risk="touches `auth/`: a person reviews it")
    assert proof.splitlines()[2] == (
        f"Waits for a person: touches `auth/`: a person reviews it (its work is on `main` at `{landed[2][:10]}`)."
    )
    assert _section(proof, "Risk").strip() == "Waits for a person: touches `auth/`: a person reviews it"


def test_what_was_asked_is_the_feature_list(landed: tuple[Path, str, str]) -> None:
    asked = _section(_proof(landed), "What was asked")
    assert "Add a task in the page \\<b\\>now\\</b\\>" in asked
    assert (
        "1. Open the page: the list shows \\<nothing\\>\n2. Add `tea`: it appears\n3. Reload: tea is still there"
        in asked
    )
    assert "Depends on: F001." in asked


def test_what_was_seen_is_the_last_pass_with_its_evidence(landed: tuple[Path, str, str]) -> None:
    project = landed[0]
    seen = _section(_proof(landed), "What was seen")
    assert "Review #3 (session 6) passed it:" in seen
    shot = "../session_0006_REVIEW/evidence/screenshot-3.png"
    assert (
        "- Step 1 passed (Open the page: the list shows \\<nothing\\>): the list is empty; "
        f"screenshot [screenshot-3.png]({shot})"
    ) in seen
    assert (proofs.path_of(project, "F002").parent / shot).resolve() == (
        project / REVIEW_DIR / "evidence/screenshot-3.png"
    ).resolve()
    assert "- Step 2 passed (Add `tea`: it appears): tea is listed; snapshot [snapshot-4.yml](" in seen
    assert "- Step 3 (Reload: tea is still there): not graded" in seen
    assert "- Console: [console-5.txt](../session_0006_REVIEW/evidence/console-5.txt), 1 error line" in seen


def test_a_cited_file_that_is_gone_is_said(landed: tuple[Path, str, str]) -> None:
    (landed[0] / REVIEW_DIR / "evidence/screenshot-3.png").unlink()
    seen = _section(_proof(landed), "What was seen")
    assert "screenshot: screenshot-3.png is missing from session_0006_REVIEW/evidence" in seen
    assert "](../session_0006_REVIEW/evidence/screenshot-3.png)" not in seen


def test_every_review_round_with_its_findings_and_fix(landed: tuple[Path, str, str]) -> None:
    rounds = _section(_proof(landed), "Review rounds")
    assert rounds.strip().splitlines() == [
        "- **Review #1** (session 3): REQUEST_CHANGES",
        "  - critical: the list forgets \\<tasks\\> on reload",
        "  - major: no empty state",
        "  - 2 minor findings (not listed)",
        "  - answered by fix #1: tasks kept in localStorage; an empty state",
        "- **Review #2** (the scheduler): REQUEST_CHANGES",
        "  - critical: a gate is red on the branch: lint",
        "  - scheduler: lint: F401 `os` imported but unused",
        "  - answered by fix #2: removed the unused import",
        "- **Review #3** (session 6): PASS",
    ]
    assert "F001 only" not in rounds


def test_a_fix_is_told_by_its_session_s_notes_and_commits(landed: tuple[Path, str, str]) -> None:
    project = landed[0]
    data = json.loads((project / "reviews.json").read_text())
    data["fixes"][0]["session_id"] = 5
    (project / "reviews.json").write_text(json.dumps(data))
    entry = {
        "session_id": 5,
        "agent_type": "FIX",
        "features_touched": ["F002"],
        "outcome": "FIXED",
        "commit_range": {"from": "a" * 40, "to": "b" * 40},
        "notes": "dropped `import os` | nothing else",
    }
    (project / "progress.json").unlink(missing_ok=True)
    ensure_handoff_files(project, "app")
    progress = json.loads((project / "progress.json").read_text())
    progress["sessions"] = [*progress["sessions"], entry]
    (project / "progress.json").write_text(json.dumps(progress))
    rounds = _section(_proof(landed), "Review rounds")
    assert (
        "  - answered by fix #2 (session 5, commits aaaaaaa..bbbbbbb): dropped `import os` \\| nothing else"
        in rounds
    )
    assert "  - answered by fix #1: tasks kept in localStorage; an empty state" in rounds  # no session


def test_the_gates_on_the_branch_and_on_landing(landed: tuple[Path, str, str]) -> None:
    gates = _section(_proof(landed), "Gates")
    assert "- On its branch, the last of 2 runs (1 red): tests passed in 2 s, lint **red** in 0 s" in gates
    assert "F401 `os` imported but unused" in gates
    assert "- On `main`, the last of 1 run (0 red): tests passed in 2 s, lint passed in 0 s" in gates
    assert "- Its landing's tests: passed" in gates


def test_the_sessions_their_time_and_cost(landed: tuple[Path, str, str]) -> None:
    sessions = _section(_proof(landed), "Sessions, time and cost")
    rows = [line for line in sessions.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert rows == [
        "| 2 | IMPLEMENT | verified | 1 min 00 s | $0.2500 |",
        "| 3 | REVIEW | verified | 1 min 00 s | $0.2500 |",
        "| 4 | FIX | verified | 1 min 00 s | $0.2500 |",
        "| 5 | FIX | verified (2 tries) | 2 min 00 s | ~$0.5000 |",
        "| 6 | REVIEW | verified | 1 min 00 s | $0.2500 |",
    ]
    assert (
        "5 sessions, 6 min 00 s of session time; from the first start to the last end, 6 min 50 s; "
        "$1.50 in all (some of it estimated from the transcripts)."
    ) in sessions


def test_the_change_is_git_s(landed: tuple[Path, str, str]) -> None:
    _, base, commit = landed
    change = _section(_proof(landed), "The change")
    assert f"`{base[:10]}`..`{commit[:10]}`: 4 files changed, 3 insertions(+), 1 deletion(-)." in change
    assert "| `app.py` | 2 | 1 |" in change
    assert "| `new_1.py` | 1 | 0 |" in change
    assert "| `pic.png` | binary | binary |" in change
    assert "| `notes.txt → docs.txt` | 0 | 0 |" in change
    assert "more file" not in change


def test_the_file_list_is_cut(tmp_path: Path) -> None:
    project = tmp_path / "demo"
    project.mkdir()
    _records(project)
    base, commit = _repo(project, files=60)
    proof = proofs.text(project, safe_git.open(project), "F002", base=base, commit=commit, where="main")
    change = _section(proof, "The change")
    assert len([line for line in change.splitlines() if line.startswith("| `")]) == proofs.FILES_SHOWN
    assert f"… and 13 more files (`git diff --numstat {base} {commit}`)." in change


def test_absent_records_say_none_recorded(tmp_path: Path) -> None:
    project = tmp_path / "bare"
    project.mkdir()
    sh(project, "git init -q --initial-branch=main && echo a > a && git add a && git commit -qm a")
    head = sh(project, "git rev-parse HEAD")
    proof = proofs.text(project, safe_git.open(project), "F009", base=head, commit=head, where="main")
    assert proof.splitlines()[0] == "# F009: (no description recorded)"
    assert _section(proof, "What was asked").strip() == "None recorded: feature_list.json is missing."
    assert _section(proof, "What was seen").strip() == "None recorded: no review passed F009."
    assert _section(proof, "Review rounds").strip() == "None recorded."
    assert _section(proof, "Gates").strip() == "None recorded: no gate ran on F009's work."
    assert _section(proof, "Sessions, time and cost").strip() == (
        "None recorded: the event log names no session of F009."
    )
    assert _section(proof, "The change").strip() == f"`{head[:10]}`..`{head[:10]}`: no file changed."


def test_a_pass_that_graded_no_step_and_a_feature_not_listed(landed: tuple[Path, str, str]) -> None:
    project, base, commit = landed
    data = json.loads((project / "reviews.json").read_text())
    del data["reviews"][2]["acceptance"]
    (project / "reviews.json").write_text(json.dumps(data))
    proof = _proof(landed)
    assert _section(proof, "What was seen").strip() == (
        "Review #3 passed it and graded no acceptance step: none recorded."
    )
    other = proofs.text(project, safe_git.open(project), "F007", base=base, commit=commit, where="main")
    assert _section(other, "What was asked").strip() == "None recorded: F007 is not in feature_list.json."


def test_git_that_cannot_compare_is_said(landed: tuple[Path, str, str]) -> None:
    project, _, commit = landed
    proof = proofs.text(project, safe_git.open(project), "F002", base="0" * 40, commit=commit, where="main")
    assert (
        _section(proof, "The change")
        .strip()
        .startswith(f"None recorded: git cannot compare `{'0' * 40}` and `{commit}`")
    )


def test_the_proof_is_markdown_without_html(landed: tuple[Path, str, str]) -> None:
    proof = _proof(landed)
    assert re.search(r"(?<!\\)<", proof) is None, "every < of the records is escaped"
    assert "<b>" not in proof


def test_writing_again_rewrites_the_proof(landed: tuple[Path, str, str]) -> None:
    project, base, commit = landed
    repo = safe_git.open(project)
    path = proofs.write(project, repo, "F002", base=base, commit=commit, where="main", now=T0)
    assert path == project / ".agent_logs/proofs/F002.md"
    first = path.read_text()
    assert first == _proof(landed) + "\n_Written 2027-01-15 08:00 UTC by the session scheduler._\n"
    again = proofs.write(
        project, repo, "F002", base=base, commit=commit, where="agents/x", risk="r", now=T0 + 60
    )
    second = again.read_text()
    assert again == path
    assert second.count("# F002:") == 1
    assert second.startswith(_proof(landed, risk="r").replace("`main`", "`agents/x`").splitlines()[0])
    assert "(its work is on `agents/x`" in second and "Landed on" not in second
    assert second.endswith("_Written 2027-01-15 08:01 UTC by the session scheduler._\n")
    assert [p.name for p in path.parent.iterdir()] == ["F002.md"], "no temp file is left"


def test_a_name_that_is_not_a_feature_id_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a feature id"):
        proofs.path_of(tmp_path, "../F001")
    assert proofs.written(tmp_path, ["../F001", "F001"]) == ()


def test_the_report_links_every_proof_written(landed: tuple[Path, str, str]) -> None:
    project, base, commit = landed
    log = events.EventLog(project, "run-1", clock=lambda: T0 + 900)
    log.emit("features_listed", session=0, features=["F001", "F002"])
    assert "Proofs" not in render_markdown(gather(project))
    proofs.write(project, safe_git.open(project), "F002", base=base, commit=commit, where="main")
    data = gather(project)
    assert data.proofs == ("F002",)
    assert "### Proofs\n\n- [F002](proofs/F002.md): Add a task in the page \\<b\\>now\\</b\\>" in (
        render_markdown(data)
    )
    assert "- [F002](demo/.agent_logs/proofs/F002.md)" in render_markdown(data, base=str(project.parent))
    assert '<section id="proofs"><h2>Proofs</h2><ul><li><a href="proofs/F002.md">F002</a>' in render_html(
        data
    )


def _closing(project: Path, task: str, spec: str) -> None:
    """F002 builds the spec's task `task`; the spec (as the project keeps it) is `spec`."""
    listed = json.loads((project / "feature_list.json").read_text())
    listed["features"][1]["task"] = task
    (project / "feature_list.json").write_text(json.dumps(listed))
    (project / "app_spec.txt").write_text(spec)


def test_the_proof_says_which_task_the_feature_closes(landed: tuple[Path, str, str]) -> None:
    project = landed[0]
    export = [{"number": 12, "title": "Add tasks <fast>", "body": "", "labels": [{"name": "ui"}]}]
    _closing(project, "#12", json.dumps(export))
    lines = _proof(landed).splitlines()
    assert lines[2].startswith("Landed on `main`") and lines[3:5] == [
        "",
        r"Closes: #12 (Add tasks \<fast\>).",
    ]
    _closing(project, "task 2", "# Todo\n\n- [x] Save tasks\n- [ ] Add a task\n  in the page\n")
    assert _proof(landed).splitlines()[4] == "Closes: task 2 (Add a task)."
    _closing(project, "task 9", "- [ ] Add a task\n")
    assert _proof(landed).splitlines()[4] == "Closes: task 9 (not in the spec)."
    (project / "app_spec.txt").write_text("[]")  # a spec that no longer reads: the ref alone
    assert _proof(landed).splitlines()[4] == "Closes: task 9 (not in the spec)."


def test_a_feature_without_a_task_closes_none(landed: tuple[Path, str, str]) -> None:
    (landed[0] / "app_spec.txt").write_text("- [ ] Add a task\n")
    assert "Closes:" not in _proof(landed)


def test_the_report_names_the_task_a_feature_closes(landed: tuple[Path, str, str]) -> None:
    project = landed[0]
    events.EventLog(project, "run-1", clock=lambda: T0 + 900).emit(
        "features_listed", session=0, features=["F001", "F002"]
    )
    _closing(project, "#12", json.dumps([{"number": 12, "title": "Add", "body": ""}]))
    data = gather(project)
    assert [f.task for f in data.features] == ["", "#12"]
    assert "| F002 | Add a task in the page \\<b\\>now\\</b\\> (closes #12) |" in render_markdown(data)
    assert "| F001 | Save tasks |" in render_markdown(data)
    assert "Add a task in the page &lt;b&gt;now&lt;/b&gt; (closes #12)</td>" in render_html(data)
