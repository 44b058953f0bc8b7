"""Command line: run fresh Claude Code sessions, one role at a time, until the app is built;
`status` and `report` read a project, also while a run goes on.

Exit codes: 0 every feature passes or is blocked; 1 an error or a halted run (the message
says what to do); 2 a malformed command line; 3 a limit stopped the run (run the same
command again to resume); 130 interrupted (run it again to resume).

The session runner, the scheduler and the sandbox probe are imported only when a run starts,
so that `status` answers at once.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from scripted_model.scenario import DEMO, Scenario
from session_scheduler.core import risk, tasks
from session_scheduler.core.app import AppSpec
from session_scheduler.core.clock import Clock, SystemClock
from session_scheduler.core.config import (
    DEFAULT_ALLOWED_DOMAINS,
    DEFAULT_MODELS,
    LAND_ON,
    MAX_LANES,
    REVIEWED,
    ROLES,
    TERMINAL,
    AgentConfig,
    SessionType,
    trunk_of,
)
from session_scheduler.core.engine import WORKER_SESSIONS, parse_address, parse_engine, remote_protocol
from session_scheduler.core.errors import (
    EXIT_DONE,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_LIMIT,
    BadInput,
    ConfigError,
    NotLoggedIn,
    SchedulerError,
    UnknownModel,
)
from session_scheduler.core.gates import GateSet, of_options, weakened
from session_scheduler.core.layout import LOG_DIR, SETTINGS_FILE, SPEC_NAME, STATE_FILE
from session_scheduler.core.machine import Lane, SessionState, resume
from session_scheduler.core.schedule import lanes_refusal, resized
from session_scheduler.core.version import VERSION
from session_scheduler.guard import browser_box, safe_git
from session_scheduler.guard.sandbox import Host, Preflight, preflight
from session_scheduler.repo import adoption, forge, gitops, landing, workdirs
from session_scheduler.repo.forge import Forge
from session_scheduler.run import pulls, showing
from session_scheduler.run.opening import local_file_missing
from session_scheduler.run.plan import Planner, brief_for
from session_scheduler.run.planning import planning_for
from session_scheduler.run.prompts import EXAMPLE_SPEC, initializer_form, template_path
from session_scheduler.store import crashpoints, events, progress, specs, statefile
from session_scheduler.store.authority import Authority, FileAuthority
from session_scheduler.store.records import Records
from session_scheduler.view import proofs, status
from session_scheduler.view.live import LiveConsole, Verbosity

if TYPE_CHECKING:
    from session_scheduler.run.agent import SessionRequest, SessionResult, SessionRunner
    from session_scheduler.run.runners import RunnerFactory

HERE = Path(__file__).resolve().parents[2]
OFFLINE_DEFAULTS: dict[str, Any] = {"test_command": "bash init.sh"}
"""The demo's options for a new project (its feature count is its scenario's)."""


DEFAULT_GENERATIONS = HERE / "generations"


def generations_dir() -> Path:
    """Home of projects given by a relative path (override: AGENT_GENERATIONS_DIR)."""
    return Path(os.environ.get("AGENT_GENERATIONS_DIR") or DEFAULT_GENERATIONS)


def resolve_project(project_dir: str) -> Path:
    path = Path(project_dir).expanduser()
    project = path if path.is_absolute() else generations_dir() / path
    resolved = project.resolve()
    if resolved == generations_dir().resolve() or HERE.resolve().is_relative_to(resolved):
        where = (
            "the folder that holds all projects"
            if resolved == generations_dir().resolve()
            else "the scheduler's own folder or one above it"
        )
        raise BadInput(
            f"--project-dir {project_dir} is {where} ({resolved}); give the project a folder of its own, "
            "for example --project-dir my_app"
        )
    return project


def read_spec(spec: Path) -> bytes:
    """The spec's bytes; a spec that cannot be used is bad input (exit 2), said in one line."""
    if spec.is_dir():
        raise BadInput(f"--spec {spec} is a folder; pass the text file that describes the application")
    try:
        data = spec.read_bytes()
    except OSError as exc:
        raise BadInput(
            f"cannot read spec {spec}: {exc.strerror}; pass a readable text file to --spec"
        ) from None
    if not data.strip():
        raise BadInput(f"spec {spec} is empty; write the application's description in it")
    if not looks_like_text(data):
        raise BadInput(
            f"spec {spec} is not text (it holds binary data); pass a text file that describes the application"
        )
    return tasks.checked_spec(data, str(spec))  # a task list or an issues export must read


def looks_like_text(data: bytes) -> bool:
    """Text in any 8-bit encoding: no NUL byte, and hardly any control characters but white space."""
    controls = sum(1 for byte in data if byte < 32 and byte not in b"\t\n\r\f\v")
    return b"\x00" not in data and controls <= len(data) // 100


def spec_change(project: Path, spec: Path | None) -> bytes | None:
    """The new text of a project's spec when `spec` differs from the one it holds (None: a new
    project, no --spec, or the same spec). A changed spec adds to the project: refused in one
    line when it only takes text away (a built feature is never removed)."""
    target = project / SPEC_NAME
    if spec is None or not target.exists():
        return None
    data = read_spec(spec)
    old = target.read_bytes()
    if hashlib.sha256(data).hexdigest() == hashlib.sha256(old).hexdigest():
        return None
    if not specs.added_lines(old.decode("utf-8", "replace"), data.decode("utf-8", "replace")):
        raise BadInput(
            f"{spec} only takes text away from the spec this project was built from ({target}); features "
            "are never removed from a project: give a spec that adds what you want built (a changed "
            "requirement is a changed line), or start a new project with --project-dir"
        )
    return data


def place_spec(project: Path, spec: Path | None, echo: Callable[[str], None], now: float) -> None:
    """Copy the spec in on the first run; on resume keep the same spec, or take a changed one as
    the spec's next version (the run plans its new features first: store/specs.py)."""
    target = project / SPEC_NAME
    changed = spec_change(project, spec)
    if changed is not None:
        specs.note(project, now, listed=(project / "feature_list.json").exists())  # the one it replaces
        progress.atomic_write_bytes(target, changed)  # the run says so when it plans it
        return
    if target.exists():
        return
    if spec is None:
        echo(f"No --spec given: using the example spec {EXAMPLE_SPEC}")
        spec = EXAMPLE_SPEC
    data = read_spec(spec)
    progress.atomic_write_bytes(target, data)


