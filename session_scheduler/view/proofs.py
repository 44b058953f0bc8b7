"""A feature's proof: what was asked, what the review saw, the review rounds, the gates, the
sessions and the change, as one Markdown file, `.agent_logs/proofs/F003.md`, written when the
feature lands. The same text is the body of its pull request: it stands alone and holds no HTML.

Each section is read from the records (the feature list, the reviews and fixes with their
history, the event log, the REVIEW session's evidence through view/review_evidence.py) and from
git; what they do not hold is said so, never guessed. `text` is pure but for those reads.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import git

from session_scheduler.core import tasks
from session_scheduler.core.config import AgentConfig, trunk_of
from session_scheduler.core.errors import SpecError, StateError
from session_scheduler.core.evidence import is_web
from session_scheduler.core.humane import duration, money, plural
from session_scheduler.core.layout import LOG_DIR, SPEC_NAME, STATE_FILE
from session_scheduler.core.machine import WorkItem
from session_scheduler.repo import gitops, landing
from session_scheduler.run import findings
from session_scheduler.run.findings import Finding
from session_scheduler.store import events, handoff_history, statefile
from session_scheduler.store.events import Event
from session_scheduler.store.progress import atomic_write_text, load_handoff
from session_scheduler.view import evidence_pages, review_evidence
from session_scheduler.view.markup import block, code, cut, md

PROOFS_DIR = "proofs"
"""Inside the log folder (core/layout.LOG_DIR): each landed feature's proof, `F003.md`."""
FEATURE = re.compile(r"^F[0-9]+$")
"""A feature's id (core/schemas.FEATURE_ID): the only names a proof's file is given."""
FILES_SHOWN = 50
"""The changed files listed (the rest are counted)."""
TEXT_CHARS = 300
"""An issue's or a step's evidence is cut to this (the records have it whole)."""
SHOWN_FINDINGS = ("critical", "major", "scheduler")
"""The findings a review round lists (minor ones are counted): the scheduler's are a red gate or a conflict."""


def path_of(project: Path, feature_id: str) -> Path:
    if not FEATURE.match(feature_id):
        raise ValueError(f"{feature_id!r} is not a feature id (F followed by digits)")
    return project / LOG_DIR / PROOFS_DIR / f"{feature_id}.md"


def written(project: Path, feature_ids: Iterable[str]) -> tuple[str, ...]:
    """The features among `feature_ids` whose proof is written, in their order."""
    return tuple(f for f in feature_ids if FEATURE.match(f) and path_of(project, f).is_file())


def body(project: Path, repo: git.Repo, feature_id: str, config: AgentConfig) -> str:
    """A pull request's body: the feature's proof (as written, else made now)."""
    path = path_of(project, feature_id)
    if path.is_file():
        return path.read_text(encoding="utf-8", errors="replace")
    trunk = trunk_of(config)
    item = landing.placed(project, repo, trunk)[feature_id]
    return text(project, repo, feature_id, base=item.base, commit=item.merge, where=trunk)


def write_missing(project: Path, repo: git.Repo, branch: str, now: float | None = None) -> tuple[str, ...]:
    """The proof of every feature on `branch` (where work lands) that has none yet, or one from
    before it landed (held) or from an earlier landing (sent back, built again), written (at the end of the run that landed it, after `approve`, or by
    `report` after a run that was killed); and the proof of every feature a risk rule holds for
    the person, saying which rule. Their ids."""
    done = []
    for item in landing.placed(project, repo, branch).values():
        path = path_of(project, item.feature) if FEATURE.match(item.feature) else None
        said = f"{LANDED}{code(branch)} at {code(item.merge[:10])}"  # as `_title` says it
        if path is not None and (not path.is_file() or said not in path.read_text(errors="replace")):
            write(project, repo, item.feature, base=item.base, commit=item.merge, where=branch, now=now)
            done.append(item.feature)
    saved = statefile.load(project) if (project / STATE_FILE).is_file() else None
    trunk = gitops.head(repo, branch)
    for feature, why in saved.schedule.backlog.held if saved else ():
        work = WorkItem(feature_id=feature).branch
        tip = gitops.head(repo, work)
        if tip is None or trunk is None or not FEATURE.match(feature) or path_of(project, feature).is_file():
            continue
        base = str(repo.git.merge_base(trunk, tip)).strip()
        write(project, repo, feature, base=base, commit=tip, where=work, risk=why, now=now)
        done.append(feature)
    return tuple(done)


LANDED = "\nLanded on "
"""What the proof of a landed feature says under its title (`_title`)."""


