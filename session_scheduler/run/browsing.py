"""REVIEW's browser for a web feature: whether a session gets one (`review_app`), the app and the
browser started around it in their boxes (`BrowserPlan.opened`), the policy on its calls
(`refusal`), and the ledger the scheduler keeps of them (`Ledger`).

The app runs from a clean worktree of the branch under review (guard/app_box), the browser's
MCP server beside it (guard/browser_box): the agent's session reaches the server over the host's
loopback, the browser reaches only the app, and writes only the session's `evidence/` folder.
What a web PASS must cite from the ledger is core/evidence.browser_problems.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import re
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import git

from session_scheduler.core.app import AppSpec
from session_scheduler.core.config import SessionType
from session_scheduler.core.errors import SchedulerError, StateError
from session_scheduler.core.evidence import (
    EVIDENCE_DIR,
    LEDGER,
    TOOL_PREFIX,
    Call,
    CitedEvidence,
    browser_problems,
    evidence_name,
    is_web,
    note,
    parse_ledger,
)
from session_scheduler.core.machine import SessionState
from session_scheduler.guard import app_box, browser_box
from session_scheduler.guard.browser_box import BROWSER_TOOLS
from session_scheduler.repo import gitops
from session_scheduler.run.gating import Gatekeeper
from session_scheduler.store.progress import feature_in, load_handoff
from session_scheduler.store.records import Records

APP_LOG = "app.log"
BROWSER_LOG = "browser.log"
"""In the session's folder: the app's and the browser server's output."""
ON_THE_APP = "a browser call on the app"
"""Why the policy lets a browser call run."""
NAMED_FILE = "filename"
"""The argument with which a browser tool writes a file where it is told: never given."""
PAGE_URL = re.compile(r"^- Page URL: (\S+)", re.MULTILINE)
SAVED_PNG = re.compile(r"\]\(([^)\s]+\.png)\)")


class NoBrowser(SchedulerError):
    """The app or the browser for a REVIEW did not start: the session does not run, and the
    reason is reported as such (never as a pass)."""


@dataclass(frozen=True)
class BrowserAccess:
    """What a session is given of its browser: the MCP endpoint (host loopback), the app's address
    as the browser reaches it, and the session's folder (the ledger and `evidence/`)."""

    url: str
    app_origin: str
    folder: Path


def review_app(
    keeper: Gatekeeper, repo: git.Repo, base: str, feature: Mapping[str, Any] | None
) -> AppSpec | None:
    """The app a REVIEW of `feature` browses: the project's (the person's, or the app.json of `base`,
    the commit the work started from) when the feature is a web feature; else None. The one rule
    both the session's start and its verification read."""
    if not is_web(feature):
        return None
    return keeper.app_at(repo, base)


def plan_for(
    keeper: Gatekeeper, repo: git.Repo, records: Records, state: SessionState, folder: Path
) -> BrowserPlan | None:
    """The browser of the session about to run in `state` (None: it gets none): a REVIEW of a
    web feature in a project with an app, whose branch exists; the app as the branch has it."""
    work = state.lane.work
    if state.lane.role is not SessionType.REVIEW or work is None or work.feature_id is None:
        return None
    try:
        feature = feature_in(records, load_handoff(records), work.feature_id)
    except StateError:  # verification judges broken files
        return None
    base, tip = gitops.head(repo, gitops.MAIN), gitops.head(repo, work.branch)
    spec = review_app(keeper, repo, base, feature) if base is not None else None
    if spec is None or tip is None:
        return None
    return BrowserPlan(repo, tip, spec, folder, keeper)


