"""What a session leaves running in the project is stopped; nothing older, nothing of ours."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import wait_until

from session_scheduler.guard import processes

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")


def test_a_left_dev_server_is_stopped_and_an_older_process_is_not(tmp_path: Path) -> None:
    older = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=tmp_path)
    # left_in allows a second for /proc's whole-second boot time: wait until `older` is past that
    wait_until(lambda: time.time() - 1 > processes._started_at(older.pid), "the older process to be older", 5)
    since = time.time()
    server = subprocess.Popen(
        ["sh", "-c", "trap '' TERM; sleep 60"], cwd=tmp_path / ".", start_new_session=True
    )
    (tmp_path / "sub").mkdir()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=tmp_path / "sub")
    sibling = Path(f"{tmp_path}-sibling")  # a folder whose name starts with the project's
    sibling.mkdir()
    elsewhere = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=sibling)
    try:
        wait_until(
            lambda: set(processes.left_in(tmp_path, since)) - {server.pid, child.pid},
            "the shell's `sleep`",
            5,
        )
        found = processes.left_in(tmp_path, since)  # the shell's `sleep` too
        assert {server.pid, child.pid} <= set(found) and older.pid not in found and elsewhere.pid not in found
        assert processes.stop_left_in(tmp_path, since, grace_s=0.5) == found
        assert (
            server.wait(timeout=5) is not None and child.wait(timeout=5) is not None
        )  # TERM ignored: KILLed
        assert older.poll() is None and elsewhere.poll() is None
        assert processes.left_in(tmp_path, since) == []
    finally:
        for proc in (older, server, child, elsewhere):
            proc.kill()
            proc.wait()


def test_this_process_is_never_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert processes.left_in(tmp_path, 0) == []


def test_the_schedulers_own_git_helper_is_never_swept(tmp_path: Path) -> None:
    """GitPython keeps `git cat-file --batch-check` running in the project: not the agent's."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    since = time.time() - 0.5
    helper = subprocess.Popen(
        ["git", "cat-file", "--batch-check"], cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    agents = subprocess.Popen(
        ["sh", "-c", "git cat-file --batch-check; :"], cwd=tmp_path, stdin=subprocess.PIPE
    )
    try:
        wait_until(
            lambda: len(processes.left_in(tmp_path, since)) >= 2, "the agent's own git, a grandchild", 5
        )
        found = processes.left_in(tmp_path, since)
        assert helper.pid not in found and agents.pid in found
        assert len(found) == 2, "the agent's own git, a grandchild, is swept with its shell"
    finally:
        for proc in (helper, agents):
            proc.kill()
            proc.wait()


def test_what_a_killed_run_s_sessions_left_is_found_by_their_tmpdir(tmp_path: Path) -> None:
    """Orphans of a killed run (a CLI's sandbox bridge, an agent's server), whenever they started
    and wherever they run, carry the project's TMPDIR; a person's process with another does not."""
    ours, other = tmp_path / "agent-tmp", tmp_path / "agent-tmp-2"  # one's name starts the other's
    env = {"PATH": "/usr/bin:/bin"}
    orphan = subprocess.Popen(
        ["sh", "-c", "trap '' TERM; sleep 60"], env={**env, "TMPDIR": str(ours)}, start_new_session=True
    )
    persons = [
        subprocess.Popen(["sleep", "60"], env={**env, "TMPDIR": str(other)}, start_new_session=True),
        subprocess.Popen(["sleep", "60"], env=env, cwd=tmp_path, start_new_session=True),
    ]
    try:
        wait_until(lambda: orphan.pid in processes.with_tmpdir(ours), "the orphan to be listed", 5)
        found = processes.with_tmpdir(ours)  # the shell and its `sleep`
        assert orphan.pid in found and not {p.pid for p in persons} & set(found)
        assert processes.stop_with_tmpdir(ours, grace_s=0.5) == found
        assert orphan.wait(timeout=5) is not None and processes.with_tmpdir(ours) == []
        assert all(p.poll() is None for p in persons)
    finally:
        for proc in (orphan, *persons):
            proc.kill()
            proc.wait()
