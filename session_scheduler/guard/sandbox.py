"""Claude Code's OS sandbox as the containment layer for Bash, and a preflight that proves it.

With the sandbox on (Linux: bubblewrap and socat), every Bash command of a session, and
whatever interpreter, test runner or build script it starts, may write only inside the
project and a short private temp folder, and reach only the network domains the project allows.
The preflight runs the real CLI against a one-turn scripted model on loopback: a probe
writes outside the project (it must fail) and inside (it must work).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from session_scheduler.core.confinement import (
    Host as Host,  # imported from here by plan, scheduler, the CLI and the red team
)
from session_scheduler.core.confinement import (
    denied_regions,
    kept_denied,
    reopened,
    toolchains,
)
from session_scheduler.core.layout import MAIN_REF_PATHS, SANDBOX_DENIED_WRITES, SETTINGS_FILE
from session_scheduler.guard import command_sandbox, safe_git

LANES_SUFFIX = ".lanes"
"""A lane's clone is `<project>.lanes/lane-N`, beside the project (repo/workdirs.py)."""

INSTALL_HINT = "install bubblewrap and socat (Debian/Ubuntu: `apt-get install bubblewrap socat`)"


def sandbox_settings(
    project: Path, allowed_domains: tuple[str, ...], host: Host, *, protect_main: bool = False
) -> dict[str, Any]:
    """The settings that turn the sandbox on for a session in `project` (merged into its settings).

    Every Bash command runs inside, git included: it writes the project (and `.git`, but never
    `.git/hooks`, `.git/config` or `.git/info`, nor the scheduler's files) and the private temp
    folder; it reads neither home folders nor the CLI's config nor the folders beside the project
    (other projects), except toolchains; the credentials in the environment are unset. In a lane's
    clone it reads neither the other lanes' clones (beside it) nor the project it was cloned
    from nor the folders beside that (`lane_project`). `host` is required: what the sandbox hides
    depends on the machine (its home folders, the CLI's config folder, the secrets in its
    environment), and no stand-in knows them."""
    root = project.resolve()
    tmp = str(private_tmp(project))
    regions = denied_regions(root, host, open_shared_parent=True)
    origin = lane_project(root)
    if origin is not None:  # the project's records, other sessions' outboxes, other projects
        regions = tuple(dict.fromkeys((*regions, *denied_regions(origin, host))))
    opened = sorted({*reopened(host.path, regions, (host.config_dir,)), *toolchains(host.homes)})
    denied = ["~", *regions, *kept_denied(("~", *host.homes), opened)]
    return {
        "env": {"TMPDIR": tmp, "TMP": tmp, "TEMP": tmp},
        "sandbox": {
            "enabled": True,
            "failIfUnavailable": True,
            "autoAllowBashIfSandboxed": True,
            "allowUnsandboxedCommands": False,
            "filesystem": {
                "allowWrite": [tmp],
                "denyWrite": [
                    str(root / name)
                    for name in (*SANDBOX_DENIED_WRITES, *(MAIN_REF_PATHS if protect_main else ()))
                ],
                "denyRead": denied,
                "allowRead": [str(root), tmp, *opened],
            },
            "network": {"allowedDomains": list(allowed_domains)},
            "credentials": {"envVars": [{"name": name, "mode": "deny"} for name in host.secret_env]},
        },
    }


def lane_project(workdir: Path) -> Path | None:
    """The project a lane's clone `workdir` (`<project>.lanes/lane-N`) belongs to; None for a
    folder that is not a lane's clone."""
    lanes = workdir.parent
    if not workdir.name.startswith("lane-") or not lanes.name.endswith(LANES_SUFFIX):
        return None
    name = lanes.name.removesuffix(LANES_SUFFIX)
    return lanes.with_name(name) if name else None


