"""Language plugins: from the files of one commit, the gates a project's own configuration names.
A plugin names only what the project configures or depends on; it guesses nothing else. PURE."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from collections.abc import Callable, Iterable
from configparser import ConfigParser
from configparser import Error as IniError
from dataclasses import dataclass
from typing import Any, Protocol

from session_scheduler.core.gates import Gate, GateSet


@dataclass(frozen=True)
class Tree:
    """The files of one commit."""

    names: frozenset[str]
    """Relative POSIX paths of the files."""
    read: Callable[[str], str | None]
    """A file's text; None when it is absent, too large or not text."""

    def toml(self, name: str) -> dict[str, Any]:
        """A TOML file's tables; empty when absent or malformed (the plugin then names less)."""
        text = self.read(name) if name in self.names else None
        try:
            return tomllib.loads(text) if text else {}
        except tomllib.TOMLDecodeError:
            return {}

    def json(self, name: str) -> dict[str, Any]:
        text = self.read(name) if name in self.names else None
        try:
            data = json.loads(text) if text else {}
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}

    def ini(self, name: str) -> ConfigParser:
        parser = ConfigParser(interpolation=None)
        text = self.read(name) if name in self.names else None
        try:
            parser.read_string(text or "")
        except IniError:
            return ConfigParser(interpolation=None)
        return parser


class Plugin(Protocol):
    """A language: whether a tree is written in it, and the gates its configuration names."""

    name: str

    def detect(self, tree: Tree) -> bool: ...

    def gates(self, tree: Tree) -> GateSet:
        """The gates (source `detected:<name>`); possibly none, when the project configures none."""
        ...


def _table(data: dict[str, Any], *keys: str) -> dict[str, Any]:
    for key in keys:
        found = data.get(key)
        data = found if isinstance(found, dict) else {}
    return data


REQUIREMENT_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _names(requirements: Iterable[Any]) -> set[str]:
    """Normalised distribution names of requirement strings (`Ruff>=0.5` -> `ruff`)."""
    found = set()
    for line in requirements:
        match = REQUIREMENT_NAME.match(line) if isinstance(line, str) else None
        if match and not line.lstrip().startswith(("-", "#")):
            found.add(re.sub(r"[-_.]+", "-", match.group(1)).lower())
    return found


class PythonPlugin:
    """pyproject.toml, setup.py, requirements*.txt or Python files at the top or in a package."""

    name = "python"

    def detect(self, tree: Tree) -> bool:
        return any(
            name in ("pyproject.toml", "setup.py")
            or (name.startswith("requirements") and name.endswith(".txt") and "/" not in name)
            or (name.endswith(".py") and "/" not in name)
            or name.endswith("/__init__.py")
            for name in tree.names
        )

    def gates(self, tree: Tree) -> GateSet:
        pyproject = tree.toml("pyproject.toml")
        tool = _table(pyproject, "tool")
        requirements = sorted(n for n in tree.names if re.fullmatch(r"requirements[^/]*\.txt", n))
        deps = _pyproject_deps(pyproject) | {
            name for file in requirements for name in _names((tree.read(file) or "").splitlines())
        }
        mypy_ini = next((n for n in ("mypy.ini", ".mypy.ini") if n in tree.names), None)
        pytest_configured = (
            "pytest" in deps
            or "ini_options" in _table(tool, "pytest")
            or "pytest.ini" in tree.names
            or any(n == "conftest.py" or n.endswith("/conftest.py") for n in tree.names)
        )
        has_tests = any(n.startswith("tests/") for n in tree.names)
        project = _table(pyproject, "project")
        installable = bool(project) and bool(
            project.get("dependencies") or project.get("optional-dependencies")
        )
        venv = bool(requirements) or installable
        tools: list[str] = []

        def run(module: str, args: str, bare: str) -> str:
            """`module` from the project's venv (installed there when it is not a dependency)."""
            if not venv:
                return bare
            if module not in deps and module not in tools and module != "unittest":
                tools.append(module)
            return f".venv/bin/python -m {module} {args}".rstrip()

        gates: list[Gate] = []
        runner = ""
        if pytest_configured:
            runner = "pytest -q"
            gates.append(Gate("tests", run("pytest", "-q", "python3 -m pytest -q"), "tests"))
        elif has_tests:
            runner = "unittest discover -s tests -q"
            gates.append(
                Gate("tests", run("unittest", "discover -s tests -q", f"python3 -m {runner}"), "tests")
            )
        if "ruff" in deps or "ruff" in tool or {"ruff.toml", ".ruff.toml"} & tree.names:
            gates.append(Gate("lint", run("ruff", "check .", "ruff check ."), "lint"))
        mypy_files = _table(tool, "mypy").get("files") or (
            tree.ini(mypy_ini).get("mypy", "files", fallback=None) if mypy_ini else None
        )
        if "mypy" in tool or mypy_ini:
            target = "" if mypy_files else "."
            gates.append(Gate("types", run("mypy", target, f"mypy {target}".rstrip()), "types"))
        floor = _table(tool, "coverage", "report").get("fail_under")
        if runner and isinstance(floor, int | float) and not isinstance(floor, bool):
            n = int(floor) if float(floor).is_integer() else floor
            check = f"{run('coverage', f'run -m {runner}', f'coverage run -m {runner}')} && "
            check += run("coverage", f"report --fail-under={n}", f"coverage report --fail-under={n}")
            gates.append(Gate("coverage", check, "coverage"))
        return GateSet(
            tuple(gates), _install(requirements, pyproject, installable, tools), f"detected:{self.name}"
        )