def make_project_dir(project: Path) -> None:
    if project.exists() and not project.is_dir():
        raise ConfigError(
            f"--project-dir {project} is a file, not a folder; choose a folder (it is made if missing)"
        )
    try:
        project.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create project dir {project}: {exc.strerror}; choose another --project-dir"
        ) from None
    if not os.access(project, os.W_OK):
        raise ConfigError(f"project dir {project} is not writable; fix its permissions or choose another")


def _runners(scenario: Scenario | None) -> RunnerFactory:
    from session_scheduler.run.runners import runner_factory

    return runner_factory(scenario)


def _credentials_missing() -> str | None:
    from session_scheduler.run.runners import credentials_missing

    return credentials_missing()


@dataclass(frozen=True)
class Seams:
    """What the command line runs that tests replace: the session runner, the sandbox preflight,
    the credentials check, the clock the scheduler waits on and the project's authority."""

    runners: Callable[[Scenario | None], RunnerFactory] = _runners
    """The run's runner factory, the offline demo's scenario bound in (None: the real endpoint)."""
    preflight: Callable[[], Preflight] = preflight
    clock: Clock = field(default_factory=SystemClock)
    credentials: Callable[[], str | None] = _credentials_missing
    """What to do when Claude Code has no credentials (None: it has, or cannot say)."""
    authority: Callable[[Path], Authority] = FileAuthority
    """The right to run on a project (held for the whole run): the project's lock file."""
    memory: Callable[[], int | None] = lambda: available_memory()
    """The machine's free memory in bytes (None: cannot say): what `--lanes` may use."""


