"""End-to-end: a night on a review branch, then the person's morning, through the real CLI on
the offline demo (issue 31).

A person's repository (branch `develop`, an uncommitted edit, an untracked file) is run with
no landing option: it defaults to a review branch. The night leaves `develop`, the work tree and
the stash list as they were; the work is on `agents/<date>` with a proof per feature, and
`status` heads with the digest. Then, in order: bad input gets one line and changes nothing (an
unknown feature, empty words, a dirty `develop`); `send-back` takes a feature off the review
branch with the person's words (a feature landed later stays), and the next run's FIX answers them and the feature comes back;
`approve` lands everything on `develop` with its gates; a second `approve` finds nothing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from github_standin import GitHubStandIn
from test_e2e import ENTRY, command, explain, product_env, run, session_dirs, write_scenario

from session_scheduler.store import events

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("bwrap") is None, reason="no bubblewrap")]

PERSON = ("-c", "user.name=Person", "-c", "user.email=person@example.org")
WORDS = "The list must show the newest task first"


def git(project: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=project, capture_output=True, text=True, timeout=60, check=False
    ).stdout.strip()


def blob(project: Path, commit: str, path: str) -> str:
    """The object `path` names in `commit` ("" when it has no such path)."""
    return git(project, "rev-parse", "--verify", "-q", f"{commit}:{path}")


def person_s_repository(project: Path) -> None:
    project.mkdir(parents=True)
    git(project, "init", "-q", "-b", "develop")
    (project / "README.md").write_text("mine\n")
    git(project, "add", "README.md")
    git(project, *PERSON, "commit", "-qm", "the person's start")
    (project / "README.md").write_text("mine\nan edit of mine\n")  # uncommitted
    (project / "scratch.txt").write_text("untracked\n")


def morning(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """One of the person's commands (`status`, `approve`, `send-back`) on the project."""
    return run([sys.executable, ENTRY, args[0], "--project-dir", str(project), *args[1:]], env)


