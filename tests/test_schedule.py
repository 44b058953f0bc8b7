"""Several lanes over one backlog: claims, dependencies, the quiet `main` an architecture review
needs, session numbers, and the one-lane schedule being exactly today's state machine."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session_scheduler.core.config import AgentConfig, SessionType
from session_scheduler.core.features import dependency_problems, depends_of
from session_scheduler.core.machine import (
    Approved,
    ArchitectureDue,
    Backlog,
    Blocked,
    Done,
    Halted,
    Lane,
    Merged,
    Others,
    Outcome,
    Rejected,
    SessionState,
    architecture_fixes,
    choose_work,
    feature,
    transition,
)
from session_scheduler.core.schedule import (
    IDLE,
    MEMORY_PER_LANE,
    Schedule,
    landed,
    landing_of,
    lanes_refusal,
    resized,
    restarted,
    resumed,
    sent_back,
    transition_lane,
    unready,
    wake,
)
from session_scheduler.core.schedule import held as hold

T = SessionType
CFG = AgentConfig(architecture_interval=100, max_fix_rounds=1, max_rejections=2, max_attempts=2)
FEATURES = ("F001", "F002", "F003", "F004")


def listed(lanes: int, depends: dict[str, tuple[str, ...]] | None = None, cfg: AgentConfig = CFG) -> Schedule:
    """A schedule whose INITIALIZER (lane 0) listed FEATURES; every lane then took its work."""
    schedule = Schedule.of(SessionState(), lanes)
    assert [lane.role for lane in schedule.lanes] == [T.INITIALIZER, *[T.WAIT] * (lanes - 1)]
    done = Outcome(T.INITIALIZER, ok=True, feature_ids=FEATURES, depends=tuple((depends or {}).items()))
    return transition_lane(schedule, 0, done, cfg)[0]


def held(schedule: Schedule) -> list[str | None]:
    """Each lane's feature, or its role when it holds none (a lane that waits for its approved
    work to land holds it only as the queue's)."""
    return [
        lane.work.feature_id if lane.work and lane.role not in IDLE else lane.role.value
        for lane in schedule.lanes
    ]


def outcome(schedule: Schedule, lane: int, verdict: str | None = None, ok: bool = True) -> Outcome:
    """What verification would say of lane `lane`'s session: a PASS marks its feature passing."""
    now = schedule.lanes[lane]
    passing = schedule.backlog.passing
    if verdict == "PASS" and now.work and now.work.feature_id:
        passing = passing | {now.work.feature_id}
    return Outcome(now.role, ok=ok, verdict=verdict, passing=passing, review_id=1)  # type: ignore[arg-type]


def test_a_lane_is_never_handed_a_feature_another_lane_holds() -> None:
    """The case the one-lane machine got wrong: lane 0's REVIEW PASS on F001 handed it F002,
    which lane 1 was implementing. Now it takes F003, and F001 waits in the merge queue (a lane
    does not wait for its approved work to land: `went_on`)."""
    schedule = listed(2)
    assert held(schedule) == ["F001", "F002"]
    schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0), CFG)  # IMPLEMENT -> REVIEW
    schedule, events = transition_lane(schedule, 0, outcome(schedule, 0, "PASS"), CFG)
    assert events == (Approved(feature("F001")),) and schedule.backlog.landing == (feature("F001"),)
    assert held(schedule) == ["F003", "F002"] and schedule.holder("F002") == 1
    assert landing_of(schedule, 0) is None and schedule.holder("F001") is None
    assert schedule.backlog.passing == set()  # approved is not merged: the queue lands it
    schedule, events = landed(schedule, feature("F001"), CFG)
    assert events == (Merged(feature("F001")),) and schedule.backlog.passing == {"F001"}
    assert schedule.backlog.landing == () and held(schedule) == ["F003", "F002"]


def test_a_lane_that_goes_on_takes_nothing_that_needs_its_approved_work_before_it_lands() -> None:
    """Not stacked (its merge may not land as it is), a lane takes from `main` only what does not
    need its approved work; with nothing else open it waits for the landing, and the dependent
    then starts on a `main` that holds it."""
    schedule = listed(2, {"F002": ("F001",), "F003": ("F001",), "F004": ("F001",)})
    assert held(schedule) == ["F001", "WAIT"]
    schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0), CFG)
    schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0, "PASS"), CFG)
    assert held(schedule) == ["WAIT", "WAIT"] and landing_of(schedule, 0) == feature("F001")
    schedule, _ = landed(schedule, feature("F001"), CFG)
    assert held(schedule) == ["F002", "F003"]


def test_a_lane_whose_merge_lands_as_it_is_goes_on_from_it_a_dependent_included() -> None:
    """With `stack` (its REVIEW's merge is expected to land as it is) the lane does not wait for
    the landing: it takes the next feature at once, one that depends on the approved work
    included (it begins on that merge); approved is still not passing, and no other lane may
    take the dependent."""
    schedule = listed(2, {"F002": ("F001",), "F003": ("F001",)})
    assert held(schedule) == ["F001", "F004"]
    schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0), CFG)
    schedule, events = transition_lane(schedule, 0, outcome(schedule, 0, "PASS"), CFG, stack=True)
    assert events == (Approved(feature("F001")),) and schedule.backlog.landing == (feature("F001"),)
    assert held(schedule) == ["F002", "F004"] and schedule.backlog.passing == set()
    assert landing_of(schedule, 0) is None and schedule.lanes[0].role is T.IMPLEMENT
    schedule, _ = transition_lane(schedule, 1, outcome(schedule, 1), CFG)
    schedule, _ = transition_lane(schedule, 1, outcome(schedule, 1, "PASS"), CFG, stack=True)
    assert held(schedule) == ["F002", "WAIT"]  # F003 needs F001: lane 0's approval, not lane 1's
    assert landing_of(schedule, 1) == feature("F004")  # so lane 1 waits for its own landing
    schedule, _ = landed(schedule, feature("F001"), CFG)
    assert schedule.backlog.passing == {"F001"} and held(schedule) == ["F002", "WAIT"]
    schedule, _ = landed(schedule, feature("F004"), CFG)
    assert held(schedule) == ["F002", "F003"]


