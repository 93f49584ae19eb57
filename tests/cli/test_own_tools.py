"""A team's own tools on the command line (setting ``tools``): ``shelfhand tools`` lists them
and ``shelfhand chat`` offers them, as the ``shelfhand`` command runs (``python -P``: the
folder it runs in is searched because the setting says so, not because Python does). The
real CLI, the real openai SDK and a chat-completions server on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from support.chat_server import Reply, chunk, completion  # see conftest.py
from support.cli import cli_env
from support.mcp_wire import INITIALIZE, INITIALIZED, LIST_TOOLS, replies_until, stdio_serve

DESK = '''
"""The after-sales desk's own tools."""
from shelfhand import UserContext, tool


@tool(read_only=True)
def order_status(ctx: UserContext, order_id: str) -> dict:
    """Look up one of the caller's orders.

    Args:
        order_id: The order number, e.g. SO-1001.
    """
    return {"order": order_id, "tenant": ctx.tenant_id, "user": ctx.user_id}


@tool(read_only=True, retries=0)
def warehouse(sku: str) -> str:
    """Stock in the warehouse."""
    raise ValueError("the warehouse service answered 503\\nsecond line")
'''


def shelfhand(
    args: list[str], project: Path, server: Any | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = cli_env(project / "ws", server, SHELFHAND_TOOLS="desk", SHELFHAND_ANSWER_RETRIEVAL="tool")
    return subprocess.run(
        [sys.executable, "-P", "-m", "shelfhand.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=project,
        timeout=120,
        check=False,
    )


def calls(*named: tuple[str, dict[str, Any]]) -> Reply:
    """A streamed reply calling the tools ``named`` (name, arguments)."""
    return Reply(
        sse=[
            chunk(
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "index": i,
                            "id": f"call_{i}",
                            "type": "function",
                            "function": {"name": name, "arguments": json.dumps(arguments)},
                        }
                        for i, (name, arguments) in enumerate(named)
                    ],
                }
            )
        ]
    )


def call(call_id: str, name: str, **arguments: str) -> dict[str, Any]:
    """A non-streamed reply's tool call."""
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {"id": call_id, "type": "function", "function": function}


def test_tools_lists_the_teams_tools_with_their_schemas(tmp_path: Path) -> None:
    (tmp_path / "desk.py").write_text(DESK, encoding="utf-8")
    out = shelfhand(["tools", "--json"], tmp_path)
    assert out.returncode == 0, out.stderr
    schemas = {s["function"]["name"]: s["function"] for s in json.loads(out.stdout)}
    assert list(schemas) == ["retrieve", "order_status", "warehouse"]
    assert schemas["order_status"]["parameters"]["required"] == ["order_id"]
    assert "ctx" not in schemas["order_status"]["parameters"]["properties"]


def test_chat_calls_them_for_the_caller_and_shows_why_one_failed(
    tmp_path: Path, server: Any
) -> None:
    (tmp_path / "desk.py").write_text(DESK, encoding="utf-8")
    server.add(
        calls(("order_status", {"order_id": "SO-1001"}), ("warehouse", {"sku": "X1"})),
        Reply(sse=[chunk({"role": "assistant", "content": "SO-1001 shipped."})]),
    )
    out = shelfhand(
        ["chat", "--tenant", "acme", "--user", "alice"], tmp_path, server, "SO-1001?\n\n"
    )
    assert out.returncode == 0, out.stderr
    assert "← order_status ok" in out.stdout
    assert "tool warehouse failed: ValueError: the warehouse service answered 503" in out.stdout
    assert "second line" not in out.stdout
    told = {m.get("tool_call_id"): m["content"] for m in server.requests[1].body["messages"]}
    assert json.loads(told["call_0"]) == {"order": "SO-1001", "tenant": "acme", "user": "alice"}


def test_a_missing_module_is_a_clear_error_before_anything_runs(tmp_path: Path) -> None:
    out = shelfhand(["tools"], tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip() == (
        f"error: tools: no module named 'desk' (looked in {tmp_path} and the installed packages)"
    )


def test_mcp_serve_offers_the_read_only_ones_to_mcp_clients_for_its_caller(
    tmp_path: Path,
) -> None:
    import anyio
    from mcp.client.stdio import stdio_client

    from mcp import ClientSession, StdioServerParameters

    (tmp_path / "desk.py").write_text(DESK, encoding="utf-8")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-P", "-m", "shelfhand.cli", "mcp", "serve", "--tenant", "acme", "--user", "bo"],
        env=cli_env(tmp_path / "ws", SHELFHAND_TOOLS="desk"),
        cwd=tmp_path,
    )

    async def call() -> tuple[list[str], str]:
        with anyio.fail_after(60):
            return await session_calls()

    async def session_calls() -> tuple[list[str], str]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            listed = [t.name for t in (await session.list_tools()).tools]
            result = await session.call_tool("order_status", {"order_id": "SO-7"})
            return listed, result.content[0].text  # type: ignore[union-attr]

    listed, text = anyio.run(call)
    assert {"retrieve", "order_status", "warehouse"} <= set(listed)
    assert json.loads(text) == {"order": "SO-7", "tenant": "acme", "user": "bo"}


def test_ask_json_lists_the_calls_with_what_they_returned(tmp_path: Path, server: Any) -> None:
    (tmp_path / "desk.py").write_text(DESK, encoding="utf-8")
    (tmp_path / "ws").mkdir()  # `ask` needs a workspace; this one holds no documents
    server.add(
        Reply(body=completion(tool_calls=[call("call_7", "order_status", order_id="SO-1001")])),
        Reply(body=completion("Your order SO-1001 has shipped.")),
    )
    out = shelfhand(["ask", "Where is SO-1001?", "--json", "--user", "alice"], tmp_path, server)
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    assert answer["output"] == "Your order SO-1001 has shipped."
    (step,) = answer["tool_steps"]
    assert step["call_id"] == "call_7" and step["name"] == "order_status"
    assert json.loads(step["arguments"]) == {"order_id": "SO-1001"} and not step["is_error"]
    assert json.loads(step["content"])["user"] == "alice"


def test_ask_names_the_tools_an_answer_came_from(tmp_path: Path, server: Any) -> None:
    (tmp_path / "desk.py").write_text(DESK, encoding="utf-8")
    (tmp_path / "ws").mkdir()
    server.add(
        Reply(
            body=completion(
                tool_calls=[
                    call("call_1", "order_status", order_id="SO-1001"),
                    call("call_2", "warehouse", sku="X1"),
                ]
            )
        ),
        Reply(body=completion("Your order SO-1001 has shipped.")),
    )
    out = shelfhand(["ask", "Where is SO-1001?"], tmp_path, server)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[:2] == [
        "Your order SO-1001 has shipped.",
        "tools: order_status, warehouse (failed)",
    ]


def test_ask_tells_which_tool_failed_instead_of_a_made_up_answer(
    tmp_path: Path, server: Any
) -> None:
    (tmp_path / "desk.py").write_text(DESK, encoding="utf-8")
    (tmp_path / "manual.md").write_text("# Lumen X1\n\nA 3,000 lumen projector.\n", "utf-8")
    assert shelfhand(["ingest", "manual.md"], tmp_path).returncode == 0  # the answer is checked
    server.add(
        Reply(body=completion(tool_calls=[call("call_1", "warehouse", sku="X1")])),
        Reply(body=completion("There are 12 Lumen X1 in stock.")),  # made up: the call failed
    )
    out = shelfhand(["ask", "How many X1 are in stock?", "--json"], tmp_path, server)
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    assert answer["output"] == (
        "The tools called for this did not answer:\n"
        "- warehouse: failed: ValueError"  # not its message: it may hold internal details
    )
    assert answer["fallback_reason"] == "ungrounded"
    assert [s["is_error"] for s in answer["tool_steps"]] == [True]
    assert [s["failure"] for s in answer["tool_steps"]] == ["failed: ValueError"]


def test_a_subagent_file_may_name_them(tmp_path: Path) -> None:
    (tmp_path / "desk.py").write_text(DESK, encoding="utf-8")
    agents = tmp_path / "ws" / "agents"
    agents.mkdir(parents=True)
    (agents / "orders.md").write_text(
        "---\nname: orders\ndescription: The caller's orders.\ntools: [order_status]\n---\n"
        "You look up orders.\n",
        encoding="utf-8",
    )
    out = shelfhand(["agents"], tmp_path)
    assert out.returncode == 0, out.stderr
    assert "orders" in out.stdout and "order_status" in out.stdout


def test_over_stdio_what_a_tool_module_prints_goes_to_stderr_not_into_the_protocol(
    tmp_path: Path,
) -> None:
    (tmp_path / "desk.py").write_text(
        'print("connected to the CRM")\n' + DESK + '\nprint("desk tools ready")\n',
        encoding="utf-8",
    )
    requests = [INITIALIZE, INITIALIZED, LIST_TOOLS]
    env = cli_env(tmp_path / "ws", SHELFHAND_TOOLS="desk")
    with stdio_serve(env, cwd=tmp_path) as process:
        replies = replies_until(process, requests, 2, "tools/list")  # every line the protocol's
        assert process.stdin is not None
        process.stdin.close()
        err = process.stderr.read() if process.stderr is not None else ""
    listed = [t["name"] for t in replies[-1]["result"]["tools"]]
    assert "order_status" in listed
    assert "connected to the CRM" in err and "desk tools ready" in err
