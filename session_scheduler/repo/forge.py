"""The forge seam: the few calls `--land-on pr` makes to where the person's pull requests live.

`Forge` is what the scheduler needs (open a draft pull request, read one back with its comments);
`GitHub` fills it through GitHub's REST API (`GITHUB_API_URL`, default https://api.github.com,
for GitHub Enterprise or a local stand-in; the token from `GITHUB_TOKEN` or `GH_TOKEN`). Another
forge is another class with the same two methods. Errors are one line that says what to fix.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from session_scheduler.core.config import parse_forge
from session_scheduler.core.errors import ConfigError

TIMEOUT_S = 30.0
API = "https://api.github.com"


class ForgeError(ConfigError):
    """The forge refused or could not be reached: one line, nothing recorded as done."""


@dataclass(frozen=True)
class Pull:
    number: int
    url: str


@dataclass(frozen=True)
class PullState:
    state: str
    """`open`, `merged` or `closed` (closed without merging)."""
    merge_commit: str | None
    comments: tuple[str, ...]
    """What people wrote on it (its conversation and its reviews), oldest first."""


class Forge(Protocol):
    name: str

    def open_pull(self, head: str, base: str, title: str, body: str) -> Pull: ...

    def pull(self, number: int) -> PullState: ...


def from_remote_url(url: str) -> str | None:
    """The forge a remote's URL names (`github:OWNER/REPO` for github.com), None when it names none."""
    match = re.search(r"github\.com[:/]([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$", url)
    return f"github:{match.group(1)}/{match.group(2)}" if match else None


class GitHub:
    """GitHub's REST API: pulls and issue comments, nothing else."""

    name = "GitHub"

    def __init__(self, owner: str, repo: str, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.owner, self.repo = owner, repo
        self.api = env.get("GITHUB_API_URL", API).rstrip("/")
        self.token = env.get("GITHUB_TOKEN") or env.get("GH_TOKEN")

    def open_pull(self, head: str, base: str, title: str, body: str) -> Pull:
        data = self._call(
            "POST",
            f"/repos/{self.owner}/{self.repo}/pulls",
            {"title": title, "head": head, "base": base, "body": body, "draft": True},
        )
        return Pull(int(data["number"]), str(data.get("html_url", "")))

    def pull(self, number: int) -> PullState:
        data = self._call("GET", f"/repos/{self.owner}/{self.repo}/pulls/{number}")
        comments = self._call("GET", f"/repos/{self.owner}/{self.repo}/issues/{number}/comments")
        reviews = self._call("GET", f"/repos/{self.owner}/{self.repo}/pulls/{number}/reviews")
        said = [str(c.get("body", "")) for c in [*comments, *reviews] if str(c.get("body", "")).strip()]
        state = "merged" if data.get("merged") else "closed" if data.get("state") == "closed" else "open"
        merged = data.get("merge_commit_sha") if state == "merged" else None
        return PullState(state, str(merged) if merged else None, tuple(said))

    def _call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        if not self.token:
            raise ForgeError(
                "--land-on pr needs a GitHub token: set GITHUB_TOKEN (or GH_TOKEN) to one that may open pull requests"
            )
        request = urllib.request.Request(
            self.api + path,
            data=None if payload is None else json.dumps(payload).encode(),
            method=method,
            headers={
                "Accept": "application/vnd.github+json",
                "Authorization": f"Bearer {self.token}",
                "X-GitHub-Api-Version": "2022-11-28",
                "Content-Type": "application/json",
                "User-Agent": "session-scheduler",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
                return json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as exc:
            said = _message(exc)
            hint = {
                401: "; check GITHUB_TOKEN",
                403: "; the token may not open pull requests here",
                404: "; check --forge OWNER/REPO and the token's access",
                422: "; is the branch pushed, or a pull request open for it already?",
            }.get(exc.code, "")
            raise ForgeError(f"{self.name} answered {exc.code} to {method} {path}: {said}{hint}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ForgeError(
                f"{self.name} at {self.api} cannot be reached ({reason}); try again when it can"
            ) from None


def _message(exc: urllib.error.HTTPError) -> str:
    try:
        data = json.loads(exc.read() or b"{}")
        return str(data.get("message") or exc.reason)[:200]
    except (ValueError, OSError, AttributeError):
        return str(exc.reason)[:200]


def forge_of(spec: str, environ: Mapping[str, str] | None = None) -> Forge:
    kind, owner, repo = parse_forge(spec)
    assert kind == "github"
    return GitHub(owner, repo, environ)
