"""Does the evaluation catch what is wrong, and only that? (issue 20, item 7)

Seeded bugs in the demo app (scripted_model/demo_app.py), of three kinds: the command line (CLI),
the library the commands use (API: `todo.store`), and the web front (UI: the page a user clicks),
each a small real change of the finished app's code that breaks what its feature promises; and as
many correct variants (a change that breaks nothing: a comment, a renamed local). Each variant is
reviewed the way the scheduler reviews a feature's branch:

1. the gates (`Gatekeeper`: the project's test command, and the app gate for a project with an
   app) on the branch;
2. the scripted REVIEW (the robot, following the feature's acceptance steps: commands for CLI and
   API features, the real boxed browser for web features) through the in-process runner, with the
   scheduler's browser and ledger around it (agent.run_session), and its review verified
   (verify_session: a web PASS must cite its evidence).

A seeded bug is caught when a gate is red or the review does not pass; a correct variant is a
false alarm when either says so. The base project is built once by the scheduler itself (every
feature implemented, reviewed and merged on the scripted model); each variant is a copy of it with
the feature taken back under review on a branch holding the change.

Also measured: what the browser adds to a web feature's REVIEW (seconds, and the characters of
browser results the model reads: tokens estimated at 4 characters each), against the CLI
features' REVIEWs; and that no REVIEW passes when the app is down (the app's start broken: the
browser does not start, no session runs, the standing is `browser`).

Goals: at least 90% of seeded bugs caught, under 10% false alarms, no pass with the app down.

    .venv/bin/python bench/evaluator.py [--only F003,UI] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripted_model.demo_web import WEB_FEATURES
from scripted_model.scenario import Scenario
from session_scheduler.core.config import AgentConfig, SessionType
from session_scheduler.core.evidence import LEDGER, is_web
from session_scheduler.core.machine import Backlog, Lane, SessionState, feature
from session_scheduler.guard.browser_box import APP_ORIGIN
from session_scheduler.guard.sandbox import Host
from session_scheduler.repo import gitops
from session_scheduler.run import browsing, gating
from session_scheduler.run.agent import SessionRequest, run_session
from session_scheduler.run.classify import cut_short
from session_scheduler.run.gating import Gatekeeper
from session_scheduler.run.lanes import Lanes
from session_scheduler.run.opening import planner_of
from session_scheduler.run.plan import brief_for, write_plan
from session_scheduler.run.verify import capture, verify_session
from session_scheduler.store.records import Records
from session_scheduler.testing.inprocess import InProcessRobotRunner

SPEC = Path(__file__).resolve().parent.parent / "session_scheduler" / "prompts" / "app_spec.txt"


@dataclass(frozen=True)
class Variant:
    name: str
    feature: str
    kind: str
    """CLI, API or UI."""
    path: str
    old: str
    new: str
    bug: bool
    """A seeded bug (it must be caught), or a correct variant (it must pass)."""


def bug(name: str, feature_id: str, kind: str, path: str, old: str, new: str) -> Variant:
    return Variant(name, feature_id, kind, path, old, new, True)


BUGS: tuple[Variant, ...] = (
    bug("a corrupt store reads as empty", "F001", "API", "todo/store.py",
        'raise ValueError(f"{path()} is corrupt: {exc.msg}") from None', "return []"),
    bug("save writes nothing", "F001", "API", "todo/store.py",
        "json.dump(tasks, handle, indent=2)", "json.dump([], handle, indent=2)"),
    bug("find answers the first task for any id", "F001", "API", "todo/store.py",
        'if str(task["id"]) == task_id:', "if True:"),
    bug("ids start at 2", "F002", "CLI", "todo/cmd_add.py", "default=0) + 1", "default=0) + 2"),
    bug("a title keeps its first word only", "F002", "CLI", "todo/cmd_add.py",
        'title = " ".join(args).strip()', 'title = args[0].strip() if args else ""'),
    bug("done and open marks swapped", "F003", "CLI", "todo/cmd_list.py",
        'mark = "x" if task["done"] else " "', 'mark = " " if task["done"] else "x"'),
    bug("--all ignored", "F003", "CLI", "todo/cmd_list.py",
        'if "--all" in args or not task["done"]:', 'if not task["done"]:'),
    bug("done marks nothing", "F004", "CLI", "todo/cmd_done.py", '["done"] = True', '["done"] = False'),
    bug("remove is not saved", "F005", "CLI", "todo/cmd_remove.py", "    store.save(tasks)\n", "    pass\n"),
    bug("done counts the open tasks", "F006", "CLI", "todo/cmd_stats.py",
        'done = sum(1 for t in tasks if t["done"])', 'done = sum(1 for t in tasks if not t["done"])'),
    bug("overdue counts the future", "F006", "CLI", "todo/cmd_stats.py",
        't["due"] < today', 't["due"] > today'),
    bug("count counts done tasks too", "F007", "CLI", "todo/cmd_count.py",
        'if "--all" in args or not t["done"]', "if True"),
    bug("clear prints what it kept", "F008", "CLI", "todo/cmd_clear.py",
        "print(len(tasks) - len(kept))", "print(len(kept))"),
    bug("rename keeps the first word", "F009", "CLI", "todo/cmd_rename.py",
        '["title"] = " ".join(args[1:]).strip()', '["title"] = args[1]'),
    bug("undo marks done", "F010", "CLI", "todo/cmd_undo.py", '["done"] = False', '["done"] = True'),
    bug("search is case-sensitive", "F011", "CLI", "todo/cmd_search.py",
        'if text in task["title"].lower():', 'if text in task["title"]:'),
    bug("first is the newest", "F012", "CLI", "todo/cmd_first.py", "min(open_tasks", "max(open_tasks"),
    bug("last is the oldest", "F013", "CLI", "todo/cmd_last.py", "max(tasks", "min(tasks"),
    bug("priority off by one", "F014", "CLI", "todo/cmd_priority.py", "int(args[1])", "int(args[1]) - 1"),
    bug("a tag is added twice", "F015", "CLI", "todo/cmd_tag.py", "if args[1] not in tags:", "if True:"),
    bug("export's columns swapped", "F016", "CLI", "todo/cmd_export.py",
        '["id", "title", "done", "due"]', '["id", "done", "title", "due"]'),
)  # fmt: skip
"""Seeded bugs of the command line and the library; the web front's are UI_BUGS."""

