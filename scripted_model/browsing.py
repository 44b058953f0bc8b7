"""The robot's browser: the documented grammar of a web feature's acceptance steps, what an
accessibility snapshot shows, and REVIEW's walk through a web feature's steps with the scheduler's
browser tools (one action per step, then a snapshot and a screenshot, judged by the snapshot).

A browser step (prompts/feature_list_format.md) is one action, ` -> `, and what the page must show:

    Open `/` -> the page shows `todo`
    Type `milk` into `New task` and click `Add` -> the page shows `milk`
    Click `Done: milk` -> the page does not show `Done: milk`

Fields and buttons are named as a user reads them: their accessible name (label or text), which
is how the snapshot names them.
"""

from __future__ import annotations

import re
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from scripted_model.protocol import BROWSER_TOOLS, EVIDENCE_NOTE, ToolCall

Steps = Generator[list[ToolCall], list[str], Any]

_ACTION = re.compile(
    r"Open `(?P<path>/[^`]*)`"
    r"|Click `(?P<click>[^`]+)`"
    r"|Type `(?P<text>[^`]*)` into `(?P<field>[^`]+)`(?: and click `(?P<button>[^`]+)`)?"
)
_STEP = re.compile(r"^(?P<action>.+?) -> the page (?P<verb>shows|does not show) `(?P<shows>[^`]+)`$")
_REF = re.compile(r"\[ref=(?P<ref>[\w-]+)\]")
_YAML = re.compile(r"```yaml\n(?P<yaml>.*?)```", re.DOTALL)
_ERRORS = re.compile(r"Errors: (?P<count>[0-9]+)")
INPUT_ROLES = frozenset({"textbox", "searchbox", "combobox", "spinbutton"})
"""Fields a user types into: what they hold was typed, not shown by the app."""
CLICKABLE = ("button", "link", "checkbox", "radio", "menuitem", "tab", "option")
NOT_CHECKABLE = (
    "not checkable: this step is used in a browser, and this session was given none "
    "(the brief has no `browser`)"
)


@dataclass(frozen=True)
class WebStep:
    """One parsed browser step: its action (open a path; type into a field; click), then the
    text the page must show (or, `absent`, must not)."""

    shows: str
    absent: bool = False
    path: str | None = None
    text: str | None = None
    field: str | None = None
    click: str | None = None

    def did(self) -> str:
        """What was done, in words (the start of the step's evidence)."""
        if self.path is not None:
            return f"opened `{self.path}`"
        typed = f"typed `{self.text}` into `{self.field}`" if self.field is not None else ""
        clicked = f"clicked `{self.click}`" if self.click is not None else ""
        return " and ".join(part for part in (typed, clicked) if part)


def parse_step(text: str) -> WebStep | None:
    """The step in the documented browser form, or None when it is not in it."""
    step = _STEP.match(text.strip())
    action = _ACTION.fullmatch(step["action"]) if step else None
    if step is None or action is None:
        return None
    return WebStep(
        shows=step["shows"],
        absent=step["verb"] == "does not show",
        path=action["path"],
        text=action["text"],
        field=action["field"],
        click=action["click"] or action["button"],
    )


@dataclass(frozen=True)
class Node:
    """One line of an accessibility snapshot: `role "name" [ref=e5]: value`."""

    role: str
    name: str
    ref: str | None
    value: str


def _unquote(line: str) -> tuple[str, str]:
    """A YAML list item's key and value (`- key: value`; the key may be quoted)."""
    body = line.strip()[2:] if line.strip().startswith("- ") else line.strip()
    if body.startswith("'"):
        quoted = re.match(r"'((?:[^']|'')*)'", body)
        if quoted:
            return quoted[1].replace("''", "'"), body[quoted.end() :].lstrip(":").strip()
    if body.startswith('"'):
        quoted = re.match(r'"((?:[^"\\]|\\.)*)"', body)
        if quoted:
            return quoted[1].replace('\\"', '"'), body[quoted.end() :].lstrip(":").strip()
    key, _, value = body.partition(": ")
    return key.rstrip(":"), value.strip()


def nodes(snapshot: str) -> list[Node]:
    """The nodes of a browser_snapshot result (its YAML block, or the whole text)."""
    found = _YAML.search(snapshot)
    if found is None and "### " in snapshot:  # a result without a snapshot (an error)
        return []
    out = []
    for line in (found["yaml"] if found else snapshot).splitlines():
        if not line.strip().startswith("- "):
            continue
        key, value = _unquote(line)
        role, _, rest = key.partition(" ")
        name = re.match(r'"((?:[^"\\]|\\.)*)"', rest)
        ref = _REF.search(rest)
        out.append(
            Node(role, name[1].replace('\\"', '"') if name else "", ref["ref"] if ref else None, value)
        )
    return out


