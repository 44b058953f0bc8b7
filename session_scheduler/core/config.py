"""The options of a project and the closed set of session roles (pure: no I/O).

The state machine that moves between roles lives in `machine.py`.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from session_scheduler.core.engine import NONE, parse_address, parse_engine, remote_protocol
from session_scheduler.core.layout import is_scheduler_path

if TYPE_CHECKING:  # core/gates and core/app read core/schemas, which reads this module
    from session_scheduler.core.app import AppSpec
    from session_scheduler.core.gates import GateSet
    from session_scheduler.core.risk import Rule


class SessionType(enum.StrEnum):
    """A session role, plus the two ends of a run."""

    INITIALIZER = "INITIALIZER"
    IMPLEMENT = "IMPLEMENT"
    REVIEW = "REVIEW"
    FIX = "FIX"
    ARCHITECTURE = "ARCHITECTURE"
    DONE = "DONE"
    """Every feature passes or is blocked: the run is over."""
    HALTED = "HALTED"
    """The run cannot go on without a person (the initializer kept failing)."""
    WAIT = "WAIT"
    """Lanes: this lane may take nothing now (what is left is held by other lanes or waits for
    the features it depends on, or an architecture review waits for a quiet `main`). One lane
    never waits."""


ROLES: tuple[SessionType, ...] = (
    SessionType.INITIALIZER,
    SessionType.IMPLEMENT,
    SessionType.REVIEW,
    SessionType.FIX,
    SessionType.ARCHITECTURE,
)
TERMINAL: frozenset[SessionType] = frozenset({SessionType.DONE, SessionType.HALTED})

DEFAULT_ALLOWED_DOMAINS: tuple[str, ...] = (
    "pypi.org",
    "files.pythonhosted.org",
    "registry.npmjs.org",
    "registry.yarnpkg.com",
    "deb.debian.org",
)
"""Package registries a sandboxed session may reach unless the project says otherwise."""

DEFAULT_MODELS: dict[str, str] = {
    "INITIALIZER": "sonnet",
    "IMPLEMENT": "sonnet",
    "REVIEW": "opus",
    "FIX": "sonnet",
    "ARCHITECTURE": "opus",
}


MAX_LANES = 16
"""The most lanes a project may run (each runs a Claude Code process and the agent's builds)."""


@dataclass(frozen=True)
class AgentConfig:
    """Options of a project; saved to `.agent_config.json` and reused on resume."""

    architecture_interval: int = 5
    """An ARCHITECTURE review runs each time features_completed reaches a new multiple."""
    feature_count: int = 8
    """How many features the initializer should aim for."""
    max_fix_rounds: int = 3
    """FIX sessions allowed per review cycle before REQUEST_CHANGES counts as REJECT."""
    max_rejections: int = 2
    """A feature is blocked by its this-many-th rejection (at least 1)."""
    max_attempts: int = 3
    """Consecutive failed (unverified) sessions of one role before the scheduler gives up on it."""
    max_turns: int = 200
    """Turn limit handed to each Claude Code session."""
    session_timeout_s: int = 3600
    """Wall-clock limit of one session in seconds; a session that hangs is stopped and verified."""
    idle_timeout_s: int = 600
    """A session from which Claude Code sends nothing for this many seconds is stopped and verified."""
    max_budget_usd: float | None = None
    """Spending limit of the whole project in USD, as the CLI reports cost (None: no limit)."""
    max_session_budget_usd: float | None = None
    """Spending limit of one session in USD, handed to the CLI (None: only the project's)."""
    notify: str | None = None
    """A shell command run with each event a person cares about as JSON on its input (notify.py)."""
    test_command: str | None = None
    """The project's own test command, run on `main` after every merge (None: not checked)."""
    models: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_MODELS))
    """Model name (CLI alias or full name) per role."""
    sandbox: bool = True
    """Bash runs in Claude Code's OS sandbox (never saved: `--no-sandbox` is given per invocation)."""
    allowed_domains: tuple[str, ...] = DEFAULT_ALLOWED_DOMAINS
    """Network domains sandboxed commands may reach (package registries by default)."""
    wait_for_limits: bool = True
    """Wait in-process for a usage limit to reset, then go on (never saved: `--no-wait` stops instead)."""
    max_outage_minutes: float = 120.0
    """How long, in all, one run backs off from API outages before it stops with exit 3."""
    offline_demo: bool = False
    """Sessions talk to the built-in scripted model on loopback (`--offline-demo`, saved: a plain
    rerun resumes the demo; `--no-offline-demo` leaves it)."""
    lanes: int = 1
    """How many features are worked on at once, each lane in its own clone (`--lanes`, saved; one
    lane is the one-lane scheduler's exact behaviour)."""
    gates: GateSet | None = None
    """The project's quality gates as the person declared them (`--gates FILE`, saved; the test
    command is their `tests` gate when they name none): run on the branch before REVIEW and on
    `main` after landing."""
    app: AppSpec | None = None
    """How the person starts the project's web app (`--app FILE`, saved), instead of the app.json
    the INITIALIZER proposed; the app answering is a gate (run/gating.py)."""
    detect_gates: bool = False
    """With no gates declared, a language plugin names them from the project's files
    (`--gates detect`, saved; core/languages.py)."""
    allow_repo_code: bool = False
    """Commits may add what makes git run code (nested repositories as gitlinks, filter, diff or merge
    drivers selected in .gitattributes); refused by verification otherwise."""
    local_files: tuple[str, ...] = ()
    """Untracked files of the project its app needs to run (a local config such as `.env`), each
    a path in the project folder, copied into every lane's clone before each session and kept out
    of its commits (`--local-file`, saved). Nothing untracked reaches a lane otherwise."""
    land_on: str = "main"
    """Where verified work lands (`--land-on`, saved): `main` (the project's `main` moves, as in a
    new project), `review` (a review branch, `review_branch`, made from the person's branch when
    the first run starts; the person's own branch moves only when they `approve`), or `pr` (the
    review branch, and a draft pull request per feature on the person's forge). A project adopted
    from a repository with commits defaults to `review`, a new one to `main`."""
    review_branch: str | None = None
    """With `land_on` `review` or `pr`: the branch work lands on (`agents/<date>`), chosen once and saved."""
    forge: str | None = None
    """With `land_on` `pr`: where pull requests are opened (`github:OWNER/REPO`; `--forge`, saved;
    None: read from the remote's URL)."""
    remote: str = "origin"
    """With `land_on` `pr`: the person's remote each feature's branch is pushed to (`--remote`, saved)."""
    risk: dict[str, Any] | None = None
    """The risk rules (`--risk FILE|default|none`, saved; core/risk.py) in their saved form: None
    is the defaults, `{"rules": []}` none. Approved work a rule matches waits for the person."""
    engine: str | None = None
    """Where sessions run (`--engine`, saved; core/engine.py): None in this process, or
    `temporal://HOST:PORT` / `temporal://local` on Temporal workers."""
    git_remote: str | None = None
    """With an engine: the git repository sessions go through to workers and back (`--git-remote`,
    saved; core/engine.remote_protocol); None: the exchange in the project's log folder (a path,
    for workers that reach this file system)."""
    git_serve: str | None = None
    """With an engine: HOST:PORT where the run serves its exchange with `git daemon` for workers on
    other machines (`--git-serve`, saved; engine/gitdaemon.py); None: it serves nothing."""

    def __post_init__(self) -> None:
        for name in (
            "architecture_interval",
            "feature_count",
            "max_attempts",
            "max_turns",
            "session_timeout_s",
            "idle_timeout_s",
            "max_rejections",
        ):
            value = getattr(self, name)
            if not _whole(value) or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, got {value!r}")
        if not _whole(self.lanes) or not 1 <= self.lanes <= MAX_LANES:
            raise ValueError(f"lanes must be a whole number from 1 to {MAX_LANES}, got {self.lanes!r}")
        if not _whole(self.max_fix_rounds) or self.max_fix_rounds < 0:
            raise ValueError(
                f"max_fix_rounds must be a whole number of at least 0, got {self.max_fix_rounds!r}"
            )
        outage = self.max_outage_minutes
        if (
            isinstance(outage, bool)
            or not isinstance(outage, int | float)
            or not (math.isfinite(outage) and outage >= 0)
        ):
            raise ValueError(f"max_outage_minutes must be a number of minutes of at least 0, got {outage!r}")
        for name in ("max_budget_usd", "max_session_budget_usd"):
            budget = getattr(self, name)
            if budget is not None and (
                isinstance(budget, bool)
                or not isinstance(budget, int | float)
                or not (math.isfinite(budget) and budget > 0)
            ):
                raise ValueError(f"{name} must be a positive number of dollars, got {budget}")
        if not isinstance(self.offline_demo, bool):
            raise ValueError(f"offline_demo must be true or false, got {self.offline_demo!r}")
        engine = parse_engine(self.engine)  # raises ValueError with what to give instead
        object.__setattr__(self, "engine", None if engine is None else str(engine))
        for name in ("git_remote", "git_serve"):  # `none`: back to the default, saved as none
            if getattr(self, name) == NONE:
                object.__setattr__(self, name, None)
        if self.git_remote is not None:
            remote_protocol(self.git_remote)  # raises ValueError with what to give instead
        if self.git_serve is not None:
            parse_address(self.git_serve, "--git-serve")
            if self.git_remote is not None:
                raise ValueError(
                    "--git-serve serves the run's own exchange: give it or --git-remote, not both"
                )
        if self.land_on not in LAND_ON:
            raise ValueError(f"land_on must be one of {', '.join(LAND_ON)}, got {self.land_on!r}")
        if self.forge is not None:
            parse_forge(self.forge)  # raises ValueError with what to give instead
        if self.review_branch is not None and review_branch_problem(self.review_branch):
            raise ValueError(
                f"review_branch {self.review_branch!r} {review_branch_problem(self.review_branch)}"
            )
        if self.risk is not None:
            from session_scheduler.core.risk import rules_from_json

            rules_from_json(self.risk)  # raises BadInput (one line) naming what is wrong
        for name in self.local_files:
            problem = local_file_problem(name)
            if problem is not None:
                raise ValueError(f"local file {name!r} {problem}")
        unknown = set(self.models) - set(DEFAULT_MODELS)
        if unknown:
            raise ValueError(f"unknown role(s) in models: {', '.join(sorted(unknown))}")

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        del data["sandbox"], data["wait_for_limits"]
        data["allowed_domains"] = list(self.allowed_domains)
        data["local_files"] = list(self.local_files)
        data["gates"] = self.gates.to_json() if self.gates else None
        data["app"] = self.app.to_json() if self.app else None
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AgentConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["models"] = {**DEFAULT_MODELS, **values.get("models", {})}
        values["allowed_domains"] = tuple(values.get("allowed_domains", DEFAULT_ALLOWED_DOMAINS))
        values["local_files"] = tuple(values.get("local_files", ()))
        from session_scheduler.core.app import AppSpec
        from session_scheduler.core.gates import GateSet

        values["gates"] = GateSet.from_json(values["gates"]) if values.get("gates") else None
        values["app"] = AppSpec.from_json(values["app"]) if values.get("app") else None
        return cls(**values)


