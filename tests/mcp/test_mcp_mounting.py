"""How an MCP server's tools land in a toolkit: prefixes, filters, per-server and per-tool
governance settings, task-only tools, results (output cap, images, resources), HTTP status
in errors. Real SDK servers (tests/mcp/echo_server.py) over stdio and streamable HTTP."""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
import pytest
from echo_server import PNG, build
from mcp_helpers import echo_command, serve_asgi

from shelfhand.core.context import RunContext, UserContext
from shelfhand.core.errors import ConfigurationError, ToolError
from shelfhand.core.messages import ToolCallBlock
from shelfhand.mcp import (
    McpTool,
    SseServer,
    StdioServer,
    StreamableHttpServer,
    ToolSettings,
    parse_mcp_config,
)
from shelfhand.testing import ScriptedModel, text, tool_call
from shelfhand.tools.toolkit import Toolkit

pytestmark = pytest.mark.anyio

ALICE = UserContext(tenant_id="acme", user_id="alice")
ROOT = UserContext(tenant_id="acme", user_id="root", roles=["admin"])


def stdio_echo(name: str = "echo", **kw: Any) -> StdioServer:
    command, args = echo_command(name)
    return StdioServer(command, args, name=name, **kw)


async def call(kit: Toolkit, name: str, user: UserContext = ALICE, **arguments: Any) -> Any:
    block = ToolCallBlock(id="c1", name=name, arguments=json.dumps(arguments))
    return await kit.call(block, RunContext(user=user))


async def test_two_servers_with_the_same_tool_names_mount_side_by_side_with_prefixes() -> None:
    from shelfhand.agent.agent import Agent

    async with (
        serve_asgi(build("one").streamable_http_app()) as first,
        serve_asgi(build("two").streamable_http_app()) as second,
    ):
        a = StreamableHttpServer(f"{first}/mcp", name="alpha", prefix="a_")
        b = StreamableHttpServer(f"{second}/mcp", name="beta", prefix="b_")
        kit = Toolkit()
        with anyio.fail_after(30):
            await kit.add_mcp(a)
            await kit.add_mcp(b)
            model = ScriptedModel(
                [
                    tool_call("a_echo", {"text": "一"}),
                    tool_call("b_shout", {"text": "two"}),
                    text("ok"),
                ]
            )
            result = await Agent(model=model, toolkit=kit).run("both")
            names = {t.name for t in kit.tools}
            await a.aclose()
            await b.aclose()
    assert {"a_echo", "b_echo", "a_shout", "b_shout"} <= names
    assert "echo" not in names
    outputs = [r.content for m in result.messages for r in m.tool_results]
    assert outputs == ["echo: 一", "TWO!"]
    assert kit.tools == []  # both unmounted on close


async def test_a_deny_filter_uses_the_servers_own_names_before_the_prefix() -> None:
    server = stdio_echo(prefix="o_", tools={"deny": ["echo", "grow", "shrink"]})
    kit = Toolkit()
    with anyio.fail_after(30):
        await kit.add_mcp(server)
        names = {t.name for t in kit.tools}
        offered = set(server.offered_tools)  # what `shelfhand mcp list` shows
        await server.aclose()
    assert offered == names - {"o_read_resource"}
    assert names >= {"o_shout", "o_tick", "o_whoami_pid", "o_read_resource"}
    assert not names & {"o_echo", "o_grow", "o_shrink"}


async def test_tools_announced_later_get_the_prefix_and_the_filter_too() -> None:
    server = stdio_echo(prefix="p_", tools={"deny": ["translate"]})
    kit = Toolkit()
    with anyio.fail_after(30):
        await kit.add_mcp(server)
        await server.call_tool("shrink", {})  # shout goes, the list is announced again
        with anyio.fail_after(10):
            while kit.get("p_shout") is not None:
                await anyio.sleep(0.02)
        await server.call_tool("grow", {})  # translate comes, but is denied
        with anyio.fail_after(10):  # re-listed (the toolkit is updated in the same step)
            while "translate" not in {t.name for t in server.listed_tools}:
                await anyio.sleep(0.02)
        names = {t.name for t in kit.tools}
        await server.aclose()
    assert "p_echo" in names and "p_shout" not in names
    assert "p_translate" not in names and "translate" not in names