@dataclass(frozen=True)
class BrowserPlan:
    """Where the app of a REVIEW comes from and how its boxes run."""

    repo: git.Repo
    tip: str
    """The commit under review (the work branch's tip): the app runs from it."""
    spec: AppSpec
    folder: Path
    keeper: Gatekeeper

    @contextlib.contextmanager
    def opened(self, clock: Callable[[], float] = time.monotonic) -> Iterator[BrowserAccess]:
        """The app from a clean worktree of `tip` (after the gates' install step) in its box, the
        browser in its own; both stopped on leaving. NoBrowser when either does not start."""
        keeper = self.keeper
        with gitops.clean_worktree(self.repo, self.tip, keeper.guard) as tree:
            install = keeper.declared.install if keeper.declared else None
            if install is not None:
                self._install(tree, install)
            try:
                app = app_box.start_app(
                    self.spec, tree, tree.parent / "tmp", self.folder / APP_LOG,
                    allowed_domains=keeper.allowed_domains, sandboxed=keeper.sandboxed,
                    project=Path(self.repo.working_dir), clock=clock,
                )  # fmt: skip
            except app_box.AppDidNotStart as exc:
                raise NoBrowser(f"the app did not start: {exc.reason}") from None
            with app:
                try:
                    browser = browser_box.start_browser(
                        app.socket_path, self.folder / EVIDENCE_DIR, tree.parent / "browser",
                        self.folder / BROWSER_LOG, sandboxed=keeper.sandboxed, clock=clock,
                        app_port=urlsplit(app.url).port,
                    )  # fmt: skip
                except browser_box.BrowserDidNotStart as exc:
                    raise NoBrowser(exc.reason) from None
                with browser:
                    yield BrowserAccess(browser.url, browser.app_origin, self.folder)

    def _install(self, tree: Path, install: str) -> None:
        keeper = self.keeper
        try:
            code, out = gitops.run_in_worktree(
                self.repo, tree, install, 900, keeper.allowed_domains, sandboxed=keeper.sandboxed
            )
        except subprocess.TimeoutExpired:
            code, out = -1, "timed out"
        if code != 0:
            tail = out.strip().splitlines()[-1:] or ["no output"]
            raise NoBrowser(
                f"the install step failed (exit {code}: {tail[0][:200]}), so the app was not started"
            )


def refusal(tool: str, tool_input: Mapping[str, Any], app_origin: str) -> str | None:
    """Why the scheduler refuses a browser call (None: it may run): a tool outside BROWSER_TOOLS,
    a navigation off the app, a file named by the agent (the scheduler names the evidence)."""
    name = tool.removeprefix(TOOL_PREFIX)
    if name not in BROWSER_TOOLS:
        return f"{name} is not one of the browser tools REVIEW may use ({', '.join(BROWSER_TOOLS)})"
    if NAMED_FILE in tool_input:
        return f"leave out `{NAMED_FILE}`: the scheduler keeps the evidence and tells you its name"
    if name == "browser_navigate":
        url = str(tool_input.get("url") or "")
        if not _same_origin(url, app_origin):
            return f"the browser stays on the app, {app_origin}: {url[:200]!r} is not on it"
    return None


def _same_origin(url: str, origin: str) -> bool:
    try:
        got, want = urlsplit(url), urlsplit(origin)
        return (got.scheme, got.hostname, got.port) == (want.scheme, want.hostname, want.port)
    except ValueError:
        return False