def test_a_stacked_lane_takes_no_plan_no_architecture_review_and_is_not_done_before_the_landing() -> None:
    """What is not a feature or sent-back work waits for the landing, as it always did: the last
    feature approved leaves the lane waiting for it (the landing may still fail), not done, and an
    architecture review the approval makes due runs once it landed, as with one lane before."""
    schedule = replace(listed(1), cloned=True)  # one lane in a clone, its work landed by the queue
    for _ in FEATURES:
        schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0), CFG)
        schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0, "PASS"), CFG, stack=True)
        work = schedule.backlog.landing[-1]
        if schedule.lanes[0].role is T.WAIT:
            break
        schedule, _ = landed(schedule, work, CFG)
    assert schedule.lanes[0] == Lane(T.WAIT, feature("F004")) and landing_of(schedule, 0) == feature("F004")
    schedule, _ = sent_back(schedule, feature("F004"), 7, CFG, rejection=False)
    assert schedule.lanes[0] == Lane(T.FIX, feature("F004"), fix_rounds=1, open_review=7)
    due = replace(listed(1, cfg=replace(CFG, architecture_interval=1)), cloned=True)
    due, _ = transition_lane(due, 0, outcome(due, 0), CFG)
    due, _ = transition_lane(
        due, 0, outcome(due, 0, "PASS"), replace(CFG, architecture_interval=1), stack=True
    )
    assert landing_of(due, 0) == feature("F001")  # the review it makes due waits for the landing
    due, events = landed(due, feature("F001"), replace(CFG, architecture_interval=1))
    assert due.lanes[0].role is T.ARCHITECTURE, events


def test_work_begun_on_a_merge_that_did_not_land_as_approved_is_done_again_and_not_rejected() -> None:
    schedule = replace(listed(1, {"F002": ("F001",)}), cloned=True)
    schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0), CFG)
    schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0, "PASS"), CFG, stack=True)
    assert held(schedule) == ["F002"]
    schedule, _ = sent_back(schedule, feature("F001"), 3, CFG)  # the lane holds F002, begun on F001
    assert held(schedule) == ["F002"] and schedule.backlog.returned == ((feature("F001"), 3),)
    schedule, _ = unready(schedule, 0, CFG)  # not begun yet: given back; the lane FIXes F001
    assert schedule.lanes[0] == Lane(T.FIX, feature("F001"), fix_rounds=1, open_review=3)
    assert schedule.backlog.next_open(frozenset({"F001"})) == "F003"  # F002 waits for F001
    schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0), CFG)
    schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0, "PASS"), CFG, stack=True)
    assert held(schedule) == ["F002"]
    schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0), CFG)
    schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0, "PASS"), CFG, stack=True)
    assert schedule.backlog.landing == (feature("F001"), feature("F002"))
    schedule, _ = hold(schedule, feature("F001"), "a risky file", CFG)
    schedule, _ = restarted(schedule, feature("F002"), CFG)  # its base waits for the person
    assert schedule.backlog.landing == () and schedule.backlog.rejection_count("F002") == 0
    assert held(schedule) == ["F003"] and schedule.backlog.next_open(frozenset({"F003"})) == "F004"


def test_session_numbers_are_handed_out_once_whichever_lane_asks() -> None:
    schedule = listed(3)
    numbers = []
    for _ in range(5):
        schedule, number = schedule.issue()
        numbers.append(number)
    assert numbers == [1, 2, 3, 4, 5] and schedule.issued == 5
    assert Schedule.of(SessionState(session_count=7), 2).issue()[1] == 8  # after a one-lane project's 7


def test_a_feature_is_taken_only_once_the_features_it_depends_on_are_merged() -> None:
    schedule = listed(2, {"F002": ("F001",), "F003": ("F001",)})
    assert held(schedule) == ["F001", "F004"]  # F002 and F003 wait for F001
    schedule, _ = transition_lane(schedule, 1, outcome(schedule, 1), CFG)
    schedule, events = transition_lane(schedule, 1, outcome(schedule, 1, "PASS"), CFG)
    assert held(schedule) == ["F001", "WAIT"]  # F004 approved; nothing lane 1 may take yet
    assert events == (Approved(feature("F004")),)
    schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0), CFG)
    schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0, "PASS"), CFG)
    assert held(schedule) == ["WAIT", "WAIT"]  # F001 approved, not merged: F002, F003 still wait
    schedule, _ = landed(schedule, feature("F001"), CFG)
    assert held(schedule) == ["F002", "WAIT"]  # F001 merged: lane 0 takes F002; lane 1 waits for F004
    schedule, _ = landed(schedule, feature("F004"), CFG)
    assert held(schedule) == ["F002", "F003"]


