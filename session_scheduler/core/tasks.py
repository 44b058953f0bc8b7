"""A spec that is a task list (pure): a Markdown checklist or a GitHub issues export, read into
tasks, each of which becomes one feature that names it (`task` in feature_list.json).

The kinds (`read_tasks`), decided in this order:
- `issues`: the spec parses as a JSON array, or its name ends `.json` (then it must parse), or it
  begins like an export (`[{`, `[]`) and does not parse (a broken export is said, not read as
  text). An array is what `gh issue list --json number,title,body,labels` prints; an entry whose
  `state` is `CLOSED` is done and becomes no task. A `.json` spec that parses as something else
  than an array (an object describing the app) is text, as before tasks existed.
- `tasks`: at least one Markdown checkbox item (`- [ ]`, `* [ ]`, `+ [ ]`; `[x]` is done). The
  lines indented under an item are its body; a checked item becomes no task.
- `text`: anything else (no tasks).

A task's `ref` is what the feature list, the proof and the report call it: `#12` for issue 12, and
`task 3` for the third checkbox item of the list, counted from the top with the checked ones, so
that ticking an item off renumbers none of the others.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from session_scheduler.core.errors import SpecError

SpecKind = Literal["text", "tasks", "issues"]

TITLE_CHARS = 200
"""A task's title is cut to this (a title is one line of a brief, a proof, a report row)."""
BODY_CHARS = 2000
"""A task's body is cut to this, with a note saying so (the spec in the project holds it whole)."""
EXPORT = "gh issue list --json number,title,body,labels"
"""The command whose output is an issues export: named in every error about one."""

