"""The file policy: no file tool reads or writes outside the project, symlinks and `..` included;
credentials stay out of reach of sandboxed commands too (proven through the real CLI)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers import request_for, state_for

from scripted_model import ScriptedModelServer, ToolCall, sdk_env
from session_scheduler.core.config import AgentConfig, SessionType
from session_scheduler.guard.probe import CallsBrain, bash_calls
from session_scheduler.guard.security import file_tool_decision
from session_scheduler.run.agent import ClaudeSessionRunner

T = SessionType


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    project, outside = tmp_path / "project", tmp_path / "outside"
    (project / "src").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP-SECRET-CANARY")
    (project / "src" / "app.py").write_text("print(1)\n")
    (project / "escape").symlink_to(outside)  # planted by an agent inside the project
    return project, outside


@pytest.mark.parametrize(
    ("tool", "tool_input", "refused"),
    [
        ("Read", {"file_path": "src/app.py"}, False),
        ("Read", {"file_path": "{outside}/secret.txt"}, True),
        ("Read", {"file_path": "../outside/secret.txt"}, True),
        ("Read", {"file_path": "escape/secret.txt"}, True),
        ("Read", {"file_path": "~/.ssh/id_rsa"}, True),
        ("Grep", {"pattern": "x", "path": "{outside}"}, True),
        ("Grep", {"pattern": "x"}, False),
        ("Glob", {"pattern": "**/*.py"}, False),
        ("Glob", {"pattern": "{outside}/**"}, True),
        ("Glob", {"pattern": "/etc/*"}, True),
        ("Glob", {"pattern": "*.py", "path": "escape"}, True),
        ("LS", {"path": "/"}, True),
        ("Write", {"file_path": "escape/planted.txt", "content": "x"}, True),
        ("Edit", {"file_path": "src/app.py", "old_string": "1", "new_string": "2"}, False),
        ("NotebookEdit", {"notebook_path": "{outside}/n.ipynb"}, True),
    ],
)
def test_file_tools_stay_inside_the_project(
    world: tuple[Path, Path], tool: str, tool_input: dict[str, Any], refused: bool
) -> None:
    project, outside = world
    filled = {k: v.replace("{outside}", str(outside)) for k, v in tool_input.items()}
    reason = file_tool_decision(T.IMPLEMENT, project, tool, filled)
    assert (reason is not None) is refused, reason
    if refused:
        assert reason is not None and "outside the project folder" in reason


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="no bubblewrap")
def test_reads_outside_and_credentials_are_refused_through_the_real_cli(
    world: tuple[Path, Path], tmp_path: Path
) -> None:
    project, outside = world
    (project / "escape").unlink()
    request = request_for(project, state_for(T.IMPLEMENT), AgentConfig())
    attacker = CallsBrain(
        [ToolCall("Read", {"file_path": str(outside / "secret.txt")}), *bash_calls("cat ~/.ssh/id_test")]
    )
    with ScriptedModelServer(attacker) as server:
        env = sdk_env(server.base_url, tmp_path / "cli")
        ssh = Path(env["HOME"]) / ".ssh"
        ssh.mkdir(parents=True)
        (ssh / "id_test").write_text("PRIVATE-KEY-CANARY")
        result = anyio.run(ClaudeSessionRunner(echo=lambda _: None, env=env).run, request)
    assert not result.is_error, result
    assert [d["tool_name"] for d in result.permission_denials] == ["Read"]
    sent = "\n".join(attacker.seen)
    assert "id_test" in sent, "the model saw the Bash call's answer"
    assert "TOP-SECRET-CANARY" not in sent, "a file outside the project reached the model"
    assert "PRIVATE-KEY-CANARY" not in sent, "a credential reached the model"
    answers = [json.loads(line) for line in (request.log_dir / "transcript.jsonl").read_text().splitlines()]
    bash_result = [a for a in answers if a["type"] == "UserMessage" and "id_test" in json.dumps(a)]
    assert bash_result, "the Bash call was answered"