def test_a_rejection_releases_the_claim_and_a_blocked_feature_blocks_what_depends_on_it() -> None:
    schedule = listed(2, {"F003": ("F002",), "F004": ("F003",)})
    assert held(schedule) == ["F002", "F001"]  # the chain F002 -> F003 -> F004 starts first
    for _ in range(2):  # F002 rejected twice (max_rejections): blocked, and F003, F004 with it
        schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0), CFG)
        schedule, events = transition_lane(schedule, 0, outcome(schedule, 0, "REJECT"), CFG)
        assert Rejected(feature("F002")) in events
    assert events[-2:] == (Blocked("F003", because="F002"), Blocked("F004", because="F002"))
    assert schedule.backlog.blocked == {"F002", "F003", "F004"} and held(schedule) == ["WAIT", "F001"]
    schedule, _ = transition_lane(schedule, 1, outcome(schedule, 1), CFG)
    schedule, events = transition_lane(schedule, 1, outcome(schedule, 1, "PASS"), CFG)
    assert held(schedule) == ["WAIT", "WAIT"] and not schedule.settled  # until the queue lands it
    schedule, events = landed(schedule, feature("F001"), CFG)
    assert held(schedule) == ["DONE", "DONE"] and schedule.settled
    assert events == (Merged(feature("F001")), Done(), Done())  # each lane's end


def test_an_architecture_review_waits_for_a_quiet_main() -> None:
    """Due once a merge landed, it waits while another lane holds work or the queue holds
    approved work; then the first lane to look runs it, and the others go on after it. (F003 and
    F004 need both: a lane whose REVIEW passed has nothing else to go on to.)"""
    cfg = replace(CFG, architecture_interval=1)
    schedule = listed(2, {"F003": ("F001", "F002"), "F004": ("F001", "F002")}, cfg=cfg)
    schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0), cfg)
    schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0, "PASS"), cfg)
    schedule, events = landed(schedule, feature("F001"), cfg)  # due now; lane 1 holds F002
    assert held(schedule) == ["WAIT", "F002"] and not any(isinstance(e, ArchitectureDue) for e in events)
    schedule, _ = transition_lane(schedule, 1, outcome(schedule, 1), cfg)
    schedule, events = transition_lane(schedule, 1, outcome(schedule, 1, "PASS"), cfg)
    assert held(schedule) == ["WAIT", "WAIT"] and events == (Approved(feature("F002")),)  # F002 in the queue
    schedule, events = landed(schedule, feature("F002"), cfg)
    assert events == (Merged(feature("F002")), ArchitectureDue(2))  # main is quiet: the review
    assert held(schedule) == ["ARCHITECTURE", "WAIT"] and not schedule.settled
    schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0, "PASS"), cfg)
    assert held(schedule) == ["F003", "F004"]  # lane 0 first, then the woken lane 1


def test_an_architecture_review_runs_alone_and_the_lanes_go_on_after_it() -> None:
    cfg = replace(CFG, architecture_interval=1)
    schedule = listed(2, {"F003": ("F001",), "F004": ("F001",)}, cfg=cfg)
    schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0), cfg)
    schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0, "PASS"), cfg)
    schedule, _ = transition_lane(schedule, 1, outcome(schedule, 1), cfg)  # F002 to its REVIEW
    schedule, events = landed(schedule, feature("F001"), cfg)
    assert held(schedule) == ["WAIT", "F002"] and not any(isinstance(e, ArchitectureDue) for e in events)
    schedule, events = transition_lane(schedule, 1, outcome(schedule, 1, "REJECT"), cfg)  # lane 1 frees up
    assert [lane.role for lane in schedule.lanes] == [T.WAIT, T.ARCHITECTURE] and ArchitectureDue(1) in events
    schedule, _ = transition_lane(schedule, 1, outcome(schedule, 1, "PASS"), cfg)
    assert held(schedule) == ["F003", "F002"]  # lane 1 first, then the woken lane 0


def test_work_the_queue_sends_back_is_fixed_by_the_next_free_lane() -> None:
    """A conflict or a red test: the return counts as a rejection, and a free lane (the one that
    waited for it to land, first) takes the work as a FIX against the scheduler's review; the
    last allowed return blocks the feature."""
    schedule = listed(3, {"F004": ("F001",)})
    schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0), CFG)
    schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0, "PASS"), CFG)
    assert held(schedule) == ["WAIT", "F002", "F003"]
    schedule, events = sent_back(schedule, feature("F001"), 9, CFG)
    assert events == () and schedule.backlog.rejection_count("F001") == 1
    assert schedule.lanes[0] == Lane(T.FIX, feature("F001"), fix_rounds=1, open_review=9)
    assert schedule.backlog.returned == () and held(schedule) == ["F001", "F002", "F003"]
    schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0), CFG)
    schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0, "PASS"), CFG)
    schedule, _ = transition_lane(schedule, 1, outcome(schedule, 1), CFG)  # lane 1 to its REVIEW
    schedule = replace(schedule, lanes=(Lane(T.IMPLEMENT, feature("F005")), *schedule.lanes[1:]))
    schedule, events = sent_back(schedule, feature("F001"), 10, CFG, rejection=False)  # no lane is free
    assert schedule.backlog.returned == ((feature("F001"), 10),)
    schedule, events = transition_lane(schedule, 1, outcome(schedule, 1, "REJECT"), CFG)  # lane 1 frees up
    assert schedule.lanes[1] == Lane(T.FIX, feature("F001"), fix_rounds=1, open_review=10)
    assert events == (Rejected(feature("F002")),)
    assert schedule.backlog.returned == ()
    schedule, _ = transition_lane(schedule, 1, outcome(schedule, 1), CFG)
    schedule, _ = transition_lane(schedule, 1, outcome(schedule, 1, "PASS"), CFG)
    schedule, events = sent_back(schedule, feature("F001"), 11, CFG)  # the third return: blocked
    assert events[:2] == (Blocked("F001"), Blocked("F004", because="F001"))
    assert schedule.backlog.returned == () and {"F001", "F004"} <= schedule.backlog.blocked
    with pytest.raises(ValueError, match="F001 is not in the merge queue"):
        landed(schedule, feature("F001"), CFG)


