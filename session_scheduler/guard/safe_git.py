"""How the scheduler's own git runs: never any code the repository, its config or its content names.

Agents run git their own way (sandboxed, under the Bash policy). Every git command the
scheduler itself starts goes through a repository opened here (`open`, `init`): its `repo.git`
(GitPython's persistent `cat-file` processes included) runs with `environment()`, which

- reads no system or user config (`GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_GLOBAL=/dev/null`) and
  drops settings a parent git passed down (`GIT_CONFIG_PARAMETERS`);
- adds command-scope settings (`GIT_CONFIG_COUNT`/`_KEY_n`/`_VALUE_n`), which win over every
  config file, the repository's and what it includes: `HARDENING` below;
- neutralises, by name, every filter, diff and merge driver the repository's config defines, and
  every protocol it allows by name (`NEUTRALISED`): git has no switch that turns
  attribute-selected drivers off, and a driver runs only if config defines it, so the names are
  read with `git config --get-regexp` (run hardened, before any other command of the repository
  object, and again after `refresh`), from the repository and from every nested repository its
  index records as a gitlink (git runs `git status` inside those, handing these settings down);
- never prompts (`GIT_TERMINAL_PROMPT=0`) and sees no replacement objects
  (`GIT_NO_REPLACE_OBJECTS=1`: verification reads the commits that are there);
- finds the repository from the project's folder alone: the variables that point git at another
  repository, work tree, index or object store (`LOCATION`: `GIT_DIR`, `GIT_WORK_TREE`, ... set
  in the person's shell) are dropped from the scheduler's process when a repository is opened
  here, so they reach neither its git nor the sessions it starts.

The scheduler's `git status` also passes `--ignore-submodules=all` (gitops.py); its diffs of two
commits pass `--ignore-submodules=none`, so that they name gitlinks.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import git

K = TypeVar("K")
V = TypeVar("V")

HARDENING: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", os.devnull),  # no hook runs: no file is found under /dev/null
    ("core.fsmonitor", "false"),  # no fsmonitor command (status, diff, add, checkout, stash ask it)
    ("submodule.recurse", "false"),  # checkout, reset, worktree add stay out of nested repositories
    ("diff.ignoreSubmodules", "all"),  # and so do the reports of checkout and status
    (
        "diff.external",
        "",
    ),  # a patch diff fails ("cannot run") rather than run a command; the scheduler makes none
    ("commit.gpgSign", "false"),  # the scheduler's own commits start no `gpg.program`
    ("protocol.allow", "never"),  # no transport: no upload-pack, ssh command or credential helper runs
)
"""Settings the scheduler's git always runs with, whatever a config file says."""

NEUTRALISED: dict[str, tuple[tuple[str, str], ...]] = {
    "filter": (("clean", ""), ("smudge", ""), ("process", ""), ("required", "false")),
    "diff": (("textconv", ""), ("command", "")),
    "merge": (("driver", ""),),
    "protocol": (("allow", "never"),),
}
"""Per section, the settings that run a command and what they are set to for each name the
repository's config gives in that section. An empty filter command means "no filter" (the content
passes unchanged); an empty diff or merge command makes a patch diff or a merge of that file fail
rather than run anything (the scheduler makes neither). A protocol the config allows by name
(`protocol.file.allow=always` wins over `protocol.allow`) is refused by name too."""

NAMED_SETTINGS = r"^(filter|diff|merge|protocol|url)\."
"""What `git config --get-regexp` is asked for: the sections of `NEUTRALISED`, and `url`
(`HardenedGit.rewrites`)."""

ENVIRONMENT: dict[str, str] = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_PARAMETERS": "",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_NO_REPLACE_OBJECTS": "1",
}


LOCATION: tuple[str, ...] = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_IMPLICIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
    "GIT_INTERNAL_SUPER_PREFIX",
    "GIT_GRAFT_FILE",
    "GIT_SHALLOW_FILE",
    "GIT_REPLACE_REF_BASE",
    "GIT_CONFIG",
    "GIT_QUARANTINE_PATH",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
)
"""What points git at a repository, work tree, index or object store other than the one its
folder holds (`git rev-parse --local-env-vars` and the discovery settings): never inherited."""


