"""The scripted REVIEW of a web feature: the browser steps' grammar and the snapshot's reading as
data; the robot's script driven with canned answers (no browser given; the red-team faults); then
against the real demo web front in its app box and the real browser in its box: a feature that
works passes with distinct evidence per step, a button that does nothing is sent back."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from helpers import require_boxed_browser
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from scripted_model import browsing, demo_app, demo_web, protocol, robot
from scripted_model.browsing import WebStep, find_ref, parse_step, shown
from scripted_model.protocol import ToolCall
from scripted_model.scenario import Scenario
from session_scheduler.core import evidence
from session_scheduler.core.app import AppSpec
from session_scheduler.guard import mcp_client
from session_scheduler.guard.app_box import start_app
from session_scheduler.guard.browser_box import RunningBrowser, start_browser

# --- the grammar and the snapshot, as data --------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("Open `/` -> the page shows `todo`", WebStep("todo", path="/")),
        (
            "Type `milk` into `New task` and click `Add` -> the page shows `milk`",
            WebStep("milk", text="milk", field="New task", click="Add"),
        ),
        ("Type `x` into `Search` -> the page shows `1 found`", WebStep("1 found", text="x", field="Search")),
        (
            "Click `Done: tea` -> the page does not show `Done: tea`",
            WebStep("Done: tea", absent=True, click="Done: tea"),
        ),
    ],
)
def test_a_browser_step_is_parsed(text: str, parsed: WebStep) -> None:
    assert parse_step(text) == parsed


@pytest.mark.parametrize(
    "text",
    [
        "Run `python3 -m todo add milk` -> prints `1`",
        "Open /tasks, add `milk` -> the list shows `milk`",
        "Open `tasks` -> the page shows `x`",  # a path starts with /
        "Click `Add` -> the page shows ``",
        "Click `Add` and wait -> the page shows `x`",
    ],
)
def test_anything_else_is_not_a_browser_step(text: str) -> None:
    assert parse_step(text) is None


SNAPSHOT = """### Page
- Page URL: http://127.0.0.1:8000/
- Page Title: todo
### Snapshot
```yaml
- generic [active] [ref=f1e1]:
  - heading "todo" [level=1] [ref=f1e2]
  - generic [ref=f1e3]:
    - generic [ref=f1e4]:
      - text: New task
      - textbox "New task" [ref=f1e5]: typed but not added
    - button "Add" [ref=f1e6]
  - list [ref=f1e7]:
    - listitem [ref=f1e8]:
      - text: tea
      - 'button "Done: tea" [ref=f1e10]': Done
    - listitem [ref=f1e11]: milk (done)
```
Evidence: snapshot saved as snapshot-7.yml"""
"""A browser_snapshot's result as @playwright/mcp 0.0.83 gives it (a name with ': ' is quoted)."""


def test_refs_are_found_by_accessible_name_and_role() -> None:
    assert find_ref(SNAPSHOT, "New task", browsing.INPUT_ROLES) == "f1e5"
    assert find_ref(SNAPSHOT, "Add", browsing.CLICKABLE) == "f1e6"
    assert find_ref(SNAPSHOT, "Done: tea", browsing.CLICKABLE) == "f1e10"
    assert find_ref(SNAPSHOT, "New task", browsing.CLICKABLE) is None
    assert find_ref(SNAPSHOT, "Remove") is None


def test_what_the_page_shows_leaves_out_what_was_typed_and_the_page_header() -> None:
    seen = shown(SNAPSHOT)
    assert "milk (done)" in seen and "tea" in seen and "Done: tea" in seen and "New task" in seen
    assert "typed but not added" not in seen and "127.0.0.1" not in seen
    assert shown("### Error\nno page") == ""


def test_a_step_is_judged_by_its_snapshot_and_cites_its_files() -> None:
    step = parse_step("Click `Done: milk` -> the page shows `milk (done)`")
    assert step is not None
    shot = "### Result\n- [Screenshot]\nEvidence: screenshot saved as screenshot-8.png"
    assert browsing.grade(2, step, None, SNAPSHOT, shot) == {
        "step": 2,
        "passed": True,
        "evidence": "clicked `Done: milk`; the page shows `milk (done)`",
        "snapshot": "snapshot-7.yml",
        "screenshot": "screenshot-8.png",
    }
    typed = parse_step("Type `typed but not added` into `New task` and click `Add` -> the page shows `typed`")
    assert typed is not None
    graded = browsing.grade(3, typed, None, SNAPSHOT, shot)
    assert not graded["passed"] and "the page does not show `typed`" in graded["evidence"]
    stopped = browsing.grade(4, step, "the page has nothing to click named `Done: milk`", SNAPSHOT, shot)
    assert not stopped["passed"] and stopped["evidence"].startswith("clicked `Done: milk` failed: the page")
    gone = parse_step("Open `/` -> the page does not show `milk`")
    assert gone is not None  # an app that does not answer shows nothing: still no pass
    down = browsing.grade(5, gone, None, "### Error\nError: net::ERR_EMPTY_RESPONSE", shot)
    assert not down["passed"] and "ERR_EMPTY_RESPONSE" in down["evidence"]


