"""Which quality gates a check runs, and running them on agents' code.

The gates are the person's (`--gates FILE`, the test command their `tests` gate), or, with
`--gates detect` and none declared, a language plugin's, named from the project as the commit
before the work has it (an agent's branch cannot drop a gate by deleting its config). A web
project's app is a gate too: the person's (`--app FILE`) or the `app.json` the INITIALIZER
proposed, read from that same commit and validated (an invalid one is a red gate), started in
its own box and waited for (guard/app_box.py). They run on the work's branch after an IMPLEMENT
or FIX (not the bare `--test-command`, which runs on `main` after a merge as it always has) and
on `main` after a merge or a landing; each run is one clean worktree (repo/gates.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any

import git

from session_scheduler.core import languages
from session_scheduler.core.app import AppSpec
from session_scheduler.core.config import AgentConfig
from session_scheduler.core.errors import SchedulerError
from session_scheduler.core.gates import GateResult, GateSet, finding, of_options
from session_scheduler.core.layout import APP_FILE
from session_scheduler.repo.gates import app_gate, run_gates_at, tree_at
from session_scheduler.store.events import EventLog

APP = "app"


@dataclass(frozen=True)
class Check:
    """What one check runs: gates (None: none of them), the app (None: no app), or why the
    project's app.json could not be read (a red `app` gate)."""

    gates: GateSet | None
    app: AppSpec | None = None
    app_refused: str | None = None

    @property
    def names(self) -> list[str]:
        named = [g.name for g in self.gates.gates] if self.gates else []
        return named + ([APP] if self.app is not None or self.app_refused is not None else [])


@dataclass(frozen=True)
class Gatekeeper:
    declared: GateSet | None
    """The person's gates (with the test command as `tests`), or the test command alone."""
    detect: bool
    app: AppSpec | None
    """The person's app (`--app FILE`); None: the project's app.json, if it has one."""
    allowed_domains: tuple[str, ...]
    sandboxed: bool
    guard: AbstractContextManager[Any] | None = None
    """Held while a worktree is added to or removed from the repository (lanes: the project's)."""

    @classmethod
    def of(cls, config: AgentConfig, guard: AbstractContextManager[Any] | None = None) -> Gatekeeper:
        return cls(
            of_options(config.test_command, config.gates),
            config.detect_gates,
            config.app,
            config.allowed_domains,
            config.sandbox,
            guard,
        )

    def plan(self, repo: git.Repo, base: str, *, branch: bool) -> Check | None:
        """What a check of work that started from `base` runs (None: nothing). On a branch
        (`branch`) the bare test command does not run: it keeps its place on `main`."""
        gates = self.declared
        if self.detect and (gates is None or gates.source == "test_command"):
            found = languages.detect(tree_at(repo, base))
            if found is not None and gates is not None:  # the person's test command is the tests gate
                found = replace(found, gates=(*gates.gates, *(g for g in found.gates if g.kind != "tests")))
            gates = found or gates
        if branch and gates is not None and gates.source == "test_command":
            gates = None
        app, refused = self.app, None
        if app is None:
            app, refused = _project_app(repo, base)
        if gates is None and app is None and refused is None:
            return None
        return Check(gates, app, refused)

    def app_at(self, repo: git.Repo, base: str) -> AppSpec | None:
        """The project's app for work that started from `base`: the person's, else a valid
        app.json of `base` (None: no app, or one the app gate refuses)."""
        return self.app if self.app is not None else _project_app(repo, base)[0]

    def check(self, repo: git.Repo, sha: str, check: Check) -> tuple[GateResult, ...]:
        results: tuple[GateResult, ...] = ()
        if check.gates is not None:
            results = run_gates_at(
                repo,
                sha,
                check.gates,
                allowed_domains=self.allowed_domains,
                sandboxed=self.sandboxed,
                guard=self.guard,
            )
        if check.app_refused is not None:
            results += (GateResult(APP, APP, APP_FILE, False, 0.0, check.app_refused),)
        elif check.app is not None:
            install = check.gates.install if check.gates else None
            results += (
                app_gate(
                    repo,
                    sha,
                    check.app,
                    allowed_domains=self.allowed_domains,
                    sandboxed=self.sandboxed,
                    guard=self.guard,
                    install=install,
                ),
            )
        return results


def held(
    keeper: Gatekeeper, repo: git.Repo, base: str, check: Check, results: tuple[GateResult, ...]
) -> tuple[list[GateResult], list[str]]:
    """Of the red gates, those the work answers for, and the names of those red on `base` too:
    a gate already red before the work (an install step that cannot run, a lint the skeleton
    fails) is the gates' or `main`'s problem, said in a line, never held against the work."""
    failed = red(results)
    if not failed:
        return [], []
    before = {r.name for r in red(keeper.check(repo, base, check))}
    return [r for r in failed if r.name not in before], [r.name for r in failed if r.name in before]


def landing_tests(
    keeper: Gatekeeper,
    repo: git.Repo,
    base: str | None,
    where: str,
    record: Callable[[tuple[GateResult, ...]], None],
    say: Callable[[str], None],
    planned_at: str | None = None,
) -> Callable[[str], tuple[bool, str]] | None:
    """The gates run on a merge onto `where` (the branch work lands on, or the person's when they
    approve) whose tip is `base`: (passed, what failed) for a commit; None when no gate would run.
    `record`: each check's results (an event); a gate red on `base` too is excused, in a line.
    `planned_at`: the commit whose files say which gates run (default `base`; an approval's is
    the review branch, which holds the app the person's branch does not have yet)."""
    at = planned_at or base
    check = keeper.plan(repo, at, branch=False) if base is not None and at is not None else None
    if base is None or check is None:
        return None

    def run(commit: str) -> tuple[bool, str]:
        results = keeper.check(repo, commit, check)
        failed, excused = held(keeper, repo, base, check, results)
        if excused:
            say(excused_line(excused, where).strip())
        record(results)
        return not failed, finding(failed, f"on {where} with this branch merged") if failed else ""

    return run


def excused_line(names: list[str], where: str) -> str:
    return (
        f"  gates red on {where} before this work too ({', '.join(names)}): not held against it; "
        "fix the gates (--gates FILE, --app FILE) or main"
    )


def _project_app(repo: git.Repo, base: str) -> tuple[AppSpec | None, str | None]:
    """The app.json of commit `base`, validated: (the app, None), (None, why it is refused), or
    (None, None) when the project has none."""
    text = tree_at(repo, base).read(APP_FILE)
    if text is None:
        return None, None
    try:
        return AppSpec.from_json(json.loads(text)), None
    except json.JSONDecodeError as exc:
        return None, f"{APP_FILE} is not JSON ({exc}); fix it, or override it with --app FILE"
    except SchedulerError as exc:
        return None, f"{exc}; or override it with --app FILE"


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