def available_memory(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """The kernel's estimate of the memory available to new work (MemAvailable), in bytes."""
    try:
        for line in meminfo.read_text(encoding="ascii").splitlines():
            name, _, value = line.partition(":")
            if name == "MemAvailable":
                return int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def read_gates(choice: str) -> tuple[dict[str, Any] | None, bool]:
    """`--gates`: (the declared gates' saved form, whether to detect them)."""
    if choice == "detect":
        return None, True
    if choice == "none":
        return None, False
    return GateSet.from_json(read_json_option("--gates", choice)).to_json(), False


def read_risk(choice: str) -> dict[str, Any] | None:
    """`--risk`: the rules' saved form (None: the defaults)."""
    if choice == "default":
        return None
    if choice == "none":
        return {"rules": []}
    return risk.rules_to_json(risk.rules_from_json(read_json_option("--risk", choice, "docs/risk.md")))


def read_json_option(option: str, given: str, doc: str = "docs/gates.md") -> Any:
    """The JSON file an option names, read; a one-line error that says what to give instead
    (`doc`: where its format is described)."""
    try:
        return json.loads(Path(given).expanduser().read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInput(f"{option} {given}: no such file; give a JSON file ({doc}) or `none`") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"{option} {given}: not readable JSON ({exc}); see {doc} for the format") from None


def weaker_gates(saved: dict[str, Any] | None, config: AgentConfig) -> list[str]:
    """The ways the person's saved gates get weaker with this command line's options."""
    before = (saved or {}).get("gates")
    try:
        old = GateSet.from_json(before) if before else None
    except SchedulerError:
        return []
    lines = weakened(old, config.gates)
    if old is not None and config.gates is None:
        lines = [f"the declared gates ({', '.join(g.name for g in old.gates)}) are dropped"]
    return lines


def gates_line(config: AgentConfig) -> str:
    """What the project's gates are, in a line (the dry run's)."""
    declared = of_options(config.test_command, config.gates)
    app = (
        f"; the app: `{config.app.start}` (--app)"
        if config.app
        else "; the app: the project's app.json, if any"
    )
    if declared is not None:
        named = ", ".join(f"{g.name} (`{g.command}`)" for g in declared.gates)
        where = (
            "on main after each merge" if declared.source == "test_command" else "on each branch and on main"
        )
        return f"{named}; run {where}{app}"
    if config.detect_gates:
        return "detected by a language plugin from the project's files (--gates detect)" + app
    return "none (declare them with --gates FILE, or --gates detect)" + app


def merge_config(saved: dict[str, Any] | None, given: dict[str, Any]) -> AgentConfig:
    """Saved options, overridden by those given on this command line."""
    data: dict[str, Any] = dict(saved or {})
    extra = given.pop("extra_domains", ())
    if extra:
        known = list(data.get("allowed_domains", DEFAULT_ALLOWED_DOMAINS))
        data["allowed_domains"] = known + [d for d in extra if d not in known]
    named = given.pop("local_files_given", ())
    if named:
        known = [] if "none" in named else list(data.get("local_files", ()))
        data["local_files"] = known + [n for n in named if n != "none" and n not in known]
    choice = given.pop("gates_choice", None)
    if choice is not None:
        data["gates"], data["detect_gates"] = read_gates(choice)
    risk_choice = given.pop("risk_choice", None)
    if risk_choice is not None:
        data["risk"] = read_risk(risk_choice)
    app = given.pop("app_choice", None)
    if app is not None:
        data["app"] = (
            None
            if app == "none"
            else AppSpec.from_json(read_json_option("--app", app), f"--app {app}").to_json()
        )
    models = {**DEFAULT_MODELS, **data.get("models", {})}
    for role in ROLES:
        value = given.pop(f"{role.value.lower()}_model", None)
        if value:
            models[role.value] = value
    data.update({k: v for k, v in given.items() if v is not None})
    data["models"] = models
    try:
        return AgentConfig.from_json(data)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid options: {exc}") from None


def dry_run(
    console: Console,
    project: Path,
    config: AgentConfig,
    show: SessionType | None = None,
    new_spec: bool = False,
) -> None:
    """Show what the next session would be (with `show`, a session of that role: what its agent
    would receive); start nothing, change nothing in the project. `new_spec`: a newer spec is
    given, which the run would plan first (as one waiting in the spec's history would be)."""
    console.print(f"Project folder: {project}", markup=False)
    saved = statefile.load(project) if project.exists() else None
    state = resume(saved.state) if saved else SessionState()
    if (
        state.backlog.features
        and state.lane.role is not SessionType.INITIALIZER
        and (new_spec or specs.pending(project))
    ):
        console.print(
            "A newer spec waits to be planned: the run plans its features first (the INITIALIZER, extended)."
        )
        state = replace(state, lane=Lane(SessionType.INITIALIZER))
    features = progress.load_handoff(Records(project)).features() if project.exists() else []
    next_role = state.lane.role
    if show is not None:
        state = showing.state_to_show(show, state, features)
    role = state.lane.role
    totals = events.Totals.of(events.read(events.log_path(project)))
    flight = totals.flight
    if status.is_running(totals):
        now = (
            f"session {flight['session']} ({flight['role']}) is running now"
            if flight
            else "it is between sessions"
        )
        console.print(
            f"A run is in progress (pid {totals.run_started['pid']}; {now}); `status` shows how it goes.",  # type: ignore[index]
            markup=False,
        )
        console.print("The session below is what it would run next if it stopped now.")
    rerun = saved.flight() if saved else None
    note = f" (a rerun of session {rerun.number}, which was cut short)" if rerun else ""
    if role is SessionType.DONE:
        console.print(
            "Nothing to run: every feature passes or is blocked (`status` or `report` shows the project)."
        )
        return
    shown = "Next session" if role is next_role else "A session of the role asked (not the next one)"
    console.print(f"{shown}: {role.value}{note}")
    web = showing.is_web_review(state, features)
    adopted = adoption.preview(project)
    planner = Planner(config, Host.of(os.environ), adopted)  # as a run would plan it
    main = gitops.head(safe_git.open(project), trunk_of(config)) if (project / ".git").is_dir() else None
    told = (
        planning_for(state, project, Records(project), adopted, main, keep=False)
        if project.exists()
        else None
    )
    plan = planner.plan(
        state,
        workdirs.path_of(project, 0),  # where a run's session works: a lane's clone
        brief=brief_for(state, config, project, browser_box.APP_ORIGIN if web else None, told)
        if told is not None
        else "",
        spent_usd=totals.cost_usd,
        outage_s=0.0,  # a run that starts now starts with no outage
    )
    console.print(f"Model: {plan.model}")
    work = plan.work
    console.print(
        f"Feature: {(work.feature_id if work else None) or '-'}  Branch: {work.branch if work else '-'}"
    )
    console.print(f"Gates: {gates_line(config)}", markup=False)
    if config.lanes > 1:
        console.print(f"Lanes: {config.lanes} (this is what the next free lane would run)", markup=False)
    console.print(
        f"Prompt template: {template_path(role, form=initializer_form(state, adopted.files > 0))}",
        markup=False,
    )
    console.print("")
    console.print(showing.view(plan, browser=web), markup=False, highlight=False)
    console.print(f"--- settings ({SETTINGS_FILE}) ---", markup=False)
    console.print(json.dumps(plan.settings, indent=2), markup=False, highlight=False)
    console.print("---", markup=False)
    console.print("Dry run: nothing was launched, nothing was written.")


class FiniteFloat(click.FloatRange):
    """A number option that refuses `nan` and `inf` as a usage error naming the option."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def _checked(option: str, check: Callable[[str], object]) -> Callable[[Any, Any, str | None], str | None]:
    """The click callback of `option`: its value when `check` takes it (or none is given), else a
    usage error saying what to give instead (`check`'s ValueError)."""

    def callback(ctx: Any, param: Any, value: str | None) -> str | None:
        if value is not None:
            try:
                check(value)
            except ValueError as exc:
                raise click.BadParameter(str(exc).removeprefix(f"{option} {value}: ")) from None
        return value

    return callback


class OneLineErrors(click.Group):
    """The command line's group, whose usage errors (an option's value out of range, a missing
    option, an unknown one) are one line on stderr, `error: ...` with exit 2, as every other bad
    input is, instead of click's usage block."""

    def main(
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "autonomous_agent_demo.py"
            click.echo(f"error: {exc.format_message()} (`{where} --help` lists the options)", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


@click.group(
    cls=OneLineErrors,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(VERSION, prog_name="autonomous_agent_demo")
@click.option(
    "--project-dir",
    help=f"The generated project's folder (required but with --check). A relative path lands in {DEFAULT_GENERATIONS} (or in $AGENT_GENERATIONS_DIR); give an absolute path to put it elsewhere, for example an existing repository.",
)
@click.option(
    "--spec",
    type=click.Path(path_type=Path),
    help="Application spec (text, a Markdown task list or a gh issues export), copied in as app_spec.txt "
    "on the first run (default: the shipped example, for a new project only). Given again with more in it, "
    "it is the spec's next version: its new features are planned first, then built.",
)
@click.option(
    "--max-iterations",
    type=click.IntRange(min=1),
    help="Sessions to run in this invocation (default: until done).",
)
@click.option(
    "--architecture-interval",
    type=click.IntRange(min=1),
    help="An architecture review each time this many more features pass (default 5).",
)
@click.option(
    "--feature-count",
    type=click.IntRange(min=1),
    help="How many features the initializer should aim for (default 8).",
)
@click.option("--initializer-model", help="Model for INITIALIZER sessions (default sonnet).")
@click.option("--implement-model", help="Model for IMPLEMENT sessions (default sonnet).")
@click.option("--review-model", help="Model for REVIEW sessions (default opus).")
@click.option("--fix-model", help="Model for FIX sessions (default sonnet).")
@click.option("--architecture-model", help="Model for ARCHITECTURE sessions (default opus).")
@click.option(
    "--max-fix-rounds",
    type=click.IntRange(min=0),
    help="FIX sessions per review cycle before REQUEST_CHANGES counts as a rejection (default 3).",
)
@click.option(
    "--max-rejections",
    type=click.IntRange(min=1),
    help="A feature is blocked by its Nth rejection (default 2).",
)
@click.option(
    "--max-attempts",
    type=click.IntRange(min=1),
    help="Tries of a session whose result fails verification (default 3).",
)
@click.option(
    "--max-turns", type=click.IntRange(min=1), help="Turn limit of each Claude Code session (default 200)."
)
@click.option(
    "--session-timeout",
    "session_timeout_s",
    type=click.IntRange(min=1),
    help="Seconds one session may run before it is stopped and verified as it stands (default 3600).",
)
@click.option(
    "--idle-timeout",
    "idle_timeout_s",
    type=click.IntRange(min=1),
    help="Seconds a session may send nothing before it is stopped and verified as it stands (default 600).",
)
@click.option(
    "--max-budget-usd",
    type=FiniteFloat(min=0, min_open=True),
    help="Stop when the project has spent this much (USD, as Claude Code reports it); each session gets what is left.",
)
@click.option(
    "--max-session-budget-usd",
    type=FiniteFloat(min=0, min_open=True),
    help="At most this much (USD) per session, handed to Claude Code; with --max-budget-usd, no session starts that the rest of the project budget could not cover.",
)
@click.option(
    "--lanes",
    type=click.IntRange(1, MAX_LANES),
    help="Work on this many features at once, each in its own clone of the project beside it (<project>.lanes/); approved work lands on main through a merge queue that tests it first (saved; default 1).",
)
@click.option(
    "--notify",
    metavar="COMMAND",
    help="A shell command run on the events a person cares about (done, halted, feature blocked, budget reached, usage-limit wait, resumed), with the event as JSON on its standard input; it never stops or delays the run (saved).",
)
@click.option(
    "--quiet",
    "-q",
    is_flag=True,
    help="Leave out tool calls and API retries; sessions, results and warnings only.",
)
@click.option("--verbose", "-v", is_flag=True, help="Print tool calls whole instead of cut to one line.")
@click.option(
    "--max-outage-minutes",
    type=FiniteFloat(min=0),
    help="Minutes in all one run backs off from API outages (429/529/5xx, lost connections) before it stops with exit 3 (default 120).",
)
@click.option(
    "--no-wait",
    is_flag=True,
    help="Stop with exit 3 at a usage limit instead of waiting for its reset (given per invocation, never saved).",
)
@click.option(
    "--test-command",
    help="The project's test command, run on main after every merge; a failing merge is undone.",
)
@click.option(
    "--gates",
    "gates_choice",
    metavar="FILE|detect|none",
    help="The project's quality gates (saved): a JSON file declaring them (docs/gates.md), `detect` to let "
    "a language plugin name them from the project's files, `none` for the test command alone. They run on "
    "each branch before its REVIEW and on main after each merge; a red gate sends the work back to FIX.",
)
@click.option(
    "--app",
    "app_choice",
    metavar="FILE|none",
    help="How to start the project's web app (saved): a JSON file like the app.json the INITIALIZER proposes "
    "(docs/gates.md, 'The app gate'), used instead of it; `none` goes back to the project's app.json. The app "
    "starting and answering is a gate.",
)
@click.option(
    "--no-sandbox",
    is_flag=True,
    help="Run Bash without Claude Code's OS sandbox (not recommended: commands can then write anywhere this user can). Given per invocation, never saved.",
)
@click.option(
    "--allow-domain",
    "allow_domains",
    multiple=True,
    help="A network domain sandboxed commands may reach, besides the package registries (repeatable; saved).",
)
@click.option(
    "--local-file",
    "local_files_given",
    multiple=True,
    metavar="PATH",
    help="An untracked file of the project its app needs to run (a local config such as .env), given as a path "
    "in the project folder: copied into each lane's clone before every session and kept out of its commits "
    "(repeatable; saved; `--local-file none` forgets them). Nothing untracked reaches the lanes otherwise.",
)
@click.option(
    "--risk",
    "risk_choice",
    metavar="FILE|default|none",
    help="Rules that make approved work wait for you whatever --land-on says (saved): a JSON file (docs/risk.md), "
    "`default` (dependency manifests, CI, migrations, auth and secrets, CLAUDE.md, large deletions and files), "
    "or `none`. `approve FEATURE` lands what a rule held.",
)
@click.option(
    "--land-on",
    type=click.Choice(list(LAND_ON)),
    help="Where verified work lands (saved): `main`; `review`: a branch agents/<date> made from your branch, "
    "which moves only when you `approve`; `pr`: that branch, and a draft pull request per feature on your "
    "forge (--forge, --remote). Default: review for an existing repository with commits, main for a new project.",
)
@click.option(
    "--forge",
    metavar="github:OWNER/REPO",
    help="With --land-on pr: where pull requests are opened (saved; default: read from the remote's URL). The "
    "token comes from GITHUB_TOKEN or GH_TOKEN; GITHUB_API_URL names another API (GitHub Enterprise).",
)
@click.option(
    "--remote",
    metavar="NAME",
    help="With --land-on pr: your remote each feature's branch is pushed to (saved; default origin).",
)
@click.option(
    "--allow-repo-code/--no-allow-repo-code",
    default=None,
    help="Let commits add what makes git run code: nested repositories (gitlinks) and filter, diff or merge drivers named in .gitattributes; refused by default (saved).",
)
@click.option(
    "--engine",
    metavar="temporal://HOST:PORT|temporal://local|inprocess",
    callback=_checked("--engine", parse_engine),
    help="Where sessions run (saved): on the workers of a Temporal server (`worker` starts one), or on a dev "
    "server started for the run (temporal://local); `inprocess` (the default) runs them in this process. "
    "Needs the extra: pip install '.[temporal]'.",
)
@click.option(
    "--git-remote",
    metavar="URL",
    callback=_checked("--git-remote", remote_protocol),
    help="With --engine: the git repository sessions go through to the workers and back, one every "
    "worker can push to (saved; ssh://, https://, git://, file:// or a path). Default (`none`): a "
    "bare repository in the project's log folder, for workers that reach this file system.",
)
@click.option(
    "--git-serve",
    metavar="HOST:PORT",
    callback=_checked("--git-serve", lambda text: parse_address(text, "--git-serve")),
    help="With --engine: serve the run's own exchange with `git daemon` at this address, for workers "
    "on other machines (git://HOST:PORT/exchange.git; saved). Anyone who reaches it can make a "
    "session fail, never change what counts: keep it to the workers' network. `none` stops serving it.",
)
@click.option(
    "--check",
    is_flag=True,
    help="Say whether the OS sandbox really works here (a probe must fail to write outside) and whether REVIEW's browser can start, then exit.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the next session's type, model, feature, prompt and settings; launch nothing.",
)
@click.option(
    "--show",
    type=click.Choice([role.value for role in ROLES], case_sensitive=False),
    help="With --dry-run (implied): print what a session of this role would receive (the text appended "
    "to Claude Code's system prompt, its first message, its tools), on the project's next work.",
)
@click.option(
    "--offline-demo/--no-offline-demo",
    default=None,
    help="Run against the built-in scripted model on 127.0.0.1: no API key, no network (saved: rerunning the project resumes the demo; --no-offline-demo goes on against your real endpoint).",
)
@click.option(
    "--scenario",
    type=click.Path(path_type=Path),
    help="Scenario file for --offline-demo (verdicts and faults; given per invocation).",
)
@click.pass_context
def main(
    ctx: click.Context,
    /,
    project_dir: str | None,
    spec: Path | None,
    max_iterations: int | None,
    dry_run: bool,
    show: str | None,
    offline_demo: bool | None,
    scenario: Path | None,
    check: bool,
    no_sandbox: bool,
    no_wait: bool,
    allow_domains: tuple[str, ...],
    quiet: bool,
    verbose: bool,
    **options: Any,
) -> None:
    """Build an application from a spec with fresh Claude Code sessions, one role at a time.

    Sessions run as INITIALIZER, IMPLEMENT, REVIEW, FIX and ARCHITECTURE; every claim an
    agent makes is checked against git and the hand-off files before it counts.
    Interrupt at any time and run the same command again to resume. While it runs,
    `status --project-dir X` says how it goes and `report --project-dir X` draws it.
    """
    if ctx.invoked_subcommand is not None:
        return
    if quiet and verbose:
        raise click.UsageError("--quiet and --verbose exclude each other; give one.")
    verbosity: Verbosity = "quiet" if quiet else "verbose" if verbose else "normal"
    console = Console(highlight=False, soft_wrap=True)
    signal.signal(signal.SIGTERM, _terminated)  # `kill` ends the session's CLI too, then resumes cleanly
    seams = Seams(**(ctx.obj or {}))  # tests inject a scripted runner and a preflight here
    if check:
        result = seams.preflight()
        (console.print if result.active else _error)(result.message)
        ready, said = browser_box.readiness()
        console.print(said if ready else f"warning: {said}")
        sys.exit(EXIT_DONE if result.active else EXIT_ERROR)
    if not project_dir:
        raise click.UsageError("Missing option '--project-dir'.")
    safe_git.forget_location()  # a GIT_DIR of the person's shell reaches neither our git nor the sessions
    options.update(sandbox=not no_sandbox, wait_for_limits=not no_wait, extra_domains=allow_domains)
    try:
        code = run_cli(
            console,
            project_dir,
            spec,
            max_iterations,
            dry_run or show is not None,
            offline_demo,
            scenario,
            options,
            seams,
            verbosity,
            show=SessionType(show.upper()) if show else None,
        )
    except SchedulerError as exc:
        _error(f"error: {exc}")
        _exit(exc.exit_code)
    except KeyboardInterrupt:
        _error("interrupted: run the same command again to resume")
        _exit(EXIT_INTERRUPTED)
    _exit(code)


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _on_engine(config: AgentConfig, project: Path, runners: RunnerFactory, host: Host) -> RunnerFactory:
    """The run's runner factory: in this process, or on the engine the project names (`host`: this
    machine, for the worker `temporal://local` starts here)."""
    engine = parse_engine(config.engine)
    if engine is None:
        return runners
    _using_temporal()
    from session_scheduler.engine.temporal import engine_runners

    return engine_runners(engine, project, runners, host, config.git_remote, config.git_serve)


TEMPORAL_USED = "session_scheduler.temporal"
"""The click context's mark (`ctx.meta`) of an invocation that uses the Temporal client."""


def _using_temporal() -> None:
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.meta[TEMPORAL_USED] = True


def _exit(code: int) -> None:
    """Exit with `code`; an invocation that used the Temporal client exits at once, its output
    flushed first (its SDK can crash a normal interpreter exit: an open bug). Only such an
    invocation, and only from the command line: one given seams (`ctx.obj`) is driven in-process
    by a test or a benchmark, whose process `os._exit` would end."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.meta.get(TEMPORAL_USED) and not ctx.find_root().obj:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def run_cli(
    console: Console,
    project_dir: str,
    spec: Path | None,
    max_iterations: int | None,
    dry: bool,
    offline_demo: bool | None,
    scenario: Path | None,
    options: dict[str, Any],
    seams: Seams | None = None,
    verbosity: Verbosity = "normal",
    *,
    show: SessionType | None = None,
) -> int:
    seams = seams or Seams()
    project = resolve_project(project_dir)
    if spec is not None:
        read_spec(spec)
    saved = progress.load_config(project) if project.exists() else None
    saved_demo = bool(saved and saved.get("offline_demo"))
    if offline_demo is None:  # saved with the project: a plain rerun of the demo goes on with it
        offline_demo = saved_demo
        if offline_demo and not dry:
            console.print(
                "Offline demo (saved with this project; --no-offline-demo goes on against your real endpoint)",
                markup=False,
            )
    if scenario is not None and not offline_demo:
        raise BadInput("--scenario only applies to --offline-demo; add --offline-demo or drop --scenario")
    if offline_demo and spec is not None:
        console.print(
            "Note: --offline-demo builds its own small todo app; your spec is copied in as app_spec.txt, "
            "but the scripted agent does not read it (run without --offline-demo to build it for real)",
            markup=False,
        )
    scenario_data = load_scenario(scenario) if offline_demo else None
    if offline_demo and saved is None:  # the demo's defaults, for a new project only
        demo = {**OFFLINE_DEFAULTS, "feature_count": scenario_data.features if scenario_data else 6}
        options = {**demo, **{k: v for k, v in options.items() if v is not None}}
    config = merge_config(saved, {**options, "offline_demo": offline_demo})
    config = landing.settle(project, saved, config, options.get("land_on"), seams.clock.now())
    for line in weaker_gates(saved, config):  # never weaker without a line saying so
        console.print(f"Gates weaker: {line}", markup=False)
    existing = (
        spec is None
        and not offline_demo
        and not (project / SPEC_NAME).exists()
        and (project / ".git").exists()
    )
    if existing and adoption.found(project).files:  # the example spec is a todo app, not what to build there
        raise BadInput(
            f"{project} is a repository with code of its own and no app_spec.txt: give --spec FILE "
            "saying what to build on it (text, a Markdown task list or a gh issues export)"
        )
    if dry:
        if project.exists():  # a spec that cannot be added is refused as the run would refuse it
            spec_change(project, spec)
        dry_run(console, project, config, show, project.exists() and spec_change(project, spec) is not None)
        return EXIT_DONE
    starts = session_would_start(project, config, spec_change(project, spec) is not None)
    if starts:  # a person's half-done merge: refused before anything is written into the project
        adoption.refuse_unfinished(project)
        too_many = lanes_refusal(config.lanes, seams.memory())
        if too_many:
            raise BadInput(too_many)
        refuse_lane_change(project, config.lanes)  # before the options are saved
    if starts and config.engine is not None:  # an optional extra: said before anything is created
        from session_scheduler.engine import require_temporal

        require_temporal(f"--engine {config.engine}")
        engine = parse_engine(config.engine)
        if engine is not None and not engine.local:  # its TLS files named but unreadable, say
            from session_scheduler.engine.connection import connect_options

            connect_options(os.environ)
        if config.git_remote is not None:  # a remote that is not there: said before it is saved
            from session_scheduler.engine.exchange import check

            check(config.git_remote)
    if config.engine is None and (config.git_remote or config.git_serve):
        console.print(
            "Note: --git-remote and --git-serve apply to sessions on an engine (--engine); "
            "saved for when you give one",
            markup=False,
        )
    for name in config.local_files:  # before anything is created or saved: a file the project lacks
        missing_file = local_file_missing(project, name)
        if missing_file:
            raise ConfigError(missing_file)
    if (
        starts and not offline_demo
    ):  # before anything is created: a newcomer without credentials gets no folder
        missing = seams.credentials()
        if missing:
            raise NotLoggedIn(missing)
    make_project_dir(project)
    host = Host.of(os.environ)  # this machine, read once: every session's sandbox is built on it
    view = LiveConsole(console, verbosity=verbosity, clock=seams.clock.now)
    echo = view.echo
    probe = _SandboxCheck(config, seams, echo)
    try:
        with seams.authority(project).hold():  # the one owner of the lock: nothing is written before it
            if _reconciled(project, config, seams, echo):  # what the person did on the forge may give work
                starts = session_would_start(project, config, spec_change(project, spec) is not None)
            if starts:  # a project with nothing left to run is not probed (the probe runs the real CLI)
                probe.once()
            place_spec(project, spec, echo, seams.clock.now())
            crashpoints.reached("spec_placed")
            progress.save_config(project, config.to_json())
            report = _run(
                project,
                config,
                saved,
                seams,
                view,
                probe.guard(_on_engine(config, project, seams.runners(scenario_data), host)),
                scenario_data is not None,
                max_iterations,
                host,
            )
    finally:
        view.close()
    from session_scheduler.run.report import print_summary

    print_summary(console, report)
    if report.status == "done":
        return EXIT_DONE
    if report.status == "limit":
        _error(report.message, style="bold yellow")
        return EXIT_LIMIT
    _error(f"error: run halted: {report.message}. Fix the cause and run the same command again")
    return EXIT_ERROR


def _run(
    project: Path,
    config: AgentConfig,
    saved: dict[str, Any] | None,
    seams: Seams,
    view: LiveConsole,
    runners: RunnerFactory,
    offline: bool,
    max_iterations: int | None,
    host: Host,
) -> Any:
    """One run of the scheduler with its event log, console and notifier wired up (`host`: this
    machine, what every session's sandbox hides)."""
    from session_scheduler.view.notify import Notifier

    log = events.EventLog(project, events.new_run_id(seams.clock), clock=seams.clock.now)
    log.subscribe(view.on_event)
    if config.notify:
        log.subscribe(Notifier(config.notify, project, view.echo))
    with runners(view.echo, project / LOG_DIR) as runner:
        view.echo(f"Project: {project}")
        from session_scheduler.run.lanes import Lanes

        view.echo(
            f"Lanes: {config.lanes}, each working in its own clone in {project.name}.lanes/ beside the project"
            if config.lanes > 1
            else f"Sessions work in a clone, {project.name}.lanes/lane-0 beside the project; work lands here once approved"
        )
        if config.land_on in REVIEWED:
            view.echo(
                f"Work lands on {config.review_branch}; your branch moves only when you `approve`"
                + (" or merge its pull request" if config.land_on == "pr" else "")
                + " (--land-on main: lands on main)"
            )
        place = _forge(project, config, lambda line: None)  # said once, by `_reconciled`
        lanes = Lanes(
            project,
            config,
            runner,
            config.lanes,
            echo=view.echo,
            clock=seams.clock,
            events=log,
            cost_basis=cost_basis(offline),
            host=host,
        )
        try:
            report = lanes.run(max_iterations).run
        except UnknownModel:  # a model name the endpoint rejects is not kept
            known = merge_config(saved, {}).models if saved is not None else dict(DEFAULT_MODELS)
            progress.save_config(project, {**config.to_json(), "models": known})
            raise
        written = proofs.write_missing(project, safe_git.open(project), trunk_of(config), seams.clock.now())
        if written:
            view.echo(f"Proofs written for {', '.join(written)}: {LOG_DIR}/{proofs.PROOFS_DIR}/")
        if place is not None:
            repo = safe_git.open(project)
            _on_forge(
                lambda: pulls.publish(
                    project, config, repo, place, lambda f: proofs.body(project, repo, f, config), view.echo
                ),
                view.echo,
            )
        return report


def _forge(project: Path, config: AgentConfig, echo: Callable[[str], None]) -> Forge | None:
    """The forge pull requests go to (`--land-on pr`): the one `--forge` names, else the one the
    remote's URL names; None (said) when there is none to use."""
    if config.land_on != "pr":
        return None
    spec = config.forge
    if spec is None:
        url = subprocess.run(
            ["git", "remote", "get-url", config.remote],
            cwd=project,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        spec = forge.from_remote_url(url)
    if spec is None:
        echo(
            f"WARNING: --land-on pr: no forge to open pull requests on (the remote {config.remote} names none); "
            "give --forge github:OWNER/REPO. Work lands on the review branch meanwhile"
        )
        return None
    return forge.forge_of(spec)


def _reconciled(project: Path, config: AgentConfig, seams: Seams, echo: Callable[[str], None]) -> bool:
    """`--land-on pr`, before the run: what the person did on the forge since the last one,
    brought back (under the project's lock); whether anything changed."""
    if config.land_on != "pr" or not (project / ".git").is_dir() or not (project / pulls.PULLS).is_file():
        return False
    place = _forge(project, config, echo)
    if place is None:
        return False
    before = (project / pulls.PULLS).read_bytes()
    log = events.EventLog(project, events.new_run_id(seams.clock), clock=seams.clock.now)
    _on_forge(lambda: pulls.reconcile(project, config, safe_git.open(project), place, log, echo), echo)
    return (project / pulls.PULLS).read_bytes() != before


def _on_forge(action: Callable[[], object], echo: Callable[[str], None]) -> None:
    """A call to the forge that cannot stop the night: what it refused is said, and tried again next run."""
    try:
        action()
    except forge.ForgeError as exc:
        echo(f"WARNING: pull requests: {exc}; the next run tries again")


def refuse_lane_change(project: Path, lanes: int) -> None:
    """A lane count the project's schedule cannot change to now (`schedule.resized` says why)."""
    saved = statefile.load(project) if (project / STATE_FILE).exists() else None
    if saved is None or len(saved.schedule.lanes) == lanes:
        return
    try:
        resized(saved.schedule, lanes)
    except ValueError as exc:
        raise BadInput(f"--lanes {lanes}: {exc}") from None


def cost_basis(offline: bool) -> str:
    """What the CLI's cost figures are: money billed per token with an API key, an estimate
    under a subscription login, or made up by the scripted model."""
    if offline:
        return "scripted"
    return (
        "api"
        if os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")
        else "subscription"
    )


def _error(line: str, style: str = "bold red") -> None:
    """Errors go to stderr, one line, so a piped summary never hides them."""
    Console(stderr=True, highlight=False, soft_wrap=True).print(line, markup=False, style=style)


def session_would_start(project: Path, config: AgentConfig, new_spec: bool = False) -> bool:
    """Whether a run of the project would start a session: not when every feature passes or is
    blocked and no newer spec waits to be planned (`new_spec`: one given now), nor when the
    project budget cannot cover one (the scheduler's own limits, read ahead so that such a run
    neither probes the sandbox nor asks for credentials)."""
    saved = statefile.load(project) if project.exists() else None
    if saved is None:
        return True
    settled = resume(saved.state).lane.role in TERMINAL and not saved.in_flight
    if settled and not (new_spec or specs.pending(project)):
        return False
    budget, cap = config.max_budget_usd, config.max_session_budget_usd
    if budget is None:
        return True
    spent = events.Totals.of(events.read(events.log_path(project))).cost_usd
    return spent < budget and (cap is None or budget - spent >= cap)


class _SandboxCheck:
    """The sandbox proven once per run, before the first session: up front when the run will
    start one, and in any case before a session starts (the runner is guarded)."""

    def __init__(self, config: AgentConfig, seams: Seams, echo: Callable[[str], None]) -> None:
        self.config, self.seams, self.echo = config, seams, echo
        self.done = False

    def once(self) -> None:
        """Refuse to run without a proven sandbox unless --no-sandbox says so (then warn)."""
        if self.done:
            return
        self.done = True
        if not self.config.sandbox:
            _error("WARNING: --no-sandbox: Bash commands of every session can write anywhere this user can")
            return
        result = self.seams.preflight()
        if not result.active:
            raise ConfigError(
                f"{result.message}; or pass --no-sandbox to run Bash unconfined (not recommended)"
            )
        self.echo(result.message)

    def guard(self, factory: RunnerFactory) -> RunnerFactory:
        @contextmanager
        def opened(echo: Callable[[str], None], log_dir: Path) -> Iterator[SessionRunner]:
            with factory(echo, log_dir) as runner:
                yield _Guarded(runner, self)

        return opened


@dataclass(frozen=True)
class _Guarded:
    """A runner that proves the sandbox before its first session."""

    wrapped: SessionRunner
    check: _SandboxCheck

    async def run(self, request: SessionRequest) -> SessionResult:
        import anyio

        await anyio.to_thread.run_sync(self.check.once)  # the probe runs an event loop of its own
        return await self.wrapped.run(request)

    def stop(self) -> None:
        from session_scheduler.run.agent import Stoppable

        if isinstance(self.wrapped, Stoppable):
            self.wrapped.stop()


def load_scenario(path: Path | None) -> Scenario:
    try:
        return Scenario.load(path) if path else DEMO
    except ValueError as exc:
        raise BadInput(f"--scenario: {exc}; see docs/scripted_model.md for the format") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def existing_project(project_dir: str) -> Path:
    project = resolve_project(project_dir)
    if not project.is_dir():
        raise ConfigError(
            f"there is no project at {project}; check --project-dir (a relative path is under {generations_dir()})"
        )
    return project


def _one_line_errors(action: Callable[[], None]) -> None:
    try:
        action()
    except SchedulerError as exc:
        _error(f"error: {exc}")
        sys.exit(exc.exit_code)


@main.command("status")
@click.option("--project-dir", required=True, help="The project's folder (as given to the run).")
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON object; its keys are documented in docs/events.md."
)
@click.pass_context
def status_command(ctx: click.Context, project_dir: str, as_json: bool) -> None:
    """How a project is doing, also while a run goes on (read-only; takes no lock)."""
    clock = Seams(**(ctx.obj or {})).clock

    def show() -> None:
        data = status.status_of(existing_project(project_dir), now=clock.now())
        if as_json:
            click.echo(json.dumps(data, indent=2))
        else:
            for line in status.render(data):
                click.echo(line)

    _one_line_errors(show)


def _morning(
    ctx: click.Context, project_dir: str, act: Callable[[Path, AgentConfig, events.EventLog], str]
) -> None:
    """One of the person's commands on a project (`approve`, `send-back`): under the project's
    lock, its events logged, one line said (or one line of refusal, nothing changed)."""
    seams = Seams(**(ctx.obj or {}))

    def run() -> None:
        project = existing_project(project_dir)
        saved = progress.load_config(project)
        if saved is None:
            raise BadInput(f"{project} has no saved options: run the project first")
        config = merge_config(saved, {})
        with seams.authority(project).hold():
            log = events.EventLog(project, events.new_run_id(seams.clock), clock=seams.clock.now)
            click.echo(act(project, config, log))
            proofs.write_missing(project, safe_git.open(project), trunk_of(config), seams.clock.now())

    _one_line_errors(run)


@main.command("approve")
@click.option("--project-dir", required=True, help="The project's folder (as given to the run).")
@click.argument("features", nargs=-1)
@click.pass_context
def approve_command(ctx: click.Context, project_dir: str, features: tuple[str, ...]) -> None:
    """Land the work waiting on the review branch on your own branch (all of it, or the FEATURES
    named, e.g. F001 F003), the gates run on the result; nothing moves when they fail."""
    from session_scheduler.run import approval

    _morning(
        ctx,
        project_dir,
        lambda project, config, log: approval.approve(project, config, features, log, click.echo),
    )


@main.command("send-back")
@click.option("--project-dir", required=True, help="The project's folder (as given to the run).")
@click.option("--why", required=True, help="What is wrong, in your words: the review the next FIX answers.")
@click.argument("feature")
@click.pass_context
def send_back_command(ctx: click.Context, project_dir: str, why: str, feature: str) -> None:
    """Take FEATURE off the review branch and give it back to a FIX that answers your words;
    the next run builds it again and it comes back for your approval."""
    from session_scheduler.run import approval

    _morning(
        ctx,
        project_dir,
        lambda project, config, log: approval.send_back(project, config, feature, why, log, click.echo),
    )


@main.command("report")
@click.option("--project-dir", required=True, help="The project's folder (as given to the run).")
@click.option(
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Where to write it (default: .agent_logs/report.html in the project for HTML, standard output for Markdown).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["html", "md"]),
    default="html",
    show_default=True,
    help="An HTML page (nothing fetched; screenshots linked from the session folders), or Markdown to paste into an issue or a chat.",
)
@click.pass_context
def report_command(ctx: click.Context, project_dir: str, output: Path | None, fmt: str) -> None:
    """The project as one page: features with their evidence, sessions, cost per role, burndown."""
    from session_scheduler.view.project_report import gather, render_html, render_markdown

    clock = Seams(**(ctx.obj or {})).clock

    def write() -> None:
        project = existing_project(project_dir)
        saved = progress.load_config(project)
        if saved is not None and (project / ".git").is_dir():  # a killed run's landings get theirs
            proofs.write_missing(
                project, safe_git.open(project), trunk_of(merge_config(saved, {})), clock.now()
            )
        data = gather(project, now=clock.now())
        target = output or (project / LOG_DIR / "report.html" if fmt == "html" else None)
        base = str(
            target.resolve().parent if target is not None else Path.cwd()
        )  # links to evidence start here
        text = render_html(data, base) if fmt == "html" else render_markdown(data, base)
        if target is None:
            click.echo(text, nl=False)
            return
        try:
            progress.atomic_write_text(target, text)
            target.chmod(0o666 & ~_umask())  # a page to share: readable as any file the user writes
        except OSError as exc:
            raise ConfigError(f"cannot write {target}: {exc.strerror}; choose another --output") from None
        click.echo(f"Report written to {target}")

    _one_line_errors(write)


@main.command("worker")
@click.option(
    "--engine",
    "engine_text",
    required=True,
    metavar="temporal://HOST:PORT",
    callback=_checked("--engine", parse_engine),
    help="The Temporal server whose sessions this worker runs.",
)
@click.option(
    "--host", required=True, help="This worker's name (the host it runs on), shown with each session."
)
@click.option(
    "--offline-demo",
    is_flag=True,
    help="Run sessions against the built-in scripted model on 127.0.0.1 (the scheduler's --offline-demo).",
)
@click.option("--scenario", type=click.Path(path_type=Path), help="Scenario file for --offline-demo.")
@click.option(
    "--work-dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="This worker's own folder (its logs); default: a temporary folder.",
)
@click.option(
    "--sessions",
    type=click.IntRange(min=1),
    default=WORKER_SESSIONS,
    show_default=True,
    help="How many sessions this worker runs at once at most (what this host holds).",
)
@click.pass_context
def worker_command(
    ctx: click.Context,
    engine_text: str,
    host: str,
    offline_demo: bool,
    scenario: Path | None,
    work_dir: Path | None,
    sessions: int,
) -> None:
    """Run sessions for a scheduler started with --engine temporal://HOST:PORT (this machine needs
    the product, Claude Code's credentials and the OS sandbox; it refuses to start without them)."""
    seams = Seams(**(ctx.obj or {}))
    signal.signal(signal.SIGTERM, _terminated)

    def work() -> None:
        engine = parse_engine(engine_text)
        if engine is None or engine.address is None:
            raise BadInput("a worker joins a running server: give --engine temporal://HOST:PORT")
        from session_scheduler.engine import require_temporal

        require_temporal(f"--engine {engine}")
        if scenario is not None and not offline_demo:
            raise BadInput("--scenario only applies to --offline-demo")
        result = seams.preflight()
        if not result.active:
            raise ConfigError(f"{result.message}; a worker runs sessions only in the OS sandbox")
        if not offline_demo:
            missing = seams.credentials()
            if missing:
                raise NotLoggedIn(missing)
        import asyncio
        import tempfile

        from session_scheduler.engine import connection
        from session_scheduler.engine.exchange import Places
        from session_scheduler.engine.worker import serve

        options = connection.connect_options(os.environ)  # TLS, API key: this host's own settings
        machine = Host.of(os.environ)  # what its sessions' sandboxes hide here (the connection's names too)
        connection.forget(os.environ)  # read once: the sessions it runs never inherit them
        _using_temporal()

        def echo(line: str) -> None:
            click.echo(line)

        echo(result.message)
        scenario_data = load_scenario(scenario) if offline_demo else None
        with tempfile.TemporaryDirectory(prefix="agent-worker-") as scratch:
            folder = work_dir or Path(scratch)
            folder.mkdir(parents=True, exist_ok=True)
            options["runtime"] = connection.logged_runtime(folder / connection.CLIENT_LOG)
            with seams.runners(scenario_data)(echo, folder) as runner:
                places = Places(folder)  # the lanes' clones and the sessions' folders
                asyncio.run(serve(engine.address, options, runner, host, places, machine, echo, sessions))

    try:
        work()
    except SchedulerError as exc:
        _error(f"error: {exc}")
        _exit(exc.exit_code)
    except KeyboardInterrupt:  # stopped (Ctrl-C, SIGTERM): its sessions were cancelled, their CLIs stopped
        _exit(EXIT_DONE)
    _exit(EXIT_DONE)


if __name__ == "__main__":
    main()  # pylint: disable=no-value-parameter
