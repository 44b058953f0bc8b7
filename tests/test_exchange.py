"""A session's git and files across machines (engine/exchange.py): the start sent through a bare
repository to a worker's own clone and back, exactly; a lost try's changes undone by the next
try's start; claims that do not match the exchange refused; names that climb out refused; the
remote's transports."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import MACHINE, request_for, sh, state_for

from session_scheduler.core.config import AgentConfig, SessionType
from session_scheduler.core.engine import remote_protocol
from session_scheduler.core.errors import GitError
from session_scheduler.core.session import SessionFolder
from session_scheduler.guard import safe_git
from session_scheduler.guard.sandbox import private_tmp
from session_scheduler.repo import gitops
from session_scheduler.run.agent import SessionRequest
from session_scheduler.store.records import Records
from session_scheduler.view.cli import merge_config

WID = "proj-0123456789ab/session-0004/attempt-1"


def _view(clone: Path) -> dict[str, object]:
    """What verification sees of a clone: its branches, what is checked out, its status, its files."""
    repo = safe_git.open(clone)
    files = {
        p.relative_to(clone).as_posix(): p.read_text()
        for p in sorted(clone.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(clone).parts
    }
    return {
        "branches": gitops.branches(repo),
        "head": gitops.current_branch(repo),
        "status": sh(clone, "git status --porcelain --untracked-files=all"),
        "files": files,
    }


@pytest.fixture
def lane(tmp_path: Path) -> SessionRequest:
    """A lane's clone on the scheduler, as a session starts there: `main`, the work's branch
    checked out with an edit not committed and a stray file, an outbox and the `pre/` copies."""
    clone = tmp_path / "p.lanes" / "lane-1"
    clone.mkdir(parents=True)
    sh(clone, "git init -q -b main && git config user.name Ann && git config user.email ann@example.org")
    gitops.ensure_exclude(safe_git.open(clone))
    sh(clone, "echo one > a.txt && git add a.txt && git commit -qm one && git checkout -qb feature/F001")
    sh(clone, "echo two >> a.txt && git commit -qam two && git branch old main && echo edit >> a.txt")
    (clone / "stray.txt").write_text("stray\n")
    outbox = tmp_path / "p" / ".agent_logs" / "session-0004" / "outbox"
    outbox.mkdir(parents=True)
    (outbox / "progress.json").write_text('{"sessions": []}')
    request = request_for(clone, state_for(SessionType.IMPLEMENT), AgentConfig())
    folder = tmp_path / "p" / ".agent_logs" / "session-0004"
    (folder / SessionFolder.PRE).mkdir(parents=True)
    (folder / SessionFolder.PRE / "progress.json").write_text('{"sessions": []}')
    return replace(request, log_dir=folder, records=Records(outbox), lane=1)


@pytest.fixture
def remote(tmp_path: Path) -> str:
    from session_scheduler.engine.exchange import ensure_exchange

    return str(ensure_exchange(tmp_path / "exchange.git"))


def _start(lane: SessionRequest, remote: str, tmp_path: Path) -> tuple[dict[str, object], SessionRequest]:
    from session_scheduler.engine.exchange import Places, receive, send

    start = json.loads(json.dumps(send(lane, remote, WID)))  # as the wire carries it
    here = receive(lane, remote, WID, start, "proj-0123456789ab", Places(tmp_path / "worker"), MACHINE)
    return start, here


def test_a_worker_s_clone_starts_exactly_where_the_lane_s_clone_stands(
    lane: SessionRequest, remote: str, tmp_path: Path
) -> None:
    pytest.importorskip("temporalio")
    before = _view(lane.cwd)
    _, here = _start(lane, remote, tmp_path)
    assert here.cwd == tmp_path / "worker" / "proj-0123456789ab.lanes" / "lane-1"
    seen = _view(here.cwd)
    assert seen["branches"] == before["branches"] and seen["head"] == "feature/F001"
    assert seen["status"] == before["status"] == " M a.txt\n?? stray.txt".strip()
    assert {k: v for k, v in seen["files"].items() if k != here.settings_path.name} == {  # type: ignore[union-attr]
        k: v
        for k, v in before["files"].items()  # type: ignore[union-attr]
        if k != lane.settings_path.name
    }
    assert (here.log_dir / SessionFolder.PRE / "progress.json").read_text() == '{"sessions": []}'
    assert here.records.path("progress.json").read_text() == '{"sessions": []}'
    assert sh(here.cwd, "git config user.email") == "ann@example.org"  # the agent commits as the project does
    git_dir = (
        here.cwd / ".git"
    )  # what the sandbox keeps unwritable exists (a path it denies that does not is unreadable)
    assert (git_dir / "packed-refs").is_file() and (git_dir / "refs" / "heads" / "main").is_file()


def test_the_plan_is_re_rooted_on_the_worker_and_no_path_of_the_scheduler_s_is_left(
    lane: SessionRequest, remote: str, tmp_path: Path
) -> None:
    pytest.importorskip("temporalio")
    from session_scheduler.engine import wire

    _, here = _start(lane, remote, tmp_path)
    text = json.dumps(wire.plan_to_json(here.plan))
    assert str(lane.cwd) not in text and str(private_tmp(lane.cwd)) not in text
    assert str(here.cwd) in json.dumps(here.plan.settings["permissions"])
    assert here.plan.settings["env"]["TMPDIR"] == str(private_tmp(here.cwd))
    filesystem = here.plan.settings["sandbox"]["filesystem"]
    assert str(here.cwd) in filesystem["allowRead"]
    # the worker's other clones, its sessions' folders and outboxes: denied, as a local lane's project
    assert {str(tmp_path / "worker"), str(here.cwd.parent)} <= set(filesystem["denyRead"])
    # and what the scheduler denies its lane, where it is on this host (its project, its exchange)
    assert str(tmp_path) in filesystem["denyRead"] and str(tmp_path / "p.lanes") in filesystem["denyRead"]
    assert not here.log_dir.is_relative_to(here.cwd) and not here.records.root.is_relative_to(here.cwd)
    assert json.loads(here.settings_path.read_text()) == here.plan.settings
    assert here.settings_path.parent == here.cwd


def test_what_the_session_left_on_its_worker_is_put_where_it_would_have_left_it_here(
    lane: SessionRequest, remote: str, tmp_path: Path
) -> None:
    """Commits, a new branch and a deleted one, an edit left uncommitted, a deleted file, the
    outbox, the transcript and the INITIALIZER's feature list in the work tree all come back;
    the `pre/` copies stay the scheduler's."""
    pytest.importorskip("temporalio")
    from session_scheduler.engine.exchange import send, send_back, take_back

    start, here = _start(lane, remote, tmp_path)
    sh(here.cwd, "git commit -qam three && git branch -D old && git branch spare && echo wip > new.txt")
    sh(here.cwd, "rm stray.txt && echo more >> a.txt")
    (here.cwd / "feature_list.json").write_text("[]")
    here.records.path("progress.json").write_text('{"sessions": [{"session_id": 4}]}')
    (here.log_dir / "transcript.jsonl").write_text("{}\n" * 3)
    (here.log_dir / SessionFolder.PRE / "progress.json").write_text("changed on the worker")
    expected = _view(here.cwd)
    back = json.loads(json.dumps(send_back(here, remote, WID, start)))
    take_back(lane, remote, WID, back)
    seen = _view(lane.cwd)
    assert seen["branches"] == expected["branches"] and "old" not in seen["branches"]  # type: ignore[operator]
    assert seen["head"] == "feature/F001" and seen["status"] == expected["status"]
    assert (lane.cwd / "new.txt").read_text() == "wip\n" and not (lane.cwd / "stray.txt").exists()
    assert (lane.cwd / "feature_list.json").read_text() == "[]"
    assert lane.records.path("progress.json").read_text() == '{"sessions": [{"session_id": 4}]}'
    assert (lane.log_dir / "transcript.jsonl").read_text() == "{}\n" * 3
    assert (lane.log_dir / SessionFolder.PRE / "progress.json").read_text() == '{"sessions": []}'
    assert sh(Path(remote), "git for-each-ref") == ""  # the exchange keeps nothing of it
    assert sh(lane.cwd, "git for-each-ref refs/scheduler") == ""  # nothing of the exchange's left here
    send(lane, remote, WID)  # a killed scheduler's rerun, reattaching: it sends the start again,
    take_back(lane, remote, WID, back)  # and takes the ended session's result again: the same
    assert _view(lane.cwd) == seen


