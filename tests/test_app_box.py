"""The project's app, started by the scheduler: `app.json` as data (AppSpec), the app in its box
(answers through its host url; its tree read-only; no home, no secrets, no network but the allowed
domains; Unix sockets of the host's services hidden), red when it exits or never answers, stopped
whole; and the app gate on a real repository."""

from __future__ import annotations

import os
import secrets
import socket
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import git
import pytest
from helpers import Listener, group_alive, listening, running, short_tmp, wait_until

from session_scheduler.core.app import APP_SCHEMA, AppSpec
from session_scheduler.core.errors import BadInput
from session_scheduler.core.schemas import schema_error
from session_scheduler.guard import app_box
from session_scheduler.guard import command_sandbox as cs
from session_scheduler.guard.app_box import AppDidNotStart, RunningApp, start_app
from session_scheduler.repo import gates as repo_gates
from session_scheduler.repo import gitops

tmp_path = pytest.fixture(short_tmp, name="tmp_path")
"""Each test's folder, short: the sockets made under it fit a Unix socket's path (helpers.short_tmp)."""


# --- pure: app.json ------------------------------------------------------------------------------


def test_an_app_spec_round_trips_and_fills_its_defaults() -> None:
    spec = AppSpec.from_json({"start": "python3 app.py"})
    assert spec == AppSpec("python3 app.py", "/", 30, "PORT")
    full = AppSpec("npm start", "/health", 12.5, "APP_PORT")
    assert AppSpec.from_json(full.to_json()) == full
    assert schema_error(full.to_json(), APP_SCHEMA) is None


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({}, "'start' is a required property"),
        ({"start": "   "}, "at start:"),
        ({"start": "x", "ready_path": "health"}, "at ready_path:"),
        ({"start": "x", "ready_path": "/a b"}, "at ready_path:"),
        ({"start": "x", "ready_timeout_s": 0}, "at ready_timeout_s:"),
        ({"start": "x", "ready_timeout_s": 601}, "at ready_timeout_s:"),
        ({"start": "x", "port_env": "port"}, "at port_env:"),
        ({"start": "x", "port_env": "HOME"}, "at port_env:"),
        ({"start": "x", "port_env": "PATH"}, "at port_env:"),
        ({"start": "x", "command": "y"}, "Additional properties are not allowed"),
        (["python3 app.py"], "is not of type 'object'"),
    ],
)
def test_a_bad_app_json_is_refused_in_one_line_that_says_how_to_fix_it(data: object, says: str) -> None:
    with pytest.raises(BadInput) as caught:
        AppSpec.from_json(data)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("app.json is invalid")
    assert says in message and "docs/gates.md" in message


# --- pure: the box as data -----------------------------------------------------------------------


def test_the_box_reads_its_tree_but_writes_only_its_private_temp_and_hides_service_sockets(
    tmp_path: Path,
) -> None:
    tree, tmp = tmp_path / "tree", tmp_path / "tmp"
    profile = app_box.box_profile(tree, tmp, tmp_path / "project", ("pypi.org",))
    settings = cs.srt_settings(profile, "/rt")
    assert settings["filesystem"]["allowWrite"] == [str(tmp)]
    assert str(tree) in settings["filesystem"]["allowRead"]
    assert "/run" in settings["filesystem"]["denyRead"]
    assert settings["network"] == {
        "allowedDomains": ["pypi.org"],
        "deniedDomains": [],
        "allowAllUnixSockets": True,
    }


def test_the_command_sandbox_keeps_unix_sockets_refused() -> None:
    profile = cs.Profile(("/w/tree",), "/w/tmp", (), (), ())
    assert "allowAllUnixSockets" not in cs.srt_settings(profile, "/rt")["network"]


def test_the_boxed_command_bridges_the_inside_port_then_runs_the_app_in_the_foreground() -> None:
    command = app_box.boxed_command("python3 app.py", Path("/t/tmp/app.sock"), 8000)
    assert command.splitlines() == [
        "socat UNIX-LISTEN:/t/tmp/app.sock,fork,unlink-early TCP:127.0.0.1:8000 2>/dev/null &",
        "python3 app.py",
    ]


def test_a_private_temp_too_long_for_a_socket_is_refused(tmp_path: Path) -> None:
    deep = tmp_path / ("x" * 120)
    with pytest.raises(ValueError, match="too long for a Unix socket"):
        start_app(AppSpec("true"), tmp_path, deep, tmp_path / "log", allowed_domains=())


# --- an app ------------------------------------------------------------------------------------