def test_work_sent_back_while_no_lane_is_free_is_what_a_lane_whose_review_passed_takes() -> None:
    """A lane whose REVIEW passes goes on while its work waits to land: work sent back meanwhile
    is its next (it used to be dropped there, and the feature built again from scratch)."""
    schedule = listed(2)
    schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0), CFG)  # F001 to its REVIEW
    schedule, _ = transition_lane(schedule, 1, outcome(schedule, 1), CFG)  # F002 to its REVIEW
    schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0, "PASS"), CFG)
    schedule, _ = landed(schedule, feature("F001"), CFG)
    schedule = replace(schedule, lanes=(Lane(T.IMPLEMENT, feature("F003")), schedule.lanes[1]))
    sent = replace(schedule.backlog, returned=((feature("F004"), 12),))  # the person sent it back
    schedule = replace(schedule, backlog=sent)
    schedule, _ = transition_lane(schedule, 1, outcome(schedule, 1, "PASS"), CFG)  # F002 waits to land
    assert schedule.lanes[1] == Lane(T.FIX, feature("F004"), fix_rounds=1, open_review=12)
    assert schedule.backlog.returned == () and schedule.backlog.landing == (feature("F002"),)


def test_a_conflict_sends_work_back_without_counting_a_rejection() -> None:
    schedule = listed(2, {"F003": ("F001",), "F004": ("F001",)})  # lane 0 has nothing else to go on to
    schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0), CFG)
    schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0, "PASS"), CFG)
    for review in (9, 10, 11):  # more returns than --max-rejections: never blocked by conflicts
        schedule, events = sent_back(schedule, feature("F001"), review, CFG, rejection=False)
        assert events == () and schedule.backlog.rejection_count("F001") == 0
        assert schedule.lanes[0] == Lane(T.FIX, feature("F001"), fix_rounds=1, open_review=review)
        schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0), CFG)  # FIX -> REVIEW
        schedule, _ = transition_lane(schedule, 0, outcome(schedule, 0, "PASS"), CFG)
        assert schedule.backlog.landing == (feature("F001"),)


def test_a_return_announces_only_what_it_newly_blocks_and_nothing_queued_is_settled() -> None:
    backlog = Backlog(
        FEATURES,
        passing=frozenset({"F002", "F003"}),
        blocked=frozenset({"F004"}),
        rejections=(("F001", 1),),
        depends=(("F004", ("F001",)),),
        landing=(feature("F001"),),
    )
    schedule = Schedule(backlog, (Lane(T.WAIT), Lane(T.WAIT)))
    schedule, events = sent_back(schedule, feature("F001"), 5, CFG)
    assert events == (Blocked("F001"), Done(), Done())  # F004 was blocked already
    arch = architecture_fixes(2)
    done = Backlog(FEATURES, passing=frozenset(FEATURES))
    assert done.settled()
    assert not replace(done, landing=(arch,)).settled() and not replace(done, returned=((arch, 3),)).settled()


def test_an_architecture_review_s_fixes_land_through_the_queue_too() -> None:
    arch = architecture_fixes(4)
    schedule = Schedule(Backlog(FEATURES), (Lane(T.REVIEW, arch, fix_rounds=1, open_review=4), Lane(T.WAIT)))
    schedule, events = transition_lane(schedule, 0, outcome(schedule, 0, "PASS"), CFG)
    assert events[0] == Approved(arch) and schedule.backlog.landing == (arch,)
    assert held(schedule) == ["F001", "F002"]  # the lanes go on while it waits to land
    schedule, events = sent_back(schedule, arch, 5, CFG)
    assert schedule.backlog.rejections == () and schedule.backlog.returned == ((arch, 5),)
    schedule, events = landed(
        replace(schedule, backlog=replace(schedule.backlog, returned=(), landing=(arch,))), arch, CFG
    )
    assert events[0] == Merged(arch) and schedule.backlog.passing == set()


def test_a_halt_halts_every_lane() -> None:
    schedule = Schedule.of(SessionState(), 3)
    failed = Outcome(T.INITIALIZER, ok=False, reason="no list")
    for _ in range(CFG.max_attempts):
        schedule, events = transition_lane(schedule, 0, failed, CFG)
    assert [lane.role for lane in schedule.lanes] == [T.HALTED] * 3 and schedule.settled
    assert isinstance(events[-1], Halted) and schedule.halt_reason == events[-1].reason
    assert Schedule.of(SessionState(halt_reason="x"), 2).halt_reason == "x"


