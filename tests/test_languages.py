"""The language plugins on small in-memory trees: what each detects, the gates and the install step
it names from the project's own configuration, and nothing it would have to guess."""

from __future__ import annotations

import json

import pytest

from session_scheduler.core.gates import Gate, GateSet
from session_scheduler.core.languages import PLUGINS, NodePlugin, Plugin, PythonPlugin, Tree, detect


def make(files: dict[str, str]) -> Tree:
    return Tree(frozenset(files), files.get)


PY = PythonPlugin()
NODE = NodePlugin()
VENV = "python3 -m venv .venv && .venv/bin/pip install -q"

# --- Python -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["pyproject.toml", "setup.py", "requirements.txt", "requirements-dev.txt", "main.py", "app/__init__.py"],
)
def test_python_is_detected_by(name: str) -> None:
    assert PY.detect(make({name: ""}))


@pytest.mark.parametrize("name", ["scripts/tool.py", "docs/requirements.txt", "package.json", "README.md"])
def test_python_is_not_detected_by(name: str) -> None:
    assert not PY.detect(make({name: ""}))


def test_python_with_pytest_as_a_requirement_and_nothing_else() -> None:
    text = "# web\n-r base.txt\n--index-url https://x\nflask==3.0\npytest>=8 # tests\n"
    found = PY.gates(make({"requirements.txt": text, "app.py": ""}))
    assert found == GateSet(
        (Gate("tests", ".venv/bin/python -m pytest -q", "tests"),),
        f"{VENV} -r requirements.txt",
        "detected:python",
    )


def test_python_every_requirements_file_is_installed() -> None:
    found = PY.gates(make({"requirements.txt": "flask\n", "requirements-dev.txt": "pytest\n"}))
    assert found.install == f"{VENV} -r requirements-dev.txt -r requirements.txt"


def test_python_without_dependencies_runs_the_system_python() -> None:
    found = PY.gates(make({"app.py": "", "conftest.py": ""}))
    assert found == GateSet((Gate("tests", "python3 -m pytest -q"),), None, "detected:python")


@pytest.mark.parametrize(
    "files",
    [
        {"pyproject.toml": "[tool.pytest.ini_options]\naddopts = '-q'\n"},
        {"pytest.ini": "[pytest]\n", "app.py": ""},
        {"tests/conftest.py": "", "app.py": ""},
        {"pyproject.toml": "[dependency-groups]\ndev = ['pytest>=8']\n"},
        {"pyproject.toml": "[tool.poetry.group.dev.dependencies]\npytest = '^8'\n"},
        {"pyproject.toml": "[tool.poetry.dev-dependencies]\npytest = '^8'\n"},
    ],
)
def test_python_pytest_when_configured_or_a_dependency(files: dict[str, str]) -> None:
    assert PY.gates(make(files)).gates == (Gate("tests", "python3 -m pytest -q"),)


def test_python_unittest_when_only_a_tests_folder() -> None:
    found = PY.gates(make({"app.py": "", "tests/test_app.py": ""}))
    assert found.gates == (Gate("tests", "python3 -m unittest discover -s tests -q"),)


def test_python_unittest_from_the_venv_installs_nothing_for_it() -> None:
    found = PY.gates(make({"requirements.txt": "flask\n", "tests/test_app.py": ""}))
    assert found.gates == (Gate("tests", ".venv/bin/python -m unittest discover -s tests -q"),)
    assert found.install == f"{VENV} -r requirements.txt"


def test_python_an_init_script_that_runs_the_tests_is_not_guessed() -> None:
    found = PY.gates(make({"app.py": "", "init.sh": "#!/bin/bash\npip install pytest\npytest\n"}))
    assert found.gates == ()
    assert detect(make({"app.py": "", "init.sh": "#!/bin/bash\npytest\n"})) is None


FULL = """
[project]
name = "app"
dependencies = ["flask"]
[project.optional-dependencies]
dev = ["pytest", "ruff", "mypy", "coverage[toml]"]
test = ["pytest-cov"]
[tool.ruff]
line-length = 100
[tool.mypy]
files = ["app"]
strict = true
[tool.coverage.report]
fail_under = 85
"""


