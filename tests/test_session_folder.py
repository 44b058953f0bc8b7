"""A session folder's names are written once."""

from __future__ import annotations

from pathlib import Path

from session_scheduler.core.config import SessionType
from session_scheduler.core.layout import LOG_DIR
from session_scheduler.core.session import SessionFolder


def test_a_session_folder_names_every_file_once(tmp_path: Path) -> None:
    folder = SessionFolder.of(tmp_path, 7, SessionType.REVIEW)
    assert folder.path == tmp_path / LOG_DIR / "session_0007_REVIEW"
    names = [p.name for p in (folder.result, folder.transcript, folder.denials, folder.changes, folder.state)]
    assert names == ["result.json", "transcript.jsonl", "denials.jsonl", "changes.json", "state.json"]
    assert (folder.pre.name, folder.post.name) == ("pre", "post")
    aside = folder.aside("outage", 5)
    assert aside.name == "session_0007_REVIEW.interrupted-outage-5" and SessionFolder.is_set_aside(aside)
    (aside / "pre").mkdir(parents=True)
    (folder.path.with_name(folder.path.name + ".interrupted-x-1")).mkdir()  # no pre/: not a copy
    assert folder.set_aside_copies() == [aside]
    assert SessionFolder.glob_of(7) == "session_0007_*" and SessionFolder.glob_of() == "session_*"