LAND_ON = ("main", "review", "pr")
"""Where verified work may land (`AgentConfig.land_on`)."""
REVIEWED = ("review", "pr")
"""The landing places where work lands on a review branch and reaches the person's only by their approval."""
REVIEW_PREFIX = "agents/"
"""Review branches are named `agents/<date>`: never a session's work branch (feature/, arch/)."""


def parse_forge(spec: str) -> tuple[str, str, str]:
    """`github:OWNER/REPO` as (kind, owner, repo); ValueError saying what to give instead."""
    match = re.fullmatch(r"(github):([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)", spec)
    if match is None:
        raise ValueError(
            f"--forge {spec!r}: give github:OWNER/REPO (the repository pull requests are opened in)"
        )
    return match.group(1), match.group(2), match.group(3)


def review_branch_problem(name: object) -> str | None:
    """Why `name` cannot be a review branch (None: it can)."""
    if not isinstance(name, str) or not name.startswith(REVIEW_PREFIX):
        return f"must start with {REVIEW_PREFIX}"
    rest = name.removeprefix(REVIEW_PREFIX)
    if (
        not rest
        or any(not (c.isalnum() or c in "-._") for c in rest)
        or ".." in rest
        or rest.endswith((".", ".lock"))
    ):
        return "must be agents/ and a name of letters, digits, '-', '.' or '_'"
    return None


