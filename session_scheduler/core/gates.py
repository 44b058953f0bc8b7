"""Quality gates: the commands whose exit codes decide whether work is good (tests, lint, types,
coverage, the app itself), where they came from, and what a run of them found. PURE."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from session_scheduler.core.errors import BadInput
from session_scheduler.core.schemas import schema_error

GATE_KINDS = ("tests", "lint", "types", "coverage", "app")
GATE_NAME = "^[a-z][a-z0-9_-]{0,31}$"
SOURCE = "^(declared|test_command|detected:[a-z][a-z0-9_-]{0,31})$"
"""Who chose the gates: the person (declared), the old `--test-command` alone, or a language plugin."""
OUTPUT_TAIL = 2000
"""Characters of a gate's output kept in its result."""
FINDING_TAIL = 800
"""Characters of a red gate's output quoted in a review's finding."""
FIX = "see docs/gates.md for the format"

GATES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["gates"],
    "additionalProperties": False,
    "properties": {
        "gates": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["name", "command"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "pattern": GATE_NAME},
                    "command": {"type": "string", "pattern": "\\S"},
                    "kind": {"enum": list(GATE_KINDS)},
                },
            },
        },
        "install": {"type": ["string", "null"], "pattern": "\\S"},
        "source": {"type": "string", "pattern": SOURCE},
    },
}
"""A gates file as the person writes it (`source` is the scheduler's, absent means declared)."""


@dataclass(frozen=True)
class Gate:
    """One command whose exit code 0 means the work passes this gate."""

    name: str
    """Unique within its set; a short slug (`tests`, `lint`, `e2e-smoke`)."""
    command: str
    """Run with bash at the root of a clean worktree of the commit."""
    kind: str = "tests"
    """One of GATE_KINDS: what the gate checks."""

    def __post_init__(self) -> None:
        if not re.match(GATE_NAME, self.name):
            raise BadInput(
                f"gate name {self.name!r} is not a slug: use 1-32 lowercase letters, digits, '-' or '_', starting with a letter"
            )
        if not self.command.strip():
            raise BadInput(f"gate `{self.name}` has an empty command: give the command that checks it")
        if self.kind not in GATE_KINDS:
            raise BadInput(f"gate `{self.name}` has kind {self.kind!r}: use one of {', '.join(GATE_KINDS)}")


@dataclass(frozen=True)
class GateSet:
    """A project's gates, in the order they run, and the install step run before them."""

    gates: tuple[Gate, ...]
    install: str | None = None
    """Run first in the worktree (dependencies); its failure fails every gate."""
    source: str = "declared"
    """"declared", "test_command" or "detected:<plugin name>" (SOURCE)."""

    def __post_init__(self) -> None:
        names = [gate.name for gate in self.gates]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise BadInput(f"two gates are named `{twice[0]}`: give each gate its own name")
        if not re.match(SOURCE, self.source):
            raise BadInput(
                f"gate source {self.source!r} is unknown: use declared, test_command or detected:<plugin>"
            )
        if self.install is not None and not self.install.strip():
            raise BadInput("the install step is empty: give its command, or leave it out")

    @property
    def declared(self) -> bool:
        return self.source == "declared"

    def to_json(self) -> dict[str, Any]:
        return {
            "gates": [{"name": g.name, "command": g.command, "kind": g.kind} for g in self.gates],
            "install": self.install,
            "source": self.source,
        }

    @classmethod
    def from_json(cls, data: Any) -> GateSet:
        """A gate set from a gates file or a saved config; BadInput (one line) when it does not fit
        GATES_SCHEMA or names a gate twice."""
        wrong = schema_error(data, GATES_SCHEMA)
        if wrong is not None:
            raise BadInput(f"the gates are invalid {one_line(wrong)}: {FIX}")
        gates = tuple(Gate(g["name"], g["command"], g.get("kind", "tests")) for g in data["gates"])
        return cls(gates, data.get("install"), data.get("source", "declared"))


@dataclass(frozen=True)
class GateResult:
    """What one gate's run on one commit found."""

    name: str
    kind: str
    command: str
    passed: bool
    seconds: float
    output: str
    """The end of the command's output (at most OUTPUT_TAIL characters; longer is cut at the front)."""

    def __post_init__(self) -> None:
        if len(self.output) > OUTPUT_TAIL:
            object.__setattr__(self, "output", self.output[-OUTPUT_TAIL:])

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "command": self.command,
            "passed": self.passed,
            "seconds": round(self.seconds, 3),
            "output": self.output,
        }


def one_line(text: str) -> str:
    return " ".join(text.split())


def of_options(test_command: str | None, declared: GateSet | None) -> GateSet | None:
    """The gates the options give: the declared set (with the test command as gate `tests` when it
    has no tests gate of its own), else the test command alone, else None (then a plugin detects)."""
    command = test_command.strip() if test_command else ""
    if declared is not None:
        if not command or any(gate.kind == "tests" for gate in declared.gates):
            return declared
        names = {gate.name for gate in declared.gates}
        name = "tests" if "tests" not in names else "test-command"
        return GateSet((Gate(name, command, "tests"), *declared.gates), declared.install, declared.source)
    if command:
        return GateSet((Gate("tests", command, "tests"),), source="test_command")
    return None


def weakened(before: GateSet | None, after: GateSet | None) -> list[str]:
    """One line per way the person's declared gates got weaker from `before` to `after`: a gate
    removed, a gate's command changed, the install step removed. Empty when `before` was not the
    person's (a detected set may change with the code)."""
    if before is None or not before.declared:
        return []
    now = {gate.name: gate for gate in after.gates} if after is not None else {}
    lines = []
    for gate in before.gates:
        kept = now.get(gate.name)
        if kept is None:
            lines.append(f"the declared gate `{gate.name}` ({gate.command}) was removed")
        elif kept.command != gate.command:
            lines.append(f"the declared gate `{gate.name}` changed from `{gate.command}` to `{kept.command}`")
    if before.install is not None and (after is None or after.install is None):
        lines.append(f"the declared install step ({before.install}) was removed")
    return lines


def finding(results: Sequence[GateResult], where: str) -> str:
    """One finding for a review that sends work back: every red gate, its command and the end of
    its output; empty when every gate passed."""
    return "\n".join(
        f"gate `{r.name}` ({r.command}) failed {where}: {r.output.strip()[-FINDING_TAIL:] or '(no output)'}"
        for r in results
        if not r.passed
    )