def _pyproject_deps(pyproject: dict[str, Any]) -> set[str]:
    """Every dependency pyproject.toml names: PEP 621 (optional ones too), PEP 735 groups, Poetry."""
    project = _table(pyproject, "project")
    found = _names(project.get("dependencies") or [])
    for extra in _table(project, "optional-dependencies").values():
        found |= _names(extra if isinstance(extra, list) else [])
    for group in _table(pyproject, "dependency-groups").values():
        found |= _names(group if isinstance(group, list) else [])
    poetry = _table(pyproject, "tool", "poetry")
    found |= _names(_table(poetry, "dependencies")) | _names(_table(poetry, "dev-dependencies"))
    for group in _table(poetry, "group").values():
        found |= _names(_table(group, "dependencies") if isinstance(group, dict) else {})
    return found


def _install(
    requirements: list[str], pyproject: dict[str, Any], installable: bool, tools: list[str]
) -> str | None:
    """A venv with the requirements files, the project with its extras, and the gates' tools."""
    if not requirements and not installable:
        return None
    args = [f"-r {shlex.quote(name)}" for name in requirements]
    if installable:
        extras = sorted(_table(pyproject, "project", "optional-dependencies"))
        args.append(shlex.quote(f".[{','.join(extras)}]" if extras else "."))
    args.extend(tools)
    return f"python3 -m venv .venv && .venv/bin/pip install -q {' '.join(args)}"


NPM_DEFAULT_TEST = "no test specified"
"""What `npm init`'s placeholder test script says (it exits 1: not a gate)."""


class NodePlugin:
    """package.json: the gates are its scripts (and tsc, when it uses TypeScript)."""

    name = "node"

    def detect(self, tree: Tree) -> bool:
        return "package.json" in tree.names

    def gates(self, tree: Tree) -> GateSet:
        package = tree.json("package.json")
        scripts = {k: v for k, v in _table(package, "scripts").items() if isinstance(v, str) and v.strip()}
        deps = {*_table(package, "dependencies"), *_table(package, "devDependencies")}
        gates: list[Gate] = []
        if "test" in scripts and NPM_DEFAULT_TEST not in scripts["test"]:
            gates.append(Gate("tests", "npm test", "tests"))
        if "lint" in scripts:
            gates.append(Gate("lint", "npm run lint", "lint"))
        if "typecheck" in scripts:
            gates.append(Gate("types", "npm run typecheck", "types"))
        elif "tsconfig.json" in tree.names and "typescript" in deps:
            gates.append(Gate("types", "npx tsc --noEmit", "types"))
        if "coverage" in scripts:
            gates.append(Gate("coverage", "npm run coverage", "coverage"))
        install = "npm ci" if "package-lock.json" in tree.names else "npm install"
        return GateSet(tuple(gates), install, f"detected:{self.name}")


PLUGINS: tuple[Plugin, ...] = (PythonPlugin(), NodePlugin())


def detect(tree: Tree, plugins: tuple[Plugin, ...] = PLUGINS) -> GateSet | None:
    """The gates of the first plugin that detects its language in `tree`; None when none detects
    or that plugin finds no gate configured."""
    for plugin in plugins:
        if plugin.detect(tree):
            found = plugin.gates(tree)
            return found if found.gates else None
    return None
