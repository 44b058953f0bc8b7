"""One plan on every path (issue 29): the same sessions built by one lane and by several (`Lanes`,
each in a clone beside the project) and on a worker (the lane's session received through the
exchange, `exchange.receive`: its plan re-rooted by `exchange.rerooted` with the worker's `Host`)
get the same settings but for their paths: the sandbox's denials, the variables it unsets, the
system prompt with the project's adopted conventions, the tools, the CLI's options. A path that
drops the machine's `Host` or the adoption fails here (the stand-in host's facts are asserted on
every path, not only compared), and so does a lane's prompt that names its clone for the project."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from helpers import sh

from scripted_model.scenario import Scenario
from session_scheduler.core.config import AgentConfig
from session_scheduler.engine.exchange import Places, ensure_exchange, receive, send
from session_scheduler.guard import toolset
from session_scheduler.guard.sandbox import Host, private_tmp, sandbox_settings
from session_scheduler.repo import adoption
from session_scheduler.run.agent import SessionRequest, build_options
from session_scheduler.run.lanes import Lanes
from session_scheduler.testing.inprocess import InProcessRobotRunner

SPEC = Path(__file__).resolve().parent.parent / "session_scheduler" / "prompts" / "app_spec.txt"
CFG = AgentConfig(architecture_interval=100, feature_count=2, sandbox=True)
RULES = "Indent with tabs; never add a dependency without asking (one-plan-3f1a)."
HOST = Host(
    homes=("/home/ada", "/root", "/home"),
    config_dir="/srv/claude-config",
    secret_env=("ANTHROPIC_API_KEY", "MY_SERVICE_TOKEN"),
    path=("/home/ada/.pyenv/shims", "/usr/bin"),
    temp="/scratch",
)
"""A machine unlike the default: its home, a CLI config folder outside it, a secret of its own,
a toolchain under the home. Each is asserted on every path."""


def _project(where: Path) -> Path:
    """A person's repository with a CLAUDE.md (adopted at the first run) and the spec."""
    project = where / "app"
    project.mkdir(parents=True)
    (project / "CLAUDE.md").write_text(f"# Conventions\n\n{RULES}\n")
    (project / "app_spec.txt").write_text(SPEC.read_text())
    sh(project, "git init -q -b main && git config user.name Ann && git config user.email ann@example.org")
    sh(  # one date: each path's project is the same commit (a planning session's map names it)
        project,
        "git add CLAUDE.md app_spec.txt && GIT_AUTHOR_DATE=2026-01-01T00:00:00Z "
        "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z git commit -qm 'the person s start'",
    )
    return project


def _run(where: Path, lanes: int) -> list[SessionRequest]:
    """The first two sessions (INITIALIZER, then IMPLEMENT F001) as a run with `lanes` plans them."""
    project = _project(where)
    # one feature: session 2 is F001's IMPLEMENT whichever lane runs it
    runner = InProcessRobotRunner(Scenario.from_json({"features": 1}))
    if lanes == 1:
        Lanes(project, CFG, runner, echo=lambda _: None, host=HOST).run(max_iterations=2)
    else:
        Lanes(project, CFG, runner, lanes, echo=lambda _: None, host=HOST).run(max_iterations=2)
    assert [r.plan.number for r in runner.requests] == [1, 2]
    return runner.requests


def _on_worker(request: SessionRequest, tmp_path: Path) -> SessionRequest:
    """The lane's session as a worker on another machine receives it (this one's `HOST`)."""
    remote = str(ensure_exchange(tmp_path / "exchange.git"))
    workflow = f"app-0123456789ab/session-{request.plan.number:04d}/attempt-1"
    start = json.loads(json.dumps(send(request, remote, workflow)))  # as the wire carries it
    return receive(request, remote, workflow, start, "app-0123456789ab", Places(tmp_path / "worker"), HOST)