def find_ref(snapshot: str, name: str, roles: tuple[str, ...] | frozenset[str] = ()) -> str | None:
    """The ref of the first node named `name` (its role one of `roles`, when given), or None."""
    for node in nodes(snapshot):
        if node.ref and node.name == name and (not roles or node.role in roles):
            return node.ref
    return None


def shown(snapshot: str) -> str:
    """What the page shows a user: every node's name and text, one a line, fields' typed values
    left out (text typed into a field is no proof the app took it)."""
    lines = []
    for node in nodes(snapshot):
        if node.role in INPUT_ROLES:
            continue
        lines += [part for part in (node.name, node.value) if part]
    return "\n".join(lines)


def cited(result: str, kind: str) -> dict[str, str]:
    """`{kind: name}` when the scheduler's note in the result names a file of that kind."""
    for note in EVIDENCE_NOTE.finditer(result):
        if note["kind"] == kind:
            return {kind: note["name"]}
    return {}


def failed(result: str) -> str | None:
    """The browser's own error in a tool result, or None."""
    if "### Error" in result or result.lstrip().startswith(("Error", "<tool_use_error>")):
        lines = [line for line in result.splitlines() if line.strip() and not line.startswith("#")]
        return lines[0][:200] if lines else "an error"
    return None


def console_errors(result: str) -> int:
    found = _ERRORS.search(result)
    return int(found["count"]) if found else 0


def browser(tool: str, **args: Any) -> ToolCall:
    return ToolCall(BROWSER_TOOLS + tool, args)


def act(base: str, step: WebStep) -> Steps:
    """Carry out the step's action; returns what stopped it (None: it was done)."""
    if step.path is not None:
        (opened,) = yield [browser("browser_navigate", url=base.rstrip("/") + step.path)]
        return failed(opened)
    (snapshot,) = yield [browser("browser_snapshot")]
    if step.field is not None:
        field = find_ref(snapshot, step.field, INPUT_ROLES)
        if field is None:
            return f"the page has no field named `{step.field}`"
        (typed,) = yield [browser("browser_type", target=field, element=step.field, text=step.text or "")]
        if failed(typed):
            return failed(typed)
    if step.click is not None:
        target = find_ref(snapshot, step.click, CLICKABLE) or find_ref(snapshot, step.click)
        if target is None:
            return f"the page has nothing to click named `{step.click}`"
        (clicked,) = yield [browser("browser_click", target=target, element=step.click)]
        return failed(clicked)
    return None


def grade(n: int, step: WebStep, stopped: str | None, snapshot: str, screenshot: str) -> dict[str, Any]:
    """One step's acceptance result, judged by the snapshot taken after its action."""
    stopped = stopped or failed(snapshot)
    seen = shown(snapshot)
    there = step.shows in seen
    if stopped is not None:
        evidence, passed = f"{step.did() or 'the action'} failed: {stopped}", False
    else:
        passed = there != step.absent
        evidence = f"{step.did()}; the page {'shows' if there else 'does not show'} `{step.shows}`"
        if not passed:
            wanted = "absent" if step.absent else "shown"
            evidence += (
                f", which the step wants {wanted} (the page shows: {' | '.join(seen.splitlines())[:200]})"
            )
    return {
        "step": n,
        "passed": passed,
        "evidence": evidence,
        **cited(snapshot, "snapshot"),
        **cited(screenshot, "screenshot"),
    }


def check_in_browser(base: str | None, steps: list[str]) -> Steps:
    """Grade a web feature's steps in the browser at `base` (the brief's `browser`), in order on
    one page, each with its own snapshot and screenshot; then read the console once. Returns
    (acceptance results, the console's error count). Without a browser no step is checkable."""
    if not base:
        return [{"step": n, "passed": False, "evidence": NOT_CHECKABLE} for n in range(1, len(steps) + 1)], 0
    yield [browser("browser_navigate", url=base)]
    results = []
    for n, text in enumerate(steps, 1):
        step = parse_step(text)
        if step is None:
            evidence = (
                "not a browser step in the documented form (prompts/feature_list_format.md): not checked"
            )
            results.append({"step": n, "passed": False, "evidence": evidence})
            continue
        stopped = yield from act(base, step)
        (snapshot,) = yield [browser("browser_snapshot")]  # one at a time: the scheduler numbers them
        (screenshot,) = yield [browser("browser_take_screenshot", type="png")]
        results.append(grade(n, step, stopped, snapshot, screenshot))
    (console,) = yield [browser("browser_console_messages")]
    return results, console_errors(console)
