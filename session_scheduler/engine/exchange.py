"""A session's git and files across machines: what the scheduler sends a worker through the
project's git remote before the session, and what it takes back after.

Both ways go through one git remote (the exchange: core/engine.exchange_url), under the session's
own refs (`refs/scheduler/sessions/<workflow id>/`), never a branch of the remote's:

- `send` (the scheduler): every branch of the lane's clone and its work tree as it stands
  (uncommitted and untracked files included), and the session's files (the hand-off files it
  reads, the session folder's `pre/` copies) as one commit;
- `receive` (the worker): its own clone of the lane, made or brought to exactly that start, the
  files written into its own folders, the plan's paths re-rooted there (its sandbox computed for
  this host); a retry of a lost try starts from the same start;
- `send_back` (the worker): the branches as the session left them, its work tree (what the agent
  left uncommitted), the session folder, the outbox and the scheduler's files the session wrote
  into the work tree;
- `take_back` (the scheduler): all of that fetched into the lane's clone and put where a session
  run in this process would have left it, for verification to judge as it judges any session.
  Nothing of it counts before it is verified, and `main` lands only through the merge queue.

Git moves the bytes (a transcript may be larger than the engine's payload limit); the workflow's
result carries only the commits' names, which the fetch must match."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from io import BytesIO
from pathlib import Path, PurePosixPath
from typing import Any

import git
from gitdb import IStream  # type: ignore[import-untyped]

from session_scheduler.core.engine import remote_protocol
from session_scheduler.core.errors import ConfigError, GitError
from session_scheduler.core.layout import HANDOFF_FILES, SETTINGS_FILE
from session_scheduler.core.policy import policy
from session_scheduler.core.session import SessionFolder
from session_scheduler.engine import wire
from session_scheduler.guard import processes, safe_git
from session_scheduler.guard.sandbox import Host, private_tmp, sandbox_settings
from session_scheduler.repo import gitops
from session_scheduler.repo.workdirs import SUFFIX, problem_of, transport
from session_scheduler.run.agent import SessionRequest
from session_scheduler.run.plan import SessionPlan, write_plan
from session_scheduler.store.records import Records

PREFIX = "refs/scheduler/sessions"
"""Where a session's refs live on the exchange: `<PREFIX>/<workflow id>/{start,back}/...`."""
BACK = "refs/scheduler/back"
"""In a worker's clone: what its session left, as pushed to the exchange."""
TAKEN = "refs/scheduler/taken"
"""In the lane's clone, while a session's result is fetched: where it lands (deleted at once; its
objects stay, so a rerun that reattaches to an ended session finds it taken)."""
IDENTITY = b"session-scheduler <scheduler@localhost> 0 +0000"
"""The author of the exchange's own commits (files, work trees): fixed, so a commit names its content."""
REGULAR = (0o100644, 0o100755)
UNSTABLE_TRIES = 3
"""How often a work tree is read for its snapshot while a file in it changes under git."""
OUTBOX = "outbox"
FOLDER = "folder"
TREE = "tree"
"""In a files commit: the hand-off files, the session folder, the scheduler's files in the work tree."""


