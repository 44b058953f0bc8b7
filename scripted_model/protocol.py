"""Pure data for the scripted model: what a brain sees and what it answers."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_args, runtime_checkable

FaultKind = Literal[
    "http_429",
    "http_529",
    "http_500",
    "http_401",
    "http_402",
    "http_404",
    "usage_limit",
    "stream_cut",
    "hang",
]
FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)
SYSTEM_REMINDER = "<system-reminder>"
HANDOFF_TOOLS = "mcp__handoff__"
"""How the scheduler's hand-off tools are named to the model (its MCP server `handoff`)."""
HANDOFF_ARGS: dict[str, tuple[str, ...]] = {
    "brief": (),
    "show_feature": ("feature_id",),
    "check_feature_list": (),
    "append_session": ("outcome", "notes", "features_touched", "commit_range", "verdict", "review_id"),
    "record_review": ("verdict", "issues", "acceptance"),
    "record_fix": ("issues_fixed",),
    "mark_passing": (),
}
"""The hand-off tools the robot calls, and the arguments it passes each (`acceptance`: the
feature review's step results, `[{step, passed, evidence}]`)."""
BROWSER_TOOLS = "mcp__browser__"
"""How REVIEW's browser tools are named to the model (the scheduler's MCP server `browser`)."""
BROWSER_FACT = "browser"
"""The brief's fact that gives the app's address as the browser reaches it (absent: no browser)."""
WEB_CATEGORY = "web"
"""A feature of this `category` is reviewed in the browser, with evidence per step."""
EVIDENCE_NOTE = re.compile(r"Evidence: (?P<kind>snapshot|screenshot|console) saved as (?P<name>[\w.-]+)")
"""What the scheduler adds to a browser call's result: the evidence file's name, to cite."""


@dataclass(frozen=True)
class ToolCall:
    """One tool call the model asks the CLI to run."""

    name: str
    input: dict[str, Any]


@dataclass(frozen=True)
class Reply:
    """A normal model answer: optional text, then tool calls (none means end_turn)."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()

    @property
    def stop_reason(self) -> str:
        """The Messages API stop_reason this reply maps to."""
        return "tool_use" if self.tool_calls else "end_turn"


@dataclass(frozen=True)
class Fault:
    """A failure the server should simulate instead of answering."""

    kind: FaultKind
    reset_epoch: int | None = None


@dataclass(frozen=True)
class ToolExchange:
    """One earlier tool call in the conversation, paired with its result."""

    tool_use_id: str
    name: str
    input: dict[str, Any]
    result: str
    is_error: bool


def content_text(content: Any, *, skip_reminders: bool = True) -> str:
    """Flatten a message content (str or list of blocks) to its text blocks."""
    if isinstance(content, str):
        parts = [content]
    elif isinstance(content, list):
        parts = [str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text"]
    else:
        return ""
    if skip_reminders:
        parts = [p for p in parts if not p.lstrip().startswith(SYSTEM_REMINDER)]
    return "\n".join(p for p in parts if p)


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    """Content blocks of a message, treating string content as no blocks."""
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict)]


@dataclass(frozen=True)
class Turn:
    """One model request from the CLI, as the brain sees it."""

    session_id: str | None
    model: str
    system: str
    messages: tuple[dict[str, Any], ...]
    has_tools: bool
    tools: tuple[str, ...] = ()
    """The names of the tools the request offers the model (as the model would see them)."""

    @classmethod
    def from_request(cls, body: dict[str, Any], session_id: str | None) -> Turn:
        """Build a Turn from a decoded /v1/messages body; TypeError if malformed."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise TypeError("'messages' must be a list of objects")
        model = body.get("model")
        if not isinstance(model, str):
            raise TypeError("'model' must be a string")
        return cls(
            session_id=session_id,
            model=model,
            system=content_text(body.get("system", ""), skip_reminders=False),
            messages=tuple(messages),
            has_tools=bool(body.get("tools")),
            tools=tuple(str(t.get("name")) for t in body.get("tools") or () if isinstance(t, dict)),
        )

    def _user_messages(self) -> list[dict[str, Any]]:
        """The role:user messages, in order."""
        return [m for m in self.messages if m.get("role") == "user"]

    def last_user_text(self) -> str:
        """Text of the last role:user message, without <system-reminder> blocks."""
        users = self._user_messages()
        return content_text(users[-1].get("content")) if users else ""

    def first_user_text(self) -> str:
        """Text of the first role:user message, without <system-reminder> blocks."""
        users = self._user_messages()
        return content_text(users[0].get("content")) if users else ""

    def exchanges(self) -> tuple[ToolExchange, ...]:
        """Every earlier tool_use block paired with its tool_result, in call order."""
        results: dict[str, tuple[str, bool]] = {}
        for message in self._user_messages():
            for block in _blocks(message):
                if block.get("type") == "tool_result":
                    text = content_text(block.get("content", ""), skip_reminders=False)
                    results[str(block.get("tool_use_id"))] = (
                        text,
                        bool(block.get("is_error")),
                    )
        out: list[ToolExchange] = []
        for message in self.messages:
            if message.get("role") != "assistant":
                continue
            for block in _blocks(message):
                tool_id = str(block.get("id"))
                if block.get("type") != "tool_use" or tool_id not in results:
                    continue
                raw_input = block.get("input")
                tool_input = raw_input if isinstance(raw_input, dict) else {}
                result, is_error = results[tool_id]
                out.append(ToolExchange(tool_id, str(block.get("name")), tool_input, result, is_error))
        return tuple(out)

    def answers_tool_results(self) -> bool:
        """True when the last user message carries tool_result blocks."""
        users = self._user_messages()
        return bool(users) and any(b.get("type") == "tool_result" for b in _blocks(users[-1]))


