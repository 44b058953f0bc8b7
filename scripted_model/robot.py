"""The role-aware robot agent: one script per role, replayed from the conversation so far.

Each role is a generator that yields a batch of tool calls and receives their results.
`next_step` replays the generator over the results already in the conversation, so the
robot keeps no state of its own: the same history always gives the same next step,
whether the calls travel through the real Claude Code CLI or run in-process.

Like a real agent it first asks where it is (`pwd`) and reads its brief (the `brief`
hand-off tool: the session's feature, open review and earlier reviews, bounded in size),
writes code with absolute paths, and records its session entry, reviews, fixes and passing
features with the hand-off tools, never by rewriting the hand-off files. Its git commands,
like every command, run inside the OS sandbox.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from scripted_model import browsing, demo_app, demo_web
from scripted_model.browsing import Steps, browser
from scripted_model.protocol import BROWSER_FACT, HANDOFF_ARGS, HANDOFF_TOOLS, WEB_CATEGORY, ToolCall
from scripted_model.scenario import Scenario

Script = Generator[list[ToolCall], list[str], str]
_NUMBERED = re.compile(r"^\s*\d+(?:\t|→)", re.MULTILINE)
_CONFLICT = re.compile(r"^CONFLICT \([^)]*\): Merge conflict in (.+)$", re.MULTILINE)
_STEP = re.compile(r"^Run `(?P<command>.+)` -> prints `(?P<output>.*)`$")
"""An acceptance step in the documented form (demo_app.step)."""
APP_CODE = ("todo", "notes")
"""What a step's empty folder holds of the project: links to the app's code."""


@dataclass(frozen=True)
class Ctx:
    session: int
    scenario: Scenario


@dataclass
class Files:
    """Where the robot works and what its brief says."""

    cwd: str
    facts: dict[str, Any]
    brief: str = ""
    """The brief's text, as the session got it."""

    def path(self, rel: str) -> str:
        return f"{self.cwd}/{rel}"

    @property
    def feature(self) -> Any:
        return self.facts.get("feature")

    @property
    def branch(self) -> Any:
        return self.facts.get("branch")


def bash(command: str) -> ToolCall:
    return ToolCall("Bash", {"command": command, "description": command[:60]})


def read(path: str) -> ToolCall:
    return ToolCall("Read", {"file_path": path})


def write(path: str, content: str) -> ToolCall:
    return ToolCall("Write", {"file_path": path, "content": content})


def edit(path: str, old: str, new: str) -> ToolCall:
    return ToolCall("Edit", {"file_path": path, "old_string": old, "new_string": new})


def write_json(path: str, data: Any) -> ToolCall:
    return write(path, json.dumps(data, indent=2) + "\n")


def handoff(name: str, **args: Any) -> ToolCall:
    """A call of one of the scheduler's hand-off tools (those the protocol names, as it names them)."""
    if not set(args) <= set(HANDOFF_ARGS[name]):
        raise ValueError(
            f"the protocol gives {name} no argument {sorted(set(args) - set(HANDOFF_ARGS[name]))}"
        )
    return ToolCall(HANDOFF_TOOLS + name, args)


def brief_facts(text: str) -> dict[str, Any]:
    """The JSON facts at the end of a brief."""
    start, end = text.rfind("```json"), text.rfind("```")
    if start < 0 or end <= start:
        return {}
    try:
        facts = json.loads(text[start + len("```json") : end])
    except json.JSONDecodeError:
        return {}
    return facts if isinstance(facts, dict) else {}


def file_text(result: str) -> str:
    """A Read result without its `cat -n` line numbers."""
    lines = result.splitlines()
    if lines and all(_NUMBERED.match(line) for line in lines if line.strip()):
        return "\n".join(_NUMBERED.sub("", line, count=1) for line in lines)
    return result


def parse_json(text: str) -> Any:
    """The first JSON object in a tool result (tolerates line numbers and trailing output)."""
    text = file_text(text)
    start = text.find("{")
    if start < 0:
        return {}
    try:
        return json.JSONDecoder().raw_decode(text[start:])[0]
    except json.JSONDecodeError:
        return {}


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def orient(first: list[ToolCall] | None = None) -> Steps:
    """`pwd` and the brief (plus any first commands); returns (Files, results)."""
    results = yield [bash("pwd"), handoff("brief"), *(first or [])]
    return Files(last_line(results[0]), brief_facts(results[1]), results[1]), results[2:]


