"""End-to-end on a person's existing repository: the real CLI, the scripted model, the user's command.

The repository has a committed `CLAUDE.md` ("Always use tabs."), a `.gitignore` that ignores
nothing of the scheduler's, uncommitted edits and an untracked file, a branch called
`feature/F001`, a stash of the person's own, its main line on a branch called `develop`, and a
merge in progress. The runs, in order:

1. the first run is refused in one line naming the fix (`git merge --abort` or commit), and
   touches nothing;
2. the person aborts their merge; a run of two sessions (the INITIALIZER stages everything with
   `git add -A`, as real agents do, and IMPLEMENT too), then a resumed run to the end;
3. the person edits a file again and reruns the finished project to see its summary.

Each run leaves everything of the person's as it was, or set aside and named with the command
that brings it back; the person's CLAUDE.md reaches every session's system prompt (the scripted
model server runs in the test process and records each request's system prompt), and the work
tree ends on `main` (where the work is), naming `develop`: the person asked for work to land on
`main` (`--land-on main`; a review branch is the default: test_morning_review.py). With one lane
and with three (issue 30).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from test_e2e import IMPL, INIT, REVIEW, command, explain, run, sequence

from scripted_model.hermetic import hermetic_env
from scripted_model.offline import RobotBrain
from scripted_model.protocol import Fault, Reply, Turn
from scripted_model.scenario import Scenario
from scripted_model.server import ScriptedModelServer
from session_scheduler.repo import adoption
from session_scheduler.run.prompts import EXAMPLE_SPEC
from session_scheduler.store import events

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("bwrap") is None, reason="no bubblewrap")]

RULES = "# House rules\n\nAlways use tabs.\n"
GITIGNORE = "*.log\n"
PERSON = ("-c", "user.name=Person", "-c", "user.email=person@example.org")


class RecordingBrain(RobotBrain):
    """The robot, recording the system prompt each session's requests carried."""

    def __init__(self, scenario: Scenario) -> None:
        super().__init__(scenario)
        self.systems: dict[int, list[str]] = {}
        self.firsts: dict[int, str] = {}
        """Each session's opening messages (its brief among them), as the model got them."""

    def respond(self, turn: Turn) -> Reply | Fault:
        if self.role_of(turn) is not None:
            self.systems.setdefault(self.session_of(turn), []).append(turn.system)
            number = self.session_of(turn)
            if number not in self.firsts or "Your brief" not in self.firsts[number]:
                self.firsts[number] = json.dumps(turn.messages[:2])  # the opening: its brief among them
        return super().respond(turn)


def sh(project: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=project, capture_output=True, text=True, timeout=60, check=False
    )
    return done.stdout


def person_s_repository(project: Path) -> dict[str, str]:
    """Build the repository; return what must be found again after each run."""
    project.mkdir(parents=True)
    sh(project, "init", "-q", "-b", "develop")
    (project / "CLAUDE.md").write_text(RULES)
    (project / ".gitignore").write_text(GITIGNORE)
    (project / "notes.md").write_text("line 1\n")
    (project / "merged.md").write_text("base\n")
    sh(project, "add", "CLAUDE.md", ".gitignore", "notes.md", "merged.md")
    sh(project, *PERSON, "commit", "-qm", "the person's start")
    sh(project, "branch", "feature/F001")  # named as the scheduler's work branches are
    (project / "notes.md").write_text("line 1\nstashed by the person\n")
    sh(project, "stash", "push", "-q", "-m", "the person's own stash")
    sh(project, "checkout", "-q", "-b", "theirs")
    (project / "merged.md").write_text("theirs\n")
    sh(project, *PERSON, "commit", "-qam", "theirs")
    sh(project, "checkout", "-q", "develop")
    (project / "merged.md").write_text("ours\n")
    sh(project, *PERSON, "commit", "-qam", "ours")
    sh(project, *PERSON, "merge", "-q", "theirs")  # a conflict: the merge stays in progress
    assert (project / ".git" / "MERGE_HEAD").exists()
    (project / "notes.md").write_text("line 1\nmy uncommitted edit\n")  # uncommitted, not part of the merge
    (project / "scratch.txt").write_text("untracked\n")
    return {
        "develop": sh(project, "rev-parse", "develop").strip(),
        "feature/F001": sh(project, "rev-parse", "feature/F001").strip(),
        "stash": sh(project, "rev-parse", "stash@{0}").strip(),
    }


def the_person_s_files_are_intact(project: Path, kept: dict[str, str]) -> None:
    assert (project / "CLAUDE.md").read_text() == RULES
    assert (project / ".gitignore").read_text() == GITIGNORE
    for branch in ("develop", "main"):
        assert sh(project, "show", f"{branch}:CLAUDE.md") in ("", RULES)
        assert sh(project, "show", f"{branch}:.gitignore") in ("", GITIGNORE)
    assert sh(project, "log", "--format=%s", "--all", "--", "CLAUDE.md", ".gitignore").split("\n")[:1] == [
        "the person's start"
    ]
    assert sh(project, "rev-parse", "develop").strip() == kept["develop"]
    stashes = sh(project, "stash", "list", "--format=%H %gs").splitlines()
    assert f"{kept['stash']} On develop: the person's own stash" in stashes, stashes


