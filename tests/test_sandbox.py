"""The OS sandbox: settings per session, a preflight that proves it, and the CLI's refusal without it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import factory_of, logged_in, request_for, state_for

from scripted_model.scenario import Scenario
from session_scheduler.core.config import AgentConfig, SessionType
from session_scheduler.guard.sandbox import PROVEN, Host, Preflight, preflight, private_tmp, sandbox_settings
from session_scheduler.testing.inprocess import InProcessRobotRunner
from session_scheduler.testing.seams import active_sandbox
from session_scheduler.view.cli import main

NEEDS_BWRAP = pytest.mark.skipif(
    shutil.which("bwrap") is None or shutil.which("socat") is None, reason="no bwrap/socat"
)


def test_every_session_is_sandboxed_with_a_private_temp_folder(tmp_path: Path) -> None:
    request = request_for(
        tmp_path, state_for(SessionType.IMPLEMENT), AgentConfig(allowed_domains=("pypi.org",))
    )
    sandbox = request.plan.settings["sandbox"]
    assert sandbox["enabled"] and sandbox["failIfUnavailable"] and not sandbox["allowUnsandboxedCommands"]
    assert sandbox["network"] == {"allowedDomains": ["pypi.org"]}
    tmp = request.plan.settings["env"]["TMPDIR"]
    assert sandbox["filesystem"]["allowWrite"] == [tmp] and Path(tmp).is_dir() and request.plan.sandboxed
    assert len(tmp) + len("/claude-socks-0123456789abcdef.sock") < 108, "the CLI's sockets live there"
    assert "Bash(git commit:*)" in request.plan.settings["permissions"]["allow"]
    assert "excludedCommands" not in sandbox, "no command runs outside the sandbox, git included"


def test_git_code_paths_and_scheduler_files_are_never_writable(tmp_path: Path) -> None:
    project = tmp_path / "app"
    denied = sandbox_settings(project, (), HOST)["sandbox"]["filesystem"]["denyWrite"]
    root = project.resolve()
    for name in (".git/hooks", ".git/config", ".git/info", ".agent_state.json", ".agent_logs", ".claude"):
        assert str(root / name) in denied
    assert str(root / "CLAUDE.md") not in denied  # the person's file (the CLI never reads it)


HOST = Host(
    homes=("/home/alice", "/root", "/home"),
    config_dir="/srv/claude-config",
    secret_env=("ANTHROPIC_API_KEY", "MY_SERVICE_TOKEN"),
    path=(
        "/home/alice/.pyenv/shims",
        "/root/.cargo/bin",
        "/home/bob/.local/bin",
        "/home/bob/.cargo/bin",
        "/usr/bin",
    ),
    temp="/scratch",
)


def test_reads_are_denied_for_homes_the_cli_config_and_other_projects(tmp_path: Path) -> None:
    project = tmp_path / "projects" / "app"
    fs = sandbox_settings(project, (), HOST)["sandbox"]["filesystem"]
    assert {"~", "/home/alice", "/root", "/home", "/srv/claude-config", str(project.resolve().parent)} <= set(
        fs["denyRead"]
    )
    assert {"/tmp", "/var/tmp", "/scratch"} <= set(fs["denyRead"]), (
        "other projects' private temps and test worktrees"
    )
    assert (
        "/home/alice/.cargo/credentials.toml" in fs["denyRead"] and "~/.cargo/credentials" in fs["denyRead"]
    )
    assert "/home/bob/.cargo/credentials.toml" in fs["denyRead"], (
        "inside another user's toolchain that PATH re-opens"
    )
    assert fs["allowRead"][:2] == [str(project.resolve()), str(private_tmp(project))]


def test_toolchains_inside_denied_homes_are_reopened() -> None:
    reopened = sandbox_settings(Path("/srv/app"), (), HOST)["sandbox"]["filesystem"]["allowRead"]
    assert {
        "/home/alice/.pyenv",
        "/root/.cargo",
        "/home/bob/.local/bin",
        "/home/bob/.cargo",
        "/home/alice/.nvm",
        "/home/alice/.rustup",
    } <= set(reopened)
    assert not any(
        p.endswith((".ssh", ".aws", ".config", ".local")) or p in ("/home/alice", "/root", "/home/bob")
        for p in reopened
    )
    assert "/usr" not in reopened, "what is not denied needs no re-opening"


def test_a_project_in_a_shared_temp_root_does_not_deny_the_root() -> None:
    for parent in ("/", "/tmp", "/var/tmp", "/scratch"):
        assert (
            parent
            not in sandbox_settings(Path(parent) / "app", (), HOST)["sandbox"]["filesystem"]["denyRead"]
        )


def test_secret_variables_are_unset_in_sandboxed_commands() -> None:
    host = Host.of(
        {
            "HOME": "/h",
            "PATH": "/usr/bin:relative",
            "GITLAB_DEPLOY_TOKEN": "x",
            "DB_PASSWORD": "x",
            "EDITOR": "vi",
            "CLAUDE_CONFIG_DIR": "/c",
        }
    )
    assert host.homes == ("/h", "/root", "/home") and host.config_dir == "/c" and host.path == ("/usr/bin",)
    names = {
        v["name"] for v in sandbox_settings(Path("/srv/app"), (), host)["sandbox"]["credentials"]["envVars"]
    }
    assert {
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "GITLAB_DEPLOY_TOKEN",
        "DB_PASSWORD",
    } <= names
    assert (
        "EDITOR" not in names
        and "CLAUDE_CODE_MAX_RETRIES" not in Host.of({"CLAUDE_CODE_MAX_RETRIES": "2"}).secret_env
    )


def test_file_rules_are_absolute_so_a_cd_keeps_them(tmp_path: Path) -> None:
    request = request_for(tmp_path, state_for(SessionType.IMPLEMENT), AgentConfig())
    root = "/" + request.cwd.resolve().as_posix()
    permissions = request.plan.settings["permissions"]
    assert (
        f"Write({root}/**)" in permissions["allow"] and f"Edit({root}/.git/hooks/**)" in permissions["deny"]
    )
    assert not any(
        rule.startswith(f"Edit({root}/.git") and "/.git/" not in rule for rule in permissions["deny"]
    ), "Edit deny rules become the sandbox's denyWrite: all of .git there would stop the agent's git"
    assert not any(r.startswith(("Edit(./", "Write(./")) for r in permissions["allow"] + permissions["deny"])


def test_without_the_sandbox_the_settings_have_none(tmp_path: Path) -> None:
    request = request_for(tmp_path, state_for(SessionType.IMPLEMENT), AgentConfig(sandbox=False))
    assert "sandbox" not in request.plan.settings and not request.plan.sandboxed


def test_the_preflight_names_missing_tools_and_how_to_install_them() -> None:
    result = preflight(which=lambda tool: None if tool == "bwrap" else "/usr/bin/" + tool)
    assert not result.active
    assert "bwrap missing" in result.message and "apt-get install bubblewrap socat" in result.message


@NEEDS_BWRAP
@pytest.mark.e2e
def test_the_preflight_proves_the_sandbox_through_the_real_cli() -> None:
    result = preflight()
    assert result.active and result.message.startswith(PROVEN), result.message
    assert "the command sandbox is active" in result.message, (
        "every start proves the test command's sandbox too"
    )


@NEEDS_BWRAP
@pytest.mark.e2e
def test_a_failing_command_sandbox_fails_the_preflight() -> None:
    result = preflight(
        commands=lambda: (False, "the command sandbox is NOT active: a probe wrote outside its worktree")
    )
    assert result == Preflight(False, "the command sandbox is NOT active: a probe wrote outside its worktree")


@NEEDS_BWRAP
@pytest.mark.e2e
def test_the_probe_notices_an_escape() -> None:
    result = preflight(sandboxed=False, commands=None)
    assert not result.active, result.message
    assert (
        "a probe wrote escaped outside the project, moved outside the project, .git/hooks/post-checkout"
        in result.message
    )


ACTIVE = Preflight(True, "active")


def invoke(*args: str, check: Preflight = ACTIVE) -> Any:
    robot = InProcessRobotRunner(Scenario.from_json({"features": 1}))
    return CliRunner().invoke(
        main,
        list(args),
        obj={
            "runners": factory_of(lambda _: robot),
            "preflight": lambda: check,
            "credentials": logged_in,
        },
    )


def test_check_says_in_one_line_whether_the_sandbox_is_active() -> None:
    ok = invoke("--check", check=active_sandbox())
    first, browser = ok.stdout.strip().splitlines()
    assert ok.exit_code == 0 and first == "the OS sandbox is active (a test stand-in)"
    assert browser.startswith(("REVIEW's browser can start", "warning: REVIEW's browser cannot start"))
    missing = invoke("--check", check=Preflight(False, "the OS sandbox is not available (bwrap missing)"))
    assert (
        missing.exit_code == 1 and missing.stderr.strip() == "the OS sandbox is not available (bwrap missing)"
    )


def test_a_run_without_a_working_sandbox_is_refused_and_changes_nothing(spec_file: Path) -> None:
    from session_scheduler.view.cli import resolve_project

    result = invoke(
        "--project-dir", "app", "--spec", str(spec_file), check=Preflight(False, "no sandbox here")
    )
    assert result.exit_code == 1
    assert "no sandbox here; or pass --no-sandbox" in result.stderr
    assert not (resolve_project("app") / ".agent_config.json").exists()


def test_no_sandbox_runs_with_a_warning_on_every_session(spec_file: Path) -> None:
    result = invoke(
        "--project-dir", "app", "--spec", str(spec_file), "--no-sandbox", check=Preflight(False, "x")
    )
    assert result.exit_code == 0, result.output
    sessions = result.stdout.count("=== Session ")
    assert sessions >= 3 and result.stdout.count("WARNING: no OS sandbox") == sessions
    assert "WARNING: --no-sandbox" in result.stderr


def test_allowed_domains_are_added_and_saved(spec_file: Path) -> None:
    import json

    from session_scheduler.view.cli import resolve_project

    invoke(
        "--project-dir",
        "app",
        "--spec",
        str(spec_file),
        "--max-iterations",
        "1",
        "--allow-domain",
        "example.org",
    )
    saved = json.loads((resolve_project("app") / ".agent_config.json").read_text())
    assert saved["allowed_domains"][-1] == "example.org" and "pypi.org" in saved["allowed_domains"]
    assert "sandbox" not in saved


def test_project_dir_is_required_without_check() -> None:
    result = invoke()
    assert result.exit_code == 2 and "Missing option '--project-dir'" in result.stderr


def test_main_is_unwritable_for_roles_that_may_not_move_it(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    for role, protected in ((SessionType.IMPLEMENT, True), (SessionType.FIX, True), (SessionType.ARCHITECTURE, True),
                            (SessionType.REVIEW, False), (SessionType.INITIALIZER, False)):  # fmt: skip
        state = state_for(role, open_review=1, fix_rounds=1) if role is SessionType.FIX else state_for(role)
        denied = request_for(tmp_path, state, AgentConfig()).plan.settings["sandbox"]["filesystem"][
            "denyWrite"
        ]
        assert (str(root / ".git/refs/heads/main") in denied) is protected, role
        assert (str(root / ".git/packed-refs") in denied) is protected, role


def test_local_files_are_checked_added_saved_and_forgotten(spec_file: Path) -> None:
    import json

    from session_scheduler.view.cli import resolve_project

    project = resolve_project("app")
    base = ("--project-dir", "app", "--spec", str(spec_file), "--max-iterations", "1")
    missing = invoke(*base, "--local-file", ".env")
    assert missing.exit_code not in (0, 3) and missing.stderr.count("\n") == 1, missing.output
    assert "--local-file .env:" in missing.stderr and "is not a file" in missing.stderr
    assert not project.exists(), "refused before anything is created or saved"
    outside = invoke(*base, "--local-file", "../secrets.env")
    assert outside.exit_code not in (0, 3) and "must be a path inside the project folder" in outside.stderr
    project.mkdir(parents=True)
    (project / ".env").write_text("KEY=1\n")
    ran = invoke(*base, "--local-file", ".env")
    assert ran.exit_code == 3 and "stopped after 1 session" in ran.stdout, ran.output
    saved = json.loads((project / ".agent_config.json").read_text())
    assert saved["local_files"] == [".env"]
    assert invoke("--project-dir", "app", "--max-iterations", "1", "--local-file", "none").exit_code == 3
    assert json.loads((project / ".agent_config.json").read_text())["local_files"] == []
