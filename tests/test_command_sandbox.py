"""The commands the scheduler runs on agents' code run inside the sandbox runtime (srt): writes only
in the worktree and a private temp, no reads of denied folders, no inherited secrets, no network
but the allowed domains, killed whole at a timeout."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import git
import pytest
from helpers import Listener, listening, running, short_tmp, wait_until

from session_scheduler.core.confinement import Host
from session_scheduler.guard import command_sandbox as cs
from session_scheduler.guard.command_sandbox import Profile, SandboxUnavailable
from session_scheduler.repo import gitops

tmp_path = pytest.fixture(short_tmp, name="tmp_path")
"""Each test's folder, short: the sockets made under it fit a Unix socket's path (helpers.short_tmp)."""


# --- pure: the profile and the settings as data ------------------------------------------------


def test_the_settings_write_only_the_worktree_and_temp_and_reach_only_the_allowed_domains() -> None:
    profile = Profile(
        writable=("/w/tree",),
        private_tmp="/w/tmp",
        allowed_domains=("pypi.org", "127.0.0.1:9"),
        denied_reads=("/root", "/p"),
        reopened_reads=("/root/.pyenv",),
    )
    assert cs.srt_settings(profile, "/rt") == {
        "filesystem": {
            "denyRead": ["/root", "/p"],
            "allowRead": ["/w/tree", "/w/tmp", "/root/.pyenv", "/rt"],
            "allowWrite": ["/w/tree", "/w/tmp"],
            "denyWrite": ["/tmp/claude"],
        },
        "network": {"allowedDomains": ["pypi.org", "127.0.0.1:9"], "deniedDomains": []},
    }


def test_the_profile_denies_homes_config_other_projects_and_temp_folders() -> None:
    host = Host(
        homes=("/home/u", "/root", "/home"), config_dir="/etc/claude", secret_env=(),
        path=("/home/u/.pyenv/shims", "/home/bob/.cargo/bin", "/etc/claude/local/bin", "/usr/bin"), temp="/scratch",
    )  # fmt: skip
    profile = cs.profile_for(Path("/t/tree"), Path("/t/tmp"), Path("/work/gen/app"), ["pypi.org"], host)
    assert profile == Profile(
        writable=("/t/tree",),
        private_tmp="/t/tmp",
        allowed_domains=("pypi.org",),
        denied_reads=(
            "/home/u", "/root", "/home", "/etc/claude", "/work/gen", "/tmp", "/var/tmp", "/scratch",
            "/home/u/.cargo/credentials", "/home/u/.cargo/credentials.toml", "/home/u/.local/share/keyrings",
            "/root/.cargo/credentials", "/root/.cargo/credentials.toml", "/root/.local/share/keyrings",
            "/home/bob/.cargo/credentials", "/home/bob/.cargo/credentials.toml",
        ),
        reopened_reads=("/home/u/.pyenv", "/home/bob/.cargo"),
    )  # fmt: skip


def test_the_environment_is_built_from_scratch() -> None:
    profile = Profile(("/w/tree",), "/w/tmp", (), (), ())
    assert cs.scrubbed_env(profile, "/usr/bin:/bin") == {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "HOME": "/w/tmp/home",
        "TMPDIR": "/w/tmp",
        "CLAUDE_CODE_TMPDIR": "/w/tmp",
    }


# --- finding the runtime ------------------------------------------------------------------------


def _executable(path: Path, text: str = "#!/bin/sh\n") -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_the_override_comes_first_then_the_local_install_then_path(tmp_path: Path) -> None:
    override, local = _executable(tmp_path / "mine"), _executable(tmp_path / "local")
    everywhere = lambda name: f"/usr/bin/{name}"  # noqa: E731
    assert cs.find_runtime({cs.RUNTIME_ENV: str(override)}, everywhere, local) == str(override)
    assert cs.find_runtime({}, everywhere, local) == str(local)
    assert cs.find_runtime({}, everywhere, tmp_path / "absent") == "/usr/bin/srt"


@pytest.mark.parametrize("override", ["absent", "not-executable"])
def test_an_unusable_override_is_refused(tmp_path: Path, override: str) -> None:
    (tmp_path / "not-executable").write_text("")
    with pytest.raises(SandboxUnavailable, match=f"{cs.RUNTIME_ENV}=.*{override}.*npm ci"):
        cs.find_runtime(
            {cs.RUNTIME_ENV: str(tmp_path / override)}, lambda name: f"/usr/bin/{name}", tmp_path / "absent"
        )


def test_a_missing_runtime_says_how_to_install_it(tmp_path: Path) -> None:
    with pytest.raises(SandboxUnavailable) as caught:
        cs.find_runtime({}, lambda name: None if name == "srt" else f"/usr/bin/{name}", tmp_path / "absent")
    message = str(caught.value)
    assert "`srt` is not installed" in message
    assert f"`npm ci` in {cs.SCHEDULER_DIR}" in message
    assert "apt-get install bubblewrap socat ripgrep" in message


@pytest.mark.parametrize("tool", cs.REQUIRED_TOOLS)
def test_a_missing_tool_is_named(tmp_path: Path, tool: str) -> None:
    local = _executable(tmp_path / "srt")
    with pytest.raises(SandboxUnavailable, match=f"needs {tool} on PATH; install"):
        cs.find_runtime({}, lambda name: None if name == tool else f"/usr/bin/{name}", local)


def test_run_sandboxed_with_a_missing_runtime_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cs.RUNTIME_ENV, str(tmp_path / "srt"))
    with pytest.raises(SandboxUnavailable, match="npm ci"):
        cs.run_sandboxed("true", tmp_path, Profile((str(tmp_path),), str(tmp_path / "tmp"), (), (), ()), 10)


def test_the_runtime_folder_is_the_package_above_its_real_script(tmp_path: Path) -> None:
    package = tmp_path / "node_modules" / "@anthropic-ai" / "sandbox-runtime"
    (package / "dist").mkdir(parents=True)
    (tmp_path / "node_modules" / ".bin").mkdir()
    link = tmp_path / "node_modules" / ".bin" / "srt"
    link.symlink_to(_executable(package / "dist" / "cli.js"))
    assert cs.runtime_dir(str(link)) == str(package)


# --- a runtime that fails before the command starts is not the command failing --------------------

FAKE_RUNS = '#!/bin/sh\n[ "$1" = --settings ] && [ -f "$2" ] && [ "$3" = -c ] && exec bash -c "$4"\nexit 99\n'


def test_a_runtime_failing_before_the_command_is_unavailable_not_a_failed_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        cs.RUNTIME_ENV, str(_executable(tmp_path / "srt", '#!/bin/sh\necho "Error: boom" >&2\nexit 1\n'))
    )
    with pytest.raises(SandboxUnavailable, match="could not run the command \\(Error: boom\\)"):
        cs.run_sandboxed("true", tmp_path, Profile((str(tmp_path),), str(tmp_path / "tmp"), (), (), ()), 10)


def test_a_runtime_whose_bridges_were_late_is_tried_again_and_then_said_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """srt waits only 600 ms for its socat bridges: on a loaded machine the command is run again."""
    late = (
        '#!/bin/sh\ncount=$(cat "$0.tries" 2>/dev/null || echo 0); echo $((count + 1)) > "$0.tries"\n'
        f'[ "$count" -lt "$(cat "$0.late")" ] && echo "Error: {cs.BRIDGES_FAILED} after 5 attempts" && exit 1\n'
        'exec bash -c "$4"\n'
    )
    monkeypatch.setenv(cs.RUNTIME_ENV, str(_executable(tmp_path / "srt", late)))
    (tmp_path / "srt.late").write_text("2")
    profile = Profile((str(tmp_path),), str(tmp_path / "tmp"), (), (), ())
    assert cs.run_sandboxed("echo ran", tmp_path, profile, 10) == (0, "ran\n")
    assert (tmp_path / "srt.tries").read_text().strip() == "3"  # two late, the third ran it
    (tmp_path / "srt.tries").unlink()
    (tmp_path / "srt.late").write_text("9")
    with pytest.raises(SandboxUnavailable, match=cs.BRIDGES_FAILED):
        cs.run_sandboxed("echo ran", tmp_path, profile, 10)
    assert (tmp_path / "srt.tries").read_text().strip() == str(cs.BRIDGE_TRIES)


def test_a_command_that_ran_and_failed_is_a_failed_command_with_its_own_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cs.RUNTIME_ENV, str(_executable(tmp_path / "srt", FAKE_RUNS)))
    profile = Profile((str(tmp_path),), str(tmp_path / "tmp"), (), (), ())
    assert cs.run_sandboxed("echo Error: mine; exit 1", tmp_path, profile, 10) == (1, "Error: mine\n")
    assert (tmp_path / "tmp" / "home").is_dir()


def test_the_output_kept_is_its_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cs.RUNTIME_ENV, str(_executable(tmp_path / "srt", FAKE_RUNS)))
    profile = Profile((str(tmp_path),), str(tmp_path / "tmp"), (), (), ())
    code, output = cs.run_sandboxed(
        f"head -c {cs.OUTPUT_LIMIT + 10} /dev/zero | tr '\\0' a; echo END", tmp_path, profile, 10
    )
    assert (code, len(output), output[-4:]) == (0, cs.OUTPUT_LIMIT, "END\n")


@pytest.mark.parametrize(
    ("inside", "escaped", "read_secret", "ok", "says"),
    [
        (True, False, False, True, "is active"),
        (True, True, False, False, "wrote outside"),
        (True, False, True, False, "read a file in a denied folder"),
        (False, False, False, False, "blocks writes inside"),
    ],
)
def test_the_preflight_judges_the_probe(
    inside: bool, escaped: bool, read_secret: bool, ok: bool, says: str
) -> None:
    judged = cs._judge(inside, escaped, read_secret)
    assert judged[0] is ok and says in judged[1]


def test_the_preflight_reports_a_missing_runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cs.RUNTIME_ENV, str(tmp_path / "srt"))
    ok, message = cs.preflight()
    assert not ok and "npm ci" in message


def test_the_preflight_reports_a_probe_that_hangs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cs.RUNTIME_ENV, str(_executable(tmp_path / "srt", "#!/bin/sh\nexec sleep 30\n")))
    monkeypatch.setattr(cs, "PROBE_TIMEOUT", 0.5)
    assert cs.preflight() == (False, f"the command sandbox probe timed out; {cs.INSTALL_HINT}")


# --- the real runtime ---------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path, runtime: str) -> Path:
    tree = tmp_path / "run" / "tree"
    tree.mkdir(parents=True)
    return tree


def real(tree: Path, domains: tuple[str, ...] = ()) -> Profile:
    """This machine's profile for a worktree of the project `projects/app` beside `tree`."""
    return cs.host_profile(tree, tree.parent / "tmp", tree.parent.parent / "projects" / "app", domains)


