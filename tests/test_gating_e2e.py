"""The app gate through the real Claude Code CLI and the real boxes: the offline demo with a web
front, whose app the scheduler starts in its own sandbox on every branch and on main."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_lanes_e2e import explain, of, run_demo

from session_scheduler.view import project_report

pytestmark = [pytest.mark.e2e]

WEB = {
    "description": "a web front; F002's first IMPLEMENT breaks it, its FIX mends it",
    "features": 2,
    "web": True,
    "app_broken": ["F002"],
    "depends": {"F002": ["F001"]},
}


def test_the_web_front_is_started_boxed_on_each_branch_and_a_feature_that_breaks_it_goes_to_fix(
    tmp_path: Path,
) -> None:
    run = run_demo(tmp_path, tmp_path / "web", WEB)
    assert run.proc.returncode == 0, explain(run.proc)
    ran = [
        (e.get("feature"), e["where"], {g["name"]: g["passed"] for g in e["gates"]})
        for e in of(run.log, "gates_ran")
    ]
    assert ("F002", "branch", {"app": False}) in ran and ("F002", "branch", {"app": True}) in ran, ran
    assert ("F002", "main", {"tests": True, "app": True}) in ran, ran
    (red,) = [e for e in of(run.log, "gates_ran") if not e["passed"]]
    assert "no port to listen on" in red["red"]["app"] and "exited with code 1" in red["red"]["app"]
    roles = [e["role"] for e in of(run.log, "session_started", feature="F002")]
    assert roles == ["IMPLEMENT", "FIX", "REVIEW"], roles
    assert "gates red on feature/F002: app; back to FIX" in run.proc.stdout
    data = project_report.gather(run.project)
    assert {r.id: r.tests for r in data.features}[
        "F002"
    ] == "branch: app passed; main: tests passed, app passed"
