"""A loopback HTTP server speaking the Anthropic Messages API for a scripted brain."""

from __future__ import annotations

import contextlib
import gzip
import json
import select
import socket
import struct
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit

from scripted_model import protocol as wire
from scripted_model.protocol import Brain, Fault, Reply, Turn

SIDE_CALL_TEXT = "Scripted session"


class _HTTPServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that knows its owning ScriptedModelServer."""

    daemon_threads = True
    owner: ScriptedModelServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-answer (a CLI stopped with its run: Ctrl-C) is no error
        of the model's; anything else is printed as the standard library does."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class ScriptedModelServer:
    """Messages API on 127.0.0.1 whose every main-loop answer comes from a Brain."""

    def __init__(
        self,
        brain: Brain,
        log_path: Path | None = None,
        *,
        port: int = 0,
        serialize_brain: bool = True,
    ) -> None:
        """Prepare the server; nothing listens until start()."""
        self.brain = brain
        self.log_path = log_path
        self._port = port
        self._serialize = serialize_brain
        self._brain_lock = threading.Lock()
        self._lock = threading.Lock()
        self._requests: list[dict[str, Any]] = []
        self._counter = 0
        self.stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound TCP port (valid after start())."""
        if self._httpd is None:
            raise RuntimeError("server not started")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """The URL to put in ANTHROPIC_BASE_URL."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """A snapshot of the request log entries so far."""
        with self._lock:
            return list(self._requests)

    def start(self) -> Self:
        """Bind 127.0.0.1 and serve in a daemon thread."""
        if self._httpd is None:
            self.stopping.clear()
            self._httpd = _HTTPServer(("127.0.0.1", self._port), _Handler)
            self._httpd.owner = self
            self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, release hanging requests and close open connections."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self.stopping.set()
        httpd.shutdown()
        with self._lock:
            conns = list(self._connections)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        """Start on entering a with block."""
        return self.start()

    def __exit__(self, *exc: object) -> None:
        """Stop on leaving a with block."""
        self.stop()

    def new_id(self, prefix: str) -> str:
        """A unique id such as toolu_0001_<16 hex>."""
        with self._lock:
            self._counter += 1
            count = self._counter
        return f"{prefix}_{count:04d}_{uuid.uuid4().hex[:16]}"

    def ask_brain(self, turn: Turn) -> Reply | Fault:
        """Call brain.respond, one call at a time unless serialize_brain=False."""
        if not self._serialize:
            return self.brain.respond(turn)
        with self._brain_lock:
            return self.brain.respond(turn)

    def record(self, entry: dict[str, Any]) -> None:
        """Append one entry to the in-memory log and, as a JSON line, to log_path."""
        line = json.dumps(entry, sort_keys=True)
        with self._lock:
            self._requests.append(entry)
            if self.log_path is not None:
                with self.log_path.open("a", encoding="utf-8") as fh:
                    fh.write(line + "\n")

    def track(self, conn: socket.socket, add: bool) -> None:
        """Remember or forget an open client connection."""
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)


class _Handler(BaseHTTPRequestHandler):
    """One client connection speaking the Messages API."""

    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default stderr access log."""

    def setup(self) -> None:
        """Track the connection so stop() can close it."""
        super().setup()
        self.server.owner.track(self.connection, True)

    def finish(self) -> None:
        """Forget the connection."""
        self.server.owner.track(self.connection, False)
        with contextlib.suppress(OSError):
            super().finish()

    def _head(self, status: int, headers: dict[str, str]) -> None:
        """Send the status line and headers."""
        self.send_response(status)
        self.send_header("request-id", self.server.owner.new_id("req"))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()

    def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> int:
        """Send a complete JSON response and return its status."""
        body = json.dumps(obj).encode()
        base = {"content-type": "application/json", "content-length": str(len(body))}
        self._head(status, {**base, **(headers or {})})
        if self.command != "HEAD":
            self.wfile.write(body)
        return status

    def _stream(self, events: list[dict[str, Any]], *, end: bool = True) -> None:
        """Send a chunked SSE response, one event per chunk; end=False leaves it open."""
        sse = {"content-type": "text/event-stream", "cache-control": "no-cache"}
        self._head(200, {**sse, "transfer-encoding": "chunked"})
        for event in events:
            payload = wire.sse_bytes(event)
            self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))
            self.wfile.flush()
        if end:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    def _reset(self) -> None:
        """Abort the connection with a TCP reset."""
        linger = struct.pack("ii", 1, 0)
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
        self.close_connection = True
        self.connection.close()

    def _error(self, status: int, etype: str, msg: str, **headers: str) -> int:
        """Send a Messages API error body and return its status."""
        return self._json(status, wire.error_json(etype, msg), headers)

    def do_HEAD(self) -> None:
        """Answer probes of / with 200, anything else with 404."""
        self.do_GET()

    def do_GET(self) -> None:
        """Answer probes of / with 200, anything else with 404."""
        if urlsplit(self.path).path in ("", "/"):
            self._json(200, {"ok": True})
        else:
            self._error(404, "not_found_error", f"no route {self.path}")

    def do_POST(self) -> None:
        """Handle one POST, log it, and never let an error kill the thread."""
        sid = self.headers.get("x-claude-code-session-id")
        entry = wire.new_log_entry(self.path, sid)
        entry["auth"] = _auth_of(self.headers)
        try:
            entry["status"] = self._post(entry)
        except OSError as exc:
            entry["error"] = f"connection error: {exc!r}"
            self.close_connection = True
        except Exception as exc:
            entry["error"] = repr(exc)
            try:
                entry["status"] = self._error(500, "api_error", repr(exc))
            except OSError:
                self.close_connection = True
        if entry["fault"] != "hang":
            self.server.owner.record(entry)

    def _post(self, entry: dict[str, Any]) -> int:
        """Route /v1/messages and /v1/messages/count_tokens; return the status."""
        route = urlsplit(self.path).path.rstrip("/")
        try:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            entry["body_bytes"] = len(raw)
            if route not in ("/v1/messages", "/v1/messages/count_tokens"):
                return self._error(404, "not_found_error", f"no route {self.path}")
            if self.headers.get("content-encoding", "").lower() == "gzip":
                raw = gzip.decompress(raw)
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise TypeError("request body must be a JSON object")
            turn = Turn.from_request(body, entry["session_id"])
        except (ValueError, TypeError, OSError) as exc:
            entry["error"] = f"bad request: {exc}"
            return self._error(400, "invalid_request_error", str(exc))
        in_tok = max(1, len(raw) // 4)
        if route == "/v1/messages/count_tokens":
            return self._json(200, {"input_tokens": in_tok})
        owner = self.server.owner
        entry.update(
            model=turn.model,
            has_tools=turn.has_tools,
            tools=list(turn.tools),
            n_messages=len(turn.messages),
            stream=bool(body.get("stream")),
            system_bytes=len(turn.system.encode()),
            role=wire.role_of(owner.brain, turn),
        )
        answer = owner.ask_brain(turn) if turn.has_tools else Reply(SIDE_CALL_TEXT)
        if isinstance(answer, Fault):
            entry["fault"] = answer.kind
            return self._fault(answer, turn, entry)
        entry["tool_calls"] = [call.name for call in answer.tool_calls]
        blocks = wire.content_blocks(answer, lambda: owner.new_id("toolu"))
        args = (owner.new_id("msg"), turn.model, blocks, answer.stop_reason, in_tok)
        if not entry["stream"]:
            return self._json(200, wire.message_json(*args))
        self._stream(wire.sse_events(*args))
        return 200

    def _fault(self, fault: Fault, turn: Turn, entry: dict[str, Any]) -> int:
        """Simulate one fault and return the status sent (0: none)."""
        if fault.kind in wire.HTTP_FAULTS:
            status, etype, message, headers = wire.HTTP_FAULTS[fault.kind]
            return self._error(status, etype, message, **headers)
        if fault.kind == "usage_limit":
            reset = fault.reset_epoch or int(time.time()) + 3600
            headers = wire.usage_limit_headers(reset)
            return self._error(429, "rate_limit_error", "Usage limit reached", **headers)
        if fault.kind == "stream_cut":
            self._stream_cut(turn, stream=bool(entry["stream"]))
            return 200
        entry["status"] = 0
        self.server.owner.record(entry)
        self._hang()
        return 0

    def _stream_cut(self, turn: Turn, *, stream: bool) -> None:
        """Send the start of an answer, then reset the connection mid-block."""
        blocks = [{"type": "text", "text": "Partial answer"}]
        args = (self.server.owner.new_id("msg"), turn.model, blocks, "end_turn", 1)
        if stream:
            self._stream(wire.sse_events(*args)[:3], end=False)
        else:
            body = json.dumps(wire.message_json(*args)).encode()
            ctype = {"content-type": "application/json"}
            self._head(200, {**ctype, "content-length": str(len(body))})
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
        self._reset()

    def _hang(self) -> None:
        """Never answer: wait until the server stops or the client hangs up."""
        conn = self.connection
        while not self.server.owner.stopping.wait(0.1):
            readable, _, _ = select.select([conn], [], [], 0)
            if readable and not _peek(conn):
                break
        self.close_connection = True


def _auth_of(headers: Any) -> str | None:
    """Which credentials a request carried: "bearer:<token>", "x-api-key", both (comma-joined) or None.

    A bearer token is logged as sent (the scripted model only ever sees dummy tokens), so a
    test can check that the token it gave the CLI reached the server; an API key is not.
    """
    found: list[str] = []
    authorization = headers.get("authorization")
    if authorization:
        scheme, _, value = authorization.strip().partition(" ")
        found.append(f"bearer:{value.strip()}" if scheme.lower() == "bearer" else f"authorization:{scheme}")
    if headers.get("x-api-key"):
        found.append("x-api-key")
    return ",".join(found) or None


def _peek(conn: socket.socket) -> bytes:
    """Peek at the socket; b'' means the peer closed it."""
    try:
        return conn.recv(1, socket.MSG_PEEK)
    except OSError:
        return b""