def bare(tree: Path, denied: tuple[str, ...] = (), reopened: tuple[str, ...] = ()) -> Profile:
    """A profile that denies only `denied`: what lies outside is read-only, not hidden."""
    return Profile((str(tree),), str(tree.parent / "tmp"), (), denied, reopened)


def test_a_command_writes_its_worktree_and_private_temp(tree: Path) -> None:
    code, output = cs.run_sandboxed(
        'echo made > made.txt && echo t > "$TMPDIR/t" && echo "$HOME"', tree, real(tree), 30
    )
    assert (code, output) == (0, f"{tree.parent / 'tmp' / 'home'}\n")
    assert (tree / "made.txt").read_text() == "made\n"
    assert (tree.parent / "tmp" / "t").read_text() == "t\n"


def test_a_command_cannot_write_outside_its_worktree(tree: Path) -> None:
    outside = tree.parent.parent / "outside.txt"
    outside.write_text("original\n")
    code, output = cs.run_sandboxed(f"echo evil > {outside}", tree, bare(tree), 30)
    assert code != 0 and "Read-only file system" in output
    cs.run_sandboxed(
        f"echo evil > {outside}", tree, real(tree), 30
    )  # inside a denied region: a throwaway copy
    assert outside.read_text() == "original\n"


def test_a_command_cannot_write_the_runtime_s_shared_temp(tree: Path) -> None:
    shared = Path("/tmp/claude")
    made = not shared.exists()
    shared.mkdir(exist_ok=True)
    try:
        code, output = cs.run_sandboxed(f"touch {shared}/planted-by-test", tree, bare(tree), 30)
        assert code != 0 and "Read-only file system" in output
        assert not (shared / "planted-by-test").exists()
    finally:
        (shared / "planted-by-test").unlink(missing_ok=True)
        if made:
            with contextlib.suppress(OSError):
                shared.rmdir()