UI_BUGS: tuple[Variant, ...] = (
    bug("the Add button does nothing", "F017", "UI", "todo/web_add.py", "type=submit>Add", "type=button>Add"),
    bug("the form posts where nothing answers", "F017", "UI", "todo/web_add.py", "action=/add>", "action=/add-task>"),
    bug("the field is labelled Title", "F017", "UI", "todo/web_add.py", "New task <input", "Title <input"),
    bug("the title is read from the wrong field", "F017", "UI", "todo/web_add.py",
        'title = fields.get("title", "").strip()', 'title = fields.get("name", "").strip()'),
    bug("the newest tasks are not listed", "F017", "UI", "todo/web.py",
        "items = \"\".join(item(t, found) for t in load())", "items = \"\".join(item(t, found) for t in load()[1:])"),
    bug("after a POST the page goes nowhere", "F017", "UI", "todo/web.py",
        'self.send_header("Location", "/")', 'self.send_header("Location", "/x")'),
    bug("the Done button posts no id", "F018", "UI", "todo/web_done.py",
        "f\"<input type=hidden name=id value={int(task.get('id', 0))}>\"", '""'),
    bug("Done marks nothing done", "F018", "UI", "todo/web_done.py", 'task["done"] = True', 'task["done"] = False'),
    bug("the Done button has no name of its task", "F018", "UI", "todo/web_done.py",
        'aria-label="Done: {title}"', 'aria-label="Done"'),
    bug("a done task is not shown as done", "F018", "UI", "todo/web.py",
        'return f"<li>{title} (done)</li>"', 'return f"<li>{title}</li>"'),
)  # fmt: skip
"""Seeded bugs of the web front (filled in with the web features)."""


def correct(of: Variant, n: int) -> Variant:
    """A correct twin of a seeded bug: the same file, a change that breaks nothing (a comment
    line added at its end)."""
    return Variant(
        f"correct twin of: {of.name}",
        of.feature,
        of.kind,
        of.path,
        "",
        f"# reviewed ({n}): no change in behaviour\n",
        False,
    )


@dataclass(frozen=True)
class Verdict:
    variant: Variant
    gates_red: list[str]
    review: str
    """PASS, REQUEST_CHANGES, REJECT, or why there is none (`browser`, `refused: ...`)."""
    seconds: float
    browser_chars: int

    @property
    def caught(self) -> bool:
        return bool(self.gates_red) or self.review != "PASS"