def test_python_with_lint_types_and_coverage_configured() -> None:
    found = PY.gates(make({"pyproject.toml": FULL}))
    run = ".venv/bin/python -m"
    assert found == GateSet(
        (
            Gate("tests", f"{run} pytest -q", "tests"),
            Gate("lint", f"{run} ruff check .", "lint"),
            Gate("types", f"{run} mypy", "types"),
            Gate(
                "coverage",
                f"{run} coverage run -m pytest -q && {run} coverage report --fail-under=85",
                "coverage",
            ),
        ),
        f"{VENV} '.[dev,test]'",
        "detected:python",
    )


def test_python_without_a_venv_the_tools_run_as_they_are() -> None:
    text = "[tool.pytest.ini_options]\n[tool.ruff]\n[tool.mypy]\n[tool.coverage.report]\nfail_under = 72.5\n"
    assert PY.gates(make({"pyproject.toml": text})).gates == (
        Gate("tests", "python3 -m pytest -q", "tests"),
        Gate("lint", "ruff check .", "lint"),
        Gate("types", "mypy .", "types"),
        Gate("coverage", "coverage run -m pytest -q && coverage report --fail-under=72.5", "coverage"),
    )


def test_python_tools_configured_but_not_dependencies_are_installed_into_the_venv() -> None:
    text = '[project]\nname = "a"\ndependencies = ["flask"]\n[tool.ruff]\n[tool.mypy]\n'
    found = PY.gates(make({"pyproject.toml": text, "tests/conftest.py": ""}))
    assert found.install == f"{VENV} . pytest ruff mypy"
    assert [g.command for g in found.gates] == [
        ".venv/bin/python -m pytest -q",
        ".venv/bin/python -m ruff check .",
        ".venv/bin/python -m mypy .",
    ]


@pytest.mark.parametrize(
    ("files", "gate"),
    [
        ({"app.py": "", "ruff.toml": ""}, Gate("lint", "ruff check .", "lint")),
        ({"app.py": "", ".ruff.toml": ""}, Gate("lint", "ruff check .", "lint")),
        ({"app.py": "", "mypy.ini": "[mypy]\nfiles = app\n"}, Gate("types", "mypy", "types")),
        ({"app.py": "", ".mypy.ini": "[mypy]\nstrict = True\n"}, Gate("types", "mypy .", "types")),
        ({"app.py": "", "mypy.ini": "not an ini"}, Gate("types", "mypy .", "types")),
        (
            {"pyproject.toml": "[tool.poetry.dependencies]\nruff = '*'\n"},
            Gate("lint", "ruff check .", "lint"),
        ),
    ],
)
def test_python_lint_and_types_from_their_own_files(files: dict[str, str], gate: Gate) -> None:
    assert PY.gates(make(files)).gates == (gate,)


@pytest.mark.parametrize(("floor", "named"), [("80.0", "80"), ("true", None), ("'90'", None)])
def test_python_a_coverage_floor_is_a_number(floor: str, named: str | None) -> None:
    text = f"[tool.pytest.ini_options]\n[tool.coverage.report]\nfail_under = {floor}\n"
    found = PY.gates(make({"pyproject.toml": text}))
    assert [g.command.rsplit("=", 1)[1] for g in found.gates if g.kind == "coverage"] == (
        [named] if named else []
    )


def test_python_a_coverage_floor_without_tests_names_no_coverage_gate() -> None:
    assert PY.gates(make({"pyproject.toml": "[tool.coverage.report]\nfail_under = 90\n"})).gates == ()


def test_python_coverage_runs_unittest_when_that_is_the_test_runner() -> None:
    found = PY.gates(make({"pyproject.toml": "[tool.coverage.report]\nfail_under = 90\n", "tests/t.py": ""}))
    assert found.gates[-1].command == (
        "coverage run -m unittest discover -s tests -q && coverage report --fail-under=90"
    )


def test_python_a_malformed_pyproject_names_only_what_the_other_files_say() -> None:
    assert PY.gates(make({"pyproject.toml": "[tool.ruff", "pytest.ini": ""})).gates == (
        Gate("tests", "python3 -m pytest -q"),
    )