APP = """\
import http.server, os, sys
BODY = sys.argv[1].encode() if len(sys.argv) > 1 else b"hello-from-app"
STATUS = int(os.environ.get("APP_STATUS", "200"))
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(STATUS if self.path == "/" else 404)
        self.end_headers()
        self.wfile.write(BODY)
    def log_message(self, *args):
        pass
print("listening on", os.environ["PORT"], flush=True)
http.server.HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""


@pytest.fixture
def box(tmp_path: Path) -> Path:
    """A folder with the app's tree (app.py) and room for its private temp and log; short, for the socket."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "app.py").write_text(APP)
    return tmp_path


def start(
    box: Path,
    command: str,
    *,
    sandboxed: bool = True,
    name: str = "a",
    domains: tuple[str, ...] = (),
    ready_path: str = "/",
    ready_timeout_s: float = 60,
    port_env: str = "PORT",
) -> RunningApp:
    """The app `command` started from `box/tree`, its private temp `box/tmp-<name>`, its log `box/<name>.log`."""
    spec = AppSpec(command, ready_path, ready_timeout_s, port_env)
    return start_app(
        spec,
        box / "tree",
        box / f"tmp-{name}",
        box / f"{name}.log",
        allowed_domains=domains,
        sandboxed=sandboxed,
    )


def get(url: str) -> str:
    """The body at `url`, directly (the scheduler's proxy settings are not for loopback)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as response:
        return str(response.read().decode())


def marker() -> str:
    """A number no other process's command line holds: finds what an app left running."""
    return f"{301 + secrets.randbelow(10**6) / 10**6:.6f}"


def refused(url: str) -> bool:
    port = int(url.rsplit(":", 1)[1])
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return True
    return False


def gone(app: RunningApp, mark: str) -> bool:
    return not running(f"\0{mark}") and not group_alive(app.pid) and not app.forwarding and refused(app.url)


# --- unconfined: readiness and stopping, fast --------------------------------------------------


def test_an_unconfined_app_answers_on_its_own_free_host_port(box: Path) -> None:
    with start(box, "exec python3 app.py unconfined-body", sandboxed=False) as app:
        assert get(app.url) == "unconfined-body"
        assert app.socket_path is None  # no bridge: no socket for another box
        assert f"listening on {app.url.rsplit(':', 1)[1]}" in app.log.read_text()


def test_an_answer_below_500_is_ready_even_a_404(box: Path) -> None:
    with start(box, "exec python3 app.py", sandboxed=False, ready_path="/missing") as app:
        assert app_box.answer(int(app.url.rsplit(":", 1)[1]), "/missing") == 404


def test_an_app_that_only_answers_500_never_becomes_ready(box: Path) -> None:
    mark = marker()
    with pytest.raises(AppDidNotStart) as caught:
        start(box, f"APP_STATUS=500 exec python3 app.py {mark}", sandboxed=False, ready_timeout_s=2)
    assert "(the last answer was 500)" in caught.value.reason
    wait_until(lambda: not running(f"\0{mark}"), "the app to be stopped", 10)


def test_the_wait_reads_the_injected_clock(box: Path) -> None:
    now = iter([0.0, 0.0, 100.0])
    mark = marker()
    with pytest.raises(AppDidNotStart, match="within 5s"):
        start_app(
            AppSpec(f"exec sleep {mark}", ready_timeout_s=5),
            box / "tree", box / "tmp", box / "a.log", allowed_domains=(), sandboxed=False,
            clock=lambda: next(now), sleep=lambda _: None,
        )  # fmt: skip
    wait_until(lambda: not running(f"\0{mark}"), "the app to be stopped", 10)


def test_an_unconfined_app_is_stopped_whole_with_what_it_started(box: Path) -> None:
    mark = marker()
    app = start(box, f"(sleep {mark} &); exec python3 app.py {mark}", sandboxed=False)
    with app:
        assert len(running(f"sleep\0{mark}")) == len(running(f"app.py\0{mark}")) == 1
    wait_until(lambda: gone(app, mark), "the app and its child to end", 10)


# --- in the box ----------------------------------------------------------------------------------


def test_a_boxed_app_answers_through_its_url(box: Path, runtime: str) -> None:
    with start(box, "exec python3 app.py boxed-body") as app:
        assert get(app.url) == "boxed-body"
        assert app.socket_path == box / "tmp-a" / app_box.SOCKET_NAME and app.socket_path.is_socket()
        for _ in range(10):  # more connections through the forwarder: each one's threads end with it
            assert get(app.url) == "boxed-body"
        name = f"app-forwarder-{app.url.rsplit(':', 1)[1]}"
        wait_until(
            lambda: [t.name for t in threading.enumerate()].count(name) == 1, "only the accepting thread", 10
        )
        assert "listening on 8000" in app.log.read_text()


