"""The commands the scheduler itself runs on agents' code (the test command after a merge) run
sandboxed, in Anthropic's sandbox runtime `srt` (@anthropic-ai/sandbox-runtime, pinned in
package.json; bubblewrap + socat on Linux, network only through its proxy).

A command writes only its worktree and a private temp folder; it reads neither home folders,
nor Claude Code's config, nor other projects, nor the temp folders beside its own (toolchains on
PATH are re-opened: confinement.py's rules, shared with the session's sandbox); it reaches only the project's allowed domains; its environment is built
from scratch (no credentials). `profile_for` and `srt_settings` are pure; `spawn` is the one place
a command starts (`run_sandboxed` waits for it; guard/app_box keeps an app running in it).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from session_scheduler.core.confinement import Host, denied_regions, kept_denied, reopened
from session_scheduler.core.errors import SchedulerError

SCHEDULER_DIR = Path(__file__).resolve().parents[2]
RUNTIME_ENV = "AGENT_SANDBOX_RUNTIME"
"""Names the `srt` executable to use instead of the one `npm ci` installs here."""
LOCAL_RUNTIME = SCHEDULER_DIR / "node_modules" / ".bin" / "srt"
REQUIRED_TOOLS: tuple[str, ...] = ("node", "bwrap", "socat", "rg")
"""What `srt` needs on PATH on Linux (it refuses to run without ripgrep)."""
INSTALL_HINT = (
    f"install the sandbox runtime: `npm ci` in {SCHEDULER_DIR} (node and npm needed), and "
    "`apt-get install bubblewrap socat ripgrep` (Debian/Ubuntu)"
)

SHARED_WRITE_DENIED: tuple[str, ...] = ("/tmp/claude",)
"""srt keeps /tmp/claude writable whenever it exists (its default TMPDIR); shared, so denied."""
OUTPUT_LIMIT = 64_000
"""Bytes of the command's output kept (the end)."""


class SandboxUnavailable(SchedulerError):
    """The sandbox runtime is missing or could not start a command: a person must install it."""


@dataclass(frozen=True)
class Profile:
    """What one sandboxed command may touch."""

    writable: tuple[str, ...]
    """Folders it may write (its worktree)."""
    private_tmp: str
    """Its TMPDIR, writable; HOME is a scratch folder inside."""
    allowed_domains: tuple[str, ...]
    denied_reads: tuple[str, ...]
    reopened_reads: tuple[str, ...]
    """Folders inside the denied regions it may read (toolchains)."""
    read_only: tuple[str, ...] = ()
    """Folders it may read but not write (the app box's tree)."""
    unix_sockets: bool = False
    """May create Unix sockets (the app box's bridge): srt then drops its seccomp layer and gives
    bubblewrap `--disable-userns` instead, so no new user namespace either way."""


def profile_for(
    worktree: Path, private_tmp: Path, project: Path, allowed_domains: Iterable[str], host: Host
) -> Profile:
    """The profile of a command run in `worktree`, a checkout of `project` kept outside it."""
    regions = denied_regions(project, host)
    opened = reopened(host.path, regions, (host.config_dir,))
    return Profile(
        writable=(str(worktree),),
        private_tmp=str(private_tmp),
        allowed_domains=tuple(allowed_domains),
        denied_reads=(*regions, *kept_denied(host.homes, opened)),
        reopened_reads=opened,
    )


def srt_settings(profile: Profile, runtime_dir: str) -> dict[str, Any]:
    """The srt settings file: writes only the worktree and private temp; reads denied by region,
    re-opened for the worktree, the temp, toolchains and the runtime's own helpers."""
    writable = [*profile.writable, profile.private_tmp]
    network: dict[str, Any] = {"allowedDomains": list(profile.allowed_domains), "deniedDomains": []}
    if profile.unix_sockets:
        network["allowAllUnixSockets"] = True
    return {
        "filesystem": {
            "denyRead": list(profile.denied_reads),
            "allowRead": [*writable, *profile.read_only, *profile.reopened_reads, runtime_dir],
            "allowWrite": writable,
            "denyWrite": list(SHARED_WRITE_DENIED),
        },
        "network": network,
    }


