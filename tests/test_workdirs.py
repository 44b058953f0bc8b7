"""Lane clones: made beside the project sharing nothing with it, checked by what git answers,
made again when a lane's agent broke them, synced to the project's main, and the lane's work
fetched back, without running any code a clone names."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import git
import pytest
from helpers import sh

from session_scheduler.core.errors import GitError
from session_scheduler.guard import safe_git
from session_scheduler.repo import gitops, workdirs


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "app"
    root.mkdir()
    sh(root, "git init -q -b main && git config user.name me && git config user.email me@x")
    sh(root, "echo one > f && git add f && git commit -qm one")
    return root


def test_a_lane_clone_is_made_beside_the_project_and_shares_no_file_with_it(project: Path) -> None:
    repo = safe_git.open(project)
    clone, problem = workdirs.ensure(repo, project, 2)
    path = Path(clone.working_dir)
    assert problem is None and path == project.parent / "app.lanes" / "lane-2"
    assert not path.is_relative_to(project)
    assert gitops.head(clone, "main") == gitops.head(repo, "main") and (path / "f").read_text() == "one\n"
    assert gitops.current_branch(clone) == "main" and sh(path, "git status --porcelain") == ""
    assert all(p.stat().st_nlink == 1 for p in (path / ".git" / "objects").rglob("*") if p.is_file())
    assert not (path / ".git" / "objects" / "info" / "alternates").exists()
    assert sh(path, "git config user.email") == "me@x"
    (path / "scratch").write_text("the lane's own")
    again, problem = workdirs.ensure(repo, project, 2)
    assert problem is None and (Path(again.working_dir) / "scratch").exists()  # a good clone is kept


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        ("rm -rf .git", "its .git is not a folder of its own"),
        ("rm -rf .git && ln -s {project}/.git .git", "its .git is not a folder of its own"),
        (
            "echo 'gitdir: {project}/.git' > .git.tmp && rm -rf .git && mv .git.tmp .git",
            "its .git is not a folder of its own",
        ),
        (
            "echo {project}/.git/objects > .git/objects/info/alternates",
            "it borrows objects from another repository",
        ),
        ("rm -rf .git/objects .git/refs .git/HEAD", "git cannot read it"),
        (  # a file git would not read as blank is not the sandbox's empty mount point
            "python3 -c \"open('.git/objects/info/alternates', 'w').write(' ' * 4096)\"",
            "it borrows objects from another repository",
        ),
    ],
)
def test_a_clone_a_lane_broke_is_made_again_and_the_project_is_untouched(
    project: Path, damage: str, problem: str
) -> None:
    repo = safe_git.open(project)
    clone, _ = workdirs.ensure(repo, project, 0)
    path = Path(clone.working_dir)
    # status without refreshing the index, and the listing without times: a minute that turns
    # between the two looks must not read as a change
    look = "git for-each-ref && git --no-optional-locks status --porcelain && ls -la --time-style=+ .git"
    before = sh(project, look)
    sh(path, damage.format(project=project))
    again, found = workdirs.ensure(repo, project, 0)
    assert found == problem and workdirs.problem_of(path) is None
    assert gitops.head(again, "main") == gitops.head(repo, "main")
    assert sh(project, look) == before


def test_a_lane_folder_that_is_a_link_is_replaced_not_followed(project: Path, tmp_path: Path) -> None:
    repo = safe_git.open(project)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep").write_text("not the scheduler's")
    workdirs.root_of(project).mkdir()
    workdirs.path_of(project, 1).symlink_to(elsewhere)
    _, problem = workdirs.ensure(repo, project, 1)
    assert problem == "it is not a folder" and not workdirs.path_of(project, 1).is_symlink()
    assert (elsewhere / "keep").read_text() == "not the scheduler's"


def test_a_lane_s_main_follows_the_project_s_and_its_own_commits_on_main_go(project: Path) -> None:
    repo = safe_git.open(project)
    clone, _ = workdirs.ensure(repo, project, 0)
    path = Path(clone.working_dir)
    sh(path, "echo lane > f && git commit -qam 'on the lane main'")
    sh(project, "echo two > g && git add g && git commit -qm two")
    main = gitops.head(repo, "main")
    assert main is not None
    workdirs.sync_main(clone, project, main)
    assert (
        gitops.head(clone, "main") == main and (path / "f").read_text() == "one\n" and (path / "g").exists()
    )
    sh(path, "git checkout -qb feature/F001")
    sh(project, "echo three >> g && git commit -qam three")
    main = gitops.head(repo, "main")
    assert main is not None
    workdirs.sync_main(clone, project, main)  # on another branch: main moves, the checkout stays
    assert gitops.head(clone, "main") == main and gitops.current_branch(clone) == "feature/F001"


def test_a_sync_the_clone_redirects_is_refused(project: Path, tmp_path: Path) -> None:
    """The clone's config sends the scheduler's fetch to another repository (`insteadOf`): the
    lane's main is not the project's, which the caller is told."""
    repo = safe_git.open(project)
    clone, _ = workdirs.ensure(repo, project, 0)
    fake = tmp_path / "fake"
    fake.mkdir()
    sh(fake, "git init -q -b main && git -c user.name=a -c user.email=a@a commit -q --allow-empty -m fake")
    sh(Path(clone.working_dir), f"git config url.{fake}.insteadOf {project}")
    sh(project, "git commit -q --allow-empty -m moved")
    main = gitops.head(repo, "main")
    assert main is not None
    with pytest.raises(GitError, match=f"did not take the project's main {main[:10]}$"):
        workdirs.sync_main(clone, project, main)


def test_the_lane_s_branch_comes_back_and_another_lane_s_is_handed_over(project: Path) -> None:
    repo = safe_git.open(project)
    one, _ = workdirs.ensure(repo, project, 1)
    sh(
        Path(one.working_dir),
        "git checkout -qb feature/F001 && echo f1 > f1 && git add f1 && git commit -qm F001",
    )
    tip = workdirs.bring_back(repo, Path(one.working_dir), "feature/F001")
    assert tip == gitops.head(one, "feature/F001") and gitops.head(repo, "feature/F001") == tip
    assert sh(project, f"git cat-file -t {tip}") == "commit"
    two, _ = workdirs.ensure(repo, project, 2)
    workdirs.hand_over(repo, two, project, "feature/F001")
    assert gitops.head(two, "feature/F001") == tip
    sh(Path(one.working_dir), "git checkout -q main && git branch -D feature/F001")
    assert workdirs.bring_back(repo, Path(one.working_dir), "feature/F001") is None
    assert gitops.head(repo, "feature/F001") is None  # the lane dropped it: so does the project
    with pytest.raises(GitError, match="no branch feature/F001 to hand to a lane"):
        workdirs.hand_over(repo, two, project, "feature/F001")


def test_no_code_a_clone_names_runs_in_the_scheduler_s_git(project: Path, tmp_path: Path) -> None:
    """Hooks, an fsmonitor, a hooks path and an upload-pack hook planted in a lane's clone: the
    scheduler's sync and fetch back run none of them."""
    marker = tmp_path / "ran"
    repo = safe_git.open(project)
    clone, _ = workdirs.ensure(repo, project, 0)
    path = Path(clone.working_dir)
    payload = f"#!/bin/sh\ntouch {marker}\n"
    for hook in ("post-checkout", "reference-transaction", "pre-auto-gc", "post-index-change"):
        (path / ".git" / "hooks" / hook).write_text(payload)
        os.chmod(path / ".git" / "hooks" / hook, 0o755)
    (path / "fsmon").write_text(payload)
    os.chmod(path / "fsmon", 0o755)
    sh(path, f"git config core.fsmonitor {path}/fsmon && git config core.hooksPath .git/hooks")
    sh(path, f"git config uploadpack.packObjectsHook {path}/fsmon")
    sh(path, "git checkout -qb feature/F002 && echo x > x && git add x && git commit -qm x --no-verify")
    marker.unlink(missing_ok=True)  # the agent's own git ran its hooks; the scheduler's must not
    sh(project, "git commit -q --allow-empty -m moved")
    main = gitops.head(repo, "main")
    assert main is not None
    workdirs.sync_main(clone, project, main)
    assert workdirs.bring_back(repo, path, "feature/F002") is not None
    assert not marker.exists()


