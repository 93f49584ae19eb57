"""An MCP server's stdout read as whole lines, in linear time and bounded: a message longer
than the bound fails the call it answers, saying why, and the session goes on."""

from __future__ import annotations

import json

import anyio
import pytest
from mcp_helpers import echo_command

from shelfhand.core.errors import ToolError
from shelfhand.mcp import StdioServer, stdio_lines
from shelfhand.mcp.stdio_lines import WholeLines

pytestmark = pytest.mark.anyio


async def read_all(pieces: list[bytes]) -> list[str]:
    send, receive = anyio.create_memory_object_stream[bytes](len(pieces) + 1)
    for piece in pieces:
        send.send_nowait(piece)
    send.close()
    stream = WholeLines(receive)
    return [text async for text in stream]


async def test_texts_end_at_line_ends_whatever_the_pieces() -> None:
    lines = [
        json.dumps({"jsonrpc": "2.0", "id": i, "result": "退货" * i}) + "\n" for i in range(40)
    ]
    stream = "".join(lines).encode()
    pieces = [stream[i : i + 13] for i in range(0, len(stream), 13)]  # (splits characters too)
    texts = await read_all([*pieces, b'{"partial'])
    assert all(text.endswith("\n") for text in texts[:-1])
    assert "".join(texts) == "".join(lines) + '{"partial'


@pytest.mark.parametrize("id_at", ["head", "tail"])
async def test_a_line_over_the_bound_becomes_an_error_for_its_request(
    monkeypatch: pytest.MonkeyPatch, id_at: str
) -> None:
    monkeypatch.setattr(stdio_lines, "MAX_LINE_CHARACTERS", 1000)
    body = '"result": {"text": "' + "x" * 5000 + '"}'
    long = (
        '{"jsonrpc": "2.0", "id": 7, ' + body + "}"
        if id_at == "head"
        else "{" + body + ', "id": "r-7"}'
    )
    before = '{"jsonrpc": "2.0", "id": 6, "result": {}}\n'
    after = '{"jsonrpc": "2.0", "id": 8, "result": {}}\n'
    stream = (before + long + "\n" + after).encode()
    texts = await read_all([stream[i : i + 100] for i in range(0, len(stream), 100)])
    got = [json.loads(line) for line in "".join(texts).splitlines()]
    assert [m["id"] for m in got] == [6, 7 if id_at == "head" else "r-7", 8]
    assert "longer than" in got[1]["error"]["message"] and "result" not in got[1]
    assert max(len(t) for t in texts) < 1200  # the long line was never held whole


async def test_a_result_over_the_bound_fails_its_call_and_the_server_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(stdio_lines, "MAX_LINE_CHARACTERS", 256 * 1024)
    command, args = echo_command("big")
    server = StdioServer(command, args, name="big", timeout=20)
    with anyio.fail_after(30):
        async with server:
            from mcp.client import stdio

            assert stdio.TextReceiveStream is WholeLines  # (the SDK still reads through it)
            with pytest.raises(ToolError, match="longer than"):
                await server.call_tool("big", {"kib": 512})
            small = await server.call_tool("big", {"kib": 16})
            echoed = await server.call_tool("echo", {"text": "还在"})
    assert not small.is_error and echoed.content == "echo: 还在"


async def test_a_request_of_the_servers_own_over_the_bound_is_dropped_not_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # its id is the server's, not one of ours: an error "for" it would fail another call
    monkeypatch.setattr(stdio_lines, "MAX_LINE_CHARACTERS", 1000)
    asked = '{"jsonrpc": "2.0", "id": 3, "method": "sampling/createMessage", "params": {"x": "'
    stream = (asked + "y" * 5000 + '"}}\n{"jsonrpc": "2.0", "id": 3, "result": {}}\n').encode()
    texts = await read_all([stream[i : i + 100] for i in range(0, len(stream), 100)])
    assert [line for line in "".join(texts).splitlines() if line] == [
        '{"jsonrpc": "2.0", "id": 3, "result": {}}'
    ]
