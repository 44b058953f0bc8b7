"""Every git operation the scheduler performs itself (agents run git on their own)."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import git

import crashpoints
from errors import GitError
from layout import NEVER_IN_GIT, ignore_pattern

MAIN = "main"
SCHEDULER_PATHS = tuple(ignore_pattern(name) for name in NEVER_IN_GIT)
"""Hand-off and scheduler files as ignore patterns: never in git, whatever a branch's .gitignore says."""
IGNORED = (
    "# scheduler hand-off and state files: kept out of git so checkouts never change them",
    *SCHEDULER_PATHS,
    "__pycache__/",
    "*.pyc",
    "node_modules/",
    ".venv/",
    ".pytest_cache/",
    ".mypy_cache/",
    ".ruff_cache/",
    ".coverage",
    "*.egg-info/",
    "# dotfiles Claude Code's sandbox mounts placeholders over (they break `git add`)",
    ".bashrc",
    ".bash_profile",
    ".gitconfig",
    ".gitmodules",
    ".mcp.json",
    ".idea",
)


TRACKED = (".gitignore", "app_spec.txt")


SETUP_COMMIT = "chore: app spec and .gitignore for the scheduler's files"


def open_repo(project: Path) -> git.Repo:
    """Open the project's repository, creating it (branch `main`, identity, .gitignore) if needed."""
    try:
        if not (project / ".git").exists():
            repo = git.Repo.init(project, initial_branch=MAIN)
        else:
            repo = git.Repo(project)
        _ensure_identity(repo)
        _ensure_exclude(repo)  # first: a stash below must leave the scheduler's files where they are
        spec = project / "app_spec.txt"
        spec_text = spec.read_bytes() if spec.is_file() else None
        if repo.head.is_valid():
            if head(repo, MAIN) is None:  # an existing repository whose main line has another name
                repo.git.branch(MAIN, "HEAD")
            checkout(repo, MAIN)
        if spec_text is not None and not spec.exists():  # set aside with a user's uncommitted work
            spec.write_bytes(spec_text)
        _ensure_gitignore(repo, project)
        return repo
    except git.GitCommandError as exc:
        raise GitError(f"git failed in {project}: {exc.stderr.strip() or exc}") from None


def _ensure_identity(repo: git.Repo) -> None:
    """Give the repository its own committer identity: agents run with a private HOME."""
    local = repo.config_reader("repository")
    effective = repo.config_reader()
    defaults = {"name": "autonomous-agent", "email": "autonomous-agent@localhost"}
    with repo.config_writer() as writer:
        for key, fallback in defaults.items():
            if not local.has_option("user", key):
                value = effective.get_value("user", key, fallback)
                writer.set_value("user", key, str(value))


def _ensure_gitignore(repo: git.Repo, project: Path) -> None:
    """Keep hand-off and scheduler files out of git.

    `.git/info/exclude` holds the scheduler's paths on every start (no commit can change
    it); the project's `.gitignore` gets them too, together with the spec, in one commit on
    `main` the first time only, so a resumed run never moves `main` under a session.
    """
    _ensure_exclude(repo)
    spec_untracked = (project / "app_spec.txt").exists() and not repo.git.ls_files("app_spec.txt")
    if repo.head.is_valid() and not spec_untracked:
        return
    path = project / ".gitignore"
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    missing = [line for line in IGNORED if line not in lines]
    if missing:
        path.write_text("\n".join([*lines, *missing]) + "\n", encoding="utf-8")
    repo.git.add(*[name for name in TRACKED if (project / name).exists()])
    repo.git.commit("-m", SETUP_COMMIT, "--no-verify")


def _ensure_exclude(repo: git.Repo) -> None:
    """The scheduler's paths in `.git/info/exclude`, which no commit can change."""
    exclude = Path(repo.git_dir) / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    known = exclude.read_text(encoding="utf-8").splitlines() if exclude.exists() else []
    if any(line not in known for line in SCHEDULER_PATHS):
        extra = [line for line in SCHEDULER_PATHS if line not in known]
        exclude.write_text("\n".join([*known, "# the scheduler's files", *extra]) + "\n", encoding="utf-8")


def commits_after_setup(repo: git.Repo) -> int:
    """How many commits `main` has after the scheduler's own first one (0 when it has none)."""
    subjects = str(repo.git.log("--format=%s", MAIN)).splitlines() if head(repo, MAIN) else []
    return subjects.index(SETUP_COMMIT) if SETUP_COMMIT in subjects else 0


def head(repo: git.Repo, branch: str) -> str | None:
    """The commit a branch points at, or None when it does not exist."""
    try:
        return str(repo.git.rev_parse("--verify", "--quiet", f"refs/heads/{branch}"))
    except git.GitCommandError:
        return None


def is_ancestor(repo: git.Repo, ancestor: str, descendant: str) -> bool:
    try:
        repo.git.merge_base("--is-ancestor", ancestor, descendant)
        return True
    except git.GitCommandError:
        return False


def current_branch(repo: git.Repo) -> str | None:
    try:
        return str(repo.git.symbolic_ref("--quiet", "--short", "HEAD"))
    except git.GitCommandError:
        return None


