"""The small but real application the robot agent builds: `todo`, from prompts/app_spec.txt.

Each feature is one module and one test file, so every branch merges cleanly and the
generated project's own tests (`bash init.sh`) really pass or fail.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DemoFeature:
    id: str
    description: str
    steps: tuple[str, ...]
    files: dict[str, str]
    buggy: dict[str, str]
    """A first attempt with a real bug (its tests fail, or for a web feature its page does not do
    what a step says), used when a scenario asks for one."""
    category: str = "functional"
    """What the INITIALIZER writes as its `category` ("web": reviewed in a browser)."""
    depends_on: tuple[str, ...] = ()
    """The `depends_on` the INITIALIZER writes for it (unless the scenario names others)."""


INIT_SH = """#!/usr/bin/env bash
# Runs the whole test suite; exits non-zero when a test fails.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m unittest discover -s tests -q
"""

SKELETON: dict[str, str] = {
    "init.sh": INIT_SH,
    "README.md": "# todo\n\nA command-line task list. Run `python3 -m todo <command>`; "
    "test with `./init.sh`.\n",
    "todo/__init__.py": '"""todo: a command-line task list."""\n',
    "todo/__main__.py": '''"""Entry point: `python3 -m todo <command> [args]` runs todo/cmd_<command>.py."""

import importlib
import sys


def main(argv: list[str]) -> int:
    if not argv:
        print("error: usage: python3 -m todo <command> [args]", file=sys.stderr)
        return 1
    try:
        module = importlib.import_module(f"todo.cmd_{argv[0]}")
    except ModuleNotFoundError:
        print(f"error: unknown command {argv[0]!r}", file=sys.stderr)
        return 1
    try:
        return int(module.run(argv[1:]))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
''',
    "tests/__init__.py": "",
    "tests/test_smoke.py": """import unittest

from tests.helpers import run


class SmokeTest(unittest.TestCase):
    def test_unknown_command_is_an_error(self) -> None:
        self.assertEqual(run("nope")[0], 1)


if __name__ == "__main__":
    unittest.main()
""",
    "tests/helpers.py": """import contextlib
import io
import os
import tempfile

from todo.__main__ import main


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(list(argv))
    return code, out.getvalue()


class TempStore:
    def __enter__(self) -> str:
        self.dir = tempfile.TemporaryDirectory()
        self.old = os.environ.get("TODO_FILE")
        os.environ["TODO_FILE"] = os.path.join(self.dir.name, "tasks.json")
        return os.environ["TODO_FILE"]

    def __exit__(self, *exc: object) -> None:
        if self.old is None:
            os.environ.pop("TODO_FILE", None)
        else:
            os.environ["TODO_FILE"] = self.old
        self.dir.cleanup()
""",
}

STORE = '''"""Load and save tasks in a JSON file (TODO_FILE, default tasks.json)."""

import json
import os


def path() -> str:
    return os.environ.get("TODO_FILE", "tasks.json")


def load() -> list[dict]:
    try:
        with open(path(), encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return []
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path()} is corrupt: {exc.msg}") from None


def save(tasks: list[dict]) -> None:
    with open(path(), "w", encoding="utf-8") as handle:
        json.dump(tasks, handle, indent=2)


def find(tasks: list[dict], task_id: str) -> dict:
    for task in tasks:
        if str(task["id"]) == task_id:
            return task
    raise ValueError(f"no task with id {task_id}")
'''


TASKS_JSON = (
    '[{"id":1,"title":"milk","done":false},{"id":2,"title":"Eggs","done":true},'
    '{"id":3,"title":"tea","done":false}]'
)
"""Three tasks, the second done: the store an acceptance step starts from (`seeded`)."""


def step(command: str, output: str) -> str:
    """An acceptance step in the documented form (prompts/feature_list_format.md): a command run in an
    empty folder that holds the app's code, and the last line it must print."""
    return f"Run `{command}` -> prints `{output}`"


def seeded(command: str, output: str) -> str:
    """A step that first writes TASKS_JSON to the store (tasks.json), then runs `command`."""
    return step(f"echo '{TASKS_JSON}' > tasks.json && {command}", output)


