"""One version: written in pyproject.toml only, read at run time from the package's metadata."""

from __future__ import annotations

import importlib.metadata
import json
import re
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from session_scheduler.core import version
from session_scheduler.core.version import VERSION
from session_scheduler.view.cli import main

ROOT = Path(__file__).resolve().parents[1]
WRITTEN = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]


def test_the_version_is_pyprojects_as_the_installed_metadata_tells_it() -> None:
    assert VERSION == WRITTEN == importlib.metadata.version(version.DISTRIBUTION)


def test_an_uninstalled_checkout_reads_pyproject(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert version._version() == WRITTEN


def test_the_version_is_written_nowhere_else() -> None:
    literal = re.compile(rf"""["']{re.escape(WRITTEN)}["']""")
    sources = [
        *ROOT.joinpath("session_scheduler").rglob("*.py"),
        *ROOT.glob("*.py"),
        *ROOT.joinpath("bench").rglob("*.py"),
    ]
    assert [str(p.relative_to(ROOT)) for p in sources if literal.search(p.read_text(encoding="utf-8"))] == []
    assert "version" not in json.loads((ROOT / "package.json").read_text(encoding="utf-8"))


def test_the_version_option_tells_it() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and result.output.strip().endswith(f"version {VERSION}")