def without_location(env: Mapping[str, str]) -> dict[str, str]:
    """`env` without the variables that point git elsewhere (`LOCATION`)."""
    return {key: value for key, value in env.items() if key not in LOCATION}


def forget_location() -> None:
    """Drop `LOCATION` from this process's environment: GitPython starts git with it, and the
    sessions' CLI inherits it (a `GIT_DIR` left in the person's shell would send both elsewhere)."""
    for name in LOCATION:
        os.environ.pop(name, None)


def environment(drivers: Iterable[tuple[str, str]] = ()) -> dict[str, str]:
    """The environment of the scheduler's git: `ENVIRONMENT`, `HARDENING`, and the settings that
    neutralise each (section, name) driver in `drivers`."""
    settings = list(HARDENING)
    for section, name in sorted(set(drivers)):
        settings += [(f"{section}.{name}.{key}", value) for key, value in NEUTRALISED[section]]
    env = dict(ENVIRONMENT, GIT_CONFIG_COUNT=str(len(settings)))
    for i, (key, value) in enumerate(settings):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return env


def with_setting(env: Mapping[str, str], key: str, value: str) -> dict[str, str]:
    """`env` with one more git setting (`GIT_CONFIG_KEY_n`), last so it wins: a protocol allowed
    for one command, for example."""
    added = dict(env)
    count = int(added.get("GIT_CONFIG_COUNT", "0"))
    added[f"GIT_CONFIG_KEY_{count}"], added[f"GIT_CONFIG_VALUE_{count}"] = key, value
    added["GIT_CONFIG_COUNT"] = str(count + 1)
    return added


def drivers_in(listing: str) -> set[tuple[str, str]]:
    """The (section, name) drivers in `git config -z --get-regexp` output (a record is the key, a
    line feed and the value, records end with NUL; a name may hold dots, spaces and quotes)."""
    found = set()
    for record in listing.split("\0"):
        key = record.split("\n", 1)[0]
        section, _, rest = key.partition(".")
        name, dot, _variable = rest.rpartition(".")
        if dot and section in NEUTRALISED:  # git writes the section in lower case
            found.add((section, name))
    return found


def gitlinks_in(listing: str) -> list[str]:
    """The paths recorded as gitlinks in `git ls-files -s -z` output (`mode object stage<TAB>path`)."""
    found = []
    for record in listing.split("\0"):
        info, _, path = record.partition("\t")
        if info.startswith(GITLINK + " "):
            found.append(path)
    return found


class HardenedGit(git.Git):
    """GitPython's command runner with the scheduler's environment. Before its first command (and
    the first after `refresh`) it reads the names its config gives drivers and protocols, and those
    of each nested repository its index records as a gitlink and that is there: git looks into
    those (`git stash` does, whatever `diff.ignoreSubmodules` says) with their own config, passing
    the scheduler's settings down, the names neutralised here included."""

    def __init__(self, working_dir: Any = None) -> None:
        forget_location()
        super().__init__(working_dir)
        self.update_environment(**environment())
        self.names_read = False
        self.rewrites: tuple[str, ...] = ()
        """The `url.*` settings of this repository's config (its own, not a nested one's), as
        read with the names: where git would fetch from instead of the address it is given."""

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        forget_location()
        if not self.names_read:
            self.names_read = True  # first: the reads below run through here
            try:
                names = self.named_settings(set())
            except BaseException:
                self.names_read = False
                raise
            self.update_environment(**environment(names))
        return super().execute(*args, **kwargs)

    def named_settings(self, seen: set[Path]) -> set[tuple[str, str]]:
        """The (section, name) pairs the config of this repository and of its nested ones name;
        `seen`: the repositories read already (a nested one may be a link to any of them)."""
        seen.add(Path(str(self._working_dir)).resolve())
        try:
            listing = self._call_process("config", "-z", "--get-regexp", NAMED_SETTINGS)
        except git.GitCommandError as exc:
            if exc.status != 1:  # 1: no such setting
                raise
            listing = ""
        found = drivers_in(str(listing))
        keys = (record.split("\n", 1)[0] for record in str(listing).split("\0"))
        self.rewrites = tuple(key for key in keys if key.startswith("url."))
        for path in gitlinks_in(str(self._call_process("ls-files", "-s", "-z"))):
            nested = Path(str(self._working_dir), path)
            if (nested / ".git").exists() and nested.resolve() not in seen and len(seen) <= MAX_NESTED:
                inner = HardenedGit(nested)
                inner.names_read = True  # `git config` and `git ls-files` run no driver
                found |= inner.named_settings(seen)
        return found