# --- Node -------------------------------------------------------------------------------------------


def package(scripts: dict[str, str] | None = None, **deps: dict[str, str]) -> str:
    return json.dumps({"name": "app", "scripts": scripts or {}, **deps})


def test_node_is_detected_by_package_json_only() -> None:
    assert NODE.detect(make({"package.json": "{}"}))
    assert not NODE.detect(make({"web/package.json": "{}", "index.js": ""}))


def test_node_test_script_and_npm_install_without_a_lock_file() -> None:
    found = NODE.gates(make({"package.json": package({"test": "vitest run"})}))
    assert found == GateSet((Gate("tests", "npm test", "tests"),), "npm install", "detected:node")


def test_node_npm_ci_with_a_lock_file() -> None:
    found = NODE.gates(make({"package.json": package({"test": "jest"}), "package-lock.json": "{}"}))
    assert found.install == "npm ci"


def test_node_the_placeholder_test_script_is_no_gate() -> None:
    placeholder = 'echo "Error: no test specified" && exit 1'
    assert NODE.gates(make({"package.json": package({"test": placeholder})})).gates == ()
    assert detect(make({"package.json": package({"test": placeholder})})) is None


def test_node_with_lint_typecheck_and_coverage_scripts() -> None:
    scripts = {"test": "jest", "lint": "eslint .", "typecheck": "tsc -p .", "coverage": "jest --coverage"}
    found = NODE.gates(make({"package.json": package(scripts), "tsconfig.json": "{}"}))
    assert found.gates == (
        Gate("tests", "npm test", "tests"),
        Gate("lint", "npm run lint", "lint"),
        Gate("types", "npm run typecheck", "types"),
        Gate("coverage", "npm run coverage", "coverage"),
    )


def test_node_tsc_when_typescript_is_a_dependency_with_a_tsconfig() -> None:
    text = package({"test": "jest"}, devDependencies={"typescript": "^5"})
    assert NODE.gates(make({"package.json": text, "tsconfig.json": "{}"})).gates[1] == Gate(
        "types", "npx tsc --noEmit", "types"
    )
    assert len(NODE.gates(make({"package.json": text})).gates) == 1  # no tsconfig: no tsc
    no_ts = package({"test": "jest"}, dependencies={"react": "^18"})
    assert len(NODE.gates(make({"package.json": no_ts, "tsconfig.json": "{}"})).gates) == 1


def test_node_a_blank_or_odd_script_is_no_gate() -> None:
    text = json.dumps({"scripts": {"test": " ", "lint": 5, "coverage": None}})
    assert NODE.gates(make({"package.json": text})).gates == ()


def test_node_a_malformed_package_json_names_nothing() -> None:
    assert NODE.gates(make({"package.json": "{not json"})).gates == ()
    assert NODE.gates(make({"package.json": "[1]"})).gates == ()


# --- detect -----------------------------------------------------------------------------------------


def test_detect_takes_the_first_plugin_that_detects() -> None:
    both = make({"package.json": package({"test": "jest"}), "pytest.ini": "", "app.py": ""})
    assert detect(both) == GateSet((Gate("tests", "python3 -m pytest -q"),), None, "detected:python")
    assert detect(both, (NODE, PY)) == GateSet((Gate("tests", "npm test"),), "npm install", "detected:node")


def test_detect_finds_nothing_in_an_unknown_language() -> None:
    assert detect(make({"main.go": "package main", "go.mod": "module x"})) is None
    assert detect(make({})) is None


def test_a_third_plugin_needs_only_the_protocol() -> None:
    class Go:
        name = "go"

        def detect(self, tree: Tree) -> bool:
            return "go.mod" in tree.names

        def gates(self, tree: Tree) -> GateSet:
            return GateSet((Gate("tests", "go test ./..."),), None, f"detected:{self.name}")

    plugins: tuple[Plugin, ...] = (*PLUGINS, Go())
    assert detect(make({"go.mod": "module x"}), plugins) == GateSet(
        (Gate("tests", "go test ./..."),), None, "detected:go"
    )