def test_a_night_on_a_review_branch_then_send_back_and_approve(tmp_path: Path) -> None:
    project = tmp_path / "generations" / "mine"
    person_s_repository(project)
    develop, status_before = git(project, "rev-parse", "develop"), git(project, "status", "--porcelain")
    scenario = write_scenario(tmp_path / "scenario.json", {"features": 2})
    env = product_env(tmp_path)
    night = run(command(project, "--offline-demo", "--scenario", str(scenario)), env)
    assert night.returncode == 0, explain(night)

    # the night: develop, the work tree and the stashes as they were; the work on the review branch
    review = json.loads((project / ".agent_config.json").read_text())["review_branch"]
    assert review.startswith("agents/") and "your branch develop has not moved" in night.stdout
    assert git(project, "rev-parse", "develop") == develop
    assert git(project, "symbolic-ref", "--short", "HEAD") == "develop"
    assert git(project, "status", "--porcelain") == status_before  # the spec's copy is excluded
    exclude = (project / ".git" / "info" / "exclude").read_text().splitlines()
    assert "/app_spec.txt" in exclude and ".agent_logs" in exclude and ".claude" not in exclude
    assert git(project, "config", "--local", "user.name") == ""  # the person's config is theirs
    assert git(project, "stash", "list") == ""
    assert git(project, "merge-base", "--is-ancestor", develop, review) == ""
    for feature in ("F001", "F002"):
        proof = (project / ".agent_logs" / "proofs" / f"{feature}.md").read_text()
        assert f"# {feature}: " in proof and f"Landed on `{review}`" in proof
    shown = morning(project, env, "status")
    assert "Morning digest" in shown.stdout and "waiting for you: F001, F002" in shown.stdout, explain(shown)

    # bad input: one line, exit 2, nothing moved
    tip = git(project, "rev-parse", review)
    for args, said in (
        (("approve", "F009"), "no feature F009 in this project"),
        (("send-back", "F001", "--why", "  "), "--why is empty"),
        (("send-back", "F009", "--why", "no"), "no feature F009 in this project"),
    ):
        refused = morning(project, env, *args)
        assert refused.returncode == 2 and said in refused.stderr, explain(refused)
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    (project / "README.md").write_text("mine\nan edit of mine\n")
    dirty = morning(project, env, "approve")
    assert (
        dirty.returncode == 2
        and "your branch develop is checked out with 1 uncommitted change" in dirty.stderr
    )
    assert git(project, "rev-parse", "develop") == develop and git(project, "rev-parse", review) == tip
    git(project, "checkout", "-q", "README.md")

    # send-back: off the review branch (each file its change touched as before it), back to a FIX
    sent = morning(project, env, "send-back", "F001", "--why", WORDS)
    assert sent.returncode == 0 and "F001 sent back" in sent.stdout, explain(sent)
    (f001,) = [
        e["commit"]
        for e in events.read(events.log_path(project))
        if e["kind"] == "merge_verified" and e["feature"] == "F001"
    ]
    touched = git(project, "diff", "--name-only", f"{f001}^1", f001).splitlines()
    assert touched
    for path in touched:
        assert blob(project, review, path) == blob(project, f"{f001}^1", path), path
    again_refused = morning(project, env, "send-back", "F001", "--why", WORDS)
    assert again_refused.returncode == 2 and "F001 is not on" in again_refused.stderr
    reviews = json.loads((project / "reviews.json").read_text())["reviews"]
    assert WORDS in reviews[-1]["issues"]["critical"][0] and reviews[-1]["feature_id"] == "F001"
    again = run(command(project), env)
    assert again.returncode == 0, explain(again)
    fix = [d for d in session_dirs(project) if d.name.endswith("_FIX")][-1]
    assert WORDS in (fix / "transcript.jsonl").read_text()
    landed = [e for e in events.read(events.log_path(project)) if e["kind"] == "merge_verified"]
    assert [e["feature"] for e in landed][-1] == "F001"
    for path in touched:  # its change is back, with the FIX's
        assert blob(project, review, path), path

    review_after_fix = [d for d in session_dirs(project) if d.name.endswith("_REVIEW")][-1]
    assert review_after_fix.name > fix.name and WORDS in (review_after_fix / "transcript.jsonl").read_text()

    # the person merges F002's landing by hand: it no longer waits
    git(project, *PERSON, "stash", "-q")  # the person's edit out of the way, as a person would
    (f002,) = [
        e["commit"]
        for e in events.read(events.log_path(project))
        if e["kind"] == "merge_verified" and e["feature"] == "F002"
    ]
    git(project, *PERSON, "merge", "-q", "--no-ff", "-m", "by hand", f002)
    assert "waiting for you: F001 (on" in morning(project, env, "status").stdout

    # approve: the rest lands on develop, the gates run there; then nothing waits
    approved = morning(project, env, "approve")
    assert approved.returncode == 0 and "approved F001: on develop" in approved.stdout, explain(approved)
    assert git(project, "merge-base", "--is-ancestor", review, "develop") == ""
    assert git(project, "status", "--porcelain", "--untracked-files=no") == ""
    ran = [
        e
        for e in events.read(events.log_path(project))
        if e["kind"] == "gates_ran" and e["where"] == "develop"
    ]
    assert ran and ran[-1]["passed"]
    nothing = morning(project, env, "approve")
    assert nothing.returncode == 2 and "nothing waits for you" in nothing.stderr
    assert "waiting for you: nothing" in morning(project, env, "status").stdout


def test_a_risky_change_waits_for_the_person_even_on_main(tmp_path: Path) -> None:
    """A new project lands on main; a risk rule of the person's holds the feature that changes
    todo/cmd_add.py: the night ends with it waiting (main without it), `approve F002` lands it
    with its gates, and a bad rules file is refused in one line before anything is created."""
    env = product_env(tmp_path)
    scenario = write_scenario(tmp_path / "scenario.json", {"features": 2})
    bad = tmp_path / "bad.json"
    bad.write_text('{"rules": [{"name": "x"}]}')
    project = tmp_path / "generations" / "new"
    refused = run(command(project, "--offline-demo", "--scenario", str(scenario), "--risk", str(bad)), env)
    assert refused.returncode == 2 and "the risk rules are invalid" in refused.stderr, explain(refused)
    assert len(refused.stderr.strip().splitlines()) == 1 and not project.exists()

    rules = tmp_path / "risk.json"
    rules.write_text(json.dumps({"rules": [{"name": "the add command", "paths": ["todo/cmd_add.py"]}]}))
    night = run(command(project, "--offline-demo", "--scenario", str(scenario), "--risk", str(rules)), env)
    assert night.returncode == 0, explain(night)
    assert "feature/F002 waits for you (the add command: it changes todo/cmd_add.py)" in night.stdout
    assert (
        "1 of 2 features pass, 0 blocked; waiting for you, held by a risk rule: F002 (`approve F002` lands it)"
        in night.stdout
    )
    assert blob(project, "main", "todo/cmd_add.py") == "" and blob(project, "main", "todo/store.py")
    proof = (project / ".agent_logs" / "proofs" / "F002.md").read_text()
    assert "Waits for a person: the add command: it changes todo/cmd_add.py" in proof
    shown = morning(project, env, "status")
    assert "waiting for you: F002, held: the add command" in shown.stdout, explain(shown)
    wrong = morning(project, env, "approve", "F001")
    assert wrong.returncode == 2 and "F001 is not held; waiting for you: F002" in wrong.stderr

    approved = morning(project, env, "approve", "F002")
    assert approved.returncode == 0 and "released F002" in approved.stdout, explain(approved)
    assert blob(project, "main", "todo/cmd_add.py")
    assert "Landed on `main`" in (project / ".agent_logs" / "proofs" / "F002.md").read_text()
    ran = [
        e
        for e in events.read(events.log_path(project))
        if e["kind"] == "gates_ran" and e.get("feature") == "F002"
    ]
    assert ran and ran[-1]["where"] == "main" and ran[-1]["passed"]
    again = run(command(project), env)
    assert again.returncode == 0 and "all 2 features pass" in again.stdout, explain(again)
    nothing = morning(project, env, "approve")
    assert nothing.returncode == 2 and "nothing waits for you" in nothing.stderr


