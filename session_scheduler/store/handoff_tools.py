"""The hand-off tools the scheduler serves to each session (an in-process MCP server, `handoff`).

With them no agent reads or rewrites a hand-off file whose size grows with the project: it
reads its brief and one feature, appends its session entry, records a review or a fix, and
marks its feature passing. Each tool applies the role's rights from the policy table at the
call, checks the entry against the file's schema, and writes the file atomically; a refused
call answers with the reason, so the agent can correct it. Verification after the session
still checks everything, whatever wrote the files.

`HandoffTools.call` is the one implementation: the real session serves it through the SDK
(`mcp_server`), the in-process robot calls it directly.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from session_scheduler.core.config import SessionType
from session_scheduler.core.errors import StateError
from session_scheduler.core.machine import WorkItem
from session_scheduler.core.policy import RolePolicy, policy
from session_scheduler.core.schemas import ACCEPTANCE
from session_scheduler.store.handoff_history import largest_archived_id
from session_scheduler.store.progress import (
    Handoff,
    atomic_write_json,
    incremental_schema_error,
    last_validated,
    remember,
    validated,
)
from session_scheduler.store.records import Records

SERVER = "handoff"
PREFIX = f"mcp__{SERVER}__"
LEVELS = ("critical", "major", "minor")


class Refused(Exception):
    """The call breaks a rule; the message is the tool's answer."""


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    schema: dict[str, Any]
    allowed: Callable[[RolePolicy], bool]


_ISSUES = {
    "type": "object",
    "properties": {level: {"type": "array", "items": {"type": "string"}} for level in LEVELS},
}
SPECS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "brief",
        "Your session brief: your feature, its steps, the open review, the last sessions, the test command.",
        {"type": "object", "properties": {}},
        lambda p: True,
    ),
    ToolSpec(
        "show_feature",
        "One feature's entry of feature_list.json (id, description, steps, passes).",
        {"type": "object", "properties": {"feature_id": {"type": "string"}}, "required": ["feature_id"]},
        lambda p: True,
    ),
    ToolSpec(
        "append_session",
        "Append your session entry to progress.json (once, at the end of the session).",
        {
            "type": "object",
            "properties": {
                "outcome": {"type": "string"},
                "notes": {"type": "string"},
                "features_touched": {"type": "array", "items": {"type": "string"}},
                "commit_range": {
                    "type": "object",
                    "properties": {"from": {"type": "string"}, "to": {"type": "string"}},
                },
                "verdict": {"type": "string"},
                "review_id": {"type": "integer"},
            },
            "required": ["outcome"],
        },
        lambda p: True,
    ),
    ToolSpec(
        "record_review",
        "Append your review to reviews.json; answers with its review_id. A feature review grades "
        "each of the feature's acceptance steps, in order: acceptance=[{step (1-based), passed, "
        "evidence (what you ran and saw)}]; a PASS needs every step passed. A web feature's step "
        "also cites its browser evidence: snapshot and screenshot, the names the browser's results "
        "gave (`Evidence: snapshot saved as snapshot-3.yml`).",
        {
            "type": "object",
            "properties": {
                "verdict": {"type": "string"},
                "issues": _ISSUES,
                "summary": {"type": "string"},
                "acceptance": ACCEPTANCE,
            },
            "required": ["verdict", "issues"],
        },
        lambda p: p.review_kind is not None,
    ),
    ToolSpec(
        "record_fix",
        "Append your fix entry for the open review to reviews.json.",
        {
            "type": "object",
            "properties": {
                "issues_fixed": {"type": "array", "items": {"type": "string"}},
                "notes": {"type": "string"},
            },
            "required": ["issues_fixed"],
        },
        lambda p: p.appends_fixes,
    ),
    ToolSpec(
        "mark_passing",
        "Set `passes: true` on the feature under review in feature_list.json (after recording a PASS).",
        {"type": "object", "properties": {}},
        lambda p: p.sets_passes,
    ),
)


