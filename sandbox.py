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
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layout import SCHEDULER_FILES, SETTINGS_FILE
from security import CREDENTIALS

INSTALL_HINT = "install bubblewrap and socat (Debian/Ubuntu: `apt-get install bubblewrap socat`)"


def sandbox_settings(project: Path, allowed_domains: tuple[str, ...], git_commands: Sequence[str] = ()) -> dict[str, Any]:
    """The settings that turn the sandbox on for a session in `project` (merged into its settings).

    Claude Code's sandbox keeps `.git` read-only, so the git commands the role's permission
    rules allow (`git_commands`, as prefixes) run outside it, under those rules and the Bash
    policy (bash_policy.py); everything else a command starts stays inside, where the
    scheduler's own files are read-only too."""
    tmp = str(private_tmp(project))
    return {
        "env": {"TMPDIR": tmp, "TMP": tmp, "TEMP": tmp},
        "sandbox": {
            "enabled": True,
            "failIfUnavailable": True,
            "autoAllowBashIfSandboxed": True,
            "allowUnsandboxedCommands": False,
            "excludedCommands": [f"{prefix}:*" for prefix in git_commands],
            "filesystem": {
                "allowWrite": [tmp],
                "denyWrite": [str(project.resolve() / name) for name in SCHEDULER_FILES],
                "denyRead": [f"~/{name}" for name in CREDENTIALS],
            },
            "network": {"allowedDomains": list(allowed_domains)},
        },
    }


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
    cli_path: Path | None = None, *, which: Callable[[str], str | None] = shutil.which, sandboxed: bool = True
) -> Preflight:
    """Prove the sandbox works here: the real CLI runs a probe that writes outside and inside.

    `which` finds the tools; `sandboxed=False` runs the same probe without the sandbox (the
    proof that the probe notices an escape)."""
    missing = [tool for tool in ("bwrap", "socat") if which(tool) is None]
    if missing:
        return Preflight(False, f"the OS sandbox is not available ({', '.join(missing)} missing): {INSTALL_HINT}")
    from scripted_model.probe import run_probe  # the scripted model is only needed for the proof

    with tempfile.TemporaryDirectory(prefix="agent-sandbox-probe-") as tmp:
        root = Path(tmp)
        project, outside = root / "project", root / "outside"
        project.mkdir()
        outside.mkdir()
        settings: dict[str, Any] = {"permissions": {"allow": [], "deny": [], "defaultMode": "dontAsk"}}
        if sandboxed:
            settings.update(sandbox_settings(project, ()))
        else:
            settings["permissions"]["allow"] = ["Bash(touch:*)", "Bash(python3:*)"]
        private_tmp(project).mkdir(exist_ok=True)
        (project / SETTINGS_FILE).write_text(json.dumps(settings), encoding="utf-8")
        error = run_probe(project, outside, root / "home", cli_path)
        escaped = (outside / "escaped").exists()
        inside = (project / "inside").exists()
    if error is not None:
        return Preflight(False, f"the sandbox probe could not run ({error}); {INSTALL_HINT}")
    if escaped:
        return Preflight(False, f"the sandbox is NOT active: a probe wrote outside the project; {INSTALL_HINT}")
    if not inside:
        return Preflight(False, "the sandbox blocks writes inside the project too; check bubblewrap's setup")
    return Preflight(True, "the OS sandbox is active: a probe could not write outside the project")