def test_a_feature_blocked_twice_over_is_announced_once() -> None:
    """F004 depends on F002 and F003: blocked with F002, it is not blocked again with F003; a
    passing dependent is never blocked; the other lanes' features are not dependents."""
    backlog = Backlog(FEATURES, depends=(("F004", ("F002", "F003")), ("F003", ("F001",))))
    assert backlog.dependents("F001") == ("F003", "F004") and backlog.dependents("F004") == ()
    assert backlog.dependents("F002") == ("F004",)
    schedule = Schedule(backlog, (Lane(T.REVIEW, feature("F002")), Lane(T.REVIEW, feature("F003"))))
    rejected = Outcome(T.REVIEW, ok=True, verdict="REJECT", review_id=1)
    cfg = replace(CFG, max_rejections=1)
    schedule, events = transition_lane(schedule, 0, rejected, cfg)
    assert Blocked("F004", because="F002") in events and schedule.backlog.blocked == {"F002", "F004"}
    schedule, events = transition_lane(schedule, 1, rejected, cfg)
    assert [e for e in events if isinstance(e, Blocked)] == [Blocked("F003")]
    assert (
        schedule.holder("F003") is None and schedule.holder("F001") == 0
    )  # lane 0 took it after its rejection


def test_three_lanes_settle_together() -> None:
    schedule = Schedule(
        Backlog(FEATURES, passing=frozenset(FEATURES[:3])),
        (Lane(T.REVIEW, feature("F004")), Lane(T.WAIT), Lane(T.WAIT)),
    )
    done = Outcome(T.REVIEW, ok=True, verdict="PASS", passing=frozenset(FEATURES), review_id=1)
    schedule, events = transition_lane(schedule, 0, done, CFG)
    assert events == (Approved(feature("F004")),)
    schedule, events = landed(schedule, feature("F004"), CFG)
    assert events == (Merged(feature("F004")), Done(), Done(), Done())
    assert [lane.role for lane in schedule.lanes] == [T.DONE] * 3


def test_waking_lanes_before_the_feature_list_changes_nothing() -> None:
    schedule = Schedule.of(SessionState(), 2)
    assert wake(schedule, CFG) == (schedule, ())


def test_a_schedule_needs_a_lane() -> None:
    with pytest.raises(ValueError, match=r"^a schedule has at least one lane$"):
        Schedule.of(SessionState(), 0)
    assert len(Schedule.of(SessionState()).lanes) == 1  # one lane unless asked


@pytest.mark.parametrize(
    ("depends", "problem"),
    [
        ({"F002": ["F002"]}, "F002 depends on itself"),
        ({"F002": ["F009"]}, "F002 depends on F009, which is not in the list"),
        (
            {"F001": ["F002"], "F002": ["F003"], "F003": ["F001"]},
            "features depend on each other in a circle (F001 -> F002 -> F003 -> F001)",
        ),
    ],
)
def test_dependencies_no_feature_could_ever_meet_are_refused(
    depends: dict[str, list[str]], problem: str
) -> None:
    features = [{"id": f, **({"depends_on": depends[f]} if f in depends else {})} for f in FEATURES]
    assert dependency_problems(features) == [f"feature_list.json: {problem}"]


def test_dependencies_are_read_in_list_order_and_a_tree_is_fine() -> None:
    features = [{"id": "F001"}, {"id": "F002", "depends_on": ["F001"]}, {"id": "F003", "depends_on": []}]
    assert depends_of(features) == (("F002", ("F001",)),) and dependency_problems(features) == []


def test_one_lane_takes_features_in_dependency_order() -> None:
    state = SessionState(Backlog(FEATURES, depends=(("F001", ("F003",)),)), Lane(T.REVIEW, feature("F002")))
    step = transition(state, Outcome(T.REVIEW, ok=True, verdict="PASS", passing=frozenset({"F002"})), CFG)
    assert step.state.lane == Lane(T.IMPLEMENT, feature("F003"))  # F001 waits for F003


# -- properties over any run ------------------------------------------------------------------------

VERDICTS = st.sampled_from(["PASS", "PASS", "REQUEST_CHANGES", "REJECT", "FAIL", "STACK"])
"""STACK: a PASS whose merge is expected to land as it is (the lane goes on from it)."""


def _step(schedule: Schedule, lane: int, verdict: str, cfg: AgentConfig) -> Schedule:
    role = schedule.lanes[lane].role
    stack = verdict == "STACK"
    verdict = "PASS" if stack else verdict
    if verdict == "FAIL":
        return transition_lane(schedule, lane, outcome(schedule, lane, ok=False), cfg)[0]
    if role in (T.IMPLEMENT, T.FIX):
        return transition_lane(schedule, lane, outcome(schedule, lane), cfg)[0]
    if role is T.ARCHITECTURE and verdict == "REJECT":
        verdict = "PASS"
    return transition_lane(schedule, lane, outcome(schedule, lane, verdict), cfg, stack=stack)[0]


def _begun(schedule: Schedule, cfg: AgentConfig) -> Schedule:
    """As the lanes begin their next sessions: a feature chosen to begin on an approved merge
    that no longer waits to land, whose dependencies do not pass, is given back (`unready`)."""
    backlog = schedule.backlog
    approved = {w.feature_id for w in backlog.landing}
    for n, lane in enumerate(schedule.lanes):
        if lane.role is T.IMPLEMENT and lane.work and lane.work.feature_id:
            needs = set(backlog.needs(lane.work.feature_id))
            if not needs <= backlog.passing and not needs <= backlog.passing | approved:
                schedule = unready(schedule, n, cfg)[0]
    return schedule


QUEUE = st.sampled_from(["land", "land", "send_back"])