@dataclasses.dataclass(frozen=True)
class Places:
    """Where a worker keeps a project's lanes: their clones (`<root>/<project>.lanes/lane-N`,
    so that the sandbox denies a session everything beside its clone, as for the scheduler's own
    lanes), the sessions' folders and outboxes (beside the clones: denied too). `lanes`: the
    folder of the clones where it is the scheduler's own (a worker in the scheduler's process,
    `temporal://local`: `<project>.lanes`, its clones named `lane-N<suffix>`)."""

    root: Path
    lanes: Path | None = None
    suffix: str = ""

    def clone(self, project: str, lane: int | None) -> Path:
        return (self.lanes or self.root / f"{project}{SUFFIX}") / f"lane-{lane or 0}{self.suffix}"

    def _own(self, project: str) -> Path:
        return self.lanes / f"worker{self.suffix}" if self.lanes else self.root / project

    def folder(self, project: str, workflow: str) -> Path:
        return self._own(project) / "sessions" / workflow.replace("/", "--")

    def outbox(self, project: str, lane: int | None) -> Path:
        return self._own(project) / f"outbox-{lane or 0}"

    def clones(self) -> list[Path]:
        """The lanes' clones this worker has made (of every project)."""
        if self.lanes is not None:
            return sorted(self.lanes.glob(f"lane-*{self.suffix}"))
        return sorted(self.root.glob(f"*{SUFFIX}/lane-*"))

    def stop_left(self) -> list[int]:
        """Stop what the sessions of an earlier worker here left running (a worker killed with its
        sessions: their CLIs died with it, what their sandboxes started may not have); the pids."""
        stopped: list[int] = []
        for clone in self.clones():
            stopped += processes.stop_with_tmpdir(private_tmp(clone))
            stopped += processes.stop_left_in(clone, 0.0)
        return stopped


def session_ref(workflow: str) -> str:
    return f"{PREFIX}/{workflow}"


# -- the scheduler's side ------------------------------------------------------------------------


def send(request: SessionRequest, remote: str, workflow: str) -> dict[str, Any]:
    """Push the session's start to the exchange at `remote`; what the worker needs to find it."""
    clone = safe_git.open(request.cwd)
    files: dict[str, bytes] = {}
    for name in HANDOFF_FILES:
        path = request.records.path(name)
        if path.is_file() and not path.is_symlink():
            files[f"{OUTBOX}/{name}"] = path.read_bytes()
    copies = request.log_dir / SessionFolder.PRE
    files.update({f"{SessionFolder.PRE}/{rel}": data for rel, data in _read_folder(copies)})
    base = session_ref(workflow)
    start = _state(clone)
    refs = {f"{base}/start/heads/{b}": sha for b, sha in start["tips"].items()}
    refs[f"{base}/start/worktree"] = start["worktree"]
    refs[f"{base}/start/files"] = commit_of(clone, files, "the session's files")
    _push(clone, remote, refs)
    name, email = (_config(clone, f"user.{key}") for key in ("name", "email"))
    return {**start, "files": refs[f"{base}/start/files"], "identity": {"name": name, "email": email}}


def take_back(request: SessionRequest, remote: str, workflow: str, back: Mapping[str, Any]) -> None:
    """Put what the session left on its worker (`back`: send_back's answer) into the lane's clone,
    its session folder and its outbox, where a session run here would have left it."""
    clone = safe_git.open(request.cwd)
    wanted = _wanted(back)
    taken = f"{TAKEN}/{workflow}"
    try:
        _fetch(clone, remote, f"+{session_ref(workflow)}/back/*:{taken}/*")
        have = {rel: gitops.ref_sha(clone, f"{taken}/{rel}") for rel in wanted}
    finally:  # its objects stay; no ref of the exchange's is left in the work's repository
        for ref in _refs(clone, f"{TAKEN}/"):
            clone.git.update_ref("-d", ref)
    gone = not any(have.values()) and all(_has(clone, sha) for sha in wanted.values())
    if have != wanted and not gone:  # (gone: taken back before, by a run killed since)
        raise GitError(
            f"the exchange's refs of {workflow} are not what its worker reported; "
            "run the same command again (the session runs again)"
        )
    _put(clone, back["head"], back["tips"], back["worktree"])
    for rel, data in files_of(clone, back["files"]):
        top, _, rest = rel.partition("/")
        if top == FOLDER and not rest.startswith(f"{SessionFolder.PRE}/"):
            _write(request.log_dir, rest, data)
        elif top == OUTBOX and rest in HANDOFF_FILES:
            target = request.records.path(rest)
            _write(target.parent, target.name, data)
        elif top == TREE and rest in HANDOFF_FILES:
            _write(request.cwd, rest, data)
    with contextlib.suppress(GitError):  # the exchange keeps nothing it need not: best effort
        _push(clone, remote, {f"{session_ref(workflow)}/{kind}/{rel}": None for kind, rel in _all(back)})


