"""The project's authority: one run at a time, its holder visible without taking it, and the
command line asking the authority it is given (not a lock of its own)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import cli_seams

from scripted_model.scenario import Scenario
from session_scheduler.core.errors import AlreadyRunning
from session_scheduler.store.authority import Authority, FileAuthority
from session_scheduler.testing.inprocess import InProcessRobotRunner
from session_scheduler.view.cli import main


def test_a_second_holder_is_refused_and_the_authority_is_free_again_after(tmp_path: Path) -> None:
    authority: Authority = FileAuthority(tmp_path)
    with (
        authority.hold(),
        pytest.raises(AlreadyRunning, match="already running"),
        FileAuthority(tmp_path).hold(),
    ):
        pass
    with FileAuthority(tmp_path).hold():
        pass  # released after the first holder exits


def test_the_holder_is_the_holding_process_while_held_and_none_when_free(tmp_path: Path) -> None:
    authority = FileAuthority(tmp_path)
    assert authority.holder() is None  # no lock file yet
    with authority.hold():
        assert FileAuthority(tmp_path).holder() == os.getpid()
    assert authority.holder() is None  # the file stays, nobody holds it


class Busy:
    """An authority that another run holds, and one that records being held."""

    def __init__(self, busy: bool) -> None:
        self.busy, self.held = busy, 0

    @contextmanager
    def hold(self) -> Iterator[None]:
        if self.busy:
            raise AlreadyRunning("another scheduler is already running (held elsewhere)")
        self.held += 1
        yield

    def holder(self) -> int | None:
        return 1 if self.busy else None


@pytest.mark.parametrize("busy", [True, False])
def test_the_command_line_runs_only_under_the_authority_it_is_given(tmp_path: Path, busy: bool) -> None:
    authority = Busy(busy)
    given: list[Path] = []

    def authority_of(project: Path) -> Busy:
        given.append(project)
        return authority

    seams = {
        **cli_seams(lambda _: InProcessRobotRunner(Scenario.from_json({"features": 1}))),
        "authority": authority_of,
    }
    project = tmp_path / "app"
    result = CliRunner().invoke(
        main, ["--project-dir", str(project), "--max-iterations", "1"], obj=seams, catch_exceptions=False
    )
    assert given == [project]
    if busy:
        assert result.exit_code == 1 and "held elsewhere" in result.output
        assert not (project / ".agent_state.json").exists(), "nothing written without the authority"
    else:
        assert result.exit_code == 3, result.output
        assert authority.held == 1 and (project / ".agent_state.json").exists()