def scrubbed_env(profile: Profile, path: str) -> dict[str, str]:
    """The whole environment of srt and the command: built from scratch, no credentials."""
    tmp = profile.private_tmp
    return {
        "PATH": path,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "HOME": str(Path(tmp, "home")),
        "TMPDIR": tmp,
        "CLAUDE_CODE_TMPDIR": tmp,  # srt sets the command's TMPDIR from this (else /tmp/claude)
    }


def find_runtime(
    env: Mapping[str, str] = os.environ,
    which: Callable[[str], str | None] = shutil.which,
    local: Path = LOCAL_RUNTIME,
) -> str:
    """The `srt` executable: $AGENT_SANDBOX_RUNTIME, else the one `npm ci` installed beside this
    module, else `srt` on PATH; SandboxUnavailable (saying how to install) when it or a tool it
    needs is missing."""
    override = env.get(RUNTIME_ENV)
    if override and not (os.path.isfile(override) and os.access(override, os.X_OK)):
        raise SandboxUnavailable(f"{RUNTIME_ENV}={override} is not an executable file; {INSTALL_HINT}")
    found = override or (str(local) if local.is_file() else which("srt"))
    if found is None:
        raise SandboxUnavailable(f"the sandbox runtime `srt` is not installed; {INSTALL_HINT}")
    missing = [tool for tool in REQUIRED_TOOLS if which(tool) is None]
    if missing:
        raise SandboxUnavailable(f"the sandbox runtime needs {', '.join(missing)} on PATH; {INSTALL_HINT}")
    return found


def runtime_dir(runtime: str) -> str:
    """The runtime's package folder (above `dist/cli.js`): its helpers run inside the sandbox."""
    return str(Path(os.path.realpath(runtime)).parent.parent)


def _tail(path: Path) -> str:
    with path.open("rb") as f:
        f.seek(max(0, path.stat().st_size - OUTPUT_LIMIT))
        return f.read().decode("utf-8", errors="replace")


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill srt, its proxies and bubblewrap (the sandbox's pid namespace dies with it)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + GROUP_GONE_S  # its other processes (an unboxed Chromium's) exit a
    while time.monotonic() < deadline:  # moment later, and may still be writing their folders
        try:
            os.killpg(proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.02)


GROUP_GONE_S = 5.0
"""How long `kill_group` waits for the group's last processes to be gone."""


