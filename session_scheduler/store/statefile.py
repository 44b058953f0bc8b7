"""The scheduler's saved record, `.agent_state.json`: the schedule state and each lane's session
in flight (`in_flight`, keyed by lane id), validated at the boundary and written atomically. (What sessions cost and how they
ended is in the event log, events.py; a `stats` object of older versions is ignored.)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from session_scheduler.core.config import SessionType
from session_scheduler.core.errors import StateError
from session_scheduler.core.layout import LOG_DIR, STATE_FILE
from session_scheduler.core.machine import Backlog, Lane, Others, SessionState, WorkItem
from session_scheduler.core.schedule import Schedule
from session_scheduler.core.schemas import AGENT_STATE, AGENT_STATE_SAVED
from session_scheduler.core.session import LANE, Flights, InFlight, flights_from_json, flights_to_json
from session_scheduler.store.progress import atomic_write_bytes, read_json, text_around, validate
from session_scheduler.store.records import Records, records_of

RESTORE_HINT = (
    f"Restore it from the newest copy, {LOG_DIR}/session_*/state.json (each session leaves one), "
    "then run the same command again"
)


@dataclass(frozen=True)
class Saved:
    """What `.agent_state.json` holds."""

    state: SessionState
    """Lane 0's view (the one lane's state)."""
    schedule: Schedule
    """Every lane (one, unless the project runs several)."""
    in_flight: Flights
    """Where each lane's session in flight started (set while it runs or after it was cut off)."""

    def flight(self, lane: int = LANE) -> InFlight | None:
        """Lane `lane`'s session in flight, if it has one."""
        return self.in_flight.get(lane)


def load(where: Records | Path) -> Saved | None:
    """The saved record, or None for a project that has none yet."""
    path = records_of(where).path(STATE_FILE)
    if not path.exists():
        return None
    try:
        data = read_json(path)
        if isinstance(data, dict) and "lane" not in data:
            data = _upgrade(data)
        validate(data, AGENT_STATE, str(path))
    except (StateError, ValueError, TypeError, AttributeError) as exc:
        raise StateError(f"{exc}. {RESTORE_HINT}") from None
    schedule = schedule_from_json(data)
    return Saved(replace(schedule.view(0), others=Others()), schedule, flights_from_json(_flights(data)))


def _flights(data: dict[str, Any]) -> dict[str, Any]:
    """The saved `in_flight` object; an earlier version's one `in_progress` is lane 0's."""
    if "in_flight" in data:
        return dict(data["in_flight"])
    earlier = data.get("in_progress")
    return {} if earlier is None else {str(LANE): earlier}


def save(where: Records | Path, state: SessionState | Schedule, in_flight: Flights) -> None:
    """The schedule state and each lane's session in flight (the totals are the event log's: events.py).

    The backlog, which lists every feature, is encoded once per version of the `Records` (a
    session saves twice and most sessions do not change it)."""
    records = records_of(where)
    data = {**to_json(state, records), "in_flight": flights_to_json(in_flight)}
    validate(data, AGENT_STATE_SAVED, STATE_FILE)
    atomic_write_bytes(
        records.path(STATE_FILE),
        text_around(data, "backlog", _encoded_backlog(state.backlog, records.encoded)[1]),
    )


_Memo = dict[str, tuple[tuple[object, ...], Any, Any]]
"""Per part of the backlog: the objects it was made of at the last save, its saved form, its
JSON; and (`WHOLE`) the parts' JSON texts at the last save, their names, the whole backlog's
JSON, encoded."""
WHOLE = "(whole)"


def _encoded_backlog(backlog: Backlog, memo: _Memo) -> tuple[dict[str, Any], bytes]:
    """The backlog's saved form and its JSON, encoded; `passing` and `blocked` in the features' order.

    Each of its lists can hold every feature, and most sessions change none of them: each is
    encoded again only when it is another object than at the last save (a transition keeps
    the objects it does not change)."""
    features = backlog.features
    parts = {
        "features": _encoded(memo, "features", (features,), lambda: list(features)),
        "passing": _encoded(
            memo, "passing", (features, backlog.passing), lambda: list(_in_order(features, backlog.passing))
        ),
        "blocked": _encoded(
            memo, "blocked", (features, backlog.blocked), lambda: list(_in_order(features, backlog.blocked))
        ),
        "rejections": _encoded(memo, "rejections", (backlog.rejections,), lambda: dict(backlog.rejections)),
    }
    if backlog.depends:  # written only when the feature list has any (earlier versions wrote none)
        parts["depends"] = _encoded(
            memo, "depends", (backlog.depends,), lambda: {f: list(needs) for f, needs in backlog.depends}
        )
    if backlog.landing:  # lanes: the merge queue's
        parts["landing"] = _encoded(
            memo, "landing", (backlog.landing,), lambda: [w.to_json() for w in backlog.landing]
        )
    if backlog.returned:
        parts["returned"] = _encoded(
            memo,
            "returned",
            (backlog.returned,),
            lambda: [{"work": w.to_json(), "review_id": r} for w, r in backlog.returned],
        )
    if backlog.held:
        parts["held"] = _encoded(
            memo, "held", (backlog.held,), lambda: [{"feature": f, "why": why} for f, why in backlog.held]
        )
    if backlog.to_plan:
        parts["to_plan"] = (True, "true")
    data = {name: part[0] for name, part in parts.items()}
    texts, names = tuple(part[1] for part in parts.values()), tuple(parts)
    known = memo.get(WHOLE)
    if (
        known is not None
        and known[1] == names
        and len(known[0]) == len(texts)
        and all(a is b for a, b in zip(known[0], texts, strict=True))
    ):
        return data, known[2]
    whole = ("{" + ", ".join(f"{json.dumps(name)}: {part[1]}" for name, part in parts.items()) + "}").encode()
    memo[WHOLE] = (texts, names, whole)
    return data, whole