async def test_allow_list_mounts_only_the_listed_tools() -> None:
    server = stdio_echo(tools=["echo", "sh*"])
    kit = Toolkit()
    with anyio.fail_after(30):
        mounted = await kit.add_mcp(server)
        await server.aclose()
    # (read_resource too is mounted only when the list allows it)
    assert sorted(t.name for t in mounted) == ["echo", "shout", "shrink"]


async def test_results_are_not_cached_unless_cache_ttl_is_configured() -> None:
    plain = stdio_echo()
    cached = stdio_echo("cached", prefix="c_", cache_ttl=60)
    kit = Toolkit()
    with anyio.fail_after(30):
        await kit.add_mcp(plain)
        await kit.add_mcp(cached)
        fresh = [(await call(kit, "tick")).content for _ in range(3)]
        reused = [(await call(kit, "c_tick")).content for _ in range(3)]
        await plain.aclose()
        await cached.aclose()
    assert fresh == ["1", "2", "3"]  # read-only, yet asked each time
    assert reused == ["1", "1", "1"]


async def test_confirm_permission_and_cache_ttl_per_server_and_per_tool() -> None:
    server = stdio_echo(
        confirm=True,
        tool_settings={
            "echo": ToolSettings(confirm=False),
            "tick": {"cache_ttl": 30, "permission": "admin"},
        },
    )
    kit = Toolkit()
    with anyio.fail_after(30):
        await kit.add_mcp(server)
        echo, shout, tick = kit.get("echo"), kit.get("shout"), kit.get("tick")
        assert isinstance(echo, McpTool) and isinstance(shout, McpTool)
        assert isinstance(tick, McpTool)
        unconfirmed = await call(kit, "shout", text="hi")
        plain_user_tick = await call(kit, "tick")
        admin_ticks = [(await call(kit, "tick", ROOT)).content for _ in range(2)]
        visible = {t.name for t in kit.visible_tools(ALICE)}
        await server.aclose()
    assert not echo.confirm and shout.confirm and tick.confirm  # tick inherits the server's
    assert (echo.permission, shout.permission, tick.permission) == ("user", "user", "admin")
    assert (echo.cache_ttl, tick.cache_ttl) == (None, 30.0)
    assert unconfirmed.is_error and "confirmation" in unconfirmed.content
    assert plain_user_tick.is_error and "tick" not in visible and "echo" in visible
    # tick needs confirmation too, so even the admin gets a refusal (nothing cached, nothing run)
    assert all("confirmation" in a for a in admin_ticks)


async def test_each_mcp_tool_has_its_own_breaker_so_a_failing_tool_spares_its_siblings() -> None:
    from shelfhand.tools.governance import GovernancePolicy

    policy = GovernancePolicy(breaker_min_calls=2, retries=0)
    async with serve_asgi(build().streamable_http_app()) as base:
        server = StreamableHttpServer(
            f"{base}/mcp", name="remote", tool_settings={"working": {"timeout": 0.3}}
        )
        kit = Toolkit(policy=policy)
        with anyio.fail_after(30):
            await kit.add_mcp(server)
            timeouts = [await call(kit, "working", seconds=2, every=0) for _ in range(3)]
            echoed = await call(kit, "echo", text="still here")
            await server.aclose()
    assert all(t.is_error for t in timeouts)
    assert "circuit" in timeouts[-1].content  # the slow tool's breaker opened
    assert not echoed.is_error and echoed.content == "echo: still here"


async def test_tools_that_need_task_mode_are_not_offered() -> None:
    server = stdio_echo()
    kit = Toolkit()
    with anyio.fail_after(30):
        await kit.add_mcp(server)
        listed = {t.name for t in server.listed_tools}
        await server.aclose()
    assert "background_job" in listed  # the server offers it ...
    assert kit.get("background_job") is None  # ... but it is not mounted