def test_a_command_cannot_read_a_denied_folder_but_reads_what_is_reopened(tree: Path) -> None:
    secrets = tree.parent.parent / "vault"
    (secrets / "tool").mkdir(parents=True)
    (secrets / "secret").write_text("s3cr3t-value\n")
    (secrets / "tool" / "readme").write_text("tool-text\n")
    _, output = cs.run_sandboxed(
        f"cat {secrets}/secret; cat {secrets}/tool/readme",
        tree,
        bare(tree, (str(secrets),), (str(secrets / "tool"),)),
        30,
    )
    assert "s3cr3t-value" not in output and "tool-text" in output


def test_a_command_cannot_read_another_project(tree: Path) -> None:
    other = tree.parent.parent / "projects" / "other"
    other.mkdir(parents=True)
    (other / "secret").write_text("other-project-secret\n")
    code, output = cs.run_sandboxed(f"cat {other}/secret", tree, real(tree), 30)
    assert code != 0 and "other-project-secret" not in output


def test_the_runtime_s_own_folder_stays_readable_when_a_denied_region_holds_it(
    tree: Path, runtime: str
) -> None:
    assert cs.run_sandboxed("echo ok", tree, bare(tree, (cs.runtime_dir(runtime),)), 30) == (0, "ok\n")


