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
from pathlib import Path
from typing import Any

from session_scheduler.core import acceptance
from session_scheduler.core.config import SessionType
from session_scheduler.core.errors import SpecError, StateError
from session_scheduler.core.evidence import CitedEvidence, note
from session_scheduler.core.features import extension_problems, feature_list_problems
from session_scheduler.core.layout import FEATURES_FILE, SPEC_NAME
from session_scheduler.core.machine import WorkItem
from session_scheduler.core.policy import FAILED, RolePolicy, policy
from session_scheduler.core.schemas import ACCEPTANCE, FEATURE_LIST, VERDICTS, schema_errors
from session_scheduler.core.tasks import Task, extension_coverage, read_tasks
from session_scheduler.store.handoff_history import largest_archived_id
from session_scheduler.store.progress import (
    Handoff,
    atomic_write_json,
    incremental_schema_error,
    last_validated,
    read_json,
    remember,
    validated,
)
from session_scheduler.store.records import Records

SERVER = "handoff"
PREFIX = f"mcp__{SERVER}__"
LEVELS = ("critical", "major", "minor")


class Refused(Exception):
    """The call breaks a rule; the message is the tool's answer."""


Described = str | Callable[[RolePolicy], str]
Schema = dict[str, Any] | Callable[[RolePolicy], dict[str, Any]]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: Described
    """What the model reads in its tool list (for some tools, worded for the role)."""
    schema: Schema
    """The tool's input, as JSON Schema (for some tools, the role's values as an `enum`)."""
    allowed: Callable[[RolePolicy], bool]

    def description_for(self, rights: RolePolicy) -> str:
        return self.description(rights) if callable(self.description) else self.description

    def schema_for(self, rights: RolePolicy) -> dict[str, Any]:
        return self.schema(rights) if callable(self.schema) else self.schema


_ISSUES = {
    "type": "object",
    "properties": {level: {"type": "array", "items": {"type": "string"}} for level in LEVELS},
}
REFUSED = "refused, nothing was written: "
"""How a refused call that breaks a rule of the claim begins (the agent corrects it and calls again)."""


def _session_schema(rights: RolePolicy) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "outcome": {"type": "string", "enum": list(rights.outcomes)},
            "notes": {"type": "string", "description": "what you did; with FAILED, why"},
            "features_touched": {"type": "array", "items": {"type": "string"}},
            "commit_range": {
                "type": "object",
                "properties": {"from": {"type": "string"}, "to": {"type": "string"}},
            },
            "verdict": {"type": "string"},
            "review_id": {"type": "integer"},
        },
        "required": ["outcome"],
    }


def _session_text(rights: RolePolicy) -> str:
    return (
        "Append your session's entry to progress.json: once, as your last call. outcome: "
        f"{rights.done} when your work is done, or {FAILED} when you could not do it (then `notes` "
        "says why; the session is retried)."
    )


def _review_schema(rights: RolePolicy) -> dict[str, Any]:
    kind = rights.review_kind or "feature"
    fields: dict[str, Any] = {
        "verdict": {"type": "string", "enum": VERDICTS[kind]},
        "issues": _ISSUES,
        "summary": {"type": "string"},
    }
    if kind == "feature":
        fields["acceptance"] = ACCEPTANCE
    return {"type": "object", "properties": fields, "required": ["verdict", "issues"]}


def _either(values: list[str]) -> str:
    return ", ".join(values[:-1]) + f" or {values[-1]}"


