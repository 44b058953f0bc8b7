"""Pull requests (run/pulls.py) against a forge kept in memory: what is opened, stacked on what,
never twice, and what the person did on the forge brought back."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from session_scheduler.core.config import AgentConfig, SessionType
from session_scheduler.core.machine import Backlog, Lane
from session_scheduler.core.schedule import Schedule
from session_scheduler.repo import adoption
from session_scheduler.repo.forge import Pull, PullState, from_remote_url
from session_scheduler.run import approval, pulls
from session_scheduler.store import events, progress, statefile
from session_scheduler.store.events import EventLog

IDENTITY = ("-c", "user.name=Person", "-c", "user.email=person@example.org")
REVIEW = "agents/2026-11-28"


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *IDENTITY, *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@dataclass
class MemoryForge:
    name: str = "Memory"
    opened: list[dict[str, str]] = field(default_factory=list)
    states: dict[int, PullState] = field(default_factory=dict)

    def open_pull(self, head: str, base: str, title: str, body: str) -> Pull:
        self.opened.append({"head": head, "base": base, "title": title, "body": body})
        return Pull(len(self.opened), f"memory://pull/{len(self.opened)}")

    def pull(self, number: int) -> PullState:
        return self.states.get(number, PullState("open", None, ()))


def project_with_two_landings(tmp_path: Path) -> tuple[Path, AgentConfig, Path]:
    """develop with one commit; the review branch with F001 and F002 (which depends on F001)
    landed as the queue lands them, each with its merge_verified event; a bare remote."""
    project = tmp_path / "p"
    project.mkdir()
    git(project, "init", "-q", "-b", "develop")
    (project / "README.md").write_text("mine\n")
    git(project, "add", "README.md")
    git(project, "commit", "-qm", "start")
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(project, "remote", "add", "origin", str(remote))
    git(project, "branch", REVIEW)
    log = EventLog(project, "run-1")
    log.emit("run_started", pid=1, project=str(project), version="t", cost_basis="api")
    for n, feature in enumerate(("F001", "F002"), start=1):
        branch = f"feature/{feature}"
        git(project, "checkout", "-q", "-b", branch, REVIEW)
        (project / f"{feature.lower()}.py").write_text(f"# {feature}\n")
        git(project, "add", f"{feature.lower()}.py")
        git(project, "commit", "-qm", f"feat({feature})")
        git(project, "checkout", "-q", REVIEW)
        git(project, "merge", "-q", "--no-ff", "-m", f"Merge {branch}", branch)
        log.emit(
            "merge_verified",
            session=n,
            feature=feature,
            branch=branch,
            commit=git(project, "rev-parse", "HEAD"),
            tests="passed",
        )
    git(project, "checkout", "-q", "develop")
    features = [
        {
            "id": "F001",
            "category": "functional",
            "description": "The store",
            "steps": ["run it"],
            "passes": True,
        },
        {
            "id": "F002",
            "category": "functional",
            "description": "The add command",
            "steps": ["run it"],
            "passes": True,
            "depends_on": ["F001"],
        },
    ]
    (project / "feature_list.json").write_text(json.dumps({"features": features}))
    adoption.record(project, adoption.Adoption("", "none", "develop"))
    config = AgentConfig(land_on="pr", review_branch=REVIEW, forge="github:me/app")
    progress.save_config(project, config.to_json())
    backlog = Backlog(("F001", "F002"), frozenset({"F001", "F002"}), depends=(("F002", ("F001",)),))
    statefile.save(project, Schedule(backlog, (Lane(SessionType.DONE),), cloned=True), {})
    return project, config, remote


def test_each_landed_feature_is_one_commit_on_its_base_stacked_on_an_open_dependency(tmp_path: Path) -> None:
    project, config, remote = project_with_two_landings(tmp_path)
    repo = approval.safe_git.open(project)
    forge, said = MemoryForge(), []
    made = pulls.publish(project, config, repo, forge, lambda f: f"proof of {f}", said.append)
    assert made == ["F001", "F002"]
    first, second = forge.opened
    assert first == {
        "head": "agents/pr/F001",
        "base": "develop",
        "title": "F001: The store",
        "body": "proof of F001",
    }
    assert second["head"] == "agents/pr/F002" and second["base"] == "agents/pr/F001"  # stacked
    develop = git(project, "rev-parse", "develop")
    one = git(remote, "rev-parse", "refs/heads/agents/pr/F001")
    two = git(remote, "rev-parse", "refs/heads/agents/pr/F002")
    assert git(remote, "rev-parse", f"{one}^") == develop and git(remote, "rev-parse", f"{two}^") == one
    assert git(remote, "ls-tree", "--name-only", two).split() == ["README.md", "f001.py", "f002.py"]
    assert git(remote, "ls-tree", "--name-only", one).split() == ["README.md", "f001.py"]
    assert pulls.publish(project, config, repo, forge, lambda f: "", said.append) == []  # never twice
    assert len(forge.opened) == 2


def test_what_the_person_did_on_the_forge_comes_back(tmp_path: Path) -> None:
    project, config, _ = project_with_two_landings(tmp_path)
    repo = approval.safe_git.open(project)
    forge, said = MemoryForge(), []
    pulls.publish(project, config, repo, forge, lambda f: "", said.append)
    forge.states[1] = PullState("merged", "abc123", ())
    forge.states[2] = PullState("closed", None, ("Please name it add-task", "and test it"))
    log = EventLog(project, "run-2")
    pulls.reconcile(project, config, repo, forge, log, said.append)
    assert approval.approvals(project) == {"F001": "abc123"}
    kept = {f: p.state for f, p in pulls.opened(project).items()}
    assert kept == {"F001": "merged", "F002": "closed"}
    reviews = json.loads((project / "reviews.json").read_text())["reviews"]
    assert (
        reviews[-1]["feature_id"] == "F002"
        and "Please name it add-task / and test it" in reviews[-1]["issues"]["critical"][0]
    )
    saved = statefile.load(project)
    assert saved is not None and "F002" not in saved.schedule.backlog.passing
    kinds = [(e["kind"], e.get("why") or e.get("onto")) for e in events.read(events.log_path(project))][-2:]
    assert kinds == [("approved", "Memory #1"), ("sent_back", "person")]
    pulls.reconcile(project, config, repo, forge, log, said.append)  # nothing open: nothing asked again
    assert approval.approvals(project) == {"F001": "abc123"}


def test_a_push_that_fails_is_one_line(tmp_path: Path) -> None:
    project, config, _ = project_with_two_landings(tmp_path)
    git(project, "remote", "set-url", "origin", str(tmp_path / "nowhere.git"))
    repo = approval.safe_git.open(project)
    with pytest.raises(pulls.ForgeError, match=r"git push to origin failed .*check the remote"):
        pulls.publish(project, config, repo, MemoryForge(), lambda f: "", [].append)
    assert pulls.opened(project) == {}


@pytest.mark.parametrize(
    ("url", "forge"),
    [
        ("git@github.com:me/app.git", "github:me/app"),
        ("https://github.com/me/app", "github:me/app"),
        ("https://github.com/me/app.git/", "github:me/app"),
        ("/srv/git/app.git", None),
        ("https://gitlab.com/me/app.git", None),
    ],
)
def test_the_forge_is_read_from_the_remote_s_url(url: str, forge: str | None) -> None:
    assert from_remote_url(url) == forge