def risk_rules(config: AgentConfig) -> tuple[Rule, ...]:
    """The rules that hold approved work for the person (core/risk.py)."""
    from session_scheduler.core.risk import DEFAULT_RULES, rules_from_json

    return DEFAULT_RULES if config.risk is None else rules_from_json(config.risk)


def trunk_of(config: AgentConfig) -> str:
    """The branch of the project's repository verified work lands on, what every lane's clone
    calls `main`: the project's `main`, or its review branch."""
    if config.land_on in REVIEWED:
        assert config.review_branch is not None, "a review branch is chosen before the run opens the project"
        return config.review_branch
    return "main"


def local_file_problem(name: object) -> str | None:
    """Why `name` cannot name a local file (None: it can): a relative path inside the project
    folder, in git's spelling, outside `.git` and the scheduler's own files."""
    if not isinstance(name, str) or not name:
        return "is not a path"
    parts = name.split("/")
    if name.startswith("/") or any(part in ("", ".", "..") for part in parts) or "\\" in name:
        return "must be a path inside the project folder, relative to it, like config/local.env"
    if parts[0] == ".git" or is_scheduler_path(name):
        return "is git's or the scheduler's own; name a file of the project"
    return None


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def get_model_for_session(session_type: SessionType, config: AgentConfig) -> str:
    """The model for a role: the configured override or the role's default."""
    if session_type in TERMINAL:
        raise ValueError(f"{session_type} does not run a session")
    return config.models.get(session_type.value, DEFAULT_MODELS[session_type.value])