def put(files: Files, contents: dict[str, str]) -> Steps:
    """Write files, reading first those that already exist (as the CLI requires)."""
    paths = " ".join(shlex.quote(p) for p in contents)
    (listing,) = yield [bash(f"ls -1 {paths} 2>/dev/null; true")]
    existing = [p for p in contents if p in listing.split()]
    if existing:
        yield [read(files.path(p)) for p in existing]
    yield [write(files.path(p), text) for p, text in contents.items()]
    return paths


def session_entry(outcome: str, touched: list[str], start: str, end: str, **extra: Any) -> ToolCall:
    return handoff(
        "append_session",
        outcome=outcome,
        features_touched=touched,
        commit_range={"from": start[:40], "to": end[:40]},
        notes=f"{outcome.lower().replace('_', ' ')}",
        **extra,
    )


_NAMED = re.compile(r"\buse ([A-Z][A-Z_]+[A-Z])\b|'([A-Z][A-Z_]+[A-Z])'")
"""The values a refusal names: the hand-off tool's (`use READY_FOR_REVIEW`) or the CLI's own
check of the tool's schema (`... is not one of ['READY_FOR_REVIEW', 'FAILED']`)."""
_UNGRADED = re.compile(r"no result for step\(s\) [0-9, ]+")
_NEEDS = re.compile(r"(F[0-9]+) depends on (?:itself|(F[0-9]+), which is not in the list)")


def end_session(ctx: Ctx, outcome: str, touched: list[str], start: str, end: str, **extra: Any) -> Steps:
    """The session's entry, its last call. With `spaced_outcome` the robot first writes the outcome
    with spaces (`READY FOR REVIEW`); like a model, it reads the refusal and uses the value it names."""
    said = outcome.replace("_", " ") if ctx.scenario.has_fault(ctx.session, "spaced_outcome") else outcome
    (answer,) = yield [session_entry(said, touched, start, end, **extra)]
    if answer.startswith("appended"):
        return answer
    named = [a or b for a, b in _NAMED.findall(answer)]
    meant = [value for value in named if value.replace("_", " ") == said.replace("_", " ")]
    if meant:  # the value it meant, as the refusal spells it
        (answer,) = yield [session_entry(meant[0], touched, start, end, **extra)]
    return answer


def record_review(
    ctx: Ctx, verdict: str, issues: dict[str, list[str]], acceptance: list[dict[str, Any]] | None
) -> Steps:
    """Record the review; with `incomplete_pass` the first call leaves the last step ungraded. A
    refusal that names ungraded steps is corrected: the whole review again, every step graded."""
    extra = {} if acceptance is None else {"acceptance": acceptance}
    if acceptance and ctx.scenario.has_fault(ctx.session, "incomplete_pass"):
        extra = {"acceptance": acceptance[:-1]}
    (answer,) = yield [handoff("record_review", verdict=verdict, issues=issues, **extra)]
    if acceptance is not None and "review_id" not in parse_json(answer) and _UNGRADED.search(answer):
        (answer,) = yield [handoff("record_review", verdict=verdict, issues=issues, acceptance=acceptance)]
    return answer


def checked_feature_list(files: Files, listed: dict[str, Any]) -> Steps:
    """Write feature_list.json and check it with check_feature_list; a dependency the answer names
    as impossible (on itself, on a feature not listed) is dropped, the list rewritten and checked
    again, as a model reading the answer would."""
    path = files.path("feature_list.json")
    yield [write_json(path, listed)]
    (answer,) = yield [handoff("check_feature_list")]
    wrong = {(m.group(1), m.group(2) or m.group(1)) for m in _NEEDS.finditer(answer)}
    if wrong:
        for entry in listed["features"]:
            needs = [n for n in entry.get("depends_on", []) if (entry["id"], n) not in wrong]
            entry.pop("depends_on", None)
            entry.update({"depends_on": needs} if needs else {})
        yield [read(path)]
        yield [write_json(path, listed)]
        (answer,) = yield [handoff("check_feature_list")]
    return answer