def test_the_initializer_s_main_is_taken_from_its_lane(project: Path) -> None:
    repo = safe_git.open(project)
    clone, _ = workdirs.ensure(repo, project, 0)
    sh(Path(clone.working_dir), "echo skeleton > s && git add s && git commit -qm skeleton")
    taken = workdirs.take_main(repo, Path(clone.working_dir))
    assert taken == gitops.head(clone, "main") and sh(project, f"git cat-file -t {taken}") == "commit"
    assert gitops.head(repo, "main") != taken  # taken, not yet moved: the caller moves main


def _lane_commit(clone_path: Path, branch: str, name: str) -> None:
    sh(
        clone_path,
        f"git checkout -qB {branch} && echo {name} > {name} && git add {name} && git commit -qm {name}",
    )


def test_work_comes_back_as_a_pack_and_from_a_clone_that_cannot_pack_it_by_a_fetch(project: Path) -> None:
    """The pack path: the objects arrive, connected, and the ref moves. A clone that lacks the
    project's newest main (it cannot name what the project has) is fetched from instead."""
    repo = safe_git.open(project)
    clone, _ = workdirs.ensure(repo, project, 0)
    path = Path(clone.working_dir)
    _lane_commit(path, "feature/F001", "a")
    tip = workdirs.bring_back(repo, clone, "feature/F001")
    assert (
        tip == gitops.head(clone, "feature/F001") and sh(project, "git fsck --connectivity-only 2>&1") == ""
    )
    sh(project, "echo two > g && git add g && git commit -qm moved")  # main moves; the clone never saw it
    _lane_commit(path, "feature/F001", "b")
    tip = workdirs.bring_back(repo, clone, "feature/F001")
    assert tip == gitops.head(clone, "feature/F001") == gitops.head(repo, "feature/F001")
    assert sh(project, f"git cat-file -p {tip}:b") == "b"
    sh(path, "git checkout -q main && git merge -q --no-edit feature/F001")
    merged = workdirs.take_main(repo, clone, "refs/scheduler/reviewed/feature/F001")
    assert merged == gitops.head(clone, "main") and sh(project, f"git cat-file -t {merged}") == "commit"


