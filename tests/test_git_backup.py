"""The scheduler's copy of the repository (git_backup.py): whatever a session does to `.git`, the
repository is rebuilt before the scheduler's next git command, and a run goes on to the end."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from scripted_model.scenario import Scenario
from session_scheduler.core.config import AgentConfig
from session_scheduler.repo import git_backup, git_guard, gitops
from session_scheduler.run.agent import SessionRequest, SessionResult
from session_scheduler.run.scheduler import Scheduler
from session_scheduler.testing.inprocess import InProcessRobotRunner

SPEC = Path(__file__).resolve().parent.parent / "session_scheduler" / "prompts" / "app_spec.txt"


def sh(cwd: Path, command: str) -> str:
    return subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, check=True).stdout


def refs_of(project: Path) -> str:
    return sh(project, "git for-each-ref --format='%(objectname) %(refname)'")


def new_project(tmp_path: Path) -> Path:
    """A repository as the scheduler keeps it: two packed branches, a packed tag and a kept ref
    under refs/scheduler/, `main`, a branch and two stash entries loose, the settings guarded
    (git_guard). Its first commits are enough objects for the first backup to hold them in a pack."""
    project = tmp_path / "app"
    project.mkdir()
    (project / "app_spec.txt").write_text("An app.\n")
    gitops.open_repo(project)
    sh(project, "for i in $(seq 120); do echo $i > f$i; done && echo 1 > a && git add . && git commit -qm a")
    sh(project, "git branch feature/F001 && git branch feature/F002 && git tag -a -m v v1")
    sh(project, "git update-ref refs/scheduler/undone/session-1/x HEAD && git pack-refs --all")
    sh(
        project,
        "m=$(git rev-parse main) && git update-ref -d refs/heads/main && git update-ref refs/heads/main $m",
    )  # loose only
    sh(
        project,
        "echo 2 > a && git commit -qam b && echo 3 > a && git stash -q && echo 4 > a && git stash -q && git branch feature/F003",
    )
    (project / ".git" / "hooks" / "pre-push").symlink_to("/bin/true")  # links among the settings stay links
    (project / ".git" / "config.worktree").symlink_to(os.devnull)
    git_guard.baseline(project)
    return project


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return new_project(tmp_path_factory.mktemp("template"))


@pytest.fixture
def project(template: Path, tmp_path: Path) -> Path:
    """A copy of the template (made once: it takes a dozen git commands)."""
    return Path(shutil.copytree(template, tmp_path / "app", symlinks=True))


def restored(project: Path, before: str, backup: git_backup.Backup) -> None:
    """Every ref back where it was, both stash entries, and git works on the repository."""
    assert refs_of(project) == before
    assert len(sh(project, "git stash list").splitlines()) == 2
    assert sh(project, "git stash show -p 'stash@{1}'")
    sh(project, "git fsck --no-dangling --no-progress && git status --porcelain")
    assert git_backup.check(backup) == []


# -- the backup -----------------------------------------------------------------------------------


def test_the_backup_holds_every_ref_and_stash_entry_and_follows_the_repository(project: Path) -> None:
    backup = git_backup.sync(project, project / ".git")
    assert backup.error == "" and backup.head == "ref: refs/heads/main\n"
    assert {f"{sha} {name}" for name, sha in backup.refs.items()} == set(refs_of(project).splitlines())
    assert (
        len(backup.refs) == 7
        and "refs/stash" in backup.refs
        and "refs/scheduler/undone/session-1/x" in backup.refs
    )
    stashes = sh(project, "git log -g --format=%H refs/stash").split()
    kept = sh(backup.store, "git for-each-ref --format='%(refname)' refs/stash-log/").split()
    assert sorted(kept) == sorted(f"refs/stash-log/{sha}" for sha in stashes)
    with (project / ".git" / "logs" / "refs" / "stash").open(
        "a"
    ) as reflog:  # an entry of no commit fails no fetch
        reflog.write(f"{stashes[0]} {'3' * 40} A U Thor <a@u.t> 1700000000 +0000\tplanted\n")
    assert git_backup.sync(project, project / ".git").error == ""
    sh(
        project,
        "git checkout -q -b feature/F004 && echo 5 > b && git add b && git commit -qm c && git branch -D feature/F002",
    )
    later = git_backup.sync(project, project / ".git")
    assert {f"{sha} {name}" for name, sha in later.refs.items()} == set(refs_of(project).splitlines())
    assert "refs/heads/feature/F002" not in later.refs and later.head == "ref: refs/heads/feature/F004\n"
    assert git_backup.load(project) == later
    assert git_backup.load(project.parent) is None


def test_the_backup_keeps_its_refs_packed_and_its_history_indexed(project: Path) -> None:
    store = git_backup.sync(project, project / ".git").store
    graph = (store / "objects" / "info" / "commit-graph").stat()
    assert not (store / "FETCH_HEAD").exists()

    def loose() -> int:
        return sum(len(names) for _, _, names in os.walk(store / "refs"))

    assert loose() == 7 + 2, "the project's refs and two stash entries"
    sh(project, "for i in $(seq 55); do echo create refs/heads/many/$i HEAD; done | git update-ref --stdin")
    assert len(git_backup.sync(project, project / ".git").refs) == 62 and loose() == git_backup.LOOSE_KEPT
    sh(project, "git branch one-more")
    assert len(git_backup.sync(project, project / ".git").refs) == 63 and loose() == 0
    assert (store / "objects" / "info" / "commit-graph").stat().st_mtime_ns == graph.st_mtime_ns, (
        "written once"
    )


def test_the_fetch_runs_no_command_the_repository_s_config_names(project: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    hook = tmp_path / "hook"
    hook.write_text(f'#!/bin/sh\necho ran >> "{marker}"\nexec "$@"\n')
    hook.chmod(0o755)
    sh(project, f"git config uploadpack.packObjectsHook {hook}")
    assert git_backup.sync(project, project / ".git").error == ""
    assert not marker.exists()


def test_a_sound_repository_is_left_as_it_is(project: Path) -> None:
    sh(project, "git tag blob HEAD:a")  # a ref to a blob that is not a branch
    backup = git_backup.sync(project, project / ".git")
    (project / ".git" / "refs" / "heads" / ".main.tmp").write_text(
        "garbage\n"
    )  # no ref name: git reads no ref there
    sh(
        project,
        "git checkout -q feature/F001 && echo 5 > b && git add b && git commit -qm c && git checkout -q -b feature/F009",
    )
    before = refs_of(project)
    assert git_backup.repair(backup) is None  # a branch moved or made is verification's to judge
    assert refs_of(project) == before
    sh(
        project, "git branch -D feature/F003 && git checkout -q --detach && git branch -D feature/F009"
    )  # and one deleted,
    assert git_backup.repair(backup) is None  # its commit still there; HEAD detached


DESTRUCTIONS: dict[str, tuple[Callable[[Path], object], str]] = {
    "rm -rf .git": (lambda g: shutil.rmtree(g), ".git missing"),
    "objects removed": (lambda g: shutil.rmtree(g / "objects"), ".git/objects missing"),
    "refs removed": (lambda g: shutil.rmtree(g / "refs"), ".git/refs missing"),
    "HEAD garbage": (lambda g: (g / "HEAD").write_text("garbage"), "HEAD unreadable"),
    "refs deleted": (
        lambda g: sh(g, "find refs -type f -delete"),
        "HEAD points to no commit, refs/stash missing",  # feature/F003 and main too, but those verification would undo
    ),
    "packed-refs deleted": (
        lambda g: (g / "packed-refs").unlink(),
        "refs/scheduler/undone/session-1/x missing, refs/tags/v1 missing",
    ),
    "packed-refs unreadable": (
        lambda g: (g / "packed-refs").write_text("garbage\n" + (g / "packed-refs").read_text()),
        ".git/packed-refs unreadable",
    ),
    "packed-refs out of order": (  # its header says sorted: git would look for refs where they are not
        lambda g: sh(
            g,
            "sed -i 's/feature.F001$/feature\\/F00x/; s/feature.F002$/feature\\/F001/; s/feature.F00x$/feature\\/F002/' packed-refs",
        ),
        ".git/packed-refs unreadable",
    ),
}


@pytest.mark.parametrize("name", list(DESTRUCTIONS))
def test_a_destroyed_repository_is_rebuilt_as_it_was(project: Path, name: str) -> None:
    destroy, damage = DESTRUCTIONS[name]
    config, exclude = (
        (project / ".git" / "config").read_text(),
        (project / ".git" / "info" / "exclude").read_text(),
    )
    packed = (project / ".git" / "packed-refs").read_text()
    backup = git_backup.sync(project, project / ".git")
    assert any(p.suffix == ".pack" for p in (backup.store / "objects" / "pack").iterdir())
    before = refs_of(project)
    destroy(project / ".git")
    assert (
        git_backup.repair(backup)
        == f"the session damaged .git ({damage}); restored from the scheduler's copy"
    )
    restored(project, before, backup)
    assert (project / ".git" / "config").read_text() == config, "the run's settings, identity included"
    assert (project / ".git" / "info" / "exclude").read_text() == exclude
    settings = json.loads((project / ".agent_logs" / "git_guard" / "digest.json").read_text())
    assert git_guard.differences(settings, git_guard.fingerprints(project / ".git")) == [], (
        "hooks, info, links as they were"
    )
    assert sh(project, "git status --porcelain") == "", "the index matches the work tree again"
    if name in ("HEAD garbage", "refs removed"):  # a packed-refs git reads is left as it is
        assert (project / ".git" / "packed-refs").read_text() == packed and "\n^" in packed


def test_many_problems_are_counted_after_the_first_four(project: Path) -> None:
    backup = git_backup.sync(project, project / ".git")
    sh(
        project,
        f"find .git/refs -type f -delete && rm .git/packed-refs && echo {'1' * 40} | tee .git/refs/heads/x .git/refs/heads/y",
    )
    line = git_backup.repair(backup)
    assert line == (
        "the session damaged .git (HEAD points to no commit, refs/scheduler/undone/session-1/x missing, refs/stash missing, "
        "refs/tags/v1 missing and 2 more); restored from the scheduler's copy"
    )
    assert sh(project, "git branch --list x y") == ""


def test_a_git_folder_replaced_by_a_file_and_objects_by_a_link_are_made_again(
    project: Path, tmp_path: Path
) -> None:
    backup = git_backup.sync(project, project / ".git")
    before = refs_of(project)
    elsewhere = tmp_path / "elsewhere"
    os.rename(project / ".git" / "objects", elsewhere)
    (project / ".git" / "objects").symlink_to(elsewhere)
    assert git_backup.check(backup) == [".git/objects missing"]
    assert git_backup.repair(backup) is not None
    assert not (project / ".git" / "objects").is_symlink() and elsewhere.is_dir(), (
        "the link's target is left alone"
    )
    restored(project, before, backup)
    shutil.rmtree(project / ".git")
    (project / ".git").write_text(f"gitdir: {elsewhere}\n")
    assert (
        git_backup.repair(backup)
        == "the session damaged .git (.git is not a folder); restored from the scheduler's copy"
    )
    restored(project, before, backup)


def test_without_a_copy_of_the_settings_a_git_folder_made_again_gets_git_s_defaults(project: Path) -> None:
    backup = git_backup.sync(project, project / ".git")
    before = refs_of(project)
    shutil.rmtree(project / ".agent_logs" / "git_guard")
    shutil.rmtree(project / ".git")
    assert git_backup.repair(backup) is not None
    assert (project / ".git" / "config").read_text() == git_backup.MINIMAL_CONFIG
    assert refs_of(project) == before


def test_broken_branches_go_back_or_go_and_head_names_a_commit_again(project: Path) -> None:
    backup = git_backup.sync(project, project / ".git")
    before = refs_of(project)
    blob = sh(project, "git rev-parse HEAD:a").strip()
    sh(
        project,
        f"echo {'1' * 40} > .git/refs/heads/feature/F009 && echo {blob} > .git/refs/heads/feature/F003",
    )
    sh(project, "echo garbage > .git/refs/heads/main && echo 'ref: refs/heads/feature/F009' > .git/HEAD")
    sh(
        project,
        f"sed -i 's/^[0-9a-f]* refs.heads.feature.F002$/{'2' * 40} refs\\/heads\\/feature\\/F002/' .git/packed-refs",
    )
    sh(project, f"sed -i '/refs.heads.feature.F002$/a {'4' * 40} refs/heads/feature/F008' .git/packed-refs")
    sh(
        project, f"echo HEAD > .git/refs/heads/feature/F007 && echo {'5' * 40} > .git/refs/tags/broken"
    )  # a name is no object
    assert git_backup.check(backup) == [
        "HEAD points to no commit",
        "refs/heads/feature/F002 missing",
        "refs/heads/feature/F003 is not a commit",
        "refs/heads/main missing",
        "refs/heads/feature/F007 missing",
        "refs/heads/feature/F008 missing",
        "refs/heads/feature/F009 missing",
    ], "a broken tag the session made is not the scheduler's concern"
    sh(project, "rm .git/refs/tags/broken")
    git_backup.repair(backup)
    restored(project, before, backup)
    assert (project / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"
    assert sh(project, "git log -g -1 --format=%gs refs/heads/main") == "scheduler: restored from its copy\n"


def test_a_branch_gone_with_its_commit_is_damage(project: Path) -> None:
    sh(project, "git checkout -q -b feature/F004 && echo 5 > a && git commit -qam c && git checkout -q main")
    backup = git_backup.sync(project, project / ".git")
    before = refs_of(project)
    commit = sh(project, "git rev-parse feature/F004").strip()
    sh(project, f"git branch -D feature/F004 && rm -f .git/objects/{commit[:2]}/{commit[2:]}")
    assert git_backup.check(backup) == ["refs/heads/feature/F004 missing"]
    git_backup.repair(backup)
    restored(project, before, backup)


def test_a_symbolic_ref_is_followed(project: Path) -> None:
    sh(project, "git symbolic-ref refs/remotes/origin/HEAD refs/heads/feature/F003")
    backup = git_backup.sync(project, project / ".git")
    assert backup.refs["refs/remotes/origin/HEAD"] == backup.refs["refs/heads/feature/F003"]
    sh(project, "git branch -D feature/F003")
    assert git_backup.check(backup) == ["refs/remotes/origin/HEAD missing"], (
        "the branch is verification's, the ref it left dangling not"
    )


def test_a_corrupt_object_is_copied_back(project: Path) -> None:
    git_backup.sync(project, project / ".git")
    sh(project, "echo 5 > a && git commit -qam c")  # the second backup holds it as a loose object too
    backup = git_backup.sync(project, project / ".git")
    before = refs_of(project)
    main = sh(project, "git rev-parse main").strip()
    loose = project / ".git" / "objects" / main[:2] / main[2:]
    loose.chmod(0o644)
    loose.write_bytes(b"garbage")
    assert git_backup.repair(backup) is not None
    restored(project, before, backup)


def test_a_repair_that_needs_no_object_keeps_the_index_and_the_newer_stash_entries(project: Path) -> None:
    backup = git_backup.sync(project, project / ".git")
    sh(
        project, "echo 5 > a && git stash -q && echo 6 > a && git add a"
    )  # a third stash entry, a staged change
    (project / ".git" / "HEAD").write_text("garbage")
    git_backup.repair(backup)
    assert sh(project, "git status --porcelain") == "M  a\n"
    assert len(sh(project, "git stash list").splitlines()) == 3


def test_head_that_is_a_link_or_names_no_ref_is_unreadable(project: Path) -> None:
    backup = git_backup.sync(project, project / ".git")
    head = project / ".git" / "HEAD"
    (project / "head").write_text("ref: refs/heads/main\n")
    head.unlink()
    head.symlink_to(project / "head")
    assert git_backup.check(backup) == ["HEAD unreadable"]
    git_backup.repair(backup)
    assert not head.is_symlink() and head.read_text() == "ref: refs/heads/main\n"
    head.write_text("ref: ../../head\n")
    assert git_backup.check(backup) == ["HEAD unreadable"]


def test_git_s_location_variables_and_the_repository_s_hooks_are_not_used(
    project: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    backup = git_backup.sync(project, project / ".git")
    (tmp_path / "index").write_text("garbage")
    monkeypatch.setenv("GIT_INDEX_FILE", str(tmp_path / "index"))
    assert git_backup.check(backup) == []
    hook = project / ".git" / "hooks" / "reference-transaction"
    hook.write_text(f"#!/bin/sh\necho ran >> {tmp_path / 'ran'}\n")
    hook.chmod(0o755)
    (project / ".git" / "refs" / "stash").unlink()
    assert git_backup.repair(backup) is not None
    assert not (tmp_path / "ran").exists()


def test_a_reftable_repository_is_left_alone(project: Path) -> None:
    backup = git_backup.sync(project, project / ".git")
    (project / ".git" / "reftable").mkdir()
    (project / ".git" / "HEAD").write_text("ref: refs/heads/.invalid\n")
    assert git_backup.repair(backup) is None


def test_the_lines_say_what_failed_in_a_line_and_count_what_they_do_not_name() -> None:
    failed = git_backup.GitFailed(["git", "x"], 128, "error: first\n\n  fatal: the cause  \nfatal: another\n")
    assert failed.status == 128 and "fatal: the cause" in str(failed.stderr)
    assert git_backup._first_line(failed) == "fatal: the cause"
    assert git_backup._first_line(git_backup.GitFailed(["git"], 1, " error: only\n")) == "error: only"
    assert git_backup._first_line(git_backup.GitFailed(["git"], 1, "")) == "GitFailed"
    assert git_backup._first_line(OSError("x" * 300)) == "x" * 200
    assert git_backup._summary(["a", "b", "c", "d"]) == "a, b, c, d"
    assert git_backup._summary(["a", "b", "c", "d", "e"]) == "a, b, c, d and 1 more"


def test_a_git_command_that_fails_says_how(project: Path) -> None:
    with pytest.raises(git_backup.GitFailed) as failed:
        git_backup._git(project / "nowhere", "ls-files")
    assert failed.value.status == 128 and failed.value.said.startswith("fatal: ")
    backup = git_backup.sync(project, project / ".git")
    (project / ".git" / "config").write_text("[garbage\n")
    assert git_backup.check(backup) == [
        f"git cannot read the repository (fatal: bad config line 1 in file {project}/.git/config)"
    ]


def test_packed_refs_are_read_as_git_reads_them() -> None:
    a, b = "a" * 40, "b" * 40
    assert git_backup._packed("") == {}
    assert git_backup._packed(f"{a} refs/heads/x\n{b} refs/heads/w\n") == {
        "refs/heads/x": a,
        "refs/heads/w": b,
    }
    assert (
        git_backup._packed(f"# pack-refs with: peeled\n{a} refs/tags/x\n^{b}\n{b} refs/heads/w\n") is not None
    )
    assert (
        git_backup._packed(f"# pack-refs with: peeled sorted \n{a} refs/heads/x\n{b} refs/heads/w\n") is None
    )
    assert git_backup._packed(f"garbage\n{a} refs/heads/x\n") is None
    assert git_backup._packed(f"{a} refs/heads/x\ngarbage\n") is None
    assert git_backup._packed(f"^{b}\n{a} refs/heads/x\n") is None
    assert git_backup._packed(f"{a} refs/heads/a..b\n") is None


def test_lock_files_are_removed(project: Path) -> None:
    backup = git_backup.sync(project, project / ".git")
    sh(project, "git checkout -q -b feature/F009")  # a branch of the session: HEAD stays on it
    sh(
        project,
        "touch .git/index.lock .git/refs/heads/main.lock .git/packed-refs.lock && mkdir .git/refs/heads/x.lock .git/y.lock",
    )
    assert git_backup.check(backup) == [
        ".git/index.lock left behind",
        ".git/packed-refs.lock left behind",
        ".git/refs/heads/main.lock left behind",
    ]
    git_backup.repair(backup)
    sh(project, "git branch -f feature/F001 main && echo x > a && git stash -q")
    assert sh(project, "git symbolic-ref HEAD") == "refs/heads/feature/F009\n"


def test_pipes_and_links_where_git_reads_refs_are_removed(project: Path) -> None:
    backup = git_backup.sync(project, project / ".git")
    os.mkfifo(project / ".git" / "refs" / "heads" / "pipe")
    packed = project / ".git" / "packed-refs"
    os.rename(packed, project / "packed-refs.elsewhere")
    packed.symlink_to(project / "packed-refs.elsewhere")
    assert git_backup.check(backup)[-2:] == [
        ".git/packed-refs is not a file",
        ".git/refs/heads/pipe is not a file",
    ]
    git_backup.repair(backup)
    assert not (project / ".git" / "refs" / "heads" / "pipe").exists() and not packed.is_symlink()
    assert (project / "packed-refs.elsewhere").exists()


def test_links_in_refs_are_removed_and_what_they_point_to_is_left_alone(
    project: Path, tmp_path: Path
) -> None:
    backup = git_backup.sync(project, project / ".git")
    before = refs_of(project)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "F003").write_text("a person's file\n")
    shutil.rmtree(project / ".git" / "refs" / "heads" / "feature")
    (project / ".git" / "refs" / "heads" / "feature").symlink_to(outside)
    (project / ".git" / "refs" / "heads" / "main").unlink()
    (project / ".git" / "refs" / "heads" / "main").symlink_to(outside / "F003")
    assert git_backup.check(backup)[-2:] == [
        ".git/refs/heads/feature is a link",
        ".git/refs/heads/main is a link",
    ]
    git_backup.repair(backup)
    restored(project, before, backup)
    assert (outside / "F003").read_text() == "a person's file\n"


def test_an_unreadable_index_is_read_again_from_head_and_the_work_tree_is_kept(project: Path) -> None:
    backup = git_backup.sync(project, project / ".git")
    sh(project, "echo changed > a && echo new > new")
    (project / ".git" / "index").write_text("garbage")
    assert git_backup.check(backup) == ["the index unreadable"]
    git_backup.repair(backup)
    assert sh(project, "git status --porcelain").splitlines() == [" M a", "?? new"]


@pytest.mark.parametrize("step", ["_strays_removed", "_index"])
def test_a_step_that_fails_is_named_and_the_next_ones_run(
    project: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    backup = git_backup.sync(project, project / ".git")
    real = getattr(git_backup, step)

    def part_way(*args: object) -> None:
        real(*args)
        raise OSError("No space left on device")

    monkeypatch.setattr(git_backup, step, part_way)
    (project / ".git" / "HEAD").write_text("garbage")
    line = git_backup.repair(backup)
    assert (
        line
        == "the session damaged .git (HEAD unreadable); restored from the scheduler's copy, except: No space left on device"
    )
    assert git_backup.check(backup) == []


@pytest.mark.parametrize("fails", [False, True])
def test_objects_put_back_mean_an_index_read_again(
    project: Path, monkeypatch: pytest.MonkeyPatch, fails: bool
) -> None:
    backup = git_backup.sync(project, project / ".git")
    sh(project, "echo staged > staged && git add staged")  # its blob is in no commit: gone with the objects
    shutil.rmtree(project / ".git" / "objects")
    if fails:  # copied part way: the index is read again all the same, and the failure named
        copy = git_backup._objects

        def part_way(backup: git_backup.Backup) -> bool:
            copy(backup)
            raise OSError("No space left on device")

        monkeypatch.setattr(git_backup, "_objects", part_way)
    line = git_backup.repair(backup)
    assert line is not None and line.endswith(
        "scheduler's copy, except: No space left on device" if fails else "scheduler's copy"
    )
    assert sh(project, "git status --porcelain").splitlines() == ["?? staged"]
    sh(project, "git stash push -q --include-untracked")


def test_what_cannot_be_put_back_is_named(project: Path) -> None:
    backup = git_backup.sync(project, project / ".git")
    main = sh(project, "git rev-parse main").strip()
    shutil.rmtree(project / ".git" / "refs" / "heads" / "feature")
    (project / ".git" / "refs" / "heads" / "feature").write_text(f"{main}\n")  # in the way of feature/F003
    missing = "refs/heads/feature/F001 missing, refs/heads/feature/F002 missing"
    assert git_backup.repair(backup) == (
        f"the session damaged .git ({missing}); restored from the scheduler's copy, except: {missing}, "
        "fatal: cannot lock ref 'refs/heads/feature/F001': 'refs/heads/feature' exists; cannot create 'refs/heads/feature/F001'"
    )


def test_a_git_folder_outside_the_project_is_named_by_its_path(tmp_path: Path) -> None:
    project, elsewhere = tmp_path / "app", tmp_path / "repo.git"
    project.mkdir()
    sh(
        tmp_path,
        f"git init -q -b main --separate-git-dir {elsewhere} app && cd app && git commit -q --allow-empty -m a",
    )
    backup = git_backup.sync(project, elsewhere)
    (elsewhere / "HEAD").write_text("garbage")
    assert (
        git_backup.repair(backup)
        == f"the session damaged {elsewhere} (HEAD unreadable); restored from the scheduler's copy"
    )
    assert sh(project, "git rev-parse --abbrev-ref HEAD") == "main\n"


def test_a_fetch_that_fails_keeps_the_earlier_backup(project: Path) -> None:
    sh(project, "git checkout -q -b feature/F004 && echo 5 > b && git add b && git commit -qm c")
    tree = sh(project, "git rev-parse HEAD^{tree}").strip()
    loose = project / ".git" / "objects" / tree[:2] / tree[2:]
    content = loose.read_bytes()
    loose.unlink()
    first = git_backup.sync(project, project / ".git")
    assert (
        first.error
        and first.refs == {}
        and first.head == "ref: refs/heads/main\n"
        and git_backup.load(project) is None
    )
    loose.write_bytes(content)
    earlier = git_backup.sync(project, project / ".git")
    assert earlier.error == "" and earlier.head == "ref: refs/heads/feature/F004\n"
    sh(project, "git stash clear && git checkout -q -b feature/F005 && echo 6 > b && git commit -qam d")
    tree = sh(project, "git rev-parse HEAD^{tree}").strip()
    (project / ".git" / "objects" / tree[:2] / tree[2:]).unlink()
    backup = git_backup.sync(project, project / ".git")
    assert backup.error.startswith("the scheduler's copy of the repository could not be brought up to date (")
    assert (
        backup.error.endswith("); it keeps the repository as an earlier session found it")
        and "fatal: " in backup.error
    )
    assert backup.refs == earlier.refs and backup.head == earlier.head
    assert (backup.store / "scheduler" / "stash-log").exists(), "kept as the earlier backup found it"
    sh(project, "git update-ref -d refs/heads/feature/F005")
    assert not (git_backup.sync(project, project / ".git").store / "scheduler" / "stash-log").exists()


def test_a_backup_that_cannot_be_read_is_named(project: Path) -> None:
    store = git_backup.sync(project, project / ".git").store
    shutil.rmtree(store / "objects")
    for backup in (git_backup.sync(project, project / ".git"), git_backup.load(project)):
        assert backup is not None and backup.refs == {}
        assert backup.error.startswith("the scheduler's copy of the repository cannot be read (fatal: ")
        assert backup.error.endswith(f"); remove {store} to start a new one")


def test_when_a_run_opens_the_repository_only_damage_is_repaired(project: Path) -> None:
    backup = git_backup.sync(project, project / ".git")
    sh(
        project,
        "git branch -D feature/F002 && git tag -d v1 && echo x > a && git commit -qam person && touch .git/index.lock",
    )
    assert git_backup.repair(backup, at_open=True) is None, "a person's changes between runs are kept"
    assert "feature/F002" not in sh(project, "git branch") and (project / ".git" / "index.lock").exists()
    assert sh(project, "git tag") == ""
    (project / ".git" / "refs" / "heads" / "main").unlink()
    line = git_backup.repair(backup, at_open=True)
    assert (
        line
        == ".git was damaged since the last session began (HEAD points to no commit); restored from the scheduler's copy"
    )


# -- the scheduler ----------------------------------------------------------------------------------


class Destroying(InProcessRobotRunner):
    """The robot, with sessions that destroy `.git` after doing their work."""

    def __init__(
        self, scenario: Scenario, destroy: dict[int, Callable[[Path], object]], *, kill: bool = False
    ) -> None:
        super().__init__(scenario)
        self.destroy, self.kill = destroy, kill

    async def run(self, request: SessionRequest) -> SessionResult:
        result = await super().run(request)
        if request.plan.number in self.destroy:
            self.destroy[request.plan.number](request.cwd / ".git")
            if self.kill:
                raise KeyboardInterrupt
        return result


def new_scheduler_project(tmp_path: Path) -> Path:
    project = tmp_path / "app"
    project.mkdir()
    (project / "app_spec.txt").write_text(SPEC.read_text())
    return project


def test_a_run_whose_sessions_destroy_the_repository_is_undone_and_finishes(tmp_path: Path) -> None:
    project = new_scheduler_project(tmp_path)

    def objects_and_head(g: Path) -> None:
        shutil.rmtree(g / "objects")
        (g / "HEAD").write_text("garbage")

    destroy: dict[int, Callable[[Path], object]] = {2: shutil.rmtree, 4: objects_and_head}
    lines: list[str] = []
    cfg = AgentConfig(feature_count=1)
    report = Scheduler(
        project, cfg, Destroying(Scenario.from_json({"features": 1}), destroy), echo=lines.append
    ).run()
    assert report.status == "done" and report.state.backlog.passing == {"F001"}
    damaged = [
        (2, "the session damaged .git (.git missing); restored from the scheduler's copy"),
        (
            4,
            "the session damaged .git (.git/objects missing, HEAD unreadable); restored from the scheduler's copy",
        ),
    ]
    assert all(f"  undo: {line}" in lines for _, line in damaged)
    events = [
        json.loads(line) for line in (project / ".agent_logs" / "events.jsonl").read_text().splitlines()
    ]
    undone = [(e["session"], e["reason"]) for e in events if e["kind"] == "undo"]
    assert undone[0] == damaged[0] and damaged[1] in undone
    assert [e["standing"] for e in events if e["kind"] == "session_ended"] == [
        "verified",
        "failed",
        "verified",
        "failed",
        "verified",
    ]
    assert gitops.is_ancestor(gitops.open_repo(project), "feature/F001", "main")
    sh(
        project, "git rev-list --objects --all >/dev/null"
    )  # every ref's history is there (the reflogs may name lost work)


def test_a_run_killed_in_a_session_that_destroyed_the_repository_resumes_on_it(tmp_path: Path) -> None:
    project = new_scheduler_project(tmp_path)
    cfg = AgentConfig(feature_count=1)
    scenario = Scenario.from_json({"features": 1})
    with pytest.raises(KeyboardInterrupt):
        Scheduler(
            project, cfg, Destroying(scenario, {2: shutil.rmtree}, kill=True), echo=lambda _: None
        ).run()
    assert not (project / ".git").exists()
    lines: list[str] = []
    report = Scheduler(project, cfg, InProcessRobotRunner(scenario), echo=lines.append).run()
    assert report.status == "done" and report.state.backlog.passing == {"F001"}
    assert (
        "  WARNING: .git was damaged since the last session began (.git missing); restored from the scheduler's copy"
        in lines
    )


def test_a_backup_that_cannot_be_brought_up_to_date_is_a_warning(tmp_path: Path) -> None:
    project = new_scheduler_project(tmp_path)

    def break_history(g: Path) -> None:  # a kept ref whose commit's tree is gone: no fetch can copy it
        blob = sh(g.parent, "echo only-here | git hash-object -w --stdin").strip()
        tree = sh(g.parent, f"printf '100644 blob {blob}\\tx\\n' | git mktree").strip()
        sh(g.parent, f"git update-ref refs/scheduler/broken $(git commit-tree {tree} -m x)")
        (g / "objects" / tree[:2] / tree[2:]).unlink(missing_ok=True)

    lines: list[str] = []
    report = Scheduler(
        project,
        AgentConfig(feature_count=1),
        Destroying(Scenario.from_json({"features": 1}), {1: break_history}),
        echo=lines.append,
    ).run()
    assert report.status == "done"
    assert any(
        line.startswith("  WARNING: the scheduler's copy of the repository could not be brought up to date")
        for line in lines
    )
