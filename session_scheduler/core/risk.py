"""Risk holds (pure): rules, as data, that make approved work wait for a person whatever the
landing place. A rule names paths (glob patterns), or a size: lines deleted in all, or a file's
size after the change. The defaults hold dependency manifests and lock files, CI configuration,
database migrations, authentication and secrets handling, the person's CLAUDE.md, large
deletions and large files; the person replaces them with a file of their own (`--risk FILE`,
saved) or turns them off (`--risk none`).

A pattern without a slash matches a file's name at any depth (`package.json`); one with a slash
matches the path or any of its tails (`migrations/*` holds `app/migrations/0001.py`); `*`
matches across folders, as in fnmatch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from session_scheduler.core.errors import BadInput
from session_scheduler.core.gates import one_line
from session_scheduler.core.schemas import schema_error

RULE_NAME = "^[A-Za-z0-9][A-Za-z0-9 ._'-]{0,60}$"
RISK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["rules"],
    "additionalProperties": False,
    "properties": {
        "rules": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "pattern": RULE_NAME},
                    "paths": {"type": "array", "items": {"type": "string", "minLength": 1}},
                    "deleted_lines_over": {"type": "integer", "minimum": 0},
                    "file_bytes_over": {"type": "integer", "minimum": 0},
                },
                "anyOf": [
                    {"required": ["paths"]},
                    {"required": ["deleted_lines_over"]},
                    {"required": ["file_bytes_over"]},
                ],
            },
        }
    },
}
FIX = "see docs/risk.md for the format, or give --risk default (or none)"


@dataclass(frozen=True)
class Rule:
    name: str
    paths: tuple[str, ...] = ()
    deleted_lines_over: int | None = None
    file_bytes_over: int | None = None


@dataclass(frozen=True)
class FileChange:
    """One file a feature changes, as the risk rules see it."""

    path: str
    deleted: int
    """Lines removed (0 for a binary file)."""
    size: int | None
    """Its size in bytes after the change (None: the change removes it)."""


DEFAULT_RULES: tuple[Rule, ...] = (
    Rule(
        "dependency manifests and lock files",
        (
            "package.json",
            "package-lock.json",
            "npm-shrinkwrap.json",
            "yarn.lock",
            "pnpm-lock.yaml",
            "requirements*.txt",
            "pyproject.toml",
            "poetry.lock",
            "uv.lock",
            "Pipfile",
            "Pipfile.lock",
            "setup.py",
            "setup.cfg",
            "Cargo.toml",
            "Cargo.lock",
            "go.mod",
            "go.sum",
            "Gemfile",
            "Gemfile.lock",
            "composer.json",
            "composer.lock",
            "pom.xml",
            "build.gradle*",
            "*.csproj",
        ),
    ),
    Rule(
        "CI configuration",
        (
            ".github/workflows/*",
            ".gitlab-ci.yml",
            ".circleci/*",
            "Jenkinsfile",
            ".travis.yml",
            "azure-pipelines.yml",
            ".buildkite/*",
            "bitbucket-pipelines.yml",
        ),
    ),
    Rule("database migrations", ("migrations/*", "migrate/*", "alembic/*", "*.sql")),
    Rule(
        "authentication and secrets",
        (
            "auth/*",
            "*auth*.py",
            "*auth*.js",
            "*auth*.ts",
            "*login*",
            "*password*",
            "*secret*",
            "*credential*",
            ".env*",
            "*.pem",
            "*.key",
        ),
    ),
    Rule("the person's CLAUDE.md", ("CLAUDE.md",)),
    Rule("a large deletion", deleted_lines_over=300),
    Rule("a large file", file_bytes_over=1_000_000),
)


def rules_from_json(data: Any) -> tuple[Rule, ...]:
    """Rules from a risk file or a saved config; BadInput (one line) when they do not fit."""
    wrong = schema_error(data, RISK_SCHEMA)
    if wrong is not None:
        raise BadInput(f"the risk rules are invalid {one_line(wrong)}: {FIX}")
    return tuple(
        Rule(r["name"], tuple(r.get("paths", ())), r.get("deleted_lines_over"), r.get("file_bytes_over"))
        for r in data["rules"]
    )


def rules_to_json(rules: Iterable[Rule]) -> dict[str, Any]:
    return {
        "rules": [
            {
                "name": r.name,
                **({"paths": list(r.paths)} if r.paths else {}),
                **({"deleted_lines_over": r.deleted_lines_over} if r.deleted_lines_over is not None else {}),
                **({"file_bytes_over": r.file_bytes_over} if r.file_bytes_over is not None else {}),
            }
            for r in rules
        ]
    }


def matches(pattern: str, path: str) -> bool:
    """Whether `pattern` holds `path` (see the module's text)."""
    parts = path.split("/")
    if "/" not in pattern:
        return fnmatchcase(parts[-1], pattern)
    return any(fnmatchcase("/".join(parts[i:]), pattern) for i in range(len(parts)))


def held_by(rules: Iterable[Rule], changes: Iterable[FileChange]) -> str | None:
    """Why a change must wait for a person: the first rule it matches, in words (None: none)."""
    changes = list(changes)
    for rule in rules:
        for pattern in rule.paths:
            hit = next((c.path for c in changes if matches(pattern, c.path)), None)
            if hit is not None:
                return f"{rule.name}: it changes {hit}"
        if rule.deleted_lines_over is not None:
            deleted = sum(c.deleted for c in changes)
            if deleted > rule.deleted_lines_over:
                return f"{rule.name}: it deletes {deleted} lines (more than {rule.deleted_lines_over})"
        if rule.file_bytes_over is not None:
            big = next((c for c in changes if c.size is not None and c.size > rule.file_bytes_over), None)
            if big is not None:
                return f"{rule.name}: {big.path} is {big.size} bytes (more than {rule.file_bytes_over})"
    return None
