"""Scenario files: which verdicts the robot gives and which faults it injects, and when."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

from scripted_model.protocol import FAULT_KINDS

ROBOT_FAULTS: tuple[str, ...] = (
    "invalid_json",
    "forbidden_command",
    "forbidden_write",
    "commit_on_main",
    "hidden_commit_on_main",
    "hidden_branch",
    "ignore_tests",
    "stage_all",
    "leave_origin",
    "screenshot_filename",
    "self_dependent",
    "spaced_outcome",
    "incomplete_pass",
)
WRITTEN_FAULTS = (
    "invalid_json",
    "forbidden_command",
    "forbidden_write",
    "leave_origin",
    "screenshot_filename",
)
"""Robot faults carried out as extra tool calls after the session's real work."""
VERDICT = {"enum": ["PASS", "REQUEST_CHANGES", "REJECT"]}
FEATURE_ID = {"type": "string", "pattern": "^F[0-9]+$"}
CATALOGUE = 16
"""The demo app's catalogue of commands (scripted_model/demo_app.py)."""
MAX_FEATURES = 128
"""Features past the catalogue's are notes, a file each (`demo_app.feature`): a large spec's shape."""
MAX_WEB_FEATURES = 2
"""Its web features (scripted_model/demo_web.py)."""

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "description": {"type": "string"},
        "features": {"type": "integer", "minimum": 1, "maximum": MAX_FEATURES},
        "conflicts": {
            "type": "array",
            "items": {"type": "array", "minItems": 2, "uniqueItems": True, "items": FEATURE_ID},
        },
        "red_together": {
            "type": "array",
            "items": {
                "type": "array",
                "minItems": 2,
                "maxItems": 2,
                "uniqueItems": True,
                "items": FEATURE_ID,
            },
        },
        "reviews": {
            "type": "object",
            "additionalProperties": {"type": "array", "items": VERDICT},
        },
        "architecture": {
            "type": "array",
            "items": {"enum": ["PASS", "REQUEST_CHANGES"]},
        },
        "buggy": {"type": "array", "items": {"type": "string", "pattern": "^F[0-9]+$"}},
        "web": {"type": "boolean"},
        "web_features": {"type": "integer", "minimum": 0, "maximum": MAX_WEB_FEATURES},
        "app_broken": {"type": "array", "items": FEATURE_ID},
        "depends": {
            "type": "object",
            "propertyNames": {"pattern": "^F[0-9]+$"},
            "additionalProperties": {"type": "array", "items": {"type": "string", "pattern": "^F[0-9]+$"}},
        },
        "turn_latency_s": {"type": "number", "minimum": 0, "maximum": 600},
        "faults": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["session", "kind"],
                "properties": {
                    "session": {"type": "integer", "minimum": 1},
                    "kind": {"enum": [*FAULT_KINDS, *ROBOT_FAULTS]},
                    "times": {"type": "integer", "minimum": 1},
                    "request": {"type": "integer", "minimum": 1},
                    "file": {"type": "string"},
                    "command": {"type": "string"},
                    "url": {"type": "string"},
                    "reset_in_seconds": {"type": "integer", "minimum": 0},
                },
            },
        },
    },
}


@dataclass(frozen=True)
class FaultSpec:
    session: int
    kind: str
    times: int = 1
    """HTTP faults: how many requests of the session fail."""
    request: int = 1
    """HTTP faults: the first request (1-based, within the session) that fails."""
    file: str | None = None
    command: str | None = None
    url: str | None = None
    """`leave_origin`: where the robot tries to take the browser (default http://example.com/)."""
    reset_in_seconds: int = 3600