def _review_text(rights: RolePolicy) -> str:
    if rights.review_kind == "architecture":
        return (
            "Record your architecture review in reviews.json, once per session; answers with its "
            f"review_id. verdict: {_either(VERDICTS['architecture'])}; issues: {{critical, major, minor}}, lists of "
            "strings. A refused call writes nothing: correct it and call again."
        )
    return (
        "Record your review in reviews.json, once per session; answers with its review_id. "
        f"verdict: {_either(VERDICTS['feature'])}; issues: {{critical, major, minor}}, lists of strings. "
        "Grade every acceptance step of the feature, in order: "
        "acceptance=[{step, passed, evidence}], `step` numbered from 1, `passed` true or false, "
        "`evidence` what you ran and saw. A PASS needs every step passed, each with its evidence; a "
        'REQUEST_CHANGES needs a failed step or an issue. A web feature (category "web"): each '
        "step's result also cites its browser evidence, `snapshot` and `screenshot`, the file names "
        f"the browser's results gave (`{note('snapshot-3.yml')}`), one of each per "
        "step; before a PASS read browser_console_messages. A refused call writes nothing: correct it "
        "and call again."
    )


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
        "check_feature_list",
        "Check the feature_list.json you wrote in the project folder, as the scheduler will after your "
        "session: its schema, unique ids, 1 to 6 steps per feature, `depends_on` naming other listed "
        "features without a circle. Answers with every problem, or that the list is valid. Fix and "
        "check again before you commit.",
        {"type": "object", "properties": {}},
        lambda p: p.creates_feature_list,
    ),
    ToolSpec("append_session", _session_text, _session_schema, lambda p: True),
    ToolSpec("record_review", _review_text, _review_schema, lambda p: p.review_kind is not None),
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
        *,
        workdir: Path,
        evidence: CitedEvidence | None,
    ) -> None:
        if not isinstance(records, Records):
            raise TypeError(f"the hand-off tools write the project's Records, not a folder: {records!r}")
        self.records, self.role, self.number, self.work = records, role, number, work
        self.open_review, self.brief = open_review, brief
        self.workdir = workdir
        """The work tree the agent works in (where the INITIALIZER writes feature_list.json)."""
        self.evidence = evidence
        """What a web PASS's cited evidence lacks, from this session's browser ledger (None: the
        session has no browser, so its review cites none)."""
        self.rights = policy(role)
        self.names = tool_names(role)
        self._review: dict[str, Any] | None = None
        """The review this session recorded (a session records one)."""

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

    def _check_feature_list(self, args: dict[str, Any]) -> str:
        path = self.workdir / FEATURES_FILE
        try:
            data = read_json(path)
        except StateError as exc:
            return (
                f"feature_list.json cannot be checked: {exc}. Write it with the Write tool, then check again."
            )
        problems = schema_errors(data, FEATURE_LIST)
        problems = [f"feature_list.json {p}" for p in problems] or feature_list_problems(data["features"])
        listed_before = self._load(FEATURES_FILE).get("features")
        if listed_before and not problems:  # the extend form: the list the project has, then new features
            problems = extension_problems(listed_before, data["features"])
        if not problems:  # a task list's tasks: each one feature's
            problems = extension_coverage(listed_before or [], data["features"], self._tasks())
        if not problems and listed_before:
            added = len(data["features"]) - len(listed_before)
            if not added:
                return (
                    f"feature_list.json is valid and adds no feature: right only when the change in the "
                    f"spec asks for nothing new (a reworded line); otherwise append its features after "
                    f"{listed_before[-1]['id']}"
                )
            return f"feature_list.json is valid: {len(data['features'])} features, {added} of them new"
        if not problems:
            return f"feature_list.json is valid: {len(data['features'])} features"
        listed = "\n".join(f"- {p}" for p in problems)
        return f"feature_list.json has {len(problems)} problem(s):\n{listed}\nFix them, then check again."

    def _tasks(self) -> tuple[Task, ...]:
        """The open tasks of the spec in the work tree, when it is a task list (verification reads
        the committed one)."""
        try:
            return read_tasks((self.workdir / SPEC_NAME).read_bytes(), SPEC_NAME)[1]
        except (OSError, SpecError):
            return ()

    def _append_session(self, args: dict[str, Any]) -> str:
        data = self._load("progress.json")
        sessions = data.setdefault("sessions", [])
        if any(entry.get("session_id") == self.number for entry in sessions):
            raise Refused(f"session {self.number} already has its entry in progress.json")
        outcome = str(args.get("outcome", ""))
        done = self.rights.done
        if outcome not in self.rights.outcomes:
            raise Refused(
                f"{REFUSED}outcome {outcome!r} is not one of {self.role.value}'s outcomes: use {done} "
                f"(your work is done) or {FAILED} (with the reason in `notes`)"
            )
        if outcome == FAILED and not str(args.get("notes") or "").strip():
            raise Refused(f"{REFUSED}{FAILED} needs the reason in `notes`: what stopped you, what is left")
        touched = args.get("features_touched")
        if touched is None:
            touched = [self.work.feature_id] if self.work and self.work.feature_id else []
        entry: dict[str, Any] = {
            "session_id": self.number,
            "agent_type": self.role.value,
            "features_touched": touched,
            "outcome": outcome,
            "commit_range": args.get("commit_range"),
        }
        entry.update({k: args[k] for k in ("notes", "verdict", "review_id") if k in args})
        sessions.append(entry)
        self._save("progress.json", data)
        return f"appended the entry of session {self.number} to progress.json"

    def _record_review(self, args: dict[str, Any]) -> str:
        if self._review is not None:
            raise Refused(
                f"{REFUSED}you already recorded review {self._review['review_id']} in this session "
                f"(verdict {self._review['verdict']}); a session records one review: end it with append_session"
            )
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
        self._check_schema("reviews.json", data)  # its shape first: the claim's rules read it
        if kind == "feature":
            self._check_claim(review)
        self._save("reviews.json", data)
        self._review = review
        return json.dumps({"review_id": review["review_id"], "verdict": review["verdict"]})

    def _check_claim(self, review: dict[str, Any]) -> None:
        """Refuse a feature review whose step results do not hold, by the rules verification applies
        after the session (core/acceptance; a web PASS's evidence: core/evidence via `evidence`)."""
        results = review.get("acceptance")
        feature = review["feature_id"]
        listed = self._load("feature_list.json").get("features", []) if feature else []
        steps = next((f.get("steps") or [] for f in listed if f.get("id") == feature), [])
        problems = acceptance.problems(steps, review["verdict"], results, review["issues"])
        if not problems and self.evidence is not None:
            problems = self.evidence(steps, review["verdict"], results)
        if problems:
            raise Refused(f"{REFUSED}{'; '.join(problems)}. Record the whole review again, corrected.")

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
        if self._review is None or self._review["verdict"] != "PASS":
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

    def _check_schema(self, name: str, data: dict[str, Any]) -> None:
        error = incremental_schema_error(data, name, last_validated(self.records, self.records.path(name)))
        if error is not None:
            raise Refused(f"refused: {name} would not match its schema {error}")

    def _save(self, name: str, data: dict[str, Any], *, passing: frozenset[str] | None = None) -> None:
        path = self.records.path(name)
        self._check_schema(name, data)
        atomic_write_json(path, data)
        remember(self.records, path, data, passing=passing)

    def _archived_max(self, key: str) -> int:
        """The largest id already moved to the history file (0: none), so ids keep increasing."""
        return largest_archived_id(self.records.root, key)


def sdk_tools(tools: HandoffTools) -> list[Any]:
    """The role's hand-off tools as the SDK's tool objects, each answering through `tools.call`."""
    from claude_agent_sdk import tool

    def make(spec: ToolSpec) -> Any:
        @tool(spec.name, spec.description_for(tools.rights), spec.schema_for(tools.rights))
        async def handler(args: dict[str, Any]) -> dict[str, Any]:
            answer, is_error = tools.call(spec.name, args)
            return {"content": [{"type": "text", "text": answer}], "is_error": is_error}

        return handler

    return [make(spec) for spec in SPECS if spec.name in tools.names]


def mcp_server(tools: HandoffTools) -> Any:
    """The SDK's in-process MCP server serving `tools` (started with the session's CLI)."""
    from claude_agent_sdk import create_sdk_mcp_server

    return create_sdk_mcp_server(SERVER, tools=sdk_tools(tools))