def test_a_lost_try_s_changes_are_undone_by_the_next_try_s_start(
    lane: SessionRequest, remote: str, tmp_path: Path
) -> None:
    """What a worker lost mid-session left in its clone (a commit, main moved, a stray and an
    edited file, the outbox written) is not where the next try starts, on that worker or another."""
    pytest.importorskip("temporalio")
    from session_scheduler.engine.exchange import Places, receive

    start, here = _start(lane, remote, tmp_path)
    first = _view(here.cwd)
    sh(here.cwd, "git commit -qam lost && git branch -f main HEAD && echo x > b.txt && echo y >> a.txt")
    here.records.path("progress.json").write_text('{"sessions": [{"session_id": 9}]}')
    again = receive(lane, remote, WID, start, "proj-0123456789ab", Places(tmp_path / "worker"), MACHINE)
    assert _view(again.cwd) == first
    assert again.records.path("progress.json").read_text() == '{"sessions": []}'
    elsewhere = receive(lane, remote, WID, start, "proj-0123456789ab", Places(tmp_path / "other"), MACHINE)
    assert _view(elsewhere.cwd)["branches"] == first["branches"]


def test_a_report_the_exchange_does_not_hold_is_refused(
    lane: SessionRequest, remote: str, tmp_path: Path
) -> None:
    pytest.importorskip("temporalio")
    from session_scheduler.engine.exchange import send_back, take_back

    start, here = _start(lane, remote, tmp_path)
    back = send_back(here, remote, WID, start)
    other = back["tips"]["main"]
    for forged in (
        {**back, "tips": {**back["tips"], "feature/F001": other}},
        {**back, "worktree": other},
        {**back, "files": other},
    ):
        with pytest.raises(GitError, match="not what its worker reported"):
            take_back(lane, remote, WID, forged)


