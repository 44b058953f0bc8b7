"""A local stand-in for the few GitHub REST calls `--land-on pr` makes (this machine reaches no
forge): open a pull request, read one, read its comments and reviews. It listens on 127.0.0.1,
checks the token, and lets a test act as the person on the forge (merge, close with a comment)."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


class GitHubStandIn:
    def __init__(self, owner: str, repo: str, token: str) -> None:
        self.prefix, self.token = f"/repos/{owner}/{repo}", token
        self.pulls: dict[int, dict[str, Any]] = {}
        self.comments: dict[int, list[str]] = {}
        self.calls: list[tuple[str, str]] = []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                stand_in.answer(self, "GET")

            def do_POST(self) -> None:
                stand_in.answer(self, "POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> GitHubStandIn:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- the person on the forge ------------------------------------------------------------
    def merge(self, number: int, commit: str) -> None:
        self.pulls[number].update(state="closed", merged=True, merge_commit_sha=commit)

    def close(self, number: int, comment: str) -> None:
        self.pulls[number].update(state="closed", merged=False)
        self.comments.setdefault(number, []).append(comment)

    # -- the API ------------------------------------------------------------------------------
    def answer(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        self.calls.append((method, handler.path))
        if handler.headers.get("Authorization") != f"Bearer {self.token}":
            return self._send(handler, 401, {"message": "Bad credentials"})
        path = handler.path.removeprefix(self.prefix) if handler.path.startswith(self.prefix) else None
        if method == "POST" and path == "/pulls":
            data = json.loads(handler.rfile.read(int(handler.headers.get("Content-Length", 0))) or b"{}")
            if not {"title", "head", "base", "body"} <= set(data):
                return self._send(handler, 422, {"message": "Validation Failed"})
            number = len(self.pulls) + 1
            self.pulls[number] = {**data, "number": number, "state": "open", "merged": False}
            return self._send(handler, 201, {"number": number, "html_url": f"{self.url}/pull/{number}"})
        found = re.fullmatch(r"/(pulls|issues)/(\d+)(/comments|/reviews)?", path or "")
        if method == "GET" and found and int(found.group(2)) in self.pulls:
            number, what = int(found.group(2)), found.group(3)
            if what == "/comments":
                return self._send(handler, 200, [{"body": c} for c in self.comments.get(number, [])])
            if what == "/reviews":
                return self._send(handler, 200, [])
            return self._send(handler, 200, self.pulls[number])
        return self._send(handler, 404, {"message": "Not Found"})

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, code: int, data: Any) -> None:
        body = json.dumps(data).encode()
        handler.send_response(code)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
