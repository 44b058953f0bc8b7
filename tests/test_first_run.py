"""A person's first runs: bad input is a usage error in one line, nothing is created before the
credentials are known, the demo stays a demo, a finished project is not probed, every restore
hint works, `--help` says where a project lands, and nothing is left in the temp folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner, Result
from helpers import active_sandbox, cli_seams, logged_in

from scripted_model.hermetic import hermetic_env
from scripted_model.scenario import Scenario
from session_scheduler.guard.sandbox import Preflight
from session_scheduler.run.agent import SessionRequest, SessionResult, SessionRunner
from session_scheduler.testing.inprocess import InProcessRobotRunner
from session_scheduler.view import cli as autonomous_agent_demo
from session_scheduler.view.cli import DEFAULT_GENERATIONS, main, resolve_project

REPO = Path(__file__).resolve().parents[1]
NO_CREDENTIALS = "Claude Code is not logged in: run `claude auth login` (a test stand-in)"


def invoke(*args: str, features: int = 1, **seams: Any) -> Result:
    obj = {**cli_seams(lambda _: InProcessRobotRunner(Scenario.from_json({"features": features}))), **seams}
    return CliRunner().invoke(main, list(args), obj=obj)


def one_line(result: Result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# --- bad input: exit 2, one line on stderr, nothing created ----------------------------------


@pytest.mark.parametrize("kind", ["missing", "folder", "empty", "binary"])
def test_a_spec_that_cannot_be_used_is_a_usage_error_in_one_line(tmp_path: Path, kind: str) -> None:
    spec = tmp_path / "spec.txt"
    if kind == "folder":
        spec.mkdir()
    elif kind == "empty":
        spec.write_text("\n")
    elif kind == "binary":
        spec.write_bytes(b"\x00\x01\x02" * 10)
    result = invoke("--project-dir", "app", "--spec", str(spec))
    assert result.exit_code == 2, result.output
    line = one_line(result)
    assert line.startswith("error: ") and str(spec) in line
    assert "pass" in line or "write" in line, "it says how to fix it"
    assert not resolve_project("app").exists()


@pytest.mark.parametrize(
    "option",
    [["--lanes", "0"], ["--max-turns", "many"], ["--bogus"], ["--lanes"]],
    ids=["range", "type", "unknown", "value"],
)
def test_an_option_click_refuses_is_one_line_too(option: list[str]) -> None:
    result = invoke("--project-dir", "app", *option)
    assert result.exit_code == 2, result.output
    line = one_line(result)
    assert line.startswith("error: ") and line.endswith("--help` lists the options)"), line
    assert not resolve_project("app").exists()


@pytest.mark.parametrize("kind", ["missing", "folder", "without-demo"])
def test_a_scenario_that_cannot_be_used_is_a_usage_error_in_one_line(tmp_path: Path, kind: str) -> None:
    scenario = tmp_path / "scenario.json"
    if kind == "folder":
        scenario.mkdir()
    if kind == "without-demo":
        scenario.write_text('{"features": 1}')
    args = ["--project-dir", "app", "--scenario", str(scenario)] + (
        [] if kind == "without-demo" else ["--offline-demo"]
    )
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert one_line(result).startswith("error: ") and "scenario" in result.stderr
    assert not resolve_project("app").exists()


# --- credentials before anything is created ------------------------------------------------------


def test_without_credentials_nothing_is_created_and_one_line_says_how_to_log_in(spec_file: Path) -> None:
    probes: list[int] = []

    def probe() -> Preflight:
        probes.append(1)
        return active_sandbox()

    result = invoke(
        "--project-dir", "app", "--spec", str(spec_file), credentials=lambda: NO_CREDENTIALS, preflight=probe
    )
    assert result.exit_code == 1, result.output
    assert one_line(result) == f"error: {NO_CREDENTIALS}"
    assert not resolve_project("app").exists() and probes == []


def test_the_credentials_check_asks_the_bundled_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`claude auth status` of the bundled CLI, with an empty home: not logged in; with a key: logged in."""
    from session_scheduler.run.classify import LOGIN_HELP
    from session_scheduler.run.runners import credentials_missing

    env = hermetic_env("http://127.0.0.1:9", tmp_path)
    for key in list(os.environ):
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert credentials_missing() is None, "a key is credentials"
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    assert "has no credentials for the endpoint http://127.0.0.1:9 (ANTHROPIC_BASE_URL)" in str(
        credentials_missing()
    )
    monkeypatch.delenv("ANTHROPIC_BASE_URL")
    assert credentials_missing() == LOGIN_HELP