@pytest.mark.parametrize("lanes", ["1", "3"])
def test_an_existing_repository_is_left_as_it_was_and_its_claude_md_reaches_every_session(
    tmp_path: Path, lanes: str
) -> None:
    started = time.monotonic()
    project = tmp_path / "generations" / "mine"
    kept = person_s_repository(project)
    status_before = sh(project, "status", "--porcelain")
    scenario = Scenario.from_json(
        {"features": 1, "faults": [{"session": 1, "kind": "stage_all"}, {"session": 2, "kind": "stage_all"}]}
    )
    brain = RecordingBrain(scenario)
    with ScriptedModelServer(brain, log_path=tmp_path / "requests.jsonl") as server:
        env = hermetic_env(server.base_url, tmp_path / "cli-home", auth_token="token")
        env["API_TIMEOUT_MS"] = "20000"
        env["AGENT_GENERATIONS_DIR"] = str(tmp_path / "generations")

        # 1. a merge in progress: refused in one line, nothing touched
        spec = tmp_path / "spec.txt"
        spec.write_text(EXAMPLE_SPEC.read_text())  # what to build on the person's code
        bare = run(command(project, "--lanes", lanes), env)  # no spec: refused, nothing touched
        assert bare.returncode == 2 and "give --spec FILE" in bare.stderr, explain(bare)
        refused = run(command(project, "--lanes", lanes, "--spec", str(spec)), env)
        assert refused.returncode == 1, explain(refused)
        assert (
            "in the middle of a merge: finish it (`git commit`) or abort it (`git merge --abort`)"
            in refused.stdout + refused.stderr
        )
        assert (project / ".git" / "MERGE_HEAD").exists() and sh(
            project, "status", "--porcelain"
        ) == status_before
        assert not brain.systems and not (project / ".agent_logs" / "adoption.json").exists()
        the_person_s_files_are_intact(project, kept)

        # 2. the person aborts their merge; two sessions, then the rest in a resumed run
        sh(project, "merge", "--abort")
        assert (project / "notes.md").read_text() == "line 1\nmy uncommitted edit\n"
        first = run(
            command(
                project, "--max-iterations", "2", "--lanes", lanes, "--land-on", "main", "--spec", str(spec)
            ),
            env,
        )
        assert first.returncode == 3, explain(first)
        second = run(command(project), env)  # the lane count saved
        assert second.returncode == 0, explain(second)
    assert sequence(project) == [INIT, IMPL, REVIEW]  # the INITIALIZER's `git add -A` was verified at once

    # every session got the person's CLAUDE.md in its system prompt, the resumed run's too
    assert sorted(brain.systems) == [1, 2, 3]
    for number, systems in brain.systems.items():
        assert all(adoption.HEADING in system and "Always use tabs." in system for system in systems), number
    assert json.loads((project / ".agent_logs" / "adoption.json").read_text())["branch"] == "develop"
    # the first planning session was told the truth about the person's code, and shown a map of it
    first_system, first_brief = brain.systems[1][0], brain.firsts[1]
    assert "a codebase its" in first_system and "Lay no new skeleton" in first_system
    assert "the scheduler made one commit (`.gitignore`)" not in first_system
    assert "Create the project skeleton" not in first_system
    assert "Repository map of commit" in first_brief and "Languages: Markdown 3 files" in first_brief
    assert "The repository's own configuration names: no test runner, linter or type checker." in first_brief

    # nothing of the scheduler's was committed, and the person's files are as they were
    staged_all = sh(project, "show", "--name-only", "--format=", "main~0^{/chore: project skeleton}").split()
    assert staged_all and not any(
        name == "CLAUDE.md" or name.startswith((".agent", ".claude")) for name in staged_all
    ), staged_all
    the_person_s_files_are_intact(project, kept)
    assert sh(project, "rev-parse", "refs/scheduler/preexisting/feature/F001").strip() == kept["feature/F001"]
    assert (
        "set aside: your branch feature/F001" in first.stdout
        and "git branch <name> refs/scheduler/preexisting/feature/F001" in first.stdout
    )

    # the uncommitted edit and the untracked file were set aside once, named with the command that brings them back
    notes = re.findall(
        r"set aside: uncommitted work is kept as (stash@\{\d+\}) .*`git stash pop \1` brings it back",
        first.stdout,
    )
    assert len(notes) == 1, first.stdout
    ours = [
        line for line in sh(project, "stash", "list", "--format=%gs").splitlines() if "scheduler:" in line
    ]
    assert len(ours) == 1, ours
    set_aside = {e["ref"] for e in events.read(events.log_path(project)) if e["kind"] == "set_aside"}
    assert set_aside == {"refs/scheduler/preexisting/feature/F001", notes[0]}, set_aside
    shown = sh(project, "stash", "show", "--include-untracked", "--name-only", "stash@{0}").split()
    assert sorted(shown) == ["notes.md", "scratch.txt"]

    # the work tree ends on main, clean, and the person's branch is named with the command that goes back
    assert sh(project, "symbolic-ref", "--short", "HEAD").strip() == "main"
    assert sh(project, "status", "--porcelain") == ""
    assert "your branch develop is as you left it (`git checkout develop`)" in second.stdout

    # 3. a rerun of the finished project to see its summary touches nothing
    (project / "notes.md").write_text("line 1\nanother edit\n")
    stash_list = sh(project, "stash", "list")
    rerun = run(command(project), env)
    assert rerun.returncode == 0, explain(rerun)
    assert (
        sh(project, "stash", "list") == stash_list and sh(project, "status", "--porcelain") == " M notes.md\n"
    )
    assert (project / "notes.md").read_text() == "line 1\nanother edit\n"
    assert sh(project, "symbolic-ref", "--short", "HEAD").strip() == "main"
    assert time.monotonic() - started < 120