def unit_test(name: str, body: str) -> str:
    return f"""import unittest

from tests.helpers import TempStore, run


class {name}(unittest.TestCase):
{body}

if __name__ == "__main__":
    unittest.main()
"""


FEATURES: tuple[DemoFeature, ...] = (
    DemoFeature(
        "F001",
        "Tasks are stored in a JSON file (TODO_FILE or tasks.json); a corrupt file is an error",
        (
            step(
                "python3 -c \"from todo import store; store.save([{'id': 1, 'title': 'milk'}]); "
                "print(store.load()[0]['title'])\"",
                "milk",
            ),
            step(
                "echo '[' > tasks.json && python3 -c 'from todo import store; store.load()'",
                "ValueError: tasks.json is corrupt: Expecting value",
            ),
        ),
        {
            "todo/store.py": STORE,
            "tests/test_store.py": unit_test(
                "StoreTest",
                """
    def test_round_trip(self) -> None:
        from todo import store
        with TempStore():
            store.save([{"id": 1, "title": "a", "done": False}])
            self.assertEqual(store.load()[0]["title"], "a")

    def test_missing_file_is_empty(self) -> None:
        from todo import store
        with TempStore():
            self.assertEqual(store.load(), [])
""",
            ),
        },
        {},
    ),
    DemoFeature(
        "F002",
        "`add TITLE [--due DATE]` adds a task and prints its id",
        (
            step("python3 -m todo add milk", "1"),
            step("python3 -m todo add eggs --due 2026-01-02", "2"),
            step("python3 -m todo add", "error: a task needs a title"),
        ),
        {
            "todo/cmd_add.py": '''"""add TITLE [--due YYYY-MM-DD]"""

import datetime

from todo import store


def run(args: list[str]) -> int:
    due = None
    if "--due" in args:
        i = args.index("--due")
        due = args[i + 1] if i + 1 < len(args) else ""
        datetime.date.fromisoformat(due)
        args = args[:i] + args[i + 2:]
    title = " ".join(args).strip()
    if not title:
        raise ValueError("a task needs a title")
    tasks = store.load()
    task_id = max((t["id"] for t in tasks), default=0) + 1
    tasks.append({"id": task_id, "title": title, "done": False, "due": due})
    store.save(tasks)
    print(task_id)
    return 0
''',
            "tests/test_add.py": unit_test(
                "AddTest",
                """
    def test_add_prints_increasing_ids(self) -> None:
        with TempStore():
            self.assertEqual(run("add", "milk"), (0, "1\\n"))
            self.assertEqual(run("add", "eggs", "--due", "2026-01-02"), (0, "2\\n"))

    def test_empty_title_is_an_error(self) -> None:
        with TempStore():
            self.assertEqual(run("add")[0], 1)
""",
            ),
        },
        {},
    ),
    DemoFeature(
        "F003",
        "`list [--all]` prints open tasks as `ID [ ] TITLE`; --all includes done ones",
        (
            seeded("python3 -m todo list", "3 [ ] tea"),
            step("python3 -m todo list --all | grep Eggs", "2 [x] Eggs"),
        ),
        {
            "todo/cmd_list.py": '''"""list [--all]"""

from todo import store


def line(task: dict) -> str:
    mark = "x" if task["done"] else " "
    due = f" (due {task['due']})" if task.get("due") else ""
    return f"{task['id']} [{mark}] {task['title']}{due}"


def run(args: list[str]) -> int:
    for task in store.load():
        if "--all" in args or not task["done"]:
            print(line(task))
    return 0
''',
            "tests/test_list.py": unit_test(
                "ListTest",
                """
    def test_lists_open_tasks(self) -> None:
        from todo import store
        with TempStore():
            store.save([{"id": 1, "title": "milk", "done": False, "due": None},
                        {"id": 2, "title": "eggs", "done": False, "due": "2026-01-02"},
                        {"id": 3, "title": "tea", "done": True, "due": None}])
            self.assertEqual(run("list")[1], "1 [ ] milk\\n2 [ ] eggs (due 2026-01-02)\\n")
""",
            ),
        },
        {
            "todo/cmd_list.py": '''"""list [--all]"""

from todo import store


def run(args: list[str]) -> int:
    for task in store.load():
        print(f"{task['id']} {task['title']}")
    return 0
'''
        },
    ),
    DemoFeature(
        "F004",
        "`done ID` marks a task done; an unknown id is an error",
        (
            seeded("python3 -m todo done 3 && grep -c '\"done\": true' tasks.json", "2"),
            step("python3 -m todo done 9", "error: no task with id 9"),
        ),
        {
            "todo/cmd_done.py": '''"""done ID"""

from todo import store


def run(args: list[str]) -> int:
    if len(args) != 1:
        raise ValueError("usage: done ID")
    tasks = store.load()
    store.find(tasks, args[0])["done"] = True
    store.save(tasks)
    return 0
''',
            "tests/test_done.py": unit_test(
                "DoneTest",
                """
    def test_done_marks_task(self) -> None:
        from todo import store
        with TempStore():
            store.save([{"id": 1, "title": "milk", "done": False, "due": None}])
            self.assertEqual(run("done", "1")[0], 0)
            self.assertEqual(run("done", "9")[0], 1)
""",
            ),
        },
        {},
    ),
    DemoFeature(
        "F005",
        "`remove ID` deletes a task; an unknown id is an error",
        (
            seeded("python3 -m todo remove 1 && grep -c '\"id\"' tasks.json", "2"),
            step("python3 -m todo remove 1", "error: no task with id 1"),
        ),
        {
            "todo/cmd_remove.py": '''"""remove ID"""

from todo import store


def run(args: list[str]) -> int:
    if len(args) != 1:
        raise ValueError("usage: remove ID")
    tasks = store.load()
    tasks.remove(store.find(tasks, args[0]))
    store.save(tasks)
    return 0
''',
            "tests/test_remove.py": unit_test(
                "RemoveTest",
                """
    def test_remove_deletes(self) -> None:
        from todo import store
        with TempStore():
            store.save([{"id": 1, "title": "milk", "done": False, "due": None}])
            self.assertEqual(run("remove", "1")[0], 0)
            self.assertEqual(run("remove", "1")[0], 1)
""",
            ),
        },
        {},
    ),
    DemoFeature(
        "F006",
        "`stats` prints `open: N, done: M, overdue: K`",
        (seeded("python3 -m todo stats", "open: 2, done: 1, overdue: 0"),),
        {
            "todo/cmd_stats.py": '''"""stats [--today YYYY-MM-DD]"""

import datetime

from todo import store


def run(args: list[str]) -> int:
    today = args[args.index("--today") + 1] if "--today" in args else datetime.date.today().isoformat()
    tasks = store.load()
    done = sum(1 for t in tasks if t["done"])
    overdue = sum(1 for t in tasks if not t["done"] and t.get("due") and t["due"] < today)
    print(f"open: {len(tasks) - done}, done: {done}, overdue: {overdue}")
    return 0
''',
            "tests/test_stats.py": unit_test(
                "StatsTest",
                """
    def test_stats(self) -> None:
        from todo import store
        with TempStore():
            store.save([{"id": 1, "title": "milk", "done": False, "due": "2000-01-01"},
                        {"id": 2, "title": "eggs", "done": True, "due": None}])
            self.assertEqual(run("stats", "--today", "2026-01-01")[1], "open: 1, done: 1, overdue: 1\\n")
""",
            ),
        },
        {},
    ),
)


