"""The environment that keeps a Claude Code CLI on loopback, talking to our server."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

DUMMY_API_KEY = "sk-ant-scripted-dummy-key"

# Variables that could send the CLI elsewhere or change its auth, dropped first.
_DROP_PREFIXES = ("ANTHROPIC_", "CLAUDE_CODE_USE_", "OTEL_")
_DROP_EXACT = frozenset(
    {
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "FTP_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "ftp_proxy",
        "NODE_USE_ENV_PROXY",
        "CLAUDE_CODE_API_BASE_URL",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "CLAUDE_CODE_ENABLE_TELEMETRY",
        "CLAUDE_CONFIG_DIR",
        "CLAUDE_CODE_MAX_RETRIES",
        "CLAUDECODE",
        "CLAUDE_CODE_ENTRYPOINT",
        "CLOUD_ML_REGION",
    }
)

# Switches that turn off every call the CLI makes besides the model API.
_QUIET = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
    "DISABLE_GROWTHBOOK": "1",
    "DISABLE_INSTALLATION_CHECKS": "1",
    "CLAUDE_CODE_DISABLE_FEATURE_FLAGS": "1",
    "DO_NOT_TRACK": "1",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}


def hermetic_env(
    base_url: str,
    home: Path,
    *,
    max_retries: int = 2,
    auth_token: str | None = None,
) -> dict[str, str]:
    """A full subprocess environment pointing the CLI at base_url and nowhere else."""
    if not base_url.startswith(("http://127.0.0.1", "http://localhost", "http://[::1]")):
        raise ValueError(f"base_url must be a loopback http URL, got {base_url!r}")
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in _DROP_EXACT and not key.startswith(_DROP_PREFIXES)
    }
    home_dir = home / "home"
    config_dir = home / "claude-config"
    home_dir.mkdir(parents=True, exist_ok=True)
    config_dir.mkdir(parents=True, exist_ok=True)
    env.update(_QUIET)
    env.update(
        {
            "ANTHROPIC_BASE_URL": base_url.rstrip("/"),
            "HOME": str(home_dir),
            "CLAUDE_CONFIG_DIR": str(config_dir),
            "CLAUDE_CODE_MAX_RETRIES": str(max_retries),
        }
    )
    if auth_token is None:
        env["ANTHROPIC_API_KEY"] = DUMMY_API_KEY
    else:
        env["ANTHROPIC_AUTH_TOKEN"] = auth_token
    return env


def sdk_env(
    base_url: str,
    home: Path,
    *,
    max_retries: int = 2,
    auth_token: str | None = None,
) -> dict[str, str]:
    """hermetic_env plus blanks for dropped variables, for ClaudeAgentOptions.env.

    The SDK merges options.env over os.environ, so a key merely absent from
    options.env is inherited; an empty value is what overrides it.
    """
    env = hermetic_env(base_url, home, max_retries=max_retries, auth_token=auth_token)
    blanks = {key: "" for key in os.environ if key not in env}
    return {**blanks, **env}


def gateway_token(subject: str = "scripted") -> str:
    """An unsigned JWT with aud=claude-gateway, for ANTHROPIC_AUTH_TOKEN.

    With it (and a non-Anthropic base URL) the CLI reads the
    anthropic-ratelimit-unified-* headers: usage limits then surface as a
    RateLimitEvent. With an API key or an opaque token they do not.
    """

    def part(obj: dict[str, str]) -> str:
        raw = json.dumps(obj, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    header = part({"alg": "none", "typ": "JWT"})
    return f"{header}.{part({'aud': 'claude-gateway', 'sub': subject})}.c2NyaXB0ZWQ"