def faults(ctx: Ctx, files: Files) -> Steps:
    """Misbehaviour the scenario asks of this session (after its real work)."""
    for fault in ctx.scenario.robot_faults(ctx.session):
        if fault.kind == "forbidden_command":
            yield [bash(fault.command or "git push origin main")]
        elif fault.kind == "forbidden_write":
            yield [write(files.path(fault.file or ".claude_settings.json"), "# overwritten by the agent\n")]
        elif fault.kind == "invalid_json":  # by the shell, as an agent without a Write tool would
            name = fault.file or "reviews.json"
            yield [bash(f"echo '{{\"reviews\": [ this is not json' > {shlex.quote(name)}")]
        elif fault.kind == "leave_origin":  # the scheduler keeps the browser on the app
            yield [browser("browser_navigate", url=fault.url or "http://example.com/")]
        elif fault.kind == "screenshot_filename":  # the scheduler names the evidence files
            yield [browser("browser_take_screenshot", type="png", filename=fault.file or "../../escape.png")]


RUN_TESTS = "bash init.sh 2>&1"


def tests_passed(result: str) -> bool:
    """The CLI's Bash tool starts a failed command's result with `Exit code N`."""
    return not result.lstrip().startswith("Exit code") and "FAILED" not in result


def commit(paths: str, message: str, ctx: Ctx | None = None) -> ToolCall:
    """Stage `paths` and commit; everything (`git add -A`, as real agents do) when the scenario's
    `stage_all` fault names the session."""
    # no backticks: the CLI would not recognise the call as git alone, so it would run sandboxed
    plain = message.replace("`", "")
    if ctx is not None and ctx.scenario.has_fault(ctx.session, "stage_all"):
        paths = "-A"
    return bash(f"git add {paths} && git commit -q -m {shlex.quote(plain)}; git rev-parse HEAD")


def _item(ctx: Ctx, feature_id: str) -> demo_app.DemoFeature:
    """The scenario's feature of that id: a command of the catalogue, a web feature when the
    scenario has them (after the commands), else a note (a spec larger than the catalogue)."""
    return demo_web.any_feature(feature_id) if ctx.scenario.web_features else demo_app.feature(feature_id)


def initializer(ctx: Ctx) -> Script:
    files, (spec,) = yield from orient([bash("cat app_spec.txt")])
    if files.facts.get("form") == "extend":
        return (yield from extend(ctx, files))
    chosen = [demo_app.feature(f"F{n:03d}") for n in range(1, ctx.scenario.features + 1)] + list(
        demo_web.WEB_FEATURES[: ctx.scenario.web_features]
    )
    feature_list = {
        "features": [
            {
                "id": f.id,
                "category": f.category,
                "description": f.description,
                "steps": list(f.steps),
                "passes": False,
                **(
                    {"depends_on": list(depends)}
                    if (depends := ctx.scenario.depends.get(f.id, f.depends_on))
                    else {}
                ),
            }
            for f in chosen
        ]
    }
    for ref, title in _TASK.findall(files.brief):  # a task list: each task one feature's `task`
        named = next((f for f in feature_list["features"] if _command(str(f["description"])) in title), None)
        if named is not None and "task" not in named:
            named["task"] = ref
    (head,) = yield [bash("cat README.md 2>/dev/null; git rev-parse HEAD")]
    start = last_line(head)
    skeleton = {**demo_app.SKELETON, **(demo_web.WEB if ctx.scenario.web else {})}
    readme = head.rstrip("\n").rpartition("\n")[0]
    if readme.strip():  # the person's README (an existing repository): the app's notes go after it
        skeleton["README.md"] = readme.rstrip("\n") + "\n\n" + skeleton["README.md"]
    paths = yield from put(files, skeleton)
    if ctx.scenario.has_fault(ctx.session, "self_dependent"):  # its first feature needs itself
        first: dict[str, Any] = feature_list["features"][0]
        first["depends_on"] = [*first.get("depends_on", []), first["id"]]
    yield from checked_feature_list(files, feature_list)
    yield [bash(f"chmod +x init.sh && {RUN_TESTS}")]
    end = last_line((yield [commit(paths, "chore: project skeleton and init.sh", ctx)])[0])
    yield from faults(ctx, files)
    yield from end_session(ctx, "INITIALIZED", [], start, end)
    return f"Wrote {len(chosen)} features, init.sh and the skeleton ({len(spec)} bytes of spec read)."


