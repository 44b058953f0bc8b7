"""JSON Schemas of every file the scheduler reads: the hand-off files and its own state."""

from __future__ import annotations

from typing import Any

import jsonschema

from session_scheduler.core.config import LAND_ON, ROLES, TERMINAL, SessionType
from session_scheduler.core.evidence import NAME as EVIDENCE_NAME
from session_scheduler.core.standing import Standing
from session_scheduler.core.tasks import REF as TASK_REF

ROLE_NAMES = [role.value for role in ROLES]
FEATURE_ID = {"type": "string", "pattern": "^F[0-9]+$"}
NULLABLE_STR = {"type": ["string", "null"]}
LANE_ID = "^(0|[1-9][0-9]{0,3})$"
"""A lane's id as a key of a JSON object: 0 to 9999, written as `str(int)` writes it."""
ISSUE_LIST = {"type": "array", "items": {"type": "string"}}
VERDICTS: dict[str, list[str]] = {
    "feature": ["PASS", "REQUEST_CHANGES", "REJECT"],
    "architecture": ["PASS", "REQUEST_CHANGES"],
}
"""The verdicts a review of each kind may give (a branch of an architecture review is not rejected)."""
ACCEPTANCE: dict[str, Any] = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["step", "passed", "evidence"],
        "properties": {
            "step": {"type": "integer", "minimum": 1},
            "passed": {"type": "boolean"},
            "evidence": {"type": "string"},
            "snapshot": {"type": "string", "pattern": EVIDENCE_NAME.pattern},
            "screenshot": {"type": "string", "pattern": EVIDENCE_NAME.pattern},
        },
    },
}
"""A feature review's grades of the feature's acceptance steps (1-based), in order; optional. A web
feature's results cite the browser evidence the scheduler kept of the step (core/evidence.py)."""

FEATURE_LIST: dict[str, Any] = {
    "type": "object",
    "required": ["features"],
    "properties": {
        "features": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["id", "category", "description", "steps", "passes"],
                "properties": {
                    "id": FEATURE_ID,
                    "category": {"type": "string", "minLength": 1},
                    "description": {"type": "string", "minLength": 1},
                    "steps": {"type": "array", "items": {"type": "string"}},
                    "passes": {"type": "boolean"},
                    "depends_on": {"type": "array", "items": FEATURE_ID, "uniqueItems": True},
                    "task": {"type": "string", "pattern": TASK_REF.pattern},
                },
            },
        }
    },
}

PROGRESS: dict[str, Any] = {
    "type": "object",
    "required": [
        "project_name",
        "current_phase",
        "current_feature",
        "current_branch",
        "features_completed",
        "sessions",
    ],
    "properties": {
        "project_name": {"type": "string"},
        "current_phase": {"type": "string"},
        "current_feature": {"anyOf": [FEATURE_ID, {"type": "null"}]},
        "current_branch": NULLABLE_STR,
        "features_completed": {"type": "integer", "minimum": 0},
        "lanes": {
            "type": "object",
            "propertyNames": {"pattern": LANE_ID},
            "additionalProperties": {
                "type": "object",
                "required": ["phase", "feature", "branch"],
                "properties": {
                    "phase": {"type": "string"},
                    "feature": {"anyOf": [FEATURE_ID, {"type": "null"}]},
                    "branch": NULLABLE_STR,
                },
            },
        },
        "sessions": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["session_id", "agent_type", "outcome"],
                "properties": {
                    "session_id": {"type": "integer"},
                    "agent_type": {"enum": ROLE_NAMES},
                    "features_touched": {"type": "array", "items": FEATURE_ID},
                    "outcome": {"type": "string"},
                    "commit_range": {
                        "type": ["object", "null"],
                        "properties": {"from": NULLABLE_STR, "to": NULLABLE_STR},
                    },
                },
            },
        },
    },
}

REVIEWS: dict[str, Any] = {
    "type": "object",
    "required": ["reviews", "fixes"],
    "properties": {
        "reviews": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["review_id", "feature_id", "kind", "verdict", "issues"],
                "properties": {
                    "review_id": {"type": "integer", "minimum": 1},
                    "feature_id": {"anyOf": [FEATURE_ID, {"type": "null"}]},
                    "kind": {"enum": ["feature", "architecture"]},
                    "verdict": {"enum": VERDICTS["feature"]},
                    "issues": {
                        "type": "object",
                        "required": ["critical", "major", "minor"],
                        "properties": {
                            "critical": ISSUE_LIST,
                            "major": ISSUE_LIST,
                            "minor": ISSUE_LIST,
                        },
                    },
                    "acceptance": ACCEPTANCE,
                },
                "allOf": [
                    {
                        "if": {"properties": {"kind": {"const": "architecture"}}},
                        "then": {
                            "properties": {
                                "feature_id": {"type": "null"},
                                "verdict": {"enum": VERDICTS["architecture"]},
                            }
                        },
                    }
                ],
            },
        },
        "fixes": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["fix_id", "review_id", "issues_fixed"],
                "properties": {
                    "fix_id": {"type": "integer", "minimum": 1},
                    "review_id": {"type": "integer", "minimum": 1},
                    "issues_fixed": ISSUE_LIST,
                },
            },
        },
    },
}

