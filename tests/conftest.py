"""Shared fixtures: every test gets its own generations folder and a git identity, and leaves no
sessions' private temp folder (`agent-<hash>` in the system's temp folder) behind."""

from __future__ import annotations

import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import require_boxed_browser, require_runtime

from session_scheduler.guard import sandbox


def pytest_configure(config: pytest.Config) -> None:
    """The tests that press Ctrl-C (`_thread.interrupt_main`) need Python's own SIGINT handler: a
    suite started in the background of a shell without job control inherits SIGINT ignored, and
    `interrupt_main` then does nothing (such a test waited forever)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


_MADE: set[Path] = set()
"""Every private temp folder a test of this session asked for that was not there before it."""


@pytest.fixture(autouse=True)
def _isolated(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_GENERATIONS_DIR", str(tmp_path_factory.mktemp("generations")))
    for key in ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"):
        monkeypatch.setenv(key, "Test Agent")
    for key in ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"):
        monkeypatch.setenv(key, "agent@test.invalid")


@pytest.fixture(autouse=True)
def _no_private_tmp_left(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A session's private temp folder is removed by the run that made it (Lanes.run); a test
    that plans a session itself (write_plan makes the folder) or stops a run midway leaves it in
    the system's temp folder. Note each one a test asks for (the path is unchanged) and remove
    those it made."""
    made: list[Path] = []
    real = sandbox.private_tmp

    def private_tmp(project: Path) -> Path:
        path = real(project)
        if not path.exists() and path not in made:
            made.append(path)
        return path

    monkeypatch.setattr(sandbox, "private_tmp", private_tmp)
    yield
    for path in made:
        shutil.rmtree(path, ignore_errors=True)
    _MADE.update(made)


@pytest.fixture(autouse=True, scope="session")
def _check_no_private_tmp_left() -> Iterator[None]:
    """The check: after the whole session, none of the private temp folders the tests made is left."""
    yield
    left = sorted(str(path) for path in _MADE if path.exists())
    if left:
        pytest.fail(f"tests left {len(left)} private temp folder(s) behind: {', '.join(left[:5])}")


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "spec.txt"
    path.write_text(
        Path(__file__)
        .resolve()
        .parent.parent.joinpath("session_scheduler", "prompts", "app_spec.txt")
        .read_text()
    )
    return path


@pytest.fixture
def runtime() -> str:
    return require_runtime()


@pytest.fixture(scope="module")
def browser_sandbox() -> None:
    """srt and chromium, for the boxed app and browser (helpers.require_boxed_browser)."""
    require_boxed_browser()