async def test_a_long_result_is_cut_at_the_output_limit_with_a_marker() -> None:
    server = stdio_echo(output_limit=4096)
    with anyio.fail_after(30):
        await server.connect()
        out = await server.call_tool("big", {"kib": 2048})  # about 2 MiB
        small = await server.call_tool("big", {"kib": 1})
        await server.aclose()
    body, marker = out.content.rsplit("\n", 1)
    assert len(body.encode("utf-8")) <= 4096 and body.startswith("退货政策")
    assert marker.startswith("[output truncated: MCP server echo sent ") and "4095" in marker
    assert "truncated" not in small.content


async def test_an_image_result_is_described_with_its_type_and_size() -> None:
    server = stdio_echo()
    with anyio.fail_after(30):
        await server.connect()
        out = await server.call_tool("picture", {})
        await server.aclose()
    assert out.content == f"[image: image/png, {len(PNG)} bytes]"


async def test_resources_are_read_through_a_read_resource_tool() -> None:
    from shelfhand.agent.agent import Agent

    server = stdio_echo(prefix="e_")
    kit = Toolkit()
    model = ScriptedModel(
        [
            tool_call("e_read_resource", {"uri": "notes://returns"}),
            tool_call("e_read_resource", {"uri": "images://logo"}),
            tool_call("e_read_resource", {"uri": "notes://missing"}),
            text("7 天"),
        ]
    )
    with anyio.fail_after(30):
        await kit.add_mcp(server)
        reader = kit.get("e_read_resource")
        assert reader is not None
        result = await Agent(model=model, toolkit=kit).run("退货政策?")
        await server.aclose()
    assert "notes://returns" in reader.description and "images://logo" in reader.description
    text_result, image_result, missing = [r for m in result.messages for r in m.tool_results]
    assert text_result.content == "拆封后 7 天内可以退货。" and not text_result.is_error
    assert image_result.content == f"[image: image/png, {len(PNG)} bytes, images://logo]"
    assert missing.is_error and "MCP server echo" in missing.content


async def test_prompts_are_listed() -> None:
    server = stdio_echo()
    with anyio.fail_after(30):
        await server.connect()
        prompts = await server.list_prompts()
        await server.aclose()
    [summarise] = prompts
    assert (
        summarise.name == "summarise"
        and summarise.description == "总结一份文件 (summarise a document)"
    )
    assert [a.name for a in summarise.arguments or []] == ["path"]


def _refusing(app: Any, state: dict[str, bool]) -> Any:
    """``app`` behind a gate that answers a bare 401 (no JSON body) while state['refuse']."""

    async def gate(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and state["refuse"]:
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [(b"content-type", b"text/plain")],
                }
            )
            await send({"type": "http.response.body", "body": b"no"})
            return
        await app(scope, receive, send)

    return gate


async def test_an_http_401_shows_its_status_when_connecting_and_when_calling() -> None:
    state = {"refuse": True}
    async with serve_asgi(_refusing(build().streamable_http_app(), state)) as base:
        server = StreamableHttpServer(f"{base}/mcp", name="locked", timeout=10)
        with anyio.fail_after(30):
            with pytest.raises(ConfigurationError) as refused:
                await server.connect()
            state["refuse"] = False
            await server.connect()
            state["refuse"] = True
            with pytest.raises(ToolError) as failed:
                await server.call_tool("echo", {"text": "x"})
            await server.aclose()
    assert "HTTP 401 Unauthorized" in str(refused.value) and "locked" in str(refused.value)
    assert "HTTP 401 Unauthorized" in str(failed.value)


def test_mcp_json_carries_prefix_filters_and_settings() -> None:
    [entry] = parse_mcp_config(
        {
            "mcpServers": {
                "fs": {
                    "command": "npx",
                    "args": ["-y", "@modelcontextprotocol/server-filesystem", "/data"],
                    "prefix": "fs_",
                    "tools": {"allow": ["read_*", "write_file"], "deny": ["read_media_file"]},
                    "cache_ttl": 10,
                    "output_limit": 8192,
                    "max_duration": 120,
                    "reconnect": False,
                    "tool_settings": {"write_file": {"confirm": True, "permission": "admin"}},
                }
            }
        }
    )
    server = entry.server()
    assert server.prefix == "fs_" and server.output_limit == 8192
    assert server.max_duration == 120 and server.reconnect is False
    assert server.tool_filter("read_text_file") and server.tool_filter("write_file")
    assert not server.tool_filter("read_media_file") and not server.tool_filter("move_file")
    write = server.settings_for("write_file")
    assert (write.confirm, write.permission, write.cache_ttl) == (True, "admin", 10)
    assert server.settings_for("read_text_file").confirm is False


