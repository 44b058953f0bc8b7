"""The pure core: configuration, scheduler state and the session state machine.

Nothing here reads a file or runs a process. `advance()` is the only way the
scheduler moves from one session to the next; `get_next_session_type()` is the
transition table of DESIGN.md written as ordered guard clauses.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, Literal

Verdict = Literal["PASS", "REQUEST_CHANGES", "REJECT"]


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


ROLES: tuple[SessionType, ...] = (
    SessionType.INITIALIZER,
    SessionType.IMPLEMENT,
    SessionType.REVIEW,
    SessionType.FIX,
    SessionType.ARCHITECTURE,
)
TERMINAL: frozenset[SessionType] = frozenset({SessionType.DONE, SessionType.HALTED})

DEFAULT_MODELS: dict[str, str] = {
    "INITIALIZER": "sonnet",
    "IMPLEMENT": "sonnet",
    "REVIEW": "opus",
    "FIX": "sonnet",
    "ARCHITECTURE": "opus",
}


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
    max_budget_usd: float | None = None
    """Spending limit of the whole project in USD, as the CLI reports cost (None: no limit)."""
    test_command: str | None = None
    """The project's own test command, run on `main` after every merge (None: not checked)."""
    models: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_MODELS))
    """Model name (CLI alias or full name) per role."""

    def __post_init__(self) -> None:
        for name in (
            "architecture_interval",
            "feature_count",
            "max_attempts",
            "max_turns",
            "session_timeout_s",
            "max_rejections",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.max_fix_rounds < 0:
            raise ValueError(f"max_fix_rounds must not be negative, got {self.max_fix_rounds}")
        if self.max_budget_usd is not None and self.max_budget_usd <= 0:
            raise ValueError(f"max_budget_usd must be positive, got {self.max_budget_usd}")
        unknown = set(self.models) - set(DEFAULT_MODELS)
        if unknown:
            raise ValueError(f"unknown role(s) in models: {', '.join(sorted(unknown))}")

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AgentConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["models"] = {**DEFAULT_MODELS, **values.get("models", {})}
        return cls(**values)


@dataclass(frozen=True)
class Outcome:
    """The verified outcome of one session: what the scheduler checked, not what the agent said."""

    session_type: SessionType
    ok: bool
    """The session did what its role requires, checked against files and git."""
    verdict: Verdict | None = None
    """REVIEW / ARCHITECTURE: the verified verdict (a PASS whose merge failed its checks is not PASS)."""
    feature_ids: tuple[str, ...] = ()
    """INITIALIZER: the IDs of the verified feature list, in order."""
    passing: frozenset[str] = frozenset()
    """Features whose `passes` is true after the session (verified)."""
    review_id: int | None = None
    """REVIEW / ARCHITECTURE: the ID of the review the session appended."""
    reason: str = ""


@dataclass(frozen=True)
class SessionState:
    """Everything the scheduler knows between sessions (saved as `.agent_state.json`)."""

    next_session: SessionType = SessionType.INITIALIZER
    features: tuple[str, ...] = ()
    passing: frozenset[str] = frozenset()
    blocked: frozenset[str] = frozenset()
    rejections: tuple[tuple[str, int], ...] = ()
    current_feature: str | None = None
    current_branch: str | None = None
    features_completed: int = 0
    architecture_checked_at: int = 0
    """features_completed when the last ARCHITECTURE review ran (0: none yet)."""
    fix_rounds: int = 0
    """FIX sessions in the current review cycle."""
    attempts: int = 0
    """Consecutive failed sessions of `next_session`."""
    open_review_id: int | None = None
    session_count: int = 0
    halt_reason: str = ""

    def with_rejection(self, feature_id: str) -> tuple[tuple[str, int], ...]:
        counts = dict(self.rejections)
        counts[feature_id] = counts.get(feature_id, 0) + 1
        return tuple(sorted(counts.items()))

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["next_session"] = self.next_session.value
        data["passing"] = sorted(self.passing)
        data["blocked"] = sorted(self.blocked)
        data["rejections"] = dict(self.rejections)
        data["features"] = list(self.features)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SessionState:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["next_session"] = SessionType(values.get("next_session", "INITIALIZER"))
        values["features"] = tuple(values.get("features", ()))
        values["passing"] = frozenset(values.get("passing", ()))
        values["blocked"] = frozenset(values.get("blocked", ()))
        values["rejections"] = tuple(sorted(dict(values.get("rejections", {})).items()))
        return cls(**values)


def all_settled(state: SessionState) -> bool:
    """True when every feature passes or is blocked (and a feature list exists)."""
    return bool(state.features) and all(f in state.passing or f in state.blocked for f in state.features)


def next_feature(state: SessionState) -> str | None:
    """The first feature in list order that neither passes nor is blocked."""
    for feature_id in state.features:
        if feature_id not in state.passing and feature_id not in state.blocked:
            return feature_id
    return None


def architecture_due(state: SessionState, config: AgentConfig) -> bool:
    """Due once per new multiple of the interval reached by features_completed."""
    interval = config.architecture_interval
    return state.features_completed // interval > state.architecture_checked_at // interval


def get_model_for_session(session_type: SessionType, config: AgentConfig) -> str:
    """The model for a role: the configured override or the role's default."""
    if session_type in TERMINAL:
        raise ValueError(f"{session_type} does not run a session")
    return config.models.get(session_type.value, DEFAULT_MODELS[session_type.value])


def is_retry(state: SessionState, outcome: Outcome, config: AgentConfig) -> bool:
    """A session that failed verification runs again until it has used its attempts."""
    return not outcome.ok and state.attempts + 1 < config.max_attempts


def get_next_session_type(state: SessionState, outcome: Outcome | None, config: AgentConfig) -> SessionType:
    """The transition table of DESIGN.md, as ordered guard clauses.

    `state` is the state the last session ran in (its type is `state.next_session`),
    `outcome` its verified outcome (None before the first session).
    """
    if outcome is None:
        return state.next_session if state.features else SessionType.INITIALIZER
    current = outcome.session_type
    features = outcome.feature_ids if current is SessionType.INITIALIZER else state.features
    passing = outcome.passing if outcome.ok else state.passing
    after = dataclasses.replace(state, features=features, passing=passing)

    # A session that failed its checks is retried, a bounded number of times.
    if is_retry(state, outcome, config):
        return current
    if current is SessionType.INITIALIZER:
        if not outcome.ok:
            return SessionType.HALTED  # never skipped: without a feature list nothing can run
        return SessionType.DONE if all_settled(after) else SessionType.IMPLEMENT
    if not outcome.ok:
        # Out of attempts: IMPLEMENT / REVIEW count a rejection, FIX hands over to REVIEW,
        # ARCHITECTURE is given up for this multiple.
        if current is SessionType.IMPLEMENT or current is SessionType.REVIEW:
            return _after_rejection(after, config)
        if current is SessionType.FIX:
            return SessionType.REVIEW
        return SessionType.DONE if all_settled(after) else SessionType.IMPLEMENT
    if current is SessionType.IMPLEMENT:
        return SessionType.REVIEW
    if current is SessionType.FIX:
        return SessionType.REVIEW
    if current is SessionType.ARCHITECTURE:
        if outcome.verdict == "REQUEST_CHANGES":
            return SessionType.FIX
        return SessionType.DONE if all_settled(after) else SessionType.IMPLEMENT
    # REVIEW
    if outcome.verdict == "REQUEST_CHANGES" and state.fix_rounds < config.max_fix_rounds:
        return SessionType.FIX
    if outcome.verdict == "PASS":
        if all_settled(after):
            return SessionType.DONE
        completed = state.features_completed + (1 if state.current_feature else 0)
        if architecture_due(dataclasses.replace(after, features_completed=completed), config):
            return SessionType.ARCHITECTURE
        return SessionType.IMPLEMENT
    return _after_rejection(after, config)  # REJECT, or REQUEST_CHANGES with no rounds left


def _with_rejection(state: SessionState, config: AgentConfig) -> SessionState:
    """Count a rejection of the current feature; block it once it has too many."""
    feature = state.current_feature
    if feature is None:  # an arch/ branch: nothing to count
        return state
    rejections = state.with_rejection(feature)
    over = dict(rejections)[feature] >= config.max_rejections
    return dataclasses.replace(
        state, rejections=rejections, blocked=state.blocked | ({feature} if over else set())
    )


def _after_rejection(state: SessionState, config: AgentConfig) -> SessionType:
    return SessionType.DONE if all_settled(_with_rejection(state, config)) else SessionType.IMPLEMENT


def advance(state: SessionState, outcome: Outcome | None, config: AgentConfig) -> SessionState:
    """The state for the next session: the next type plus every counter it implies."""
    if outcome is None:
        return _enter(state, get_next_session_type(state, outcome, config))
    nxt = get_next_session_type(state, outcome, config)
    current = outcome.session_type
    new = dataclasses.replace(state, session_count=state.session_count + 1)
    if current is SessionType.INITIALIZER and outcome.ok:
        new = dataclasses.replace(new, features=outcome.feature_ids, passing=outcome.passing)
    elif outcome.ok:
        new = dataclasses.replace(new, passing=outcome.passing)
    if is_retry(state, outcome, config):
        return dataclasses.replace(new, attempts=state.attempts + 1)
    new = dataclasses.replace(new, attempts=0)
    if nxt is SessionType.HALTED:
        return dataclasses.replace(
            new,
            next_session=nxt,
            halt_reason=f"{current} failed {config.max_attempts} times: {outcome.reason}",
        )
    rejected = (not outcome.ok and current in (SessionType.IMPLEMENT, SessionType.REVIEW)) or (
        current is SessionType.REVIEW and outcome.verdict != "PASS" and nxt is not SessionType.FIX
    )
    if rejected:
        new = _with_rejection(new, config)
    if current is SessionType.REVIEW and outcome.ok and outcome.verdict == "PASS" and state.current_feature:
        new = dataclasses.replace(new, features_completed=state.features_completed + 1)
    if current is SessionType.ARCHITECTURE:
        new = dataclasses.replace(
            new,
            architecture_checked_at=state.features_completed,
        )
    if nxt is SessionType.FIX and current is SessionType.ARCHITECTURE:
        new = dataclasses.replace(
            new,
            open_review_id=outcome.review_id,
            current_feature=None,
            current_branch=f"arch/{outcome.review_id}",
            fix_rounds=0,
        )
    elif nxt is SessionType.FIX:
        new = dataclasses.replace(new, open_review_id=outcome.review_id)
    return _enter(new, nxt)


def _enter(state: SessionState, nxt: SessionType) -> SessionState:
    """Set the work item for the session about to run."""
    if nxt is SessionType.IMPLEMENT:
        feature = next_feature(state)
        return dataclasses.replace(
            state,
            next_session=nxt,
            current_feature=feature,
            current_branch=f"feature/{feature}" if feature else None,
            fix_rounds=0,
            open_review_id=None,
        )
    if nxt is SessionType.FIX:
        return dataclasses.replace(state, next_session=nxt, fix_rounds=state.fix_rounds + 1)
    if nxt is SessionType.ARCHITECTURE or nxt in TERMINAL or nxt is SessionType.INITIALIZER:
        return dataclasses.replace(
            state,
            next_session=nxt,
            current_feature=None,
            current_branch=None,
            open_review_id=None,
            fix_rounds=0,
        )
    return dataclasses.replace(state, next_session=nxt)


def resume(state: SessionState) -> SessionState:
    """The state a new run starts from: a halted run tries its INITIALIZER again."""
    if state.next_session is SessionType.HALTED:
        return dataclasses.replace(state, next_session=SessionType.INITIALIZER, attempts=0, halt_reason="")
    return state


def session_bound(feature_count: int, config: AgentConfig) -> int:
    """An upper bound on the sessions of a whole run (the loop always ends)."""
    a = config.max_attempts
    review_cycle = a * (1 + 1) * (config.max_fix_rounds + 1)  # (REVIEW + FIX) per round
    per_try = a + review_cycle  # IMPLEMENT then the review cycle
    per_feature = per_try * (config.max_rejections + 1)
    arch_reviews = feature_count // config.architecture_interval + 1
    per_arch = a + review_cycle * (config.max_rejections + 1)
    return a + feature_count * per_feature + arch_reviews * per_arch
