"""Which quality gates a check runs, and running them on agents' code.

The gates are the person's (`--gates FILE`, the test command their `tests` gate), or, with
`--gates detect` and none declared, a language plugin's, named from the project as the commit
before the work has it (an agent's branch cannot drop a gate by deleting its config). They run
on the work's branch after an IMPLEMENT or FIX (not the bare `--test-command`, which runs on
`main` after a merge as it always has) and on `main` after a merge or a landing; each run is one
clean worktree inside the command sandbox (repo/gates.py).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import git

from session_scheduler.core import languages
from session_scheduler.core.config import AgentConfig
from session_scheduler.core.gates import GateResult, GateSet, of_options
from session_scheduler.repo.gates import run_gates_at, tree_at
from session_scheduler.store.events import EventLog


@dataclass(frozen=True)
class Gatekeeper:
    declared: GateSet | None
    """The person's gates (with the test command as `tests`), or the test command alone."""
    detect: bool
    allowed_domains: tuple[str, ...]
    sandboxed: bool
    guard: AbstractContextManager[Any] | None = None
    """Held while a worktree is added to or removed from the repository (lanes: the project's)."""

    @classmethod
    def of(cls, config: AgentConfig, guard: AbstractContextManager[Any] | None = None) -> Gatekeeper:
        return cls(
            of_options(config.test_command, config.gates),
            config.detect_gates,
            config.allowed_domains,
            config.sandbox,
            guard,
        )

    def gates(self, repo: git.Repo, base: str) -> GateSet | None:
        """The gates of a check whose work started from `base` (None: nothing to run)."""
        if self.declared is not None:
            return self.declared
        return languages.detect(tree_at(repo, base)) if self.detect else None

    def on_branch(self, repo: git.Repo, base: str) -> GateSet | None:
        """The gates run on a branch before its REVIEW: declared or detected ones, not the bare
        test command."""
        gates = self.gates(repo, base)
        return gates if gates is not None and gates.source != "test_command" else None

    def check(self, repo: git.Repo, sha: str, gates: GateSet) -> tuple[GateResult, ...]:
        return run_gates_at(
            repo,
            sha,
            gates,
            allowed_domains=self.allowed_domains,
            sandboxed=self.sandboxed,
            guard=self.guard,
        )


def red(results: tuple[GateResult, ...]) -> list[GateResult]:
    return [r for r in results if not r.passed]


def names(results: tuple[GateResult, ...] | list[GateResult]) -> str:
    return ", ".join(r.name for r in results)


def gated(events: EventLog, results: tuple[GateResult, ...], where: str, **fields: Any) -> None:
    """The `gates_ran` event of one check (none when no gate ran): each gate's name, kind, result
    and seconds, and the end of each red gate's output."""
    if not results:
        return
    events.emit(
        "gates_ran",
        where=where,
        passed=not red(results),
        gates=[
            {"name": r.name, "kind": r.kind, "passed": r.passed, "seconds": round(r.seconds, 3)}
            for r in results
        ],
        red={r.name: r.output[-500:] for r in red(results)},
        **{k: v for k, v in fields.items() if v is not None},
    )
