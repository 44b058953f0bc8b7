"""The scheduler's version: written once, in pyproject.toml, and read from the installed
package's metadata (or from pyproject.toml itself when the checkout runs uninstalled)."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

DISTRIBUTION = "autonomous-agent-scheduler"
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _version() -> str:
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return str(tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["version"])


VERSION = _version()
"""The one version: `--version`, and each run's `run_started` event."""
