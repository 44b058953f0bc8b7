"""What a person sees of several lanes: the live console's status line per lane and the queue,
`status`'s lane and queue lines, and the report's lanes and merge-queue waits; with one lane
each view is what it always was."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

from rich.console import Console

from session_scheduler.repo.merge_queue import Landing, Queue
from session_scheduler.store import events
from session_scheduler.store.events import Event, Totals, make_event
from session_scheduler.store.records import Records
from session_scheduler.view import status
from session_scheduler.view.live import LiveConsole, lane_lines, status_line
from session_scheduler.view.project_report import gather, queue_waits, render_html, render_markdown

T0 = 1_800_000_000.0


def started(n: int, role: str, feature: str | None, lane: int, ts: float, run: str = "r") -> Event:
    return make_event(
        "session_started",
        run,
        ts,
        {
            "session": n,
            "role": role,
            "model": "sonnet",
            "feature": feature,
            "branch": f"feature/{feature}" if feature else None,
            "attempt": 1,
            "log_dir": f".agent_logs/session_{n:04d}_{role}",
            "lane": lane,
        },
    )


def ended(n: int, role: str, feature: str | None, ts: float, took: float = 60.0) -> Event:
    receipt = {"cost_usd": 0.5, "input_tokens": 1000, "duration_s": took, "turns": 3, "verdict": None}
    return make_event(
        "session_ended",
        "r",
        ts,
        {
            "session": n,
            "role": role,
            "feature": feature,
            "standing": "verified",
            "reason": "",
            "receipt": receipt,
        },
    )


def landed(feature: str, lane: int, ts: float, waited: float) -> Event:
    return make_event(
        "merge_verified",
        "r",
        ts,
        {
            "session": 9,
            "feature": feature,
            "branch": f"feature/{feature}",
            "commit": "c" * 40,
            "tests": "passed",
            "lane": lane,
            "waited_s": waited,
            "land_s": 2.0,
        },
    )


def sent_back(feature: str, why: str, ts: float, waited: float) -> Event:
    return make_event(
        "sent_back",
        "r",
        ts,
        {
            "feature": feature,
            "branch": f"feature/{feature}",
            "why": why,
            "review_id": 7,
            "waited_s": waited,
            "land_s": 1.0,
        },
    )


def clock_at(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts))


# -- the live console -------------------------------------------------------------------------------


def console_of(queue: list[Landing], now: float) -> tuple[LiveConsole, io.StringIO]:
    out = io.StringIO()
    view = LiveConsole(
        Console(file=out, width=300, highlight=False),
        clock=lambda: now,
        heartbeat_s=3600,
        queue=lambda: queue,
    )
    return view, out


LANE_RUN = [
    started(1, "INITIALIZER", None, 0, T0),
    ended(1, "INITIALIZER", None, T0 + 60),
    started(2, "IMPLEMENT", "F001", 0, T0 + 61),
    started(3, "IMPLEMENT", "F002", 1, T0 + 62),
    started(4, "IMPLEMENT", "F003", 2, T0 + 63),
    ended(3, "IMPLEMENT", "F002", T0 + 120),
]


def run_started(project: Path, lanes: int | None) -> Event:
    fields = {"pid": os.getpid(), "project": str(project), "version": "x", "cost_basis": "api"}
    return make_event("run_started", "r", T0 - 1, {**fields, **({"lanes": lanes} if lanes else {})})


def test_with_several_lanes_the_console_keeps_a_line_per_lane_and_the_queue(tmp_path: Path) -> None:
    now = T0 + 185.0
    waiting = [Landing("F002", "feature/F002", "a" * 40, 1, 7, T0 + 150)]
    view, out = console_of(waiting, now)
    for event in [run_started(tmp_path, 3), *LANE_RUN]:
        view.on_event(event)
    lines = out.getvalue().splitlines()
    headers = [line for line in lines if "=== Session" in line]
    assert headers[0].startswith("[lane 0] === Session 1: INITIALIZER (sonnet) · ")
    assert headers[1].startswith("[lane 0] === Session 2: IMPLEMENT (sonnet) · F001 · feature/F001 · ")
    assert headers[2].startswith("[lane 1] === Session 3: IMPLEMENT") and headers[3].startswith("[lane 2] ")
    block = lines[lines.index(headers[3]) + 1 :]  # printed when session 3 ended (not a terminal)
    assert block == [
        f"  {status_line(view.totals, now)}"
    ]  # the run's line only: the lanes' lines say the rest
    assert view._status().plain.splitlines() == [  # the terminal's status lines
        status_line(view.totals, now),
        f"lane 0: IMPLEMENT · F001 · session 2 · since {clock_at(T0 + 61)} (2 min 04 s)",
        "lane 1: idle",
        f"lane 2: IMPLEMENT · F003 · session 4 · since {clock_at(T0 + 63)} (2 min 02 s)",
        "queue: F002 waiting 35 s",
    ]
    waiting.clear()  # nothing waits to land: no queue line
    assert not any(line.startswith("queue") for line in view._status().plain.splitlines())
    view.close()


def test_a_session_in_a_lane_past_the_first_makes_it_a_lanes_console() -> None:
    """A run_started without a lane count (an older writer): the second lane's session says it."""
    view, out = console_of([], T0 + 30)
    view.on_event(started(1, "IMPLEMENT", "F001", 0, T0))
    view.on_event(started(2, "IMPLEMENT", "F002", 1, T0 + 10))
    assert out.getvalue().splitlines()[-1].startswith("[lane 1] === Session 2: IMPLEMENT")
    assert view._status().plain.splitlines()[1:] == [
        f"lane 0: IMPLEMENT · F001 · session 1 · since {clock_at(T0)} (30 s)",
        f"lane 1: IMPLEMENT · F002 · session 2 · since {clock_at(T0 + 10)} (20 s)",
    ]


