"""Each lane's workdir: a git clone of the project that the scheduler makes and owns, beside the
project folder (`<project>.lanes/lane-N/`), never inside its work tree (tools that look upwards
for their configuration, `pytest` and `npm` among them, would find the project's), and never a
`git worktree` (its `.git` is a pointer into the project's repository, which the lane's sandbox
would have to be let write).

The clone shares nothing with the project's repository: it is made through git's transport
(`--no-local`: no hard-linked object a lane could rewrite in place, no alternates), and every git
command the scheduler runs on either side is hardened (`safe_git`), with the local transport
allowed for that command alone. What a lane's agent can change in its clone is judged by what git
answers, never by its spelling: a clone whose `.git` is not its own directory, or whose `main`
after a sync is not the project's, is made again. Work comes back by fetching the lane's branch
into the project's repository, from the project's side (its own config applies, not the clone's).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import git

from session_scheduler.core.errors import GitError
from session_scheduler.guard import safe_git
from session_scheduler.guard.sandbox import LANES_SUFFIX
from session_scheduler.repo import gitops

SUFFIX = LANES_SUFFIX


def root_of(project: Path) -> Path:
    """The folder of every lane's clone: beside the project folder, named after it."""
    return project.parent / f"{project.name}{SUFFIX}"


def path_of(project: Path, lane: int) -> Path:
    return root_of(project) / f"lane-{lane}"


def transport(repo: git.Repo) -> dict[str, str]:
    """The environment of one command that moves objects between the scheduler's own
    repositories: the hardened one, with the local (`file`) transport allowed, last so it wins."""
    if isinstance(repo.git, safe_git.HardenedGit) and not repo.git.names_read:
        repo.git.rev_parse("--git-dir")  # first: its config's driver names join its environment
    env = dict(repo.git.environment() or safe_git.environment())
    return safe_git.with_setting(env, "protocol.file.allow", "always")


def problem_of(path: Path) -> str | None:
    """Why the folder at `path` is not a lane's clone the scheduler can use (None: it is)."""
    if path.is_symlink() or not path.is_dir():
        return "it is not a folder" if path.exists() or path.is_symlink() else "it is missing"
    dot_git = path / ".git"
    if dot_git.is_symlink() or not dot_git.is_dir():
        return "its .git is not a folder of its own"
    alternates = dot_git / "objects" / "info" / "alternates"
    if alternates.is_symlink() or (alternates.exists() and not _blank(alternates)):
        return "it borrows objects from another repository"  # (an empty one: the sandbox's mount point)
    try:
        clone = safe_git.open(path)
        found = Path(str(clone.git.rev_parse("--absolute-git-dir"))).resolve()
        common = Path(str(clone.git.rev_parse("--path-format=absolute", "--git-common-dir"))).resolve()
        rewrites = clone.git.config("--get-regexp", r"^url\.", with_exceptions=False)
    except (git.GitCommandError, git.InvalidGitRepositoryError, git.NoSuchPathError):
        return "git cannot read it"
    if found != dot_git.resolve() or common != found:
        return "git finds another repository there"
    if str(rewrites).strip():  # no fetch of the project's main may be sent elsewhere
        return "its config rewrites where git fetches from"
    return None


def _blank(path: Path) -> bool:
    """Whether `path` is a regular file holding nothing but white space (git reads no alternate)."""
    try:
        return path.is_file() and not path.read_bytes()[:4096].strip() and path.stat().st_size < 4096
    except OSError:
        return False


def ensure(project_repo: git.Repo, project: Path, lane: int) -> tuple[git.Repo, str | None]:
    """Lane `lane`'s clone, made when missing and made again when it is not one the scheduler can
    use; (the clone, why it was made again: None when it was fine or new). Its `main` is the
    project's, checked out."""
    path = path_of(project, lane)
    problem = problem_of(path)
    if problem is None:
        return safe_git.open(path), None
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    runner = safe_git.HardenedGit(path.parent)
    runner.names_read = True  # no repository there yet: no config to read
    try:
        runner.clone(  # `main` alone: a lane is handed the branches it works on (`hand_over`)
            "--no-local", "--no-checkout", "--quiet", "--single-branch", "--branch", gitops.MAIN,
            str(project), str(path), env=transport(project_repo),
        )  # fmt: skip
    except git.GitCommandError as exc:
        raise GitError(
            f"cannot make lane {lane}'s clone in {path}: {str(exc.stderr).strip()[-300:]}"
        ) from None
    clone = safe_git.open(path)
    gitops.ensure_exclude(clone)  # the hand-off and scheduler files stay out of the lane's commits too
    for key in ("name", "email"):
        clone.git.config(f"user.{key}", project_repo.git.config(f"user.{key}"))
    clone.git.checkout("-q", "-B", gitops.MAIN, f"origin/{gitops.MAIN}")
    return clone, None if problem == "it is missing" else problem


