"""The connection to Temporal over TLS (engine/connection.py): the options built from the SDK's own
environment configuration (nothing set: a plain connection, as before), a named file that cannot be
read said in one line, the connection's variables never a session's; and, on 127.0.0.1, a real dev
server behind a TLS-terminating proxy (certificates made here): the scheduler's connection with the
CA given connects, without it says it is a TLS problem at once, and a worker process connects."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import shutil
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import wait_until

from session_scheduler.core.confinement import Host
from session_scheduler.core.errors import ConfigError
from session_scheduler.guard.sandbox import sandbox_settings

pytest.importorskip("temporalio")
x509 = pytest.importorskip("cryptography.x509")

from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: E402
from temporalio.service import TLSConfig  # noqa: E402

from session_scheduler.engine.connection import connect_error, connect_options, forget, tls_error  # noqa: E402
from session_scheduler.engine.devserver import dev_server  # noqa: E402
from session_scheduler.engine.temporal import _connect  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CA_VAR = "TEMPORAL_TLS_SERVER_CA_CERT_PATH"


# --- the options, as data ---------------------------------------------------------------------


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An environment with no Temporal config file (not the user's own)."""
    return {"TEMPORAL_CONFIG_FILE": str(tmp_path / "no-temporal.toml"), "PATH": "/usr/bin"}


def test_nothing_configured_is_a_plain_connection_as_before(env: dict[str, str]) -> None:
    assert connect_options(env) == {}
    assert connect_options({**env, "TEMPORAL_TLS": "false"}) == {"tls": False}


def test_the_address_and_the_namespace_stay_the_engine_s(env: dict[str, str]) -> None:
    given = {**env, "TEMPORAL_ADDRESS": "elsewhere:7233", "TEMPORAL_NAMESPACE": "other"}
    assert connect_options(given) == {}


def test_the_ca_the_client_s_certificate_and_the_api_key_are_the_sdk_s(
    tmp_path: Path, env: dict[str, str]
) -> None:
    for name in ("ca.pem", "client.pem", "client.key"):
        (tmp_path / name).write_bytes(f"-- {name} --".encode())
    given = {
        **env,
        CA_VAR: str(tmp_path / "ca.pem"),
        "TEMPORAL_TLS_CLIENT_CERT_PATH": str(tmp_path / "client.pem"),
        "TEMPORAL_TLS_CLIENT_KEY_PATH": str(tmp_path / "client.key"),
        "TEMPORAL_TLS_SERVER_NAME": "temporal.internal",
        "TEMPORAL_GRPC_META_X_TENANT": "t1",
    }
    assert connect_options(given) == {
        "tls": TLSConfig(
            server_root_ca_cert=b"-- ca.pem --",
            domain="temporal.internal",
            client_cert=b"-- client.pem --",
            client_private_key=b"-- client.key --",
        ),
        "rpc_metadata": {"x-tenant": "t1"},
    }
    assert connect_options({**env, "TEMPORAL_API_KEY": "k"}) == {"api_key": "k", "tls": True}


def test_the_config_file_s_profile_is_read_too(tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / "ca.pem").write_bytes(b"ca")
    config = tmp_path / "temporal.toml"
    config.write_text(f'[profile.default.tls]\nserver_ca_cert_path = "{tmp_path / "ca.pem"}"\n')
    assert connect_options({**env, "TEMPORAL_CONFIG_FILE": str(config)}) == {
        "tls": TLSConfig(server_root_ca_cert=b"ca")
    }
    (tmp_path / "ca.pem").unlink()
    with pytest.raises(ConfigError, match=rf"^{tmp_path / 'ca.pem'} \(a TLS file of {config}'s profile\)"):
        connect_options({**env, "TEMPORAL_CONFIG_FILE": str(config)})


@pytest.mark.parametrize("name", [CA_VAR, "TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_KEY_PATH"])
def test_a_tls_file_that_cannot_be_read_is_said_with_its_variable(
    tmp_path: Path, env: dict[str, str], name: str
) -> None:
    missing = tmp_path / "gone.pem"
    with pytest.raises(ConfigError) as caught:
        connect_options({**env, name: str(missing)})
    assert str(caught.value) == f"{name} names {missing}, which cannot be read (No such file or directory)"
    with pytest.raises(
        ConfigError, match=rf"^{name} names {tmp_path}, which cannot be read \(Is a directory\)"
    ):
        connect_options({**env, name: str(tmp_path)})


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({CA_VAR: "/a", "TEMPORAL_TLS_SERVER_CA_CERT_DATA": "x"}, "Cannot specify both " + CA_VAR),
        ({"TEMPORAL_PROFILE": "nowhere"}, "Profile 'nowhere' not found"),
        ({"TEMPORAL_TLS_DISABLE_HOST_VERIFICATION": "true"}, "is not supported here"),
    ],
)
def test_settings_the_sdk_refuses_are_one_line(env: dict[str, str], given: dict[str, str], said: str) -> None:
    with pytest.raises(ConfigError, match=said) as caught:
        connect_options({**env, **given})
    assert "\n" not in str(caught.value)


