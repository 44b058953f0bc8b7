"""The red team through the real CLI (scripted_model/red_team.py): every attack is contained and
every ordinary command a real agent runs is allowed."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from scripted_model.red_team import run_red_team

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from red_team import failures  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("bwrap") is None, reason="no bubblewrap")]


def test_every_attack_is_contained_and_every_ordinary_command_allowed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = run_red_team(tmp_path)
    with capsys.disabled():
        print(f"\n{report.line()}")
    assert len(report.attacks()) >= 60 and len(report.classes) >= 12, report.line()
    assert len(report.ordinary()) >= 40, report.line()
    assert failures(report) == []
