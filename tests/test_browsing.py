"""A web REVIEW's browser: the policy on its calls, the ledger the scheduler keeps of them, the
hooks and MCP server a session is given, what happens when the browser does not start, and (with
srt and Chromium) the app of the branch under review really started, browsed and stopped."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers import listening, request_for, sh, state_for

from session_scheduler.core import evidence
from session_scheduler.core.config import AgentConfig, SessionType
from session_scheduler.core.evidence import Call, browser_problems
from session_scheduler.core.standing import Standing
from session_scheduler.guard import mcp_client
from session_scheduler.guard.browser_box import APP_ORIGIN
from session_scheduler.repo import gitops
from session_scheduler.run import browsing
from session_scheduler.run.agent import SessionRequest, SessionResult, build_options, run_session
from session_scheduler.run.browsing import BrowserAccess, Ledger, NoBrowser, read_ledger, refusal
from session_scheduler.run.classify import cut_short, judged
from session_scheduler.run.gating import Gatekeeper
from session_scheduler.store.records import Records
from session_scheduler.testing.inprocess import Browser

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def image(data: bytes = PNG) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(data).decode()}}  # fmt: skip


# --- the policy ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/",
        "http://127.0.0.1:8000/tasks?x=1#top",
        "http://127.0.0.1:8000",
    ],
)
def test_navigation_on_the_app_is_allowed(url: str) -> None:
    assert refusal("mcp__browser__browser_navigate", {"url": url}, APP_ORIGIN) is None


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com/",
        "http://127.0.0.1:8001/",
        "https://127.0.0.1:8000/",
        "http://127.0.0.1:8000@example.com/",
        "http://127.0.0.1:8000.example.com/",
        "file:///etc/passwd",
        "javascript:fetch('http://example.com')",
        "/relative",
        "http://[::1]:8000/",
        "http://127.0.0.1:99999/",
        "",
    ],
)
def test_navigation_off_the_app_is_refused(url: str) -> None:
    reason = refusal("mcp__browser__browser_navigate", {"url": url}, APP_ORIGIN)
    assert reason is not None and "the browser stays on the app, http://127.0.0.1:8000" in reason


@pytest.mark.parametrize("tool", ["browser_take_screenshot", "browser_snapshot", "browser_console_messages"])
def test_a_file_named_by_the_agent_is_refused(tool: str) -> None:
    reason = refusal(f"mcp__browser__{tool}", {"filename": "../../escape.png"}, APP_ORIGIN)
    assert reason == "leave out `filename`: the scheduler keeps the evidence and tells you its name"


@pytest.mark.parametrize("tool", ["browser_evaluate", "browser_run_code_unsafe", "browser_file_upload", "x"])
def test_a_tool_outside_the_list_is_refused(tool: str) -> None:
    reason = refusal(f"mcp__browser__{tool}", {}, APP_ORIGIN)
    assert reason is not None and reason.startswith(f"{tool} is not one of the browser tools REVIEW may use")


def test_the_listed_tools_pass_the_policy() -> None:
    assert refusal("mcp__browser__browser_click", {"target": "e5", "element": "Add"}, APP_ORIGIN) is None


# --- the ledger ---------------------------------------------------------------------------------


def test_each_call_is_a_ledger_line_and_its_evidence_a_file_the_scheduler_names(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    page = '### Page\n- Page URL: http://127.0.0.1:8000/\n### Snapshot\n```yaml\n- heading "todo"\n```'
    navigated = ledger.after_call("mcp__browser__browser_navigate", {"url": APP_ORIGIN}, [{"type": "text", "text": page}], False)  # fmt: skip
    snapped = ledger.after_call("mcp__browser__browser_snapshot", {}, [{"type": "text", "text": page}], False)
    (tmp_path / "evidence" / "page-1.png").write_bytes(b"server's copy")
    shot_text = {"type": "text", "text": "- [Screenshot of viewport](ev/page-1.png)"}
    shot = ledger.after_call(
        "mcp__browser__browser_take_screenshot", {"type": "png"}, [shot_text, image()], False
    )
    console = ledger.after_call("mcp__browser__browser_console_messages", {}, [{"type": "text", "text": "[ERROR] boom"}], False)  # fmt: skip
    assert navigated == [{"type": "text", "text": page}]  # a navigation leaves no evidence of its own
    assert snapped[-1] == {"type": "text", "text": "Evidence: snapshot saved as snapshot-2.yml"}
    assert (
        shot[:-1] == [shot_text, image()]
        and shot[-1]["text"] == "Evidence: screenshot saved as screenshot-3.png"
    )
    assert console[-1]["text"] == "Evidence: console saved as console-4.txt"
    folder = tmp_path / "evidence"
    assert (folder / "snapshot-2.yml").read_text() == page and (
        folder / "screenshot-3.png"
    ).read_bytes() == PNG
    assert (folder / "console-4.txt").read_text() == "[ERROR] boom"
    assert not (folder / "page-1.png").exists(), "the server's copy is replaced by the kept one"
    assert read_ledger(tmp_path) == [
        Call(1, "browser_navigate", {"url": APP_ORIGIN}, False, "http://127.0.0.1:8000/", None),
        Call(2, "browser_snapshot", {}, False, "http://127.0.0.1:8000/", "snapshot-2.yml"),
        Call(3, "browser_take_screenshot", {"type": "png"}, False, None, "screenshot-3.png"),
        Call(4, "browser_console_messages", {}, False, None, "console-4.txt"),
    ]
    assert browsing.present(tmp_path) == {"snapshot-2.yml", "screenshot-3.png", "console-4.txt"}


def test_numbering_goes_on_after_a_new_ledger_and_a_bad_line_is_skipped(tmp_path: Path) -> None:
    Ledger(tmp_path).after_call("mcp__browser__browser_snapshot", {}, [{"type": "text", "text": "a"}], False)
    with (tmp_path / evidence.LEDGER).open("a") as handle:
        handle.write("not json\n")
    shown = Ledger(tmp_path).after_call(
        "mcp__browser__browser_snapshot", {}, [{"type": "text", "text": "b"}], False
    )
    assert shown[-1]["text"] == "Evidence: snapshot saved as snapshot-2.yml"
    assert [c.file for c in read_ledger(tmp_path)] == ["snapshot-1.yml", "snapshot-2.yml"]


def test_a_screenshot_without_an_image_or_a_failed_call_keeps_nothing(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    bad = {"type": "image", "source": {"type": "base64", "data": "not base64!"}}
    assert ledger.after_call("mcp__browser__browser_take_screenshot", {}, [bad], False) == [bad]
    assert ledger.after_call("mcp__browser__browser_snapshot", {}, [{"type": "text", "text": "x"}], True)[-1]["text"] == "x"  # fmt: skip
    assert [c.file for c in read_ledger(tmp_path)] == [None, None] and browsing.present(
        tmp_path
    ) == frozenset()


def test_the_server_copy_named_outside_the_folder_is_never_removed(tmp_path: Path) -> None:
    outside = tmp_path / "keep.png"
    outside.write_bytes(b"mine")
    (tmp_path / "s" / "evidence").mkdir(parents=True)
    (tmp_path / "s" / "evidence" / "keep.png").symlink_to(outside)
    text = {"type": "text", "text": "- [Screenshot](../../keep.png)"}
    Ledger(tmp_path / "s").after_call("mcp__browser__browser_take_screenshot", {}, [text, image()], False)
    assert outside.read_bytes() == b"mine" and (tmp_path / "s" / "evidence" / "keep.png").is_symlink()


# --- what a web PASS must cite (pure) -----------------------------------------------------------

STEPS = ("Open `/` -> shows `todo`",)
MADE = [
    Call(1, "browser_snapshot", {}, False, None, "snapshot-1.yml"),
    Call(2, "browser_take_screenshot", {}, False, None, "screenshot-2.png"),
    Call(3, "browser_console_messages", {}, False, None, "console-3.txt"),
]
PRESENT = frozenset({"snapshot-1.yml", "screenshot-2.png", "console-3.txt"})
CITED = [
    {
        "step": 1,
        "passed": True,
        "evidence": "ok",
        "snapshot": "snapshot-1.yml",
        "screenshot": "screenshot-2.png",
    }
]


def test_a_pass_citing_what_its_browser_made_holds() -> None:
    assert browser_problems(STEPS, "PASS", CITED, MADE, PRESENT) == []


def test_a_failed_call_s_file_is_not_evidence() -> None:
    failed = [MADE[0], Call(2, "browser_take_screenshot", {}, True, None, "screenshot-2.png"), MADE[2]]
    assert browser_problems(STEPS, "PASS", CITED, failed, PRESENT) == [
        "step 1 cites screenshot 'screenshot-2.png', which this session's browser did not make"
    ]


def test_each_missing_piece_of_evidence_is_named() -> None:
    assert browser_problems(STEPS, "PASS", CITED, [], PRESENT) == [
        "a PASS on a web feature needs this session's browser evidence, and the browser was not used: open "
        "the app, and for each step take a browser_snapshot and a browser_take_screenshot and cite them "
        "(acceptance=[{step, passed, evidence, snapshot, screenshot}])"
    ]
    assert browser_problems(STEPS, "PASS", CITED, MADE[:2], PRESENT) == [
        "a PASS on a web feature reads the console's messages (browser_console_messages)"
    ]
    two = [*CITED, {**CITED[0], "step": 2}]
    assert browser_problems((*STEPS, "b"), "PASS", two, MADE, PRESENT) == [
        "steps 1 and 2 cite the same snapshot 'snapshot-1.yml': one per step",
        "steps 1 and 2 cite the same screenshot 'screenshot-2.png': one per step",
    ]
    gone = PRESENT - {"screenshot-2.png"}
    assert browser_problems(STEPS, "PASS", [{"step": 1, "snapshot": "snapshot-1.yml"}], MADE, gone) == [
        "step 1 cites no screenshot: a PASS on a web feature cites one per step"
    ]


@pytest.mark.parametrize(("category", "web"), [("web", True), (" WEB ", True), ("website", False), (None, False), ("", False)])  # fmt: skip
def test_which_features_are_web(category: str | None, web: bool) -> None:
    assert evidence.is_web({"category": category}) is web and evidence.is_web(None) is False


def test_a_ledger_line_round_trips_and_what_is_no_call_is_named() -> None:
    failed = Call(7, "browser_take_screenshot", {"type": "png"}, True, "http://127.0.0.1:8000/", None)
    lines = [
        json.dumps(failed.to_json()),
        "",
        "{not json",
        json.dumps({"tool": "x"}),
        json.dumps(MADE[0].to_json()),
    ]
    assert evidence.parse_ledger("\n".join(lines)) == ([failed, MADE[0]], [(3, "is not JSON"), (4, "is not a browser call")])  # fmt: skip
    assert evidence.note("console-9.txt") == "Evidence: console saved as console-9.txt"
    assert evidence.NOTE.fullmatch(evidence.note("screenshot-2.png")) is not None


def test_a_ledger_that_is_a_link_or_not_text_is_read_with_care(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / evidence.LEDGER).write_bytes(
        json.dumps(MADE[0].to_json()).encode() + b"\n\xff\xfe\n"
    )
    assert read_ledger(tmp_path / "real") == [MADE[0]]
    (tmp_path / "link").mkdir()
    (tmp_path / "link" / evidence.LEDGER).symlink_to(tmp_path / "real" / evidence.LEDGER)
    assert read_ledger(tmp_path / "link") == [] and read_ledger(tmp_path / "none") == []


def test_only_a_pass_needs_browser_evidence() -> None:
    assert browser_problems(STEPS, "REQUEST_CHANGES", [], [], frozenset()) == []
    assert browser_problems((), "PASS", [], [], frozenset()) == []


# --- the session's server, hooks and brief -------------------------------------------------------


def access(tmp_path: Path) -> BrowserAccess:
    return BrowserAccess("http://127.0.0.1:40000/mcp", APP_ORIGIN, tmp_path / "session")


def test_a_session_with_a_browser_gets_its_server_and_both_hooks(tmp_path: Path) -> None:
    request = request_for(tmp_path, state_for(SessionType.REVIEW))
    plain = build_options(request, lambda _: None)
    assert set(plain.mcp_servers) == {"handoff"} and "PostToolUse" not in plain.hooks  # type: ignore[arg-type, operator]
    refusals: dict[str, str] = {}
    options = build_options(SessionRequest(**{**request.__dict__, "browser": access(tmp_path)}), lambda _: None, refusals=refusals)  # fmt: skip
    assert options.mcp_servers["browser"] == {"type": "http", "url": "http://127.0.0.1:40000/mcp"}  # type: ignore[index]
    before_matcher = options.hooks["PreToolUse"][-1]  # type: ignore[index]
    after_matcher = options.hooks["PostToolUse"][0]  # type: ignore[index]
    assert before_matcher.matcher == after_matcher.matcher == "mcp__browser__.*"
    before, after = before_matcher.hooks[0], after_matcher.hooks[0]

    def ask(hook: Any, data: dict[str, Any], use: str) -> dict[str, Any]:
        return anyio.run(hook, data, use, None)["hookSpecificOutput"]  # type: ignore[no-any-return]

    off = ask(before, {"tool_name": "mcp__browser__browser_navigate", "tool_input": {"url": "http://example.com"}}, "t1")  # fmt: skip
    on = ask(before, {"tool_name": "mcp__browser__browser_navigate", "tool_input": {"url": APP_ORIGIN}}, "t2")
    bare = ask(before, {"tool_name": "mcp__browser__browser_snapshot"}, "t3")
    why = "the browser stays on the app, http://127.0.0.1:8000: 'http://example.com' is not on it"
    assert off == {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": f"scheduler policy: {why}"}  # fmt: skip
    allowed = {"hookEventName": "PreToolUse", "permissionDecision": "allow", "permissionDecisionReason": "scheduler policy: a browser call on the app"}  # fmt: skip
    assert on == bare == allowed and refusals == {"t1": why}
    response = [{"type": "text", "text": "page"}, "not a block"]
    shown = ask(after, {"tool_name": "mcp__browser__browser_snapshot", "tool_input": {"x": 1}, "tool_response": response}, "t4")  # fmt: skip
    note = {"type": "text", "text": "Evidence: snapshot saved as snapshot-1.yml"}
    assert shown == {
        "hookEventName": "PostToolUse",
        "updatedMCPToolOutput": [{"type": "text", "text": "page"}, note],
    }
    odd = ask(
        after, {"tool_name": "mcp__browser__browser_snapshot", "tool_response": "text, not blocks"}, "t5"
    )
    assert odd["updatedMCPToolOutput"][-1]["text"] == "Evidence: snapshot saved as snapshot-2.yml"
    calls = read_ledger(tmp_path / "session")
    assert [(c.tool, c.input) for c in calls] == [("browser_snapshot", {"x": 1}), ("browser_snapshot", {})]
    assert (tmp_path / "session" / "evidence" / "snapshot-2.yml").read_text() == ""


class NeverRuns:
    async def run(self, request: SessionRequest) -> SessionResult:
        raise AssertionError("the session ran without its browser")


class Unstartable:
    tip = "0" * 40

    @contextmanager
    def opened(self) -> Iterator[BrowserAccess]:
        raise NoBrowser("the app did not start: exited with code 1")
        yield  # pragma: no cover


def test_a_browser_that_does_not_start_runs_no_session_and_is_not_the_agent_s_doing(tmp_path: Path) -> None:
    lines: list[str] = []
    request = request_for(tmp_path, state_for(SessionType.REVIEW))
    result = run_session(NeverRuns(), request, Unstartable(), lines.append)  # type: ignore[arg-type]
    assert result.browser_failed == "the app did not start: exited with code 1" and result.is_error
    assert lines == ["  browser: did not start: the app did not start: exited with code 1"]
    cut = cut_short(result, "m")
    assert cut is not None and (cut.standing, cut.reason) == (Standing.BROWSER, result.browser_failed)


def test_a_browser_that_failed_in_a_session_that_ran_is_judged_the_browser_s() -> None:
    from session_scheduler.core.machine import Outcome

    ran = SessionResult(subtype="success", is_error=False, num_turns=3, browser_failed="did not connect")
    assert cut_short(ran, "m") is None
    assert judged(ran, Outcome(SessionType.REVIEW, False, reason="no evidence")).standing is Standing.BROWSER
    assert judged(ran, Outcome(SessionType.REVIEW, True)).standing is Standing.VERIFIED


# --- which sessions get a browser -----------------------------------------------------------------

APP_JSON = '{"start": "exec python3 -m http.server $PORT --bind 127.0.0.1", "ready_path": "/"}\n'


def web_project(tmp_path: Path, category: str = "web", app: str | None = APP_JSON) -> Path:
    project = tmp_path / "p"
    project.mkdir()
    sh(project, "git init -q -b main && git commit -q --allow-empty -m init")
    if app is not None:
        (project / "app.json").write_text(app)
    (project / "index.html").write_text("<title>todo</title><h1>todo from main</h1>")
    sh(project, "git add -A && git commit -qm skeleton && git checkout -qb feature/F001")
    (project / "index.html").write_text("<title>todo</title><h1>todo from the branch</h1>")
    sh(project, "git commit -qam feature && git checkout -q main")
    feature = {
        "id": "F001",
        "category": category,
        "description": "d",
        "steps": ["Open `/` -> todo"],
        "passes": False,
    }
    (project / "feature_list.json").write_text(json.dumps({"features": [feature]}))
    return project


@pytest.mark.parametrize(
    ("role", "category", "app", "gets"),
    [
        (SessionType.REVIEW, "web", APP_JSON, True),
        (SessionType.REVIEW, "Web", APP_JSON, True),
        (SessionType.REVIEW, "functional", APP_JSON, False),
        (SessionType.REVIEW, "web", None, False),
        (SessionType.REVIEW, "web", '{"start": ""}', False),
        (SessionType.IMPLEMENT, "web", APP_JSON, False),
        (SessionType.FIX, "web", APP_JSON, False),
    ],
)
def test_a_review_of_a_web_feature_in_a_project_with_an_app_gets_a_browser(
    tmp_path: Path, role: SessionType, category: str, app: str | None, gets: bool
) -> None:
    project = web_project(tmp_path, category, app)
    repo = gitops.open_repo(project)
    plan = browsing.plan_for(
        Gatekeeper.of(AgentConfig()), repo, Records(project), state_for(role), tmp_path / "s"
    )
    assert (plan is not None) == gets
    if plan is not None:
        assert plan.tip == gitops.head(repo, "feature/F001") and plan.spec.start.startswith("exec python3")


def test_an_architecture_fix_s_review_or_an_unlisted_feature_gets_no_browser(tmp_path: Path) -> None:
    from session_scheduler.core.machine import Lane, SessionState, architecture_fixes

    project = web_project(tmp_path)
    repo, keeper = gitops.open_repo(project), Gatekeeper.of(AgentConfig())
    arch = SessionState(
        state_for(SessionType.REVIEW).backlog, Lane(SessionType.REVIEW, architecture_fixes(3))
    )
    assert browsing.plan_for(keeper, repo, Records(project), arch, tmp_path) is None
    assert (
        browsing.plan_for(keeper, repo, Records(project), state_for(SessionType.REVIEW, "F099"), tmp_path)
        is None
    )


def test_the_person_s_app_counts_without_an_app_json(tmp_path: Path) -> None:
    from session_scheduler.core.app import AppSpec

    project = web_project(tmp_path, app=None)
    keeper = Gatekeeper.of(AgentConfig(app=AppSpec("exec python3 -m http.server $PORT")))
    plan = browsing.plan_for(
        keeper, gitops.open_repo(project), Records(project), state_for(SessionType.REVIEW), tmp_path
    )
    assert plan is not None and plan.spec.start == "exec python3 -m http.server $PORT"


# --- for real: the branch's app and a browser in their boxes ---------------------------------------


def test_the_branch_s_app_is_browsed_in_its_box_and_everything_stops(
    tmp_path: Path, browser_sandbox: None
) -> None:
    project = web_project(tmp_path)
    repo = gitops.open_repo(project)
    folder = tmp_path / "session"
    folder.mkdir()
    plan = browsing.plan_for(
        Gatekeeper.of(AgentConfig()), repo, Records(project), state_for(SessionType.REVIEW), folder
    )
    assert plan is not None
    with plan.opened() as opened:
        assert opened.app_origin == APP_ORIGIN
        seen = mcp_client.run(
            lambda: mcp_client.calls(
                opened.url, [("browser_navigate", {"url": APP_ORIGIN}), ("browser_snapshot", {})]
            )
        )
        worktrees = sh(project, "git worktree list")
        request = request_for(project, state_for(SessionType.REVIEW))
        played = Browser(SessionRequest(**{**request.__dict__, "browser": opened}))
        try:  # the in-process runner's browser: one page for the session, the policy, the ledger
            off = played.call("mcp__browser__browser_navigate", {"url": "http://example.com/"})
            played.call("mcp__browser__browser_navigate", {"url": APP_ORIGIN + "/"})
            snapshot, _ = played.call("mcp__browser__browser_snapshot", {})
            shot, _ = played.call("mcp__browser__browser_take_screenshot", {"type": "png"})
        finally:
            played.close()
    assert off[1] and "the browser stays on the app" in off[0]
    assert "todo from the branch" in snapshot and snapshot.endswith(
        "Evidence: snapshot saved as snapshot-2.yml"
    )
    assert shot.endswith("Evidence: screenshot saved as screenshot-3.png")
    assert (folder / "evidence" / "screenshot-3.png").read_bytes().startswith(b"\x89PNG")
    assert "todo from the branch" in mcp_client.text(seen[1])
    assert len(worktrees.splitlines()) == 2 and len(sh(project, "git worktree list").splitlines()) == 1
    assert (folder / browsing.APP_LOG).is_file() and (folder / browsing.BROWSER_LOG).is_file()
    assert not any(p.name.startswith(".") for p in (folder / "evidence").iterdir())


def test_an_app_that_does_not_start_is_no_browser_with_its_reason(
    tmp_path: Path, browser_sandbox: None
) -> None:
    project = web_project(tmp_path, app='{"start": "echo broken; exit 3"}')
    plan = browsing.plan_for(
        Gatekeeper.of(AgentConfig()),
        gitops.open_repo(project),
        Records(project),
        state_for(SessionType.REVIEW),
        tmp_path,
    )
    assert plan is not None
    with pytest.raises(NoBrowser, match=r"the app did not start: .*code 3"), plan.opened():
        pass


# --- red team: a payload planted in the app now, run later by REVIEW's browser -----------------------

SECRET = "RED-TEAM-BROWSER-SECRET-6b1d"


@pytest.mark.parametrize("boxed", [True, False])
def test_a_page_the_branch_planted_reaches_no_file_no_host_port_and_no_secret(
    tmp_path: Path, browser_sandbox: None, boxed: bool
) -> None:
    """The IMPLEMENT's page runs in REVIEW's browser: it redirects to a file holding a secret (in
    the host's temp, denied in every box), fetches a port on the host's loopback and an outside
    host, and plants a link to them for the reviewer to follow. None of it reaches anything; the
    same page unboxed (--no-sandbox) reaches the host's port: the check sees an escape."""
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    project = web_project(tmp_path)
    with listening() as host:
        page = (
            f"<title>todo</title><h1>todo</h1><a href='file://{secret}'>open</a>"
            f"<img src='http://127.0.0.1:{host.port}/img'><script>"
            f"fetch('http://127.0.0.1:{host.port}/fetch').catch(() => {{}});"
            "fetch('http://example.com/').catch(() => {});"
            f"setTimeout(() => {{ location = 'file://{secret}'; }}, 50);</script>"
        )
        sh(project, "git checkout -q feature/F001")
        (project / "index.html").write_text(page)
        sh(project, "git commit -qam 'the payload' && git checkout -q main")
        folder = tmp_path / "session"
        folder.mkdir()
        plan = browsing.plan_for(
            Gatekeeper.of(AgentConfig(sandbox=boxed)),
            gitops.open_repo(project),
            Records(project),
            state_for(SessionType.REVIEW),
            folder,
        )
        assert plan is not None
        with plan.opened() as opened:
            seen = mcp_client.run(
                lambda: mcp_client.calls(
                    opened.url,
                    [
                        ("browser_navigate", {"url": opened.app_origin + "/"}),
                        ("browser_wait_for", {"time": 1}),
                        ("browser_snapshot", {}),
                        (
                            "browser_navigate",
                            {"url": f"file://{secret}"},
                        ),  # the server's own rule, past our hook
                    ],
                )
            )
        said = "\n".join(mcp_client.text(result) for result in seen)
    if not boxed:
        assert host.hits > 0, said  # file: pages are refused by Chromium and the server, boxed or not
        return
    assert SECRET not in said and host.hits == 0
    assert SECRET not in "".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file())