def test_a_worker_forgets_the_connection_s_variables_once_read() -> None:
    environ = {"TEMPORAL_API_KEY": "k", "TEMPORAL_GRPC_META_X": "v", "PATH": "/usr/bin", "MY_TEMPORAL": "x"}
    forget(environ)
    assert environ == {"PATH": "/usr/bin", "MY_TEMPORAL": "x"}


def test_the_connection_s_variables_are_never_a_session_s() -> None:
    """Unset in every session's sandbox: those the scheduler has (any TEMPORAL_*), and the keys a
    worker may have when the scheduler does not."""
    scheduler = Host.of(
        {"TEMPORAL_TLS_SERVER_NAME": "t", "TEMPORAL_GRPC_META_X_TENANT": "v", "TEMPORAL_NAMESPACE": "n"}
    )
    assert {"TEMPORAL_TLS_SERVER_NAME", "TEMPORAL_GRPC_META_X_TENANT", "TEMPORAL_NAMESPACE"} <= set(
        scheduler.secret_env
    )
    worker_keys = {"TEMPORAL_API_KEY", "TEMPORAL_TLS_CLIENT_KEY_PATH", "TEMPORAL_TLS_CLIENT_KEY_DATA", CA_VAR}
    assert worker_keys <= set(Host.of({}).secret_env)
    denied = sandbox_settings(Path("/srv/app"), (), scheduler)["sandbox"]["credentials"]["envVars"]
    assert {"TEMPORAL_GRPC_META_X_TENANT", *worker_keys} <= {v["name"] for v in denied}
    assert all(v["mode"] == "deny" for v in denied)


@pytest.mark.parametrize(
    ("said", "plain"),
    [
        (
            "Failed client connect: Server connection error: tonic::transport::Error(Transport, ConnectError(Custom { kind: InvalidData, error: InvalidCertificate(UnknownIssuer) }))",
            "TLS handshake failed: the server's certificate is signed by a CA this machine does not trust: give the CA that signed it in TEMPORAL_TLS_SERVER_CA_CERT_PATH",
        ),
        (
            'Failed client connect: Server connection error: tonic::transport::Error(Transport, ConnectError(Custom { kind: InvalidData, error: InvalidCertificate(NotValidForNameContext { expected: DnsName("wrong.example"), presented: [] }) }))',
            "TLS handshake failed: the server's certificate is not for this address: set TEMPORAL_TLS_SERVER_NAME",
        ),
        (
            "Failed client connect: Server connection error: tonic::transport::Error(Transport, ConnectError(Custom { kind: InvalidData, error: InvalidMessage(InvalidContentType) }))",
            "TLS handshake failed: the server does not answer in TLS: check the port, or unset TEMPORAL_TLS",
        ),
    ],
)
def test_a_tls_failure_is_said_as_one(said: str, plain: str) -> None:
    assert tls_error(RuntimeError(said)) == connect_error(RuntimeError(said)) == plain


def test_a_plain_client_at_a_tls_server_is_told_about_tls() -> None:
    said = 'Failed client connect: `get_system_info` call error after connection: Status { code: Unknown, message: "transport error", source: Some(tonic::transport::Error(Transport, hyper::Error(Io, Custom { kind: BrokenPipe, error: "stream closed because of a broken pipe" }))) }'
    assert tls_error(RuntimeError(said)) is None
    assert "TEMPORAL_TLS=true" in connect_error(RuntimeError(said))