def _advance(schedule: Schedule, move: tuple[int, str], cfg: AgentConfig) -> Schedule | None:
    """One lane's session (a lane index and its verdict) or, when the move names the queue, its
    oldest landing landed or sent back; None when nothing can move."""
    index, verdict = move
    working = [n for n, now in enumerate(schedule.lanes) if now.role not in IDLE]
    landing = schedule.backlog.landing
    if landing and (verdict in ("land", "send_back") or not working):
        first = landing[0].feature_id
        if first and not schedule.backlog.passing.issuperset(schedule.backlog.needs(first)):
            return _begun(restarted(schedule, landing[0], cfg)[0], cfg)  # begun on what did not land
        if verdict == "send_back":
            return _begun(sent_back(schedule, landing[0], 99, cfg)[0], cfg)
        return _begun(landed(schedule, landing[0], cfg)[0], cfg)
    if not working:
        return None
    return _begun(
        _step(
            schedule,
            working[index % len(working)],
            "PASS" if verdict in ("land", "send_back") else verdict,
            cfg,
        ),
        cfg,
    )


@settings(max_examples=150, deadline=None)
@given(
    lanes=st.integers(1, 4),
    chain=st.booleans(),
    interval=st.sampled_from([1, 2, 100]),
    moves=st.lists(st.tuples(st.integers(0, 3), VERDICTS | QUEUE), max_size=120),
)
def test_no_feature_is_ever_held_twice_and_every_run_settles(
    lanes: int, chain: bool, interval: int, moves: list[tuple[int, str]]
) -> None:
    """Whatever the lanes' sessions and the merge queue decide, in any order: no feature is held
    twice (by two lanes, or by a lane and the queue), a held feature's dependencies are merged,
    approved work passes only once it landed, an architecture review runs only on a quiet `main`,
    and passing every session and landing everything from then on settles the run."""
    cfg = replace(CFG, architecture_interval=interval)
    schedule = listed(lanes, {"F002": ("F001",), "F004": ("F003",)} if chain else None, cfg)

    def check(schedule: Schedule) -> None:
        backlog = schedule.backlog
        claims = [
            lane.work.feature_id
            for lane in schedule.lanes
            if lane.work and lane.work.feature_id and lane.role not in IDLE
        ]
        for n, lane in enumerate(schedule.lanes):  # a lane that holds work idle waits for it to land
            assert lane.role not in IDLE or lane.work is None or landing_of(schedule, n) is not None
        queued = [w.feature_id for w in (*backlog.landing, *(w for w, _ in backlog.returned)) if w.feature_id]
        assert len(claims + queued) == len(set(claims + queued))
        assert not set(claims + queued) & backlog.passing
        unmet = {f for f in claims + queued if not backlog.passing.issuperset(backlog.needs(f))}
        assert not (set(claims + queued) - unmet) & backlog.blocked  # (begun on approved work, later
        # blocked: set aside when it reaches the queue)
        approved = {w.feature_id for w in backlog.landing}
        for lane in schedule.lanes:  # begun on what passes, or on its own lane's approved merge
            if lane.role is T.IMPLEMENT and lane.work and lane.work.feature_id:
                assert (backlog.passing | approved).issuperset(backlog.needs(lane.work.feature_id))
        for passed in backlog.passing:  # nothing lands before what it depends on
            assert backlog.passing.issuperset(backlog.needs(passed))
        architects = [n for n, lane in enumerate(schedule.lanes) if lane.role is T.ARCHITECTURE]
        if architects:
            others = [lane for n, lane in enumerate(schedule.lanes) if n != architects[0]]
            assert all(lane.role in IDLE for lane in others) and not backlog.landing

    for move in moves:
        check(schedule)
        moved = _advance(schedule, move, cfg)
        if moved is None:
            break
        for work, review in schedule.backlog.returned:  # sent-back work leaves only to a lane's FIX
            if (work, review) not in moved.backlog.returned:
                fixing = Lane(T.FIX, work, fix_rounds=1, open_review=review)
                assert fixing in moved.lanes or work.feature_id in moved.backlog.blocked
        schedule = moved
    for _ in range(300):
        check(schedule)
        moved = _advance(schedule, (0, "PASS"), cfg)
        if moved is None:
            break
        schedule = moved
    assert schedule.settled and all(lane.role is T.DONE for lane in schedule.lanes)


@settings(max_examples=100, deadline=None)
@given(
    moves=st.lists(VERDICTS.filter(lambda v: v != "STACK"), max_size=60),
    interval=st.sampled_from([1, 2, 100]),
)
def test_one_lane_is_exactly_the_state_machine(moves: list[str], interval: int) -> None:
    """With one lane the schedule takes exactly the states and events `transition` takes."""
    cfg = replace(CFG, architecture_interval=interval)
    schedule = listed(1, cfg=cfg)
    state = transition(SessionState(), Outcome(T.INITIALIZER, ok=True, feature_ids=FEATURES), cfg).state
    for verdict in moves:
        assert schedule.view(0) == state
        if state.lane.role in IDLE:
            break
        before = schedule
        schedule = _step(schedule, 0, verdict, cfg)
        changed = transition(state, _outcome_of(before, state, verdict), cfg).state
        state = changed
    assert schedule.view(0) == state


def _outcome_of(schedule: Schedule, state: SessionState, verdict: str) -> Outcome:
    """The outcome `_step` gave lane 0, rebuilt for the one-lane machine."""
    role = state.lane.role
    if verdict == "FAIL":
        return outcome(schedule, 0, ok=False)
    if role in (T.IMPLEMENT, T.FIX):
        return outcome(schedule, 0)
    return outcome(schedule, 0, "PASS" if role is T.ARCHITECTURE and verdict == "REJECT" else verdict)


