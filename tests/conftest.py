"""Shared fixtures: every test gets its own generations folder and a git identity."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_GENERATIONS_DIR", str(tmp_path_factory.mktemp("generations")))
    for key in ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"):
        monkeypatch.setenv(key, "Test Agent")
    for key in ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"):
        monkeypatch.setenv(key, "agent@test.invalid")


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