@pytest.mark.e2e
def test_a_newcomer_without_credentials_gets_one_line_and_no_folder(tmp_path: Path) -> None:
    """The user's command with an empty home and no key: the bundled CLI says it is not logged in."""
    from session_scheduler.run.classify import LOGIN_HELP

    env = {
        key: value
        for key, value in hermetic_env("http://127.0.0.1:9", tmp_path / "home").items()
        if not key.startswith("ANTHROPIC_")
    }
    env["AGENT_GENERATIONS_DIR"] = str(tmp_path / "generations")
    done = subprocess.run(
        [sys.executable, "autonomous_agent_demo.py", "--project-dir", "my_app"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [f"error: {LOGIN_HELP}"]
    assert not (tmp_path / "generations").exists(), "nothing is created"


# --- the demo is saved with the project ----------------------------------------------------------


def recording_factory(seen: list[bool]) -> Callable[..., Any]:
    def runners(scenario: Scenario | None) -> Any:
        @contextmanager
        def opened(echo: Callable[[str], None], log_dir: Path) -> Iterator[SessionRunner]:
            seen.append(scenario is not None)
            yield InProcessRobotRunner(Scenario.from_json({"features": 1}))

        return opened

    return runners


def test_a_plain_rerun_of_the_demo_resumes_the_demo_and_no_offline_demo_leaves_it() -> None:
    offline: list[bool] = []
    seams = {"runners": recording_factory(offline), "credentials": lambda: NO_CREDENTIALS}
    first = invoke("--project-dir", "demo", "--offline-demo", "--max-iterations", "1", **seams)
    assert first.exit_code == 3, first.output
    assert json.loads((resolve_project("demo") / ".agent_config.json").read_text())["offline_demo"] is True
    rerun = invoke("--project-dir", "demo", "--max-iterations", "1", **seams)
    assert rerun.exit_code == 3, rerun.output
    assert (
        "Offline demo (saved with this project; --no-offline-demo goes on against your real endpoint)"
        in rerun.output
    )
    assert offline == [True, True], "the rerun talks to the scripted model and asks for no credentials"
    real = invoke("--project-dir", "demo", "--no-offline-demo", **seams)
    assert real.exit_code == 1 and one_line(real) == f"error: {NO_CREDENTIALS}", (
        "left: credentials are needed now"
    )


# --- a finished project: no probe, no credentials ------------------------------------------------


@pytest.mark.parametrize("lanes", ["1", "3"])
def test_rerunning_a_finished_project_neither_probes_the_sandbox_nor_asks_for_credentials(
    spec_file: Path, lanes: str
) -> None:
    assert invoke("--project-dir", "app", "--spec", str(spec_file), "--lanes", lanes).exit_code == 0
    probes: list[int] = []

    def probe() -> Preflight:
        probes.append(1)
        return active_sandbox()

    again = invoke("--project-dir", "app", preflight=probe, credentials=lambda: NO_CREDENTIALS)
    assert again.exit_code == 0, again.output
    assert probes == [] and "1/1 features passing" in again.output
    unfinished = invoke("--project-dir", "other", "--max-iterations", "1", "--lanes", lanes, preflight=probe)
    assert unfinished.exit_code == 3 and probes == [1], "a run that starts a session probes once"


def test_a_session_never_starts_unprobed() -> None:
    """The decision is read ahead; should a session start anyway, the sandbox is proven first."""
    calls: list[str] = []

    class Runner:
        async def run(self, request: SessionRequest) -> SessionResult:
            calls.append("session")
            return SessionResult()

    @contextmanager
    def factory(echo: Callable[[str], None], log_dir: Path) -> Iterator[SessionRunner]:
        yield Runner()

    def probe() -> Preflight:
        calls.append("probe")
        return active_sandbox()

    seams = autonomous_agent_demo.Seams(preflight=probe, credentials=logged_in)
    check = autonomous_agent_demo._SandboxCheck(autonomous_agent_demo.AgentConfig(), seams, lambda _: None)
    with check.guard(factory)(print, Path("/nonexistent")) as runner:
        anyio.run(runner.run, None)  # type: ignore[arg-type]
        anyio.run(runner.run, None)  # type: ignore[arg-type]
    assert calls == ["probe", "session", "session"]


# --- restore hints that work ---------------------------------------------------------------------


@pytest.mark.parametrize("lanes", ["1", "3"])
@pytest.mark.parametrize("name", ["progress.json", "reviews.json", "feature_list.json"])
def test_a_corrupt_handoff_file_gets_a_restore_hint_that_works(name: str, lanes: str) -> None:
    assert (
        invoke("--project-dir", "app", "--max-iterations", "3", "--lanes", lanes, features=2).exit_code == 3
    )
    project = resolve_project("app")
    path = project / name
    path.write_text("{ not json")
    result = invoke("--project-dir", "app", features=2)
    assert result.exit_code == 1, result.output
    line = one_line(result)
    assert f"{name} is not valid JSON" in line and ".agent_logs/restore/post/" in line
    assert path.read_text() == "{ not json", "nothing lost"
    copy = project / ".agent_logs" / "restore" / "post" / name
    if not copy.exists():
        copy = sorted(project.glob(f".agent_logs/session_*/post/{name}"))[-1]
    path.write_bytes(copy.read_bytes())
    again = invoke("--project-dir", "app", features=2)
    assert again.exit_code == 0, again.output


# --- where a relative --project-dir lands ----------------------------------------------------------


def test_help_says_where_a_relative_project_dir_lands() -> None:
    result = CliRunner().invoke(main, ["--help"], terminal_width=100)
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert f"A relative path lands in {DEFAULT_GENERATIONS}" in text
    assert DEFAULT_GENERATIONS == REPO / "generations"


# --- nothing left in the system temp folder ------------------------------------------------------


@pytest.mark.parametrize("lanes", ["1", "3"])
def test_dry_run_leaves_nothing_in_the_temp_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec_file: Path, lanes: str
) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.setenv("TMPDIR", str(temp))
    assert (
        invoke("--project-dir", "app", "--spec", str(spec_file), "--dry-run", "--lanes", lanes).exit_code == 0
    )
    assert invoke("--project-dir", "app", "--max-iterations", "2", "--lanes", lanes).exit_code == 3
    assert invoke("--project-dir", "app", "--dry-run").exit_code == 0
    assert list(temp.iterdir()) == []


@pytest.mark.e2e
@pytest.mark.parametrize("lanes", ["1", "3"])
def test_a_run_check_and_dry_run_leave_the_temp_folder_empty(tmp_path: Path, lanes: str) -> None:
    """Through the real CLI, the OS sandbox's probe and the offline demo (in a short temp folder
    of its own: the sandbox's sockets live there, and a socket path is short)."""
    temp = Path(tempfile.mkdtemp(prefix="t-", dir="/tmp"))
    env = hermetic_env("http://127.0.0.1:9", tmp_path / "home")
    env.update(TMPDIR=str(temp), AGENT_GENERATIONS_DIR=str(tmp_path / "generations"))
    scenario = tmp_path / "scenario.json"
    scenario.write_text('{"features": 1}')
    for args in (
        ["--check"],
        ["--project-dir", "app", "--offline-demo", "--scenario", str(scenario), "--lanes", lanes],
        ["--project-dir", "app", "--dry-run"],
    ):
        done = subprocess.run(
            [sys.executable, "autonomous_agent_demo.py", *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr
        left = sorted(p.name for p in temp.iterdir())
        if left:
            shutil.rmtree(temp)
        assert left == [], f"left behind by {args}"
    temp.rmdir()


# --- what retrying cannot fix ends the run at once, in one line (the user's command, the real CLI) ---


class PlainWebServer:
    """A web server that is not an Anthropic API: every request gets `status` and an HTML page."""

    def __init__(self, status: int) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                body = b"<html><body><h1>It works!</h1></body></html>"
                self.send_response(status)
                self.send_header("content-type", "text/html")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_HEAD = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_port}"

    def __enter__(self) -> PlainWebServer:
        import threading

        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def run_against(base_url: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The user's command against `base_url`, with a key, and Claude Code allowed ten retries."""
    env = hermetic_env(base_url, tmp_path / "home", max_retries=10)
    env["AGENT_GENERATIONS_DIR"] = str(tmp_path / "generations")
    return subprocess.run(
        [sys.executable, "autonomous_agent_demo.py", "--project-dir", "app", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


REFUSALS = {
    "http_401": ("refused the credentials (401)", "check ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN"),
    "http_402": ("refused the request for billing reasons", "check the account's credit"),
    "http_404": (
        "does not know the model 'sonnet'",
        "--initializer-model (the model of INITIALIZER sessions)",
    ),
}


@pytest.mark.e2e
@pytest.mark.parametrize(("kind", "lanes"), [*((kind, "1") for kind in sorted(REFUSALS)), ("http_401", "3")])
def test_a_refused_key_billing_or_model_ends_the_run_in_one_line(
    tmp_path: Path, kind: str, lanes: str
) -> None:
    """bench/reliability.py times these (under 15 s each)."""
    from scripted_model.protocol import Fault, Turn
    from scripted_model.server import ScriptedModelServer

    class Refusing:
        def respond(self, turn: Turn) -> Fault:
            return Fault(kind)  # type: ignore[arg-type]

    with ScriptedModelServer(Refusing()) as server:
        done = run_against(server.base_url, tmp_path, "--lanes", lanes)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr
    cause, fix = REFUSALS[kind]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and cause in lines[0] and fix in lines[0], (
        done.stderr
    )


@pytest.mark.e2e
@pytest.mark.parametrize("status", [404, 405, 200])
def test_an_endpoint_that_is_not_an_anthropic_api_ends_the_run_in_one_line(
    tmp_path: Path, status: int
) -> None:
    with PlainWebServer(status) as server:
        done = run_against(server.base_url, tmp_path)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert (
        f"the endpoint {server.base_url} (ANTHROPIC_BASE_URL) does not look like the Anthropic API"
        in lines[0]
    )
    assert f"answered HTTP {status} with an HTML page" in lines[0] and "set ANTHROPIC_BASE_URL" in lines[0]


def test_a_refusal_of_a_json_api_is_not_taken_for_a_web_page() -> None:
    from scripted_model.protocol import Fault, Turn
    from scripted_model.server import ScriptedModelServer
    from session_scheduler.run.agent import endpoint_answer

    class Refusing:
        def respond(self, turn: Turn) -> Fault:
            return Fault("http_404")

    with ScriptedModelServer(Refusing()) as server:
        assert endpoint_answer(server.base_url) is None
    with PlainWebServer(404) as web:
        assert endpoint_answer(web.base_url) == "HTTP 404 with an HTML page"
    assert endpoint_answer("http://127.0.0.1:9") is None, "cannot be reached: nothing to say"


def test_a_page_instead_of_the_api_stops_the_run_and_says_so() -> None:
    from session_scheduler.run.classify import Standing, cut_short

    result = SessionResult(
        api_error_status=404, base_url="http://127.0.0.1:8080", not_an_api="HTTP 404 with an HTML page"
    )
    classified = cut_short(result, "sonnet")
    assert (
        classified is not None and classified.standing is Standing.AUTH and classified.unknown_model is None
    )
    assert classified.reason.startswith(
        "the endpoint http://127.0.0.1:8080 (ANTHROPIC_BASE_URL) does not look like the Anthropic API"
    )
