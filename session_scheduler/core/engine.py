"""Where sessions run (`--engine`, saved): in this process (the default), or on Temporal workers.
Pure: the option read as a value, and the names a session gets on the engine.

The scheduler stays the one authority in both cases (state, verification, the merge queue, the
records); the engine only runs sessions (docs/decisions.md, "Temporal runs sessions, nothing else").
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

SCHEME = "temporal://"
LOCAL = "local"
"""`temporal://local`: a dev server started for the run, on a file in the project's log folder."""
IN_PROCESS = "inprocess"
"""`--engine inprocess`: back to running sessions in the scheduler's own process (saved as none)."""
TASK_QUEUE = "session-scheduler"
"""The task queue every worker of the pool polls (any worker can run any session: it makes the
lane's clone from the exchange, engine/exchange.py)."""
WORKER_SESSIONS = 16
"""How many sessions a worker runs at once unless told (`worker --sessions N`)."""
INSTALL_HINT = "pip install '.[temporal]'"
CONNECTION_ENV_PREFIX = "TEMPORAL_"
"""The connection's settings are Temporal's own variables (engine/connection.py); each process reads
its own, nothing is saved, and no session, agent command, test or gate gets any of them."""
CONNECTION_ENV: tuple[str, ...] = (
    "TEMPORAL_API_KEY",
    "TEMPORAL_TLS",
    "TEMPORAL_TLS_SERVER_CA_CERT_PATH",
    "TEMPORAL_TLS_SERVER_CA_CERT_DATA",
    "TEMPORAL_TLS_CLIENT_CERT_PATH",
    "TEMPORAL_TLS_CLIENT_CERT_DATA",
    "TEMPORAL_TLS_CLIENT_KEY_PATH",
    "TEMPORAL_TLS_CLIENT_KEY_DATA",
    "TEMPORAL_TLS_SERVER_NAME",
    "TEMPORAL_CONFIG_FILE",
    "TEMPORAL_PROFILE",
    "TEMPORAL_CODEC_AUTH",
)
"""The variables of the SDK's environment configuration that carry the connection's keys or name
where they are (and `TEMPORAL_GRPC_META_*`, any header): unset in every session's sandbox whether
or not the scheduler has them (a worker may have them when the scheduler does not)."""

NONE = "none"
"""`--git-remote none`, `--git-serve none`: back to the default (saved as none)."""
EXCHANGE = "exchange.git"
"""In the project's log folder: the bare repository sessions go through to workers and back, when
the project names no git remote of its own (`--git-remote`)."""
PROTOCOLS = ("file", "ssh", "https", "http", "git")
"""The git transports an exchange may use (the scheduler's git allows none but the one named)."""
_SCP = re.compile(r"^(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9.-]+:(?!//)")

_ADDRESS = re.compile(r"^(?P<host>[A-Za-z0-9._-]+|\[[0-9A-Fa-f:]+\]):(?P<port>[0-9]{1,5})$")
_NAME = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Engine:
    """A Temporal engine: a server at `address` (HOST:PORT), or a dev server of the run's own."""

    address: str | None
    """HOST:PORT of the Temporal frontend; None for `temporal://local`."""

    @property
    def local(self) -> bool:
        return self.address is None

    def __str__(self) -> str:
        return SCHEME + (self.address or LOCAL)


def parse_engine(text: str | None) -> Engine | None:
    """`--engine`'s value as an engine (None: sessions run in this process); ValueError with what
    to give instead."""
    if text is None or text == IN_PROCESS:
        return None
    if not text.startswith(SCHEME):
        raise ValueError(f"--engine {text}: give temporal://HOST:PORT, temporal://local or {IN_PROCESS}")
    rest = text.removeprefix(SCHEME).rstrip("/")
    if rest == LOCAL:
        return Engine(None)
    match = _ADDRESS.match(rest)
    if match is None or not 0 < int(match["port"]) < 65536:
        raise ValueError(
            f"--engine {text}: the address must be HOST:PORT, for example temporal://127.0.0.1:7233"
        )
    return Engine(rest)


def project_id(project: Path) -> str:
    """The project's name on the engine: its folder's name and a digest of its absolute path
    (two projects of one name never share a workflow)."""
    resolved = str(project.resolve())
    digest = hashlib.sha256(resolved.encode()).hexdigest()[:12]
    return f"{_NAME.sub('-', project.name)[:40] or 'project'}-{digest}"


def workflow_id(project: str, session: int, attempt: int) -> str:
    """The one workflow of a session's try, from the saved state: the project, the session's
    number and its attempt (1 for its first run; one more each time it runs again after it was
    cut short). Starting it twice attaches to the first (running: awaited; done: its result)."""
    if session < 1 or attempt < 1:
        raise ValueError(f"session {session}, attempt {attempt}: both start at 1")
    return f"{project}/session-{session:04d}/attempt-{attempt}"


def remote_protocol(url: str) -> str:
    """The git transport of the exchange at `url` (one of PROTOCOLS; `none` for NONE); ValueError
    saying what to give instead (`ext::` and the other transports that run commands are refused)."""
    if url == NONE:
        return NONE
    if url.startswith("/"):
        return "file"
    scheme, sep, _ = url.partition("://")
    if sep and scheme in PROTOCOLS:
        return scheme
    if not sep and "::" not in url and _SCP.match(url):  # user@host:path, as scp writes it
        return "ssh"
    raise ValueError(
        f"--git-remote {url}: give an absolute path or a file://, ssh://, https://, http:// or git:// "
        "URL (or user@host:path) of a repository the workers can push to"
    )


def parse_address(text: str, option: str) -> str:
    """HOST:PORT given to `option` (or NONE), as given; ValueError saying what to give instead."""
    if text == NONE:
        return text
    match = _ADDRESS.match(text)
    if match is None or not 0 < int(match["port"]) < 65536:
        raise ValueError(f"{option} {text}: the address must be HOST:PORT, for example 0.0.0.0:9418")
    return text