_TASK = re.compile(r"^- `(#[0-9]+|task [0-9]+)`: (.*)$", re.MULTILINE)
"""A task the brief lists (brief._tasks): its ref and its title."""


def _command(description: str) -> str:
    """The command a demo feature's description starts with (`add TITLE ...` -> `add`; "\0" for
    none: no title holds it)."""
    return description[1:].split()[0].strip("`") if description.startswith("`") else "\0"


_ADDED_COMMAND = re.compile(r"^\+.*?`([a-z]+)\b", re.MULTILINE)
"""A command a line the spec's diff adds names first (`- `count [--all]`: ...`)."""


def extend(ctx: Ctx, files: Files) -> Script:
    """The INITIALIZER's extend form: the demo features whose command a line the spec's diff adds
    names, appended after the list the project has (read first), checked, and no commit."""
    (brief, listing, head) = yield [
        handoff("brief"),
        read(files.path("feature_list.json")),
        bash("git rev-parse HEAD"),
    ]
    listed = parse_json(listing)
    have = {f["id"] for f in listed.get("features", [])}
    named = set(_ADDED_COMMAND.findall(brief))
    new = [
        item
        for item in demo_app.FEATURES
        if item.id not in have
        and item.description.startswith("`")
        and item.description[1:].split()[0].strip("`") in named
    ]
    listed["features"] = [
        *listed.get("features", []),
        *(
            {
                "id": f.id,
                "category": f.category,
                "description": f.description,
                "steps": list(f.steps),
                "passes": False,
            }
            for f in new
        ),
    ]
    yield from checked_feature_list(files, listed)
    yield from faults(ctx, files)
    start = last_line(head)
    yield from end_session(ctx, "INITIALIZED", [], start, start)
    return f"Added {len(new)} features for the new spec: {', '.join(f.id for f in new)}."


def add_readme_line(files: Files, line: str) -> Steps:
    """Add the line at the end of README.md (its command list) unless it is there; returns the
    path to stage (" README.md") or "". Two branches that each add theirs conflict on merging."""
    (readme,) = yield [read(files.path("README.md"))]
    text = file_text(readme)
    if line in text.splitlines():
        return ""
    yield [write(files.path("README.md"), text.rstrip("\n") + "\n" + line + "\n")]
    return " README.md"


def implement(ctx: Ctx) -> Script:
    files, _ = yield from orient()
    feature_id, branch = files.feature, files.branch
    item = _item(ctx, feature_id)
    contents = dict(item.files)
    if feature_id in ctx.scenario.buggy and not files.facts.get("earlier_reviews") and item.buggy:
        contents.update(item.buggy)
    if feature_id in ctx.scenario.app_broken and not files.facts.get("earlier_reviews"):
        contents["todo/web.py"] = demo_web.BROKEN_WEB
    red = ctx.scenario.red_part(feature_id)
    if red == "rewords":  # green alone; red next to its partner, whose test pins the old words
        contents["todo/__main__.py"] = demo_app.REWORDED_MAIN
    elif red == "pins":
        contents[demo_app.test_file(item)] = demo_app.pinned(item)
    (listing,) = yield [bash(f"git checkout -q main && git branch --list {branch}")]
    create = "" if branch in listing else "-b "
    (result,) = yield [bash(f"git checkout -q {create}{branch} && git rev-parse main")]
    start = last_line(result)
    paths = yield from put(files, contents)
    if ctx.scenario.conflicting(feature_id):
        paths += yield from add_readme_line(files, demo_app.readme_line(item))
    end = last_line((yield [commit(paths, f"feat({feature_id}): {item.description[:50]}", ctx)])[0])
    if ctx.scenario.has_fault(ctx.session, "commit_on_main"):  # the Bash policy refuses the commit
        yield [
            bash("git checkout -q main"),
            bash("echo '# stray' >> README.md"),
            bash("git add README.md && git commit -q -m 'stray commit on main'"),
            bash(f"git checkout -q {branch}"),
        ]
    if ctx.scenario.has_fault(
        ctx.session, "hidden_commit_on_main"
    ):  # out of the policy's sight: the sandbox stops it
        script = "git checkout -q main && echo '# stray' >> README.md && git add README.md && git commit -q -m 'stray commit on main'"
        yield [write("stray.sh", script + "\n"), bash("bash stray.sh; rm -f stray.sh")]
    if ctx.scenario.has_fault(ctx.session, "hidden_branch"):  # not its branch: verification undoes it
        yield [write("stray.sh", "git branch stray-work\n"), bash("bash stray.sh; rm -f stray.sh")]
    yield from faults(ctx, files)
    yield from end_session(ctx, "READY_FOR_REVIEW", [feature_id], start, end)
    return f"{feature_id} is ready for review on {branch}."


