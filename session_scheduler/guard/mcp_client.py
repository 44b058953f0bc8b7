"""A thin MCP client over streamable HTTP (the `mcp` package that claude-agent-sdk brings): the
scheduler's own checks of the browser's server (is it up, does it reach the app) and the tests.
No proxy from the environment: the servers it talks to are on the host's loopback."""

from __future__ import annotations

import concurrent.futures
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import httpx2
from mcp import ClientSession
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, ErrorData, ListRootsResult, Root
from pydantic import FileUrl

T = TypeVar("T")
TIMEOUT_S = 60.0
"""One request's own limit (a navigation on a busy machine takes seconds)."""


@contextlib.asynccontextmanager
async def opened(
    url: str, timeout: float = TIMEOUT_S, roots: Sequence[Path] = ()
) -> AsyncIterator[ClientSession]:
    """An initialized MCP session with the server at `url` (one page of the browser's server)."""

    async def list_roots(context: ClientRequestContext) -> ListRootsResult | ErrorData:
        return ListRootsResult(roots=[Root(uri=FileUrl(root.resolve().as_uri())) for root in roots])

    async with (
        httpx2.AsyncClient(trust_env=False, timeout=httpx2.Timeout(timeout)) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write, list_roots_callback=list_roots if roots else None) as session,
    ):
        await session.initialize()
        yield session


async def _session(
    url: str, work: Callable[[ClientSession], Awaitable[T]], timeout: float, roots: Sequence[Path] = ()
) -> T:
    async with opened(url, timeout, roots) as session:
        return await work(session)


class Held:
    """One MCP session kept open for synchronous callers (a client that, like Claude Code, keeps its
    page between calls): `call` each tool in turn, `close` at the end."""

    def __init__(self, url: str, timeout: float = TIMEOUT_S) -> None:
        self._portal_cm = anyio.from_thread.start_blocking_portal()
        self._portal = self._portal_cm.__enter__()
        try:
            self._session_cm = self._portal.wrap_async_context_manager(opened(url, timeout))
            self._session = self._session_cm.__enter__()
        except BaseException:
            self._portal_cm.__exit__(None, None, None)
            raise

    def call(self, tool: str, args: dict[str, Any]) -> CallToolResult:
        result = self._portal.call(self._session.call_tool, tool, args)
        if not isinstance(result, CallToolResult):
            raise TypeError(f"{tool} answered a {type(result).__name__}, not a tool result")
        return result

    def close(self) -> None:
        try:
            self._session_cm.__exit__(None, None, None)
        finally:
            self._portal_cm.__exit__(None, None, None)


async def call(url: str, tool: str, args: dict[str, Any], timeout: float = TIMEOUT_S) -> CallToolResult:
    """Call `tool` with `args` on the server at `url` (its `/mcp` endpoint), in a session of its own."""
    return (await calls(url, [(tool, args)], timeout))[0]


async def calls(
    url: str,
    steps: Sequence[tuple[str, dict[str, Any]]],
    timeout: float = TIMEOUT_S,
    roots: Sequence[Path] = (),
) -> list[CallToolResult]:
    """Call each (tool, args) in turn in one session (one page, as a client like Claude Code keeps
    it); every result, errors included. `roots`: the folders the client declares (Claude Code
    declares its working folder; the server resolves named files against the first)."""

    async def work(session: ClientSession) -> list[CallToolResult]:
        results = []
        for tool, args in steps:
            result = await session.call_tool(tool, args)
            if not isinstance(result, CallToolResult):  # input-required or claimed results: not asked for
                raise TypeError(f"{tool} answered a {type(result).__name__}, not a tool result")
            results.append(result)
        return results

    return await _session(url, work, timeout, roots)


async def tool_names(url: str, timeout: float = TIMEOUT_S) -> list[str]:
    """The names `tools/list` answers, in the server's order."""

    async def work(session: ClientSession) -> list[str]:
        return [tool.name for tool in (await session.list_tools()).tools]

    return await _session(url, work, timeout)


def text(result: CallToolResult) -> str:
    """The text parts of a tool's result, joined."""
    return "\n".join(part.text for part in result.content if part.type == "text")


def blocks(result: CallToolResult) -> list[dict[str, Any]]:
    """A tool's result as Claude Code hands it to its hooks: text blocks and base64 image blocks."""
    out: list[dict[str, Any]] = []
    for part in result.content:
        if part.type == "text":
            out.append({"type": "text", "text": part.text})
        elif part.type == "image":
            out.append(
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": part.mime_type, "data": part.data},
                }
            )
    return out


def run(work: Callable[[], Awaitable[T]]) -> T:
    """Run `work` to its end from synchronous code, in a thread of its own (so it works whether or
    not the caller's thread already runs an event loop)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="mcp-client") as pool:
        return pool.submit(anyio.run, work).result()
