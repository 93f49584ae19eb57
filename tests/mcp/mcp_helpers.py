"""Helpers for the MCP tests. Real MCP peers: the SDK server in echo_server.py over stdio (a child
process), SSE and streamable HTTP (uvicorn on 127.0.0.1, a port the OS picks); :func:`gate` puts
a proxy in front of an HTTP one that answers chosen tools' calls itself."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import uvicorn

from shelfhand.mcp.server import listening_socket

HERE = Path(__file__).parent
ECHO_SERVER = str(HERE / "echo_server.py")

Asgi = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


def echo_command(name: str = "echo") -> tuple[str, list[str]]:
    """How to start the fixture server as a stdio child process."""
    return sys.executable, [ECHO_SERVER, name]


def process_gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (gone, or a zombie that nobody will wake)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except (FileNotFoundError, ProcessLookupError):
        return True
    state = stat.rsplit(")", 1)[1].split()[0]
    return state in ("Z", "X")


async def wait_until_gone(pid: int, seconds: float = 10.0) -> bool:
    with anyio.move_on_after(seconds):
        while not process_gone(pid):
            await anyio.sleep(0.02)
    return process_gone(pid)


@asynccontextmanager
async def serve_asgi(app: Any, port: int = 0) -> AsyncIterator[str]:
    """Serve ``app`` on 127.0.0.1 (``port``, or a free one) and yield ``http://127.0.0.1:PORT``."""
    sock = listening_socket("127.0.0.1", port)  # (TCP_NODELAY on its connections)
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    done = anyio.Event()

    async def run() -> None:
        try:
            await server.serve([sock])
        finally:
            done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        with anyio.fail_after(10):
            while not server.started:
                await anyio.sleep(0.01)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            with anyio.move_on_after(10):
                await done.wait()
            tg.cancel_scope.cancel()


def _tool_of(body: bytes) -> str:
    try:
        message = json.loads(body)
    except ValueError:
        return ""
    if not isinstance(message, dict) or message.get("method") != "tools/call":
        return ""
    return str(message.get("params", {}).get("name", ""))


async def _read_body(receive: Any) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def answer(send: Any, status: int, content_type: str, body: bytes) -> None:
    headers = [(b"content-type", content_type.encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def gate(app: Asgi, rules: dict[str, Callable[[Asgi, Any, Any, Any], Awaitable[None]]]) -> Asgi:
    """``app`` behind a proxy that hands the calls of the tools in ``rules`` to their rule."""

    async def proxy(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        body = await _read_body(receive)
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if sent:  # the body is read: what follows is the client's, e.g. a disconnect
                return dict(await receive())
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        rule = rules.get(_tool_of(body))
        if rule is None:
            await app(scope, replay, send)
        else:
            await rule(app, scope, replay, send)

    return proxy
