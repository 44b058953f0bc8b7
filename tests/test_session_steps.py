"""One session is five named steps over one Session value; a session folder's names are written once."""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

from session_scheduler.core.config import SessionType
from session_scheduler.core.layout import LOG_DIR
from session_scheduler.core.session import SessionFolder
from session_scheduler.run import scheduler
from session_scheduler.run.scheduler import Scheduler, Session


def test_one_session_is_the_five_steps_in_order_each_taking_and_returning_the_session() -> None:
    body = ast.parse(textwrap.dedent(inspect.getsource(Scheduler._one_session))).body[0]
    assert isinstance(body, ast.FunctionDef)
    calls = [
        node.func.attr
        for node in ast.walk(body)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    ]
    assert calls == ["_prepare", "_run", "_settle", "_transition", "_record"]
    for step in ("_run", "_settle", "_transition", "_record"):
        hints = inspect.get_annotations(getattr(Scheduler, step), eval_str=True)
        assert hints["session"] is Session and hints["return"] is Session
    assert inspect.get_annotations(Scheduler._prepare, eval_str=True)["return"] is Session


def test_the_loop_calls_one_session_and_no_step() -> None:
    loop = inspect.getsource(Scheduler._loop)
    assert "self._one_session(" in loop
    assert not any(
        f"self.{step}(" in loop
        for step in ("_prepare", "_run", "_settle", "_transition", "_record", "_after")
    )


def test_a_session_folder_names_every_file_once(tmp_path: Path) -> None:
    folder = SessionFolder.of(tmp_path, 7, SessionType.REVIEW)
    assert folder.path == tmp_path / LOG_DIR / "session_0007_REVIEW"
    assert scheduler.log_dir_for(tmp_path, 7, SessionType.REVIEW) == folder.path
    names = [p.name for p in (folder.result, folder.transcript, folder.denials, folder.changes, folder.state)]
    assert names == ["result.json", "transcript.jsonl", "denials.jsonl", "changes.json", "state.json"]
    assert (folder.pre.name, folder.post.name) == ("pre", "post")
    aside = folder.aside("outage", 5)
    assert aside.name == "session_0007_REVIEW.interrupted-outage-5" and SessionFolder.is_set_aside(aside)
    (aside / "pre").mkdir(parents=True)
    (folder.path.with_name(folder.path.name + ".interrupted-x-1")).mkdir()  # no pre/: not a copy
    assert folder.set_aside_copies() == [aside]
    assert SessionFolder.glob_of(7) == "session_0007_*" and SessionFolder.glob_of() == "session_*"
