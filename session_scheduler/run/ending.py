"""How a session's end is recorded, for every lane count (one lane and lanes call the same steps).

What the CLI reported goes to the session folder (`result.json`); each refused tool call, with the
rule that refused it, to `denials.jsonl`, the event log and the console; the session's receipt to
the event log as `session_ended`, its cost estimated from its tokens when the CLI reported none
(a session cut off), with what cut it; a feature the transition blocked as `feature_blocked`.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from session_scheduler.core import pricing
from session_scheduler.core.errors import StateError
from session_scheduler.core.humane import duration, money, number, plural
from session_scheduler.core.layout import LOG_DIR, STATE_FILE
from session_scheduler.core.machine import Blocked
from session_scheduler.core.session import SessionFolder
from session_scheduler.core.standing import Standing
from session_scheduler.guard.security import denial_rule
from session_scheduler.run.agent import SessionResult, tokens_in_transcript
from session_scheduler.run.classify import Classified, partial_receipt, receipt
from session_scheduler.run.plan import SessionPlan
from session_scheduler.store import events, progress
from session_scheduler.store.events import EventLog, Totals
from session_scheduler.store.progress import Handoff
from session_scheduler.store.records import Records

Echo = Callable[[str], None]


def write_result(folder: Path, result: SessionResult) -> None:
    """What the CLI reported, as it reported it, in the session's folder."""
    (folder / SessionFolder.RESULT).write_text(json.dumps(result.to_json(), indent=2), encoding="utf-8")


def audit(
    log: EventLog, echo: Echo, plan: SessionPlan, workdir: Path, folder: Path, result: SessionResult
) -> None:
    """Every refused tool call, with the rule that refused it, into the session's denials.jsonl,
    the event log (`denial`) and a DENIED line on the console. `workdir`: where the session ran."""
    lines = []
    for denial in result.permission_denials:
        tool, tool_input = str(denial.get("tool_name", "")), dict(denial.get("tool_input") or {})
        refusal = result.policy_refusals.get(str(denial.get("tool_use_id")))
        rule = (
            f"scheduler policy: {refusal}"
            if refusal
            else denial_rule(plan.settings, plan.role, workdir, tool, tool_input)
        )
        record = {
            "session": plan.number,
            "role": plan.role.value,
            "tool": tool,
            "input": tool_input,
            "rule": rule,
        }
        lines.append(json.dumps(record))
        log.emit("denial", **record)
        detail = " ".join(str(tool_input.get("command") or tool_input.get("file_path") or "").split())
        echo(f"  DENIED {tool}: {detail[:100]} ({rule})")
    if lines:
        (folder / SessionFolder.DENIALS).write_text("\n".join(lines) + "\n", encoding="utf-8")


def session_ended(
    log: EventLog,
    totals: Totals,
    now: float,
    plan: SessionPlan,
    result: SessionResult,
    classified: Classified,
    verdict: str | None,
    **fields: Any,
) -> str:
    """The session's receipt into the event log; a session the CLI reported no result for gets its
    cost estimated from its transcript's tokens, and says what cut it. Returns the session's one
    line for the console. `fields`: more of the event's (a lane's number)."""
    status = {Standing.VERIFIED: "verified", Standing.FAILED: f"FAILED: {classified.reason}"}.get(
        classified.standing, f"not counted: {classified.reason}"
    )
    tokens = result.input_tokens + result.cache_read_tokens + result.cache_write_tokens + result.output_tokens
    estimate = None
    if result.cut_off:
        estimate = pricing.estimate(
            plan.model,
            {k: getattr(result, k) for k in events.RECEIPT_TOKENS},
            (e["receipt"] for e in totals.ended),
        )
    cost = money(result.cost_usd) if estimate is None else f"~{money(estimate)} estimated"
    cut = {"by": result.terminal_reason or "no_result", "run": log.run, "last_activity": round(now, 3)}
    log.emit(
        "session_ended",
        session=plan.number,
        role=plan.role.value,
        feature=plan.work.feature_id if plan.work else None,
        standing=classified.standing.value,
        reason=classified.reason,
        receipt=receipt(result, plan.model, classified, verdict, estimated_cost=estimate),
        **({"cut": cut} if result.cut_off else {}),
        **fields,
    )
    return (
        f"--- Session {plan.number} {plan.role.value}{' ' + verdict if verdict else ''}: {status} "
        f"({plural(result.num_turns, 'turn')}, {duration(result.duration_s)}, {number(tokens)} tokens, {cost})"
    )