def build_base(root: Path, scenario: Scenario, config: AgentConfig) -> Path:
    """The finished demo app: every feature implemented, reviewed and merged by the scheduler."""
    project = root / "base"
    project.mkdir()
    (project / "app_spec.txt").write_text(SPEC.read_text())
    lines: list[str] = []
    report = Lanes(project, config, InProcessRobotRunner(scenario), echo=lines.append).run().run
    if report.status != "done":
        raise SystemExit(f"the base project did not finish: {report.message}\n" + "\n".join(lines[-20:]))
    return project


def under_review(base: Path, root: Path, variant: Variant) -> Path:
    """A copy of the finished project with `variant.feature` taken back under review on its branch,
    which holds the variant's change."""
    project = root / f"v{abs(hash(variant)) % 10**8}"
    shutil.copytree(base, project, symlinks=True)
    listed = json.loads((project / "feature_list.json").read_text())
    for entry in listed["features"]:
        if entry["id"] == variant.feature:
            entry["passes"] = False
    (project / "feature_list.json").write_text(json.dumps(listed, indent=2))
    target = project / variant.path
    branch = f"feature/{variant.feature}"
    subprocess.run(["git", "checkout", "-q", "-B", branch, "main"], cwd=project, check=True)
    text = target.read_text()
    if not variant.bug:
        target.write_text(text.rstrip("\n") + "\n" + variant.new)
    elif text.count(variant.old) != 1:
        raise SystemExit(
            f"{variant.name}: {variant.path} holds {variant.old!r} {text.count(variant.old)} times"
        )
    else:
        target.write_text(text.replace(variant.old, variant.new))
    subprocess.run(["git", "commit", "-qam", f"{variant.name}"], cwd=project, check=True)
    subprocess.run(["git", "checkout", "-q", "main"], cwd=project, check=True)
    return project


def evaluate(project: Path, variant: Variant, config: AgentConfig, scenario: Scenario) -> Verdict:
    repo = gitops.open_repo(project)
    records = Records(project)
    keeper = Gatekeeper.of(config)
    main, tip = gitops.head(repo, gitops.MAIN), gitops.head(repo, f"feature/{variant.feature}")
    assert main is not None and tip is not None
    check = keeper.plan(repo, main, branch=False)
    red = [r.name for r in gating.red(keeper.check(repo, tip, check))] if check else []
    listed = json.loads((project / "feature_list.json").read_text())["features"]
    ids = tuple(f["id"] for f in listed)
    passing = frozenset(i for i in ids if i != variant.feature)
    state = SessionState(
        Backlog(ids, passing), Lane(SessionType.REVIEW, feature(variant.feature)), session_count=100
    )
    folder = project / ".agent_logs" / "session_0101_REVIEW"
    folder.mkdir(parents=True)
    browser = browsing.plan_for(keeper, repo, records, state, folder)
    brief = brief_for(state, config, records, APP_ORIGIN if browser else None)
    planner = planner_of(project, config, Host.of(os.environ))  # as the run plans its sessions
    plan = planner.plan(state, project, brief=brief, spent_usd=0.0, outage_s=0.0)
    pre = capture(records, repo, state, folder / "pre")
    request = SessionRequest(plan, project, write_plan(plan, project), folder, records)
    started = time.monotonic()
    result = run_session(InProcessRobotRunner(scenario), request, browser, lambda line: None)
    seconds = time.monotonic() - started
    cut = cut_short(result, plan.model)
    if cut is not None:
        return Verdict(variant, red, cut.standing.value, seconds, 0)
    outcome = verify_session(records, repo, state, pre, config, lambda line: None, folder=folder)
    review = outcome.verdict if outcome.ok and outcome.verdict else f"refused: {outcome.reason[:120]}"
    return Verdict(variant, red, str(review), seconds, _browser_chars(folder))


def _browser_chars(folder: Path) -> int:
    """The characters of browser results the model read: the evidence kept (snapshots, console)
    and each call's result as the ledger saw it (a screenshot counted as its file's size / 4: an
    image costs the model tokens too, about that many)."""
    if not (folder / LEDGER).exists():
        return 0
    total = 0
    for path in (folder / "evidence").glob("*"):
        total += path.stat().st_size if path.suffix != ".png" else path.stat().st_size // 4
    return total