def _wanted(back: Mapping[str, Any]) -> dict[str, str]:
    wanted = {f"heads/{b}": sha for b, sha in back["tips"].items()}
    wanted.update(worktree=back["worktree"], files=back["files"])
    return wanted


def _all(back: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    start = back.get("start", {})
    for kind, state in (("start", start), ("back", back)):
        for branch in state.get("tips", {}):
            yield kind, f"heads/{branch}"
        yield kind, "worktree"
        yield kind, "files"


# -- the worker's side ---------------------------------------------------------------------------


def receive(
    request: SessionRequest,
    remote: str,
    workflow: str,
    start: Mapping[str, Any],
    project: str,
    places: Places,
    machine: Host,
) -> SessionRequest:
    """This worker's own request for the session: its clone of the lane at the session's start
    (fetched from the exchange; made when missing or unusable), the files in its own folders, the
    plan re-rooted there, its sandbox built on `machine` (this worker's host, read at its edge).
    What an earlier try left running in that clone is stopped first."""
    path = places.clone(project, request.lane)
    processes.stop_with_tmpdir(private_tmp(path))
    processes.stop_left_in(path, 0.0)
    clone = _clone(path, start["identity"])
    _fetch(clone, remote, f"+{session_ref(workflow)}/start/*:refs/scheduler/start/*", prune=True)
    fetched = {b: gitops.ref_sha(clone, f"refs/scheduler/start/heads/{b}") for b in start["tips"]}
    fetched.update(
        {kind: gitops.ref_sha(clone, f"refs/scheduler/start/{kind}") for kind in ("worktree", "files")}
    )
    if fetched != {**start["tips"], "worktree": start["worktree"], "files": start["files"]}:
        raise GitError(f"the exchange's start of {workflow} is not what the scheduler sent")
    _put(clone, start["head"], start["tips"], start["worktree"])
    gitops.keep_loose(clone, gitops.MAIN)  # the files the sandbox keeps unwritable exist (else unreadable)
    folder = places.folder(project, workflow)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    outbox = places.outbox(project, request.lane)
    if request.records.root.resolve() == request.cwd.resolve():  # one lane: its records are its work tree
        outbox = path
    else:
        shutil.rmtree(outbox, ignore_errors=True)
        outbox.mkdir(parents=True)
    for rel, data in files_of(clone, start["files"]):
        top, _, rest = rel.partition("/")
        if top == SessionFolder.PRE:
            _write(folder / SessionFolder.PRE, rest, data)
        elif top == OUTBOX and rest in HANDOFF_FILES:
            _write(outbox, rest, data)
    plan = rerooted(request, path, folder, outbox, machine)
    settings = write_plan(plan, path)
    return dataclasses.replace(
        request, plan=plan, cwd=path, settings_path=settings, log_dir=folder, records=Records(outbox)
    )


def send_back(
    request: SessionRequest, remote: str, workflow: str, start: Mapping[str, Any]
) -> dict[str, Any]:
    """Push what the session left (this worker's `request`) to the exchange; its names."""
    clone = safe_git.open(request.cwd)
    files: dict[str, bytes] = {}
    files.update(
        {f"{FOLDER}/{rel}": data for rel, data in _read_folder(request.log_dir) if not rel.startswith("pre/")}
    )
    for name in HANDOFF_FILES:
        for top, path in ((OUTBOX, request.records.path(name)), (TREE, request.cwd / name)):
            if path.is_file() and not path.is_symlink():
                files[f"{top}/{name}"] = path.read_bytes()
    state = _state(clone)
    refs = {f"{BACK}/heads/{b}": sha for b, sha in state["tips"].items()}
    refs[f"{BACK}/worktree"] = state["worktree"]
    refs[f"{BACK}/files"] = commit_of(clone, files, "what the session left")
    for ref in set(_refs(clone, f"{BACK}/")) - set(refs):  # an earlier session's
        clone.git.update_ref("-d", ref)
    for ref, sha in refs.items():
        clone.git.update_ref(ref, sha)
    try:  # an earlier try's branches there go (--prune)
        clone.git.push(
            "--quiet", "--no-verify", "--prune", remote, f"+{BACK}/*:{session_ref(workflow)}/back/*",
            env=_env(clone, remote),
        )  # fmt: skip
    except git.GitCommandError as exc:
        raise GitError(f"cannot push to the exchange {remote}: {_said(exc)}") from None
    return {**state, "files": refs[f"{BACK}/files"], "start": {"tips": dict(start["tips"])}}


def rerooted(request: SessionRequest, cwd: Path, folder: Path, outbox: Path, machine: Host) -> SessionPlan:
    """The plan with the scheduler's paths (its clone, its private temp folder, the session's
    folder and outbox) replaced by this worker's, and the sandbox computed for this worker's
    `machine`. Everything else is the scheduler's plan as it was built (`plan_session`): its
    system prompt with the project's adopted conventions, its tools, its budget and outage allowance."""
    plan = request.plan
    text = json.dumps(wire.plan_to_json(plan))
    moves = {
        str(request.cwd.resolve()): str(cwd.resolve()),
        str(private_tmp(request.cwd)): str(private_tmp(cwd)),
        str(request.log_dir): str(folder),
        str(request.records.root): str(outbox),
    }
    for old in sorted(moves, key=len, reverse=True):
        text = text.replace(json.dumps(old)[1:-1], json.dumps(moves[old])[1:-1])
    moved = wire.plan_from_json(json.loads(text))
    if plan.sandboxed:
        domains = tuple(plan.settings["sandbox"]["network"]["allowedDomains"])
        settings = dict(moved.settings)
        settings.update(
            sandbox_settings(cwd, domains, machine, protect_main=not policy(plan.role).may_move_main)
        )
        denied = settings["sandbox"]["filesystem"]["denyRead"]
        # what the scheduler denies its own lane and is on this host too (a worker on its machine):
        # its project, the other lanes' clones, the exchange (the worker's clone is opened again)
        denied += [
            path
            for path in plan.settings["sandbox"]["filesystem"]["denyRead"]
            if path.startswith("/") and path not in denied and Path(path).exists()
        ]
        moved = dataclasses.replace(moved, settings=settings)
    return moved


# -- git, both sides -----------------------------------------------------------------------------


def _state(clone: git.Repo) -> dict[str, Any]:
    """The clone as it stands: its checked-out branch (or commit), every branch's tip, and a commit
    of its work tree (what `git add -A` would stage; the scheduler's files stay out)."""
    branch = gitops.current_branch(clone)
    head = branch if branch is not None else str(clone.git.rev_parse("HEAD"))
    return {
        "head": head,
        "detached": branch is None,
        "tips": gitops.branches(clone),
        "worktree": _snapshot(clone),
    }


def _snapshot(clone: git.Repo) -> str:
    """A commit of the work tree, on top of HEAD, made in an index of its own (the clone's is
    left as it is)."""
    git_dir = Path(clone.git_dir)
    with tempfile.TemporaryDirectory(prefix="exchange-") as scratch:
        index = Path(scratch) / "index"
        if (git_dir / "index").is_file():
            shutil.copyfile(git_dir / "index", index)  # its stat data: unchanged files are not read again
        env = {**transport(clone), "GIT_INDEX_FILE": str(index)}
        for tries_left in reversed(range(UNSTABLE_TRIES)):
            try:
                clone.git.add("-A", env=env)
                break
            except git.GitCommandError as exc:  # a file written while it was read (a server left running)
                if tries_left == 0 or "unstable object source" not in str(exc.stderr):
                    raise
        tree = str(clone.git.write_tree(env=env)).strip()
    head = str(clone.git.rev_parse("HEAD")).strip()
    return _store_commit(clone, tree, [head], "the work tree")


def _put(clone: git.Repo, head: str, tips: Mapping[str, str], worktree: str) -> None:
    """The clone made to hold exactly the branches `tips`, `head` checked out (a branch, or a
    commit) and its work tree as `worktree` holds it over it (uncommitted: the index is HEAD's)."""
    if gitops.ref_sha(clone, "HEAD") is not None:
        clone.git.checkout("-q", "--detach")
    for branch in set(gitops.branches(clone)) - set(tips):
        clone.git.update_ref("-d", f"refs/heads/{branch}")
    for branch, sha in tips.items():
        clone.git.update_ref(f"refs/heads/{branch}", sha)
    if head in tips:
        clone.git.checkout("-q", "-f", head)
    else:
        clone.git.checkout("-q", "-f", "--detach", head)
    clone.git.reset("-q", "--hard")
    clone.git.clean("-q", "-ffd", "-e", SETTINGS_FILE)
    clone.git.read_tree("-u", "--reset", f"{worktree}^{{tree}}")
    clone.git.reset("-q")


def _clone(path: Path, identity: Mapping[str, str]) -> git.Repo:
    """The worker's clone of a lane at `path`, made (empty) when missing or not one to use."""
    if problem_of(path) is not None:
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        clone = safe_git.init(path, gitops.MAIN)
    else:
        clone = safe_git.open(path)
    gitops.ensure_exclude(clone)
    for key, value in identity.items():
        if value:
            clone.git.config(f"user.{key}", value)
    return clone


def _env(clone: git.Repo, remote: str) -> dict[str, str]:
    """The hardened environment of one command that reaches the exchange: its transport allowed."""
    return safe_git.with_setting(transport(clone), f"protocol.{remote_protocol(remote)}.allow", "always")


def _fetch(clone: git.Repo, remote: str, refspec: str, *, prune: bool = False) -> None:
    try:
        clone.git.fetch(
            "--quiet", "--no-tags", "--no-write-fetch-head", *(["--prune"] if prune else []), remote, refspec,
            env=_env(clone, remote),
        )  # fmt: skip
    except git.GitCommandError as exc:
        raise GitError(f"cannot fetch from the exchange {remote}: {_said(exc)}") from None


def _push(clone: git.Repo, remote: str, refs: Mapping[str, str | None]) -> None:
    """Set (or delete, for None) each ref of the exchange at `remote`."""
    specs = [f"+{sha}:{ref}" if sha else f":{ref}" for ref, sha in refs.items()]
    try:
        clone.git.push("--quiet", "--no-verify", remote, *specs, env=_env(clone, remote))
    except git.GitCommandError as exc:
        raise GitError(f"cannot push to the exchange {remote}: {_said(exc)}") from None


def _said(exc: git.GitCommandError) -> str:
    """git's complaint in one line (its first `fatal:` or `error:` line)."""
    lines = [line.strip(" '") for line in str(exc.stderr).splitlines()]
    lines = [line.removeprefix("stderr: ").strip(" '") for line in lines if line.strip(" '")]
    found = next(
        (line for line in lines if line.startswith(("fatal:", "error:"))), lines[-1] if lines else ""
    )
    return found[:300]


def _has(clone: git.Repo, sha: str) -> bool:
    """Whether the clone's object store holds the commit `sha` (taken back already)."""
    try:
        clone.git.cat_file("-e", f"{sha}^{{commit}}")
    except git.GitCommandError:
        return False
    return True


def _refs(clone: git.Repo, prefix: str) -> list[str]:
    return str(clone.git.for_each_ref("--format=%(refname)", prefix)).split()


def _config(clone: git.Repo, key: str) -> str:
    return str(clone.git.config("--get", key, with_exceptions=False)).strip()


# -- files as commits ----------------------------------------------------------------------------


def commit_of(repo: git.Repo, files: Mapping[str, bytes], message: str) -> str:
    """A commit (no parent) whose tree holds `files` (relative POSIX path: content), written into
    `repo`'s object store."""
    tree: dict[str, Any] = {}
    for rel, data in files.items():
        *dirs, name = PurePosixPath(rel).parts
        node = tree
        for part in dirs:
            node = node.setdefault(part, {})
        node[name] = data
    return _store_commit(repo, _store_tree(repo, tree), [], message)


def files_of(repo: git.Repo, commit: str) -> Iterator[tuple[str, bytes]]:
    """The regular files of `commit`'s tree (relative POSIX path, content); links and the rest skipped."""
    for item in repo.commit(commit).tree.traverse():
        if isinstance(item, git.Blob) and item.mode in REGULAR:
            yield str(item.path), bytes(item.data_stream.read())


def _store(repo: git.Repo, kind: bytes, data: bytes) -> bytes:
    return bytes(repo.odb.store(IStream(kind, len(data), BytesIO(data))).binsha)


def _store_tree(repo: git.Repo, node: Mapping[str, Any]) -> str:
    entries = []
    for name, value in node.items():
        if isinstance(value, dict):
            entries.append(
                (
                    (name + "/").encode(),
                    b"40000 " + name.encode() + b"\0" + bytes.fromhex(_store_tree(repo, value)),
                )
            )
        else:
            entries.append((name.encode(), b"100644 " + name.encode() + b"\0" + _store(repo, b"blob", value)))
    return _store(repo, b"tree", b"".join(entry for _, entry in sorted(entries))).hex()


def _store_commit(repo: git.Repo, tree: str, parents: list[str], message: str) -> str:
    lines = [f"tree {tree}".encode(), *(f"parent {p}".encode() for p in parents)]
    lines += [b"author " + IDENTITY, b"committer " + IDENTITY, b"", message.encode(), b""]
    return _store(repo, b"commit", b"\n".join(lines)).hex()


def _read_folder(folder: Path) -> Iterator[tuple[str, bytes]]:
    """Every regular file under `folder` (links not followed), as (relative POSIX path, content)."""
    if not folder.is_dir() or folder.is_symlink():
        return
    for top, dirs, names in os.walk(folder):  # links to folders are not followed
        dirs.sort()
        for name in sorted(names):
            path = Path(top, name)
            if path.is_file() and not path.is_symlink():
                yield path.relative_to(folder).as_posix(), path.read_bytes()


def _write(root: Path, rel: str, data: bytes) -> None:
    """Write `data` at `root/rel`, never outside `root` (a name that climbs out is an error)."""
    target = (root / rel).resolve()
    if not target.is_relative_to(root.resolve()) or ".." in PurePosixPath(rel).parts:
        raise GitError(f"the exchange holds a file named {rel!r}, outside its folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink():
        target.unlink()
    target.write_bytes(data)


def ensure_exchange(path: Path) -> Path:
    """The scheduler's own exchange at `path`: a bare repository, made when missing."""
    if not (path / "HEAD").is_file():
        path.mkdir(parents=True, exist_ok=True)
        runner = safe_git.HardenedGit(path)
        runner.names_read = True  # nothing there yet: no config to read
        runner.init("--bare", "--quiet")
    return path


def check(remote: str) -> None:
    """Say at once (a ConfigError) when the exchange at `remote` cannot be read (a --git-remote
    that is wrong, or not there)."""
    runner = safe_git.HardenedGit(Path(tempfile.gettempdir()))
    runner.names_read = True  # run in no repository: no config to read
    env = safe_git.with_setting(
        runner.environment() or safe_git.environment(), f"protocol.{remote_protocol(remote)}.allow", "always"
    )
    try:
        runner.ls_remote(remote, f"{PREFIX}/*", env=env)
    except git.GitCommandError as exc:
        raise ConfigError(
            f"cannot reach the git remote {remote}: {_said(exc)}; "
            "check --git-remote (saved with the project; every worker pushes there)"
        ) from None
