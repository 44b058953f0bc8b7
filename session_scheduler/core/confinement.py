"""What every sandbox on this machine hides and re-opens, for both of them: the session's (Claude
Code's sandbox, sandbox.py) and the test command's (the sandbox runtime srt, command_sandbox.py).

Denied for reading: the home folders, Claude Code's config, the projects beside the project (its
parent folder) and the temp folders, never `/`. Re-opened: the toolchain folder holding each PATH
entry inside a denied region, never a credentials folder; the credentials inside re-opened
toolchains stay denied. Pure: `Host.of` reads only the mapping it is given (and, when it names no
home, the user's own; the temp folder is this process's).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePath, PurePosixPath

from session_scheduler.core.engine import CONNECTION_ENV, CONNECTION_ENV_PREFIX

SECRET_ENV_NAMES: tuple[str, ...] = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CODE_SESSION_ACCESS_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "GITHUB_TOKEN",
    "GH_TOKEN",
    "GITLAB_TOKEN",
    "NPM_TOKEN",
    "PYPI_TOKEN",
    "OPENAI_API_KEY",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "AZURE_CLIENT_SECRET",
    "DOCKER_AUTH_CONFIG",
    "SSH_AUTH_SOCK",
    *CONNECTION_ENV,
)
"""Variables unset in every sandboxed command whether or not the scheduler's environment has them."""
SECRET_WORDS = re.compile(
    r"(TOKEN|SECRET|PASSW(OR)?D|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL|AUTH)", re.IGNORECASE
)
"""A variable whose name says it holds a secret is unset too (whatever the product it is for)."""
NOT_SECRET = frozenset({"CLAUDE_CODE_MAX_RETRIES"})
SECRET_PREFIXES: tuple[str, ...] = (CONNECTION_ENV_PREFIX,)
"""A variable with one of these prefixes is unset too: the engine's connection (Temporal's `TEMPORAL_*`,
its API key, TLS keys and headers) belongs to the scheduler and its workers, never to a session."""

OTHER_HOMES: tuple[str, ...] = ("/root", "/home")
"""Where other users' home folders are: always denied."""
USERS_ROOT = "/home"
"""Holds one folder per user: a toolchain under it is re-opened one level deeper."""
TEMP_ROOTS: tuple[str, ...] = ("/tmp", "/var/tmp")
"""Other projects' test worktrees and sessions' private temp folders live here (and in the host's temp)."""
MIXED_DIRS = frozenset({".local", ".config"})
"""Home folders that mix tools and secrets: only the folder under them that holds a PATH entry is re-opened."""
CREDENTIAL_DIRS = frozenset({".ssh", ".aws", ".gnupg", ".docker", ".kube", ".claude", ".azure"})
"""Home folders never re-opened, whatever PATH says."""
KEPT_DENIED: tuple[str, ...] = (".cargo/credentials", ".cargo/credentials.toml", ".local/share/keyrings")
"""Credentials inside toolchain folders that are re-opened: they stay unreadable."""
TOOLCHAIN_DIRS: tuple[str, ...] = (
    ".pyenv",
    ".rustup",
    ".cargo",
    ".nvm",
    ".volta",
    ".asdf",
    ".deno",
    ".bun",
    "go",
    ".local/bin",
    ".local/lib",
)
"""Folders under a home that tools read through HOME, not PATH (a venv's interpreter links into
`~/.pyenv`, `~/.cargo/bin` runs `~/.rustup`'s toolchains, user site-packages in `~/.local/lib`, the
Go module cache in `~/go`): re-opened where commands keep the real HOME (sessions)."""


