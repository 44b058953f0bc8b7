"""The hand-off contract between sessions: what a session of one role may change in the files.

Pure: compares the parsed files before and after a session and lists every violation.
"""

from __future__ import annotations

import itertools
import operator

from session_scheduler.core.config import SessionType
from session_scheduler.core.features import extension_problems, feature_list_problems
from session_scheduler.core.policy import POLICIES, policy
from session_scheduler.store.progress import Handoff, only_passes_differ


def _holders(right: str) -> str:
    """The roles that have a right, for messages ("REVIEW", "FIX", ...)."""
    return " or ".join(role.value for role, rights in POLICIES.items() if getattr(rights, right))


def check_invariants(
    before: Handoff, after: Handoff, role: SessionType, *, extension: bool = False
) -> list[str]:
    """Violations of the hand-off contract by a session of `role` (empty when clean). `extension`:
    the INITIALIZER's extend form, which may append features and do nothing else to the list."""
    rights = policy(role)
    problems: list[str] = []
    unchanged = before.feature_list is not None and before.feature_list is after.feature_list
    """The same validated version of the file (progress.load_handoff reads each version once)."""
    same_features = before.feature_list is not None and (
        unchanged or only_passes_differ(before.features(), after.features())
    )
    """The features as they were but for `passes`: their ids were checked when they were listed."""
    ids = [] if same_features else list(map(operator.itemgetter("id"), after.features()))
    if ids:
        problems.extend(feature_list_problems(after.features()))
    if before.feature_list is not None and extension and not same_features:
        problems.extend(extension_problems(before.features(), after.features()))
    elif before.feature_list is not None:
        if not same_features:
            problems.append("features were added, removed or edited after the INITIALIZER")
        if not unchanged and before.passing() != after.passing() and not rights.sets_passes:
            problems.append(f"{role.value} changed `passes`; only {_holders('sets_passes')} may")
    elif not rights.creates_feature_list and after.feature_list is not None:
        problems.append(
            f"{role.value} created feature_list.json; only {_holders('creates_feature_list')} may"
        )
    for label, key, old, new in (
        ("reviews", "review_id", before.review_list(), after.review_list()),
        ("fixes", "fix_id", before.fix_list(), after.fix_list()),
    ):
        if new[: len(old)] != old:
            problems.append(f"earlier entries of reviews.json `{label}` were changed or removed")
        numbers = [entry[key] for entry in new]
        if any(b <= a for a, b in itertools.pairwise(numbers)):
            problems.append(f"reviews.json `{label}` IDs must increase ({key}: {numbers})")
    kind = rights.review_kind
    added = after.review_list()[len(before.review_list()) :]
    if any(review["kind"] != kind for review in added):
        problems.append(f"{role.value} appended a review it may not write ({kind or 'no'} reviews only)")
    if len(after.fix_list()) > len(before.fix_list()) and not rights.appends_fixes:
        problems.append(f"{role.value} appended a fix entry; only {_holders('appends_fixes')} may")
    old_sessions = (before.progress or {}).get("sessions", [])
    sessions = (after.progress or {}).get("sessions", [])
    if sessions[: len(old_sessions)] != old_sessions:
        problems.append("earlier session entries of progress.json were changed or removed")
    problems.extend(
        f"progress.json: session {entry.get('session_id')} reports outcome {entry.get('outcome')!r}; "
        f"{role.value} reports {' or '.join(rights.outcomes)}"
        for entry in sessions[len(old_sessions) :]
        if entry.get("outcome") not in rights.outcomes
    )
    return problems
