"""The sandbox probe: one real CLI session whose scripted model tries a write outside the project."""

from __future__ import annotations

import tempfile
from pathlib import Path

import anyio
from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKError, ResultMessage, query

from scripted_model.hermetic import sdk_env
from scripted_model.protocol import Reply, ToolCall, Turn
from scripted_model.server import ScriptedModelServer
from session_scheduler.core.layout import SETTINGS_FILE


class CallsBrain:
    """Plays the given tool calls one per turn, then ends the session; keeps what it was sent."""

    def __init__(self, calls: list[ToolCall]) -> None:
        self.calls = calls
        self.seen: list[str] = []
        """Everything the model was sent: system prompt, first message, tool results."""

    def respond(self, turn: Turn) -> Reply:
        self.seen.append(
            turn.system + turn.first_user_text() + "".join(str(e.result) for e in turn.exchanges())
        )
        done = len(turn.exchanges())
        if done < len(self.calls):
            return Reply(text="", tool_calls=(self.calls[done],))
        return Reply(text="done")


def bash_calls(*commands: str) -> list[ToolCall]:
    return [ToolCall("Bash", {"command": command, "description": command[:60]}) for command in commands]


def probe_commands(outside: Path) -> list[str]:
    """What the probe tries: an interpreter writing outside; git moving a tracked file through a
    symlink that leads outside, and into `.git/hooks` through a symlink to `.git`; a commit and a
    write inside (these two must work)."""
    return [
        f"python3 -c \"open('{outside}/escaped', 'w').write('x')\"",  # any interpreter, as agents do
        f"ln -s {outside} out && git mv probe.txt out/moved",
        "ln -s .git gd && git mv hook.sh gd/hooks/post-checkout",
        "touch inside && git add inside && git commit -qm inside",
    ]


def run_probe(project: Path, outside: Path, home: Path, cli_path: Path | None = None) -> str | None:
    """Run the probe in `project` with its settings file; None when the session ran to its end."""
    brain = CallsBrain(bash_calls(*probe_commands(outside)))
    with ScriptedModelServer(brain) as server:
        env = sdk_env(server.base_url, home, max_retries=0)
        options = ClaudeAgentOptions(
            cwd=str(project),
            settings=str(project / SETTINGS_FILE),
            setting_sources=[],
            permission_mode="dontAsk",
            max_turns=len(brain.calls) + 3,
            env=env,
            cli_path=cli_path,
        )
        return anyio.run(_session, options)


async def _session(options: ClaudeAgentOptions) -> str | None:
    stderr: list[str] = []
    options.stderr = stderr.append
    try:
        async for message in query(prompt="Run the probe.", options=options):
            if isinstance(message, ResultMessage) and message.is_error:
                return f"the probe session failed: {message.subtype}"
    except ClaudeSDKError as exc:
        tail = " | ".join(line.strip() for line in stderr[-3:] if line.strip())
        return f"{type(exc).__name__}: {tail or exc}"
    return None


if __name__ == "__main__":  # pragma: no cover - a manual check
    with tempfile.TemporaryDirectory() as tmp:
        print(run_probe(Path(tmp), Path("/tmp"), Path(tmp) / "home"))