def test_a_start_the_exchange_does_not_hold_is_refused(
    lane: SessionRequest, remote: str, tmp_path: Path
) -> None:
    pytest.importorskip("temporalio")
    from session_scheduler.engine.exchange import Places, receive, send

    start = send(lane, remote, WID)
    other = start["tips"]["feature/F001"]
    for forged in (
        {**start, "tips": {**start["tips"], "main": other}},
        {**start, "worktree": other},
        {**start, "files": other},
    ):
        with pytest.raises(GitError, match="not what the scheduler sent"):
            receive(lane, remote, WID, forged, "proj", Places(tmp_path / "worker"), MACHINE)


def test_a_file_named_to_climb_out_of_its_folder_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("temporalio")
    from session_scheduler.engine.exchange import _write

    (tmp_path / "folder").mkdir()
    with pytest.raises(GitError, match="outside its folder"):
        _write(tmp_path / "folder", "../escaped", b"x")
    assert not (tmp_path / "escaped").exists()
    (tmp_path / "folder" / "link").symlink_to(tmp_path)
    with pytest.raises(GitError, match="outside its folder"):
        _write(tmp_path / "folder", "link/escaped", b"x")
    assert not (tmp_path / "escaped").exists()


@pytest.mark.parametrize(
    ("url", "protocol"),
    [
        ("/srv/git/app.git", "file"),
        ("file:///srv/git/app.git", "file"),
        ("ssh://git@example.org/app.git", "ssh"),
        ("git@example.org:team/app.git", "ssh"),
        ("https://example.org/app.git", "https"),
        ("git://10.0.0.2/app.git", "git"),
    ],
)
def test_the_exchange_s_transport_is_read_from_its_url(url: str, protocol: str) -> None:
    assert remote_protocol(url) == protocol