def _seen(request: SessionRequest, tmp_path: Path) -> dict[str, Any]:
    """What the session gets, its own paths replaced by names: its work tree `<work>`, its
    private temp folder `<tmp>`, any other folder of this test `<beside>` (the project, the
    lanes' clones, their parents: what each path denies besides the machine's own regions)."""
    options = build_options(request, stderr=lambda _: None)
    seen = {
        "settings": request.plan.settings,  # what `write_plan` puts in its settings file
        "system_prompt": request.plan.system_prompt,
        "kickoff": request.plan.kickoff,
        "model": options.model,
        "max_turns": options.max_turns,
        "max_budget_usd": options.max_budget_usd,
        "outage_allowance_s": request.plan.outage_allowance_s,
        "permission_mode": options.permission_mode,
        "setting_sources": options.setting_sources,
        "tools": options.tools,
        "disallowed_tools": options.disallowed_tools,
        "servers": sorted(options.mcp_servers),  # type: ignore[arg-type]
        "session_tools": toolset.session_tools(request.plan.role, browser=request.browser is not None),
    }
    text = json.dumps(seen)
    work, tmp = str(request.cwd.resolve()), str(private_tmp(request.cwd))
    text = text.replace(tmp, "<tmp>").replace(work, "<work>")
    for root in {str(tmp_path), str(tmp_path.resolve())}:  # wherever pytest keeps it (--basetemp)
        text = re.sub(re.escape(root) + r"[^\"\\]*?(?=[\"\\])", "<beside>", text)
    named: dict[str, Any] = json.loads(text)
    fs = named["settings"]["sandbox"]["filesystem"]
    for key in ("denyRead", "allowRead", "denyWrite", "allowWrite"):
        fs[key] = sorted(set(fs[key]))  # a path denies more folders beside it, all named `<beside>`
    return named


def test_one_lane_a_lane_and_a_worker_build_the_same_session_but_for_its_paths(tmp_path: Path) -> None:
    one = _run(tmp_path / "one", lanes=1)
    lane = _run(tmp_path / "lanes", lanes=2)
    assert lane[1].cwd.parent.name == "app.lanes"  # the lanes' session runs in a clone
    worker = [_on_worker(r, tmp_path / f"w{r.plan.number}") for r in lane]
    assert worker[1].cwd.is_relative_to(tmp_path / "w2" / "worker")
    for number, requests in enumerate(zip(one, lane, worker, strict=True), start=1):
        views = [_seen(r, tmp_path) for r in requests]
        for path, view in zip(("one lane", "a lane", "a worker"), views, strict=True):
            sandbox = view["settings"]["sandbox"]
            unset = {v["name"] for v in sandbox["credentials"]["envVars"]}
            denied = set(sandbox["filesystem"]["denyRead"])
            where = f"session {number} in {path}"
            assert "MY_SERVICE_TOKEN" in unset, f"{where}: the host's secret is not unset"
            assert {"/home/ada", "/root", "/home", "/srv/claude-config"} <= denied, f"{where}: {denied}"
            assert "/home/ada/.pyenv" in sandbox["filesystem"]["allowRead"], f"{where}: the toolchain"
            assert RULES in view["system_prompt"], f"{where}: no adopted conventions"
            assert "**app**" in view["system_prompt"], f"{where}: the project is named by another name"
        assert views[1] == views[0], f"session {number}: a lane's differs from one lane's"
        assert views[2] == views[1], f"session {number}: a worker's differs from its lane's"
    # what the names hide: a lane denies the project beside it and the other clones
    denied = lane[1].plan.settings["sandbox"]["filesystem"]["denyRead"]
    project = (tmp_path / "lanes" / "app").resolve()
    assert str(project.parent) in denied and str(lane[1].cwd.resolve().parent) in denied
    assert adoption.load(project).conventions.strip().endswith(RULES)
    # and the comparison has teeth: a lane's plan without the adoption, or with a stand-in host, differs
    unadopted = dataclasses.replace(lane[1], plan=dataclasses.replace(lane[1].plan, conventions=""))
    assert _seen(unadopted, tmp_path) != _seen(one[1], tmp_path)
    bare = Host(("/home/ada",), None, ("ANTHROPIC_API_KEY",), (), "/scratch")
    settings = {**lane[1].plan.settings, **sandbox_settings(lane[1].cwd, (), bare, protect_main=True)}
    unhosted = dataclasses.replace(lane[1], plan=dataclasses.replace(lane[1].plan, settings=settings))
    assert _seen(unhosted, tmp_path) != _seen(one[1], tmp_path)