def check_steps(ctx: Ctx, files: Files, feature_id: str | None, tests_pass: bool) -> Steps:
    """Grade the feature's acceptance steps, in order, on the checked-out branch: a web feature's
    in the browser (browsing.check_in_browser); else each step's command run in one empty folder
    (the steps share its store) holding links to the app's code, its last line compared with what
    the step says it prints. Returns the `acceptance` results and any minor issues."""
    if not feature_id:
        return [], []
    (shown,) = yield [handoff("show_feature", feature_id=feature_id)]
    entry = parse_json(shown)
    steps = [str(s) for s in entry.get("steps") or []]
    if ctx.scenario.has_fault(ctx.session, "ignore_tests"):  # it claims what it did not check
        return [{"step": n, "passed": True, "evidence": "looked fine"} for n in range(1, len(steps) + 1)], []
    if str(entry.get("category") or "").strip().lower() == WEB_CATEGORY:
        results, errors = yield from browsing.check_in_browser(files.facts.get(BROWSER_FACT), steps)
        return results, [f"the browser's console shows {errors} error(s)"] if errors else []
    links = "; ".join(
        f"os.path.exists({name!r}) and os.symlink(os.path.abspath({name!r}), os.path.join(d, {name!r}))"
        for name in APP_CODE
    )
    (made,) = yield [bash(f'python3 -c "import os, tempfile; d = tempfile.mkdtemp(); {links}; print(d)"')]
    folder = shlex.quote(last_line(made))
    results = []
    for n, text in enumerate(steps, 1):
        found = _STEP.match(text)
        if found is None:  # no command to run: the test suite stands for it
            evidence = f"no command in the step; the test suite {'passes' if tests_pass else 'fails'}"
            results.append({"step": n, "passed": tests_pass, "evidence": evidence})
            continue
        (output,) = yield [bash(f"(cd {folder} && {found['command']}) 2>&1")]
        seen = last_line(output)
        results.append(
            {
                "step": n,
                "passed": seen == found["output"],
                "evidence": f"printed `{seen[-200:]}`"
                + ("" if seen == found["output"] else f", not `{found['output']}`"),
            }
        )
    return results, []


