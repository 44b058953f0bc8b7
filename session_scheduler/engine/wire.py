"""A session's request and result as JSON data: what crosses the wire to a worker and back.

Paths travel as text and mean the scheduler's: a worker re-roots the plan onto its own clone
(exchange.rerooted) and gets the clone's start, the hand-off files and the session folder's copies
through the exchange (git), never through a shared file system. Nothing but these values and the
exchange's commit names crosses."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from session_scheduler.core.config import SessionType
from session_scheduler.core.machine import WorkItem
from session_scheduler.run.agent import SessionRequest, SessionResult
from session_scheduler.run.browsing import BrowserAccess
from session_scheduler.run.plan import SessionPlan
from session_scheduler.store.records import Records

VERSION = 2
"""The wire format's version: a worker refuses a request of another one."""


def plan_to_json(plan: SessionPlan) -> dict[str, Any]:
    data = {f.name: getattr(plan, f.name) for f in dataclasses.fields(plan)}
    data.update(
        role=plan.role.value,
        work=plan.work.to_json() if plan.work else None,
        reads=list(plan.reads),
    )
    return data


def plan_from_json(data: dict[str, Any]) -> SessionPlan:
    plan = dict(data)
    plan.update(
        role=SessionType(plan["role"]),
        work=WorkItem.from_json(plan["work"]),
        reads=tuple(plan["reads"]),
    )
    return SessionPlan(**plan)


def request_to_json(request: SessionRequest) -> dict[str, Any]:
    return {
        "version": VERSION,
        "plan": plan_to_json(request.plan),
        "cwd": str(request.cwd),
        "settings_path": str(request.settings_path),
        "log_dir": str(request.log_dir),
        "records": str(request.records.root),
        "lane": request.lane,
        "lanes": request.lanes,
        "attempt": request.attempt,
        "browser": (
            None
            if request.browser is None
            else {
                "url": request.browser.url,
                "app_origin": request.browser.app_origin,
                "folder": str(request.browser.folder),
            }
        ),
    }


def request_from_json(data: dict[str, Any]) -> SessionRequest:
    if data.get("version") != VERSION:
        raise ValueError(
            f"a session request of wire version {data.get('version')!r}; this worker reads {VERSION}"
        )
    return SessionRequest(
        plan_from_json(data["plan"]),
        Path(data["cwd"]),
        Path(data["settings_path"]),
        Path(data["log_dir"]),
        Records(Path(data["records"])),
        data.get("lane"),
        int(data.get("lanes", 1)),
        browser=None
        if not data.get("browser")
        else BrowserAccess(
            data["browser"]["url"], data["browser"]["app_origin"], Path(data["browser"]["folder"])
        ),
        attempt=int(data.get("attempt", 1)),
    )


def result_to_json(result: SessionResult) -> dict[str, Any]:
    return result.to_json()


def result_from_json(data: dict[str, Any]) -> SessionResult:
    known = {f.name for f in dataclasses.fields(SessionResult)}
    values = {k: v for k, v in data.items() if k in known}
    values["permission_denials"] = tuple(values.get("permission_denials", ()))
    return SessionResult(**values)