def test_with_one_lane_the_console_is_the_one_session_console() -> None:
    now = T0 + 185.0
    view, out = console_of([Landing("F002", "feature/F002", "a" * 40, 0, 7, T0)], now)
    one_lane = [e for e in LANE_RUN if e.get("lane", 0) == 0 and e["session"] != 3]
    for event in one_lane:
        view.on_event(event)
    lines = out.getvalue().splitlines()
    assert not any("lane" in line or "queue" in line for line in lines)
    assert lines[-3:] == [f"  {status_line(view.totals, now)}", "", lines[-1]]
    assert lines[-1].startswith("=== Session 2: IMPLEMENT (sonnet) · F001 · ")
    assert view._status().plain == status_line(view.totals, now)


def test_a_killed_run_s_session_is_no_lane_s_session_now() -> None:
    totals = Totals.of(
        [
            started(5, "REVIEW", "F004", 1, T0, run="old"),
            make_event(
                "run_started",
                "new",
                T0 + 10,
                {"pid": 1, "project": "/p", "version": "x", "cost_basis": "api"},
            ),
            started(6, "IMPLEMENT", "F001", 0, T0 + 11, run="new"),
        ]
    )
    assert lane_lines(totals, {0, 1}, [], T0 + 20)[1] == "lane 1: idle"


# -- status -----------------------------------------------------------------------------------------


def write_log(project: Path, log: list[Event]) -> None:
    for event in log:
        events.append(events.log_path(project), event, durable=False)


def test_status_shows_each_lane_and_the_queue_s_waiting_work(tmp_path: Path) -> None:
    project = tmp_path / "app"
    project.mkdir()
    run = make_event(
        "run_started",
        "r",
        T0 - 1,
        {"pid": os.getpid(), "project": str(project), "version": "x", "cost_basis": "api"},
    )
    write_log(project, [run, *LANE_RUN])
    Queue(Records(project)).add(Landing("F002", "feature/F002", "a" * 40, 1, 7, T0 + 150))
    now = status.status_of(project, now=T0 + 185.0)
    lines = status.render(now)
    assert [line for line in lines if line.startswith(("  lane", "  merge queue", "  now"))] == [
        "  lane 0: F001 · IMPLEMENT · session 2, since 2027-01-15T08:01:01Z (2 min 04 s)",
        "  lane 2: F003 · IMPLEMENT · session 4, since 2027-01-15T08:01:03Z (2 min 02 s)",
        "  merge queue: F002 (lane 1, feature/F002) waiting for 35 s",
    ]


def test_status_with_one_lane_keeps_its_one_now_line(tmp_path: Path) -> None:
    project = tmp_path / "app"
    project.mkdir()
    run = make_event(
        "run_started",
        "r",
        T0 - 1,
        {"pid": os.getpid(), "project": str(project), "version": "x", "cost_basis": "api"},
    )
    write_log(
        project,
        [
            run,
            started(1, "INITIALIZER", None, 0, T0),
            ended(1, "INITIALIZER", None, T0 + 60),
            started(2, "IMPLEMENT", "F001", 0, T0 + 61),
        ],
    )
    lines = status.render(status.status_of(project, now=T0 + 185.0))
    assert "  now: session 2 IMPLEMENT (sonnet) · F001 · feature/F001, running for 2 min 04 s" in lines
    assert not any(line.startswith(("  lane", "  merge queue")) for line in lines)


# -- the report -------------------------------------------------------------------------------------


def lane_project(root: Path) -> Path:
    project = root / "app"
    project.mkdir()
    listed = make_event(
        "features_listed", "r", T0 + 60, {"session": 1, "features": ["F001", "F002", "F003", "F004"]}
    )
    write_log(
        project,
        [
            make_event(
                "run_started",
                "r",
                T0 - 1,
                {"pid": os.getpid(), "project": str(project), "version": "x", "cost_basis": "api"},
            ),
            started(1, "INITIALIZER", None, 0, T0),
            listed,
            ended(1, "INITIALIZER", None, T0 + 60),
            started(2, "IMPLEMENT", "F001", 0, T0 + 61),
            started(3, "IMPLEMENT", "F002", 1, T0 + 62),
            started(4, "IMPLEMENT", "F003", 2, T0 + 63),
            ended(3, "IMPLEMENT", "F002", T0 + 120),
            ended(2, "IMPLEMENT", "F001", T0 + 121),
            ended(4, "IMPLEMENT", "F003", T0 + 122),
            landed("F001", 0, T0 + 130, 10.0),
            sent_back("F002", "conflict", T0 + 140, 40.0),
            landed("F003", 2, T0 + 150, 20.0),
            sent_back("F004", "tests", T0 + 160, 5.0),
            make_event("run_ended", "r", T0 + 170, {"status": "done", "message": "", "sessions": 4}),
        ],
    )
    return project