def keep_leftovers(project_repo: git.Repo, clone: git.Repo, name: str, message: str) -> str | None:
    """What a session left uncommitted in the lane's clone (untracked files too; a merge or a
    commit it was interrupted in is aborted first), stashed there and kept in the project's
    repository as refs/scheduler/<name>, before the clone is synced for the next session (which
    would otherwise find it, or lose it); the ref's full name, or None when nothing was left."""
    gitops.clear_stale_lock(clone)
    if not gitops.stash_leftovers(clone, message):
        return None
    ref = f"refs/scheduler/{name}"
    project_repo.git.fetch(
        "--quiet", "--no-tags", "--no-write-fetch-head", str(clone.working_dir), f"+refs/stash:{ref}",
        env=transport(project_repo),
    )  # fmt: skip
    clone.git.stash("drop", "--quiet")
    return ref


def sync_main(clone: git.Repo, project: Path, main: str) -> None:
    """The lane's `main` becomes the project's `main` (`main`: its commit, read from the project),
    checked out; what the lane had on its own `main` goes (approved work lands through the merge
    queue, never from a lane's `main`). A clone that answers with another commit is an error for
    the caller to make it again."""
    refused = GitError(f"lane clone {clone.working_dir} did not take the project's main {main[:10]}")
    try:
        clone.git.fetch("--quiet", "--no-tags", str(project), gitops.MAIN, env=transport(clone))
        if str(clone.git.rev_parse("FETCH_HEAD")).strip() != main:  # fetched from elsewhere
            raise refused
        if gitops.current_branch(clone) == gitops.MAIN:
            clone.git.reset("--hard", "--quiet", main)
        else:
            clone.git.update_ref(f"refs/heads/{gitops.MAIN}", main)
    except git.GitCommandError:
        raise refused from None
    if gitops.head(clone, gitops.MAIN) != main:
        raise refused


def bring_back(project_repo: git.Repo, clone_path: Path, branch: str) -> str | None:
    """The lane's `branch` fetched into the project's repository as the same branch (the lane owns
    it while it holds the work); its tip, or None when the lane has no such branch."""
    if gitops.head(safe_git.open(clone_path), branch) is None:
        gitops.delete_branch(project_repo, branch)
        return None
    ref = f"refs/heads/{branch}"
    _fetch_into(project_repo, clone_path, f"+{ref}:{ref}", (gitops.MAIN, branch))
    return gitops.head(project_repo, branch)


def _fetch_into(project_repo: git.Repo, clone_path: Path, refspec: str, tips: tuple[str, ...]) -> None:
    """One fetch from a lane's clone into the project's repository. The project offers only the
    `tips` (its branches of those names) as what it has: the lane's work grows from them, and a
    project with thousands of branches would otherwise send every tip to be negotiated."""
    offered = [f"--negotiation-tip=refs/heads/{name}" for name in tips if gitops.head(project_repo, name)]
    project_repo.git.fetch(
        "--quiet", "--no-tags", "--no-write-fetch-head", *offered, str(clone_path), refspec,
        env=transport(project_repo),
    )  # fmt: skip


def take_main(project_repo: git.Repo, clone_path: Path, ref: str = "refs/scheduler/lanes/initial") -> str:
    """The lane's `main` fetched into the project's repository as `ref` (under refs/scheduler/):
    the INITIALIZER's skeleton, made while no other lane runs, or a REVIEW's merge; its commit."""
    _fetch_into(project_repo, clone_path, f"+refs/heads/{gitops.MAIN}:{ref}", (gitops.MAIN,))
    sha = gitops.ref_sha(project_repo, ref)
    if sha is None:
        raise GitError(f"lane clone {clone_path} has no {gitops.MAIN} to take")
    return sha


def hand_over(project_repo: git.Repo, clone: git.Repo, project: Path, branch: str) -> None:
    """The project's `branch` fetched into the lane's clone (work another lane began, or the
    queue sent back), replacing the clone's branch of that name."""
    ref = f"refs/heads/{branch}"
    if gitops.head(project_repo, branch) is None:
        raise GitError(f"the project has no branch {branch} to hand to a lane")
    clone.git.fetch(
        "--quiet", "--no-tags", "--update-head-ok", str(project), f"+{ref}:{ref}", env=transport(clone)
    )