HANDOFF_SCHEMAS: dict[str, dict[str, Any]] = {
    "feature_list.json": FEATURE_LIST,
    "progress.json": PROGRESS,
    "reviews.json": REVIEWS,
}

_COUNT = {"type": "integer", "minimum": 0}
_POSITIVE = {"type": "integer", "minimum": 1}
FEATURE_IDS = {"type": "array", "items": FEATURE_ID}
_WORK: dict[str, Any] = {
    "anyOf": [
        {"type": "object", "required": ["feature"], "properties": {"feature": FEATURE_ID}},
        {
            "type": "object",
            "required": ["architecture_review"],
            "properties": {"architecture_review": _POSITIVE},
        },
    ]
}
"""A work item (`machine.WorkItem.to_json`): a feature, or an architecture review's fixes."""
_LANE: dict[str, Any] = {
    "type": "object",
    "required": ["role"],
    "properties": {
        "role": {"enum": [*ROLE_NAMES, *sorted(t.value for t in TERMINAL), SessionType.WAIT.value]},
        "work": {"anyOf": [{"type": "null"}, _WORK]},
        "attempts": _COUNT,
        "fix_rounds": _COUNT,
        "open_review": {"type": ["integer", "null"]},
    },
}
"""One lane of the schedule (`machine.Lane`)."""
_IN_FLIGHT: dict[str, Any] = {
    "type": "object",
    "required": ["number", "log_dir", "main", "branch_tip", "heads"],
    "properties": {
        "number": _POSITIVE,
        "log_dir": {"type": "string", "minLength": 1},
        "main": {"type": "string", "minLength": 1},
        "branch_tip": NULLABLE_STR,
        "heads": {"type": "object", "additionalProperties": {"type": "string"}},
        "heads_gone": {"type": "array", "items": {"type": "string"}},
        "why": {"enum": [standing.value for standing in Standing if not standing.counted]},
        "wait_until": {"type": "number"},
        "copies": {"type": "string", "minLength": 1},
        "attempt": _POSITIVE,
    },
}
"""Where one lane's session in flight started (core/session.py's `InFlight`): the state file's
`in_flight` values, and the one lane's `in_progress` of earlier versions."""
AGENT_STATE: dict[str, Any] = {
    "type": "object",
    "required": ["backlog", "lane", "session_count"],
    "properties": {
        "backlog": {
            "type": "object",
            "required": ["features", "passing", "blocked"],
            "properties": {
                "features": FEATURE_IDS,
                "passing": FEATURE_IDS,
                "blocked": FEATURE_IDS,
                "rejections": {"type": "object", "additionalProperties": _COUNT},
                "depends": {"type": "object", "additionalProperties": FEATURE_IDS},
                "landing": {"type": "array", "items": _WORK},
                "returned": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["work", "review_id"],
                        "properties": {"work": _WORK, "review_id": _POSITIVE},
                    },
                },
                "held": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["feature", "why"],
                        "properties": {"feature": FEATURE_ID, "why": {"type": "string"}},
                    },
                },
                "to_plan": {"type": "boolean"},
            },
        },
        "lane": _LANE,
        "lanes": {"type": "array", "minItems": 1, "items": _LANE},
        "issued": _COUNT,
        "architecture_checked_at": _COUNT,
        "session_count": _COUNT,
        "halt_reason": {"type": "string"},
        "in_flight": {
            "type": "object",
            "propertyNames": {"pattern": LANE_ID},
            "additionalProperties": _IN_FLIGHT,
        },
        "in_progress": {"anyOf": [{"type": "null"}, _IN_FLIGHT]},
        "stats": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "sessions_by_type": {"type": "object", "additionalProperties": _COUNT},
                "failed_sessions": _COUNT,
                "interrupted_sessions": _COUNT,
                "cost_usd": {"type": "number", "minimum": 0},
                "input_tokens": _COUNT,
                "output_tokens": _COUNT,
                "denials_by_role": {"type": "object", "additionalProperties": _COUNT},
                "not_counted": {"type": "object", "additionalProperties": _COUNT},
            },
        },
    },
}

