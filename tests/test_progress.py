"""Hand-off files: schemas, atomic writes, invariants, the lock."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import wait_until

from session_scheduler.core.config import SessionType
from session_scheduler.core.errors import StateError
from session_scheduler.core.schemas import FEATURE_LIST
from session_scheduler.run.invariants import check_invariants
from session_scheduler.store.progress import (
    MAX_JSON_BYTES,
    Handoff,
    atomic_write_json,
    ensure_handoff_files,
    load_handoff,
    read_json,
    read_regular,
    restore_point,
    write_status,
)
from session_scheduler.store.records import Records

FEATURES = {
    "features": [
        {"id": "F001", "category": "functional", "description": "d", "steps": ["s"], "passes": False},
        {"id": "F002", "category": "functional", "description": "e", "steps": ["s"], "passes": False},
    ]
}
REVIEW = {
    "review_id": 1,
    "feature_id": "F001",
    "kind": "feature",
    "verdict": "PASS",
    "issues": {"critical": [], "major": [], "minor": []},
}


def handoff(
    features: dict | None = FEATURES, reviews: list | None = None, fixes: list | None = None
) -> Handoff:  # type: ignore[type-arg]
    return Handoff(features, {"sessions": []}, {"reviews": reviews or [], "fixes": fixes or []})


def test_atomic_write_leaves_no_temp_files(tmp_path: Path) -> None:
    atomic_write_json(tmp_path / "x.json", {"a": 1})
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]
    assert json.loads((tmp_path / "x.json").read_text()) == {"a": 1}


def test_read_json_errors_name_the_file_and_the_problem(tmp_path: Path) -> None:
    bad = tmp_path / "feature_list.json"
    bad.write_text('{"features": [')
    with pytest.raises(StateError, match=r"feature_list.json is not valid JSON \(line 1"):
        read_json(bad, FEATURE_LIST)
    bad.write_text('{"features": [{"id": "X1"}]}')
    with pytest.raises(StateError, match="does not match its schema at features/0"):
        read_json(bad, FEATURE_LIST)


def test_a_fifo_a_device_link_or_a_huge_file_is_refused_not_read(tmp_path: Path) -> None:
    """An agent writes the hand-off files: a FIFO would block the scheduler, /dev/zero never ends."""
    fifo = tmp_path / "progress.json"
    os.mkfifo(fifo)
    with pytest.raises(StateError, match=r"progress\.json is not a regular file"):
        read_json(fifo)
    link = tmp_path / "reviews.json"
    link.symlink_to("/dev/zero")
    with pytest.raises(StateError, match=r"reviews\.json is a symbolic link"):
        read_json(link)
    huge = tmp_path / "feature_list.json"
    huge.write_text('{"features": []}   ')
    with pytest.raises(StateError, match="larger than 16 bytes"):
        read_regular(huge, limit=16)
    assert read_regular(huge, limit=20) == b'{"features": []}   '
    assert MAX_JSON_BYTES >= 64 * 2**20, "a 10,000-feature list is about 4 MB"


def test_handoff_files_are_created_and_validate(tmp_path: Path) -> None:
    ensure_handoff_files(tmp_path, "app")
    loaded = load_handoff(tmp_path)
    assert (
        loaded.feature_list is None
        and loaded.progress is not None
        and loaded.reviews == {"reviews": [], "fixes": []}
    )


def test_clean_sessions_have_no_violations() -> None:
    before = handoff()
    passed = json.loads(json.dumps(FEATURES))
    passed["features"][0]["passes"] = True
    assert check_invariants(before, handoff(passed, [REVIEW]), SessionType.REVIEW) == []
    assert check_invariants(Handoff(None, None, None), handoff(), SessionType.INITIALIZER) == []


FIX = {"fix_id": 1, "review_id": 1, "issues_fixed": []}


@pytest.mark.parametrize(
    ("role", "after", "problems"),
    [
        (
            "IMPLEMENT",
            handoff({"features": FEATURES["features"][:1]}),
            ["features were added, removed or edited after the INITIALIZER"],
        ),
        (
            "IMPLEMENT",
            handoff({"features": [{**FEATURES["features"][0], "passes": True}, FEATURES["features"][1]]}),
            ["IMPLEMENT changed `passes`; only REVIEW may"],
        ),
        (
            "REVIEW",
            handoff(reviews=[REVIEW, {**REVIEW, "review_id": 1}]),
            ["reviews.json `reviews` IDs must increase (review_id: [1, 1])"],
        ),
        (
            "FIX",
            handoff(fixes=[{**FIX, "fix_id": 2}, FIX]),
            ["reviews.json `fixes` IDs must increase (fix_id: [2, 1])"],
        ),
        (
            "REVIEW",
            handoff({"features": [FEATURES["features"][0], FEATURES["features"][0]]}),
            [
                "feature_list.json has duplicate feature IDs: F001",
                "features were added, removed or edited after the INITIALIZER",
            ],
        ),
        (
            "IMPLEMENT",
            handoff(reviews=[REVIEW]),
            ["IMPLEMENT appended a review it may not write (no reviews only)"],
        ),
        (
            "ARCHITECTURE",
            handoff(reviews=[REVIEW]),
            ["ARCHITECTURE appended a review it may not write (architecture reviews only)"],
        ),
        ("REVIEW", handoff(fixes=[FIX]), ["REVIEW appended a fix entry; only FIX may"]),
    ],
)
def test_invariant_violations(role: str, after: Handoff, problems: list[str]) -> None:
    assert check_invariants(handoff(), after, SessionType(role)) == problems


def test_earlier_fixes_may_not_change() -> None:
    before = handoff(fixes=[FIX])
    assert check_invariants(before, handoff(fixes=[{**FIX, "issues_fixed": ["x"]}]), SessionType.FIX) == [
        "earlier entries of reviews.json `fixes` were changed or removed"
    ]


def test_earlier_reviews_may_not_change() -> None:
    before = handoff(reviews=[REVIEW])
    after = handoff(reviews=[{**REVIEW, "verdict": "REJECT"}])
    assert check_invariants(before, after, SessionType.REVIEW) == [
        "earlier entries of reviews.json `reviews` were changed or removed"
    ]


def test_only_the_initializer_creates_the_feature_list() -> None:
    assert check_invariants(Handoff(None, None, None), handoff(), SessionType.IMPLEMENT) == [
        "IMPLEMENT created feature_list.json; only INITIALIZER may"
    ]


def test_appending_a_session_entry_after_earlier_ones_is_clean() -> None:
    first = {"session_id": 1, "agent_type": "INITIALIZER", "outcome": "INITIALIZED"}
    before = Handoff(FEATURES, {"sessions": [first]}, {"reviews": [], "fixes": []})
    second = {"session_id": 2, "agent_type": "IMPLEMENT", "outcome": "READY_FOR_REVIEW"}
    after = Handoff(FEATURES, {"sessions": [first, second]}, {"reviews": [], "fixes": []})
    assert check_invariants(before, after, SessionType.IMPLEMENT) == []
    spaced = Handoff(
        FEATURES, {"sessions": [first, {**second, "outcome": "READY FOR REVIEW"}]}, after.reviews
    )
    assert check_invariants(before, spaced, SessionType.IMPLEMENT) == [
        "progress.json: session 2 reports outcome 'READY FOR REVIEW'; IMPLEMENT reports READY_FOR_REVIEW or FAILED"
    ]
    assert check_invariants(before, Handoff(FEATURES, None, before.reviews), SessionType.IMPLEMENT) == [
        "earlier session entries of progress.json were changed or removed"
    ]


def test_an_existing_repository_gets_main_and_the_ignore_rules_and_keeps_its_work_tree(
    tmp_path: Path,
) -> None:
    import subprocess

    from session_scheduler.repo import gitops

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=tmp_path, capture_output=True, text=True, check=True).stdout

    git("init", "-q", "-b", "master")
    (tmp_path / "app.py").write_text("print('hi')\n")
    (tmp_path / ".gitignore").write_text("*.log\n")
    git("add", "app.py", ".gitignore")
    git("commit", "-qm", "start")
    (tmp_path / "notes.txt").write_text("uncommitted work\n")
    repo = gitops.open_repo(tmp_path)  # no spec to commit: nothing is checked out or set aside
    assert gitops.head(repo, "main") == gitops.head(repo, "master")
    assert gitops.current_branch(repo) == "master" and git("status", "--porcelain") == "?? notes.txt\n"
    assert gitops.stashes(tmp_path) == []
    assert git("check-ignore", "progress.json", ".agent_state.json", ".bashrc", ".claude").split() == [
        "progress.json",
        ".agent_state.json",
    ]  # the scheduler's files; the person's dotfiles are theirs (a lane's clone excludes those too)
    (tmp_path / "app_spec.txt").write_text("an app\n")  # the first run: the spec is committed on main
    repo = gitops.open_repo(tmp_path)
    assert gitops.current_branch(repo) == "main" and git("status", "--porcelain") == ""
    assert "notes.txt" in git("stash", "show", "--include-untracked", "--name-only", "stash@{0}")
    assert git("show", "main:.gitignore") == "*.log\n"  # the person's .gitignore is left alone
    assert git("log", "-1", "--format=%s%n%H", "main").split("\n")[0] == gitops.SPEC_COMMIT
    assert git("show", "--name-only", "--format=", "main").split() == ["app_spec.txt"]


def _copies_made(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from session_scheduler.store import progress

    made: list[str] = []
    real = progress.shutil.copy2

    def copy2(src: Path, dst: Path) -> object:
        made.append(Path(src).name)
        return real(src, dst)

    monkeypatch.setattr(progress.shutil, "copy2", copy2)
    return made


def _edit_in_place_keeping_size_and_mtime(path: Path, old: bytes, new: bytes) -> None:
    """What a hostile agent could do: same length, and `touch -d` back to the old time."""
    import os
    import time

    stat = path.stat()
    coarse = getattr(time, "CLOCK_REALTIME_COARSE", time.CLOCK_REALTIME)  # what file times are read from
    wait_until(
        lambda: time.clock_gettime_ns(coarse) > stat.st_ctime_ns,
        "the clock past the file's change time",
        5,
        0.001,
    )
    text = path.read_bytes()
    assert len(old) == len(new) and old in text
    with path.open("r+b") as handle:
        handle.write(text.replace(old, new))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns


def test_snapshot_copies_a_version_once_and_links_it_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from session_scheduler.store.progress import snapshot

    made = _copies_made(monkeypatch)
    folder, pre, post = tmp_path / "p", tmp_path / "pre", tmp_path / "post"
    folder.mkdir()
    project = Records(folder)  # the copies made last are the records' to remember
    atomic_write_json(folder / "feature_list.json", FEATURES)
    atomic_write_json(folder / "progress.json", {"sessions": []})
    snapshot(project, pre)
    assert sorted(made) == ["feature_list.json", "progress.json"]
    assert not (pre / "reviews.json").exists()
    snapshot(project, pre)  # unchanged: nothing copied again
    snapshot(project, post)  # the same versions: hard links to the copies in pre
    project.copies.pop(str(post / "progress.json"))  # forgotten (only the last copies are kept in mind)
    snapshot(project, post)  # linked again over a link to the same file: rename(2) does nothing
    assert len(made) == 2 and sorted(p.name for p in post.iterdir()) == [
        "feature_list.json",
        "progress.json",
    ]  # no temp left
    assert (post / "feature_list.json").stat().st_ino == (pre / "feature_list.json").stat().st_ino
    atomic_write_json(folder / "progress.json", {"sessions": [], "x": 1})  # a new version
    snapshot(project, post)
    assert made[2:] == ["progress.json"]
    assert json.loads((post / "progress.json").read_text())["x"] == 1
    assert "x" not in json.loads((pre / "progress.json").read_text())  # the older copy is as it was
    (folder / "progress.json").unlink()
    snapshot(project, post)
    assert not (post / "progress.json").exists()


def test_snapshot_copies_again_what_changed_behind_its_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from session_scheduler.store.progress import snapshot

    made = _copies_made(monkeypatch)
    folder, dest = tmp_path / "p", tmp_path / "dest"
    folder.mkdir()
    project = Records(folder)  # remembers the copies it made: a change must still be seen
    atomic_write_json(folder / "progress.json", {"sessions": [], "current_phase": "IMPLEMENT"})
    snapshot(project, dest)
    assert len(made) == 1
    snapshot(project, dest)
    assert len(made) == 1  # unchanged: not copied again
    _edit_in_place_keeping_size_and_mtime(folder / "progress.json", b'"IMPLEMENT"', b'"REVIEWED!"')
    snapshot(project, dest)
    assert len(made) == 2 and b'"REVIEWED!"' in (dest / "progress.json").read_bytes()
    (dest / "progress.json").unlink()  # someone removed the copy
    snapshot(project, dest)
    assert len(made) == 3 and (dest / "progress.json").exists()
    (dest / "progress.json").write_text("changed by hand\n")
    snapshot(project, dest)
    assert len(made) == 4 and (dest / "progress.json").read_bytes() == (folder / "progress.json").read_bytes()


def test_the_feature_list_copy_is_a_base_restored_with_the_verified_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from session_scheduler.store.progress import restore, snapshot

    made = _copies_made(monkeypatch)
    folder, dest = tmp_path / "p", tmp_path / "dest"
    folder.mkdir()
    project = Records(folder)  # the copies made last are the records' to remember
    path = folder / "feature_list.json"
    atomic_write_json(path, FEATURES)
    snapshot(project, dest, ("feature_list.json",))
    marked = {"features": [{**FEATURES["features"][0], "passes": True}, FEATURES["features"][1]]}
    atomic_write_json(path, marked)  # a REVIEW marked F001 passing
    snapshot(project, dest, ("feature_list.json",))
    assert made == ["feature_list.json"]  # only passes changed: the base still serves
    live = path.read_text()
    restore(project, dest, frozenset({"F001"}))
    assert path.read_text() == live
    restore(project, dest, frozenset())
    assert json.loads(path.read_text()) == FEATURES
    edited = {"features": [{**FEATURES["features"][0], "description": "other"}, FEATURES["features"][1]]}
    atomic_write_json(path, edited)  # more than passes changed: copied again
    snapshot(project, dest, ("feature_list.json",))
    assert (
        made == ["feature_list.json"] * 2 and json.loads((dest / "feature_list.json").read_text()) == edited
    )
    atomic_write_json(path, {"features": FEATURES["features"], "extra": 1})  # a top-level field too
    snapshot(project, dest, ("feature_list.json",))
    assert len(made) == 3
    path.write_text("{ broken")
    snapshot(project, dest, ("feature_list.json",))  # not valid: copied as it is
    assert len(made) == 4 and (dest / "feature_list.json").read_text() == "{ broken"
    restore(project, dest, frozenset({"F001"}))
    assert path.read_text() == "{ broken"


def test_a_handoff_file_edited_in_place_with_its_old_time_is_read_again(tmp_path: Path) -> None:
    atomic_write_json(tmp_path / "feature_list.json", FEATURES)
    assert load_handoff(tmp_path).passing() == frozenset()
    _edit_in_place_keeping_size_and_mtime(
        tmp_path / "feature_list.json", b'"passes": false', b'"passes": true '
    )
    assert load_handoff(tmp_path).passing() == frozenset({"F001", "F002"})


def test_only_passes_differ_agrees_with_comparing_everything() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from session_scheduler.store.progress import only_passes_differ

    feature = st.fixed_dictionaries(
        {"id": st.sampled_from(("F1", "F2")), "passes": st.booleans()},
        optional={"steps": st.lists(st.sampled_from("ab"), max_size=2)},
    )

    @settings(max_examples=300, deadline=None)
    @given(
        before=st.lists(feature, max_size=4),
        after=st.lists(feature, max_size=4),
        share=st.lists(st.booleans(), max_size=4),
    )
    def check(before: list[dict[str, object]], after: list[dict[str, object]], share: list[bool]) -> None:
        after = [
            before[n] if n < len(before) and n < len(share) and share[n] else f for n, f in enumerate(after)
        ]

        def strip(features: list[dict[str, object]]) -> list[dict[str, object]]:
            return [{k: v for k, v in f.items() if k != "passes"} for f in features]

        assert only_passes_differ(before, after) == (
            len(before) == len(after) and strip(before) == strip(after)
        )

    check()


def test_the_status_fields_are_kept_per_lane(tmp_path: Path) -> None:
    """Each lane's status is its own entry of `lanes`; `current_*` are the lane that wrote last;
    the sessions the agents appended are kept."""
    ensure_handoff_files(tmp_path, "app")
    write_status(tmp_path, phase="IMPLEMENT", feature="F001", branch="feature/F001", features_completed=0)
    write_status(
        tmp_path, phase="REVIEW", feature="F002", branch="feature/F002", features_completed=1, lane=2
    )
    data = json.loads((tmp_path / "progress.json").read_text(encoding="utf-8"))
    assert data["lanes"] == {
        "0": {"phase": "IMPLEMENT", "feature": "F001", "branch": "feature/F001"},
        "2": {"phase": "REVIEW", "feature": "F002", "branch": "feature/F002"},
    }
    assert (data["current_phase"], data["current_feature"], data["features_completed"]) == (
        "REVIEW",
        "F002",
        1,
    )
    write_status(tmp_path, phase="DONE", feature=None, branch=None, features_completed=2)
    data = json.loads((tmp_path / "progress.json").read_text(encoding="utf-8"))
    assert list(data["lanes"]) == ["0", "2"] and data["lanes"]["0"]["phase"] == "DONE"


def test_each_lane_has_its_own_restore_point_and_the_records_one_after(tmp_path: Path) -> None:
    pre = {lane: restore_point(tmp_path, "pre", lane) for lane in (0, 1)}
    assert pre[0] != pre[1] and pre[0] == restore_point(tmp_path, "pre")
    assert restore_point(tmp_path, "post", 1) == restore_point(tmp_path, "post")
    assert pre[1].relative_to(tmp_path).parts == (".agent_logs", "restore", "lane-1", "pre")