def _command(doc: str, body: str) -> str:
    return f'"""{doc}"""\n\nfrom todo import store\n\n\n{body}'


def _feature(
    feature_id: str, name: str, description: str, steps: tuple[str, ...], module: str, test: str
) -> DemoFeature:
    """A command feature: `todo/cmd_<name>.py` and `tests/test_<name>.py`."""
    return DemoFeature(
        feature_id,
        description,
        steps,
        {f"todo/cmd_{name}.py": module, f"tests/test_{name}.py": unit_test(f"{name.capitalize()}Test", test)},
        {},
    )


TASKS = """[{"id": 1, "title": "milk", "done": False, "due": None},
                        {"id": 2, "title": "Eggs", "done": True, "due": "2026-01-02"},
                        {"id": 3, "title": "tea", "done": False, "due": None}]"""
"""Three tasks (the second one done) that the later features' tests start from."""

MORE_FEATURES: tuple[DemoFeature, ...] = (
    _feature(
        "F007",
        "count",
        "`count [--all]` prints how many open tasks there are; --all counts done ones too",
        (seeded("python3 -m todo count", "2"), step("python3 -m todo count --all", "3")),
        _command(
            "count [--all]",
            """def run(args: list[str]) -> int:
    tasks = store.load()
    print(sum(1 for t in tasks if "--all" in args or not t["done"]))
    return 0
""",
        ),
        f"""
    def test_counts_open_and_all(self) -> None:
        from todo import store
        with TempStore():
            self.assertEqual(run("count"), (0, "0\\n"))
            store.save({TASKS})
            self.assertEqual(run("count"), (0, "2\\n"))
            self.assertEqual(run("count", "--all"), (0, "3\\n"))
""",
    ),
    _feature(
        "F008",
        "clear",
        "`clear` deletes every done task and prints how many it deleted",
        (seeded("python3 -m todo clear", "1"), step("python3 -m todo clear", "0")),
        _command(
            "clear",
            """def run(args: list[str]) -> int:
    if args:
        raise ValueError("usage: clear")
    tasks = store.load()
    kept = [t for t in tasks if not t["done"]]
    store.save(kept)
    print(len(tasks) - len(kept))
    return 0
""",
        ),
        f"""
    def test_clear_deletes_done_tasks(self) -> None:
        from todo import store
        with TempStore():
            store.save({TASKS})
            self.assertEqual(run("clear"), (0, "1\\n"))
            self.assertEqual([t["id"] for t in store.load()], [1, 3])
            self.assertEqual(run("clear"), (0, "0\\n"))
            self.assertEqual(run("clear", "x")[0], 1)
""",
    ),
    _feature(
        "F009",
        "rename",
        "`rename ID TITLE` changes a task's title; an unknown id or an empty title is an error",
        (
            seeded("python3 -m todo rename 1 oat milk && grep -c 'oat milk' tasks.json", "1"),
            step("python3 -m todo rename 9 x", "error: no task with id 9"),
        ),
        _command(
            "rename ID TITLE",
            """def run(args: list[str]) -> int:
    if len(args) < 2 or not " ".join(args[1:]).strip():
        raise ValueError("usage: rename ID TITLE")
    tasks = store.load()
    store.find(tasks, args[0])["title"] = " ".join(args[1:]).strip()
    store.save(tasks)
    return 0
""",
        ),
        f"""
    def test_rename(self) -> None:
        from todo import store
        with TempStore():
            store.save({TASKS})
            self.assertEqual(run("rename", "1", "oat", "milk")[0], 0)
            self.assertEqual(store.load()[0]["title"], "oat milk")
            self.assertEqual(run("rename", "9", "x")[0], 1)
            self.assertEqual(run("rename", "1", " ")[0], 1)
""",
    ),
    _feature(
        "F010",
        "undo",
        "`undo ID` marks a done task open again; an unknown id is an error",
        (seeded("python3 -m todo undo 2 && grep -c '\"done\": false' tasks.json", "3"),),
        _command(
            "undo ID",
            """def run(args: list[str]) -> int:
    if len(args) != 1:
        raise ValueError("usage: undo ID")
    tasks = store.load()
    store.find(tasks, args[0])["done"] = False
    store.save(tasks)
    return 0
""",
        ),
        f"""
    def test_undo_reopens(self) -> None:
        from todo import store
        with TempStore():
            store.save({TASKS})
            self.assertEqual(run("undo", "2")[0], 0)
            self.assertFalse(store.load()[1]["done"])
            self.assertEqual(run("undo", "9")[0], 1)
""",
    ),
    _feature(
        "F011",
        "search",
        "`search TEXT` prints the tasks whose title contains TEXT (any case) as `ID TITLE`",
        (seeded("python3 -m todo search EGG", "2 Eggs"),),
        _command(
            "search TEXT",
            """def run(args: list[str]) -> int:
    text = " ".join(args).strip().lower()
    if not text:
        raise ValueError("usage: search TEXT")
    for task in store.load():
        if text in task["title"].lower():
            print(f"{task['id']} {task['title']}")
    return 0
""",
        ),
        f"""
    def test_search_ignores_case(self) -> None:
        from todo import store
        with TempStore():
            store.save({TASKS})
            self.assertEqual(run("search", "EGG"), (0, "2 Eggs\\n"))
            self.assertEqual(run("search", "zzz"), (0, ""))
            self.assertEqual(run("search")[0], 1)
""",
    ),
    _feature(
        "F012",
        "first",
        "`first` prints the oldest open task as `ID TITLE`; no open task is an error",
        (seeded("python3 -m todo first", "1 milk"),),
        _command(
            "first",
            """def run(args: list[str]) -> int:
    open_tasks = [t for t in store.load() if not t["done"]]
    if not open_tasks:
        raise ValueError("no open tasks")
    task = min(open_tasks, key=lambda t: t["id"])
    print(f"{task['id']} {task['title']}")
    return 0
""",
        ),
        f"""
    def test_first_open_task(self) -> None:
        from todo import store
        with TempStore():
            self.assertEqual(run("first")[0], 1)
            store.save({TASKS})
            self.assertEqual(run("first"), (0, "1 milk\\n"))
""",
    ),
    _feature(
        "F013",
        "last",
        "`last` prints the newest task as `ID TITLE`; an empty list is an error",
        (seeded("python3 -m todo last", "3 tea"),),
        _command(
            "last",
            """def run(args: list[str]) -> int:
    tasks = store.load()
    if not tasks:
        raise ValueError("no tasks")
    task = max(tasks, key=lambda t: t["id"])
    print(f"{task['id']} {task['title']}")
    return 0
""",
        ),
        f"""
    def test_last_task(self) -> None:
        from todo import store
        with TempStore():
            self.assertEqual(run("last")[0], 1)
            store.save({TASKS})
            self.assertEqual(run("last"), (0, "3 tea\\n"))
""",
    ),
    _feature(
        "F014",
        "priority",
        "`priority ID N` sets a task's priority (1 to 5); anything else is an error",
        (
            seeded("python3 -m todo priority 3 5 && grep -c '\"priority\": 5' tasks.json", "1"),
            step("python3 -m todo priority 3 9", "error: usage: priority ID N (N from 1 to 5)"),
        ),
        _command(
            "priority ID N",
            """def run(args: list[str]) -> int:
    if len(args) != 2 or args[1] not in ("1", "2", "3", "4", "5"):
        raise ValueError("usage: priority ID N (N from 1 to 5)")
    tasks = store.load()
    store.find(tasks, args[0])["priority"] = int(args[1])
    store.save(tasks)
    return 0
""",
        ),
        f"""
    def test_priority(self) -> None:
        from todo import store
        with TempStore():
            store.save({TASKS})
            self.assertEqual(run("priority", "3", "5")[0], 0)
            self.assertEqual(store.load()[2]["priority"], 5)
            self.assertEqual(run("priority", "3", "9")[0], 1)
            self.assertEqual(run("priority", "7", "1")[0], 1)
""",
    ),
    _feature(
        "F015",
        "tag",
        "`tag ID TAG` adds a tag to a task once; a tag with spaces is an error",
        (
            seeded("python3 -m todo tag 1 shop && grep -c shop tasks.json", "1"),
            step("python3 -m todo tag 1 shop && grep -c shop tasks.json", "1"),
        ),
        _command(
            "tag ID TAG",
            """def run(args: list[str]) -> int:
    if len(args) != 2 or not args[1] or " " in args[1]:
        raise ValueError("usage: tag ID TAG (one word)")
    tasks = store.load()
    tags = store.find(tasks, args[0]).setdefault("tags", [])
    if args[1] not in tags:
        tags.append(args[1])
    store.save(tasks)
    return 0
""",
        ),
        f"""
    def test_tag_once(self) -> None:
        from todo import store
        with TempStore():
            store.save({TASKS})
            self.assertEqual(run("tag", "1", "shop")[0], 0)
            self.assertEqual(run("tag", "1", "shop")[0], 0)
            self.assertEqual(store.load()[0]["tags"], ["shop"])
            self.assertEqual(run("tag", "1", "two words")[0], 1)
""",
    ),
    _feature(
        "F016",
        "export",
        "`export` prints every task as CSV: `id,title,done,due`",
        (
            seeded("python3 -m todo export | tail -1", "3,tea,no,"),
            step("python3 -m todo export | grep done", "id,title,done,due"),
        ),
        '''"""export"""

import csv
import sys

from todo import store


def run(args: list[str]) -> int:
    writer = csv.writer(sys.stdout, lineterminator="\\n")
    writer.writerow(["id", "title", "done", "due"])
    for task in store.load():
        writer.writerow([task["id"], task["title"], "yes" if task["done"] else "no", task.get("due") or ""])
    return 0
''',
        """
    def test_export_csv(self) -> None:
        from todo import store
        with TempStore():
            store.save([{"id": 1, "title": "milk, oat", "done": True, "due": "2026-01-02"}])
            self.assertEqual(run("export"), (0, 'id,title,done,due\\n1,"milk, oat",yes,2026-01-02\\n'))
""",
    ),
)
FEATURES = FEATURES + MORE_FEATURES
"""The catalogue: 16 features (a scenario's `features` takes the first N)."""