def private_tmp(project: Path) -> Path:
    """The project's private temp folder (TMPDIR of its sessions), short on purpose: the CLI puts
    its sandbox's unix sockets there, and a socket path may not exceed 108 bytes."""
    digest = hashlib.sha256(str(project.resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"agent-{digest}"


@dataclass(frozen=True)
class Preflight:
    active: bool
    message: str


def preflight(
    cli_path: Path | None = None,
    *,
    which: Callable[[str], str | None] = shutil.which,
    sandboxed: bool = True,
    commands: Callable[[], tuple[bool, str]] | None = command_sandbox.preflight,
) -> Preflight:
    """Prove the sandboxes work here: the real CLI runs a probe that writes outside and inside,
    then `commands` proves the test command's sandbox (command_sandbox.preflight).

    `which` finds the tools; `sandboxed=False` runs the same probe without the sandbox (the
    proof that the probe notices an escape); `commands=None` skips the second proof."""
    missing = [tool for tool in ("bwrap", "socat") if which(tool) is None]
    if missing:
        return Preflight(
            False, f"the OS sandbox is not available ({', '.join(missing)} missing): {INSTALL_HINT}"
        )
    from session_scheduler.guard.probe import run_probe  # the scripted model is only needed for the proof

    with tempfile.TemporaryDirectory(prefix="agent-sandbox-probe-") as tmp:
        root = Path(tmp)
        project, outside = root / "project", root / "outside"
        project.mkdir()
        outside.mkdir()
        _probe_repository(project)
        settings: dict[str, Any] = {"permissions": {"allow": [], "deny": [], "defaultMode": "dontAsk"}}
        if sandboxed:  # this machine's host, as its sessions get it
            settings.update(sandbox_settings(project, (), Host.of(os.environ)))
        else:
            settings["permissions"]["allow"] = ["Bash"]
        private_tmp(project).mkdir(exist_ok=True)
        (project / SETTINGS_FILE).write_text(json.dumps(settings), encoding="utf-8")
        try:
            error = run_probe(project, outside, root / "home", cli_path)
        finally:
            shutil.rmtree(private_tmp(project), ignore_errors=True)  # outside `tmp`: nothing else removes it
        escaped = sorted(p.name for p in outside.iterdir())
        hooked = (project / ".git" / "hooks" / "post-checkout").exists()
        inside = (project / "inside").exists()
        committed = _git(project, "log", "-1", "--format=%s") == "inside"
    if error is not None:
        return Preflight(False, f"the sandbox probe could not run ({error}); {INSTALL_HINT}")
    if escaped or hooked:
        what = ", ".join(
            [
                *(f"{name} outside the project" for name in escaped),
                *([".git/hooks/post-checkout"] if hooked else []),
            ]
        )
        return Preflight(False, f"the sandbox is NOT active: a probe wrote {what}; {INSTALL_HINT}")
    if not inside or not committed:
        return Preflight(
            False,
            "the sandbox blocks writes inside the project (or git commits there); check bubblewrap's setup",
        )
    if not commands:
        return Preflight(True, PROVEN)
    ok, message = commands()
    return Preflight(True, f"{PROVEN}; {message}") if ok else Preflight(False, message)


PROVEN = "the OS sandbox is active: a probe could not write outside the project, not even with git through a symlink"


def _git(project: Path, *args: str) -> str:
    """git on the probe's own throwaway repository (made here, nothing in it runs code)."""
    env = safe_git.without_location(os.environ)  # the probe's repository, not one a GIT_DIR names
    done = subprocess.run(
        ["git", "-c", "core.hooksPath=/dev/null", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip()


def _probe_repository(project: Path) -> None:
    """A repository with a tracked file to move out and a would-be hook to move in."""
    (project / "probe.txt").write_text("probe\n", encoding="utf-8")
    (project / "hook.sh").write_text("#!/bin/sh\ntouch ../outside/hook-ran\n", encoding="utf-8")
    _git(project, "init", "-q", "-b", "main")
    _git(project, "config", "user.name", "probe")
    _git(project, "config", "user.email", "probe@localhost")
    _git(project, "add", "probe.txt", "hook.sh")
    _git(project, "commit", "-qm", "probe")
