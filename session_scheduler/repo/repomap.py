"""The repository map of one commit (core/codemap.py), read from git's objects and cached per
commit: what the first planning session of an adopted project, and an ARCHITECTURE review, are
shown of its code.

Reading runs nothing of the project: the commit's tree is listed (`ls-tree`) and the blobs
`codemap.to_read` names are read as stored, all in one `cat-file --batch` process, through the
hardened repository of guard/safe_git.py (no filter, text conversion or hook runs, whatever the
repository's config or `.gitattributes` say). Links and submodules are not files here.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import git

from session_scheduler.core.codemap import DEFAULT_BUDGET, RepoMap, SourceFile, make_map, render, to_read
from session_scheduler.core.errors import GitError
from session_scheduler.guard import safe_git
from session_scheduler.repo import gitops
from session_scheduler.store.progress import atomic_write_text

__all__ = ["DEFAULT_BUDGET", "RepoMap", "build", "cached", "read_map", "render"]

REGULAR = ("100644", "100755")
"""The modes of a regular file in a tree (a link is 120000, a submodule 160000)."""


def build(project: Path, commit: str, budget: int = DEFAULT_BUDGET) -> str:
    """The map of `commit` (a name git resolves) in the repository at `project`, as Markdown of at
    most `budget` bytes."""
    try:
        return render(read_map(_open(project), commit), budget)
    except git.GitCommandError as exc:  # every git failure is the scheduler's one GitError
        raise gitops.failed(project, exc) from exc


def cached(project: Path, cache_dir: Path, commit: str, budget: int = DEFAULT_BUDGET) -> str:
    """`build`'s text, kept as `cache_dir/<commit>-<budget>.md` and read from there next time. A
    full object name is used as it is (a hit runs no git); another name (`HEAD`, a branch) is
    resolved first, as it can move. A repository without a commit is not cached."""
    if not gitops.is_object_name(commit):
        resolved = _resolve(_open(project), commit)
        if resolved is None:
            return build(project, commit, budget)
        commit = resolved
    path = cache_dir / f"{commit}-{budget}.md"
    if path.is_file():
        return path.read_text(encoding="utf-8")
    text = build(project, commit, budget)
    atomic_write_text(path, text, durable=False)  # lost, it is built again
    return text


def _open(project: Path) -> git.Repo:
    try:
        return safe_git.open(project)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
        raise GitError(f"no git repository at {project}: map a folder that holds one") from exc


def read_map(repo: git.Repo, commit: str) -> RepoMap:
    """The map of `commit` in `repo` (a hardened repository: safe_git.open); a git command that
    fails raises GitPython's error (`build` says it as a GitError)."""
    sha = _resolve(repo, commit)
    if sha is None:
        if str(repo.git.for_each_ref("--count=1")).strip():
            raise GitError(f"no commit {commit!r} in {repo.working_dir}: name a commit of the repository")
        return make_map((), "")
    listing = str(repo.git.ls_tree("-r", "-l", "-z", "--full-tree", sha, strip_newline_in_stdout=False))
    blobs: dict[str, tuple[str, int]] = {}
    for entry in filter(None, listing.split("\0")):
        header, path = entry.split("\t", 1)
        mode, kind, obj, size = header.split()
        if kind == "blob" and mode in REGULAR:
            blobs[path] = (obj, int(size))
    wanted = to_read((path, size) for path, (_obj, size) in blobs.items())
    contents = read_blobs(repo, sorted({blobs[path][0] for path in wanted}))
    files = (SourceFile(path, size, _text(contents.get(obj))) for path, (obj, size) in blobs.items())
    return make_map(files, sha)


def _resolve(repo: git.Repo, name: str) -> str | None:
    """The commit `name` names, as a full object name; None when it names none."""
    try:
        return str(
            repo.git.rev_parse("--verify", "--quiet", "--end-of-options", f"{name}^{{commit}}")
        ).strip()
    except git.GitCommandError:
        return None


def read_blobs(repo: git.Repo, names: list[str]) -> dict[str, bytes]:
    """The content of each blob in `names` as stored, read by one `git cat-file --batch`."""
    if not names:
        return {}
    with tempfile.TemporaryFile() as stream:
        stream.write(("\n".join(names) + "\n").encode("ascii"))
        stream.seek(0)
        out = bytes(
            repo.git.execute(
                ["git", "cat-file", "--batch"],
                istream=stream,
                stdout_as_string=False,
                strip_newline_in_stdout=False,
            )
        )
    found: dict[str, bytes] = {}
    at = 0
    while at < len(out):
        line_end = out.index(b"\n", at)
        name, kind, *rest = out[at:line_end].decode("ascii").split()
        at = line_end + 1
        if kind == "missing" or not rest:
            continue
        size = int(rest[0])
        found[name] = out[at : at + size]
        at += size + 1  # the content, then a line feed
    return found


def _text(data: bytes | None) -> str | None:
    """A blob's text; None when it was not read or is binary (git's own test: a NUL byte)."""
    if data is None or b"\0" in data:
        return None
    return data.decode("utf-8", errors="replace")