USAGE = "error: usage: python3 -m todo <command> [args]"
"""The skeleton's usage message (todo/__main__.py)."""
REWORDED_USAGE = "error: usage: python3 -m todo COMMAND [ARGUMENTS...]"
"""The usage message as the first feature of a red pair rewords it."""
REWORDED_MAIN = SKELETON["todo/__main__.py"].replace(USAGE, REWORDED_USAGE)

PIN_TEST = f'''
    def test_usage_message_is_the_documented_one(self) -> None:
        import contextlib
        import io

        from todo.__main__ import main
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertEqual(main([]), 1)
        self.assertEqual(err.getvalue(), "{USAGE}\\n")
'''
"""The test the second feature of a red pair adds: it pins the usage message the first rewords."""


def test_file(item: DemoFeature) -> str:
    """The path of the feature's test file."""
    return next(path for path in item.files if path.startswith("tests/"))


def pinned(item: DemoFeature) -> str:
    """The feature's test file with PIN_TEST added to its test class."""
    text = item.files[test_file(item)]
    at = text.index("\n\nif __name__")
    return text[:at] + PIN_TEST + text[at:]


def readme_line(item: DemoFeature) -> str:
    """The line a conflict group's feature adds at the end of README.md (its command list)."""
    return f"- {item.id}: {item.description}"