AGENT_CONFIG: dict[str, Any] = {
    "type": "object",
    "properties": {
        "architecture_interval": _POSITIVE,
        "feature_count": _POSITIVE,
        "max_fix_rounds": _COUNT,
        "max_rejections": _POSITIVE,
        "max_attempts": _POSITIVE,
        "max_turns": _POSITIVE,
        "session_timeout_s": _POSITIVE,
        "max_budget_usd": {"type": ["number", "null"], "exclusiveMinimum": 0},
        "max_session_budget_usd": {"type": ["number", "null"], "exclusiveMinimum": 0},
        "notify": NULLABLE_STR,
        "test_command": NULLABLE_STR,
        "gates": {"type": ["object", "null"]},  # its own schema: core/gates.GATES_SCHEMA, read by GateSet
        "land_on": {"enum": list(LAND_ON)},
        "review_branch": NULLABLE_STR,
        "forge": NULLABLE_STR,
        "remote": {"type": "string", "minLength": 1},
        "risk": {"type": ["object", "null"]},  # its own schema: core/risk.RISK_SCHEMA
        "detect_gates": {"type": "boolean"},
        "app": {"type": ["object", "null"]},  # its own schema: core/app.APP_SCHEMA, read by AppSpec
        "allowed_domains": {"type": "array", "items": {"type": "string", "minLength": 1}},
        "spec_sha256": {"type": "string"},
        "models": {
            "type": "object",
            "propertyNames": {"enum": ROLE_NAMES},
            "additionalProperties": {"type": "string", "minLength": 1},
        },
    },
}


LIST_ITEMS: dict[str, dict[str, dict[str, Any]]] = {
    name: {
        key: prop["items"]
        for key, prop in schema["properties"].items()
        if prop.get("type") == "array" and "items" in prop
    }
    for name, schema in HANDOFF_SCHEMAS.items()
}
"""Per hand-off file, its lists of entries and each list's entry schema (validated one by one)."""


def shell(schema: dict[str, Any], lists: Any) -> dict[str, Any]:
    """`schema` without the entry schemas of the named list properties (checked elsewhere, or
    known valid)."""
    props = schema["properties"]
    return {
        **schema,
        "properties": {
            k: ({kw: x for kw, x in v.items() if kw != "items"} if k in lists else v)
            for k, v in props.items()
        },
    }


SHELLS: dict[str, dict[str, Any]] = {
    name: shell(schema, LIST_ITEMS[name]) for name, schema in HANDOFF_SCHEMAS.items()
}
AGENT_STATE_SAVED = {
    **AGENT_STATE,
    "properties": {
        **AGENT_STATE["properties"],
        "backlog": {
            **shell(AGENT_STATE["properties"]["backlog"], ("features", "passing", "blocked")),
            "properties": {
                **shell(AGENT_STATE["properties"]["backlog"], ("features", "passing", "blocked"))[
                    "properties"
                ],
                "rejections": {"type": "object"},
            },
        },
    },
}
"""The state as the scheduler saves it: its feature ids came from the validated feature list,
so they are not checked one by one again on every save (the whole schema applies on load)."""
_VALIDATORS: dict[int, tuple[dict[str, Any], Any]] = {}
"""One validator per schema, kept with the schema it was built from (so its id is never reused
for another): a memo of a pure function of constants, the same for every project (the one
module-level table of the package besides security's valid settings; tests/test_records.py)."""


def schema_error(data: Any, schema: dict[str, Any]) -> str | None:
    """Where and how `data` breaks `schema` (the most relevant error), or None when it matches.

    The one place JSON Schema validation happens; callers raise their own error type.
    """
    validator = _validator(schema)
    if validator.is_valid(data):
        return None
    error = jsonschema.exceptions.best_match(validator.iter_errors(data))
    return None if error is None else _where(error)


def schema_errors(data: Any, schema: dict[str, Any], limit: int = 20) -> list[str]:
    """Every way `data` breaks `schema` (at most `limit`), in document order; [] when it matches."""
    errors = sorted(_validator(schema).iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path])
    return [_where(error) for error in errors[:limit]]


def _validator(schema: dict[str, Any]) -> Any:
    known = _VALIDATORS.get(id(schema))
    if known is not None and known[0] is schema:
        return known[1]
    validator = jsonschema.Draft202012Validator(schema)  # schemas are module constants: built once
    _VALIDATORS[id(schema)] = (schema, validator)
    return validator


def _where(error: Any) -> str:
    where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
    return f"at {where}: {error.message}"