def test_a_command_reads_nothing_from_the_scheduler_s_stdin(tree: Path) -> None:
    read, write = os.pipe()
    os.write(write, b"typed-at-the-scheduler\n")
    os.close(write)
    saved = os.dup(0)
    os.dup2(read, 0)
    try:
        assert cs.run_sandboxed("cat", tree, real(tree), 30) == (0, "")
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(read)


def test_a_command_sees_none_of_the_scheduler_s_secrets(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    planted = {
        "ANTHROPIC_API_KEY": "sk-ant-planted",
        "GITHUB_TOKEN": "ghp-planted",
        "MY_SERVICE_PASSWORD": "pw-planted",
    }
    for name, value in planted.items():
        monkeypatch.setenv(name, value)
    code, output = cs.run_sandboxed("env", tree, real(tree), 30)
    assert code == 0 and "HOME=" in output
    for name, value in planted.items():
        assert name not in output and value not in output


@pytest.fixture
def listener() -> Iterator[Listener]:
    with listening() as served:
        yield served


GET = (
    "import sys, urllib.request, urllib.error\n"
    "try:\n    print('status', urllib.request.urlopen(sys.argv[1], timeout=10).status)\n"
    "except urllib.error.HTTPError as e:\n    print('http', e.code)\n"
    "except OSError as e:\n    print('error', e)\n"
)


def _fetch(tree: Path, port: int, profile: Profile) -> str:
    (tree / "get.py").write_text(GET)
    url = f"http://127.0.0.1:{port}/"
    command = f"python3 get.py {url}; env -u no_proxy -u NO_PROXY python3 get.py {url}"  # directly, then by the proxy
    code, output = cs.run_sandboxed(command, tree, profile, 60)
    assert code == 0, output
    return output


def test_a_command_cannot_reach_a_loopback_listener_that_is_not_allowed(
    tree: Path, listener: Listener
) -> None:
    output = _fetch(tree, listener.port, real(tree, ("pypi.org",)))
    assert output.splitlines() == ["error <urlopen error [Errno 111] Connection refused>", "http 403"]
    assert listener.hits == 0


def test_an_allowed_destination_is_reached_through_the_proxy(tree: Path, listener: Listener) -> None:
    output = _fetch(tree, listener.port, real(tree, (f"127.0.0.1:{listener.port}",)))
    assert output.splitlines()[1] == "status 200"
    assert listener.hits == 1


def test_a_timeout_kills_the_command_and_everything_it_started(tree: Path) -> None:
    marker = f"{31 + os.getpid() % 1000 / 1000:.3f}"
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as caught:
        cs.run_sandboxed(f"echo started; (sleep {marker} &); sleep {marker}", tree, real(tree), 3)
    assert time.monotonic() - start < 15
    assert caught.value.timeout == 3 and caught.value.output == "started\n"
    wait_until(lambda: running(f"sleep\0{marker}") == [], "every process of the command to end", 5)


def test_an_interrupted_wait_kills_the_command_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = f"{32 + os.getpid() % 1000 / 1000:.3f}"
    monkeypatch.setenv(
        cs.RUNTIME_ENV, str(_executable(tmp_path / "srt", f"#!/bin/sh\nexec sleep {marker}\n"))
    )
    wait = subprocess.Popen.wait

    def interrupted(proc: subprocess.Popen[bytes], timeout: float | None = None) -> int:
        if timeout is not None:
            raise KeyboardInterrupt
        return wait(proc)

    monkeypatch.setattr(subprocess.Popen, "wait", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cs.run_sandboxed("true", tmp_path, Profile((str(tmp_path),), str(tmp_path / "tmp"), (), (), ()), 10)
    assert running(f"sleep\0{marker}") == []


def test_the_preflight_proves_the_sandbox(runtime: str) -> None:
    assert cs.preflight() == (
        True,
        "the command sandbox is active: a probe could not write outside its worktree nor read a denied folder",
    )


WEAKENED = """#!{python}
import json, os, sys
settings = json.load(open(sys.argv[2]))
fs = settings["filesystem"]
{change}
fs["allowRead"].append({real_dir!r})
json.dump(settings, open(sys.argv[2], "w"))
os.execv({real!r}, [{real!r}, *sys.argv[1:]])
"""


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ('fs["denyRead"] = []', "read a file in a denied folder"),
        ('fs["allowWrite"] = fs["allowWrite"][1:]', "blocks writes inside the worktree too"),
        ('fs["denyRead"] = []; fs["allowWrite"].append("/")', "wrote outside its worktree"),
    ],
)
def test_the_preflight_notices_a_weakened_sandbox(
    runtime: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str, says: str
) -> None:
    text = WEAKENED.format(
        python=sys.executable, change=change, real=runtime, real_dir=cs.runtime_dir(runtime)
    )
    monkeypatch.setenv(cs.RUNTIME_ENV, str(_executable(tmp_path / "srt", text)))
    ok, message = cs.preflight()
    assert not ok and says in message, message


