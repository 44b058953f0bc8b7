"""Gates on agents' code: the files of a commit for the language plugins, a commit's gates run in
one clean worktree outside the project, inside the command sandbox, and the app gate (the app
started in its box: guard/app_box)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import git

from session_scheduler.core.app import AppSpec
from session_scheduler.core.gates import Gate, GateResult, GateSet
from session_scheduler.core.languages import Tree
from session_scheduler.guard import app_box, safe_git
from session_scheduler.repo import gitops

READ_LIMIT = 1_000_000
"""Bytes beyond which a file is not read for detection (configuration files are small)."""
INSTALL = "install"
"""The name of the install step's result when it fails."""
APP = "app"
"""The app gate's name and kind."""


def tree_at(repo: git.Repo, sha: str) -> Tree:
    """The files of commit `sha`; `read` gives a regular file's text (None for a file over
    READ_LIMIT, a binary one, a link, a submodule or a name not in the commit). Listed once per
    commit of a full name (`GitMemo.trees`): a commit never changes."""
    if not gitops.is_object_name(sha):  # a branch name: it can move
        return _tree_at(repo, sha)
    tree: Tree = safe_git.remembered(gitops.memo(repo).trees, sha, lambda: _tree_at(repo, sha))
    return tree


def _tree_at(repo: git.Repo, sha: str) -> Tree:
    listing = str(repo.git.ls_tree("-r", "-l", "-z", sha, strip_newline_in_stdout=False))
    blobs: dict[str, str] = {}
    names = set()
    for entry in filter(None, listing.split("\0")):
        header, path = entry.split("\t", 1)
        mode, kind, obj, size = header.split()
        names.add(path)
        if kind == "blob" and mode in ("100644", "100755") and int(size) <= READ_LIMIT:
            blobs[path] = obj
    read_memo: dict[str, str | None] = {}

    def read(path: str) -> str | None:
        if path not in read_memo:
            text = gitops.blob_text(repo, blobs[path]) if path in blobs else None
            read_memo[path] = None if text is None or "\0" in text else text
        return read_memo[path]

    return Tree(frozenset(names), read)


def run_gates_at(
    repo: git.Repo,
    sha: str,
    gates: GateSet,
    *,
    allowed_domains: tuple[str, ...],
    sandboxed: bool = True,
    guard: AbstractContextManager[Any] | None = None,
    timeout: float = 900,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[GateResult, ...]:
    """Every gate of `gates` on commit `sha`, in order, in ONE clean worktree (gitops.clean_worktree),
    after the install step. A red gate does not stop the others (the person sees every red gate at
    once); a failed install is the one red result `install` and no gate runs. `timeout` is each
    command's; a gate past it is red and says so. The green install step has no result."""
    with gitops.clean_worktree(repo, sha, guard) as tree:

        def run(gate: Gate) -> GateResult:
            started = clock()
            try:
                code, output = gitops.run_in_worktree(
                    repo, tree, gate.command, timeout, allowed_domains, sandboxed=sandboxed
                )
            except subprocess.TimeoutExpired as exc:
                said = f"`{gate.name}` timed out after {timeout:.0f}s"
                code, output = -1, f"{_text(exc.output).rstrip()}\n{said}".lstrip()
            return GateResult(gate.name, gate.kind, gate.command, code == 0, clock() - started, output)

        if gates.install is not None:
            installed = run(Gate(INSTALL, gates.install, "tests"))
            if not installed.passed:
                return (installed,)
        return tuple(run(gate) for gate in gates.gates)


def app_gate(
    repo: git.Repo,
    sha: str,
    spec: AppSpec,
    *,
    allowed_domains: tuple[str, ...],
    sandboxed: bool = True,
    guard: AbstractContextManager[Any] | None = None,
    install: str | None = None,
    timeout: float = 900,
    clock: Callable[[], float] = time.monotonic,
) -> GateResult:
    """Commit `sha`'s app, started in its box from ONE clean worktree, waited for, stopped: green
    when it answered; red (the reason and the end of its log) when it exited first or never
    answered. `install` (the gates' install step, in the command sandbox, which may write the
    worktree) runs first, within `timeout`; when it fails the gate is red and the app never starts."""
    with gitops.clean_worktree(repo, sha, guard) as tree:
        started = clock()
        if install is not None:
            try:
                code, out = gitops.run_in_worktree(
                    repo, tree, install, timeout, allowed_domains, sandboxed=sandboxed
                )
            except subprocess.TimeoutExpired as exc:
                code, out = -1, f"{_text(exc.output).rstrip()}\n`{INSTALL}` timed out after {timeout:.0f}s"
            if code != 0:
                said = f"the install step failed (exit {code}), so the app was not started"
                return GateResult(
                    APP, APP, spec.start, False, clock() - started, f"{out.rstrip()}\n{said}".lstrip()
                )
        try:
            with app_box.start_app(
                spec, tree, tree.parent / "tmp", tree.parent / "app.log",
                allowed_domains=allowed_domains, sandboxed=sandboxed, project=Path(repo.working_dir),
            ) as app:  # fmt: skip
                passed, said = True, f"the app answered GET {spec.ready_path}"
            output = f"{app_box.log_tail(app.log).rstrip()}\n{said}".lstrip()
        except app_box.AppDidNotStart as exc:  # the reason last: a result keeps the end of its output
            passed, output = False, f"{exc.log_tail.rstrip()}\n{exc.reason}".lstrip()
        return GateResult(APP, APP, spec.start, passed, clock() - started, output)


def _text(output: str | bytes | None) -> str:
    if isinstance(output, bytes):
        return output.decode("utf-8", errors="replace")
    return output or ""