def review(ctx: Ctx) -> Script:
    files, _ = yield from orient()
    feature_id, branch = files.feature, files.branch
    _, tests = yield [bash(f"git checkout -q {branch}"), bash(RUN_TESTS)]
    acceptance, minor = yield from check_steps(ctx, files, feature_id, tests_passed(tests))
    failed = [r for r in acceptance if not r["passed"]]
    key = feature_id or branch
    verdict = ctx.scenario.verdict(key, int(files.facts.get("earlier_reviews") or 0))
    issues: dict[str, list[str]] = {"critical": [], "major": [], "minor": list(minor)}
    if not tests_passed(tests) and not ctx.scenario.has_fault(ctx.session, "ignore_tests"):
        verdict = "REJECT" if verdict == "REJECT" else "REQUEST_CHANGES"
        issues["critical"].append(f"the test suite fails: {tests.strip()[-200:]}")
    elif failed and verdict == "PASS":
        verdict = "REQUEST_CHANGES"
        issues["major"] += [f"acceptance step {r['step']} fails: {r['evidence']}" for r in failed]
    elif verdict == "REQUEST_CHANGES":
        issues["major"].append(f"{key}: add a test for the error path and document the module")
    elif verdict == "REJECT":
        issues["critical"].append(f"{key}: wrong approach; redo it from main")
    end = ""
    if verdict == "PASS":  # decide, merge, re-test on main, and only then write the one verdict
        (merged,) = yield [
            bash(
                f"git checkout -q main && git merge -q --no-ff {branch} "
                f"-m 'Merge {branch}' && git rev-parse HEAD"
            )
        ]
        end = last_line(merged)
        conflicted = _CONFLICT.findall(merged)
        if conflicted or "CONFLICT (" in merged:  # main moved under the branch: back to a FIX
            yield [bash("git merge --abort")]
            verdict, end = "REQUEST_CHANGES", ""
            issues["critical"].append(
                f"merging onto main {CONFLICTS} {', '.join(dict.fromkeys(conflicted)) or 'the branch'}; "
                "merge main into the branch and resolve"
            )
            retest = ""
        else:
            (retest,) = yield [bash(RUN_TESTS)]
        if retest and not tests_passed(retest) and not ctx.scenario.has_fault(ctx.session, "ignore_tests"):
            yield [bash("git reset --hard ORIG_HEAD")]
            verdict, end = "REQUEST_CHANGES", ""
            issues["critical"].append(
                f"the test suite fails on main after the merge: {retest.strip()[-200:]}"
            )
    else:
        yield [bash("git checkout -q main")]
    recorded = yield from record_review(ctx, verdict, issues, acceptance if feature_id else None)
    review_id = int(parse_json(recorded).get("review_id") or 0)
    if verdict == "PASS" and feature_id:
        yield [handoff("mark_passing")]
    yield from faults(ctx, files)
    yield from end_session(
        ctx, "REVIEWED", [feature_id] if feature_id else [], "", end, verdict=verdict, review_id=review_id
    )
    return f"{verdict}: review {review_id} of {key}."


CONFLICTS = "conflicts in"
"""What the scheduler's review says when the merge queue could not merge a branch onto main."""
MAIN_MOVED = (CONFLICTS, "fail on main with this branch merged", "fails on main after the merge")
"""What a review says when main moved under the branch (the merge queue's, or a REVIEW's own
merge): a conflict, or tests red only with the branch merged. The FIX merges main in first."""
UNMERGED = "git diff --name-only --diff-filter=U"


def merge_main(files: Files) -> Steps:
    """Merge main into the branch; resolve its conflicts: each file keeps both sides' lines (two
    features that added theirs at the same place, the changelog's lines of both)."""
    (merged,) = yield [bash("git merge main --no-edit -q")]
    if not merged.lstrip().startswith("Exit code"):
        return
    (unmerged,) = yield [bash(UNMERGED)]
    conflicted = [f.strip() for f in unmerged.splitlines() if f.strip() and not f.startswith("Exit code")]
    if not conflicted:  # failed for another reason: leave the branch as it was
        yield [bash("git merge --abort")]
        return
    texts = yield [read(files.path(f)) for f in conflicted]
    yield [
        write(files.path(f), demo_app.resolve_union(file_text(text)))
        for f, text in zip(conflicted, texts, strict=True)
    ]
    paths = " ".join(shlex.quote(f) for f in conflicted)
    yield [bash(f"git add {paths} && git commit -q --no-edit --no-verify")]