def set_branch(repo: git.Repo, branch: str, sha: str) -> None:
    """Move `branch` back to `sha` (the undo of a forbidden commit), keeping stray work stashed."""
    if current_branch(repo) == branch:
        stash_leftovers(repo, f"scheduler: work left when {branch} was reset")
        repo.git.reset("--hard", sha)
    else:
        repo.git.branch("-f", branch, sha)


def keep_ref(repo: git.Repo, name: str, sha: str) -> None:
    """Keep a commit reachable under refs/scheduler/<name> (undone or rejected work)."""
    repo.git.update_ref(f"refs/scheduler/{name}", sha)


def delete_branch(repo: git.Repo, branch: str) -> None:
    if head(repo, branch) is None:
        return
    if current_branch(repo) == branch:
        checkout(repo, MAIN)
    repo.git.branch("-D", branch)


def create_branch(repo: git.Repo, branch: str, at: str) -> None:
    if head(repo, branch) is None:
        repo.git.branch(branch, at)


def abort_unfinished(repo: git.Repo) -> None:
    """Abort a merge, rebase or cherry-pick an agent left half done."""
    git_dir = Path(repo.git_dir)
    for marker, command in (
        ("MERGE_HEAD", ("merge", "--abort")),
        ("rebase-merge", ("rebase", "--abort")),
        ("rebase-apply", ("rebase", "--abort")),
        ("CHERRY_PICK_HEAD", ("cherry-pick", "--abort")),
    ):
        if (git_dir / marker).exists():
            repo.git.execute(["git", *command])


def stash_leftovers(repo: git.Repo, message: str) -> bool:
    """Stash uncommitted work (untracked files too) so nothing an agent left is lost."""
    abort_unfinished(repo)
    if not repo.is_dirty(untracked_files=True):
        return False
    # The scheduler's own files are in .git/info/exclude, so --include-untracked leaves them
    # where they are (naming them as pathspecs would make git refuse ignored paths). A spec not
    # committed yet (an existing repository's first run) stays too: the first session reads it.
    spec_untracked = Path(str(repo.working_tree_dir), "app_spec.txt").exists() and not repo.git.ls_files("app_spec.txt")
    keep = ["--", ".", ":(exclude)app_spec.txt"] if spec_untracked else []
    repo.git.stash("push", "--include-untracked", "-m", message, *keep)
    crashpoints.reached("stashed")
    return True


def stashes(project: Path) -> list[str]:
    """`git stash list`, newest first (empty without a repository)."""
    if not (project / ".git").exists():
        return []
    return [line for line in git.Repo(project).git.stash("list").splitlines() if line.strip()]


def clear_stale_lock(repo: git.Repo) -> bool:
    """Remove an index.lock left by a git process that was killed with its session.

    Only called between sessions, under the project lock, when no agent can be running git.
    """
    lock = Path(repo.git_dir) / "index.lock"
    if lock.exists():
        lock.unlink()
        return True
    return False


def branches(repo: git.Repo) -> dict[str, str]:
    """Every local branch and the commit it points at."""
    out = repo.git.for_each_ref("--format=%(refname:short) %(objectname)", "refs/heads/")
    return dict(line.split(" ", 1) for line in out.splitlines() if line.strip())


def branch_view(project: Path) -> tuple[str | None, frozenset[str]]:
    """The checked-out branch (None when detached) and the local branches, changing nothing."""
    if not (project / ".git").exists():
        return None, frozenset()
    repo = git.Repo(project)
    return current_branch(repo), frozenset(branches(repo))


def changed_paths(repo: git.Repo, base: str, tip: str) -> list[str]:
    """Files that differ between two commits."""
    return [p for p in repo.git.diff("--name-only", base, tip).splitlines() if p]


def parents(repo: git.Repo, sha: str) -> list[str]:
    return str(repo.git.rev_list("--parents", "-n", "1", sha)).split()[1:]


def checkout(repo: git.Repo, branch: str) -> None:
    """Check out `branch`, stashing whatever an earlier session left uncommitted."""
    if current_branch(repo) == branch and not repo.is_dirty(untracked_files=True):
        return
    stash_leftovers(repo, f"scheduler: leftovers before checking out {branch}")
    repo.git.checkout(branch)


def run_tests_at(repo: git.Repo, sha: str, command: str, timeout: float = 900) -> tuple[bool, str]:
    """Run the project's test command in a clean worktree of `sha`; (passed, output tail)."""
    with tempfile.TemporaryDirectory(prefix="agent-tests-") as tmp:
        tree = Path(tmp) / "tree"
        repo.git.worktree("add", "--detach", str(tree), sha)
        try:
            proc = subprocess.run(
                ["bash", "-c", command],
                cwd=tree,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
            output = (proc.stdout + proc.stderr)[-2000:]
            return proc.returncode == 0, output
        except subprocess.TimeoutExpired:
            return False, f"test command timed out after {timeout:.0f}s"
        finally:
            repo.git.worktree("remove", "--force", str(tree))
