"""Mounting MCP servers in a toolkit, against real SDK servers (stdio, SSE, streamable HTTP)."""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from typing import Any

import anyio
import pytest
from echo_server import build
from mcp_helpers import echo_command, serve_asgi, wait_until_gone

from shelfhand.agent.agent import Agent
from shelfhand.core.context import RunContext
from shelfhand.core.errors import ConfigurationError
from shelfhand.core.messages import Message, ToolResultBlock
from shelfhand.mcp import (
    McpServer,
    McpServerGroup,
    McpTool,
    SseServer,
    StdioServer,
    StreamableHttpServer,
)
from shelfhand.testing import FunctionModel, ScriptedModel, text, tool_call
from shelfhand.tools.tool import tool
from shelfhand.tools.toolkit import Toolkit

pytestmark = pytest.mark.anyio


def tool_results(messages: Sequence[Message]) -> list[ToolResultBlock]:
    return [r for m in messages for r in m.tool_results]


def stdio_echo(name: str = "echo", **kw: Any) -> StdioServer:
    command, args = echo_command(name)
    return StdioServer(command, args, name=name, **kw)


async def server_pid(server: McpServer) -> int:
    out = await server.call_tool("whoami_pid", {})
    return int(out.content)


async def wait_for(predicate: Any, seconds: float = 10.0) -> None:
    with anyio.fail_after(seconds):
        while not predicate():
            await anyio.sleep(0.02)


async def test_an_agent_calls_a_stdio_server_tool_and_aclose_leaves_no_child_process() -> None:
    server = stdio_echo()
    kit = Toolkit()
    with anyio.fail_after(30):
        mounted = await kit.add_mcp(server)
        pid = await server_pid(server)
        model = ScriptedModel([tool_call("echo", {"text": "退货政策"}), text("好的")])
        result = await Agent(model=model, toolkit=kit).run("say it back")
        await server.aclose()
    assert {t.name for t in mounted} >= {"echo", "shout", "whoami_pid"}
    [echoed] = tool_results(result.messages)
    assert echoed.content == "echo: 退货政策" and not echoed.is_error
    assert result.output == "好的"
    assert await wait_until_gone(pid), f"server process {pid} still runs after aclose()"
    assert kit.tools == [] and server.status == "closed"


async def test_an_agent_calls_a_streamable_http_server_tool() -> None:
    async with serve_asgi(build().streamable_http_app()) as base:
        server = StreamableHttpServer(f"{base}/mcp", headers={"X-Trace": "t1"}, name="remote")
        kit = Toolkit()
        with anyio.fail_after(30):
            await kit.add_mcp(server)
            model = ScriptedModel([tool_call("shout", {"text": "hello"}), text("done")])
            result = await Agent(model=model, toolkit=kit).run("shout hello")
            # Code that calls func(*bind(...)) rather than invoke() reaches the server too.
            shout = kit.get("shout")
            assert shout is not None
            args, kwargs = shout.bind({"text": "直接"}, RunContext())
            direct = await shout.func(*args, **kwargs)
            await server.aclose()
    [shouted] = tool_results(result.messages)
    assert shouted.content == "HELLO!" and not shouted.is_error
    assert direct.content == "直接!"


async def test_sse_transport_mounts_and_calls_tools() -> None:
    async with serve_asgi(build().sse_app()) as base:
        server = SseServer(f"{base}/sse", name="legacy-sse")
        kit = Toolkit()
        with anyio.fail_after(30):
            await kit.add_mcp(server)
            model = ScriptedModel([tool_call("echo", {"text": "over SSE"}), text("ok")])
            result = await Agent(model=model, toolkit=kit).run("echo")
            await server.aclose()
    [echoed] = tool_results(result.messages)
    assert echoed.content == "echo: over SSE"


async def test_tools_keep_their_names_and_are_read_only_only_when_annotated() -> None:
    async with serve_asgi(build().streamable_http_app()) as base:
        server = StreamableHttpServer(f"{base}/mcp", name="remote")
        kit = Toolkit()
        with anyio.fail_after(30):
            await kit.add_mcp(server)
            echo, shout = kit.get("echo"), kit.get("shout")
            await server.aclose()
    assert isinstance(echo, McpTool) and isinstance(shout, McpTool)
    assert echo.read_only and echo.concurrency_safe
    assert not shout.read_only and not shout.concurrency_safe
    schema = echo.schema()["function"]
    assert schema["name"] == "echo"
    assert schema["parameters"]["properties"]["text"]["type"] == "string"
    assert schema["parameters"]["required"] == ["text"]


async def test_the_tool_list_is_fetched_once_not_per_model_call() -> None:
    server = stdio_echo()
    kit = Toolkit()
    model = ScriptedModel(
        [
            tool_call("echo", {"text": "1"}),
            tool_call("echo", {"text": "2"}),
            tool_call("list_calls"),
            text("done"),
        ]
    )
    with anyio.fail_after(30):
        await kit.add_mcp(server)
        result = await Agent(model=model, toolkit=kit).run("go")
        await server.aclose()
    answers = [r.content for r in tool_results(result.messages)]
    assert answers == ["echo: 1", "echo: 2", "1"]  # the server answered tools/list once
    assert server.list_fetches == 1


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_list_changed_adds_new_tools_and_removes_gone_ones(protocol: str) -> None:
    server = stdio_echo(protocol=protocol)
    kit = Toolkit()
    with anyio.fail_after(30):
        await kit.add_mcp(server)
        assert kit.get("translate") is None
        await server.call_tool("grow", {})
        await wait_for(lambda: kit.get("translate") is not None)
        await server.call_tool("shrink", {})
        await wait_for(lambda: kit.get("shout") is None)
        model = ScriptedModel([tool_call("translate", {"text": "hello"}), text("你好")])
        result = await Agent(model=model, toolkit=kit).run("translate")
        await server.aclose()
    assert tool_results(result.messages)[0].content == "你好"
    assert server.list_fetches == 3


