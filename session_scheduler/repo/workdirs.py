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

import contextlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

import git

from session_scheduler.core.errors import GitError, StateError
from session_scheduler.guard import safe_git
from session_scheduler.guard.sandbox import LANES_SUFFIX
from session_scheduler.repo import gitops
from session_scheduler.store import progress

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
    return inspect(path)[1]


def inspect(path: Path) -> tuple[git.Repo | None, str | None]:
    """The lane's clone at `path` opened (None when it is not one the scheduler can use) and why
    it is not (None: it is)."""
    if path.is_symlink() or not path.is_dir():
        return None, "it is not a folder" if path.exists() or path.is_symlink() else "it is missing"
    dot_git = path / ".git"
    if dot_git.is_symlink() or not dot_git.is_dir():
        return None, "its .git is not a folder of its own"
    if _borrows(dot_git):
        return None, "it borrows objects from another repository"
    try:
        clone = safe_git.open(path)
        found, common = str(
            clone.git.rev_parse("--absolute-git-dir", "--path-format=absolute", "--git-common-dir")
        ).splitlines()
        rewrites = clone.git.rewrites if isinstance(clone.git, safe_git.HardenedGit) else ("?",)
    except (git.GitCommandError, git.InvalidGitRepositoryError, git.NoSuchPathError, ValueError):
        return None, "git cannot read it"
    if Path(found).resolve() != dot_git.resolve() or Path(common).resolve() != Path(found).resolve():
        return None, "git finds another repository there"
    if rewrites:  # no fetch of the project's main may be sent elsewhere
        return None, "its config rewrites where git fetches from"
    return clone, None


def _borrows(dot_git: Path) -> bool:
    """Whether the repository in `dot_git` names alternates: object stores of other repositories
    (an empty file is the sandbox's mount point: git reads no alternate from it)."""
    alternates = dot_git / "objects" / "info" / "alternates"
    return alternates.is_symlink() or (alternates.exists() and not _blank(alternates))


def _blank(path: Path) -> bool:
    """Whether `path` is a regular file holding nothing but white space (git reads no alternate)."""
    try:
        return path.is_file() and not path.read_bytes()[:4096].strip() and path.stat().st_size < 4096
    except OSError:
        return False


def ensure(
    project_repo: git.Repo, project: Path, lane: int, trunk: str = gitops.MAIN
) -> tuple[git.Repo, str | None]:
    """Lane `lane`'s clone, made when missing and made again when it is not one the scheduler can
    use; (the clone, why it was made again: None when it was fine or new). Its `main` is the
    project's `trunk` (where work lands: `main`, or a review branch), checked out."""
    path = path_of(project, lane)
    found, problem = inspect(path)
    if found is not None:
        return found, None
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    runner = safe_git.HardenedGit(path.parent)
    runner.names_read = True  # no repository there yet: no config to read
    try:
        runner.clone(  # `main` alone: a lane is handed the branches it works on (`hand_over`)
            "--no-local", "--no-checkout", "--quiet", "--single-branch", "--branch", trunk,
            str(project), str(path), env=transport(project_repo),
        )  # fmt: skip
    except git.GitCommandError as exc:
        raise GitError(
            f"cannot make lane {lane}'s clone in {path}: {str(exc.stderr).strip()[-300:]}"
        ) from None
    clone = safe_git.open(path)
    gitops.ensure_exclude(clone)  # the hand-off and scheduler files stay out of the lane's commits too
    for key, value in zip(("name", "email"), safe_git.identity(project_repo), strict=True):
        clone.git.config(f"user.{key}", value)  # the agent's commits: its HOME is private
    clone.git.checkout("-q", "-B", gitops.MAIN, f"origin/{trunk}")
    return clone, None if problem == "it is missing" else problem


def keep_leftovers(
    project_repo: git.Repo,
    clone: git.Repo,
    name: str,
    message: str,
    guard: contextlib.AbstractContextManager[object] | None = None,
) -> str | None:
    """What a session left uncommitted in the lane's clone (untracked files too; a merge or a
    commit it was interrupted in is aborted first), stashed there and kept in the project's
    repository as refs/scheduler/<name>, before the clone is synced for the next session (which
    would otherwise find it, or lose it); the ref's full name, or None when nothing was left.
    `guard`: held while the stash is fetched into the project (the clone is the caller's alone)."""
    gitops.clear_stale_locks(clone)
    if not gitops.stash_leftovers(clone, message):
        return None
    ref = f"refs/scheduler/{name}"
    with guard or contextlib.nullcontext():
        project_repo.git.fetch(
            "--quiet", "--no-tags", "--no-write-fetch-head", str(clone.working_dir), f"+refs/stash:{ref}",
            env=transport(project_repo),
        )  # fmt: skip
    clone.git.stash("drop", "--quiet")
    return ref


