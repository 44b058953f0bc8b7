"""The demo app's web front (standard library only) and its web features, used in a browser.

`todo/web.py` (the INITIALIZER's, scenario `web`) serves the task list at `/`, its tasks in
TODO_FILE, which `app.json` puts in the box's writable temp (the app's tree is read-only there).
Each web feature is one module `todo/web_<name>.py` that adds its part to the page (a form above the
list, a button beside each open task, the POST it answers) and one test file, so the branches merge
cleanly. Their acceptance steps are browser steps in the documented form (`browser_step`).
"""

from __future__ import annotations

from scripted_model.demo_app import DemoFeature, feature, unit_test

WEB_PY = '''"""The web front: `python3 -m todo.web` serves the task list at / on 127.0.0.1:$PORT, the tasks
in TODO_FILE (JSON). Each module todo/web_<name>.py adds its part: FORM (HTML above the list),
button(task) (HTML beside an open task), ACTION and post(tasks, fields) (a POST to ACTION changes
the tasks, then the browser goes back to /)."""

import html
import http.server
import importlib
import json
import os
import pkgutil
import urllib.parse

import todo


def path() -> str:
    return os.environ.get("TODO_FILE", "tasks.json")


def load() -> list:
    try:
        with open(path(), encoding="utf-8") as handle:
            tasks = json.load(handle)
    except (OSError, ValueError):
        return []
    return tasks if isinstance(tasks, list) else []


def save(tasks: list) -> None:
    with open(path(), "w", encoding="utf-8") as handle:
        json.dump(tasks, handle, indent=2)


def parts() -> list:
    names = sorted(m.name for m in pkgutil.iter_modules(todo.__path__) if m.name.startswith("web_"))
    return [importlib.import_module(f"todo.{name}") for name in names]


def item(task: dict, found: list) -> str:
    title = html.escape(str(task.get("title", "")))
    if task.get("done"):
        return f"<li>{title} (done)</li>"
    return f"<li>{title} " + "".join(p.button(task) for p in found if hasattr(p, "button")) + "</li>"


def page() -> str:
    found = parts()
    forms = "".join(getattr(p, "FORM", "") for p in found)
    items = "".join(item(t, found) for t in load())
    head = "<!DOCTYPE html><title>todo</title><link rel=icon href=data:,>"  # no favicon request
    return f"{head}<h1>todo</h1>{forms}<ul id=tasks>{items}</ul>"


class Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if urllib.parse.urlsplit(self.path).path != "/":
            self.send_error(404)
            return
        body = page().encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        size = int(self.headers.get("Content-Length") or 0)
        fields = {k: v[0] for k, v in urllib.parse.parse_qs(self.rfile.read(size).decode()).items()}
        part = next((p for p in parts() if getattr(p, "ACTION", None) == self.path), None)
        if part is None:
            self.send_error(404)
            return
        tasks = load()
        part.post(tasks, fields)
        save(tasks)
        self.send_response(303)
        self.send_header("Location", "/")
        self.send_header("Content-Length", "0")
        self.end_headers()


if __name__ == "__main__":
    http.server.HTTPServer(("127.0.0.1", int(os.environ.get("PORT", "8000"))), Page).serve_forever()
'''

WEB: dict[str, str] = {
    "todo/web.py": WEB_PY,
    "app.json": '{"start": "TODO_FILE=\\"${TMPDIR:-/tmp}/todo-web.json\\" exec python3 -m todo.web", '
    '"ready_path": "/", "ready_timeout_s": 30}\n',
}
"""The web front the INITIALIZER lays down when the scenario has one, and how to start it."""

BROKEN_WEB = '''"""The web front, broken: it exits before it listens."""

raise SystemExit("todo.web: no port to listen on")
'''
"""What a feature in the scenario's `app_broken` writes over todo/web.py on its first IMPLEMENT."""


def browser_step(action: str, shows: str, *, absent: bool = False) -> str:
    """A browser acceptance step in the documented form (prompts/feature_list_format.md): one action, then the
    text the page must (or, `absent`, must not) show."""
    return f"{action} -> the page {'does not show' if absent else 'shows'} `{shows}`"


