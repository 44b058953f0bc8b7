"""How a web project's app is started, as the project declares it in `app.json` (layout.APP_FILE):
the command, where it answers when it is up, how long it may take, and the variable that gives it
its port. PURE."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from session_scheduler.core.errors import BadInput
from session_scheduler.core.gates import one_line
from session_scheduler.core.layout import APP_FILE
from session_scheduler.core.schemas import schema_error

MAX_READY_TIMEOUT_S = 600
RESERVED_ENV = ("PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "TERM", "CLAUDE_CODE_TMPDIR")
"""Variables the box sets itself (command_sandbox.scrubbed_env): never the port's."""
FIX = 'write it like {"start": "python3 app.py", "ready_path": "/"}: see docs/gates.md, "The app gate"'

APP_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["start"],
    "additionalProperties": False,
    "properties": {
        "start": {"type": "string", "minLength": 1, "pattern": "\\S"},
        "ready_path": {"type": "string", "pattern": "^/[^\\s]*$"},
        "ready_timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_READY_TIMEOUT_S},
        "port_env": {
            "type": "string",
            "pattern": "^[A-Z_][A-Z0-9_]{0,63}$",
            "not": {"enum": list(RESERVED_ENV)},
        },
    },
}
"""`app.json` as the INITIALIZER (or the person) writes it."""


@dataclass(frozen=True)
class AppSpec:
    """How to start the app and know it is up."""

    start: str
    """Run with bash at the root of a clean worktree of the commit; the app listens on 127.0.0.1 at
    the port in `port_env`, and stays in the foreground."""
    ready_path: str = "/"
    """The app is up when `GET <ready_path>` answers with any status below 500."""
    ready_timeout_s: float = 30
    """How long it may take to answer after it is started."""
    port_env: str = "PORT"
    """The environment variable that tells the app its port."""

    def to_json(self) -> dict[str, Any]:
        return {
            "start": self.start,
            "ready_path": self.ready_path,
            "ready_timeout_s": self.ready_timeout_s,
            "port_env": self.port_env,
        }

    @classmethod
    def from_json(cls, data: Any, where: str = APP_FILE) -> AppSpec:
        """An AppSpec from `app.json` (or `where`: the person's --app file, a saved config); BadInput
        (one line: where, what, how to fix it) when it does not fit APP_SCHEMA."""
        wrong = schema_error(data, APP_SCHEMA)
        if wrong is not None:
            raise BadInput(f"{where} is invalid {one_line(wrong)}: {FIX}")
        return cls(
            data["start"],
            data.get("ready_path", "/"),
            float(data.get("ready_timeout_s", 30)),
            data.get("port_env", "PORT"),
        )