def test_the_report_puts_sessions_on_their_lanes_and_shows_the_queue_s_waits(tmp_path: Path) -> None:
    data = gather(lane_project(tmp_path), now=T0 + 200)
    assert data.lanes == (0, 1, 2)
    assert [(r.number, r.lane) for r in data.session_rows] == [(1, 0), (3, 1), (2, 0), (4, 2)]
    queue = data.queue
    assert queue is not None and queue.landed == 2 and queue.sent_back == (("conflict", 1), ("tests", 1))
    assert (queue.median_s, queue.max_s, queue.waits) == (15.0, 40.0, (10.0, 40.0, 20.0, 5.0))
    page = render_html(data)
    assert "one bar per session, by lane" in page
    for lane in (0, 1, 2):
        assert f'text-anchor="end">lane {lane}</text>' in page  # a timeline row per lane
    assert "Session 3 IMPLEMENT F002 (lane 1): verified" in page
    assert ">Lane</th>" in page and "<h2>Merge queue</h2>" in page
    assert '<b id="queue-median-wait">15 s</b>' in page and '<b id="queue-max-wait">40 s</b>' in page
    assert '<b id="queue-sent-back-conflict">1</b>' in page and '<b id="queue-sent-back-tests">1</b>' in page
    text = render_markdown(data)
    assert "| # | Lane | Role |" in text and "| 3 | 1 | IMPLEMENT | F002 |" in text
    assert "### Lanes" in text and "| 2 | 1 | 1 min 00 s | F003 |" in text
    assert (
        "### Merge queue\n\n2 landed, 2 sent back to a lane (1 for a conflict, 1 for red tests); "
        "waited 15 s (median), 40 s at most, over 4 landings tried." in text
    )


def test_a_one_lane_report_has_no_lanes_and_no_queue(tmp_path: Path) -> None:
    project = tmp_path / "app"
    project.mkdir()
    one = make_event(
        "merge_verified",
        "r",
        T0 + 130,
        {"session": 2, "feature": "F001", "branch": "b", "commit": "c", "tests": "passed"},
    )
    write_log(
        project,
        [
            started(1, "INITIALIZER", None, 0, T0),
            ended(1, "INITIALIZER", None, T0 + 60),
            started(2, "IMPLEMENT", "F001", 0, T0 + 61),
            ended(2, "IMPLEMENT", "F001", T0 + 121),
            one,
        ],
    )
    data = gather(project, now=T0 + 200)
    assert data.lanes == () and data.queue is None and queue_waits([one]) is None
    page, text = render_html(data), render_markdown(data)
    assert "by role" in page and ">lane " not in page and ">Lane</th>" not in page
    assert "Merge queue" not in page
    assert "| # | Role |" in text and "Lane" not in text and "Merge queue" not in text


# -- with the lanes loop ------------------------------------------------------------------------------


def test_a_three_lane_run_seen_through_the_console_and_the_report(tmp_path: Path) -> None:
    """The real lanes loop with the in-process robot: the console follows its events, and the
    report of its log has its lanes and its queue."""
    from test_lanes import AFTER_F001, CFG, new_project

    from scripted_model.scenario import Scenario
    from session_scheduler.run.lanes import Lanes
    from session_scheduler.testing.inprocess import InProcessRobotRunner

    project = new_project(tmp_path)
    out = io.StringIO()
    view = LiveConsole(Console(file=out, width=300, highlight=False), heartbeat_s=3600)
    log = events.EventLog(project, "lanes-run")
    log.subscribe(view.on_event)
    runner = InProcessRobotRunner(Scenario.from_json({"features": 4, "depends": AFTER_F001}))
    Lanes(project, CFG, runner, 3, echo=view.echo, events=log).run()
    view.close()
    text = out.getvalue()
    assert "[lane 0] === Session 1: INITIALIZER" in text and "[lane 2] === Session" in text
    assert "\n  lane 0: " not in text  # not a terminal: the lanes' own lines, no status block
    assert [line.split()[1] for line in view._status().plain.splitlines()[1:4]] == ["0:", "1:", "2:"]
    data = gather(project)
    assert data.lanes == (0, 1, 2) and {r.lane for r in data.session_rows} == {0, 1, 2}
    assert data.queue is not None and data.queue.landed == 4 and len(data.queue.waits) == 4
    assert "<h2>Merge queue</h2>" in render_html(data) and "### Lanes" in render_markdown(data)
