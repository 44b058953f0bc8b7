"""Conformance: what each session is told agrees with what its policy and its tool list allow.

Every role is rendered as its agent receives it (the text appended to Claude Code's system prompt and
the first message, `run/showing.view`): a feature on the command line and on the web, the
architecture FIX, in the project folder (one lane) and in a lane's clone. Each command the text tells
the agent to run must be one its settings and its Bash policy allow; each tool it names must be in its
tool list; no tool that is off may be named; every role is told the run is unattended.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from session_scheduler.core.config import AgentConfig, SessionType
from session_scheduler.core.confinement import Host
from session_scheduler.core.machine import Backlog, Lane, SessionState, architecture_fixes, feature
from session_scheduler.core.tasks import Task
from session_scheduler.guard import toolset
from session_scheduler.guard.bash_policy import BashContext, bash_refusal
from session_scheduler.guard.browser_box import APP_ORIGIN, BROWSER_TOOLS
from session_scheduler.guard.security import UNATTENDED, bash_decision, git_rules
from session_scheduler.repo.adoption import NONE, Adoption
from session_scheduler.run import showing
from session_scheduler.run.brief import NO_PLANNING, Planning
from session_scheduler.run.plan import SessionPlan, brief_for, plan_session
from session_scheduler.store.handoff_tools import SPECS
from session_scheduler.view.cli import main

T = SessionType
COMMAND_WORDS = ("git", "./init.sh", "bash", "sh", "python3", "python", "npm", "pytest", "make", "ls", "cat")
TOOL_NAMES = {spec.name for spec in SPECS} | set(BROWSER_TOOLS) | set(toolset.OFF_TOOLS)
HOST = Host(("/home/ada", "/root"), "/srv/claude", ("MY_SERVICE_TOKEN",), (), "/tmp")
FEATURES = [
    {"id": "F001", "category": "functional", "description": "Add a task", "passes": True,
     "steps": ["Run `python3 -m todo add milk` -> prints `1`"]},
    {"id": "F002", "category": "functional", "description": "List the tasks", "passes": False,
     "steps": ["Run `python3 -m todo list` -> prints `1 [ ] milk`"], "depends_on": ["F001"]},
    {"id": "F003", "category": "web", "description": "The page lists the tasks", "passes": False,
     "steps": ["Open `/` -> the page shows `todo`"]},
]  # fmt: skip
REVIEWS = {
    "reviews": [
        {"review_id": 1, "feature_id": "F002", "kind": "feature", "verdict": "REQUEST_CHANGES",
         "issues": {"critical": [], "major": ["todo/cli.py: list prints nothing"], "minor": []},
         "acceptance": [{"step": 1, "passed": False, "evidence": "printed nothing"}]},
        {"review_id": 2, "feature_id": None, "kind": "architecture", "verdict": "REQUEST_CHANGES",
         "issues": {"critical": [], "major": ["todo/store.py and todo/cli.py both parse the file"], "minor": []}},
    ],
    "fixes": [{"fix_id": 1, "review_id": 1, "issues_fixed": ["list prints the tasks"],
               "notes": "left the colour output: not in the spec"}],
}  # fmt: skip
PROGRESS = {
    "project_name": "app",
    "current_phase": "REVIEW",
    "current_feature": "F002",
    "current_branch": "feature/F002",
    "features_completed": 1,
    "sessions": [
        {"session_id": 1, "agent_type": "FIX", "features_touched": ["F002"], "outcome": "FIXED",
         "commit_range": {"from": "a", "to": "b"}, "notes": "fixed the list"}
    ],
}  # fmt: skip
CASES = {
    "INITIALIZER": (SessionState(), False),
    "IMPLEMENT": (SessionState(Backlog(("F001", "F002", "F003")), Lane(T.IMPLEMENT, feature("F002"))), False),
    "REVIEW": (SessionState(Backlog(("F001", "F002", "F003")), Lane(T.REVIEW, feature("F002"))), False),
    "REVIEW-web": (SessionState(Backlog(("F001", "F002", "F003")), Lane(T.REVIEW, feature("F003"))), True),
    "FIX": (
        SessionState(
            Backlog(("F001", "F002", "F003")), Lane(T.FIX, feature("F002"), fix_rounds=1, open_review=1)
        ),
        False,
    ),
    "FIX-architecture": (
        SessionState(
            Backlog(("F001", "F002", "F003")), Lane(T.FIX, architecture_fixes(2), fix_rounds=1, open_review=2)
        ),
        False,
    ),
    "ARCHITECTURE": (SessionState(Backlog(("F001", "F002", "F003")), Lane(T.ARCHITECTURE)), False),
    "INITIALIZER-existing": (SessionState(), False),
    "INITIALIZER-extend": (SessionState(Backlog(("F001", "F002", "F003")), Lane(T.INITIALIZER)), False),
}
MAP = "# Repository map of commit 0123456789ab\n\n## Source files\n\n- `todo/cli.py`\n  - def main(argv)\n"
ADOPTED = {
    "INITIALIZER-existing": Adoption("", "none", "develop", 12, "0123456789abcdef0123456789abcdef01234567")
}
"""The forms of the INITIALIZER: on a codebase the person had, and over a list a newer spec extends."""
PLANNING = {
    "INITIALIZER-existing": Planning(existing=True, repo_map=MAP),
    "INITIALIZER-extend": Planning(
        spec_change="@@ -3 +3,2 @@\n- `list`: print the tasks\n+- `count`: print how many tasks there are",
        tasks=(Task("#12", "`count` prints how many tasks there are", ""),),
    ),
    "ARCHITECTURE": Planning(repo_map=MAP),
}


def project_with_records(tmp_path: Path) -> Path:
    project = tmp_path / "app"
    project.mkdir()
    (project / "feature_list.json").write_text(json.dumps({"features": FEATURES}))
    (project / "reviews.json").write_text(json.dumps(REVIEWS))
    (project / "progress.json").write_text(json.dumps(PROGRESS))
    return project


def plan_of(
    project: Path, workdir: Path, state: SessionState, web: bool, config: AgentConfig, case: str = ""
) -> SessionPlan:
    brief = brief_for(state, config, project, APP_ORIGIN if web else None, PLANNING.get(case, NO_PLANNING))
    return plan_session(
        state,
        config,
        workdir,
        spent_usd=0.0,
        brief=brief,
        host=HOST,
        outage_s=0.0,
        adopted=ADOPTED.get(case, NONE),
    )


def told_commands(text: str) -> list[str]:
    """The commands the text tells the agent to run: backticked spans that start with a command."""
    return [span for span in re.findall(r"`([^`\n]+)`", text) if span.split()[0] in COMMAND_WORDS]


def named_tools(text: str) -> set[str]:
    """The tools the text names: a known tool's name in backticks, or any `mcp__server__tool`."""
    spans = set(re.findall(r"`([A-Za-z_]+)`", text))
    called = set(re.findall(r"`([a-z_]+)` hand-off tool", text))  # named as a tool, known or not
    known = {span for span in spans if span in TOOL_NAMES}
    return known | called | set(re.findall(r"mcp__[a-z]+__[a-z_]+", text))