@dataclass(frozen=True)
class Scenario:
    """What the robot does; see docs/scripted_model.md for the file format."""

    features: int = 6
    reviews: dict[str, tuple[str, ...]] = field(default_factory=dict)
    architecture: tuple[str, ...] = ()
    buggy: frozenset[str] = frozenset()
    faults: tuple[FaultSpec, ...] = ()
    depends: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """The `depends_on` the INITIALIZER writes for each feature named."""
    turn_latency_s: float = 0.0
    """How long the model takes to answer each turn (a real model takes seconds)."""
    conflicts: tuple[tuple[str, ...], ...] = ()
    """Groups of features whose IMPLEMENT each add a line at the same place (the end of
    README.md): whichever lands second conflicts textually with the first."""
    red_together: tuple[tuple[str, str], ...] = ()
    """Pairs (A, B): A rewords the usage message, B's test pins it; each is green alone, the
    two merged are red."""
    web: bool = False
    """The app has a web front (`todo/web.py`, standard library) and the INITIALIZER proposes
    `app.json` to start it: the scheduler's app gate starts it after every feature."""
    app_broken: frozenset[str] = frozenset()
    """Features whose first IMPLEMENT breaks the web front (it exits at start); their FIX mends it."""
    web_features: int = 0
    """How many of the web features (category "web", reviewed in a browser) the INITIALIZER adds
    after the command features (F017, F018); any makes `web` true."""

    def conflicting(self, feature_id: str) -> bool:
        """Whether the feature is in a conflict group."""
        return any(feature_id in group for group in self.conflicts)

    def red_part(self, feature_id: str) -> str | None:
        """In a red pair: "rewords" (its first feature), "pins" (its second), else None."""
        for first, second in self.red_together:
            if feature_id == first:
                return "rewords"
            if feature_id == second:
                return "pins"
        return None

    def verdict(self, key: str, index: int) -> str:
        """The verdict of the index-th review (0-based) of a feature or branch; PASS by default."""
        verdicts = self.reviews.get(key, ())
        return verdicts[index] if index < len(verdicts) else "PASS"

    def architecture_verdict(self, index: int) -> str:
        return self.architecture[index] if index < len(self.architecture) else "PASS"

    def robot_faults(self, session: int) -> list[FaultSpec]:
        return [f for f in self.faults if f.session == session and f.kind in WRITTEN_FAULTS]

    def has_fault(self, session: int, kind: str) -> bool:
        return any(f.session == session and f.kind == kind for f in self.faults)

    def http_faults(self, session: int) -> list[FaultSpec]:
        return [f for f in self.faults if f.session == session and f.kind in FAULT_KINDS]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Scenario:
        problem = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(SCHEMA).iter_errors(data))
        if problem is not None:
            where = "/".join(str(p) for p in problem.absolute_path) or "(top level)"
            raise ValueError(f"scenario is invalid at {where}: {problem.message}")
        if data.get("features", 6) > CATALOGUE and data.get("web_features", 0):
            raise ValueError(
                f"scenario is invalid: web features take the ids after the catalogue's {CATALOGUE}, "
                f"so `features` past {CATALOGUE} go without `web_features`"
            )
        paired = [feature for pair in data.get("red_together", ()) for feature in pair]
        if len(paired) != len(set(paired)):
            raise ValueError("scenario is invalid at red_together: a feature is in two red pairs")
        return cls(
            features=data.get("features", 6),
            reviews={k: tuple(v) for k, v in data.get("reviews", {}).items()},
            architecture=tuple(data.get("architecture", ())),
            buggy=frozenset(data.get("buggy", ())),
            faults=tuple(FaultSpec(**f) for f in data.get("faults", ())),
            depends={k: tuple(v) for k, v in data.get("depends", {}).items()},
            turn_latency_s=float(data.get("turn_latency_s", 0.0)),
            conflicts=tuple(tuple(group) for group in data.get("conflicts", ())),
            red_together=tuple((first, second) for first, second in data.get("red_together", ())),
            web=bool(data.get("web", False)) or data.get("web_features", 0) > 0,
            web_features=int(data.get("web_features", 0)),
            app_broken=frozenset(data.get("app_broken", ())),
        )

    @classmethod
    def load(cls, path: Path) -> Scenario:
        try:
            return cls.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"cannot read scenario {path}: {exc}") from None


DEMO = Scenario.from_json(
    {
        "description": "The README demo: one feature sent back and fixed, one rejected and redone, "
        "an architecture review that asks for changes; every command uses F001's task store; a web "
        "front whose two features are reviewed in the browser, where F017's Add button first does nothing.",
        "features": 6,
        "web_features": 2,
        "reviews": {"F002": ["REQUEST_CHANGES", "PASS"], "F004": ["REJECT", "PASS"]},
        "buggy": ["F003", "F017"],
        "architecture": ["REQUEST_CHANGES"],
        "depends": {f"F00{n}": ["F001"] for n in range(2, 7)},
    }
)