class Ledger:
    """The scheduler's record of a session's browser calls: each call's evidence saved under the
    name it chooses, one line per call in the session folder's LEDGER, the name told to the agent."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.evidence = folder / EVIDENCE_DIR
        self.path = folder / LEDGER
        self._calls = len(read_ledger(folder))

    def after_call(
        self, tool: str, tool_input: Mapping[str, Any], content: Sequence[Mapping[str, Any]], error: bool
    ) -> list[dict[str, Any]]:
        """Keep the call's evidence (a snapshot's text, a screenshot's image, the console's
        messages), append its ledger line, and return the result the agent sees: `content` and,
        when evidence was kept, the note that names it."""
        self._calls += 1
        name = tool.removeprefix(TOOL_PREFIX)
        text = "\n".join(str(b.get("text") or "") for b in content if b.get("type") == "text")
        file = None if error else evidence_name(name, self._calls)
        if file is not None and not self._keep(file, text, content):
            file = None
        url = PAGE_URL.search(text)
        call = Call(self._calls, name, dict(tool_input), error, url.group(1) if url else None, file)
        with self.path.open("a", encoding="utf-8") as ledger:
            ledger.write(json.dumps(call.to_json()) + "\n")
        blocks = [dict(b) for b in content]
        return blocks + ([{"type": "text", "text": note(file)}] if file else [])

    def _keep(self, file: str, text: str, content: Sequence[Mapping[str, Any]]) -> bool:
        self.evidence.mkdir(parents=True, exist_ok=True)
        target = self.evidence / file
        if not file.endswith(".png"):
            target.write_text(text, encoding="utf-8")
            return True
        for block in content:  # the image the agent was shown
            source = block.get("source") or {}
            if block.get("type") == "image" and isinstance(source, Mapping) and source.get("data"):
                try:
                    target.write_bytes(base64.b64decode(str(source["data"]), validate=True))
                except (binascii.Error, ValueError):
                    continue
                self._drop_server_copy(text)
                return True
        return False

    def _drop_server_copy(self, text: str) -> None:
        """The server's own copy of the screenshot (in `evidence/`, under its time stamp): the kept
        one replaces it. Only a regular file inside the folder is removed."""
        found = SAVED_PNG.search(text)
        if found is None:
            return
        copy = self.evidence / Path(found.group(1)).name
        if copy.is_file() and not copy.is_symlink() and copy.resolve().parent == self.evidence.resolve():
            copy.unlink()


def read_ledger(folder: Path) -> list[Call]:
    """The session's ledger (lines that do not read are skipped: the scheduler wrote them, so none
    should fail; none when there is no ledger, or it is a link)."""
    path = folder / LEDGER
    try:
        text = "" if path.is_symlink() else path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return parse_ledger(text)[0]


def present(folder: Path) -> frozenset[str]:
    """The names of the regular files in the session's evidence folder (links are not evidence)."""
    try:
        entries = list((folder / EVIDENCE_DIR).iterdir())
    except OSError:
        return frozenset()
    return frozenset(p.name for p in entries if p.is_file() and not p.is_symlink())


def evidence_problems(folder: Path | None) -> CitedEvidence:
    """What a web review's results lack of the browser evidence of the session whose folder is
    `folder` (None: the session had no browser, so it has none), read from its ledger as it stands:
    verification after the session and `record_review` at the call (the hand-off tools' seam)."""

    def problems(
        steps: Sequence[str], verdict: str, results: Sequence[Mapping[str, Any]] | None
    ) -> list[str]:
        ledger, made = (read_ledger(folder), present(folder)) if folder else ([], frozenset[str]())
        return browser_problems(steps, verdict, results, ledger, made)

    return problems


def hooks(access: BrowserAccess, refusals: dict[str, str]) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The session's PreToolUse hook (the policy: allow a vetted browser call, refuse with the
    reason otherwise) and PostToolUse hook (the ledger) for `mcp__browser__*` calls."""
    ledger = Ledger(access.folder)

    async def before(input_data: dict[str, Any], tool_use_id: str | None, context: Any) -> dict[str, Any]:
        reason = refusal(
            str(input_data.get("tool_name")), input_data.get("tool_input") or {}, access.app_origin
        )
        if reason is not None:
            refusals[str(tool_use_id)] = reason
        return {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "allow" if reason is None else "deny",
                "permissionDecisionReason": f"scheduler policy: {reason or ON_THE_APP}",
            }
        }

    async def after(input_data: dict[str, Any], tool_use_id: str | None, context: Any) -> dict[str, Any]:
        response = input_data.get("tool_response")
        content = [b for b in response if isinstance(b, Mapping)] if isinstance(response, list) else []
        shown = ledger.after_call(
            str(input_data.get("tool_name")), input_data.get("tool_input") or {}, content, False
        )
        return {"hookSpecificOutput": {"hookEventName": "PostToolUse", "updatedMCPToolOutput": shown}}

    return before, after