@pytest.mark.parametrize(
    "url", ["ext::sh -c touch% /tmp/pwned", "fd::3", "relative/app.git", "ftp://h/a.git", ""]
)
def test_a_remote_that_would_run_a_command_or_is_no_url_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="--git-remote"):
        remote_protocol(url)
    with pytest.raises(Exception, match=r"git-remote|git_remote"):
        merge_config(None, {"engine": "temporal://local", "git_remote": url})


def test_a_git_remote_that_cannot_be_reached_is_said_in_one_line_before_the_run(tmp_path: Path) -> None:
    pytest.importorskip("temporalio")
    from session_scheduler.core.errors import ConfigError
    from session_scheduler.engine.exchange import check

    with pytest.raises(ConfigError) as refused:
        check(str(tmp_path / "nowhere.git"))
    said = str(refused.value)
    assert said.startswith(f"cannot reach the git remote {tmp_path / 'nowhere.git'}: fatal: ")
    assert said.endswith("check --git-remote (saved with the project; every worker pushes there)")
    assert "\n" not in said


def test_workers_on_other_machines_go_through_the_exchange_the_run_serves(
    lane: SessionRequest, remote: str, tmp_path: Path
) -> None:
    """`--git-serve`: the scheduler's own exchange served by `git daemon`; the worker's side goes
    through git:// only, and the session comes back exactly as through the path."""
    pytest.importorskip("temporalio")
    from session_scheduler.engine.devserver import free_port
    from session_scheduler.engine.exchange import Places, receive, send, send_back, take_back
    from session_scheduler.engine.gitdaemon import served

    with served(Path(remote), f"127.0.0.1:{free_port()}", tmp_path / "daemon.log") as url:
        assert url.startswith("git://127.0.0.1:") and url.endswith("/exchange.git")
        start = send(lane, remote, WID)
        here = receive(lane, url, WID, start, "proj", Places(tmp_path / "worker"), MACHINE)
        sh(here.cwd, "git commit -qam three && echo wip > new.txt")
        expected = _view(here.cwd)
        take_back(lane, remote, WID, send_back(here, url, WID, start))
    assert _view(lane.cwd)["branches"] == expected["branches"]
    assert (lane.cwd / "new.txt").read_text() == "wip\n"


def test_an_address_the_daemon_cannot_serve_is_said_in_one_line(remote: str, tmp_path: Path) -> None:
    pytest.importorskip("temporalio")
    import socket

    from session_scheduler.core.errors import ConfigError
    from session_scheduler.engine.gitdaemon import served

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with (
            pytest.raises(ConfigError) as refused,
            served(Path(remote), f"127.0.0.1:{port}", tmp_path / "d.log"),
        ):
            pass
    said = str(refused.value)
    assert said.startswith(f"cannot serve the exchange at 127.0.0.1:{port} (") and "\n" not in said
    assert said.endswith("choose another --git-serve address")


@pytest.mark.parametrize(
    ("given", "wrong"),
    [
        ({"git_serve": "0.0.0.0"}, "HOST:PORT"),
        ({"git_serve": "h:70000"}, "HOST:PORT"),
        ({"git_serve": "127.0.0.1:9418", "git_remote": "/srv/app.git"}, "not both"),
    ],
)
def test_a_serving_address_that_is_none_or_with_a_remote_is_refused(
    given: dict[str, str], wrong: str
) -> None:
    from session_scheduler.core.errors import ConfigError

    with pytest.raises(ConfigError, match=wrong):
        merge_config(None, {"engine": "temporal://local", **given})
    assert merge_config(None, {"git_serve": "0.0.0.0:9418"}).to_json()["git_serve"] == "0.0.0.0:9418"