def test_a_machine_is_refused_more_lanes_than_its_free_memory_holds() -> None:
    assert lanes_refusal(1, 0) is None  # one lane is never refused
    assert lanes_refusal(4, None) is None  # a machine that cannot say
    assert lanes_refusal(4, 4 * MEMORY_PER_LANE) is None
    why = lanes_refusal(5, 4 * MEMORY_PER_LANE + 1)
    assert why is not None and "use --lanes 4 or fewer" in why and "4.0 GiB free" in why
    assert "needs about 5 GiB" in why
    two = lanes_refusal(2, MEMORY_PER_LANE // 2)  # two lanes are lanes: refused below 2 GiB
    assert two is not None and "use --lanes 1 or fewer" in two and "0.5 GiB free" in two


def test_fewer_lanes_only_when_the_lanes_dropped_hold_nothing() -> None:
    f002 = feature("F002")
    busy = Schedule(
        Backlog(features=("F001", "F002")), (Lane(T.IMPLEMENT, feature("F001")), Lane(T.REVIEW, f002))
    )
    assert len(resized(busy, 4).lanes) == 4 and resized(busy, 4).lanes[2:] == (Lane(T.WAIT),) * 2
    assert resized(busy, 2) == busy
    with pytest.raises(ValueError, match=r"lane 1 \(REVIEW F002\) still hold"):
        resized(busy, 1)
    three = replace(busy, lanes=(*busy.lanes, Lane(T.INITIALIZER)))
    with pytest.raises(ValueError, match=r"^lane 1 \(REVIEW F002\), lane 2 \(INITIALIZER \) still hold"):
        resized(three, 1)
    idle = replace(busy, lanes=(busy.lanes[0], Lane(T.WAIT)))
    assert resized(idle, 1).lanes == (busy.lanes[0],)
    queued = replace(idle, backlog=replace(idle.backlog, landing=(f002,)))
    with pytest.raises(ValueError, match="wait in the merge queue"):
        resized(queued, 1)
    assert len(resized(queued, 2).lanes) == 2  # several lanes keep the queue


def test_a_halted_schedule_resumes_with_its_initializer_in_lane_zero_and_others_alone() -> None:
    halted = Schedule(
        lanes=(Lane(T.HALTED),) * 3, session_count=2, issued=2, halt_reason="INITIALIZER failed"
    )
    assert resumed(halted) == Schedule(
        lanes=(Lane(T.INITIALIZER), Lane(T.WAIT), Lane(T.WAIT)), session_count=2, issued=2
    )
    going = Schedule(Backlog(features=("F001",)), (Lane(T.IMPLEMENT, feature("F001")), Lane(T.DONE)))
    assert resumed(going) is going


def test_an_architecture_review_due_when_the_lanes_finish_runs_before_the_project_is_done() -> None:
    config = AgentConfig(architecture_interval=2)
    backlog = Backlog(("F001", "F002"), passing=frozenset({"F001"}), landing=(feature("F002"),))
    schedule = Schedule(backlog, (Lane(T.WAIT), Lane(T.WAIT)))
    after, events = landed(schedule, feature("F002"), config)
    assert after.lanes == (Lane(T.ARCHITECTURE), Lane(T.DONE)) and not after.settled
    assert events == (Merged(feature("F002")), ArchitectureDue(2))  # not done yet
    checked = replace(schedule, architecture_checked_at=2)
    assert landed(checked, feature("F002"), config)[0].lanes == (Lane(T.DONE), Lane(T.DONE))
    one = replace(schedule, lanes=(Lane(T.WAIT),))  # one lane: done, as the one-lane machine is
    assert landed(one, feature("F002"), config)[0].lanes == (Lane(T.DONE),)
    busy = replace(schedule, lanes=(Lane(T.WAIT), Lane(T.HALTED)))
    assert landed(busy, feature("F002"), config)[0].lanes[0] is not Lane(T.ARCHITECTURE)


def test_only_a_waiting_lane_waits_for_its_work_to_land() -> None:
    landing = Backlog(FEATURES, landing=(feature("F001"),))
    waiting = Schedule(landing, (Lane(T.WAIT, feature("F001")), Lane(T.WAIT)), cloned=True)
    assert landing_of(waiting, 0) == feature("F001") and landing_of(waiting, 1) is None
    working = replace(waiting, lanes=(Lane(T.REVIEW, feature("F001")), Lane(T.WAIT)))
    assert landing_of(working, 0) is None  # a lane at work holds its work, it does not wait for it
    landed_already = replace(waiting, backlog=Backlog(FEATURES, passing=frozenset({"F001"})))
    assert landing_of(landed_already, 0) is None


def test_a_held_feature_leaves_the_queue_its_dependents_wait_and_the_rest_goes_on() -> None:
    from session_scheduler.core.schedule import held as hold
    from session_scheduler.core.schedule import released

    depends = {"F002": ("F001",), "F003": ("F002",)}
    schedule = Schedule(
        Backlog(FEATURES, landing=(feature("F001"),), depends=tuple(depends.items())),
        (Lane(T.WAIT, feature("F001")),),
        cloned=True,
    )
    schedule, _ = hold(schedule, feature("F001"), "manifests: it changes package.json", CFG)
    backlog = schedule.backlog
    assert backlog.landing == () and backlog.held == (("F001", "manifests: it changes package.json"),)
    assert schedule.lanes[0].work == feature("F004")  # the lane is free: F002, F003 wait with F001
    assert backlog.waiting_for_person() == {"F001", "F002", "F003"}
    assert not backlog.settled()  # F004 is still to pass
    done = replace(backlog, passing=frozenset({"F004"}))
    assert done.settled() and replace(done, held=()).settled() is False
    assert done.next_open() is None  # a held feature is never claimed again

    finished = replace(schedule, backlog=done, lanes=(Lane(T.DONE),))
    schedule, _ = released(finished, "F001", CFG)
    assert schedule.backlog.passing == {"F001", "F004"} and schedule.backlog.held == ()
    assert schedule.lanes[0].work == feature("F002")  # a finished lane looks for work again
    with pytest.raises(ValueError, match="F002 is not held"):
        released(schedule, "F002", CFG)
    with pytest.raises(ValueError, match="not in the merge queue"):
        hold(schedule, feature("F003"), "x", CFG)


def test_a_free_lane_takes_the_feature_on_the_critical_path() -> None:
    """With several lanes, the longest chain still to pass below it first; ties: more features
    depending on it, then list order (issue 33: chains start first instead of finishing on one lane
    at the end). One lane keeps the list's order."""
    ids = ("F001", "F002", "F003", "F004", "F005", "F006")
    depends = (("F004", ("F003",)), ("F005", ("F004",)), ("F006", ("F002",)))
    backlog = Backlog(ids, depends=depends)
    assert backlog.next_open() == "F001"  # one lane: list order (it may hold undeclared dependencies)
    assert backlog.next_open(critical=True) == "F003"  # F003 -> F004 -> F005: a chain of two below it
    assert backlog.next_open(frozenset({"F003"}), critical=True) == "F002"  # one below it, none below F001
    assert backlog.next_open(frozenset({"F003", "F002"}), critical=True) == "F001"  # then list order
    tied = Backlog(("F001", "F002", "F003", "F004"), depends=(("F003", ("F002",)), ("F004", ("F002",))))
    assert tied.next_open(critical=True) == "F002"  # two features depend on it, none on F001
    done = replace(backlog, passing=frozenset({"F004", "F005"}))  # what passed no longer counts
    assert done.chains()[0].get("F003", 0) == 0 and done.next_open(critical=True) == "F002"


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_no_claim_order_takes_a_feature_twice_or_before_its_dependencies_landed(data: st.DataObject) -> None:
    """Lanes claiming and landing in any order: each feature is claimed once, only after every
    feature it depends on passed, and every feature is claimed in the end."""
    count, critical = data.draw(st.integers(min_value=1, max_value=9)), data.draw(st.booleans())
    ids = tuple(f"F{n:03d}" for n in range(1, count + 1))
    depends = tuple(
        (f, needs)
        for n, f in enumerate(ids)
        if (needs := tuple(data.draw(st.sets(st.sampled_from(ids[:n]), max_size=3)) if n else ()))
    )
    backlog = Backlog(ids, depends=depends)
    claimed: list[str] = []
    working: set[str] = set()
    while len(claimed) < count:
        free = data.draw(st.booleans()) or not working
        if free:
            chosen = backlog.next_open(frozenset(working), critical=critical)
            if chosen is None:
                assert working, "nothing claimable, nothing in flight: the schedule is stuck"
                free = False
            else:
                assert chosen not in claimed and backlog.passing.issuperset(dict(depends).get(chosen, ()))
                claimed.append(chosen)
                working.add(chosen)
                continue
        done = data.draw(st.sampled_from(sorted(working)))
        working.discard(done)
        backlog = replace(backlog, passing=backlog.passing | {done})
    assert sorted(claimed) == sorted(ids)


def test_equal_chains_go_to_the_feature_more_features_depend_on() -> None:
    ids = ("F001", "F002", "F003", "F004", "F005")
    backlog = Backlog(ids, depends=(("F003", ("F001",)), ("F004", ("F002",)), ("F005", ("F002",))))
    chain, after = backlog.chains()
    assert (chain["F001"], chain["F002"], after["F001"], after["F002"]) == (1, 1, 1, 2)
    assert backlog.next_open(critical=True) == "F002" and backlog.next_open() == "F001"


def test_a_release_wakes_finished_lanes_and_leaves_a_working_one_at_its_work() -> None:
    from session_scheduler.core.schedule import released

    backlog = Backlog(FEATURES, passing=frozenset({"F003"}), held=(("F001", "manifests"),))
    working = Lane(T.IMPLEMENT, feature("F004"))
    schedule, _ = released(Schedule(backlog, (Lane(T.DONE), working), cloned=True), "F001", CFG)
    assert schedule.lanes[1] == working and schedule.lanes[0].work == feature("F002")


def test_one_lane_takes_the_list_s_order_and_several_lanes_the_critical_path() -> None:
    """The claim order is the critical path's only with several lanes: one lane keeps the list's
    order (a list may carry dependencies it does not declare)."""
    backlog = Backlog(("F001", "F002", "F003"), depends=(("F003", ("F002",)),))
    one = choose_work(SessionState(backlog, Lane(T.WAIT), others=Others(lanes=1)), CFG)
    several = choose_work(SessionState(backlog, Lane(T.WAIT), others=Others(lanes=2)), CFG)
    assert one.state.lane.work == feature("F001") and several.state.lane.work == feature("F002")