async def test_killing_the_server_mid_run_gives_a_tool_error_and_the_run_completes() -> None:
    server = stdio_echo(reconnect=False)
    kit = Toolkit()

    async def turn(messages: Sequence[Message], tools: Any) -> Any:
        results = tool_results(messages)
        if not results:
            return tool_call("whoami_pid")
        if len(results) == 1:
            pid = int(results[0].content)
            os.kill(pid, signal.SIGKILL)
            assert await wait_until_gone(pid)
            return tool_call("echo", {"text": "anyone there?"})
        return text("the echo server is gone")

    with anyio.fail_after(30):
        await kit.add_mcp(server)
        result = await Agent(model=FunctionModel(turn), toolkit=kit).run("go")
        await server.aclose()
    failed = tool_results(result.messages)[1]
    assert failed.is_error
    assert "MCP server echo" in failed.content
    assert result.output == "the echo server is gone"
    assert server.status == "closed"


async def test_a_slow_tool_call_times_out_as_a_tool_error() -> None:
    async with serve_asgi(build().streamable_http_app()) as base:
        server = StreamableHttpServer(f"{base}/mcp", name="remote", timeout=0.5)
        kit = Toolkit()
        with anyio.fail_after(30):
            await kit.add_mcp(server)
            model = ScriptedModel([tool_call("slow", {"seconds": 3}), text("too slow")])
            result = await Agent(model=model, toolkit=kit).run("wait")
            await server.aclose()
    [slow] = tool_results(result.messages)
    assert slow.is_error and "0.5 s" in slow.content
    assert result.output == "too slow"


async def test_a_tool_name_clash_between_two_servers_names_both() -> None:
    async with (
        serve_asgi(build("one").streamable_http_app()) as first,
        serve_asgi(build("two").streamable_http_app()) as second,
    ):
        a = StreamableHttpServer(f"{first}/mcp", name="alpha")
        b = StreamableHttpServer(f"{second}/mcp", name="beta")
        kit = Toolkit()
        with anyio.fail_after(30):
            await kit.add_mcp(a)
            with pytest.raises(ConfigurationError) as caught:
                await kit.add_mcp(b)
            await a.aclose()
    message = str(caught.value)
    assert "'alpha'" in message and "'beta'" in message and "'echo'" in message
    assert b.status == "closed"  # the failed mount closed what it opened


async def test_a_clash_with_a_local_tool_is_refused_before_anything_is_added() -> None:
    @tool
    def shout(text: str) -> str:
        """Local shout."""
        return text

    async with serve_asgi(build().streamable_http_app()) as base:
        server = StreamableHttpServer(f"{base}/mcp", name="remote")
        kit = Toolkit([shout])
        with anyio.fail_after(30), pytest.raises(ConfigurationError, match="a local tool"):
            await kit.add_mcp(server)
    assert [t.name for t in kit.tools] == ["shout"]


async def test_a_server_that_cannot_start_is_a_configuration_error_naming_it() -> None:
    server = StdioServer("/nonexistent/mcp-server", name="ghost", timeout=10)
    with anyio.fail_after(20), pytest.raises(ConfigurationError, match="ghost"):
        await Toolkit().add_mcp(server)


class _Recorder(McpServer):
    """A server stand-in that records closing (the group logic, without a peer)."""

    def __init__(self, name: str, log: list[str], *, fail_close: bool = False) -> None:
        super().__init__(name=name)
        self.log = log
        self.fail_close = fail_close

    def _transport(self) -> Any:
        raise AssertionError("the stand-in never connects a transport")

    async def connect(self) -> None:
        self.log.append(f"open {self.name}")

    async def aclose(self) -> None:
        self.log.append(f"close {self.name}")
        if self.fail_close:
            raise RuntimeError(f"{self.name} would not close")


async def test_a_group_closes_in_reverse_order_of_opening() -> None:
    log: list[str] = []
    async with McpServerGroup([_Recorder("a", log), _Recorder("b", log), _Recorder("c", log)]):
        pass
    assert log == ["open a", "open b", "open c", "close c", "close b", "close a"]


async def test_a_close_failure_never_masks_the_original_error() -> None:
    log: list[str] = []
    group = McpServerGroup([_Recorder("a", log), _Recorder("b", log, fail_close=True)])
    with pytest.raises(ValueError, match="the real problem"):
        async with group:
            raise ValueError("the real problem")
    assert log[-2:] == ["close b", "close a"]  # a was still closed after b failed


async def test_a_close_failure_is_raised_after_every_server_closed() -> None:
    log: list[str] = []
    group = McpServerGroup([_Recorder("a", log, fail_close=True), _Recorder("b", log)])
    await group.connect()
    with pytest.raises(RuntimeError, match="a would not close"):
        await group.aclose()
    assert log[-2:] == ["close b", "close a"]


async def test_a_group_of_real_servers_leaves_no_child_process() -> None:
    group = McpServerGroup([stdio_echo("first"), stdio_echo("second")])
    kit = Toolkit()
    with anyio.fail_after(40):
        async with group:
            with pytest.raises(ConfigurationError, match=r"'second' and MCP server 'first'"):
                await kit.add_mcp(group)  # same tool names on both
            pids = [await server_pid(s) for s in group]
    for pid in pids:
        assert await wait_until_gone(pid), f"server process {pid} outlived the group"