def test_a_clone_that_borrows_objects_is_fetched_from_not_packed(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clone whose session named an alternate object store: its pack could carry objects from
    there, so the project fetches (its own transport rules) instead."""
    repo = safe_git.open(project)
    clone, _ = workdirs.ensure(repo, project, 0)
    path = Path(clone.working_dir)
    _lane_commit(path, "feature/F001", "a")
    other = tmp_path / "other"
    other.mkdir()
    sh(other, "git init -q")
    (path / ".git" / "objects" / "info" / "alternates").write_text(f"{other}/.git/objects\n")
    packed: list[str] = []
    real = workdirs._pack_into
    monkeypatch.setattr(workdirs, "_pack_into", lambda *a: packed.append("packed") or real(*a))
    tip = workdirs.bring_back(repo, clone, "feature/F001")
    assert tip == gitops.head(clone, "feature/F001") and packed == []


def test_local_files_are_copied_into_a_clone_kept_out_of_its_commits_and_never_through_a_link(
    project: Path, tmp_path: Path
) -> None:
    repo = safe_git.open(project)
    clone, _ = workdirs.ensure(repo, project, 0)
    path = Path(clone.working_dir)
    (project / ".env").write_text("KEY=1\n")
    (project / "config").mkdir()
    (project / "config" / "local.toml").write_text("port = 1\n")
    names = (".env", "config/local.toml", "gone.env")  # one the project no longer has: left out
    workdirs.place_local_files(project, clone, names)
    assert (path / ".env").read_text() == "KEY=1\n" and (
        path / "config" / "local.toml"
    ).read_text() == "port = 1\n"
    assert not (path / "gone.env").exists()
    assert sh(path, "git status --porcelain --untracked-files=all") == ""  # `git add -A` leaves them out
    outside = tmp_path / "outside.txt"
    outside.write_text("mine\n")
    (path / ".env").unlink()
    (path / ".env").symlink_to(outside)  # a session left a link where the file goes: replaced, not followed
    workdirs.place_local_files(project, clone, names)
    assert outside.read_text() == "mine\n" and not (path / ".env").is_symlink()
    sh(path, f"rm -rf config && ln -s {tmp_path} config")  # a folder on the way is a link
    with pytest.raises(GitError, match="config is not a folder there"):
        workdirs.place_local_files(project, clone, names)
    assert not (tmp_path / "local.toml").exists()


def test_a_local_file_must_be_an_untracked_regular_file_of_the_project(project: Path) -> None:
    from session_scheduler.core.errors import ConfigError
    from session_scheduler.run.opening import check_local_files

    repo = safe_git.open(project)
    (project / "link.env").symlink_to(project / "f")
    (project / "[ab].env").write_text("KEY=1\n")  # a name git would read as a pattern: taken as it is
    (project / "a.env").write_text("tracked\n")
    sh(project, "git add a.env && git commit -qm a")
    check_local_files(project, repo, ("[ab].env",))
    with pytest.raises(ConfigError, match=r"--local-file link.env: .* is not a file"):
        check_local_files(project, repo, ("link.env",))
    with pytest.raises(ConfigError, match="--local-file f: git tracks it"):
        check_local_files(project, repo, ("f",))


def test_the_common_case_packs_and_never_fetches(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A clone on the project's main: its work comes back as a pack, loose objects under 100 and a
    kept pack from 100 on, each walked before the ref moves; no fetch, and nothing carried when
    the project's branch is there already."""
    repo = safe_git.open(project)
    clone, _ = workdirs.ensure(repo, project, 0)
    path = Path(clone.working_dir)

    def no_fetch(*args: object) -> None:
        raise AssertionError("fetched where a pack would do")

    monkeypatch.setattr(workdirs, "_fetch_into", no_fetch)
    packs = lambda: sorted(p.name for p in (project / ".git" / "objects" / "pack").glob("*.pack"))  # noqa: E731
    _lane_commit(path, "feature/F001", "a")
    assert workdirs.bring_back(repo, clone, "feature/F001") == gitops.head(clone, "feature/F001")
    assert packs() == []  # three objects: unpacked loose
    sh(
        path,
        "mkdir many && for n in $(seq 120); do echo $n > many/$n; done && git add many && git commit -qm many",
    )
    tip = workdirs.bring_back(repo, clone, "feature/F001")
    assert (
        tip == gitops.head(clone, "feature/F001") and len(packs()) == 1
    )  # 120 blobs and more: kept as a pack
    assert sh(project, f"git cat-file -p {tip}:many/120") == "120"
    carried: list[str] = []
    monkeypatch.setattr(workdirs, "_carry", lambda *a: carried.append("carried"))
    assert workdirs.bring_back(repo, clone, "feature/F001") == tip and carried == []  # (a REVIEW's branch)


def test_a_pack_that_leaves_an_object_out_moves_no_ref(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the clone sends is walked from the tip in the project: a pack holding the commit
    without its tree is refused, and the branch is not made."""
    repo = safe_git.open(project)
    clone, _ = workdirs.ensure(repo, project, 0)
    path = Path(clone.working_dir)
    _lane_commit(path, "feature/F001", "a")
    tip = gitops.head(clone, "feature/F001")
    assert tip is not None
    real = clone.git.pack_objects

    def commit_only(*args: object, istream: object = None, output_stream: object = None) -> object:
        with tempfile.TemporaryFile() as only:
            only.write(f"{tip}\n".encode())
            only.seek(0)
            return real("--stdout", "-q", istream=only, output_stream=output_stream)

    monkeypatch.setattr(clone.git, "pack_objects", commit_only)
    with pytest.raises(git.GitCommandError):
        workdirs.bring_back(repo, clone, "feature/F001")
    assert gitops.head(repo, "feature/F001") is None


def test_a_clone_on_main_already_is_not_fetched_into_and_its_own_branch_not_handed_back(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = safe_git.open(project)
    clone, _ = workdirs.ensure(repo, project, 0)
    _lane_commit(Path(clone.working_dir), "feature/F001", "a")
    workdirs.bring_back(repo, clone, "feature/F001")
    main = gitops.head(repo, "main")
    assert main is not None
    fetched: list[tuple[object, ...]] = []
    real = clone.git.fetch
    monkeypatch.setattr(clone.git, "fetch", lambda *a, **k: fetched.append(a) or real(*a, **k))
    workdirs.sync_main(clone, project, main)
    workdirs.hand_over(repo, clone, project, "feature/F001")
    assert fetched == []
    sh(project, "git commit -q --allow-empty -m moved")
    moved = gitops.head(repo, "main")
    assert moved is not None
    workdirs.sync_main(clone, project, moved)
    assert len(fetched) == 1 and gitops.head(clone, "main") == moved


def test_local_files_are_listed_once_in_the_clone_s_exclude_and_keep_their_mode(project: Path) -> None:
    repo = safe_git.open(project)
    clone, _ = workdirs.ensure(repo, project, 0)
    path = Path(clone.working_dir)
    (project / "bin").mkdir()
    (project / "bin" / "local.sh").write_text("#!/bin/sh\necho local\n")
    (project / "bin" / "local.sh").chmod(0o750)
    for _ in range(2):
        workdirs.place_local_files(project, clone, ("bin/local.sh",))
    exclude = (path / ".git" / "info" / "exclude").read_text().splitlines()
    assert exclude.count("/bin/local.sh") == 1 and exclude[-1] == "/bin/local.sh"
    assert (path / "bin" / "local.sh").stat().st_mode & 0o777 == 0o750
    (path / "bin" / "local.sh").unlink()
    (path / "bin" / "local.sh").mkdir()  # a folder where the file goes
    with pytest.raises(GitError, match="a folder is there"):
        workdirs.place_local_files(project, clone, ("bin/local.sh",))


def test_a_pack_of_one_object_is_taken_in(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty commit: a pack holding only that commit (its tree is `main`'s) still goes in."""
    repo = safe_git.open(project)
    clone, _ = workdirs.ensure(repo, project, 0)
    sh(Path(clone.working_dir), "git checkout -qb feature/F001 && git commit -q --allow-empty -m nothing")
    monkeypatch.setattr(workdirs, "_fetch_into", lambda *a: pytest.fail("fetched"))
    tip = workdirs.bring_back(repo, clone, "feature/F001")
    assert tip == gitops.head(clone, "feature/F001") and sh(project, f"git cat-file -t {tip}") == "commit"


def test_a_clone_git_cannot_make_says_why_in_one_line(tmp_path: Path) -> None:
    not_a_repository = tmp_path / "app"
    not_a_repository.mkdir()
    sh(not_a_repository, "git init -q -b main")  # no commit: there is no main to clone
    repo = safe_git.open(not_a_repository)
    with pytest.raises(
        GitError, match=r"cannot make lane 3's clone in .*app.lanes/lane-3: .*main"
    ) as refused:
        workdirs.ensure(repo, not_a_repository, 3)
    assert "\n" not in str(refused.value).strip()


def test_a_dangling_link_where_a_clone_goes_is_not_a_folder(project: Path, tmp_path: Path) -> None:
    workdirs.root_of(project).mkdir()
    workdirs.path_of(project, 0).symlink_to(tmp_path / "nowhere")
    assert workdirs.problem_of(workdirs.path_of(project, 0)) == "it is not a folder"
    assert workdirs.problem_of(workdirs.path_of(project, 1)) == "it is missing"


def test_a_clone_without_main_has_none_to_take(project: Path) -> None:
    repo = safe_git.open(project)
    clone, _ = workdirs.ensure(repo, project, 0)
    sh(Path(clone.working_dir), "git checkout -q --detach && git branch -q -D main")
    with pytest.raises(GitError, match="lane-0 has no main to take"):
        workdirs.take_main(repo, clone)


def test_a_branch_checked_out_in_the_clone_is_handed_over_when_the_project_s_moved(project: Path) -> None:
    repo = safe_git.open(project)
    one, _ = workdirs.ensure(repo, project, 1)
    two, _ = workdirs.ensure(repo, project, 2)
    _lane_commit(Path(one.working_dir), "feature/F001", "a")
    workdirs.bring_back(repo, one, "feature/F001")
    workdirs.hand_over(repo, two, project, "feature/F001")
    sh(Path(two.working_dir), "git checkout -q feature/F001")  # lane 2 has it checked out
    _lane_commit(Path(one.working_dir), "feature/F001", "b")  # lane 1 goes on with it
    tip = workdirs.bring_back(repo, one, "feature/F001")
    workdirs.hand_over(repo, two, project, "feature/F001")
    assert gitops.head(two, "feature/F001") == tip


def test_a_local_file_the_project_no_longer_has_leaves_the_others_placed(project: Path) -> None:
    repo = safe_git.open(project)
    clone, _ = workdirs.ensure(repo, project, 0)
    (project / ".env").write_text("KEY=1\n")
    workdirs.place_local_files(project, clone, ("gone.env", ".env"))
    assert (Path(clone.working_dir) / ".env").read_text() == "KEY=1\n"
