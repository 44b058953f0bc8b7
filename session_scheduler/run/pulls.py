"""Pull requests (`--land-on pr`): each feature that landed on the review branch is offered to
the person as a draft pull request on their forge, and what they did there comes back.

`publish` (after a run): a feature's change, applied on the person's branch (or, when it depends
on a feature whose pull request is still open, on that one's: stacked), is pushed to their remote
as `agents/pr/<feature>` and opened as a draft pull request whose body is its proof. `reconcile`
(before a run): a pull request merged on the forge counts as approved; one closed unmerged goes
back to a FIX with what people wrote on it as the review. What was opened is kept in
`.agent_logs/pulls.json`; nothing is opened twice.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import git

from session_scheduler.core.config import AgentConfig
from session_scheduler.core.errors import SchedulerError
from session_scheduler.core.layout import LOG_DIR
from session_scheduler.repo import gitops, landing
from session_scheduler.repo.forge import Forge, ForgeError
from session_scheduler.run import approval
from session_scheduler.store import progress
from session_scheduler.store.events import EventLog

PULLS = f"{LOG_DIR}/pulls.json"
PREFIX = "agents/pr/"
"""The branches pushed to the person's remote: `agents/pr/F003`."""
PUSH_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Opened:
    number: int
    url: str
    head: str
    base: str
    commit: str
    state: str = "open"


def opened(project: Path) -> dict[str, Opened]:
    path = project / PULLS
    if not path.exists():
        return {}
    data = progress.read_json(path)
    return {str(f): Opened(**entry) for f, entry in (data.get("pulls") or {}).items()}


def _keep(project: Path, pulls: dict[str, Opened]) -> None:
    progress.atomic_write_json(project / PULLS, {"pulls": {f: asdict(p) for f, p in pulls.items()}})


def publish(
    project: Path,
    config: AgentConfig,
    repo: git.Repo,
    forge: Forge,
    body: Callable[[str], str],
    say: Callable[[str], None],
) -> list[str]:
    """Open a draft pull request for every feature on the review branch that has none open and
    is not approved; the features it opened one for."""
    assert config.review_branch is not None
    trunk, target = config.review_branch, landing.person_branch(project)
    pulls, done = opened(project), approval.approvals(project)
    depends = {f: tuple(d) for f, d in approval.depends_of(project).items()}
    descriptions = approval.descriptions(project)
    made = []
    for feature, item in landing.placed(project, repo, trunk).items():
        if feature in done or (feature in pulls and pulls[feature].state in ("open", "merged")):
            continue
        on = next(
            (pulls[d] for d in reversed(depends.get(feature, ())) if d in pulls and pulls[d].state == "open"),
            None,
        )
        base, base_tip = (on.head, on.commit) if on is not None else (target, gitops.head(repo, target))
        if base_tip is None:
            raise ForgeError(
                f"your branch {target} is missing; create it, then run again to open pull requests"
            )
        tree = approval.three_way(repo, item.base, base_tip, item.merge)
        if isinstance(tree, tuple):
            say(
                f"  {feature} does not apply to {base} (it conflicts in {', '.join(tree)}): no pull request; `approve` it from {trunk}"
            )
            continue
        title = f"{feature}: {descriptions.get(feature) or 'a feature'}"
        commit = str(repo.git.commit_tree(tree, "-p", base_tip, "-m", title)).strip()
        head = f"{PREFIX}{feature}" if feature not in pulls else f"{PREFIX}{feature}-{pulls[feature].number}"
        push(project, config.remote, commit, head)
        pull = forge.open_pull(head, base, title, body(feature))
        pulls[feature] = Opened(pull.number, pull.url, head, base, commit)
        _keep(project, pulls)
        say(f"  pull request #{pull.number} for {feature} ({head} into {base}): {pull.url}")
        made.append(feature)
    return made


def push(project: Path, remote: str, commit: str, branch: str) -> None:
    """Push `commit` to the person's `remote` as `branch`, as the person's own git would (their
    config, credentials and transport), with no hook run (`--no-verify`)."""
    done = subprocess.run(
        ["git", "push", "--quiet", "--no-verify", "--force", remote, f"{commit}:refs/heads/{branch}"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=PUSH_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ForgeError(
            f"git push to {remote} failed ({said}); check the remote (`git remote -v`) and your access"
        )


def reconcile(
    project: Path,
    config: AgentConfig,
    repo: git.Repo,
    forge: Forge,
    log: EventLog,
    say: Callable[[str], None],
) -> None:
    """What the person did on the forge since the last run: a merged pull request approves its
    feature; one closed unmerged sends it back with what people wrote as the review."""
    pulls = opened(project)
    for feature, pull in list(pulls.items()):
        if pull.state != "open":
            continue
        state = forge.pull(pull.number)
        if state.state == "open":
            continue
        pulls[feature] = replace(pull, state=state.state)
        if state.state == "merged":
            commit = state.merge_commit or pull.commit
            approval.record_approval(project, [feature], commit)
            log.emit("approved", features=[feature], onto=f"{forge.name} #{pull.number}", commit=commit)
            say(f"  {feature}: pull request #{pull.number} was merged: approved")
        else:
            words = (
                " / ".join(" ".join(c.split()) for c in state.comments)
                or "the pull request was closed without a comment"
            )
            try:
                say("  " + approval.send_back(project, config, feature, words, log, say))
            except SchedulerError as exc:
                say(
                    f"  {feature}: pull request #{pull.number} was closed, but it cannot go back by itself ({exc})"
                )
        _keep(project, pulls)
