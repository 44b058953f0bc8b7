"""The package's shape: each layer imports only the layers before it, the scripted model imports
nothing of the product, nothing edits `sys.path`, and only the design card's modules are top-level."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "session_scheduler"
LAYERS = ("core", "store", "guard", "repo", "run", "engine", "view", "testing")
"""In order: a layer may import itself and the layers before it (testing may import them all)."""
FACES = ("autonomous_agent_demo", "config", "agent", "prompts", "security", "progress")


def imported(path: Path) -> set[str]:
    """Every module name `path` imports (at any depth, in functions too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_every_module_of_the_package_lives_in_a_layer() -> None:
    loose = [p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"]
    assert loose == []
    assert sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()) == sorted(
        LAYERS
    )


@pytest.mark.parametrize("layer", LAYERS)
def test_a_layer_imports_only_the_layers_before_it(layer: str) -> None:
    allowed = LAYERS if layer == "testing" else LAYERS[: LAYERS.index(layer) + 1]
    wrong = sorted(
        f"{path.relative_to(ROOT)} imports {name}"
        for path in (PACKAGE / layer).glob("*.py")
        for name in imported(path)
        if name.startswith("session_scheduler.") and name.split(".")[1] not in allowed
    )
    assert wrong == []


def test_the_package_never_imports_the_top_level_faces() -> None:
    wrong = sorted(
        f"{path.relative_to(ROOT)} imports {name}"
        for path in PACKAGE.rglob("*.py")
        for name in imported(path)
        if name.split(".")[0] in FACES
    )
    assert wrong == []


def test_the_scripted_model_imports_nothing_of_the_product() -> None:
    wrong = sorted(
        f"{path.relative_to(ROOT)} imports {name}"
        for path in (ROOT / "scripted_model").glob("*.py")
        for name in imported(path)
        if name.split(".")[0] in {"session_scheduler", *FACES}
    )
    assert wrong == []


def test_nothing_edits_the_import_path() -> None:
    files = [
        *PACKAGE.rglob("*.py"),
        *(ROOT / "scripted_model").glob("*.py"),
        *(ROOT / "tests").glob("*.py"),
        *(ROOT / "bench").glob("*.py"),
    ]
    needle = "sys.path." + "insert"
    assert [str(p.relative_to(ROOT)) for p in files if needle in p.read_text(encoding="utf-8")] == []


def test_outside_the_checkout_only_the_package_and_the_faces_import(tmp_path: Path) -> None:
    code = (
        "import importlib, sys\n"
        "for name in ('events', 'errors', 'layout', 'policy', 'machine'):\n"
        "    try:\n        importlib.import_module(name)\n    except ImportError:\n        continue\n"
        "    sys.exit('importable: ' + name)\n"
        "import session_scheduler.run.lanes, config, agent, progress, prompts, security\n"
        "assert config.AgentConfig is session_scheduler.core.config.AgentConfig\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr or done.stdout
