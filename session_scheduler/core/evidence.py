"""A REVIEW's browser evidence, as values (pure): which features are reviewed in the browser, how
the scheduler names what each browser call left (its ledger, `browser.jsonl`, and the files in the
session's `evidence/` folder), and what a PASS on a web feature must cite from them.

The scheduler, not the agent, keeps the ledger: a hook after each browser call (run/browsing.py)
saves the call's snapshot, screenshot or console messages under a name it chooses
(`snapshot-3.yml`, `screenshot-4.png`, `console-9.txt`, the call's number), writes one ledger line,
and tells the agent the name in the call's result (`EVIDENCE_NOTE`). The agent cites those names in
`record_review`'s acceptance results (`snapshot`, `screenshot`); verification checks every cited
name against the ledger of the session that made the review.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

WEB_CATEGORY = "web"
"""A feature whose `category` is this is used in a browser: its REVIEW gets one (when the project
has an app) and its PASS needs browser evidence per acceptance step."""
EVIDENCE_DIR = "evidence"
"""In the session's folder: what the browser's calls left (the browser box writes only here)."""
LEDGER = "browser.jsonl"
"""In the session's folder (outside the box's reach): one line per browser call, the scheduler's."""
SERVER = "browser"
"""The MCP server's name in the session: its tools reach the model as `mcp__browser__<tool>`."""
TOOL_PREFIX = f"mcp__{SERVER}__"

KINDS: dict[str, tuple[str, str]] = {
    "browser_snapshot": ("snapshot", "yml"),
    "browser_take_screenshot": ("screenshot", "png"),
    "browser_console_messages": ("console", "txt"),
}
"""The browser tools whose result is kept as evidence: the kind and the file's extension."""
EVIDENCE_NOTE = "Evidence: {kind} saved as {name}"
"""Added to a browser call's result: the name to cite (`snapshot`/`screenshot` in acceptance)."""
NOTE = re.compile(r"Evidence: (?P<kind>snapshot|screenshot|console) saved as (?P<name>[\w.-]+)")
NAME = re.compile(r"^(snapshot|screenshot|console)-[0-9]+\.(yml|png|txt)$")
"""What an evidence file is called (the schema's pattern for a cited name)."""
CitedEvidence = Callable[[Sequence[str], str, Sequence[Mapping[str, Any]] | None], list[str]]
"""(steps, verdict, acceptance results) -> what the results lack of this session's browser evidence:
`browser_problems` on the session's ledger as it stands (run/browsing.evidence_problems). The seam
through which `record_review` refuses a web PASS at the call."""


def evidence_name(tool: str, call: int) -> str | None:
    """The file a browser call's evidence is kept in (None: the tool leaves none)."""
    kind = KINDS.get(tool)
    return None if kind is None else f"{kind[0]}-{call}.{kind[1]}"


def note(name: str) -> str:
    return EVIDENCE_NOTE.format(kind=name.split("-", 1)[0], name=name)


def is_web(feature: Mapping[str, Any] | None) -> bool:
    return feature is not None and str(feature.get("category") or "").strip().lower() == WEB_CATEGORY


@dataclass(frozen=True)
class Call:
    """One line of the ledger: a browser call and what the scheduler kept of it."""

    call: int
    tool: str
    """Without the MCP prefix (`browser_snapshot`)."""
    input: Mapping[str, Any]
    error: bool
    url: str | None
    """The page's address after the call, as the result said it (None when it did not)."""
    file: str | None
    """The evidence file the scheduler saved (None: the call left none, or it failed)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "call": self.call,
            "tool": self.tool,
            "input": dict(self.input),
            "error": self.error,
            "url": self.url,
            "file": self.file,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Call:
        return cls(
            int(data["call"]),
            str(data["tool"]),
            dict(data.get("input") or {}),
            bool(data.get("error")),
            data.get("url"),
            data.get("file"),
        )


def parse_ledger(text: str) -> tuple[list[Call], list[tuple[int, str]]]:
    """The calls of a ledger's text, and the lines that are not one (line number, why)."""
    calls: list[Call] = []
    bad: list[tuple[int, str]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            calls.append(Call.from_json(json.loads(line)))
        except ValueError:
            bad.append((n, "is not JSON"))
        except (KeyError, TypeError, AttributeError):
            bad.append((n, "is not a browser call"))
    return calls, bad


def browser_problems(
    steps: Sequence[str],
    verdict: str,
    results: Sequence[Mapping[str, Any]] | None,
    ledger: Sequence[Call],
    present: frozenset[str],
) -> list[str]:
    """What a web feature's review lacks of browser evidence (empty when it holds): a PASS cites,
    for every step, a snapshot and a screenshot this session's browser made (in the ledger, the
    file still in `present`), no file for two steps, and the console's messages were read."""
    if verdict != "PASS" or not steps:
        return []
    made = {c.file: c for c in ledger if c.file is not None and not c.error and c.file in present}
    out: list[str] = []
    if not ledger:
        return [
            "a PASS on a web feature needs this session's browser evidence, and the browser was not "
            "used: open the app, and for each step take a browser_snapshot and a browser_take_screenshot "
            "and cite them (acceptance=[{step, passed, evidence, snapshot, screenshot}])"
        ]
    cited: dict[str, Any] = {}
    for result in results or []:
        step = result.get("step")
        for kind in ("snapshot", "screenshot"):
            name = result.get(kind)
            if not name:
                out.append(f"step {step} cites no {kind}: a PASS on a web feature cites one per step")
            elif name not in made or KINDS[made[name].tool][0] != kind:
                out.append(f"step {step} cites {kind} {name!r}, which this session's browser did not make")
            elif name in cited:
                out.append(f"steps {cited[name]} and {step} cite the same {kind} {name!r}: one per step")
            else:
                cited[str(name)] = step
    if not any(c.tool == "browser_console_messages" and not c.error for c in ledger):
        out.append("a PASS on a web feature reads the console's messages (browser_console_messages)")
    return out