def test_pull_requests_on_a_stand_in_forge_and_what_the_person_did_there(tmp_path: Path) -> None:
    """`--land-on pr`: each landed feature is pushed to the person's remote and opened as a draft
    pull request whose body is its proof (a local stand-in of GitHub's API: no network here); the
    next run counts a merged one as approved and sends a closed one back with its comment; a forge
    that answers 401 is a warning, not a lost night."""
    project = tmp_path / "generations" / "mine"
    person_s_repository(project)
    git(project, "checkout", "-q", "README.md")
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(project, "remote", "add", "origin", str(remote))
    git(project, "push", "-q", "origin", "develop")
    develop = git(project, "rev-parse", "develop")
    scenario = write_scenario(tmp_path / "scenario.json", {"features": 2})
    with GitHubStandIn("me", "app", "token-1") as forge:
        env = product_env(tmp_path, GITHUB_API_URL=forge.url, GITHUB_TOKEN="token-1")
        opts = ("--offline-demo", "--scenario", str(scenario), "--land-on", "pr", "--forge", "github:me/app")
        night = run(command(project, *opts), env)
        assert night.returncode == 0, explain(night)
        assert sorted(p["head"] for p in forge.pulls.values()) == ["agents/pr/F001", "agents/pr/F002"]
        for pull in forge.pulls.values():
            feature = pull["head"].removeprefix("agents/pr/")
            assert (
                pull["draft"] is True
                and pull["base"] == "develop"
                and pull["title"].startswith(f"{feature}: ")
            )
            assert pull["body"] == (project / ".agent_logs" / "proofs" / f"{feature}.md").read_text()
            pushed = git(remote, "rev-parse", f"refs/heads/{pull['head']}")
            assert git(remote, "rev-parse", f"{pushed}^") == develop  # one commit on the person's branch
        assert git(project, "rev-parse", "develop") == develop == git(remote, "rev-parse", "develop")

        # on the forge: the person merges F001's and closes F002's with a comment
        by_feature = {p["head"].removeprefix("agents/pr/"): n for n, p in forge.pulls.items()}
        forge.merge(by_feature["F001"], git(remote, "rev-parse", "refs/heads/agents/pr/F001"))
        forge.close(by_feature["F002"], WORDS)
        again = run(command(project), env)
        assert again.returncode == 0, explain(again)
        assert "F001: pull request" in again.stdout and "was merged: approved" in again.stdout
        assert "F002 sent back" in again.stdout
        fix = [d for d in session_dirs(project) if d.name.endswith("_FIX")][-1]
        assert WORDS in (fix / "transcript.jsonl").read_text()
        assert [p["head"] for p in forge.pulls.values()][-1] == f"agents/pr/F002-{by_feature['F002']}"
        assert len(forge.pulls) == 3  # F001's is not opened again

    with GitHubStandIn("me", "app", "another") as refusing:
        env = product_env(tmp_path, GITHUB_API_URL=refusing.url, GITHUB_TOKEN="token-1")
        git(project, "push", "-q", "origin", "--delete", "agents/pr/F001")
        (project / ".agent_logs" / "pulls.json").unlink()
        warned = run(command(project), env)
        assert warned.returncode == 0, explain(warned)
        assert (
            "WARNING: pull requests: GitHub answered 401" in warned.stdout and "GITHUB_TOKEN" in warned.stdout
        )