def write(
    project: Path,
    repo: git.Repo,
    feature_id: str,
    *,
    base: str,
    commit: str,
    where: str,
    risk: str | None = None,
    now: float | None = None,
) -> Path:
    """Write (or rewrite) the feature's proof; returns its path."""
    path = path_of(project, feature_id)
    body = text(project, repo, feature_id, base=base, commit=commit, where=where, risk=risk)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(time.time() if now is None else now))
    atomic_write_text(path, f"{body}\n_Written {stamp} by the session scheduler._\n")
    return path


def text(
    project: Path,
    repo: git.Repo,
    feature_id: str,
    *,
    base: str,
    commit: str,
    where: str,
    risk: str | None = None,
) -> str:
    """The proof's Markdown (pure but for reading the records and git)."""
    path_of(project, feature_id)  # the id is checked before anything is read
    log = events.read(events.log_path(project))
    feature, fixes, problem = _records(project, feature_id)
    reviews = [f for f in findings.reviews(project) if f.subject == feature_id]
    sections = [
        _title(feature_id, feature, commit, where, risk) + _closes(project, feature),
        _asked(feature_id, feature, problem),
        _seen(project, log, feature_id, feature, reviews),
        _rounds(log, reviews, fixes),
        _gates(log, feature_id),
        _sessions(log, feature_id),
        _change(repo, base, commit),
        ["## Risk", "", f"Waits for a person: {md(risk)}" if risk else "No risk rule matched."],
    ]
    return "\n\n".join("\n".join(lines) for lines in sections) + "\n"


def _records(project: Path, feature_id: str) -> tuple[dict[str, Any] | None, dict[int, str], str]:
    """The feature's entry in the feature list, every fix (id -> what it did, the history's too),
    and why the feature list cannot be read ('' when it can)."""
    fixes = handoff_history.read_history(project, "fixes")
    sessions = handoff_history.read_history(project, "sessions")
    try:
        handoff = load_handoff(project)
    except StateError as exc:
        return None, _fixes(fixes, sessions), f"the hand-off files cannot be read: {exc}"
    fixes += handoff.fix_list()
    sessions += list((handoff.progress or {}).get("sessions", []))
    if handoff.feature_list is None:
        return None, _fixes(fixes, sessions), "feature_list.json is missing"
    entry = next((f for f in handoff.features() if f.get("id") == feature_id), None)
    return entry, _fixes(fixes, sessions), "" if entry else f"{feature_id} is not in feature_list.json"


def _fixes(entries: list[Any], sessions: list[Any]) -> dict[int, str]:
    """What each fix did, as the line's end after `answered by fix #N`: its session, commits and
    notes as the session recorded them, else the issues it named."""
    said = {e.get("session_id"): e for e in sessions if isinstance(e, dict)}
    fixed: dict[int, str] = {}
    for fix in entries:
        try:
            number, issues = int(fix["fix_id"]), [str(issue) for issue in fix["issues_fixed"]]
        except (KeyError, TypeError, ValueError):
            continue
        entry = said.get(fix.get("session_id"))
        notes = str(entry.get("notes") or "").strip() if isinstance(entry, dict) else ""
        span = entry.get("commit_range") if isinstance(entry, dict) else None
        commits = (
            f"{str(span.get('from'))[:7]}..{str(span.get('to'))[:7]}"
            if isinstance(span, dict) and span.get("from") and span.get("to")
            else ""
        )
        where = f"session {fix.get('session_id')}" + (f", commits {commits}" if commits else "")
        what = (
            md(cut(notes, TEXT_CHARS), cell=False)
            if notes
            else "; ".join(md(cut(i, TEXT_CHARS), cell=False) for i in issues)
        )
        fixed[number] = (f" ({where})" if fix.get("session_id") else "") + f": {what or 'no issue named'}"
    return fixed


def _title(
    feature_id: str, feature: dict[str, Any] | None, commit: str, where: str, risk: str | None
) -> list[str]:
    description = md(str(feature["description"])) if feature else "(no description recorded)"
    at = f"{code(where)} at {code(commit[:10])}"
    line = f"Waits for a person: {md(risk)} (its work is on {at})." if risk else f"{LANDED.strip()} {at}."
    return [f"# {feature_id}: {description}", "", line]


def _closes(project: Path, feature: dict[str, Any] | None) -> list[str]:
    """The task of the spec the feature closes (its `task`), with the title the spec gives it."""
    ref = str((feature or {}).get("task") or "")
    if not ref:
        return []
    try:
        listed = tasks.read_tasks((project / SPEC_NAME).read_bytes(), SPEC_NAME)[1]
    except (OSError, SpecError):
        listed = ()
    title = next((t.title for t in listed if t.ref == ref), None)
    return ["", f"Closes: {md(ref)} ({md(title)})." if title else f"Closes: {md(ref)} (not in the spec)."]