def sync_main(clone: git.Repo, project: Path, main: str, source: str = f"refs/heads/{gitops.MAIN}") -> None:
    """The lane's `main` becomes commit `main`, which the project's ref `source` holds (its `main`
    or review branch; or the lane's approved merge, waiting to land, under refs/scheduler/);
    what the lane had on its own `main` goes (approved work lands through the merge queue, never
    from a lane's `main`). Fetched only when the clone's `main` is another commit (after the lane's
    own REVIEW merge, or a session that did not touch `main`, it is that commit already). The
    caller checks `main` or the work's branch out (`-f`); a clone that cannot (an object missing)
    or that answers with another commit is an error for the caller to make it again."""
    if gitops.head(clone, gitops.MAIN) == main:
        return
    refused = GitError(f"lane clone {clone.working_dir} did not take the project's main {main[:10]}")
    try:
        clone.git.fetch("--quiet", "--no-tags", str(project), source, env=transport(clone))
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


def bring_back(
    project_repo: git.Repo, lane: git.Repo | Path, branch: str, trunk: str = gitops.MAIN
) -> str | None:
    """The lane's `branch` brought into the project's repository as the same branch (the lane owns
    it while it holds the work); its tip, or None when the lane has no such branch. `lane`: its
    clone, opened or its folder."""
    clone = _opened(lane)
    tip = gitops.head(clone, branch)
    if tip is None:
        gitops.delete_branch(project_repo, branch)
        return None
    ref = f"refs/heads/{branch}"
    if gitops.head(project_repo, branch) != tip:  # (a REVIEW leaves it where it was)
        _carry(project_repo, clone, ref, tip, ref, (trunk, branch))
    return gitops.head(project_repo, branch)


def _opened(lane: git.Repo | Path) -> git.Repo:
    return lane if isinstance(lane, git.Repo) else safe_git.open(lane)


def _carry(
    project_repo: git.Repo, clone: git.Repo, source: str, tip: str, ref: str, tips: tuple[str, ...]
) -> None:
    """The lane's commit `tip` (its ref `source`) made the project's `ref`, with every object of it the project
    lacks. The objects go as a pack made in the clone of what `tip` has and the project's `tips`
    (its branches of those names) do not, unpacked or indexed in the project (git checks every
    object it takes in) and walked from `tip` to those tips (every object there) before `ref`
    moves: one small pack, where a fetch would first mark every ref the project has (a project
    with thousands of branches pays for each). A clone that cannot make that pack (it lacks one
    of those tips, or borrows objects) is fetched from instead."""
    have = [sha for sha in (gitops.head(project_repo, name) for name in tips) if sha]
    if _borrows(Path(clone.git_dir)) or not _pack_into(project_repo, clone, tip, have):
        _fetch_into(project_repo, Path(str(clone.working_dir)), f"+{source}:{ref}", tips)
        return
    project_repo.git.update_ref(ref, tip)


def _pack_into(project_repo: git.Repo, clone: git.Repo, tip: str, have: list[str]) -> bool:
    """The objects of `tip` that `have` lacks, packed in `clone` and taken in by the project's
    repository, connected (whether it went: False when the clone could not make the pack)."""
    revisions = "".join(f"{line}\n" for line in (tip, *(f"^{sha}" for sha in have))).encode()
    with tempfile.TemporaryFile() as wanted, tempfile.TemporaryFile() as pack:
        wanted.write(revisions)
        wanted.seek(0)
        try:
            clone.git.pack_objects(
                "--revs",
                "--thin",
                "--stdout",
                "--delta-base-offset",
                "-q",
                istream=wanted,
                output_stream=pack,
            )
        except git.GitCommandError:
            return False
        pack.flush()
        header = os.pread(pack.fileno(), 12, 0)  # `PACK`, its version, how many objects
        os.lseek(pack.fileno(), 0, os.SEEK_SET)  # git reads the file from its start
        count = int.from_bytes(header[8:12], "big") if len(header) == 12 else 0
        if count > 0:
            taker = "unpack-objects" if count < UNPACK_LIMIT else "index-pack"
            arguments = ("-q",) if taker == "unpack-objects" else ("--stdin", "--fix-thin")
            project_repo.git.execute(["git", taker, *arguments], istream=pack)
    project_repo.git.rev_list("--objects", "--quiet", tip, "--not", *have, "--")
    return True