# --- a real dev server behind a TLS proxy -------------------------------------------------------


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
    usage: x509.ObjectIdentifier = ExtendedKeyUsageOID.SERVER_AUTH,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer_name, signer = issuer or (name, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
    )
    if issuer is None:  # a CA
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    else:
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return builder.sign(signer, hashes.SHA256())


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA (ca.pem), the proxy's certificate for 127.0.0.1 signed by it (server.pem, server.key),
    and a client's (client.pem, client.key)."""
    folder = tmp_path_factory.mktemp("pki")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("test CA", ca_key, None)
    (folder / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for name, usage in (
        ("server", ExtendedKeyUsageOID.SERVER_AUTH),
        ("client", ExtendedKeyUsageOID.CLIENT_AUTH),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _cert(name, key, (ca.subject, ca_key), usage)
        (folder / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (folder / f"{name}.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    return folder


class TlsProxy:
    """TLS on 127.0.0.1 (ALPN h2, as gRPC wants) in front of a plain server: a loop in a thread."""

    def __init__(self, pki: Path, backend: str, *, mutual: bool = False) -> None:
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(pki / "server.pem", pki / "server.key")
        if mutual:  # a client certificate signed by the CA, or no connection
            self.context.verify_mode = ssl.CERT_REQUIRED
            self.context.load_verify_locations(pki / "ca.pem")
        self.context.set_alpn_protocols(["h2"])
        self.host, port = backend.rsplit(":", 1)
        self.port = int(port)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.context), self.loop
        ).result(10)
        self.server = server
        return f"127.0.0.1:{server.sockets[0].getsockname()[1]}"

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()

    async def _shutdown(self) -> None:
        self.server.close()
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            back_reader, back_writer = await asyncio.open_connection(self.host, self.port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, back_writer), _pipe(back_reader, writer))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (OSError, ssl.SSLError):  # the other side went away
        pass
    finally:
        writer.close()


@pytest.fixture(scope="module")
def behind_tls(server: str, pki: Path) -> Iterator[str]:
    """A dev server's address behind the TLS proxy."""
    with TlsProxy(pki, server) as address:
        yield address


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A dev server (plain) for the module's proxies."""
    with dev_server(tmp_path_factory.mktemp("server")) as plain:
        yield plain


def test_the_scheduler_connects_over_tls_with_the_ca_given(
    behind_tls: str, pki: Path, env: dict[str, str]
) -> None:
    options = connect_options({**env, CA_VAR: str(pki / "ca.pem")})

    async def connected() -> int:
        client = await _connect(behind_tls, options, timeout_s=5)
        return (await client.count_workflows()).count

    assert asyncio.run(connected()) == 0


def test_without_the_ca_the_scheduler_says_it_is_a_tls_problem_at_once(
    behind_tls: str, env: dict[str, str]
) -> None:
    options = connect_options({**env, "TEMPORAL_TLS": "true"})
    began = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        asyncio.run(_connect(behind_tls, options, timeout_s=10))
    assert time.monotonic() - began < 5, "a TLS failure is not waited out"
    assert str(caught.value) == (
        f"cannot connect to the Temporal server at {behind_tls}: TLS handshake failed: the server's "
        f"certificate is signed by a CA this machine does not trust: give the CA that signed it in {CA_VAR}"
    )


def test_mutual_tls_the_client_s_certificate_is_sent_and_without_it_said(
    server: str, pki: Path, env: dict[str, str]
) -> None:
    with TlsProxy(pki, server, mutual=True) as address:
        mutual = {
            **env,
            CA_VAR: str(pki / "ca.pem"),
            "TEMPORAL_TLS_CLIENT_CERT_PATH": str(pki / "client.pem"),
            "TEMPORAL_TLS_CLIENT_KEY_PATH": str(pki / "client.key"),
        }

        async def connected(environ: dict[str, str]) -> int:
            client = await _connect(address, connect_options(environ), timeout_s=5)
            return (await client.count_workflows()).count

        assert asyncio.run(connected(mutual)) == 0
        with pytest.raises(ConfigError, match=r"TLS handshake failed: .* a client certificate, give it in"):
            asyncio.run(connected({**env, CA_VAR: str(pki / "ca.pem")}))


def _worker_command(address: str, tmp_path: Path) -> list[str]:
    return [
        sys.executable,
        "autonomous_agent_demo.py",
        "worker",
        "--engine",
        f"temporal://{address}",
        "--host",
        "h",
        "--offline-demo",
        "--work-dir",
        str(tmp_path / "worker"),
    ]


@pytest.mark.e2e
@pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="no bubblewrap: the worker's preflight refuses first"
)
def test_a_worker_connects_over_tls_and_without_the_ca_says_why_in_one_line(
    behind_tls: str, pki: Path, tmp_path: Path
) -> None:
    from scripted_model.hermetic import hermetic_env

    environ = hermetic_env("http://127.0.0.1:9", tmp_path / "home", max_retries=0)
    environ["TEMPORAL_CONFIG_FILE"] = str(tmp_path / "no-temporal.toml")
    environ["PYTHONUNBUFFERED"] = "1"
    with (tmp_path / "worker.out").open("w") as out:
        worker = subprocess.Popen(
            _worker_command(behind_tls, tmp_path),
            cwd=REPO,
            env={**environ, CA_VAR: str(pki / "ca.pem")},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        said = lambda: (tmp_path / "worker.out").read_text()  # noqa: E731
        wait_until(lambda: "Worker h on" in said() or worker.poll() is not None, "the worker's line", 60)
        assert f"Worker h on {behind_tls}, task queue session-scheduler" in said(), said()
    finally:
        worker.terminate()
        worker.wait(20)
    refused = subprocess.run(
        _worker_command(behind_tls, tmp_path),
        cwd=REPO,
        env={**environ, "TEMPORAL_TLS": "true"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 1, refused.stderr
    assert refused.stderr.strip().count("\n") == 0, refused.stderr
    assert refused.stderr.startswith(
        f"error: cannot connect to the Temporal server at {behind_tls}: TLS handshake failed"
    )
    assert CA_VAR in refused.stderr


def test_a_run_says_an_unreadable_tls_file_before_anything_is_created(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from session_scheduler.view.cli import main

    missing = tmp_path / "ca.pem"
    result = CliRunner().invoke(
        main,
        ["--project-dir", str(tmp_path / "p"), "--offline-demo", "--engine", "temporal://127.0.0.1:9"],
        env={CA_VAR: str(missing), "TEMPORAL_CONFIG_FILE": str(tmp_path / "no-temporal.toml")},
    )
    assert result.exit_code == 1
    assert f"{CA_VAR} names {missing}, which cannot be read (No such file or directory)" in result.output
    assert not (tmp_path / "p").exists()
