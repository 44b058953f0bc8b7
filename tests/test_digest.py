"""The morning digest (view/digest.py): what the last run landed, what waits for the person (with
its proof), what is blocked and why, and what the last run cost, read from the records alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test_approval import REVIEW, approve, night

from session_scheduler.core.config import AgentConfig
from session_scheduler.store import progress
from session_scheduler.store.events import EventLog
from session_scheduler.view import digest


def ended(log: EventLog, session: int, cost: float, feature: str = "F001") -> None:
    log.emit(
        "session_ended",
        session=session,
        role="IMPLEMENT",
        feature=feature,
        standing="verified",
        reason="verified",
        receipt={"model": "sonnet", "cost_usd": cost, "turns": 4, "duration_s": 60.0, "partial": False},
    )


def started(project: Path, run: str) -> EventLog:
    log = EventLog(project, run)
    log.emit("run_started", pid=1, project=str(project), version="0", cost_basis="api")
    return log


def landed(log: EventLog, feature: str, commit: str = "0" * 40) -> None:
    log.emit(
        "merge_verified",
        session=1,
        feature=feature,
        branch=f"feature/{feature}",
        commit=commit,
        tests="passed",
    )


def main_project(tmp_path: Path) -> Path:
    project = tmp_path / "p"
    project.mkdir()
    progress.save_config(project, AgentConfig().to_json())
    return project


def test_no_digest_without_saved_options(tmp_path: Path) -> None:
    assert digest.digest_of(tmp_path) is None
    assert digest.lines(None) == []
    (tmp_path / ".agent_config.json").write_text("{ broken")
    assert digest.digest_of(tmp_path) is None


def test_the_digest_is_of_the_last_run_only(tmp_path: Path) -> None:
    project = main_project(tmp_path)
    first = started(project, "run-1")
    ended(first, 1, 1.5)
    landed(first, "F001")
    second = started(project, "run-2")
    ended(second, 2, 0.25, "F002")
    landed(second, "F002")
    ended(second, 3, 0.5, "F003")
    landed(second, "F003")
    landed(second, "F002")  # landed again in the same run: named once
    shown = digest.digest_of(project)
    assert shown is not None
    assert shown["run"] == "run-2" and shown["landed"] == ["F002", "F003"]
    assert shown["cost_usd"] == 0.75
    assert shown["lands_on"] == "main" and shown["your_branch"] is None and shown["waiting_for_you"] == []


def test_a_session_the_next_run_ended_for_a_killed_run_costs_the_killed_run(tmp_path: Path) -> None:
    """A receipt is the run's that owned the session (its `cut.run`), not the run that wrote it."""
    project = main_project(tmp_path)
    started(project, "run-1")
    second = started(project, "run-2")
    second.emit(
        "session_ended",
        session=1,
        role="IMPLEMENT",
        feature="F001",
        standing="interrupted",
        reason="killed",
        receipt={"model": "sonnet", "cost_usd": 2.0, "turns": 1, "duration_s": 1.0, "partial": True},
        cut={"run": "run-1", "by": "kill"},
    )
    ended(second, 2, 0.125)
    shown = digest.digest_of(project)
    assert shown is not None and shown["cost_usd"] == 0.125


def test_blocked_features_say_why(tmp_path: Path) -> None:
    project = main_project(tmp_path)
    log = started(project, "run-1")
    log.emit("feature_blocked", feature="F002", rejections=2)
    log.emit("feature_blocked", feature="F003", rejections=0, because="F002")
    log.emit("feature_blocked", feature="F004", rejections=1)
    shown = digest.digest_of(project)
    assert shown is not None
    assert shown["blocked"] == [
        {"feature": "F002", "why": "rejected 2 times"},
        {"feature": "F003", "why": "it depends on F002, which is blocked"},
        {"feature": "F004", "why": "rejected 1 time"},
    ]
    said = digest.lines(shown)
    assert (
        "  blocked: F002 (rejected 2 times); F003 (it depends on F002, which is blocked); F004 (rejected 1 time)"
        in said
    )


def test_a_main_project_has_no_waiting_line(tmp_path: Path) -> None:
    project = main_project(tmp_path)
    landed(started(project, "run-1"), "F001")
    said = digest.lines(digest.digest_of(project))
    assert said[0] == "Morning digest (the last run):"
    assert "  landed on main: F001" in said and "  the last run cost: $0.0000" in said
    assert not any("waiting for you" in line for line in said)


def test_waiting_work_is_listed_with_its_proof(tmp_path: Path) -> None:
    done = night(tmp_path)
    proof = done.project / ".agent_logs" / "proofs" / "F001.md"
    proof.parent.mkdir(parents=True)
    proof.write_text("# F001: proof\n")
    shown = digest.digest_of(done.project)
    assert shown is not None
    assert shown["lands_on"] == REVIEW and shown["your_branch"] == "develop"
    assert shown["landed"] == ["F001", "F002"]
    why = "on the review branch, not approved"
    assert shown["waiting_for_you"] == [
        {"feature": "F001", "why": why, "proof": ".agent_logs/proofs/F001.md"},
        {"feature": "F002", "why": why, "proof": None},
    ]
    said = digest.lines(shown)
    (waits,) = [line for line in said if "waiting for you" in line]
    assert waits.startswith(
        f"  waiting for you: F001, F002 (on {REVIEW}, not on develop); `approve` lands them"
    )
    assert any(".agent_logs/proofs/" in line for line in said)  # where the proofs are


def test_a_review_project_with_nothing_waiting_says_so(tmp_path: Path) -> None:
    done = night(tmp_path)
    approve(done)
    shown = digest.digest_of(done.project)
    assert shown is not None and shown["waiting_for_you"] == []
    said = digest.lines(shown)
    assert "  waiting for you: nothing (your branch develop has every feature)" in said


def test_a_review_project_before_its_branch_is_named(tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    progress.save_config(project, AgentConfig(land_on="review").to_json())
    shown: dict[str, Any] | None = digest.digest_of(project)
    assert shown is not None and shown["lands_on"] == "a review branch" and shown["your_branch"] == "main"
    assert shown["run"] is None and shown["landed"] == [] and shown["cost_usd"] == 0


def test_what_the_person_sent_back_is_said_until_it_lands_again(tmp_path: Path) -> None:
    from session_scheduler.repo import landing as landing_module

    project = main_project(tmp_path)
    log = started(project, "run-1")
    for feature in ("F001", "F002", "F003"):
        landed(log, feature)
    for feature in ("F002", "F003"):
        log.emit(
            "sent_back", feature=feature, branch=f"feature/{feature}", why=landing_module.PERSON, review_id=7
        )
    log.emit("sent_back", feature="F001", branch="feature/F001", why="conflict", review_id=8)
    shown = digest.digest_of(project)
    assert shown is not None and shown["landed"] == ["F001"] and shown["sent_back"] == ["F002", "F003"]
    assert "  sent back by you: F002, F003 (the next run's FIX answers your words)" in digest.lines(shown)
    landed(started(project, "run-2"), "F002")  # fixed and landed again: no longer sent back
    shown = digest.digest_of(project)
    assert shown is not None and shown["landed"] == ["F002"] and shown["sent_back"] == ["F003"]