# --- run_tests_at -------------------------------------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path, runtime: str) -> git.Repo:
    project = tmp_path / "projects" / "app"
    project.mkdir(parents=True)
    (project / "app_spec.txt").write_text("spec\n")
    return gitops.open_repo(project)


def test_run_tests_at_passes_and_fails_on_the_exit_code(repo: git.Repo) -> None:
    sha = repo.head.commit.hexsha
    assert gitops.run_tests_at(repo, sha, "cat app_spec.txt") == (True, "spec\n")
    assert gitops.run_tests_at(repo, sha, "echo broken; exit 1") == (False, "broken\n")
    assert gitops.run_tests_at(repo, sha, "sleep 30", timeout=1) == (False, "test command timed out after 1s")
    assert repo.git.worktree("list").count("\n") == 0  # every worktree removed


def test_run_tests_at_cannot_write_outside_its_worktree(repo: git.Repo, tmp_path: Path) -> None:
    project = Path(repo.working_dir)
    beside = tmp_path / "beside.txt"
    beside.write_text("original\n")
    passed, _ = gitops.run_tests_at(
        repo, repo.head.commit.hexsha, f"echo evil > {project}/app_spec.txt; echo evil > {beside}"
    )
    assert not passed
    assert (project / "app_spec.txt").read_text() == "spec\n" and beside.read_text() == "original\n"


def test_run_tests_at_unsandboxed_when_the_project_says_no_sandbox(repo: git.Repo, tmp_path: Path) -> None:
    """--no-sandbox (warned on every session) runs the test command unconfined, as before."""
    beside = tmp_path / "beside.txt"
    assert gitops.run_tests_at(repo, repo.head.commit.hexsha, f"touch {beside}", sandboxed=False) == (
        True,
        "",
    )
    assert beside.exists()


def test_run_tests_at_reaches_only_the_allowed_domains(repo: git.Repo, listener: Listener) -> None:
    (Path(repo.working_dir) / "get.py").write_text(GET)
    repo.index.add(["get.py"])
    repo.index.commit("get")
    fetch = f"env -u no_proxy -u NO_PROXY python3 get.py http://127.0.0.1:{listener.port}/"
    assert gitops.run_tests_at(repo, repo.head.commit.hexsha, fetch) == (True, "http 403\n")
    allowed = (f"127.0.0.1:{listener.port}",)
    assert gitops.run_tests_at(repo, repo.head.commit.hexsha, fetch, allowed_domains=allowed) == (
        True,
        "status 200\n",
    )
    assert listener.hits == 1


def test_a_private_temp_too_long_for_the_runtime_s_sockets_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cs.RUNTIME_ENV, str(_executable(tmp_path / "srt", FAKE_RUNS)))
    long_tmp = tmp_path / ("x" * 90)
    with pytest.raises(SandboxUnavailable, match="too long for the sandbox runtime's Unix sockets"):
        cs.run_sandboxed("true", tmp_path, Profile((str(tmp_path),), str(long_tmp), (), (), ()), 10)
    assert (
        cs.run_sandboxed("true", tmp_path, Profile((str(tmp_path),), str(tmp_path / "tmp"), (), (), ()), 10)[
            0
        ]
        == 0
    )