def fix(ctx: Ctx) -> Script:
    files, _ = yield from orient()
    feature_id, branch = files.feature, files.branch
    open_review = files.facts["open_review"]
    (result,) = yield [bash(f"git checkout -q {branch} && git rev-parse HEAD")]
    start = last_line(result)
    found = [i for level in ("critical", "major", "minor") for i in open_review["issues"][level]]
    if open_review.get("conflicts"):  # only a conflict with main: the brief asks only to merge it
        return (yield from merge_only(ctx, files, start, found))
    if any(marker in i for marker in MAIN_MOVED for i in found):
        yield from merge_main(files)  # the merge queue (or the REVIEW) sent it back: bring main in
    contents = dict(_item(ctx, feature_id).files) if feature_id else dict(demo_app.ARCH_FIX)
    if feature_id in ctx.scenario.app_broken:  # mend the web front it broke
        contents["todo/web.py"] = demo_web.WEB["todo/web.py"]
    if feature_id and ctx.scenario.red_part(feature_id) == "rewords":
        # its red partner's test pins the usage message: put the old words back (the partner's
        # own FIX, the other way round, writes its test without the pin)
        contents["todo/__main__.py"] = demo_app.SKELETON["todo/__main__.py"]
    paths = yield from put(files, contents)
    note = f"- session {ctx.session}: addressed review {open_review['review_id']}"
    (changelog,) = yield [read(files.path("CHANGELOG.md"))]
    lines = [line for line in file_text(changelog).splitlines() if line.strip()]
    if lines and not changelog.lstrip().startswith("<tool_use_error>") and "does not exist" not in changelog:
        yield [edit(files.path("CHANGELOG.md"), lines[-1], f"{lines[-1]}\n{note}")]
    else:
        yield [write(files.path("CHANGELOG.md"), f"# Changelog\n{note}\n")]
    end = last_line(
        (
            yield [
                commit(
                    f"{paths} CHANGELOG.md",
                    f"fix({feature_id or branch}): address review {open_review['review_id']}",
                )
            ]
        )[0]
    )
    issues = [i for level in ("critical", "major", "minor") for i in open_review["issues"][level]]
    yield [handoff("record_fix", issues_fixed=issues)]
    yield from faults(ctx, files)
    yield from end_session(ctx, "FIXED", [feature_id] if feature_id else [], start, end)
    return f"Fixed review {open_review['review_id']} on {branch}."


def merge_only(ctx: Ctx, files: Files, start: str, found: list[str]) -> Script:
    """A FIX whose review is only a merge conflict with `main` (run/brief.py's `_conflicts`): as
    its brief says, merge main, resolve, run the tests, commit the merge, record the fix;
    nothing else changes."""
    yield from merge_main(files)
    _, head = yield [bash(RUN_TESTS), bash("git rev-parse HEAD")]
    end = last_line(head)
    yield [handoff("record_fix", issues_fixed=found)]
    yield from faults(ctx, files)
    yield from end_session(ctx, "FIXED", [files.feature] if files.feature else [], start, end)
    return f"Merged main into {files.branch} for review {files.facts['open_review']['review_id']}."


def architecture(ctx: Ctx) -> Script:
    files, _ = yield from orient()
    _, _, tests = yield [bash("git log --oneline -20"), bash("git checkout -q main"), bash(RUN_TESTS)]
    verdict = ctx.scenario.architecture_verdict(int(files.facts.get("earlier_reviews") or 0))
    issues: dict[str, list[str]] = {"critical": [], "major": [], "minor": []}
    if verdict == "REQUEST_CHANGES" or not tests_passed(tests):
        verdict = "REQUEST_CHANGES"
        issues["major"].append("document how commands and the store fit together (docs/architecture.md)")
    (recorded,) = yield [handoff("record_review", verdict=verdict, issues=issues)]
    review_id = int(parse_json(recorded).get("review_id") or 0)
    yield from faults(ctx, files)
    yield from end_session(ctx, "ARCHITECTURE_REVIEWED", [], "", "", verdict=verdict)
    return f"Architecture review {review_id}: {verdict}."


SCRIPTS: dict[str, Callable[[Ctx], Script]] = {
    "INITIALIZER": initializer,
    "IMPLEMENT": implement,
    "REVIEW": review,
    "FIX": fix,
    "ARCHITECTURE": architecture,
}


def next_step(role: str, ctx: Ctx, results: list[str]) -> list[ToolCall] | str:
    """Replay the role's script over the flat list of earlier tool results.

    Returns the next batch of tool calls, or the final text that ends the session.
    """
    script = SCRIPTS[role](ctx)
    done = 0
    try:
        batch = next(script)
        while done + len(batch) <= len(results):
            answered = results[done : done + len(batch)]
            done += len(batch)
            batch = script.send(answered)
    except StopIteration as stop:
        return str(stop.value)
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        return f"I could not make sense of the project files ({type(exc).__name__}: {exc}); stopping."
    return batch