@pytest.mark.parametrize(
    ("extra", "complaint"),
    [
        ({"prefix": "bad prefix"}, "prefix"),
        ({"tools": "echo"}, "list of tool names"),
        ({"tools": {"only": ["x"]}}, "allow, deny"),
        ({"permission": "root"}, "user, admin or system"),
        ({"cache_ttl": -1}, "cache_ttl"),
        ({"output_limit": 10}, "output_limit"),
        ({"tool_settings": {"x": {"confim": True}}}, "confim"),
        ({"reconnect": "yes"}, "reconnect"),
        ({"timeout": 10, "max_duration": 5}, "max_duration must be at least timeout"),
    ],
)
def test_bad_mounting_options_are_configuration_errors_naming_the_entry(
    extra: dict[str, Any], complaint: str
) -> None:
    entry = {"url": "http://127.0.0.1:9/mcp", **extra}
    with pytest.raises(ConfigurationError, match="'srv'") as caught:
        parse_mcp_config({"mcpServers": {"srv": entry}}, source="mcp.json")
    assert complaint in str(caught.value)


def test_toml_config_takes_the_same_keys(tmp_path: Any) -> None:
    from shelfhand.mcp import load_mcp_config

    (tmp_path / "shelfhand.toml").write_text(
        '[mcp.servers.time]\ncommand = "uvx"\nargs = ["mcp-server-time"]\nprefix = "time_"\n'
        '[mcp.servers.time.tools]\ndeny = ["convert_time"]\n'
        "[mcp.servers.time.tool_settings.get_current_time]\ncache_ttl = 5\n",
        encoding="utf-8",
    )
    [entry] = load_mcp_config(tmp_path)
    assert entry.prefix == "time_" and not entry.tools("convert_time")
    assert entry.tool_settings["get_current_time"].cache_ttl == 5


async def test_a_token_in_an_mcp_servers_url_is_in_no_error_or_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = {"refuse": True}
    caplog.set_level(logging.DEBUG, logger="shelfhand")
    async with serve_asgi(_refusing(build().sse_app(), state)) as base:
        server = SseServer(f"{base}/sse?token=s3cr3t-mcp", name="locked", timeout=10)
        with anyio.fail_after(30):
            with pytest.raises(ConfigurationError) as refused:
                await server.connect()
    told = str(refused.value)
    assert "401 Unauthorized" in told and "token=[REDACTED]" in told
    assert "s3cr3t-mcp" not in told
    assert "s3cr3t-mcp" not in "\n".join(r.getMessage() for r in caplog.records)


async def test_a_refusal_after_an_mcp_tool_answered_with_is_error_says_which_tool_failed() -> None:
    """The server ran the tool and answered ``isError``: the tool did not answer, as when it
    times out. The user reads that, not the model's "I cannot find your order"."""
    from shelfhand.agent.agent import Agent
    from shelfhand.agent.answer_check import TOOLS_FAILED_LEAD, AnswerCheck

    kit = Toolkit()
    with anyio.fail_after(30):
        async with stdio_echo() as server:
            await kit.add_mcp(server)
            model = ScriptedModel(
                [
                    tool_call("order_lookup", {"order_id": "SO-1001"}),
                    text("I cannot find any information about your order."),
                ]
            )
            agent = Agent(model=model, toolkit=kit, answer_check=AnswerCheck())
            result = await agent.run("Where is my order SO-1001?", context=ALICE)

    (failed,) = [r for m in result.messages for r in m.tool_results]
    assert failed.is_error and failed.failure.startswith("returned an error: ")
    assert result.fallback_reason == "tool_failed"
    assert result.output.startswith(f"{TOOLS_FAILED_LEAD}\n- order_lookup: returned an error: ")
    assert "order database unavailable while reading SO-1001" in result.output