def _asked(feature_id: str, feature: dict[str, Any] | None, problem: str) -> list[str]:
    if feature is None:
        return ["## What was asked", "", f"None recorded: {md(problem)}."]
    steps = [str(s) for s in feature.get("steps") or []]
    needs = [str(d) for d in feature.get("depends_on") or []]
    return [
        "## What was asked",
        "",
        md(str(feature["description"])),
        "",
        "Acceptance steps:" if steps else "Acceptance steps: none recorded.",
        *([""] if steps else []),
        *(f"{n}. {md(step, cell=False)}" for n, step in enumerate(steps, 1)),
        "",
        f"Depends on: {', '.join(needs) if needs else 'no other feature'}.",
    ]


def _seen(
    project: Path, log: list[Event], feature_id: str, feature: dict[str, Any] | None, reviews: list[Finding]
) -> list[str]:
    head = ["## What was seen", ""]
    passed = [f for f in reviews if f.verdict == "PASS"]
    if not passed:
        return [*head, f"None recorded: no review passed {feature_id}."]
    number = passed[-1].review_id
    web = frozenset({feature_id}) if is_web(feature) else frozenset()
    gathered = review_evidence.gather(project, log, {feature_id: [(number, "PASS")]}, web)
    review = next((r for f in gathered for r in f.reviews), None)
    if review is None or not review.steps:
        return [*head, f"Review #{number} passed it and graded no acceptance step: none recorded."]
    root = str(project.resolve())
    base = str(path_of(project.resolve(), feature_id).parent)
    texts = {feature_id: tuple(str(s) for s in (feature or {}).get("steps") or [])}
    by = f" (session {review.session})" if review.session is not None else ""
    lines = [*head, f"Review #{number}{by} passed it:", ""]
    for s in review.steps:
        seen = f": {md(cut(s.evidence, TEXT_CHARS), cell=False)}" if s.evidence else ": no evidence recorded"
        lines.append(
            f"- Step {s.step} {'passed' if s.passed else '**failed**'} "
            f"({md(evidence_pages.step_text(texts, feature_id, s.step), cell=False)}){seen}"
            + "".join(_cited(c, root, base) for c in (s.screenshot, s.snapshot) if c is not None)
        )
    graded = {s.step for s in review.steps}
    lines += [
        f"- Step {n} ({md(step, cell=False)}): not graded"
        for n, step in enumerate(texts[feature_id], 1)
        if n not in graded
    ]
    for c in review.console:
        errors = evidence_pages.console_shown(c)[1]
        lines.append(f"- Console: [{md(c.name)}]({evidence_pages.link(root, c.file, base)}), {errors}")
    lines += [f"- Missing: {md(m)}" for m in review.missing]
    return lines


def _cited(c: review_evidence.Cited, root: str, base: str) -> str:
    if c.file is None:
        return f"; {c.kind}: {md(c.problem)}"
    return f"; {c.kind} [{md(c.name)}]({evidence_pages.link(root, c.file, base)})"


def _rounds(log: list[Event], reviews: list[Finding], fixes: dict[int, str]) -> list[str]:
    lines = ["## Review rounds", ""]
    if not reviews:
        return [*lines, "None recorded."]
    sessions = review_evidence.review_sessions(log)
    for f in reviews:
        by = f"session {sessions[f.review_id][0]}" if f.review_id in sessions else "the scheduler"
        lines.append(f"- **Review #{f.review_id}** ({by}): {md(f.verdict)}")
        lines += [
            f"  - {sev}: {md(cut(t, TEXT_CHARS), cell=False)}" for sev, t in f.issues if sev in SHOWN_FINDINGS
        ]
        minor = sum(sev == "minor" for sev, _ in f.issues)
        lines += [f"  - {plural(minor, 'minor finding')} (not listed)"] if minor else []
        for n in f.fixed_by:
            lines.append(f"  - answered by fix #{n}{fixes.get(n, ': not recorded')}")
        if not f.fixed_by and f.verdict == "REQUEST_CHANGES":
            lines.append("  - answered by no fix recorded")
    return lines


def _gates(log: list[Event], feature_id: str) -> list[str]:
    lines = ["## Gates", ""]
    ran = review_evidence.last_gates(log).get(feature_id, {})
    runs = [e for e in log if e["kind"] == "gates_ran" and e.get("feature") == feature_id]
    for place, event in ran.items():
        here = [e for e in runs if e.get("where") == place]
        red = sum(not e.get("passed") for e in here)
        name = "its branch" if place == "branch" else code(place)
        gates = review_evidence.gate_runs({place: event})
        lines.append(
            f"- On {name}, the last of {plural(len(here), 'run')} ({red} red): "
            + ", ".join(
                f"{md(g.name)} {'passed' if g.passed else '**red**'} in {duration(g.seconds)}" for g in gates
            )
        )
        for g in gates:
            if g.output:
                lines += ["", f"{md(g.name)} on {name}, the end of its output:", "", *block(g.output), ""]
    if not ran:
        lines.append(f"None recorded: no gate ran on {feature_id}'s work.")
    landed = [e for e in log if e["kind"] == "merge_verified" and e.get("feature") == feature_id]
    if landed:
        lines.append(f"- Its landing's tests: {md(str(landed[-1].get('tests')))}")
    return lines


