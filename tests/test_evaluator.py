"""bench/evaluator.py's seeded bugs stay real: each one's text is in the demo app's code exactly
once (so a change of the demo cannot quietly turn a bug into no change), each changes it, and
there are at least 20 of three kinds."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from scripted_model import demo_web
from scripted_model.demo_app import SKELETON

BENCH = Path(__file__).resolve().parents[1] / "bench" / "evaluator.py"


def evaluator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("evaluator", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["evaluator"] = module
    spec.loader.exec_module(module)
    return module


def code_of(feature_id: str, path: str) -> str:
    files = {**SKELETON, **demo_web.WEB, **demo_web.any_feature(feature_id).files}
    return files[path]


def test_every_seeded_bug_changes_its_feature_s_code_once() -> None:
    bench = evaluator()
    bugs = [*bench.BUGS, *bench.UI_BUGS]
    assert len(bugs) >= 20 and {b.kind for b in bugs} == {"CLI", "API", "UI"}
    for bug in bugs:
        text = code_of(bug.feature, bug.path)
        assert text.count(bug.old) == 1, bug
        assert text.replace(bug.old, bug.new) != text, bug
    assert len({(b.feature, b.name) for b in bugs}) == len(bugs)


def test_a_correct_twin_changes_no_behaviour() -> None:
    bench = evaluator()
    twin = bench.correct(bench.BUGS[0], 1)
    assert not twin.bug and twin.path == bench.BUGS[0].path and twin.new.startswith("# ")
