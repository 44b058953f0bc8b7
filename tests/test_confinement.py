"""What every sandbox on this machine hides and re-opens (confinement.py): the homes, Claude Code's
config, the projects beside the project and the temp folders are denied, never `/`; toolchains on
PATH are re-opened, never credentials folders; credentials inside re-opened toolchains stay denied."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from session_scheduler.core.confinement import Host, denied_regions, kept_denied, reopened, toolchains

HOST = Host(homes=("/root", "/home"), config_dir=None, secret_env=(), path=(), temp="/tmp")


def test_the_host_is_read_from_the_environment() -> None:
    env = {
        "HOME": "/h",
        "PATH": "/usr/bin:relative:/b",
        "GITLAB_DEPLOY_TOKEN": "x",
        "DB_PASSWORD": "x",
        "EDITOR": "vi",
        "CLAUDE_CONFIG_DIR": "/c",
    }
    host = Host.of(env)
    assert (
        host.homes == ("/h", "/root", "/home") and host.config_dir == "/c" and host.path == ("/usr/bin", "/b")
    )
    assert host.temp == tempfile.gettempdir()
    assert {
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "GITLAB_DEPLOY_TOKEN",
        "DB_PASSWORD",
    } <= set(host.secret_env)
    assert (
        "EDITOR" not in host.secret_env
        and "CLAUDE_CODE_MAX_RETRIES" not in Host.of({"CLAUDE_CODE_MAX_RETRIES": "2"}).secret_env
    )
    assert Host.of({"CLAUDE_CONFIG_DIR": ""}).config_dir is None
    assert Host.of({}).homes[0] == os.path.expanduser("~"), "no HOME named: the user's own is still denied"


def test_homes_config_the_projects_beside_and_the_temp_folders_are_denied() -> None:
    host = Host(
        homes=("/home/u", "/root", "/home"), config_dir="/etc/claude", secret_env=(), path=(), temp="/scratch"
    )
    assert denied_regions(Path("/work/gen/app"), host) == (
        "/home/u", "/root", "/home", "/etc/claude", "/work/gen", "/tmp", "/var/tmp", "/scratch",
    )  # fmt: skip


def test_no_config_folder_and_a_project_at_the_root_deny_nothing_more_and_never_the_root() -> None:
    assert denied_regions(Path("/app"), HOST) == ("/root", "/home", "/tmp", "/var/tmp")
    assert "/" not in denied_regions(Path("/app"), Host(("/", "/root", "/home"), None, (), (), "/tmp"))
    assert "/" not in denied_regions(Path("/app"), HOST, open_shared_parent=True)


@pytest.mark.parametrize("parent", ["/tmp", "/var/tmp", "/scratch"])
def test_a_shared_temp_parent_stays_open_only_when_asked(parent: str) -> None:
    host = Host(homes=("/root", "/home"), config_dir=None, secret_env=(), path=(), temp="/scratch")
    project = Path(parent, "app")
    assert parent in denied_regions(project, host), (
        "the test command's worktree lies apart: its project's parent is denied"
    )
    opened = denied_regions(project, host, open_shared_parent=True)
    assert opened == tuple(p for p in ("/root", "/home", "/tmp", "/var/tmp", "/scratch") if p != parent), (
        "the other temp folders stay denied, and no config folder is named when there is none"
    )


@pytest.mark.parametrize(
    ("entry", "opened"),
    [
        ("/root/.pyenv/shims", "/root/.pyenv"),  # a toolchain's top folder under the home
        ("/root/bin", "/root/bin"),
        ("/home/u/.nvm/versions/node/bin", "/home/u/.nvm"),  # another user's: one level deeper
        ("/root/.local/bin", "/root/.local/bin"),  # a folder mixing tools and secrets: only the tool's
        ("/home/u/.config/tool/bin", "/home/u/.config/tool"),
        ("/work/gen/tools/bin", "/work/gen/tools"),  # the deepest region decides
        ("/usr/bin", None),  # not denied: nothing to re-open
        ("/root", None),  # a whole home is never re-opened
        ("/home/u", None),
        ("/root/.local", None),
        ("/root/.ssh/bin", None),  # credentials folders never
        ("/home/u/.claude/local/bin", None),
        ("/srv/cfg/local/bin", None),  # nothing inside Claude Code's config
    ],
)
def test_a_path_entry_in_a_denied_region_reopens_its_toolchain_folder(entry: str, opened: str | None) -> None:
    regions = ("/work", "/root", "/home", "/work/gen", "/srv/cfg")
    assert reopened([entry], regions, ("/srv/cfg", None)) == ((opened,) if opened else ())


def test_an_entry_with_nothing_to_reopen_does_not_stop_the_entries_after_it() -> None:
    regions = ("/root", "/srv/cfg")
    for skipped in ("/usr/bin", "/srv/cfg/local/bin", "/root", "/root/.ssh/bin"):
        assert reopened([skipped, "/root/.pyenv/shims"], regions, ("/srv/cfg",)) == ("/root/.pyenv",), skipped


def test_reopened_folders_are_listed_once() -> None:
    assert reopened(["/root/.pyenv/shims", "/root/.pyenv/bin"], ["/root"]) == ("/root/.pyenv",)


def test_toolchains_reached_through_home_are_named_under_each_home_but_not_the_users_root() -> None:
    found = toolchains(("~", "/root", "/home"))
    assert {"~/.rustup", "/root/.rustup", "/root/.local/lib", "/root/go"} <= set(found)
    assert not any(p.startswith("/home") for p in found)
    assert not any(p.endswith((".ssh", ".aws", ".config", ".local")) for p in found)


def test_credentials_inside_reopened_toolchains_stay_denied() -> None:
    kept = kept_denied(("/home/u", "/root", "/home"), ("/home/bob/.cargo", "/root/.pyenv"))
    assert {
        "/home/u/.cargo/credentials",
        "/home/u/.cargo/credentials.toml",
        "/root/.local/share/keyrings",
    } <= set(kept)
    assert {"/home/bob/.cargo/credentials", "/home/bob/.cargo/credentials.toml"} <= set(kept), (
        "another user's, re-opened by PATH"
    )
    assert not any(p.startswith("/home/.") for p in kept) and not any(
        p.startswith("/root/.pyenv") for p in kept
    )