REF = re.compile(r"^(#[1-9][0-9]*|task [1-9][0-9]*)$")
"""A task's ref, as a feature's `task` gives it (core/schemas.FEATURE_LIST)."""
_ITEM = re.compile(r"^(?P<indent> *)[-*+][ \t]+\[(?P<box>[ xX])\](?:[ \t]+(?P<text>.*))?$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_EXPORT_START = re.compile(r"^\s*\[\s*[{\]]")


@dataclass(frozen=True)
class Task:
    """One open task of the spec: the work of exactly one feature."""

    ref: str
    """`#12` (issue 12) or `task 3` (the list's third checkbox item): the feature's `task`."""
    title: str
    """One line, at most TITLE_CHARS."""
    body: str
    """The issue's body or the lines under the item ('' when none), at most BODY_CHARS and a note."""
    labels: tuple[str, ...] = ()
    """The issue's label names (a Markdown item has none)."""


def read_tasks(data: bytes, name: str) -> tuple[SpecKind, tuple[Task, ...]]:
    """The spec's kind and its open tasks (none for text); SpecError, in one line, for a task
    list or an export that cannot be used. `name` is the spec's file name, said in errors."""
    text = data.decode("utf-8-sig", errors="replace")
    named_json = name.lower().endswith(".json")
    if named_json or text.lstrip().startswith("["):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            if named_json or _EXPORT_START.match(text):
                raise SpecError(
                    f"spec {name} does not parse as JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
                    f"fix it there, or export the issues again with `{EXPORT}`"
                ) from None
            parsed = None
        if isinstance(parsed, list):
            return "issues", _issues(parsed, name)
    items = _items(text, name)
    if not items:
        return "text", ()
    tasks = tuple(
        Task(f"task {n}", title, body) for n, (done, title, body) in enumerate(items, 1) if not done
    )
    if not tasks:
        raise SpecError(
            f"spec {name}: every task of its list is checked (done), so there is nothing to build; "
            "leave the tasks to build unchecked (`- [ ]`)"
        )
    return "tasks", tasks


def checked_spec(data: bytes, name: str) -> bytes:
    """The spec's bytes when the spec can be used (its task list or export reads, or it is text);
    SpecError otherwise. The command line's check, before anything is written."""
    read_tasks(data, name)
    return data


def coverage_problems(features: Sequence[Mapping[str, Any]], tasks: tuple[Task, ...]) -> list[str]:
    """Every problem of a feature list against the spec's tasks (empty when each task is exactly
    one feature's `task`): a feature naming a task the spec does not have, a task named by
    several features, a task no feature names. One sentence each, for the model that fixes it."""
    known = {t.ref: t for t in tasks}
    refs = ", ".join(t.ref for t in tasks[:8]) + (", ..." if len(tasks) > 8 else "")
    named: dict[str, list[str]] = {}
    problems = []
    for n, feature in enumerate(features, 1):
        if feature.get("task") is None:
            continue
        fid, ref = str(feature.get("id", f"feature {n}")), str(feature["task"])
        if ref in known:
            named.setdefault(ref, []).append(fid)
        elif not tasks:
            problems.append(
                f'feature_list.json: {fid} names task "{ref}", but the spec is not a task list; remove its `task`'
            )
        else:
            problems.append(
                f'feature_list.json: {fid} names task "{ref}", which is not in the spec; set its `task` '
                f"to the spec's task it builds ({refs}) or remove it"
            )
    for ref, fids in named.items():
        if len(fids) > 1:
            problems.append(
                f'feature_list.json: {" and ".join(fids)} name the same task "{ref}"; a task is one feature\'s: '
                "keep it on one of them, and merge the others into it or remove their `task`"
            )
    problems += [
        f'feature_list.json: no feature names task "{t.ref}" ({_short(t.title)}); '
        f'add one feature for it with `"task": "{t.ref}"`'
        for t in tasks
        if t.ref not in named
    ]
    return problems


def _issues(entries: list[Any], name: str) -> tuple[Task, ...]:
    if not entries:
        raise SpecError(
            f"spec {name} is an empty issues export ([]); export the open issues to build with `{EXPORT}`"
        )
    tasks = []
    numbers = Counter(e["number"] for e in entries if isinstance(e, dict) and type(e.get("number")) is int)
    twice = sorted(int(n) for n, count in numbers.items() if count > 1)
    if twice:
        listed = ", ".join(f"#{n}" for n in twice)
        raise SpecError(f"spec {name} lists issue {listed} more than once; keep each issue once")
    for n, entry in enumerate(entries, 1):
        where = f"spec {name}, entry {n} of the export"
        if not isinstance(entry, dict):
            raise SpecError(f"{where} is not an object; each issue is an object, as `{EXPORT}` prints")
        number = entry.get("number")
        if not isinstance(number, int) or isinstance(number, bool) or number < 1:
            raise SpecError(f"{where} has no issue number; give it its `number`, as `{EXPORT}` prints")
        title = entry.get("title")
        if not isinstance(title, str) or not title.strip():
            raise SpecError(f"{where} (issue #{number}) has no title; give it its `title`")
        if str(entry.get("state", "OPEN")).upper() == "CLOSED":
            continue
        body = entry.get("body") or ""
        if not isinstance(body, str):
            raise SpecError(f"{where} (issue #{number}): its `body` is not text; give it as a string")
        tasks.append(Task(f"#{number}", _title(title), _body(body), _labels(entry.get("labels"), where)))
    if not tasks:
        raise SpecError(f"spec {name}: every issue of the export is closed, so there is nothing to build")
    return tuple(tasks)


def _labels(labels: Any, where: str) -> tuple[str, ...]:
    """The label names of an entry's `labels` (gh prints objects with a `name` and more keys)."""
    if labels is None:
        return ()
    names = (
        [label.get("name") if isinstance(label, dict) else label for label in labels]
        if isinstance(labels, list)
        else [None]
    )
    if not all(isinstance(name, str) for name in names):
        raise SpecError(
            f"{where}: its `labels` are not a list of objects with a `name`, as `{EXPORT}` prints"
        )
    return tuple(str(name) for name in names)


def _items(text: str, name: str) -> list[tuple[bool, str, str]]:
    """Each checkbox item of the Markdown `text`: (checked, title, body), in order."""
    items: list[tuple[bool, str, list[str]]] = []
    indent: int | None = None  # the open item's, whose body the lines indented under it are
    fence: str | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.expandtabs(4).rstrip()
        depth = len(line) - len(line.lstrip(" "))
        if indent is not None and (not line or depth > indent):
            items[-1][2].append(line)
            continue
        indent = None
        opened = _FENCE.match(line)
        if opened and (fence is None or opened.group(1).startswith(fence)):
            fence = opened.group(1)[:3] if fence is None else None
            continue
        match = None if fence else _ITEM.match(line)
        if match is None:
            continue
        title = (match.group("text") or "").strip()
        if not title and match.group("box") == " ":
            raise SpecError(
                f"spec {name}, line {number}: a checkbox item without text; write the task after "
                "its box or delete the line"
            )
        indent = len(match.group("indent"))
        items.append((match.group("box") != " ", _title(title), []))
    return [(done, title, _body(textwrap.dedent("\n".join(body)))) for done, title, body in items]


def _title(title: str) -> str:
    one = " ".join(title.split())
    return one if len(one) <= TITLE_CHARS else one[: TITLE_CHARS - 1] + "…"


def _body(body: str) -> str:
    body = "\n".join(line.rstrip() for line in body.replace("\r\n", "\n").split("\n")).strip("\n")
    if len(body) <= BODY_CHARS:
        return body
    return f"{body[:BODY_CHARS]}\n[... cut: {len(body) - BODY_CHARS} more characters are in the spec]"


def _short(title: str, width: int = 60) -> str:
    return title if len(title) <= width else title[: width - 1] + "…"


def extension_coverage(
    before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]], tasks: tuple[Task, ...]
) -> list[str]:
    """`coverage_problems` of a list that extends `before` (the INITIALIZER's extend form): a
    listed feature whose task the newer spec no longer has (closed: built) is not held to it;
    each task the spec has is still exactly one feature's, old or new."""
    refs = {t.ref for t in tasks}
    listed = {f["id"] for f in before}
    kept = [f for f in after if f["id"] not in listed or f.get("task") is None or f["task"] in refs]
    return coverage_problems(kept, tasks) if tasks or any(f.get("task") for f in kept) else []
