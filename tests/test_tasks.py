"""A spec as a task list (core/tasks.py): its kind, its tasks' refs, titles, bodies and labels, each
bad task list or export refused in one line that says what to do, and a feature list held to the
tasks (`coverage_problems`). A property: tasks written as Markdown or as a gh export read back."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session_scheduler.core.errors import EXIT_USAGE, BadInput, SpecError
from session_scheduler.core.schemas import FEATURE_LIST
from session_scheduler.core.tasks import (
    BODY_CHARS,
    TITLE_CHARS,
    Task,
    checked_spec,
    coverage_problems,
    read_tasks,
)

CHECKLIST = """# Todo app

A small todo list in the terminal.

- [ ] Add a task
  `todo add TITLE` prints the new task's number.

      todo add milk -> 1
  - [ ] it refuses an empty title
- [x] Set up the project
* [ ]   List   the tasks\t
```
- [ ] an example in a code block, not a task
```
- a plain bullet, not a task
+ [X] Write the README
- [ ] Remove a task
Some closing words.
"""

EXPORT = [
    {
        "number": 12,
        "title": "Add a task",
        "body": "Typed\r\ninto the box.",
        "labels": [{"id": "x", "name": "ui"}],
    },
    {"number": 7, "title": "  Save   tasks ", "body": None, "labels": []},
    {"number": 3, "title": "Old", "body": "", "labels": [], "state": "CLOSED"},
    {"number": 15, "title": "Dark mode"},
]


def tasks_of(text: str, name: str = "spec.md") -> tuple[Task, ...]:
    kind, tasks = read_tasks(text.encode(), name)
    assert kind in ("tasks", "issues")
    return tasks


def refused(data: str | bytes, name: str = "spec.txt") -> str:
    with pytest.raises(SpecError) as caught:
        read_tasks(data.encode() if isinstance(data, str) else data, name)
    message = str(caught.value)
    assert "\n" not in message, "one line"
    return message


# -- kinds ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "name", "kind"),
    [
        (CHECKLIST, "spec.md", "tasks"),
        (json.dumps(EXPORT), "issues.json", "issues"),
        (json.dumps(EXPORT), "app_spec.txt", "issues"),  # as the project keeps it: the name is lost
        ("# An app\n\nIt lists tasks:\n- add\n- list\n", "spec.txt", "text"),
        ("[Draft] a todo app with [links](x)\n", "spec.txt", "text"),
        ('{"openapi": "3.1.0", "paths": {}}', "api.json", "text"),  # JSON that is no export
        ("- [ ] Add a task\n", "spec.txt", "tasks"),
        ("  * [ ] Add a task\n", "spec.txt", "tasks"),
    ],
)
def test_each_kind_is_detected(data: str, name: str, kind: str) -> None:
    assert read_tasks(data.encode(), name)[0] == kind
    if kind == "text":
        assert read_tasks(data.encode(), name)[1] == ()


def test_checklist_items_become_tasks_numbered_with_the_checked_ones() -> None:
    assert tasks_of(CHECKLIST) == (
        Task(
            "task 1",
            "Add a task",
            "`todo add TITLE` prints the new task's number.\n\n    todo add milk -> 1\n"
            "- [ ] it refuses an empty title",
        ),
        Task("task 3", "List the tasks", ""),
        Task("task 5", "Remove a task", ""),
    )


def test_an_export_s_open_issues_become_tasks_in_its_order() -> None:
    assert tasks_of(json.dumps(EXPORT), "issues.json") == (
        Task("#12", "Add a task", "Typed\ninto the box.", ("ui",)),
        Task("#7", "Save tasks", ""),
        Task("#15", "Dark mode", ""),
    )


def test_a_byte_order_mark_and_tabs_are_read_through() -> None:
    assert read_tasks(b"\xef\xbb\xbf" + json.dumps(EXPORT[:1]).encode(), "i.json")[1][0].ref == "#12"
    assert tasks_of("- [ ] a\n\tunder a\n- [ ] b\n") == (
        Task("task 1", "a", "under a"),
        Task("task 2", "b", ""),
    )


def test_long_titles_and_bodies_are_cut_with_a_note() -> None:
    (task,) = tasks_of(json.dumps([{"number": 1, "title": "t" * 500, "body": "b" * 5000}]), "i.json")
    assert len(task.title) == TITLE_CHARS and task.title.endswith("…")
    assert task.body == "b" * BODY_CHARS + f"\n[... cut: {5000 - BODY_CHARS} more characters are in the spec]"
    (item,) = tasks_of("- [ ] " + "t" * 500 + "\n" + "  b\n" * 2000)
    assert len(item.title) == TITLE_CHARS and item.body.endswith("more characters are in the spec]")


# -- bad input ------------------------------------------------------------------------------------


def test_an_export_that_does_not_parse_says_where() -> None:
    message = refused('[\n  {"number": 1, "title": "a"}\n  {"number": 2}\n]', "issues.json")
    assert message.startswith(
        "spec issues.json does not parse as JSON (Expecting ',' delimiter at line 3, column 3)"
    )
    assert "gh issue list --json number,title,body,labels" in message
    assert "line 1, column 15" in refused('[{"number": 1,', "app_spec.txt"), "it begins like an export"
    assert "does not parse as JSON" in refused('{"openapi": ', "api.json"), "a .json spec must parse"


@pytest.mark.parametrize(
    ("entries", "said"),
    [
        ([{"title": "a"}], "entry 1 of the export has no issue number; give it its `number`"),
        ([{"number": "4", "title": "a"}], "entry 1 of the export has no issue number"),
        ([{"number": True, "title": "a"}], "entry 1 of the export has no issue number"),
        ([{"number": 1, "title": "a"}, {"number": 2}], "entry 2 of the export (issue #2) has no title"),
        ([{"number": 2, "title": "  "}], "(issue #2) has no title; give it its `title`"),
        (["#1 a"], "entry 1 of the export is not an object"),
        ([{"number": 1, "title": "a", "body": 3}], "its `body` is not text"),
        (
            [{"number": 1, "title": "a", "labels": "bug"}],
            "its `labels` are not a list of objects with a `name`",
        ),
        ([{"number": 1, "title": "a", "labels": [{"color": "f00"}]}], "its `labels` are not a list"),
    ],
)
def test_an_export_entry_without_its_fields_is_named(entries: list[Any], said: str) -> None:
    assert said in refused(json.dumps(entries), "issues.json")


def test_duplicate_issue_numbers_are_refused() -> None:
    entries = [{"number": n, "title": str(n)} for n in (4, 9, 4, 1, 9)]
    assert refused(json.dumps(entries), "i.json") == (
        "spec i.json lists issue #4, #9 more than once; keep each issue once"
    )


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (
            "[]",
            "spec spec.txt is an empty issues export ([]); export the open issues to build with `gh issue",
        ),
        (
            "- [x] done\n* [X] done too\n",
            "every task of its list is checked (done), so there is nothing to build",
        ),
        (json.dumps([{"number": 1, "title": "a", "state": "CLOSED"}]), "every issue of the export is closed"),
    ],
)
def test_an_empty_task_list_is_refused(data: str, said: str) -> None:
    assert said in refused(data)


def test_an_open_item_without_text_is_refused_with_its_line() -> None:
    assert refused("# x\n\n- [ ] a\n- [ ]\n") == (
        "spec spec.txt, line 4: a checkbox item without text; write the task after its box or delete the line"
    )
    assert tasks_of("- [x]\n- [ ] a\n") == (Task("task 2", "a", ""),)


def test_a_spec_error_is_bad_input_and_the_check_returns_the_spec() -> None:
    assert issubclass(SpecError, BadInput) and SpecError.exit_code == EXIT_USAGE
    assert checked_spec(CHECKLIST.encode(), "spec.md") == CHECKLIST.encode()
    with pytest.raises(SpecError):
        checked_spec(b"[]", "spec.md")


# -- coverage -------------------------------------------------------------------------------------

TASKS = (Task("#12", "Add a task", ""), Task("#7", "Save tasks", ""), Task("#15", "Dark mode " * 10, ""))


def feature(fid: str, task: str | None = None) -> dict[str, Any]:
    return {"id": fid, "category": "functional", "description": fid, "steps": ["s"], "passes": False} | (
        {"task": task} if task else {}
    )


def test_a_list_carrying_each_task_once_has_no_problem() -> None:
    features = [feature("F001"), feature("F002", "#7"), feature("F003", "#12"), feature("F004", "#15")]
    assert coverage_problems(features, TASKS) == []
    assert coverage_problems([feature("F001")], ()) == []


def test_each_coverage_problem_names_the_feature_or_task_and_what_to_do() -> None:
    features = [feature("F001", "#12"), feature("F002", "#12"), feature("F003", "#99"), feature("F004")]
    assert coverage_problems(features, TASKS) == [
        'feature_list.json: F003 names task "#99", which is not in the spec; set its `task` to the '
        "spec's task it builds (#12, #7, #15) or remove it",
        'feature_list.json: F001 and F002 name the same task "#12"; a task is one feature\'s: keep it on '
        "one of them, and merge the others into it or remove their `task`",
        'feature_list.json: no feature names task "#7" (Save tasks); add one feature for it with `"task": "#7"`',
        f'feature_list.json: no feature names task "#15" ({("Dark mode " * 6)[:59]}…); add one feature for it '
        'with `"task": "#15"`',
    ]


def test_a_task_named_when_the_spec_is_text_is_a_problem() -> None:
    assert coverage_problems([feature("F001", "task 1")], ()) == [
        'feature_list.json: F001 names task "task 1", but the spec is not a task list; remove its `task`'
    ]


def test_the_schema_takes_a_task_ref_and_lists_without_one() -> None:
    jsonschema.validate(
        {"features": [feature("F001"), feature("F002", "#3"), feature("F003", "task 12")]}, FEATURE_LIST
    )
    for wrong in ("12", "#0", "task", "Task 1", "#1 Add"):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"features": [feature("F001", wrong)]}, FEATURE_LIST)


# -- the property ---------------------------------------------------------------------------------

_CHAR = st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp", "Zs"), blacklist_characters="\x85")
_WORD = st.text(_CHAR, min_size=1, max_size=8)
TITLES = st.lists(_WORD, min_size=1, max_size=5).map(" ".join)
_LINE = st.one_of(st.just(""), st.lists(_WORD, min_size=1, max_size=4).map(" ".join), _WORD.map("  ".__add__))
BODIES = (
    st.lists(_LINE, max_size=5)
    .map(lambda lines: "\n".join(lines).strip("\n"))
    .filter(lambda body: not body.startswith(" ") or not body.strip())
)
"""Bodies as the reader gives them back: no trailing space, no blank line around them, not all
indented (a common indent is the item's, not the body's)."""


def _markdown(items: list[tuple[bool, str, str]]) -> str:
    lines = ["# A spec", "", "What the app is.", ""]
    for done, title, body in items:
        lines.append(f"- [{'x' if done else ' '}] {title}")
        lines += [f"  {line}" if line else "" for line in body.split("\n")] if body else []
    return "\n".join(lines) + "\n"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), TITLES, BODIES), min_size=1, max_size=6).filter(
        lambda i: not all(d for d, _, _ in i)
    )
)
def test_tasks_written_as_markdown_read_back(items: list[tuple[bool, str, str]]) -> None:
    expected = tuple(
        Task(f"task {n}", title, body) for n, (done, title, body) in enumerate(items, 1) if not done
    )
    assert read_tasks(_markdown(items).encode(), "app_spec.txt") == ("tasks", expected)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.builds(
            Task,
            st.integers(1, 10**6).map(lambda n: f"#{n}"),
            TITLES,
            BODIES,
            st.lists(_WORD, max_size=3).map(tuple),
        ),
        min_size=1,
        max_size=6,
        unique_by=lambda t: t.ref,
    )
)
def test_tasks_written_as_a_gh_export_read_back(tasks: list[Task]) -> None:
    export = [
        {
            "number": int(t.ref[1:]),
            "title": t.title,
            "body": t.body,
            "labels": [{"id": f"L{n}", "name": label, "color": "ededed"} for n, label in enumerate(t.labels)],
        }
        for t in tasks
    ]
    for name in ("issues.json", "app_spec.txt"):
        assert read_tasks(json.dumps(export, indent=2).encode(), name) == ("issues", tuple(tasks))