def test_the_robot_relies_on_the_scheduler_s_names() -> None:
    assert protocol.BROWSER_TOOLS == evidence.TOOL_PREFIX and protocol.WEB_CATEGORY == evidence.WEB_CATEGORY
    for tool in evidence.KINDS:
        name = evidence.evidence_name(tool, 12)
        assert name is not None
        found = protocol.EVIDENCE_NOTE.search(f"...\n{evidence.note(name)}")
        assert found is not None and found["name"] == name and evidence.NOTE.pattern == found.re.pattern


def test_the_web_features_are_web_in_the_documented_form_with_a_seeded_ui_bug() -> None:
    for item in demo_web.WEB_FEATURES:
        assert item.category == "web" and 1 <= len(item.steps) <= 6
        assert all(parse_step(step) for step in item.steps), item.id
        assert item.buggy and all(item.buggy[path] != item.files[path] for path in item.buggy)
        assert demo_web.any_feature(item.id) is item
    assert demo_web.any_feature("F002") is demo_app.FEATURES[1]
    assert Scenario.from_json({"features": 1, "web_features": 2}).web


# --- the robot's script, driven with canned answers -----------------------------------------------

Answer = Callable[[ToolCall], str]


def drive(script: robot.Script, answer: Answer) -> tuple[list[ToolCall], str]:
    """Run a role's script to its end; every call it made, and its last words."""
    made: list[ToolCall] = []
    try:
        batch = next(script)
        while True:
            made += batch
            batch = script.send([answer(call) for call in batch])
    except StopIteration as stop:
        return made, str(stop.value)


def canned(feature: demo_app.DemoFeature, facts: dict[str, Any], browser: Answer | None = None) -> Answer:
    """The answers of everything but the browser (handed to `browser`)."""
    entry = {"id": feature.id, "category": feature.category, "steps": list(feature.steps), "passes": False}

    def answer(call: ToolCall) -> str:
        if call.name.startswith(protocol.BROWSER_TOOLS):
            assert browser is not None, call
            return browser(call)
        if call.name == protocol.HANDOFF_TOOLS + "brief":
            return f"Your brief.\n```json\n{json.dumps(facts)}\n```"
        if call.name == protocol.HANDOFF_TOOLS + "show_feature":
            return json.dumps(entry)
        if call.name == protocol.HANDOFF_TOOLS + "record_review":
            return '{"review_id": 4}'
        command = str(call.input.get("command", ""))
        return "/work/project" if command == "pwd" else "0123abcd" * 5 if "rev-parse" in command else "OK"

    return answer


def recorded(made: list[ToolCall]) -> dict[str, Any]:
    (review,) = [c.input for c in made if c.name == protocol.HANDOFF_TOOLS + "record_review"]
    return review


F017, F018 = demo_web.WEB_FEATURES
FACTS = {"feature": "F017", "branch": "feature/F017"}


def test_without_a_browser_no_web_step_passes() -> None:
    made, said = drive(robot.review(robot.Ctx(3, Scenario())), canned(F017, FACTS))
    review = recorded(made)
    assert review["verdict"] == "REQUEST_CHANGES" and said.startswith("REQUEST_CHANGES")
    assert [r["passed"] for r in review["acceptance"]] == [False] * len(F017.steps)
    assert all("given none" in r["evidence"] for r in review["acceptance"])
    assert not any(c.name.startswith(protocol.BROWSER_TOOLS) for c in made)


def test_the_red_team_faults_are_browser_calls_the_robot_goes_on_after() -> None:
    scenario = Scenario.from_json(
        {
            "features": 1,
            "faults": [{"session": 3, "kind": "leave_origin"}, {"session": 3, "kind": "screenshot_filename"}],
        }
    )
    page = '### Snapshot\n```yaml\n- heading "todo" [ref=e1]\n```'
    made, said = drive(
        robot.review(robot.Ctx(3, scenario)),
        canned(F017, {**FACTS, "browser": "http://127.0.0.1:8000"}, lambda call: "### Error\nrefused"
               if "example" in str(call.input) or "filename" in call.input else page),
    )  # fmt: skip
    browser_calls = [(c.name.removeprefix(protocol.BROWSER_TOOLS), c.input) for c in made]
    assert ("browser_navigate", {"url": "http://example.com/"}) in browser_calls
    assert ("browser_take_screenshot", {"type": "png", "filename": "../../escape.png"}) in browser_calls
    assert made[-1].name == protocol.HANDOFF_TOOLS + "append_session" and said


