"""Risk rules (core/risk.py): what holds approved work for the person, as data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from session_scheduler.core.config import AgentConfig, risk_rules
from session_scheduler.core.errors import BadInput
from session_scheduler.core.risk import (
    DEFAULT_RULES,
    FileChange,
    Rule,
    held_by,
    matches,
    rules_from_json,
    rules_to_json,
)
from session_scheduler.view.cli import read_risk


def change(path: str, deleted: int = 0, size: int | None = 10) -> FileChange:
    return FileChange(path, deleted, size)


@pytest.mark.parametrize(
    ("pattern", "path", "held"),
    [
        ("package.json", "package.json", True),
        ("package.json", "web/package.json", True),
        ("package.json", "package.json.bak", False),
        ("requirements*.txt", "srv/requirements-dev.txt", True),
        ("migrations/*", "app/migrations/0001_init.py", True),
        ("migrations/*", "migrations/0001.sql", True),
        ("migrations/*", "app/migration.py", False),
        (".github/workflows/*", ".github/workflows/ci.yml", True),
        (".github/workflows/*", "docs/.github.md", False),
        ("CLAUDE.md", "docs/CLAUDE.md", True),
        ("CLAUDE.md", "CLAUDE.md.orig", False),
    ],
)
def test_a_pattern_without_a_slash_is_a_name_at_any_depth_one_with_a_slash_any_tail(
    pattern: str, path: str, held: bool
) -> None:
    assert matches(pattern, path) is held


def test_the_first_rule_that_matches_says_why_in_words() -> None:
    rules = (Rule("manifests", ("package.json",)), Rule("ci", (".gitlab-ci.yml",)))
    assert held_by(rules, [change("src/a.py"), change("web/package.json")]) == (
        "manifests: it changes web/package.json"
    )
    assert held_by(rules, [change(".gitlab-ci.yml"), change("package.json")]) == (
        "manifests: it changes package.json"
    )
    assert held_by(rules, [change("src/a.py")]) is None
    assert held_by((), [change("package.json")]) is None


def test_a_deletion_counts_every_file_s_removed_lines_over_the_bound() -> None:
    rules = (Rule("large deletion", deleted_lines_over=300),)
    assert held_by(rules, [change("a.py", 200), change("b.py", 100)]) is None  # 300 is not over
    assert held_by(rules, [change("a.py", 200), change("b.py", 101)]) == (
        "large deletion: it deletes 301 lines (more than 300)"
    )


def test_a_file_over_the_size_is_held_a_removed_one_is_not() -> None:
    rules = (Rule("large file", file_bytes_over=1000),)
    assert held_by(rules, [change("big.bin", size=1000)]) is None
    assert held_by(rules, [change("gone.bin", deleted=5, size=None)]) is None
    assert (
        held_by(rules, [change("big.bin", size=1001)]) == "large file: big.bin is 1001 bytes (more than 1000)"
    )


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        ("package-lock.json", "dependency manifests and lock files"),
        ("api/pyproject.toml", "dependency manifests and lock files"),
        (".github/workflows/test.yml", "CI configuration"),
        ("db/migrations/0002.py", "database migrations"),
        ("schema.sql", "database migrations"),
        ("server/auth/session.py", "authentication and secrets"),
        (".env.production", "authentication and secrets"),
        ("CLAUDE.md", "the person's CLAUDE.md"),
    ],
)
def test_the_defaults_hold_what_the_issue_names(path: str, rule: str) -> None:
    assert (held_by(DEFAULT_RULES, [change(path)]) or "").startswith(f"{rule}: ")


def test_the_defaults_let_ordinary_code_land() -> None:
    ordinary = [
        change("todo/cmd_add.py", 3),
        change("tests/test_add.py"),
        change("README.md"),
        change("CHANGELOG.md"),
    ]
    assert held_by(DEFAULT_RULES, ordinary) is None


def test_rules_read_back_as_written_and_a_bad_file_is_one_line() -> None:
    assert rules_from_json(rules_to_json(DEFAULT_RULES)) == DEFAULT_RULES
    for bad, said in (
        ({"rules": [{"name": "x"}]}, "the risk rules are invalid"),
        ({"rules": [{"name": "x", "paths": "package.json"}]}, "the risk rules are invalid"),
        ({"rules": [{"name": "x", "deleted_lines_over": -1}]}, "the risk rules are invalid"),
        ({"rules": [{"name": "", "paths": ["a"]}]}, "the risk rules are invalid"),
        ({"rule": []}, "the risk rules are invalid"),
    ):
        with pytest.raises(BadInput, match=said) as refused:
            rules_from_json(bad)
        assert "\n" not in str(refused.value) and "docs/risk.md" in str(refused.value)


def test_the_config_keeps_the_defaults_none_or_the_person_s(tmp_path: Path) -> None:
    assert risk_rules(AgentConfig()) == DEFAULT_RULES
    assert risk_rules(AgentConfig(risk={"rules": []})) == ()
    mine = tmp_path / "risk.json"
    mine.write_text(json.dumps({"rules": [{"name": "web", "paths": ["web/*"]}]}))
    assert read_risk("default") is None and read_risk("none") == {"rules": []}
    assert risk_rules(AgentConfig(risk=read_risk(str(mine)))) == (Rule("web", ("web/*",)),)
    with pytest.raises(BadInput):
        AgentConfig(risk={"rules": [{"name": "x"}]})