def tool_names(role: SessionType) -> tuple[str, ...]:
    """The hand-off tools a role is given (derived from its rights in the policy table)."""
    rights = policy(role)
    return tuple(spec.name for spec in SPECS if spec.allowed(rights))


def permission_rules(role: SessionType) -> list[str]:
    """The settings' allow rules for the role's hand-off tools."""
    return [PREFIX + name for name in tool_names(role)]


class HandoffTools:
    """The hand-off tools of one session: its role, number, work item and open review. They
    read and write the project's `Records` (never the work tree the agent works in)."""

    def __init__(
        self,
        records: Records,
        role: SessionType,
        number: int,
        work: WorkItem | None,
        open_review: int | None,
        brief: str,
    ) -> None:
        if not isinstance(records, Records):
            raise TypeError(f"the hand-off tools write the project's Records, not a folder: {records!r}")
        self.records, self.role, self.number, self.work = records, role, number, work
        self.open_review, self.brief = open_review, brief
        self.rights = policy(role)
        self.names = tool_names(role)
        self._passed_review = False

    def call(self, name: str, args: dict[str, Any]) -> tuple[str, bool]:
        """(answer, is_error) of one tool call."""
        short = name.removeprefix(PREFIX)
        if short not in self.names:
            return f"{self.role.value} has no hand-off tool {short!r} (it has: {', '.join(self.names)})", True
        try:
            return getattr(self, f"_{short}")(dict(args or {})), False
        except Refused as exc:
            return str(exc), True

    # -- the tools -----------------------------------------------------------------------------
    def _brief(self, args: dict[str, Any]) -> str:
        return self.brief

    def _show_feature(self, args: dict[str, Any]) -> str:
        wanted = str(args.get("feature_id", ""))
        for entry in self._load("feature_list.json").get("features", []):
            if entry.get("id") == wanted:
                return json.dumps(entry, indent=2)
        raise Refused(f"no feature {wanted!r} in feature_list.json")

    def _append_session(self, args: dict[str, Any]) -> str:
        data = self._load("progress.json")
        sessions = data.setdefault("sessions", [])
        if any(entry.get("session_id") == self.number for entry in sessions):
            raise Refused(f"session {self.number} already has its entry in progress.json")
        touched = args.get("features_touched")
        if touched is None:
            touched = [self.work.feature_id] if self.work and self.work.feature_id else []
        entry: dict[str, Any] = {
            "session_id": self.number,
            "agent_type": self.role.value,
            "features_touched": touched,
            "outcome": str(args.get("outcome", "")),
            "commit_range": args.get("commit_range"),
        }
        entry.update({k: args[k] for k in ("notes", "verdict", "review_id") if k in args})
        sessions.append(entry)
        self._save("progress.json", data)
        return f"appended the entry of session {self.number} to progress.json"

    def _record_review(self, args: dict[str, Any]) -> str:
        data = self._load("reviews.json")
        reviews = data.setdefault("reviews", [])
        kind = self.rights.review_kind
        feature = self.work.feature_id if self.work and kind == "feature" else None
        issues = args.get("issues") or {}
        review: dict[str, Any] = {
            "review_id": max((int(r["review_id"]) for r in reviews), default=self._archived_max("reviews"))
            + 1,
            "feature_id": feature,
            "kind": kind,
            "verdict": str(args.get("verdict", "")),
            "issues": {level: list(issues.get(level) or []) for level in LEVELS},
            "session_id": self.number,
        }
        if self.work is not None and kind == "feature":
            review["branch"] = self.work.branch
        if args.get("summary"):
            review["summary"] = str(args["summary"])
        if args.get("acceptance") is not None and kind == "feature":
            review["acceptance"] = args["acceptance"]  # checked by the file's schema on saving
        reviews.append(review)
        self._save("reviews.json", data)
        self._passed_review = review["verdict"] == "PASS"
        return json.dumps({"review_id": review["review_id"], "verdict": review["verdict"]})

    def _record_fix(self, args: dict[str, Any]) -> str:
        if self.open_review is None:
            raise Refused("there is no open review to record a fix for")
        data = self._load("reviews.json")
        fixes = data.setdefault("fixes", [])
        fix = {
            "fix_id": max((int(f["fix_id"]) for f in fixes), default=self._archived_max("fixes")) + 1,
            "review_id": self.open_review,
            "issues_fixed": [str(i) for i in args.get("issues_fixed") or []],
            "session_id": self.number,
        }
        if args.get("notes"):
            fix["notes"] = str(args["notes"])
        fixes.append(fix)
        self._save("reviews.json", data)
        return json.dumps({"fix_id": fix["fix_id"], "review_id": self.open_review})

    def _mark_passing(self, args: dict[str, Any]) -> str:
        feature = self.work.feature_id if self.work else None
        if feature is None:
            raise Refused(
                "this review has no feature to mark passing (an architecture branch is merged, not marked)"
            )
        if not self._passed_review:
            raise Refused(
                "record your PASS review first (record_review with verdict PASS), then mark the feature passing"
            )
        data = self._load("feature_list.json")
        features = data.get("features", [])
        for n, entry in enumerate(features):
            if entry.get("id") == feature:
                features[n] = {
                    **entry,
                    "passes": True,
                }  # a new entry: the others are shared with the last version
                passing = Handoff(
                    validated(self.records.path("feature_list.json"), "feature_list.json", self.records),
                    None,
                    None,
                    self.records.passing,
                ).passing()
                self._save("feature_list.json", data, passing=passing | {feature})
                return f"{feature} is marked passing"
        raise Refused(f"no feature {feature} in feature_list.json")

    # -- files ---------------------------------------------------------------------------------
    def _load(self, name: str) -> dict[str, Any]:
        """The file as last validated (read again only when it changed), as a copy whose lists
        can grow; their entries are shared with the validated version and never changed."""
        path = self.records.path(name)
        if not path.exists():
            return {"reviews": [], "fixes": []} if name == "reviews.json" else {}
        try:
            data = validated(path, name, self.records)
        except StateError as exc:
            raise Refused(
                f"{exc}; fix the file (or leave it: the scheduler restores it after the session)"
            ) from None
        return {key: list(value) if isinstance(value, list) else value for key, value in data.items()}

    def _save(self, name: str, data: dict[str, Any], *, passing: frozenset[str] | None = None) -> None:
        path = self.records.path(name)
        error = incremental_schema_error(data, name, last_validated(self.records, path))
        if error is not None:
            raise Refused(f"refused: {name} would not match its schema {error}")
        atomic_write_json(path, data)
        remember(self.records, path, data, passing=passing)

    def _archived_max(self, key: str) -> int:
        """The largest id already moved to the history file (0: none), so ids keep increasing."""
        return largest_archived_id(self.records.root, key)


def sdk_tools(tools: HandoffTools) -> list[Any]:
    """The role's hand-off tools as the SDK's tool objects, each answering through `tools.call`."""
    from claude_agent_sdk import tool

    def make(spec: ToolSpec) -> Any:
        @tool(spec.name, spec.description, spec.schema)
        async def handler(args: dict[str, Any]) -> dict[str, Any]:
            answer, is_error = tools.call(spec.name, args)
            return {"content": [{"type": "text", "text": answer}], "is_error": is_error}

        return handler

    return [make(spec) for spec in SPECS if spec.name in tools.names]


def mcp_server(tools: HandoffTools) -> Any:
    """The SDK's in-process MCP server serving `tools` (started with the session's CLI)."""
    from claude_agent_sdk import create_sdk_mcp_server

    return create_sdk_mcp_server(SERVER, tools=sdk_tools(tools))