def app_down(base: Path, root: Path, config: AgentConfig, scenario: Scenario, web_feature: str) -> str:
    """A web feature under review whose app does not start: the standing (never a pass)."""
    broken = Variant(
        "the app does not start", web_feature, "UI", "app.json", '"start": "', '"start": "exit 3; ', True
    )
    project = under_review(base, root, broken)
    # the app's start as main has it: the branch's app.json is not what the scheduler reads
    subprocess.run(["git", "checkout", "-q", "main"], cwd=project, check=True)
    subprocess.run(
        ["git", "merge", "-q", f"feature/{web_feature}", "-m", "app down"], cwd=project, check=True
    )
    return evaluate(project, broken, config, scenario).review


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default="", help="comma-separated feature ids or kinds to run")
    parser.add_argument("--keep", type=Path, help="keep the projects in this folder")
    parser.add_argument("--no-sandbox", action="store_true", help="run gates and the app unconfined")
    args = parser.parse_args(argv)
    scenario = Scenario.from_json(SCENARIO)
    config = AgentConfig(
        feature_count=scenario.features, test_command="bash init.sh", sandbox=not args.no_sandbox
    )
    chosen = [
        v for v in (*BUGS, *UI_BUGS) if not args.only or {v.feature, v.kind} & set(args.only.split(","))
    ]
    variants = [*chosen, *(correct(v, n) for n, v in enumerate(chosen, 1))]
    root = Path(tempfile.mkdtemp(prefix="evaluator-")) if args.keep is None else args.keep
    root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    base = build_base(root, scenario, config)
    built = time.monotonic() - started
    print(f"base project: {scenario.features} features built and merged in {built:.0f} s ({root})")
    verdicts: list[Verdict] = []
    for variant in variants:
        project = under_review(base, root, variant)
        verdict = evaluate(project, variant, config, scenario)
        verdicts.append(verdict)
        mark = "caught" if verdict.caught else "passed"
        wrong = verdict.caught != variant.bug
        print(
            f"{'!!' if wrong else '  '} {variant.kind:3} {variant.feature} {variant.name:45.45} {mark:6}"
            f"  gates red: {','.join(verdict.gates_red) or '-':10} review: {verdict.review[:60]}  {verdict.seconds:.1f} s"
        )
        if args.keep is None:
            shutil.rmtree(project, ignore_errors=True)
    _summary(verdicts)
    web = next((f.id for f in WEB_FEATURES if is_web({"category": f.category})), None)
    if web is not None and any(v.kind == "UI" for v in chosen):
        down = app_down(base, root, config, scenario, web)
        print(
            f"the app down: the REVIEW's standing is {down!r} ({'never a pass' if down != 'PASS' else 'A PASS: WRONG'})"
        )
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0


def _summary(verdicts: list[Verdict]) -> None:
    bugs = [v for v in verdicts if v.variant.bug]
    fine = [v for v in verdicts if not v.variant.bug]
    caught = [v for v in bugs if v.caught]
    alarms = [v for v in fine if v.caught]
    by_gates = [v for v in bugs if v.gates_red]
    by_review = [v for v in bugs if v.review != "PASS"]
    print()
    print(f"seeded bugs caught: {len(caught)}/{len(bugs)} = {100 * len(caught) / max(len(bugs), 1):.0f}% "
          f"(by the gates {len(by_gates)}, by REVIEW {len(by_review)}; goal >= 90%)")  # fmt: skip
    for kind in ("CLI", "API", "UI"):
        of = [v for v in bugs if v.variant.kind == kind]
        if of:
            print(f"  {kind}: {sum(v.caught for v in of)}/{len(of)}")
    print(
        f"false alarms: {len(alarms)}/{len(fine)} = {100 * len(alarms) / max(len(fine), 1):.0f}% (goal < 10%)"
    )
    web = [v for v in verdicts if v.variant.kind == "UI" and not v.variant.bug]
    other = [v for v in verdicts if v.variant.kind != "UI" and not v.variant.bug]
    if web and other:
        w, o = statistics.median(v.seconds for v in web), statistics.median(v.seconds for v in other)
        chars = statistics.median(v.browser_chars for v in web)
        print(f"a web feature's REVIEW: median {w:.1f} s against {o:.1f} s for a CLI feature (+{w - o:.1f} s, "
              f"{w / max(o, 0.01):.1f}x); browser results read: median {chars:.0f} characters, ~{chars / 4:.0f} tokens")  # fmt: skip


SCENARIO: dict[str, Any] = {"features": 16, "web_features": 2, "depends": {"F017": ["F001"]}}
"""The demo app's 16 command features and its web front with its two web features."""

if __name__ == "__main__":
    sys.exit(main())