def _encoded(memo: _Memo, name: str, made_of: tuple[object, ...], make: Callable[[], Any]) -> tuple[Any, str]:
    known = memo.get(name)
    if (
        known is not None
        and len(known[0]) == len(made_of)
        and all(a is b for a, b in zip(known[0], made_of, strict=True))
    ):
        return known[1], known[2]
    data = make()
    text = json.dumps(data)
    memo[name] = (made_of, data, text)
    return data, text


def _in_order(features: tuple[str, ...], ids: frozenset[str]) -> tuple[str, ...]:
    """`ids` in the order of `features` (any not among them after, sorted)."""
    ordered = tuple(filter(ids.__contains__, features)) if ids else ()
    return ordered if len(ordered) == len(ids) else (*ordered, *sorted(ids.difference(ordered)))


def to_json(state: SessionState | Schedule, records: Records | None = None) -> dict[str, Any]:
    """The saved form of a state or a schedule (its backlog shared with the `records`' last
    save's: not to be changed). One lane saves exactly what every earlier version saved; several
    add `lanes` (every lane, `lane` is lane 0) and `issued` (the session numbers handed out)."""
    lanes = state.lanes if isinstance(state, Schedule) else (state.lane,)
    data = {
        "backlog": _encoded_backlog(state.backlog, records.encoded if records is not None else {})[0],
        "lane": _lane_json(lanes[0]),
        "architecture_checked_at": state.architecture_checked_at,
        "session_count": state.session_count,
        "halt_reason": state.halt_reason,
    }
    if isinstance(state, Schedule) and (len(lanes) > 1 or state.cloned):
        data.update(lanes=[_lane_json(lane) for lane in lanes], issued=state.issued)
    return data


def _lane_json(lane: Lane) -> dict[str, Any]:
    return {
        "role": lane.role.value,
        "work": lane.work.to_json() if lane.work else None,
        "attempts": lane.attempts,
        "fix_rounds": lane.fix_rounds,
        "open_review": lane.open_review,
    }


def _lane_from_json(lane: dict[str, Any]) -> Lane:
    return Lane(
        SessionType(lane["role"]),
        WorkItem.from_json(lane.get("work")),
        lane.get("attempts", 0),
        lane.get("fix_rounds", 0),
        lane.get("open_review"),
    )


def from_json(data: dict[str, Any]) -> SessionState:
    """Lane 0's state from the schema-checked saved form."""
    return replace(schedule_from_json(data).view(0), others=Others())


def schedule_from_json(data: dict[str, Any]) -> Schedule:
    """The schedule from the schema-checked saved form (an earlier version's: one lane)."""
    backlog = data["backlog"]
    lanes = tuple(_lane_from_json(lane) for lane in data.get("lanes") or [data["lane"]])
    count = data.get("session_count", 0)
    return Schedule(
        backlog=Backlog(
            tuple(backlog["features"]),
            frozenset(backlog["passing"]),
            frozenset(backlog["blocked"]),
            tuple(sorted(backlog.get("rejections", {}).items())),
            tuple((f, tuple(needs)) for f, needs in backlog.get("depends", {}).items()),
            tuple(_work(w) for w in backlog.get("landing", [])),
            tuple((_work(r["work"]), int(r["review_id"])) for r in backlog.get("returned", [])),
            tuple((str(h["feature"]), str(h["why"])) for h in backlog.get("held", [])),
            bool(backlog.get("to_plan", False)),
        ),
        lanes=lanes,
        architecture_checked_at=data.get("architecture_checked_at", 0),
        session_count=count,
        issued=data.get("issued", count),
        halt_reason=data.get("halt_reason", ""),
        cloned="lanes" in data,  # saved by the lanes loop: read back as it saves, `issued` kept
    )


def _work(data: dict[str, Any]) -> WorkItem:
    work = WorkItem.from_json(data)
    assert work is not None  # the schema requires one
    return work


def _upgrade(old: dict[str, Any]) -> dict[str, Any]:
    """The flat state file of version 0.1 (current_feature / current_branch strings) in today's form."""
    work: dict[str, Any] | None = None
    branch = old.get("current_branch") or ""
    if old.get("current_feature"):
        work = {"feature": old["current_feature"]}
    elif branch.startswith("arch/"):
        work = {"architecture_review": int(branch.removeprefix("arch/"))}
    flat = (
        "next_session",
        "features",
        "passing",
        "blocked",
        "rejections",
        "current_feature",
        "current_branch",
        "features_completed",
        "attempts",
        "fix_rounds",
        "open_review_id",
    )
    return {
        **{k: v for k, v in old.items() if k not in flat},
        "backlog": {
            "features": old.get("features", []),
            "passing": old.get("passing", []),
            "blocked": old.get("blocked", []),
            "rejections": old.get("rejections", {}),
        },
        "lane": {
            "role": old.get("next_session", "INITIALIZER"),
            "work": work,
            "attempts": old.get("attempts", 0),
            "fix_rounds": old.get("fix_rounds", 0),
            "open_review": old.get("open_review_id"),
        },
    }