UNPACK_LIMIT = 100
"""Fewer objects than this are unpacked loose, more kept as a pack (git's `fetch.unpackLimit`)."""


def _fetch_into(project_repo: git.Repo, clone_path: Path, refspec: str, tips: tuple[str, ...]) -> None:
    """One fetch from a lane's clone into the project's repository. The project offers only the
    `tips` (its branches of those names) as what it has: the lane's work grows from them, and a
    project with thousands of branches would otherwise send every tip to be negotiated."""
    offered = [f"--negotiation-tip=refs/heads/{name}" for name in tips if gitops.head(project_repo, name)]
    project_repo.git.fetch(
        "--quiet", "--no-tags", "--no-write-fetch-head", *offered, str(clone_path), refspec,
        env=transport(project_repo),
    )  # fmt: skip


def take_main(
    project_repo: git.Repo,
    lane: git.Repo | Path,
    ref: str = "refs/scheduler/lanes/initial",
    trunk: str = gitops.MAIN,
) -> str:
    """The lane's `main` brought into the project's repository as `ref` (under refs/scheduler/):
    the INITIALIZER's skeleton, made while no other lane runs, or a REVIEW's merge; its commit.
    `lane`: its clone, opened or its folder."""
    clone = _opened(lane)
    tip = gitops.head(clone, gitops.MAIN)
    if tip is None:
        raise GitError(f"lane clone {clone.working_dir} has no {gitops.MAIN} to take")
    _carry(project_repo, clone, f"refs/heads/{gitops.MAIN}", tip, ref, (trunk,))
    sha = gitops.ref_sha(project_repo, ref)
    if sha is None:
        raise GitError(f"lane clone {clone.working_dir} has no {gitops.MAIN} to take")
    return sha


def hand_over(project_repo: git.Repo, clone: git.Repo, project: Path, branch: str) -> None:
    """The project's `branch` fetched into the lane's clone (work another lane began, or the
    queue sent back), replacing the clone's branch of that name."""
    ref = f"refs/heads/{branch}"
    tip = gitops.head(project_repo, branch)
    if tip is None:
        raise GitError(f"the project has no branch {branch} to hand to a lane")
    if gitops.head(clone, branch) == tip:  # the lane's own, as it was brought back
        return
    clone.git.fetch(
        "--quiet", "--no-tags", "--update-head-ok", str(project), f"+{ref}:{ref}", env=transport(clone)
    )


def place_local_files(project: Path, clone: git.Repo, names: tuple[str, ...]) -> None:
    """Copy the project's local files `names` (`--local-file`: untracked files its app needs) into
    the lane's clone at the same paths, each listed in the clone's `.git/info/exclude` so that a
    session's `git add -A` leaves it out. Written through no link the clone holds: a folder on
    the way that is not a folder of the clone's own is an error (the caller makes the clone
    again). A file the project no longer has is left out."""
    root = Path(str(clone.working_dir))
    exclude = Path(clone.git_dir) / "info" / "exclude"
    listed = exclude.read_text(encoding="utf-8").splitlines() if exclude.is_file() else []
    wanted = [f"/{name}" for name in names if f"/{name}" not in listed]
    if wanted:
        exclude.parent.mkdir(parents=True, exist_ok=True)
        exclude.write_text("\n".join([*listed, "# the project's local files (--local-file)", *wanted]) + "\n")
    for name in names:
        try:
            content = progress.read_regular(project / name)
            mode = stat.S_IMODE(os.stat(project / name, follow_symlinks=False).st_mode)
        except (OSError, StateError):  # gone, or no longer a file (the run's start said so)
            continue
        folder = root
        for part in name.split("/")[:-1]:
            folder = folder / part
            if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
                raise GitError(
                    f"cannot copy the local file {name} into {root}: {folder} is not a folder there"
                )
            folder.mkdir(exist_ok=True)
        if (root / name).is_dir() and not (root / name).is_symlink():
            raise GitError(f"cannot copy the local file {name} into {root}: a folder is there")
        progress.atomic_write_bytes(root / name, content, durable=False)  # replaces a link, never follows it
        os.chmod(root / name, mode)  # as the person's (an executable stays one)