def resolve_union(text: str) -> str:
    """A file with git's conflict markers, resolved by keeping both sides' lines (ours, then
    theirs, each line once; a diff3 base section is dropped)."""
    out: list[str] = []
    region: list[str] | None = None
    in_base = False
    for line in text.splitlines(keepends=True):
        bare = line.rstrip("\n")
        if bare.startswith("<<<<<<< "):
            region, in_base = [], False
        elif region is not None and bare.startswith("||||||| "):
            in_base = True
        elif region is not None and bare == "=======":
            in_base = False
        elif region is not None and bare.startswith(">>>>>>> "):
            out.extend(dict.fromkeys(region))
            region = None
        elif region is not None:
            if not in_base:
                region.append(line if line.endswith("\n") else line + "\n")
        else:
            out.append(line)
    return "".join(out)


ARCH_FIX = {
    "docs/architecture.md": "# Architecture\n\n`todo/__main__.py` dispatches to one "
    "`todo/cmd_<name>.py` module per command; `todo/store.py` owns the JSON file.\n"
}


def feature(feature_id: str) -> DemoFeature:
    """The demo feature of that id; any other id (a project built at size) gets a small note."""
    for item in FEATURES:
        if item.id == feature_id:
            return item
    note = f"# {feature_id}\n\nDone by the scripted agent.\n"
    return DemoFeature(
        feature_id,
        f"feature {feature_id}",
        (step(f"cat notes/{feature_id}.md", "Done by the scripted agent."),),
        {f"notes/{feature_id}.md": note},
        {},
    )