def test_a_boxed_app_cannot_write_its_tree_but_writes_its_private_temp(box: Path, runtime: str) -> None:
    with start(box, 'touch written-by-app; touch "$TMPDIR/temp-ok"; exec python3 app.py') as app:
        assert "Read-only file system" in app.log.read_text()
    assert not (box / "tree" / "written-by-app").exists()
    assert (box / "tmp-a" / "temp-ok").exists()


def test_a_boxed_app_cannot_read_a_secret_in_home(
    box: Path, runtime: str, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path_factory.mktemp("home")
    (home / ".secret").write_text("home-secret-value\n")
    monkeypatch.setenv("HOME", str(home))
    with start(box, f'cat {home}/.secret; echo "home is $HOME"; exec python3 app.py') as app:
        log = app.log.read_text()
    assert "home-secret-value" not in log and f"home is {box / 'tmp-a' / 'home'}" in log


def test_a_boxed_app_sees_none_of_the_scheduler_s_secrets_and_gets_its_port(
    box: Path, runtime: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-planted")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-planted")
    with start(box, "env; PORT=$APP_PORT exec python3 app.py", port_env="APP_PORT") as app:
        log = app.log.read_text()
    assert "sk-ant-planted" not in log and "ANTHROPIC_API_KEY" not in log and "ghp-planted" not in log
    assert "APP_PORT=8000" in log


def test_a_boxed_app_does_not_see_the_host_s_service_sockets(box: Path, runtime: str) -> None:
    assert os.listdir("/run"), "this machine's /run is empty: nothing to hide"
    with start(box, 'echo "run: $(ls -A /run | wc -l)"; exec python3 app.py') as app:
        assert "run: 0" in app.log.read_text()


def test_a_boxed_app_cannot_make_a_user_namespace_though_it_may_make_unix_sockets(
    box: Path, runtime: str
) -> None:
    with start(box, "unshare -Ur true || echo no-userns; exec python3 app.py") as app:
        assert "no-userns" in app.log.read_text()


@pytest.fixture
def listener() -> Iterator[Listener]:
    with listening() as served:
        yield served


FETCH = (
    "import sys, urllib.request, urllib.error\n"
    "try:\n    print('status', urllib.request.urlopen(sys.argv[1], timeout=10).status)\n"
    "except urllib.error.HTTPError as e:\n    print('http', e.code)\n"
    "except OSError as e:\n    print('error', e)\n"
)


def _fetch_from_the_box(box: Path, port: int, domains: tuple[str, ...]) -> list[str]:
    (box / "tree" / "fetch.py").write_text(FETCH)
    url = f"http://127.0.0.1:{port}/"
    command = (
        f"python3 fetch.py {url}; env -u no_proxy -u NO_PROXY python3 fetch.py {url}; exec python3 app.py"
    )
    with start(box, command, domains=domains) as app:  # directly, then by the proxy
        return app.log.read_text().splitlines()[:2]


def test_a_boxed_app_cannot_reach_a_host_listener_that_is_not_allowed(
    box: Path, runtime: str, listener: Listener
) -> None:
    said = _fetch_from_the_box(box, listener.port, ("pypi.org",))
    assert said == ["error <urlopen error [Errno 111] Connection refused>", "http 403"]
    assert listener.hits == 0


def test_a_boxed_app_reaches_an_allowed_destination_through_the_proxy(
    box: Path, runtime: str, listener: Listener
) -> None:
    said = _fetch_from_the_box(box, listener.port, (f"127.0.0.1:{listener.port}",))
    assert said[1] == "status 200" and listener.hits == 1


def test_a_boxed_app_that_exits_at_once_is_red_with_its_log(box: Path, runtime: str) -> None:
    with pytest.raises(AppDidNotStart) as caught:
        start(box, "echo boom-before-exit; exit 3")
    assert caught.value.reason == "the app exited with code 3 before it answered"
    assert "boom-before-exit" in caught.value.log_tail and "boom-before-exit" in str(caught.value)


def test_a_boxed_app_that_never_answers_is_red_and_left_nothing_running(box: Path, runtime: str) -> None:
    mark = marker()
    with pytest.raises(AppDidNotStart) as caught:
        start(box, f"echo waiting-forever; exec sleep {mark}", ready_timeout_s=3)
    assert caught.value.reason == "the app did not answer GET / below 500 within 3s (no answer)"
    assert "waiting-forever" in caught.value.log_tail
    wait_until(lambda: not running(f"\0{mark}"), "the app to be stopped", 15)


def test_a_stopped_boxed_app_leaves_nothing_running_and_stops_once(box: Path, runtime: str) -> None:
    mark = marker()
    app = start(box, f"(sleep {mark} &); exec python3 app.py {mark}")
    try:
        assert get(app.url) == mark and app.forwarding
        assert len(running(f"sleep\0{mark}")) == len(running(f"app.py\0{mark}")) == 1
    finally:
        app.stop()
    wait_until(lambda: gone(app, mark), "the box, the app, its child and the forwarder to end", 15)
    app.stop()  # idempotent
    assert app.log.read_text().startswith("listening on 8000")  # the log is kept


def test_an_exception_inside_the_with_stops_the_boxed_app(box: Path, runtime: str) -> None:
    mark = marker()
    with pytest.raises(RuntimeError, match="inside"), start(box, f"exec python3 app.py {mark}") as app:
        raise RuntimeError("inside")
    wait_until(lambda: gone(app, mark), "the box and the forwarder to end", 15)


def test_two_boxed_apps_at_once_get_their_own_host_ports(box: Path, runtime: str) -> None:
    with (
        start(box, "exec python3 app.py first", name="one") as one,
        start(box, "exec python3 app.py second", name="two") as two,
    ):
        assert one.url != two.url
        assert (get(one.url), get(two.url)) == ("first", "second")


# --- the app gate on a real repository ---------------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path) -> git.Repo:
    project = tmp_path / "projects" / "app"
    project.mkdir(parents=True)
    (project / "app_spec.txt").write_text("spec\n")
    (project / "app.py").write_text(APP)
    made = gitops.open_repo(project)
    made.git.add("app.py")
    made.git.commit("-m", "app", "--no-verify")
    return made


@pytest.mark.parametrize("sandboxed", [True, False])
def test_the_app_gate_is_green_when_the_app_answers(
    repo: git.Repo, sandboxed: bool, request: pytest.FixtureRequest
) -> None:
    if sandboxed:
        request.getfixturevalue("runtime")
    result = repo_gates.app_gate(
        repo, repo.head.commit.hexsha, AppSpec("exec python3 app.py"), allowed_domains=(), sandboxed=sandboxed
    )
    assert (result.name, result.kind, result.command, result.passed) == (
        "app",
        "app",
        "exec python3 app.py",
        True,
    )
    assert result.output.endswith("the app answered GET /") and "listening on" in result.output


def test_the_app_gate_is_red_with_the_reason_and_the_log_when_the_app_exits(
    repo: git.Repo, runtime: str
) -> None:
    result = repo_gates.app_gate(
        repo, repo.head.commit.hexsha, AppSpec("echo no-such-app >&2; exit 1"), allowed_domains=()
    )
    assert not result.passed
    assert result.output == "no-such-app\nthe app exited with code 1 before it answered"


def test_the_app_gate_runs_the_install_first_where_the_app_can_read_it(repo: git.Repo, runtime: str) -> None:
    spec = AppSpec('exec python3 app.py "$(cat installed.txt)"')
    result = repo_gates.app_gate(
        repo, repo.head.commit.hexsha, spec, allowed_domains=(), install="echo from-install > installed.txt"
    )
    assert result.passed, result.output


def test_a_failed_install_makes_the_app_gate_red_without_starting_it(repo: git.Repo) -> None:
    result = repo_gates.app_gate(
        repo, repo.head.commit.hexsha, AppSpec("exec python3 app.py"), allowed_domains=(), sandboxed=False,
        install="echo install-broke; exit 2",
    )  # fmt: skip
    assert not result.passed
    assert result.output == "install-broke\nthe install step failed (exit 2), so the app was not started"


def test_an_app_whose_box_bridges_were_late_is_started_again(tmp_path: Path) -> None:
    """srt's socat bridges late on a loaded machine: the app never ran, so it is started again
    (here without the box, where the same rule applies: the runtime's line in the app's log)."""
    count = tmp_path / "tries"
    command = (
        f"n=$(cat {count} 2>/dev/null || echo 0); echo $((n + 1)) > {count}; "
        f'if [ "$n" -lt 2 ]; then echo "Error: {cs.BRIDGES_FAILED} after 5 attempts"; exit 1; fi; '
        'exec python3 -m http.server "$PORT" --bind 127.0.0.1'
    )
    spec = AppSpec(command, "/", 30, "PORT")
    app = start_app(
        spec, tmp_path, tmp_path / "tmp", tmp_path / "app.log", allowed_domains=(), sandboxed=False
    )
    try:
        assert count.read_text().strip() == "3"
        assert urllib.request.urlopen(app.url, timeout=5).status == 200
    finally:
        app.stop()
    once = tmp_path / "once"
    with pytest.raises(AppDidNotStart):  # a plain failure is not tried again
        start_app(
            AppSpec(f"echo tried >> {once}; exit 4", "/", 30, "PORT"),
            tmp_path, tmp_path / "tmp", tmp_path / "b.log", allowed_domains=(), sandboxed=False,
        )  # fmt: skip
    assert once.read_text() == "tried\n"