MAX_NESTED = 64
"""Nested repositories read at most, however deep (each costs two git processes)."""
GITLINK = "160000"


@dataclass(eq=False)
class GitMemo:
    """What the scheduler remembers of one repository between its git calls: an object of the
    repository's own (`HardenedRepo.memo`), never the process's."""

    refs_are_files: bool | None = None
    """Whether its refs are loose files and packed-refs (git's default); None: not asked yet."""
    packed: dict[tuple[int, int, int], tuple[dict[str, str], dict[str, str]]] = field(default_factory=dict)
    """`refs.Packed`: what its last versions of packed-refs were read as."""
    diffs: dict[tuple[str, str], tuple[Any, ...]] = field(default_factory=dict)
    """gitops.changes: what differs between two commits (by their names), the last few pairs."""
    trees: dict[str, Any] = field(default_factory=dict)
    """gates.tree_at: the files of a commit (by its name), the last few commits."""


MEMO_KEPT = 8
"""Entries each of `GitMemo`'s dictionaries of commits keeps, the oldest dropped first."""


def remembered(table: dict[K, V], key: K, make: Callable[[], V]) -> V:
    """`table[key]`, made with `make()` the first time: a table of `GitMemo` keyed by full object
    names, whose content never changes; past `MEMO_KEPT` entries the oldest is dropped."""
    if key not in table:
        table[key] = make()
        while len(table) > MEMO_KEPT:
            del table[next(iter(table))]
    return table[key]


class HardenedRepo(git.Repo):
    """A repository whose every git command runs through `HardenedGit`, committing as
    `identity` says (through the environment: nothing is written into the repository's config)."""

    GitCommandWrapperType = HardenedGit

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.memo = GitMemo()
        name, email = identity(self)
        self.git.update_environment(
            GIT_AUTHOR_NAME=name, GIT_AUTHOR_EMAIL=email, GIT_COMMITTER_NAME=name, GIT_COMMITTER_EMAIL=email
        )


DEFAULT_IDENTITY = ("autonomous-agent", "autonomous-agent@localhost")
"""Who the scheduler's commits are by when neither the repository nor the person names anyone."""


def identity(repo: git.Repo) -> tuple[str, str]:
    """Who the scheduler's commits in `repo` are by: its own `user.name` and `user.email`, else
    the person's (their global config, read as a file: the scheduler's git reads none), else
    `DEFAULT_IDENTITY`. A config that cannot be read gives the default."""
    try:
        reader = repo.config_reader()
        name = str(reader.get_value("user", "name", DEFAULT_IDENTITY[0])) or DEFAULT_IDENTITY[0]
        email = str(reader.get_value("user", "email", DEFAULT_IDENTITY[1])) or DEFAULT_IDENTITY[1]
    except Exception:
        return DEFAULT_IDENTITY
    return name, email


def open(project: Path) -> git.Repo:
    """The project's repository, for the scheduler's own git."""
    return HardenedRepo(project)


def init(project: Path, initial_branch: str) -> git.Repo:
    """A new repository in `project` (there is none yet: no config to read), opened hardened."""
    runner = HardenedGit(project)
    runner.names_read = True
    runner.init(f"--initial-branch={initial_branch}")
    return open(project)


def refresh(repo: git.Repo) -> None:
    """Read the names again before the repository's next command (its config may include files
    that changed, its index may record a new nested repository)."""
    if isinstance(repo.git, HardenedGit):
        repo.git.names_read = False