def ended_partly(
    log: EventLog,
    totals: Totals,
    now: float,
    role: str,
    started: dict[str, Any],
    transcript: Path,
    *,
    killed: bool = False,
) -> None:
    """A session cut off before the CLI reported: what its transcript shows it used, its cost
    estimated, and what cut it: this run's stop (Ctrl-C, a stop signal), or, recorded by the
    next run, the kill of the run it belonged to (then it ended at its last recorded activity)."""
    run = str(started.get("run") or log.run)
    last = now
    if killed:
        try:
            last = max(float(started["ts"]), transcript.stat().st_mtime)
        except OSError:
            last = float(started["ts"])
        why = f"the scheduler was killed during the session (its run {run} recorded no end: kill -9, a crash or a power cut)"
    else:
        why = "the run was stopped during the session (Ctrl-C or a stop signal)"
    model, tokens = str(started.get("model", "")), tokens_in_transcript(transcript)
    cost = pricing.estimate(model, tokens, (e["receipt"] for e in totals.ended))
    log.emit(
        "session_ended",
        session=started["session"],
        role=role,
        feature=started.get("feature"),
        standing=Standing.INTERRUPTED.value,
        reason=why,
        receipt=partial_receipt(model, tokens, why, cost_usd=cost, duration_s=last - float(started["ts"])),
        cut={"by": "kill" if killed else "interrupt", "run": run, "last_activity": round(last, 3)},
    )


def blocked(log: EventLog, echo: Echo, event: Blocked, rejections: int) -> None:
    """A feature the transition blocked: its event, and its line."""
    because = {"because": event.because} if event.because else {}
    log.emit("feature_blocked", feature=event.feature_id, rejections=rejections, **because)
    why = (
        f"it depends on {event.because}, which is blocked"
        if event.because
        else f"rejected {plural(rejections, 'time')}"
    )
    echo(f"  blocked: {event.feature_id} ({why})")


STATE_COPIES = 3
"""Session folders that keep a copy of the state after them (older ones are compacted away)."""


def write_changes(records: Records, folder: Path, before: Handoff) -> None:
    """What the session changed in feature_list.json (it is not copied per session: it grows
    with the project), beside the copies of the other two hand-off files: `records` as the
    session left them (its outbox: what the merge queue landed meanwhile is not the session's)
    against `before`, as it began."""
    try:
        after = progress.load_handoff(records)
    except StateError:  # verification restored the pre-session files already
        return
    changed = sorted(after.passing() ^ before.passing())
    listed = before.feature_list is None and after.feature_list is not None
    data = {"passes": {f: f in after.passing() for f in changed}, "feature_list_written": listed}
    (folder / SessionFolder.CHANGES).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def keep_restore_point(records: Records, folder: Path, number: int) -> None:
    """The state as session `number` left it, copied to its folder (what a lost state file is
    restored from); only the last sessions' copies are kept: the state lists every feature, so
    one copy per session would make the logs grow with the project."""
    shutil.copy2(records.path(STATE_FILE), folder / SessionFolder.STATE)
    logs = records.path(LOG_DIR)
    for old in logs.glob(f"{SessionFolder.glob_of(number - STATE_COPIES)}/{SessionFolder.STATE}"):
        old.unlink(missing_ok=True)