def open_page(path: str) -> str:
    return f"Open `{path}`"


def type_into(text: str, field: str, button: str | None = None) -> str:
    return f"Type `{text}` into `{field}`" + (f" and click `{button}`" if button else "")


def click(name: str) -> str:
    return f"Click `{name}`"


ADD_FORM = (
    "<form method=post action=/add><label>New task <input name=title required></label> "
    "<button type=submit>Add</button></form>"
)
WEB_ADD = f'''"""The page's form to add a task: a `New task` field and an `Add` button (POST /add)."""

ACTION = "/add"
FORM = {ADD_FORM!r}


def post(tasks: list, fields: dict) -> None:
    title = fields.get("title", "").strip()
    if title:
        task_id = max((int(t.get("id", 0)) for t in tasks), default=0) + 1
        tasks.append({{"id": task_id, "title": title, "done": False, "due": None}})
'''
WEB_DONE = '''"""A `Done` button beside each open task (POST /done with its id)."""

import html

ACTION = "/done"


def button(task: dict) -> str:
    title = html.escape(str(task.get("title", "")), quote=True)
    return (
        "<form method=post action=/done style=display:inline>"
        f"<input type=hidden name=id value={int(task.get('id', 0))}>"
        f'<button type=submit aria-label="Done: {title}">Done</button></form>'
    )


def post(tasks: list, fields: dict) -> None:
    for task in tasks:
        if str(task.get("id")) == fields.get("id", ""):
            task["done"] = True
'''

WEB_FEATURES: tuple[DemoFeature, ...] = (
    DemoFeature(
        "F017",
        "The page at / has a form to add a task: a `New task` field and an `Add` button",
        (
            browser_step(open_page("/"), "New task"),
            browser_step(type_into("milk", "New task", "Add"), "milk"),
            browser_step(open_page("/"), "milk"),
        ),
        {
            "todo/web_add.py": WEB_ADD,
            "tests/test_web_add.py": unit_test(
                "WebAddTest",
                """
    def test_post_adds_a_task_and_ignores_an_empty_title(self) -> None:
        from todo import web_add
        tasks = [{"id": 1, "title": "milk", "done": False, "due": None}]
        web_add.post(tasks, {"title": " eggs "})
        web_add.post(tasks, {"title": " "})
        self.assertEqual([(t["id"], t["title"]) for t in tasks], [(1, "milk"), (2, "eggs")])
        self.assertIn("New task", web_add.FORM)
""",
            ),
        },
        # the seeded UI bug: a button that does nothing (it no longer submits its form); the
        # project's tests still pass, only a browser finds it
        {"todo/web_add.py": WEB_ADD.replace("type=submit>Add", "type=button>Add")},
        category="web",
    ),
    DemoFeature(
        "F018",
        "Each open task on the page has a `Done` button that marks it done",
        (
            browser_step(open_page("/"), "todo"),
            browser_step(type_into("tea", "New task", "Add"), "tea"),
            browser_step(click("Done: tea"), "tea (done)"),
        ),
        {
            "todo/web_done.py": WEB_DONE,
            "tests/test_web_done.py": unit_test(
                "WebDoneTest",
                """
    def test_post_marks_the_task_done(self) -> None:
        from todo import web_done
        tasks = [{"id": 1, "title": "milk", "done": False}, {"id": 2, "title": "tea", "done": False}]
        web_done.post(tasks, {"id": "2"})
        self.assertEqual([t["done"] for t in tasks], [False, True])
        self.assertIn('aria-label="Done: tea"', web_done.button(tasks[1]))
""",
            ),
        },
        # the seeded UI bug: the button posts no id, so it marks nothing done
        {
            "todo/web_done.py": WEB_DONE.replace(
                "f\"<input type=hidden name=id value={int(task.get('id', 0))}>\"\n        ", ""
            )
        },
        category="web",
        depends_on=("F017",),
    ),
)
"""The web features (scenario `web_features`: the first N, after the command features)."""


def any_feature(feature_id: str) -> DemoFeature:
    """The catalogue's feature of that id, web ones included."""
    return next((item for item in WEB_FEATURES if item.id == feature_id), None) or feature(feature_id)
