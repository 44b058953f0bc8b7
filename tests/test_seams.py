"""The seams lanes and other machines will need: an asynchronous runner, a runner factory that
knows nothing of the scripted model (the clock and the authority have their own tests)."""

from __future__ import annotations

import inspect
from pathlib import Path

from scripted_model.scenario import Scenario
from session_scheduler.run import runners
from session_scheduler.run.agent import ClaudeSessionRunner
from session_scheduler.testing.inprocess import InProcessRobotRunner


def test_every_runner_runs_a_session_as_a_coroutine() -> None:
    for runner in (ClaudeSessionRunner, InProcessRobotRunner):
        assert inspect.iscoroutinefunction(runner.run), runner


def test_the_runner_factory_type_names_no_test_double(tmp_path: Path) -> None:
    assert "Scenario" not in repr(runners.RunnerFactory) and "scripted_model" not in repr(
        runners.RunnerFactory
    )
    real = runners.runner_factory(None)
    offline = runners.runner_factory(Scenario.from_json({"features": 1}))
    with real(lambda _: None, tmp_path) as runner:
        assert isinstance(runner, ClaudeSessionRunner)
    assert callable(offline)  # opening it starts the scripted model: the e2e tests do