@runtime_checkable
class Brain(Protocol):
    """Decides every main-loop model answer; may also define role_of(turn)."""

    def respond(self, turn: Turn) -> Reply | Fault:
        """Answer one turn with a Reply or simulate a Fault."""
        ...


def content_blocks(reply: Reply, new_id: Callable[[], str]) -> list[dict[str, Any]]:
    """The assistant content blocks for a reply; new_id() makes tool_use ids."""
    blocks: list[dict[str, Any]] = []
    if reply.text or not reply.tool_calls:
        blocks.append({"type": "text", "text": reply.text})
    for call in reply.tool_calls:
        blocks.append({"type": "tool_use", "id": new_id(), "name": call.name, "input": call.input})
    return blocks


def usage(in_tok: int, blocks: list[dict[str, Any]] | None) -> dict[str, Any]:
    """A usage object; output tokens are the blocks' JSON bytes / 4 (1 if None)."""
    out_tok = 1 if blocks is None else max(1, len(json.dumps(blocks)) // 4)
    return {
        "input_tokens": in_tok,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": out_tok,
        "service_tier": "standard",
    }


def message_json(
    msg_id: str, model: str, blocks: list[dict[str, Any]], stop: str, in_tok: int
) -> dict[str, Any]:
    """The non-streaming Messages API response body."""
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage(in_tok, blocks),
    }


def _block_events(index: int, block: dict[str, Any]) -> list[dict[str, Any]]:
    """content_block_start / _delta / _stop for one complete block."""
    if block["type"] == "text":
        head: dict[str, Any] = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": block["text"]}
    else:
        head = {**block, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
    return [
        {"type": "content_block_start", "index": index, "content_block": head},
        {"type": "content_block_delta", "index": index, "delta": delta},
        {"type": "content_block_stop", "index": index},
    ]


def sse_events(
    msg_id: str, model: str, blocks: list[dict[str, Any]], stop: str, in_tok: int
) -> list[dict[str, Any]]:
    """The SSE event payloads (each with its "type") streaming the given blocks."""
    start = {**message_json(msg_id, model, [], stop, in_tok), "stop_reason": None}
    start["usage"] = usage(in_tok, None)
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(blocks):
        events.extend(_block_events(index, block))
    final = {"stop_reason": stop, "stop_sequence": None}
    out = usage(in_tok, blocks)
    events.append({"type": "message_delta", "delta": final, "usage": out})
    events.append({"type": "message_stop"})
    return events


def sse_bytes(event: dict[str, Any]) -> bytes:
    """One event in text/event-stream framing."""
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def error_json(error_type: str, message: str) -> dict[str, Any]:
    """The Messages API error body."""
    return {"type": "error", "error": {"type": error_type, "message": message}}


# status, error type, message, extra headers for the faults answered with an error.
HTTP_FAULTS: dict[str, tuple[int, str, str, dict[str, str]]] = {
    "http_429": (429, "rate_limit_error", "Scripted rate limit", {"retry-after": "0"}),
    "http_529": (529, "overloaded_error", "Overloaded", {}),
    "http_500": (500, "api_error", "Internal server error", {}),
    "http_401": (401, "authentication_error", "invalid x-api-key", {}),
    "http_402": (402, "billing_error", "Your credit balance is too low", {}),
    "http_404": (404, "not_found_error", "model: unrecognized_model", {}),
}


def usage_limit_headers(reset_epoch: int) -> dict[str, str]:
    """Headers of a subscription five-hour usage-limit rejection (not retried)."""
    prefix = "anthropic-ratelimit-unified-"
    return {
        prefix + "status": "rejected",
        prefix + "reset": str(reset_epoch),
        prefix + "representative-claim": "five_hour",
        prefix + "5h-status": "rejected",
        prefix + "5h-reset": str(reset_epoch),
        prefix + "5h-utilization": "1.0",
        "x-should-retry": "false",
    }


# fmt: off
LOG_FIELDS = ("time", "path", "session_id", "model", "has_tools", "tools", "n_messages",
              "stream", "body_bytes", "system_bytes", "status", "fault", "role",
              "tool_calls", "error")
# fmt: on


def new_log_entry(path: str, session_id: str | None) -> dict[str, Any]:
    """A request-log entry with every field present (None until known)."""
    entry: dict[str, Any] = dict.fromkeys(LOG_FIELDS)
    entry.update(time=time.time(), path=path, session_id=session_id, tool_calls=[])
    return entry


def role_of(brain: object, turn: Turn) -> str | None:
    """The brain's optional role_of(turn) as a string, None if absent or failing."""
    method = getattr(brain, "role_of", None)
    try:
        role = method(turn) if callable(method) else None
    except Exception:
        return None
    return None if role is None else str(role)