@pytest.mark.parametrize("where", ["one lane", "lanes"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("test_command", [None, "bash init.sh"])
def test_what_each_role_is_told_its_policy_and_tools_allow(
    tmp_path: Path, case: str, where: str, test_command: str | None
) -> None:
    state, web = CASES[case]
    role = state.lane.role
    project = project_with_records(tmp_path)
    workdir = project if where == "one lane" else tmp_path / "app.lanes" / "lane-1"
    workdir.mkdir(parents=True, exist_ok=True)
    plan = plan_of(project, workdir, state, web, AgentConfig(test_command=test_command), case)
    text = showing.view(plan, browser=web)
    assert UNATTENDED in text, f"{case}: not told the run is unattended"

    told = told_commands(text)
    assert told, f"{case} is told to run no command at all"
    refused = [command for command in told if bash_decision(plan.settings, command) != "allow"]
    assert refused == [], f"{case} is told to run commands its settings refuse: {refused}"
    work = state.lane.work
    start = work.branch if work is not None and role in (T.REVIEW, T.FIX) else "main"
    allowed, denied = git_rules(plan.settings)
    branches = frozenset({"main", work.branch} if work else {"main"})
    context = BashContext(role, work, workdir, workdir, start, branches, allowed, denied)
    said = bash_refusal("\n".join(told), context)  # in the order told: a checkout moves the branch
    assert said is None, f"{case}: its Bash policy refuses what it is told to run: {said}"

    tools = toolset.session_tools(role, browser=web)
    short = {name.split("__")[-1] for name in tools}
    outside = {name for name in named_tools(text) if name not in tools and name.split("__")[-1] not in short}
    assert outside == set(), f"{case} is told of tools it does not have: {sorted(outside)}"
    off = [name for name in toolset.OFF_TOOLS if re.search(rf"\b{name}\b", text)]
    assert off == [], f"{case}'s text names tools that are off: {off}"


def test_the_conformance_check_catches_a_tool_the_role_lacks(tmp_path: Path) -> None:
    """The check above fires: REVIEW told of `record_fix` (a FIX tool) is caught."""
    state, _ = CASES["REVIEW"]
    tools = toolset.session_tools(state.lane.role)
    assert "record_fix" in named_tools("call `record_fix` then `brief`")
    assert "check_it" in named_tools("check it with the `check_it` hand-off tool")
    assert "mcp__handoff__record_fix" not in tools


def test_a_review_sees_the_last_fix_and_what_it_left(tmp_path: Path) -> None:
    project = project_with_records(tmp_path)
    state, web = CASES["REVIEW"]
    plan = plan_of(project, project, state, web, AgentConfig())
    assert "## The last fix (fix 1, for review 1)" in plan.kickoff
    assert "left the colour output: not in the spec" in plan.kickoff
    implement, _ = CASES["IMPLEMENT"]
    assert "The last fix" not in plan_of(project, project, implement, False, AgentConfig()).kickoff


def test_the_architecture_fix_is_told_a_commit_scope_git_takes(tmp_path: Path) -> None:
    project = project_with_records(tmp_path)
    state, _ = CASES["FIX-architecture"]
    text = plan_of(project, project, state, False, AgentConfig()).system_prompt
    assert "fix(arch-2): address review 2" in text and "none (architecture" not in text


@pytest.mark.parametrize("role", ["initializer", "implement", "review", "fix", "architecture"])
def test_show_prints_what_a_session_of_the_role_receives(tmp_path: Path, role: str) -> None:
    project = project_with_records(tmp_path)
    result = CliRunner().invoke(main, ["--project-dir", str(project), "--show", role])
    assert result.exit_code == 0, result.output
    assert f"# YOUR ROLE - {role.upper()} AGENT" in result.output
    assert "--- first message" in result.output and "Dry run: nothing was launched" in result.output
    listed = result.output.split("--- tools (")[1].split("\n---")[0].splitlines()[1:]
    assert listed == list(toolset.session_tools(T(role.upper()))), listed


# --- the pieces, one by one ---------------------------------------------------------------------


def test_only_the_roles_that_write_code_get_the_edit_tools_and_only_a_web_review_the_browser() -> None:
    for role in (T.INITIALIZER, T.IMPLEMENT, T.FIX):
        assert toolset.base_tools(role) == ("Bash", "Read", "Glob", "Grep", "Edit", "Write")
    for role in (T.REVIEW, T.ARCHITECTURE):
        assert toolset.base_tools(role) == ("Bash", "Read", "Glob", "Grep")
    browser = {f"mcp__browser__{name}" for name in BROWSER_TOOLS}
    assert not browser & set(toolset.session_tools(T.REVIEW))
    assert browser <= set(toolset.session_tools(T.REVIEW, browser=True))


def test_a_tool_the_session_does_not_have_is_refused_naming_the_ones_it_has() -> None:
    refusal = toolset.tool_refusal(T.REVIEW, "Write")
    assert refusal is not None
    has = refusal.split("(it has: ", 1)[1].rstrip(")").split(", ")
    assert has == [name.removeprefix("mcp__") for name in toolset.session_tools(T.REVIEW)]
    assert "handoff__record_review" in has and "browser__browser_snapshot" not in has
    web = toolset.tool_refusal(T.REVIEW, "Write", browser=True)
    assert web is not None and "browser__browser_snapshot" in web
    assert toolset.tool_refusal(T.REVIEW, "mcp__browser__browser_snapshot", browser=True) is None
    assert toolset.tool_refusal(T.IMPLEMENT, "Write") is None


LISTED = [{"id": "F001"}, {"id": "F002", "category": "web"}, {"id": "F003"}]


def test_the_session_shown_is_the_next_one_of_that_role_else_one_on_the_first_open_feature() -> None:
    going = SessionState(
        Backlog(("F001", "F002", "F003"), passing=frozenset({"F001"})), Lane(T.REVIEW, feature("F002"))
    )
    assert showing.state_to_show(T.REVIEW, going, LISTED) is going
    implement = showing.state_to_show(T.IMPLEMENT, going, LISTED)
    assert implement.lane == Lane(T.IMPLEMENT, feature("F002")) and implement.backlog == going.backlog
    blocked = SessionState(
        Backlog(("F001", "F002", "F003"), passing=frozenset({"F001"}), blocked=frozenset({"F002"})),
        Lane(T.DONE),
    )
    assert showing.state_to_show(T.IMPLEMENT, blocked, LISTED).lane.work == feature("F003")
    fix = showing.state_to_show(T.FIX, blocked, LISTED).lane
    assert fix == Lane(T.FIX, feature("F003"), fix_rounds=1, open_review=1)
    assert showing.state_to_show(T.ARCHITECTURE, blocked, LISTED).lane == Lane(T.ARCHITECTURE)
    assert showing.state_to_show(T.INITIALIZER, blocked, LISTED).lane == Lane(T.INITIALIZER)
    done = SessionState(Backlog(("F001", "F002"), passing=frozenset({"F001", "F002"})), Lane(T.DONE))
    assert showing.state_to_show(T.REVIEW, done, LISTED).lane.work == feature("F001")  # all pass: the first
    new = showing.state_to_show(T.IMPLEMENT, SessionState(), LISTED)
    assert new.backlog.features == ("F001", "F002", "F003") and new.lane.work == feature("F001")
    assert showing.state_to_show(T.IMPLEMENT, SessionState(), []).lane.work == feature("F001")


def test_only_a_review_of_a_web_feature_is_a_web_review() -> None:
    backlog = Backlog(("F001", "F002"))
    assert showing.is_web_review(SessionState(backlog, Lane(T.REVIEW, feature("F002"))), LISTED)
    assert not showing.is_web_review(SessionState(backlog, Lane(T.REVIEW, feature("F001"))), LISTED)
    assert not showing.is_web_review(SessionState(backlog, Lane(T.IMPLEMENT, feature("F002"))), LISTED)
    assert not showing.is_web_review(SessionState(backlog, Lane(T.REVIEW)), LISTED)


def test_the_view_says_each_part_s_size_and_lists_the_session_s_tools(tmp_path: Path) -> None:
    state = SessionState(Backlog(("F001", "F002")), Lane(T.REVIEW, feature("F002")))
    plan = plan_session(
        state,
        AgentConfig(),
        tmp_path,
        spent_usd=0.0,
        brief="the brief",
        host=HOST,
        outage_s=0.0,
        adopted=NONE,
    )
    text = showing.view(plan, browser=True)
    assert (
        f"--- appended to Claude Code's system prompt ({len(plan.system_prompt.encode())} bytes) ---" in text
    )
    assert f"--- first message ({len(plan.kickoff.encode())} bytes) ---" in text
    tools = toolset.session_tools(T.REVIEW, browser=True)
    assert f"--- tools ({len(tools)}; every other Claude Code tool is off) ---\n" + "\n".join(tools) in text
    assert "mcp__browser__" not in showing.view(plan, browser=False)


@pytest.mark.parametrize(
    ("case", "says", "never"),
    [
        ("INITIALIZER", ("the scheduler made one commit (`.gitignore`)", "Create the project skeleton"), ()),
        (
            "INITIALIZER-existing",
            ("a codebase its", "Lay no new skeleton", "Repository map of commit", "`todo/cli.py`"),
            (
                "made one commit (`.gitignore`)",
                "Create the project skeleton",
                "Implement no feature yet",
                "init.sh and the project skeleton",
            ),
        ),
        (
            "INITIALIZER-extend",
            (
                "the spec has grown",
                "## The spec changed: plan its new features",
                "Number the new features from F004 on.",
                "+- `count`: print how many tasks there are",
                "- `#12`: `count` prints how many tasks there are",
                "Commit nothing.",
                "You commit nothing and create no branch.",
            ),
            (
                "Create the project skeleton",
                "made one commit",
                "**Write `init.sh`**",
                "Every `passes` is `false`",
                "init.sh and the project skeleton",
                "You commit on `main`",
            ),
        ),
        ("ARCHITECTURE", ("Repository map of commit", "a\n   map of the code on `main`"), ()),
    ],
)
def test_each_form_of_the_planning_session_is_told_what_is_true_where_it_runs(
    tmp_path: Path, case: str, says: tuple[str, ...], never: tuple[str, ...]
) -> None:
    """A new project, a person's codebase, a built project whose spec grew, and an architecture
    review each get the text that is true for them, and none gets another's."""
    state, web = CASES[case]
    project = project_with_records(tmp_path)
    text = showing.view(plan_of(project, project, state, web, AgentConfig(), case), browser=web)
    assert [s for s in says if s not in text] == [], case
    assert [s for s in never if s in text] == [], case
    assert text.count("## Your job") == 1 and text.count("## Read first") == 1, case  # each part once