def spawn(
    command: str,
    cwd: Path,
    profile: Profile,
    settings: Path,
    sink: IO[bytes],
    extra_env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start `command` (bash) in `cwd` inside the sandbox, in its own process group (`kill_group`
    ends it whole), output to `sink`; `settings` is where srt's settings file is written (a folder
    the command cannot see). The environment is `scrubbed_env` plus `extra_env`."""
    runtime = find_runtime()
    bridge = Path(profile.private_tmp, SRT_SOCKET)
    if len(os.fsencode(bridge)) >= SOCKET_PATH_MAX:  # srt's bridges would fail as "late" every time
        raise SandboxUnavailable(
            f"the private temp folder {profile.private_tmp} is too long for the sandbox runtime's "
            f"Unix sockets ({len(os.fsencode(bridge))} of {SOCKET_PATH_MAX - 1} bytes); use a shorter one"
        )
    Path(profile.private_tmp, "home").mkdir(parents=True, exist_ok=True)
    env = {**scrubbed_env(profile, os.environ.get("PATH", os.defpath)), **(extra_env or {})}
    settings.write_text(json.dumps(srt_settings(profile, runtime_dir(runtime))), encoding="utf-8")
    return subprocess.Popen(
        [runtime, "--settings", str(settings), "-c", command],
        cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip


SOCKET_PATH_MAX = 108
"""sun_path's size on Linux: a Unix socket's path is shorter (with its terminating NUL)."""
SRT_SOCKET = "claude-socks-0123456789abcdef.sock"
"""The longest name srt gives its bridge sockets in its TMPDIR (the private temp)."""
BRIDGES_FAILED = "Failed to create bridge sockets"
"""What srt says when its socat bridges were not up within its own short wait (a loaded machine)."""
BRIDGE_TRIES = 3


def run_sandboxed(command: str, cwd: Path, profile: Profile, timeout: float) -> tuple[int, str]:
    """Run `command` (bash) in `cwd` inside the sandbox: (exit code, the end of its output).

    subprocess.TimeoutExpired after the whole process group is killed at `timeout`;
    SandboxUnavailable when the runtime is missing or fails before the command starts. A runtime
    whose network bridges did not come up in time (`BRIDGES_FAILED`, before the command started)
    is tried again, up to `BRIDGE_TRIES` times in all."""
    for attempt in range(1, BRIDGE_TRIES + 1):
        try:
            return _run_once(command, cwd, profile, timeout)
        except SandboxUnavailable as exc:
            if BRIDGES_FAILED not in str(exc) or attempt == BRIDGE_TRIES:
                raise
            time.sleep(0.5 * attempt)
    raise AssertionError("unreachable")


def _run_once(command: str, cwd: Path, profile: Profile, timeout: float) -> tuple[int, str]:
    a, b = secrets.token_hex(8), secrets.token_hex(8)
    started = f"{a}{b}\n"  # printed first (spelled apart in the line, so no echo of the line forges it)
    with tempfile.TemporaryDirectory(prefix="agent-srt-") as work:
        settings, out = Path(work, "settings.json"), Path(work, "output")
        with out.open("wb") as sink:
            proc = spawn(f"echo {a}''{b}\n{command}", cwd, profile, settings, sink)
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                kill_group(proc)
                raise subprocess.TimeoutExpired(
                    command, timeout, output=_tail(out).replace(started, "", 1)
                ) from None
            except BaseException:
                kill_group(proc)
                raise
        with out.open("rb") as f:
            ran = started.encode() in f.read(OUTPUT_LIMIT)
        output = _tail(out).replace(started, "", 1)
    if code != 0 and not ran:
        raise SandboxUnavailable(
            f"the sandbox runtime could not run the command ({output.strip()[-500:]}); {INSTALL_HINT}"
        )
    return code, output


def host_profile(worktree: Path, private_tmp: Path, project: Path, allowed_domains: Iterable[str]) -> Profile:
    """`profile_for` on this machine."""
    return profile_for(worktree, private_tmp, project.resolve(), allowed_domains, Host.of(os.environ))


PROBE_SECRET = "probe-secret-3f9c"
PROBE_TIMEOUT = 60.0


def preflight() -> tuple[bool, str]:
    """Prove the command sandbox works here: a probe writes inside its worktree (must work),
    outside it (must fail) and reads a file in a denied folder (must fail)."""
    with tempfile.TemporaryDirectory(prefix="agent-srt-probe-") as tmp:
        root = Path(tmp)
        tree, outside, denied = root / "tree", root / "outside", root / "project"
        for folder in (tree, outside, denied):
            folder.mkdir()
        (denied / "secret").write_text(PROBE_SECRET, encoding="utf-8")
        profile = host_profile(tree, root / "tmp", denied, ())
        probe = f"touch inside; touch {shlex.quote(str(outside / 'escaped'))}; cat {shlex.quote(str(denied / 'secret'))}"
        try:
            _, output = run_sandboxed(probe, tree, profile, timeout=PROBE_TIMEOUT)
        except SandboxUnavailable as exc:
            return False, str(exc)
        except subprocess.TimeoutExpired:
            return False, f"the command sandbox probe timed out; {INSTALL_HINT}"
        return _judge((tree / "inside").exists(), (outside / "escaped").exists(), PROBE_SECRET in output)


def _judge(inside: bool, escaped: bool, read_secret: bool) -> tuple[bool, str]:
    if escaped:
        return False, "the command sandbox is NOT active: a probe wrote outside its worktree"
    if read_secret:
        return False, "the command sandbox is NOT active: a probe read a file in a denied folder"
    if not inside:
        return False, "the command sandbox blocks writes inside the worktree too; check bubblewrap's setup"
    return (
        True,
        "the command sandbox is active: a probe could not write outside its worktree nor read a denied folder",
    )