def test_the_initializer_writes_the_web_features_as_web_after_the_others() -> None:
    scenario = Scenario.from_json({"features": 2, "web_features": 2})
    made, _ = drive(robot.initializer(robot.Ctx(1, scenario)), canned(F017, {}))
    (written,) = [
        c.input["content"] for c in made if str(c.input.get("file_path", "")).endswith("feature_list.json")
    ]
    features = json.loads(written)["features"]
    assert [(f["id"], f["category"], f.get("depends_on")) for f in features] == [
        ("F001", "functional", None),
        ("F002", "functional", None),
        ("F017", "web", None),
        ("F018", "web", ["F017"]),
    ]
    assert any(str(c.input.get("file_path", "")).endswith("todo/web.py") for c in made)


# --- the real web front and the real browser, each in its box ------------------------------------


def lay_out(tree: Path, files: dict[str, str]) -> None:
    shutil.rmtree(tree, ignore_errors=True)
    for rel, text in {**demo_app.SKELETON, **demo_web.WEB, **files}.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)


@contextlib.contextmanager
def boxed(root: Path, files: dict[str, str]) -> Iterator[RunningBrowser]:
    """The demo web front with `files` in its app box (an empty store), and a browser in its box
    that reaches it (each its own: the browser's box holds on to the app's socket as it found it)."""
    require_boxed_browser()
    lay_out(root / "tree", files)
    spec = AppSpec.from_json(json.loads(demo_web.WEB["app.json"]))
    with start_app(spec, root / "tree", root / "tmp", root / "app.log", allowed_domains=()) as app:
        assert app.socket_path is not None
        with start_browser(
            app.socket_path, root / "evidence", root / "btmp", root / "browser.log"
        ) as browser:
            yield browser


def review_in_browser(
    browser: RunningBrowser, feature: demo_app.DemoFeature
) -> tuple[list[ToolCall], list[evidence.Call]]:
    """The robot's REVIEW of `feature`, its browser calls run on the boxed browser in one MCP
    session (one page, as the CLI keeps it), each kept evidence noted as the scheduler notes it."""
    facts = {"feature": feature.id, "branch": f"feature/{feature.id}", "browser": browser.app_origin}
    ledger: list[evidence.Call] = []

    async def run() -> list[ToolCall]:
        async with (
            httpx2.AsyncClient(trust_env=False, timeout=httpx2.Timeout(60)) as http,
            streamable_http_client(browser.url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            script = robot.review(robot.Ctx(5, Scenario()))
            made: list[ToolCall] = []
            batch = next(script)
            try:
                while True:
                    made += batch
                    answers = []
                    for call in batch:
                        if not call.name.startswith(protocol.BROWSER_TOOLS):
                            answers.append(canned(feature, facts)(call))
                            continue
                        tool = call.name.removeprefix(protocol.BROWSER_TOOLS)
                        result = await session.call_tool(tool, call.input)
                        assert isinstance(result, mcp_client.CallToolResult)
                        name = None if result.is_error else evidence.evidence_name(tool, len(ledger) + 1)
                        ledger.append(
                            evidence.Call(len(ledger) + 1, tool, call.input, result.is_error, None, name)
                        )
                        answers.append(mcp_client.text(result) + (f"\n{evidence.note(name)}" if name else ""))
                    batch = script.send(answers)
            except StopIteration:
                return made

    return mcp_client.run(run), ledger


def test_a_web_feature_that_works_passes_in_the_browser_citing_distinct_evidence(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with boxed(tmp_path_factory.mktemp("web"), {**F017.files, **F018.files}) as browser:
        for feature in (F017, F018):
            made, ledger = review_in_browser(browser, feature)
            review = recorded(made)
            assert review["verdict"] == "PASS", review
            assert all(r["passed"] for r in review["acceptance"]), review["acceptance"]
            present = frozenset(c.file for c in ledger if c.file)
            assert (
                evidence.browser_problems(feature.steps, "PASS", review["acceptance"], ledger, present) == []
            )
            assert not review["issues"]["minor"]  # no console errors


def test_a_button_that_does_nothing_is_found_in_the_browser_and_sent_back(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with boxed(tmp_path_factory.mktemp("web"), F017.buggy) as browser:
        made, _ = review_in_browser(browser, F017)
    review = recorded(made)
    assert review["verdict"] == "REQUEST_CHANGES"
    assert [r["passed"] for r in review["acceptance"]] == [True, False, False]
    (issue, *_) = review["issues"]["major"]
    assert issue.startswith(
        "acceptance step 2 fails: typed `milk` into `New task` and clicked `Add`; the page does not show `milk`"
    ), issue
    assert review["acceptance"][1]["snapshot"] != review["acceptance"][0]["snapshot"]
