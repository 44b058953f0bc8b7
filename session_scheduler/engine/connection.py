"""How the scheduler and its workers connect to a Temporal server: the address is `--engine`'s
(saved with the project); TLS, the API key and gRPC headers come from the Temporal SDK's own
environment configuration of each process (`temporalio.envconfig`: the variables and the config
file of Temporal's CLI, core/engine.CONNECTION_ENV), read at the edge and never saved. Nothing
configured: a plain connection, as before.

The connection's errors are said in one line, a TLS failure as one (what to check), never as the
SDK's transport dump."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

from temporalio.envconfig import ClientConfigProfile
from temporalio.runtime import LogForwardingConfig, LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter

from session_scheduler.core.engine import CONNECTION_ENV_PREFIX
from session_scheduler.core.errors import ConfigError

TLS_FILES: tuple[str, ...] = (
    "TEMPORAL_TLS_SERVER_CA_CERT_PATH",
    "TEMPORAL_TLS_CLIENT_CERT_PATH",
    "TEMPORAL_TLS_CLIENT_KEY_PATH",
)
"""The variables that name a file the connection reads (its CA, the client's certificate and key)."""
NO_HOST_CHECK = "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION"
"""Read by Temporal's CLI, not by the Python SDK (it always checks the name): refused, not ignored."""
TAKEN = ("tls", "api_key", "rpc_metadata")
"""What the settings give `Client.connect`: never the address (`--engine`'s) nor the namespace."""
CA_HINT = "give the CA that signed it in TEMPORAL_TLS_SERVER_CA_CERT_PATH"

_TLS_FAILURES: tuple[tuple[str, str], ...] = (
    ("UnknownIssuer", f"the server's certificate is signed by a CA this machine does not trust: {CA_HINT}"),
    ("NotValidForName", "the server's certificate is not for this address: set TEMPORAL_TLS_SERVER_NAME"),
    ("Expired", "the server's certificate has expired"),
    (
        "CertificateRequired",
        "the server wants a client certificate: TEMPORAL_TLS_CLIENT_CERT_PATH and _KEY_PATH",
    ),
    ("BadCertificate", "the server refused the client certificate (TEMPORAL_TLS_CLIENT_CERT_PATH)"),
    ("InvalidCertificate", f"the server's certificate is refused: {CA_HINT}"),
    ("InvalidContentType", "the server does not answer in TLS: check the port, or unset TEMPORAL_TLS"),
    ("InvalidMessage", "the server does not answer in TLS: check the port, or unset TEMPORAL_TLS"),
    (
        "close_notify",
        "the server ended the connection; if it wants a client certificate, give it in "
        "TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH",
    ),
)
"""Words of the SDK's TLS errors (rustls's) and what each means, first match wins."""
_PLAIN_FAILURES: tuple[tuple[str, str], ...] = (
    ("Connection refused", "connection refused"),
    ("ConnectionRefused", "connection refused"),
    ("dns error", "dns error"),
    ("timed out", "timed out"),
    ("Name or service not known", "name or service not known"),
    ("BrokenPipe", "the server closed the connection; if it wants TLS, set TEMPORAL_TLS=true"),
)


CLIENT_LOG = "temporal-client.log"
"""In the run's log folder, and in a worker's folder: the Temporal SDK's own log lines (its
retries while a server is away), which would otherwise flood the console."""
_RUNTIMES = itertools.count()


def logged_runtime(log_file: Path) -> Runtime:
    """A Temporal runtime (`Client.connect(runtime=...)`) whose core writes its warnings and errors
    to `log_file` instead of the console (a logger of its own, not shared: not propagated)."""
    logger = logging.getLogger(f"{__name__}.runtime{next(_RUNTIMES)}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = logging.FileHandler(log_file, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    forwarded = LoggingConfig(
        filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
        forwarding=LogForwardingConfig(logger=logger),
    )
    return Runtime(telemetry=TelemetryConfig(logging=forwarded))


def connect_options(environ: Mapping[str, str]) -> dict[str, Any]:
    """The keyword arguments of `Client.connect(address, ...)` from the SDK's environment
    configuration in `environ` (and the config file it names, or Temporal's default one): `tls`,
    `api_key`, `rpc_metadata`, each only when configured. ConfigError, in one line, for settings
    the SDK refuses and for a named file that cannot be read (which variable, which file)."""
    if environ.get(NO_HOST_CHECK, "").strip().lower() in ("true", "1"):
        raise ConfigError(
            f"{NO_HOST_CHECK} is not supported here (the server's name is always checked): "
            f"{CA_HINT}, and its name in TEMPORAL_TLS_SERVER_NAME"
        )
    try:
        profile = ClientConfigProfile.load(override_env_vars=dict(environ))
    except RuntimeError as exc:  # the SDK's ConfigError: a variable given twice, a profile missing, bad TOML
        raise ConfigError(f"the Temporal connection settings are refused: {exc}") from None
    try:
        config = profile.to_client_connect_config()  # reads the TLS files
    except OSError as exc:
        raise ConfigError(f"{_named_by(exc.filename, environ)} cannot be read ({exc.strerror})") from None
    return {key: value for key, value in config.items() if key in TAKEN}


def _named_by(filename: object, environ: Mapping[str, str]) -> str:
    """Who named the file: its variable, or the config file's profile."""
    for name in TLS_FILES:
        given = environ.get(name)
        if given and Path(given) == Path(str(filename)):
            return f"{name} names {filename}, which"
    config_file = environ.get("TEMPORAL_CONFIG_FILE") or "Temporal's config file"
    return f"{filename} (a TLS file of {config_file}'s profile)"


def forget(environ: MutableMapping[str, str]) -> None:
    """Drop the connection's variables from `environ` (a worker's, once its options are read): the
    sessions it starts, and everything they start, never inherit its keys."""
    for name in [n for n in environ if n.startswith(CONNECTION_ENV_PREFIX)]:
        del environ[name]


def tls_error(exc: BaseException) -> str | None:
    """What a TLS failure among the SDK's connection errors means (None: not one)."""
    text = str(exc)
    for said, meaning in _TLS_FAILURES:
        if said in text:
            return f"TLS handshake failed: {meaning}"
    return None


def connect_error(exc: BaseException) -> str:
    """What the SDK's connection error says, without its transport's debug text."""
    tls = tls_error(exc)
    if tls is not None:
        return tls
    text = str(exc)
    for said, plain in _PLAIN_FAILURES:
        if said.lower() in text.lower():
            return plain
    return text.split(":", 1)[0].strip() or "no answer"
