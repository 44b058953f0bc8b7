"""The gates as data: the file format and its one-line errors, which gates the options give, what
counts as weakening the person's gates, and the finding a red gate sends back."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from session_scheduler.core.errors import BadInput
from session_scheduler.core.gates import (
    GATE_KINDS,
    GATES_SCHEMA,
    Gate,
    GateResult,
    GateSet,
    finding,
    of_options,
    weakened,
)

TESTS = Gate("tests", "python3 -m pytest -q")
LINT = Gate("lint", "ruff check .", "lint")
DECLARED = GateSet((TESTS, LINT), install="pip install -r requirements.txt")

# --- the file format ----------------------------------------------------------------------------


def test_a_person_s_file_needs_only_names_and_commands() -> None:
    data = {
        "gates": [
            {"name": "tests", "command": "make test"},
            {"name": "lint", "command": "make lint", "kind": "lint"},
        ]
    }
    assert GateSet.from_json(data) == GateSet(
        (Gate("tests", "make test", "tests"), Gate("lint", "make lint", "lint"))
    )


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ([], "at (top level): [] is not of type 'object'"),
        ({}, "'gates' is a required property"),
        ({"gates": []}, "at gates"),
        ({"gates": [{"name": "Tests", "command": "x"}]}, "at gates/0/name"),
        ({"gates": [{"name": "tests", "command": "  "}]}, "at gates/0/command"),
        ({"gates": [{"name": "tests"}]}, "'command' is a required property"),
        (
            {"gates": [{"name": "t", "command": "x", "kind": "style"}]},
            "at gates/0/kind: 'style' is not one of",
        ),
        ({"gates": [{"name": "t", "command": "x", "when": "always"}]}, "'when' was unexpected"),
        ({"gates": [{"name": "t", "command": "x"}], "install": ""}, "at install"),
        ({"gates": [{"name": "t", "command": "x"}], "source": "guessed"}, "at source"),
        ({"gates": [{"name": "t", "command": "x"}], "extra": 1}, "'extra' was unexpected"),
    ],
)
def test_a_bad_file_is_one_line_saying_where_and_how_to_fix_it(data: Any, says: str) -> None:
    with pytest.raises(BadInput) as caught:
        GateSet.from_json(data)
    message = str(caught.value)
    assert says in message and "docs/gates.md" in message and "\n" not in message, message


def test_a_bad_value_with_newlines_still_makes_one_line() -> None:
    with pytest.raises(BadInput) as caught:
        GateSet.from_json({"gates": [{"name": "a\nb", "command": "x"}]})
    assert "\n" not in str(caught.value)


def test_two_gates_with_one_name_are_refused() -> None:
    with pytest.raises(BadInput, match="two gates are named `tests`: give each gate its own name"):
        GateSet.from_json({"gates": [{"name": "tests", "command": "a"}, {"name": "tests", "command": "b"}]})


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda: Gate("Tests", "x"), "is not a slug"),
        (lambda: Gate("a" * 33, "x"), "is not a slug"),
        (lambda: Gate("tests", " "), "has an empty command"),
        (lambda: Gate("tests", "x", "style"), "use one of tests, lint, types, coverage, app"),
        (lambda: GateSet((TESTS,), source="guessed"), "gate source 'guessed' is unknown"),
        (lambda: GateSet((TESTS,), install=" "), "the install step is empty"),
    ],
)
def test_records_check_themselves(make: Any, says: str) -> None:
    with pytest.raises(BadInput, match=says):
        make()


def test_a_result_keeps_only_the_end_of_the_output() -> None:
    result = GateResult("tests", "tests", "t", False, 1.23456, "x" * 5000 + "END")
    assert len(result.output) == 2000 and result.output.endswith("END")
    assert result.to_json() == {
        "name": "tests", "kind": "tests", "command": "t", "passed": False, "seconds": 1.235, "output": result.output,
    }  # fmt: skip


names = st.from_regex(r"\A[a-z][a-z0-9_-]{0,31}\Z")
commands = st.text(min_size=1).filter(str.strip)
gate_lists = st.lists(
    st.builds(Gate, names, commands, st.sampled_from(GATE_KINDS)), min_size=1, unique_by=lambda g: g.name
)
sources = st.one_of(st.just("declared"), st.just("test_command"), names.map(lambda n: f"detected:{n}"))


@given(gate_lists, st.none() | commands, sources)
def test_a_set_survives_its_json(gates: list[Gate], install: str | None, source: str) -> None:
    kept = GateSet(tuple(gates), install, source)
    assert GateSet.from_json(kept.to_json()) == kept


def test_the_schema_names_every_kind() -> None:
    assert GATES_SCHEMA["properties"]["gates"]["items"]["properties"]["kind"]["enum"] == list(GATE_KINDS)


# --- which gates the options give ---------------------------------------------------------------


def test_declared_gates_win_over_the_test_command_when_they_test() -> None:
    assert of_options("make test", DECLARED) is DECLARED


def test_the_test_command_joins_declared_gates_that_do_not_test() -> None:
    lint_only = GateSet((LINT,), install="npm ci")
    assert of_options("make test", lint_only) == GateSet(
        (Gate("tests", "make test"), LINT), "npm ci", "declared"
    )


def test_the_test_command_takes_another_name_when_tests_is_taken_by_another_kind() -> None:
    odd = GateSet((Gate("tests", "ruff check .", "lint"),))
    assert of_options("make test", odd) == GateSet((Gate("test-command", "make test"), *odd.gates))


def test_declared_gates_alone_without_a_test_command() -> None:
    lint_only = GateSet((LINT,))
    assert of_options(None, lint_only) is lint_only
    assert of_options("  ", lint_only) is lint_only


def test_the_test_command_alone_is_gate_tests() -> None:
    assert of_options("make test", None) == GateSet(
        (Gate("tests", "make test", "tests"),), source="test_command"
    )


def test_no_options_leave_the_gates_to_a_plugin() -> None:
    assert of_options(None, None) is None
    assert of_options("", None) is None


# --- weakening ------------------------------------------------------------------------------------


def test_nothing_weaker_when_the_same_or_more() -> None:
    assert weakened(DECLARED, DECLARED) == []
    more = GateSet((*DECLARED.gates, Gate("types", "mypy", "types")), DECLARED.install)
    assert weakened(DECLARED, more) == []


def test_a_declared_gate_removed_is_weaker() -> None:
    after = GateSet((TESTS,), DECLARED.install)
    assert weakened(DECLARED, after) == ["the declared gate `lint` (ruff check .) was removed"]


def test_a_declared_gate_s_command_changed_is_weaker() -> None:
    after = GateSet((TESTS, Gate("lint", "true", "lint")), DECLARED.install)
    assert weakened(DECLARED, after) == ["the declared gate `lint` changed from `ruff check .` to `true`"]


def test_the_install_step_removed_is_weaker() -> None:
    assert weakened(DECLARED, GateSet(DECLARED.gates)) == [
        "the declared install step (pip install -r requirements.txt) was removed"
    ]


def test_every_declared_gate_gone_when_nothing_is_left() -> None:
    assert weakened(DECLARED, None) == [
        "the declared gate `tests` (python3 -m pytest -q) was removed",
        "the declared gate `lint` (ruff check .) was removed",
        "the declared install step (pip install -r requirements.txt) was removed",
    ]


def test_gates_the_person_did_not_declare_may_change() -> None:
    detected = GateSet((TESTS, LINT), "npm ci", source="detected:node")
    assert weakened(detected, None) == []
    assert weakened(GateSet((TESTS,), source="test_command"), None) == []
    assert weakened(None, DECLARED) == []


# --- the finding ----------------------------------------------------------------------------------


def test_the_finding_names_every_red_gate_with_the_end_of_its_output() -> None:
    results = [
        GateResult("tests", "tests", "pytest -q", True, 1.0, "ok"),
        GateResult("lint", "lint", "ruff check .", False, 0.5, "a.py:1: E501\n" + "y" * 900 + "LAST\n"),
        GateResult("types", "types", "mypy", False, 2.0, ""),
    ]
    text = finding(results, "on the branch")
    first, second = text.split("\n")
    assert first.startswith("gate `lint` (ruff check .) failed on the branch: ") and first.endswith("LAST")
    assert len(first) == len("gate `lint` (ruff check .) failed on the branch: ") + 800
    assert second == "gate `types` (mypy) failed on the branch: (no output)"


def test_no_finding_when_every_gate_passed() -> None:
    assert finding([GateResult("tests", "tests", "t", True, 0.1, "")], "on main") == ""