def test_a_lost_try_s_branches_are_not_left_on_the_exchange_by_the_next_try(
    lane: SessionRequest, remote: str, tmp_path: Path
) -> None:
    """A try that pushed what it left and was then lost (its report never reached the scheduler):
    the next try's push replaces it whole; a branch only the lost try had is not taken back."""
    pytest.importorskip("temporalio")
    from session_scheduler.engine.exchange import Places, receive, send_back, take_back

    start, here = _start(lane, remote, tmp_path)
    sh(here.cwd, "git branch spare")
    send_back(here, remote, WID, start)
    assert "back/heads/spare" in sh(Path(remote), "git for-each-ref --format='%(refname)'")
    again = receive(lane, remote, WID, start, "proj-0123456789ab", Places(tmp_path / "other"), MACHINE)
    back = send_back(again, remote, WID, start)
    assert "spare" not in sh(Path(remote), "git for-each-ref --format='%(refname)'")
    take_back(lane, remote, WID, back)
    assert "spare" not in gitops.branches(safe_git.open(lane.cwd))


def test_the_served_exchange_dies_with_a_killed_run_and_its_rerun_serves_the_same_port(
    remote: str, tmp_path: Path
) -> None:
    """`kill -9` of the scheduler: its `git daemon` goes with it (else the rerun's `--git-serve`
    finds its port taken)."""
    pytest.importorskip("temporalio")
    import signal
    import subprocess
    import sys
    import time

    from session_scheduler.engine.devserver import free_port
    from session_scheduler.engine.gitdaemon import served

    address = f"127.0.0.1:{free_port()}"
    script = (
        "import sys, time; from pathlib import Path; from session_scheduler.engine.gitdaemon import served\n"
        f"with served(Path({remote!r}), {address!r}, Path({str(tmp_path / 'd.log')!r})) as url:\n"
        "    print(url, flush=True); time.sleep(600)\n"
    )
    run = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert run.stdout is not None and run.stdout.readline().startswith("git://")
    run.send_signal(signal.SIGKILL)
    run.wait()

    def daemons() -> list[str]:
        found = []
        for entry in Path("/proc").iterdir():
            try:
                args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "daemon" in args and remote in args and "--base-path" in args:
                found.append(args)
        return found

    deadline = time.monotonic() + 10
    while daemons():
        assert time.monotonic() < deadline, "the killed run's git daemon still runs"
        time.sleep(0.1)
    with served(Path(remote), address, tmp_path / "again.log") as url:
        assert url == f"git://{address}/exchange.git"


def test_a_remote_that_is_not_there_is_refused_before_anything_is_saved_and_none_takes_it_back(
    tmp_path: Path,
) -> None:
    pytest.importorskip("temporalio")
    from click.testing import CliRunner

    from session_scheduler.testing.seams import active_sandbox
    from session_scheduler.view.cli import main

    project = tmp_path / "p"
    args = ["--project-dir", str(project), "--offline-demo", "--engine", "temporal://local"]
    result = CliRunner().invoke(
        main, [*args, "--git-remote", "/nonexistent.git"], obj={"preflight": active_sandbox}
    )
    assert result.exit_code == 1 and "cannot reach the git remote /nonexistent.git" in result.output
    assert not project.exists(), "nothing created, nothing saved"
    saved = merge_config(None, {"git_remote": "/srv/app.git", "git_serve": None}).to_json()
    assert merge_config(saved, {"git_remote": "none"}).git_remote is None
    assert (
        merge_config(saved, {"git_remote": "none", "git_serve": "0.0.0.0:9418"}).git_serve == "0.0.0.0:9418"
    )
    served = merge_config(None, {"git_serve": "0.0.0.0:9418"}).to_json()
    assert merge_config(served, {"git_serve": "none"}).git_serve is None
