"""Records apart from the workdir, and no memo shared by the whole process."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import session_scheduler
from scripted_model import __file__ as scripted_model_file
from session_scheduler.core.config import AgentConfig, SessionType
from session_scheduler.core.layout import HANDOFF_FILES
from session_scheduler.core.machine import feature
from session_scheduler.repo.adoption import NONE
from session_scheduler.run.agent import SessionRequest, tools_of
from session_scheduler.run.plan import plan_session, write_plan
from session_scheduler.store import progress
from session_scheduler.store.records import Records
from tests.helpers import MACHINE, state_for


def _records_with_one_feature(folder: Path) -> Records:
    folder.mkdir()
    listed = {
        "features": [{"id": "F001", "category": "c", "description": "d", "steps": ["s"], "passes": False}]
    }
    (folder / "feature_list.json").write_text(json.dumps(listed))
    progress.ensure_handoff_files(folder, "p")
    return Records(folder)


def test_the_hand_off_tools_write_the_records_never_the_workdir(tmp_path: Path) -> None:
    """A session working in a clone (the workdir) records its review and `passes` in the
    project's records, not in the clone."""
    records = _records_with_one_feature(tmp_path / "records")
    workdir = tmp_path / "clone"
    workdir.mkdir()
    plan = plan_session(
        state_for(SessionType.REVIEW, "F001"),
        AgentConfig(),
        workdir,
        spent_usd=0.0,
        brief="",
        host=MACHINE,
        outage_s=0.0,
        adopted=NONE,
    )
    request = SessionRequest(plan, workdir, write_plan(plan, workdir), workdir / "log", records)
    tools = tools_of(request)
    assert tools.work == feature("F001")
    graded = [{"step": 1, "passed": True, "evidence": "ran it"}]
    answer, failed = tools.call(
        "record_review", {"verdict": "PASS", "issues": {}, "summary": "fine", "acceptance": graded}
    )
    assert not failed, answer
    assert tools.call("mark_passing", {}) == ("F001 is marked passing", False)
    assert not tools.call("append_session", {"outcome": "REVIEWED", "verdict": "PASS"})[1]
    handoff = progress.load_handoff(records.root)  # read afresh from the records folder
    assert handoff.passing() == frozenset({"F001"})
    assert [r["verdict"] for r in handoff.review_list()] == ["PASS"]
    assert [s["session_id"] for s in (handoff.progress or {})["sessions"]] == [plan.number]
    assert not [name for name in HANDOFF_FILES if (workdir / name).exists()]  # nothing in the clone


def test_two_records_of_one_folder_share_nothing(tmp_path: Path) -> None:
    """What one `Records` remembers is its own: another one (another project object, another
    lane's scheduler) reads the files itself."""
    first = _records_with_one_feature(tmp_path / "p")
    second = Records(first.root)
    assert progress.load_handoff(first).feature_list == progress.load_handoff(second).feature_list
    assert progress.load_handoff(first).feature_list is not progress.load_handoff(second).feature_list
    assert first.loaded.keys() == second.loaded.keys() and first.loaded is not second.loaded


MUTATORS = frozenset(
    {
        "append",
        "insert",
        "add",
        "update",
        "setdefault",
        "pop",
        "popitem",
        "clear",
        "extend",
        "remove",
        "discard",
    }
)
PURE_MEMOS = {
    ("session_scheduler/core/schemas.py", "_VALIDATORS"): "one validator per constant schema, kept "
    "with the schema it was built from: the same in every process, never stale",
    ("session_scheduler/guard/security.py", "_VALID_SETTINGS"): "settings (canonical JSON) found valid "
    "against the constant settings schema: keyed by content, so never stale for any project",
}
"""The module-level tables a module adds to, each a memo of a pure function of constants, keyed
by content: what it holds is the same for every project, run and thread."""
PROCESS_SEAMS = {
    ("session_scheduler/store/crashpoints.py", "_seen"): "how often this process reached a crash "
    "point (a test seam that kills the process: its count is the process's by definition)",
}


def _module_level_mutated(tree: ast.Module) -> set[str]:
    """Names bound at module level that the module changes after binding them (an item set or
    deleted, a mutating method called, or rebound through `global`)."""
    bound: set[str] = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        bound.update(t.id for t in targets if isinstance(t, ast.Name))
    changed: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            changed.update(node.names)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del):
            if isinstance(node.value, ast.Name):
                changed.add(node.value.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if isinstance(owner, ast.Name) and node.func.attr in MUTATORS:
                changed.add(owner.id)
    return changed & bound


def _process_wide_caches(tree: ast.Module) -> set[str]:
    """Module-level functions memoized for the whole process (functools.cache, lru_cache)."""
    found = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for decorator in node.decorator_list:
                text = ast.unparse(decorator)
                if "lru_cache" in text or text in ("cache", "functools.cache"):
                    found.add(node.name)
    return found


def test_no_module_keeps_mutable_state_for_the_process() -> None:
    """Memos are state of one object per project (`Records`) or per repository
    (`safe_git.GitMemo`), never of a module, but for the documented pure memos above."""
    root = Path(session_scheduler.__file__).parent.parent
    folders = [Path(session_scheduler.__file__).parent, Path(scripted_model_file).parent]
    found = []
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            rel = path.relative_to(root).as_posix()
            for name in sorted(_module_level_mutated(tree) | _process_wide_caches(tree)):
                if (rel, name) not in PURE_MEMOS and (rel, name) not in PROCESS_SEAMS:
                    found.append(f"{rel}: {name}")
    assert found == []
    assert {name for _, name in PURE_MEMOS} == {"_VALIDATORS", "_VALID_SETTINGS"}
