"""MCP connections that break and calls that take long: reconnecting, respawning, backoff,
progress notifications that keep a call alive. Real SDK servers over stdio and HTTP."""

from __future__ import annotations

import os
import signal
import socket
from typing import Any

import anyio
import pytest
from echo_server import build
from mcp_helpers import echo_command, serve_asgi, wait_until_gone

from shelfhand.agent.agent import Agent
from shelfhand.core.errors import ToolError, ToolTimeoutError
from shelfhand.core.events import ToolProgress, event_to_dict, progress_sink
from shelfhand.mcp import StdioServer, StreamableHttpServer
from shelfhand.testing import ScriptedModel, text, tool_call
from shelfhand.tools.toolkit import Toolkit

pytestmark = pytest.mark.anyio


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def wait_for(predicate: Any, seconds: float = 10.0) -> None:
    with anyio.fail_after(seconds):
        while not predicate():
            await anyio.sleep(0.02)


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_a_restarted_http_server_is_reached_again_without_aclose(protocol: str) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    server = StreamableHttpServer(url, name="remote", timeout=5, protocol=protocol)
    with anyio.fail_after(60):
        async with serve_asgi(build().streamable_http_app(), port):
            await server.connect()
            before = await server.call_tool("echo", {"text": "before"})
        # The server is gone, then back (a new process would be the same: new sessions).
        async with serve_asgi(build().streamable_http_app(), port):
            after = await server.call_tool("echo", {"text": "after"})
        await server.aclose()
    assert before.content == "echo: before" and after.content == "echo: after"
    if protocol == "legacy":  # a session the new server does not know: reconnected
        assert server.connections == 2


async def test_while_an_http_server_is_down_calls_fail_fast_with_backoff_then_recover() -> None:
    port = free_port()
    server = StreamableHttpServer(f"http://127.0.0.1:{port}/mcp", name="flaky", timeout=5)
    with anyio.fail_after(60):
        async with serve_asgi(build().streamable_http_app(), port):
            await server.connect()
        errors = []
        for _ in range(3):
            with pytest.raises(ToolError) as caught:
                await server.call_tool("echo", {"text": "down"})
            errors.append(str(caught.value))
        async with serve_asgi(build().streamable_http_app(), port):
            back = None
            while back is None:  # the next attempt comes once the backoff has passed
                try:
                    back = await server.call_tool("echo", {"text": "up"})
                except ToolError:
                    await anyio.sleep(0.2)
        await server.aclose()
    assert all("MCP server flaky" in e for e in errors)
    # a reconnection attempt failed, so the next call does not try again yet
    assert any("next reconnection attempt in" in e for e in errors), errors
    assert back.content == "echo: up"


async def test_a_crashed_stdio_server_is_respawned_on_the_next_call() -> None:
    command, args = echo_command()
    server = StdioServer(command, args, name="echo", timeout=20)
    kit = Toolkit()
    with anyio.fail_after(60):
        await kit.add_mcp(server)
        first = int((await server.call_tool("whoami_pid", {})).content)
        os.kill(first, signal.SIGKILL)
        assert await wait_until_gone(first)
        await wait_for(lambda: not server.connected)  # the client saw the pipe close
        model = ScriptedModel([tool_call("echo", {"text": "又回来了"}), text("ok")])
        result = await Agent(model=model, toolkit=kit).run("anyone?")
        second = int((await server.call_tool("whoami_pid", {})).content)
        await server.aclose()
    [echoed] = [r for m in result.messages for r in m.tool_results]
    assert echoed.content == "echo: 又回来了" and not echoed.is_error
    assert second != first and server.connections == 2
    assert await wait_until_gone(second)


async def test_with_reconnect_off_a_lost_server_stays_unavailable() -> None:
    command, args = echo_command()
    server = StdioServer(command, args, name="echo", timeout=20, reconnect=False)
    with anyio.fail_after(60):
        await server.connect()
        pid = int((await server.call_tool("whoami_pid", {})).content)
        os.kill(pid, signal.SIGKILL)
        assert await wait_until_gone(pid)
        await wait_for(lambda: not server.connected)
        with pytest.raises(ToolError, match="MCP server echo is not available"):
            await server.call_tool("echo", {"text": "x"})
        await server.aclose()
    assert server.connections == 1


async def test_progress_keeps_a_call_alive_past_its_timeout_and_is_reported() -> None:
    seen: list[ToolProgress] = []
    command, args = echo_command()
    server = StdioServer(
        command, args, name="echo", timeout=20, prefix="e_", on_progress=seen.append
    )
    kit = Toolkit()
    with anyio.fail_after(60):
        await kit.add_mcp(server)
        # 2.4 s of work, progress every 0.2 s, 1.5 s without news allowed
        worked = await server.call_tool(
            "working", {"seconds": 2.4, "every": 0.2}, timeout=1.5, tool_name="e_working"
        )
        with pytest.raises(ToolTimeoutError, match="no answer or progress within 1 s"):
            await server.call_tool("working", {"seconds": 1.6, "every": 0}, timeout=1)
        await server.aclose()
    assert worked.content == "worked 12 steps"
    assert [p.progress for p in seen] == [float(i) for i in range(1, 13)]
    assert seen[0].name == "e_working" and seen[0].message == "第 1 步"
    assert event_to_dict(seen[0])["type"] == "tool_progress"


async def test_progress_cannot_extend_a_call_past_max_duration() -> None:
    command, args = echo_command()
    server = StdioServer(command, args, name="echo", timeout=20, max_duration=20)
    with anyio.fail_after(60):
        await server.connect()
        server.max_duration = 0.8  # the SDK's own limit for the whole call
        with pytest.raises(ToolTimeoutError, match=r"0\.8 s"):
            await server.call_tool("working", {"seconds": 3, "every": 0.2}, timeout=1)
        await server.aclose()


async def test_through_the_toolkit_progress_keeps_a_call_alive_and_reaches_the_sink() -> None:
    from shelfhand.core.context import RunContext
    from shelfhand.core.messages import ToolCallBlock

    heard: list[ToolProgress] = []
    command, args = echo_command()
    server = StdioServer(
        command,
        args,
        name="echo",
        timeout=20,
        prefix="e_",
        tool_settings={"working": {"timeout": 1.2}},  # per tool: 1.2 s without news
    )
    kit = Toolkit()
    with anyio.fail_after(60):
        await kit.add_mcp(server)
        token = progress_sink.set(heard.append)
        try:
            block = ToolCallBlock(
                id="c1", name="e_working", arguments='{"seconds": 2.0, "every": 0.2}'
            )
            result = await kit.call(block, RunContext())
            silent = ToolCallBlock(
                id="c2", name="e_working", arguments='{"seconds": 2.0, "every": 0}'
            )
            timed_out = await kit.call(silent, RunContext())
        finally:
            progress_sink.reset(token)
        await server.aclose()
    assert result.content == "worked 10 steps" and not result.is_error
    assert [p.progress for p in heard] == [float(i) for i in range(1, 11)]
    assert {p.name for p in heard} == {"e_working"}
    assert timed_out.is_error and "no answer or progress within 1.2 s" in timed_out.content