@dataclass(frozen=True)
class Host:
    """What the sandboxes must hide on this machine, read once from the environment at the edge."""

    homes: tuple[str, ...]
    """Home folders to deny: the user's and OTHER_HOMES."""
    config_dir: str | None
    """Claude Code's config folder when set apart from the home folder (its login lives there)."""
    secret_env: tuple[str, ...]
    """Names of the variables to unset: SECRET_ENV_NAMES and those set here that hold secrets."""
    path: tuple[str, ...]
    """The absolute PATH entries: toolchains among them inside a denied region are re-opened."""
    temp: str
    """This machine's temp folder (where the private temp folders live)."""

    @classmethod
    def of(cls, env: Mapping[str, str]) -> Host:
        home = env.get("HOME") or os.path.expanduser("~")
        names = sorted(
            {
                *SECRET_ENV_NAMES,
                *(
                    k
                    for k in env
                    if (SECRET_WORDS.search(k) or k.startswith(SECRET_PREFIXES)) and k not in NOT_SECRET
                ),
            }
        )
        return cls(
            homes=_unique((home, *OTHER_HOMES)),
            config_dir=env.get("CLAUDE_CONFIG_DIR") or None,
            secret_env=tuple(names),
            path=tuple(p for p in env.get("PATH", "").split(os.pathsep) if os.path.isabs(p)),
            temp=tempfile.gettempdir(),
        )


def _unique(paths: Iterable[str]) -> tuple[str, ...]:
    """In order, once each, never `/`."""
    return tuple(dict.fromkeys(p for p in paths if p != "/"))


def denied_regions(project: PurePath, host: Host, *, open_shared_parent: bool = False) -> tuple[str, ...]:
    """The homes, Claude Code's config, the projects beside `project` (its parent) and the temp
    folders; never `/`. `open_shared_parent`: a parent that is a temp folder stays readable (the
    session's choice; the test command, whose worktree lies apart, denies it)."""
    temps = (*TEMP_ROOTS, host.temp)
    parent = str(project.parent)
    kept_open = parent if open_shared_parent and parent in temps else None
    config = (host.config_dir,) if host.config_dir else ()
    return _unique(p for p in (*host.homes, *config, parent, *temps) if p != kept_open)


def reopened(
    path: Iterable[str], regions: Iterable[str], closed: Iterable[str | None] = ()
) -> tuple[str, ...]:
    """For each PATH entry inside a denied region, the region's folder that holds it (`~/.pyenv`
    for `~/.pyenv/shims`; `/home/u/.nvm`, `~/.local/bin`); never a credentials folder, nothing
    inside a `closed` folder (Claude Code's config)."""
    roots = [PurePosixPath(r) for r in regions]
    shut = [PurePosixPath(c) for c in closed if c]
    found: list[str] = []
    for entry in map(PurePosixPath, path):
        inside = [r for r in roots if entry.is_relative_to(r)]
        if not inside or any(entry.is_relative_to(c) for c in shut):
            continue
        region = max(inside, key=lambda r: len(r.parts))
        rest = entry.relative_to(region).parts
        depth = 2 if str(region) == USERS_ROOT else 1
        if len(rest) >= depth and rest[depth - 1] in MIXED_DIRS:
            depth += 1
        if len(rest) < depth or CREDENTIAL_DIRS.intersection(rest[:depth]):
            continue
        found.append(str(region.joinpath(*rest[:depth])))
    return _unique(found)


def toolchains(homes: Iterable[str]) -> tuple[str, ...]:
    """TOOLCHAIN_DIRS under each home (not the folder of all users' homes)."""
    return _unique(
        str(PurePosixPath(home, name)) for home in homes if home != USERS_ROOT for name in TOOLCHAIN_DIRS
    )


def kept_denied(homes: Iterable[str], opened: Iterable[str]) -> tuple[str, ...]:
    """KEPT_DENIED under each home (not the folder of all users' homes) and inside each re-opened
    folder that is such a toolchain (`/home/u/.cargo` re-opened: `/home/u/.cargo/credentials`)."""
    under_homes = (
        str(PurePosixPath(home, name)) for home in homes if home != USERS_ROOT for name in KEPT_DENIED
    )
    inside = (
        str(PurePosixPath(folder, *PurePosixPath(name).parts[1:]))
        for folder in opened
        for name in KEPT_DENIED
        if PurePosixPath(name).parts[0] == PurePosixPath(folder).name
    )
    return _unique((*under_homes, *inside))
