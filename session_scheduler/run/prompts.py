"""Load a role's prompt template and fill its `{{VARS}}` strictly."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from session_scheduler.core.config import AgentConfig, SessionType
from session_scheduler.core.errors import PromptError
from session_scheduler.core.machine import SessionState

PROMPTS_DIR = Path(__file__).resolve().parents[1] / "prompts"
EXAMPLE_SPEC = PROMPTS_DIR / "app_spec.txt"

TEMPLATES: dict[SessionType, str] = {
    SessionType.INITIALIZER: "initializer_prompt.md",
    SessionType.IMPLEMENT: "coding_prompt.md",
    SessionType.REVIEW: "reviewer_prompt.md",
    SessionType.FIX: "fix_prompt.md",
    SessionType.ARCHITECTURE: "architecture_reviewer_prompt.md",
}
FORMS: dict[str, str] = {
    "existing": "initializer_existing_prompt.md",
    "extend": "initializer_extend_prompt.md",
}
"""The INITIALIZER's other forms (its first form, `new`, is TEMPLATES'): planning on a codebase
the person had, and appending the features of a newer spec to a built project's list."""
ROLE_LINE = "# YOUR ROLE - {} AGENT"
DEFAULT_TEST_COMMAND = "./init.sh"
"""What the prompts tell agents to run when the project sets no --test-command."""
_VAR = re.compile(r"\{\{\s*([A-Za-z0-9_]*)\s*\}\}")
_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


def initializer_form(state: SessionState, existing_code: bool) -> str | None:
    """The INITIALIZER's form for the session about to run in `state` (None: another role):
    `extend` over a list the project has, `existing` on a codebase the person had when the
    project was adopted (`existing_code`), else `new`."""
    if state.lane.role is not SessionType.INITIALIZER:
        return None
    if state.backlog.features:
        return "extend"
    return "existing" if existing_code else "new"


def template_path(role: SessionType, prompts_dir: Path = PROMPTS_DIR, form: str | None = None) -> Path:
    if form in FORMS:
        return prompts_dir / FORMS[form]
    try:
        return prompts_dir / TEMPLATES[role]
    except KeyError:
        raise PromptError(f"{role} has no prompt template") from None


def substitute(template: str, variables: Mapping[str, str | int | None], name: str = "template") -> str:
    """Replace every `{{NAME}}`; an unknown, malformed or unfilled variable is an error."""
    missing: list[str] = []

    def fill(match: re.Match[str]) -> str:
        key = match.group(1)
        if not _NAME.match(key):
            raise PromptError(f"{name}: malformed variable {match.group(0)!r} (use {{{{UPPER_CASE}}}})")
        value = variables.get(key)
        if value is None or value == "":
            missing.append(key)
            return match.group(0)
        return str(value)

    text = _VAR.sub(fill, template)
    if missing:
        raise PromptError(f"{name}: no value for {', '.join(sorted(set(missing)))}")
    return text


def render(
    role: SessionType,
    variables: Mapping[str, str | int | None],
    prompts_dir: Path = PROMPTS_DIR,
    form: str | None = None,
) -> str:
    """The role's full instructions (in its `form`, for an INITIALIZER), checked to begin with its role line."""
    path = template_path(role, prompts_dir, form)
    try:
        template = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PromptError(f"cannot read prompt template {path}: {exc.strerror}") from None
    expected = ROLE_LINE.format(role.value)
    if template.splitlines()[:1] != [expected]:
        raise PromptError(f"{path.name} must begin with the line {expected!r}")
    shared = {
        name: (prompts_dir / file).read_text(encoding="utf-8").rstrip("\n") for name, file in PARTS.items()
    }
    return substitute(template, {**shared, **variables}, path.name)


PARTS = {
    "HANDOFF_CONTRACT": "handoff.md",
    "FEATURE_LIST_FORMAT": "feature_list_format.md",
    "REVIEW_CHECKLIST": "review_checklist.md",
}
"""The parts a template may include: each role's template names only the ones it needs."""

READS: dict[SessionType, tuple[str, ...]] = {
    SessionType.INITIALIZER: ("app_spec.txt",),
    SessionType.IMPLEMENT: ("app_spec.txt",),
    SessionType.REVIEW: (),
    SessionType.FIX: (),
    SessionType.ARCHITECTURE: ("app_spec.txt",),
}
"""The project files each role's prompt tells the agent to read, besides its brief, git's
output and the code (none of them grows with the number of features or sessions)."""


def kickoff(role: SessionType, session_id: int, brief: str = "") -> str:
    """The session's first user message: its brief; the role's instructions travel in the system prompt."""
    opening = (
        f"Session {session_id}. {ROLE_LINE.format(role.value)[2:]}: follow your role "
        "instructions from the system prompt."
    )
    return f"{opening} Your brief (also the `brief` hand-off tool):\n\n{brief}" if brief else opening


def role_variables(
    project_name: str, config: AgentConfig, state: SessionState
) -> dict[str, str | int | None]:
    """The `{{VARS}}` of the session about to run in `state` (None where a role has no value)."""
    lane, work = state.lane, state.lane.work
    arch = work is not None and work.architecture_review is not None
    return {
        "PROJECT_NAME": project_name,
        "SESSION_ID": state.next_number,
        "FEATURE_COUNT": config.feature_count,
        "FEATURES_COMPLETED": state.backlog.completed,
        "CURRENT_FEATURE": (work.feature_id or f"the fixes of architecture review {work.architecture_review}")
        if work
        else None,
        "COMMIT_SCOPE": (work.feature_id or f"arch-{work.architecture_review}") if work else None,
        "CURRENT_BRANCH": work.branch if work else None,
        "REVIEW_ID": lane.open_review,
        "FIX_ROUND": lane.fix_rounds,
        "REVIEW_KIND": "feature",
        "REVIEW_FEATURE_ID": "null" if arch or work is None else f'"{work.feature_id}"',
        "TEST_COMMAND": config.test_command or DEFAULT_TEST_COMMAND,
    }
