"""The one place a run's session runner is built: the real Claude Code CLI, either against the
user's own endpoint or against the scripted model on loopback (`--offline-demo`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from agent import ClaudeSessionRunner, SessionRunner
from scripted_model.scenario import Scenario

Echo = Callable[[str], None]
RunnerFactory = Callable[[Echo, "Scenario | None", Path], AbstractContextManager[SessionRunner]]
"""(echo, offline scenario or None, the project's log folder) -> a runner for the whole run."""

REQUEST_LOG = "scripted_model_requests.jsonl"


@contextmanager
def open_runner(echo: Echo, scenario: Scenario | None, log_dir: Path) -> Iterator[SessionRunner]:
    """The real CLI with the inherited environment, or, given a scenario, the same CLI pointed
    at the scripted model (started here, stopped when the run ends; its requests logged)."""
    if scenario is None:
        yield ClaudeSessionRunner(echo)
        return
    from scripted_model.offline import offline_environment

    log_dir.mkdir(parents=True, exist_ok=True)
    with offline_environment(scenario=scenario, log_path=log_dir / REQUEST_LOG) as env:
        echo(f"Offline demo: scripted model at {env['ANTHROPIC_BASE_URL']} (no API key, no network)")
        yield ClaudeSessionRunner(echo, env=env)
