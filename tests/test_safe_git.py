"""The scheduler's own git runs no code the repository names (safe_git.py): not in the project,
not in a lane's clone, whatever a session planted there.

Each attack plants a payload that appends its name to a marker file outside the project; a test
runs the scheduler's git operations and asserts that no payload ran. A control test runs plain
git on the same project and asserts that every payload does run there (the attacks are live).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import git
import pytest

from scripted_model.scenario import Scenario
from session_scheduler.core.config import AgentConfig
from session_scheduler.guard import safe_git
from session_scheduler.repo import gitops
from session_scheduler.run.agent import SessionRequest, SessionResult
from session_scheduler.run.lanes import Lanes
from session_scheduler.testing.inprocess import InProcessRobotRunner
from session_scheduler.view.cli import main, merge_config

HOOKS = (
    "post-checkout",
    "pre-commit",
    "commit-msg",
    "post-commit",
    "reference-transaction",
    "post-index-change",
    "post-merge",
)


def sh(cwd: Path, command: str) -> str:
    return subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, check=True).stdout


@dataclass
class Payloads:
    """Scripts outside the project that note their name in `marker` when they run."""

    folder: Path

    @property
    def marker(self) -> Path:
        return self.folder / "ran"

    def make(self, name: str, body: str = "exit 1") -> str:
        script = self.folder / name
        script.write_text(f'#!/bin/sh\necho {name} >> "{self.marker}"\n{body}\n')
        script.chmod(0o755)
        return str(script)

    def ran(self) -> set[str]:
        return set(self.marker.read_text().split()) if self.marker.exists() else set()

    def clear(self) -> None:
        self.marker.unlink(missing_ok=True)


@pytest.fixture
def payloads(tmp_path: Path) -> Payloads:
    folder = tmp_path / "outside"
    folder.mkdir()
    return Payloads(folder)


def plain(project: Path, command: str) -> None:
    """Run plain git (the user's way), ignoring its failures: what it ran is what matters."""
    subprocess.run(
        ["bash", "-c", command], cwd=project, capture_output=True, text=True, check=False, timeout=30
    )


def hostile(tmp_path: Path, payloads: Payloads) -> Path:
    """A project with content on `main` and `other` (text under a filter/diff/merge driver, a file
    under a driver its config includes from the worktree, a plain file, a nested repository
    committed as a gitlink), then every attack planted in `.git`: hooks, an fsmonitor, the drivers,
    commit signing, submodule recursion, a remote allowed by name, and the nested repository's own
    fsmonitor and hooks."""
    project = tmp_path / "app"
    project.mkdir()
    (project / "app_spec.txt").write_text("An app.\n")
    sh(project, "git init -q -b main && git config user.name t && git config user.email t@t")
    sh(project, "printf '*.txt filter=evil diff=evil merge=evil\\n*.inc filter=inc\\n' > .gitattributes")
    sh(project, "echo a > a.txt && echo p > plain.md && echo i > b.inc")
    (project / "included.cfg").write_text(f'[filter "inc"]\n\tclean = {payloads.make("included", "cat")}\n')
    sh(
        project,
        "git init -q nested && cd nested && git config user.name t && git config user.email t@t && echo n > n && git add n && git commit -qm n",
    )
    sh(project, "printf '[submodule \"nested\"]\\n\\tpath = nested\\n\\turl = ./nested\\n' > .gitmodules")
    sh(
        project,
        "git add .gitattributes .gitmodules a.txt plain.md b.inc included.cfg nested 2>/dev/null && git commit -qm content",
    )
    sh(project, "git checkout -qb other && echo b >> a.txt && echo q >> plain.md && git commit -qam other")
    sh(
        project,
        "cd nested && echo o > o && git add o && git commit -qm o && cd .. && git add nested && git commit -qm 'nested moved'",
    )
    sh(project, "git checkout -q main && cd nested && git checkout -q HEAD~1")
    sh(project, "git checkout -qb clash && echo c >> a.txt && git commit -qam clash && git checkout -q main")
    for hook in HOOKS:  # the post-checkout hook fails (it stopped a run once), the others pass
        payloads.make(hook, "exit 1" if hook == "post-checkout" else "exit 0")
        (project / ".git" / "hooks" / hook).write_text(f'#!/bin/sh\nexec {payloads.folder / hook} "$@"\n')
        (project / ".git" / "hooks" / hook).chmod(0o755)
    settings = {
        "core.fsmonitor": payloads.make("fsmonitor"),
        "filter.evil.clean": payloads.make("clean", "cat"),
        "filter.evil.smudge": payloads.make("smudge", "cat"),
        "filter.evil.required": "true",
        "diff.evil.textconv": payloads.make("textconv", 'cat "$1"'),
        "diff.evil.command": payloads.make("diffcommand", "exit 0"),
        "diff.external": payloads.make("external", "exit 0"),
        "merge.evil.driver": payloads.make("mergedriver", "exit 0"),
        "commit.gpgSign": "true",
        "gpg.program": payloads.make("gpg"),
        "submodule.recurse": "true",
        "submodule.active": ".",
        "protocol.file.allow": "always",
        "remote.origin.url": str(project),
        "remote.origin.uploadpack": payloads.make("uploadpack"),
        "include.path": "../included.cfg",
    }
    for key, value in settings.items():
        sh(project, f"git config '{key}' '{value}'")
    sh(project / "nested", f"git config core.fsmonitor {payloads.make('nestedfsmonitor')}")
    sh(
        project / "nested",
        f"git config filter.nested.clean {payloads.make('nestedclean', 'cat')} && echo '* filter=nested' > .git/info/attributes",
    )
    (project / "nested" / ".git" / "hooks" / "post-checkout").write_text(
        f"#!/bin/sh\nexec {payloads.make('nestedhook')}\n"
    )
    (project / "nested" / ".git" / "hooks" / "post-checkout").chmod(0o755)
    return project


def dirty_up(project: Path) -> None:
    """Uncommitted work of every kind: a filtered file, a nested repository's own change, new files."""
    (project / "a.txt").write_text("changed\n")
    (project / "b.inc").write_text("changed\n")
    (project / "nested" / "n").write_text("m\n")  # the same size: git hashes it again, through its filter
    (project / "new.txt").write_text("new\n")


def test_the_planted_payloads_run_under_plain_git(tmp_path: Path, payloads: Payloads) -> None:
    project = hostile(tmp_path, payloads)
    dirty_up(project)
    plain(project, "git status")
    plain(project, "git add a.txt b.inc")
    plain(project, "git diff --cached; git diff --cached --no-ext-diff; git diff main other -- plain.md")
    plain(project, "git stash -q; git checkout -q other")
    plain(project, "git ls-remote origin")
    plain(project, "git -c commit.gpgSign=false merge -q --no-edit clash")
    plain(
        project,
        "git commit -q --allow-empty -m signed; git -c commit.gpgSign=false commit -q --allow-empty -m unsigned",
    )
    plain(project, "cd nested && git checkout -q HEAD")
    assert payloads.ran() >= {
        *HOOKS,
        "fsmonitor",
        "clean",
        "smudge",
        "textconv",
        "diffcommand",
        "external",
        "mergedriver",
        "gpg",
        "uploadpack",
        "included",
        "nestedfsmonitor",
        "nestedclean",
        "nestedhook",
    }


def test_the_scheduler_s_git_runs_no_payload(tmp_path: Path, payloads: Payloads) -> None:
    project = hostile(tmp_path, payloads)
    repo = gitops.open_repo(project)  # commits the spec: signing, commit hooks, reference-transaction
    assert gitops.commits_after_setup(repo) == 0
    dirty_up(project)
    assert gitops.dirty(repo)
    gitops.checkout(repo, "other")  # stash (clean filters), checkout (smudge, post-checkout)
    assert gitops.current_branch(repo) == "other" and len(gitops.stashes(project)) == 1
    dirty_up(project)
    assert gitops.stash_leftovers(repo, "leftovers")
    gitops.checkout(repo, gitops.MAIN)
    assert gitops.changed_paths(repo, "clash", "other") == ["a.txt", "nested", "plain.md"]
    assert [c.path for c in gitops.changes(repo, "clash", "other")] == ["a.txt", "nested", "plain.md"]
    assert gitops.blob_text(repo, "other:a.txt") == "a\nb\n"
    with contextlib.suppress(Exception):  # the test command is not what is tested here
        gitops.run_tests_at(repo, str(gitops.head(repo, "other")), "true")
    assert str(repo.git.worktree("list")).count("\n") == 0, "the worktree was removed"
    assert gitops.branch_view(project) == ("main", frozenset({"main", "other", "clash"}))
    main_sha = str(gitops.head(repo, "main"))
    gitops.create_branch(repo, "feature/F001", main_sha)
    gitops.keep_ref(repo, "undone/x", main_sha)
    gitops.set_branch(repo, "main", str(gitops.head(repo, "other")))  # reset --hard: smudge
    gitops.set_branch(repo, "main", main_sha)
    gitops.delete_branch(repo, "feature/F001")
    gitops.checkout(repo, "other")
    with pytest.raises(git.GitCommandError, match="Failed to execute internal merge"):
        repo.git.merge("--no-edit", "clash")  # the merge driver is not run: the merge fails
    assert not gitops.abort_unfinished(repo) and not gitops.dirty(repo)
    gitops.checkout(repo, gitops.MAIN)
    for patch in (("main", "other"), ("--no-ext-diff", "main", "other")):
        with pytest.raises(git.GitCommandError):  # neither an external diff nor a textconv runs
            repo.git.diff(*patch)
    with pytest.raises(git.GitCommandError, match="transport 'file' not allowed"):
        repo.git.ls_remote("origin")
    assert len(gitops.stashes(project)) == 2
    assert payloads.ran() == set()


def test_nested_repositories_are_not_looked_into_nor_checked_out(tmp_path: Path, payloads: Payloads) -> None:
    project = hostile(tmp_path, payloads)
    repo = gitops.open_repo(project)
    nested = project / "nested"
    head = sh(nested, "git rev-parse HEAD")
    (nested / "n").write_text("m\n")
    index = (nested / ".git" / "index").stat().st_mtime_ns
    assert not gitops.dirty(repo), "a nested repository's own changes are not asked about"
    gitops.checkout(repo, "other")
    gitops.checkout(repo, "main")
    assert sh(nested, "git rev-parse HEAD") == head, "the nested repository was not checked out"
    assert (nested / ".git" / "index").stat().st_mtime_ns == index, "no git ran inside it"
    assert payloads.ran() == set()
    plain(project, "git checkout -q other")
    assert sh(nested, "git rev-parse HEAD") != head, "plain git recurses (submodule.recurse)"


def test_a_failing_post_checkout_hook_does_not_stop_the_scheduler_s_checkout(
    tmp_path: Path, payloads: Payloads
) -> None:
    project = hostile(tmp_path, payloads)
    plain(project, "git checkout -q other")
    assert "post-checkout" in payloads.ran()  # plain git: the hook runs, and fails the checkout
    payloads.clear()
    repo = gitops.open_repo(project)
    gitops.checkout(repo, "main")
    gitops.checkout(repo, "other")
    assert gitops.current_branch(repo) == "other" and payloads.ran() == set()


def test_git_settings_a_parent_git_passes_down_are_dropped(
    tmp_path: Path, payloads: Payloads, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = hostile(tmp_path, payloads)
    repo = gitops.open_repo(project)
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", f"'core.hooksPath'='{project / '.git' / 'hooks'}'")
    gitops.checkout(repo, "other")
    assert payloads.ran() == set()


@pytest.mark.parametrize("where", ["global", "system"])
def test_the_user_s_and_the_system_s_config_are_not_read(
    tmp_path: Path, payloads: Payloads, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    templates = tmp_path / "templates"
    (templates / "hooks").mkdir(parents=True)
    (templates / "hooks" / "post-checkout").write_text(f"#!/bin/sh\nexec {payloads.make('template')}\n")
    config = tmp_path / "gitconfig"
    config.write_text(f"[init]\n\ttemplateDir = {templates}\n")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    if where == "global":
        config.rename(home / ".gitconfig")
    else:
        monkeypatch.setenv("GIT_CONFIG_SYSTEM", str(config))
    plain(tmp_path, "git init -q control")
    assert (tmp_path / "control" / ".git" / "hooks" / "post-checkout").exists(), "plain git reads that config"
    project = tmp_path / "app"
    project.mkdir()
    (project / "app_spec.txt").write_text("An app.\n")
    gitops.open_repo(project)
    assert not (project / ".git" / "hooks" / "post-checkout").exists()


def test_replacement_objects_are_not_seen(tmp_path: Path) -> None:
    project = tmp_path / "app"
    project.mkdir()
    (project / "app_spec.txt").write_text("An app.\n")
    repo = gitops.open_repo(project)
    sh(
        project,
        "git commit -q --allow-empty -m real && git checkout -qb fake && git commit -q --allow-empty -m fake && git checkout -q main",
    )
    sh(project, "git replace main fake")
    assert sh(project, "git log -1 --format=%s main").strip() == "fake"
    assert str(repo.git.log("-1", "--format=%s", "main")) == "real"


def test_the_environment_holds_every_setting() -> None:
    env = safe_git.environment([("filter", "a.b c"), ("protocol", "file")])
    assert {k: env[k] for k in safe_git.ENVIRONMENT} == {
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_PARAMETERS": "",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_NO_REPLACE_OBJECTS": "1",
    }
    count = int(env["GIT_CONFIG_COUNT"])
    settings = [(env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"]) for i in range(count)]
    assert settings == [
        *safe_git.HARDENING,
        ("filter.a.b c.clean", ""),
        ("filter.a.b c.smudge", ""),
        ("filter.a.b c.process", ""),
        ("filter.a.b c.required", "false"),
        ("protocol.file.allow", "never"),
    ]
    assert f"GIT_CONFIG_KEY_{count}" not in env


def test_driver_names_are_read_whole_from_git_s_listing() -> None:
    listing = "filter.a.b c.clean\nx\0diff.external\ny\0diff.Evil.textconv\nz\0merge.m.driver\0core.x.y\nq\0protocol.allow\nnever\0filter..clean\nx\0"
    assert safe_git.drivers_in(listing) == {
        ("filter", "a.b c"),
        ("diff", "Evil"),
        ("merge", "m"),
        ("filter", ""),
    }
    assert safe_git.drivers_in("") == set()


def test_gitlinks_are_read_from_the_index_listing() -> None:
    listing = (
        f"100644 {'1' * 40} 0\ta\x00160000 {'2' * 40} 0\tsub/x y\x00120000 {'3' * 40} 0\t160000 link\x00"
    )
    assert safe_git.gitlinks_in(listing) == ["sub/x y"]
    assert safe_git.gitlinks_in("") == []


def test_no_transport_runs(tmp_path: Path, payloads: Payloads) -> None:
    project = tmp_path / "app"
    project.mkdir()
    (project / "app_spec.txt").write_text("An app.\n")
    repo = gitops.open_repo(project)
    sh(
        project,
        f"git remote add origin {project} && git config remote.origin.uploadpack {payloads.make('uploadpack')}",
    )
    plain(project, "git ls-remote origin")
    assert payloads.ran() == {"uploadpack"}, "plain git runs it"
    payloads.clear()
    with pytest.raises(git.GitCommandError, match="transport 'file' not allowed"):
        repo.git.ls_remote("origin")
    assert payloads.ran() == set()


def test_dirty_asks_no_nested_repository_whatever_git_s_settings(tmp_path: Path, payloads: Payloads) -> None:
    project = nested_repositories(tmp_path, payloads, 1)
    sh(project, "git checkout -q .gitignore")
    index = (project / "n0" / ".git" / "index").stat().st_mtime_ns
    assert not gitops.dirty(git.Repo(project))
    assert (project / "n0" / ".git" / "index").stat().st_mtime_ns == index and payloads.ran() == set()
    plain(project, "git status")
    assert payloads.ran() == {"n0"}, "plain git status looks into it"


def test_the_stash_list_and_the_branch_view_open_the_repository_hardened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "app"
    project.mkdir()
    (project / "app_spec.txt").write_text("An app.\n")
    repo = gitops.open_repo(project)
    (project / "left.txt").write_text("left\n")
    assert gitops.stash_leftovers(repo, "real")
    opened: list[Path] = []
    real = safe_git.open

    def counting(path: Path) -> git.Repo:
        opened.append(path)
        return real(path)

    monkeypatch.setattr(safe_git, "open", counting)
    assert [line.rpartition(": ")[2] for line in gitops.stashes(project)] == ["real"]
    assert gitops.branch_view(project) == ("main", frozenset({"main"}))
    assert opened == [project, project]


def test_drivers_a_config_includes_are_read_again_after_refresh(tmp_path: Path, payloads: Payloads) -> None:
    project = tmp_path / "app"
    project.mkdir()
    (project / "app_spec.txt").write_text("An app.\n")
    repo = gitops.open_repo(project)
    sh(project, "git config include.path ../late.cfg && echo '*.txt filter=late' > .gitattributes")
    (project / "late.cfg").write_text(f'[filter "late"]\n\tclean = {payloads.make("late", "cat")}\n')
    (project / "x.txt").write_text("x\n")
    safe_git.refresh(repo)
    repo.git.add("x.txt")
    assert payloads.ran() == set()
    fresh = safe_git.open(project)
    fresh.git.status()  # drivers read
    (project / "late.cfg").write_text(f'[filter "later"]\n\tclean = {payloads.make("later", "cat")}\n')
    (project / ".gitattributes").write_text("*.txt filter=later\n")
    (project / "y.txt").write_text("y\n")
    fresh.git.add("y.txt")
    assert payloads.ran() == {"later"}, "without refresh a driver defined since is not known"


def test_a_failed_read_of_the_drivers_is_tried_again(
    tmp_path: Path, payloads: Payloads, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "app"
    project.mkdir()
    (project / "app_spec.txt").write_text("An app.\n")
    gitops.open_repo(project)
    sh(
        project,
        f"git config filter.evil.clean {payloads.make('clean', 'cat')} && echo '*.txt filter=evil' > .gitattributes && echo x > x.txt",
    )
    config = project / ".git" / "config"
    good = config.read_text()
    config.write_text(good + "[broken\n")
    repo = safe_git.open(project)
    with pytest.raises(git.GitCommandError):
        repo.git.status()
    config.write_text(good)
    real = safe_git.HardenedGit._call_process

    def interrupted(self: safe_git.HardenedGit, *args: object, **kwargs: object) -> object:
        monkeypatch.setattr(safe_git.HardenedGit, "_call_process", real)
        raise KeyboardInterrupt

    monkeypatch.setattr(safe_git.HardenedGit, "_call_process", interrupted)
    with pytest.raises(KeyboardInterrupt):
        repo.git.status()
    repo.git.add("x.txt")
    assert payloads.ran() == set()


def nested_repositories(tmp_path: Path, payloads: Payloads, count: int) -> Path:
    """A project with `count` nested repositories committed as gitlinks, each with its own filter."""
    project = tmp_path / "app"
    project.mkdir()
    (project / "app_spec.txt").write_text("An app.\n")
    gitops.open_repo(project)
    for i in range(count):
        sh(
            project,
            f"git init -q n{i} && cd n{i} && git config user.name t && git config user.email t@t && echo n > n && git add n && git commit -qm n",
        )
        sh(
            project / f"n{i}",
            f"git config filter.f{i}.clean {payloads.make(f'n{i}', 'cat')} && echo '* filter=f{i}' > .git/info/attributes",
        )
        sh(project, f"git add n{i} 2>/dev/null")
        (project / f"n{i}" / "n").write_text("m\n")  # the same size: git hashes it again, through its filter
    sh(project, "git commit -qm nested")
    with (project / ".gitignore").open("a") as ignore:  # a change to stash: git stash looks at every gitlink
        ignore.write("x\n")
    return project


def test_every_nested_repository_is_read_and_each_once(
    tmp_path: Path, payloads: Payloads, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = nested_repositories(tmp_path, payloads, 3)
    (project / "n0" / "loop").symlink_to(project)  # a nested gitlink that is a link back to the top
    sh(project / "n0", "git update-index --add --cacheinfo 160000,$(git rev-parse HEAD),loop")
    sh(
        project, "git update-index --add --cacheinfo 160000,$(git -C n1 rev-parse HEAD),absent"
    )  # not checked out
    payloads.clear()  # plain git in n0 ran its filter
    read: list[str] = []
    real = safe_git.HardenedGit.named_settings

    def counting(self: safe_git.HardenedGit, seen: set[Path]) -> set[tuple[str, str]]:
        read.append(Path(str(self._working_dir)).name)
        return real(self, seen)

    monkeypatch.setattr(safe_git.HardenedGit, "named_settings", counting)
    repo = safe_git.open(project)
    repo.git.stash("push", "-q")  # looks into each nested repository, through its filter
    assert sorted(read) == ["app", "n0", "n1", "n2"]
    assert payloads.ran() == set()


def test_nested_repositories_are_read_up_to_a_limit(
    tmp_path: Path, payloads: Payloads, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = nested_repositories(tmp_path, payloads, 3)
    monkeypatch.setattr(safe_git, "MAX_NESTED", 2)
    safe_git.open(project).git.stash("push", "-q")
    assert payloads.ran() == {"n2"}, "the third nested repository is past the limit"


def test_a_repository_opened_elsewhere_is_not_hardened_and_refresh_leaves_it(tmp_path: Path) -> None:
    project = tmp_path / "app"
    project.mkdir()
    (project / "app_spec.txt").write_text("An app.\n")
    gitops.open_repo(project)
    other = git.Repo(project)
    safe_git.refresh(other)
    assert (
        not isinstance(other.git, safe_git.HardenedGit) and "GIT_CONFIG_COUNT" not in other.git.environment()
    )
    assert safe_git.open(project).git.environment()["GIT_CONFIG_COUNT"] == str(len(safe_git.HARDENING))


# -- the scheduler ------------------------------------------------------------------------------


def test_a_session_that_plants_a_hook_and_an_fsmonitor_in_its_clone_runs_no_payload_and_the_run_goes_on(
    tmp_path: Path, payloads: Payloads
) -> None:
    project = tmp_path / "app"
    project.mkdir()
    (project / "app_spec.txt").write_text(
        (
            Path(__file__).resolve().parent.parent / "session_scheduler" / "prompts" / "app_spec.txt"
        ).read_text()
    )
    hook, monitor, nested = (
        payloads.make("planted-hook"),
        payloads.make("planted-fsmonitor"),
        payloads.make("nested", "cat"),
    )

    before: dict[int, set[str]] = {}

    class Planting(InProcessRobotRunner):
        """Plants in session 2; notes what had run when each later session began (the robot's
        own git runs outside any sandbox here: a real session's cannot write `.git/hooks` or
        `.git/config`, and what its git runs, runs in its sandbox)."""

        async def run(self, request: SessionRequest) -> SessionResult:
            before[request.plan.number] = payloads.ran()
            result = await super().run(request)
            if request.plan.number == 2:  # a nested repository with a filter, staged, and a change to stash
                sh(
                    request.cwd,
                    "git init -q nested && cd nested && git -c user.name=t -c user.email=t@t commit -q --allow-empty -m n",
                )
                sh(
                    request.cwd / "nested",
                    f"echo n > n && git add n && git -c user.name=t -c user.email=t@t commit -qm n && git config filter.f.clean {nested}",
                )
                sh(request.cwd / "nested", "echo '* filter=f' > .git/info/attributes && echo m > n")
                sh(request.cwd, "git add nested 2>/dev/null")
                (request.cwd / "app_spec.txt").write_text("changed\n")
                (request.cwd / ".git" / "hooks" / "post-checkout").write_text(f"#!/bin/sh\nexec {hook}\n")
                (request.cwd / ".git" / "hooks" / "post-checkout").chmod(0o755)
                with (request.cwd / ".git" / "config").open("a") as config:
                    config.write(f"[core]\n\tfsmonitor = {monitor}\n")
            return result

    lines: list[str] = []
    cfg = AgentConfig(feature_count=1)
    report = Lanes(project, cfg, Planting(Scenario.from_json({"features": 1})), echo=lines.append).run().run
    assert report.status == "done", lines
    assert before[3] == set()  # between the sessions, the scheduler's git in the clone ran none of them
    assert not (project / ".git" / "hooks" / "post-checkout").exists()  # the project's repository:
    assert "fsmonitor" not in (project / ".git" / "config").read_text()  # the agent never had it
    assert (project / "app_spec.txt").read_text() != "changed\n"


def test_allow_repo_code_is_an_option_that_is_saved() -> None:
    assert AgentConfig().allow_repo_code is False
    saved = merge_config(None, {"allow_repo_code": True}).to_json()
    assert saved["allow_repo_code"] is True
    assert merge_config(saved, {"allow_repo_code": None}).allow_repo_code is True
    assert merge_config(saved, {"allow_repo_code": False}).allow_repo_code is False
    (option,) = [p for p in main.params if p.name == "allow_repo_code"]
    assert (
        option.default is None
        and option.opts == ["--allow-repo-code"]
        and option.secondary_opts == ["--no-allow-repo-code"]
    )


def test_a_git_dir_in_the_persons_environment_reaches_neither_the_schedulers_git_nor_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE, ... left in the shell point git at another
    repository: a run works on its project alone and the other repository is untouched."""
    from click.testing import CliRunner
    from helpers import cli_seams

    other = tmp_path / "other"
    other.mkdir()
    sh(other, "git init -q -b main && git commit -q --allow-empty -m mine")
    before = sh(other, "git for-each-ref; git rev-parse HEAD; git status --porcelain; git stash list; ls -a")
    for name, value in {
        "GIT_DIR": other / ".git",
        "GIT_WORK_TREE": other,
        "GIT_INDEX_FILE": other / ".git" / "index",
        "GIT_OBJECT_DIRECTORY": other / ".git" / "objects",
        "GIT_COMMON_DIR": other / ".git",
    }.items():
        monkeypatch.setenv(name, str(value))
    project = tmp_path / "app"
    result = CliRunner().invoke(
        main,
        ["--project-dir", str(project), "--max-iterations", "3"],
        obj=cli_seams(lambda _: InProcessRobotRunner(Scenario.from_json({"features": 2}))),
    )
    assert result.exit_code == 3, result.output
    for name in safe_git.LOCATION:
        monkeypatch.delenv(name, raising=False)
    assert (
        sh(other, "git for-each-ref; git rev-parse HEAD; git status --porcelain; git stash list; ls -a")
        == before
    )
    assert int(sh(project, "git rev-list --count main")) >= 2, "the run committed in its own project"


def test_the_hardened_git_finds_the_repository_from_its_folder_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    for folder in (here, elsewhere):
        folder.mkdir()
        sh(folder, "git init -q -b main")
    monkeypatch.setenv("GIT_DIR", str(elsewhere / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(elsewhere))
    repo = safe_git.open(here)
    assert Path(repo.git.rev_parse("--absolute-git-dir")) == (here / ".git").resolve()
    assert "GIT_DIR" not in os.environ and "GIT_WORK_TREE" not in os.environ, (
        "not handed to the sessions either"
    )


def test_url_rewrites_are_read_with_the_driver_names_and_a_setting_is_added_last(tmp_path: Path) -> None:
    """The `url.*` settings of the repository's own config (its first command reads them), each
    key once however its value spans lines; a repository with none has none."""
    project = tmp_path / "app"
    project.mkdir()
    sh(project, "git init -q -b main")
    sh(project, "git config url./elsewhere/.insteadOf /here && git config filter.x.clean cat")
    sh(project, "git config --add url./other/.pushInsteadOf 'two\nlines'")
    repo = safe_git.open(project)
    assert isinstance(repo.git, safe_git.HardenedGit) and repo.git.rewrites == ()
    repo.git.rev_parse("--git-dir")
    assert repo.git.rewrites == ("url./elsewhere/.insteadof", "url./other/.pushinsteadof")
    other = tmp_path / "plain"
    other.mkdir()
    sh(other, "git init -q -b main")
    plain = safe_git.open(other)
    plain.git.rev_parse("--git-dir")
    assert plain.git.rewrites == ()
    added = safe_git.with_setting(safe_git.with_setting({}, "a.b", "1"), "c.d", "2")
    assert added == {
        "GIT_CONFIG_KEY_0": "a.b",
        "GIT_CONFIG_VALUE_0": "1",
        "GIT_CONFIG_KEY_1": "c.d",
        "GIT_CONFIG_VALUE_1": "2",
        "GIT_CONFIG_COUNT": "2",
    }
