"""The one place a run's session runner is built: the real Claude Code CLI, either against the
user's own endpoint or against the scripted model on loopback (`--offline-demo`).

A `RunnerFactory` knows nothing of the scripted model: `runner_factory(scenario)` binds the
offline demo's scenario (or None) into the factory the command line opens for the run."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from session_scheduler.run.agent import ClaudeSessionRunner, SessionRunner, guarded_cli

if TYPE_CHECKING:
    from scripted_model.scenario import Scenario

Echo = Callable[[str], None]
RunnerFactory = Callable[[Echo, Path], AbstractContextManager[SessionRunner]]
"""(echo, the project's log folder) -> a runner for the whole run."""

REQUEST_LOG = "scripted_model_requests.jsonl"


def runner_factory(scenario: Scenario | None) -> RunnerFactory:
    """The run's factory: the real CLI, or, given a scenario, the same CLI against the scripted model."""
    return partial(open_runner, scenario=scenario)


@contextmanager
def open_runner(echo: Echo, log_dir: Path, scenario: Scenario | None = None) -> Iterator[SessionRunner]:
    """The real CLI with the inherited environment, or, given a scenario, the same CLI pointed
    at the scripted model (started here, stopped when the run ends; its requests logged)."""
    import tempfile

    # the CLI's wrapper is written once, before any session starts: written per session, one
    # lane's exec of its new wrapper failed ("Text file busy") while another lane's fork held it open
    with tempfile.TemporaryDirectory(prefix="agent-cli-", ignore_cleanup_errors=True) as folder:
        cli = guarded_cli(Path(folder))
        if scenario is None:
            yield ClaudeSessionRunner(echo, cli_path=cli)
            return
        from scripted_model.offline import offline_environment

        log_dir.mkdir(parents=True, exist_ok=True)
        with offline_environment(scenario=scenario, log_path=log_dir / REQUEST_LOG) as env:
            echo(f"Offline demo: scripted model at {env['ANTHROPIC_BASE_URL']} (no API key, no network)")
            yield ClaudeSessionRunner(echo, env=env, cli_path=cli)


AUTH_STATUS_TIMEOUT_S = 30
"""How long the bundled CLI may take to say whether it is logged in (it answers in a fraction of a second)."""


def credentials_missing() -> str | None:
    """What to do when Claude Code has no credentials, asked of the bundled CLI itself
    (`claude auth status`: an API key, a token, a subscription login or a cloud provider); None
    when it has some, or when it cannot say (the first session then tells)."""
    import json
    import os
    import subprocess

    from session_scheduler.run.classify import BUNDLED_CLI, LOGIN_HELP

    try:
        done = subprocess.run(
            [BUNDLED_CLI, "auth", "status", "--json"],
            capture_output=True,
            text=True,
            timeout=AUTH_STATUS_TIMEOUT_S,
            check=False,
        )
        status = json.loads(done.stdout)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
    if not isinstance(status, dict) or status.get("loggedIn") is not False:
        return None
    base_url = os.environ.get("ANTHROPIC_BASE_URL")
    if base_url:
        return (
            f"Claude Code has no credentials for the endpoint {base_url} (ANTHROPIC_BASE_URL): set ANTHROPIC_AUTH_TOKEN "
            "or ANTHROPIC_API_KEY for it (any value if it needs none), or unset ANTHROPIC_BASE_URL"
        )
    return LOGIN_HELP