def _sessions(log: list[Event], feature_id: str) -> list[str]:
    lines = ["## Sessions, time and cost", ""]
    roles: dict[int, str] = {}
    ends: dict[int, list[Event]] = {}
    first = last = None
    for event in log:
        if event.get("feature") != feature_id or event["kind"] not in ("session_started", "session_ended"):
            continue
        number = int(event["session"])
        roles.setdefault(number, str(event["role"]))
        if event["kind"] == "session_ended":
            ends.setdefault(number, []).append(event)
            last = float(event["ts"])
        elif first is None:
            first = float(event["ts"])
    if not roles:
        return [*lines, f"None recorded: the event log names no session of {feature_id}."]
    lines += ["| Session | Role | Standing | Time | Cost |", "|---|---|---|---|---|"]
    seconds = cost = 0.0
    estimated = unknown = False
    for number, role in roles.items():
        receipts = [e["receipt"] for e in ends.get(number, [])]
        took = sum(float(r.get("duration_s") or 0.0) for r in receipts)
        spent = sum(float(r.get("cost_usd") or 0.0) for r in receipts)
        guessed = any(r.get("cost_estimated") for r in receipts)
        cut_off = any(r.get("partial") and not r.get("cost_estimated") for r in receipts)
        seconds, cost = seconds + took, cost + spent
        estimated, unknown = estimated or guessed, unknown or cut_off
        standing = str(ends[number][-1]["standing"]) if number in ends else "no end recorded"
        tries = f" ({len(receipts)} tries)" if len(receipts) > 1 else ""
        shown = ("~" if guessed else "") + money(spent) + (" (cut off: part unknown)" if cut_off else "")
        lines.append(f"| {number} | {md(role)} | {md(standing)}{tries} | {duration(took)} | {shown} |")
    basis = next((str(e.get("cost_basis")) for e in reversed(log) if e["kind"] == "run_started"), "api")
    notes = [
        *(["some of it estimated from the transcripts"] if estimated else []),
        *(["a session cut off reported no cost"] if unknown else []),
        *([f"the CLI's estimate ({md(basis)}), not money billed"] if basis != "api" else []),
    ]
    span = (
        f"; from the first start to the last end, {duration(last - first)}"
        if first is not None and last is not None
        else ""
    )
    return [
        *lines,
        "",
        f"{plural(len(roles), 'session')}, {duration(seconds)} of session time{span}; "
        f"{money(cost)} in all{' (' + '; '.join(notes) + ')' if notes else ''}.",
    ]


def _change(repo: git.Repo, base: str, commit: str) -> list[str]:
    lines = ["## The change", ""]
    try:
        short = str(repo.git.diff("--shortstat", base, commit)).strip()
        files = _numstat(str(repo.git.diff("--numstat", "-z", base, commit)))
    except git.GitCommandError as exc:
        why = next(iter(str(exc.stderr).strip().splitlines()), "") or f"exit {exc.status}"
        return [*lines, f"None recorded: git cannot compare {code(base)} and {code(commit)} ({md(why)})."]
    lines.append(f"{code(base[:10])}..{code(commit[:10])}: {md(short) if short else 'no file changed'}.")
    if files:
        lines += ["", "| File | Added | Removed |", "|---|---|---|"]
        lines += [
            f"| {code(path).replace('|', chr(92) + '|')} | {added} | {removed} |"
            for added, removed, path in files[:FILES_SHOWN]
        ]
    if len(files) > FILES_SHOWN:
        more = len(files) - FILES_SHOWN
        lines += ["", f"… and {plural(more, 'more file')} ({code(f'git diff --numstat {base} {commit}')})."]
    return lines


def _numstat(out: str) -> list[tuple[str, str, str]]:
    """(added, removed, path) of each file in `git diff --numstat -z`; a binary file's counts are
    `binary`, a renamed file's path is `old → new`."""
    parts, files, i = out.split("\0"), [], 0
    while i < len(parts):
        head, i = parts[i].lstrip("\n"), i + 1
        if not head:
            continue
        added, removed, path = head.split("\t", 2)
        if not path and i + 1 < len(parts):  # renamed or copied: its old and new paths follow
            path, i = f"{parts[i]} → {parts[i + 1]}", i + 2
        binary = added == "-" and removed == "-"
        files.append(("binary" if binary else added, "binary" if binary else removed, path))
    return files
