"""The ReAct loop: tool calls, errors fed back, concurrency, streaming, limits."""

from __future__ import annotations

import asyncio
import json
from typing import Literal

import pytest

from shelfhand import Agent, Toolkit, UserContext, tool
from shelfhand.core.errors import ScriptExhaustedError
from shelfhand.core.events import Final, TextDelta, ToolFinished, ToolStarted
from shelfhand.core.messages import Message, ToolCallBlock
from shelfhand.testing import FunctionModel, ScriptedModel, text, tool_call

pytestmark = pytest.mark.anyio

ALICE = UserContext(tenant_id="t1", user_id="u7", roles=["user"])


@tool(read_only=True)
def lookup_order(
    ctx: UserContext, order_id: str, detail: Literal["brief", "full"] = "brief"
) -> dict:
    """Look up one of the caller's orders.

    Args:
        order_id: The order number, e.g. SO-1001.
        detail: How much to return.
    """
    return {"order": order_id, "owner": ctx.user_id, "status": "shipped"}


async def test_the_issue_example_runs_a_tool_with_the_injected_user() -> None:
    kit = Toolkit([lookup_order])
    model = ScriptedModel([tool_call("lookup_order", {"order_id": "SO-1001"}), text("Shipped.")])
    result = await Agent(name="a", model=model, toolkit=kit).run("Where is SO-1001?", context=ALICE)
    assert result.output == "Shipped."
    assert "u7" in str(result.messages)
    tool_msg = result.messages[2]
    assert tool_msg.role == "tool"
    assert json.loads(tool_msg.tool_results[0].content)["owner"] == "u7"
    # the model never saw a ctx parameter
    offered = model.tool_schemas[0][0]["function"]["parameters"]["properties"]
    assert "ctx" not in offered


async def test_an_unknown_tool_becomes_an_error_result_and_the_run_goes_on() -> None:
    model = ScriptedModel([tool_call("no_such_tool", {}), text("Sorry.")])
    result = await Agent(model=model, toolkit=Toolkit([lookup_order])).run("hi")
    err = result.messages[2].tool_results[0]
    assert err.is_error and "no_such_tool" in err.content
    assert result.output == "Sorry."


async def test_bad_json_arguments_are_reported_to_the_model() -> None:
    bad = ToolCallBlock(id="c1", name="lookup_order", arguments="{not json")
    model = ScriptedModel([Message.assistant(tool_calls=[bad]), text("retrying")])
    result = await Agent(model=model, toolkit=Toolkit([lookup_order])).run("x", context=ALICE)
    err = result.messages[2].tool_results[0]
    assert err.is_error
    # the model saw the error on its next turn
    assert any(m.role == "tool" for m in model.requests[1])


async def test_a_raising_tool_is_reported_and_the_run_continues() -> None:
    @tool
    def explode(x: int) -> int:
        """Fail."""
        raise RuntimeError("boom")

    model = ScriptedModel([tool_call("explode", {"x": 1}), text("It failed.")])
    result = await Agent(model=model, toolkit=Toolkit([explode])).run("go")
    err = result.messages[2].tool_results[0]
    assert err.is_error and "boom" in err.content
    assert result.output == "It failed."


async def test_concurrency_safe_calls_in_one_reply_run_at_the_same_time() -> None:
    both_started = asyncio.Event()
    running = 0

    @tool(read_only=True)
    async def wait_for_peer(name: str) -> str:
        """Wait until both calls are running."""
        nonlocal running
        running += 1
        if running == 2:
            both_started.set()
        await asyncio.wait_for(both_started.wait(), 5)
        return name

    model = ScriptedModel(
        [
            [tool_call("wait_for_peer", {"name": "a"}), tool_call("wait_for_peer", {"name": "b"})],
            text("done"),
        ]
    )
    result = await Agent(model=model, toolkit=Toolkit([wait_for_peer])).run("go")
    assert [r.content for r in result.messages[2].tool_results] == ["a", "b"]


async def test_calls_that_are_not_concurrency_safe_run_one_after_another() -> None:
    order: list[str] = []
    active = 0

    @tool
    async def write(name: str) -> str:
        """A write."""
        nonlocal active
        active += 1
        assert active == 1, "two writes overlapped"
        order.append(name)
        await asyncio.sleep(0)
        active -= 1
        return name

    model = ScriptedModel(
        [[tool_call("write", {"name": "a"}), tool_call("write", {"name": "b"})], text("ok")]
    )
    await Agent(model=model, toolkit=Toolkit([write])).run("go")
    assert order == ["a", "b"]


async def test_the_concurrency_cap_bounds_parallel_calls() -> None:
    peak = 0
    active = 0

    @tool(read_only=True)
    async def probe(i: int) -> int:
        """Probe."""
        nonlocal peak, active
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.001)
        active -= 1
        return i

    model = ScriptedModel([[tool_call("probe", {"i": i}) for i in range(20)], text("ok")])
    await Agent(model=model, toolkit=Toolkit([probe]), max_concurrency=3).run("go")
    assert peak == 3


async def test_max_iterations_stops_with_an_honest_answer() -> None:
    model = FunctionModel(lambda messages, tools: tool_call("lookup_order", {"order_id": "SO-1"}))
    result = await Agent(model=model, toolkit=Toolkit([lookup_order]), max_iters=3).run(
        "loop", context=ALICE
    )
    assert result.stop_reason == "max_iters"
    assert "could not finish within 3 steps" in result.output
    assert result.iterations == 3


async def test_stream_yields_deltas_tool_events_and_one_final_event_in_order() -> None:
    model = ScriptedModel(
        [tool_call("lookup_order", {"order_id": "SO-9"}), text("Your order has shipped.")]
    )
    events = [
        e
        async for e in Agent(model=model, toolkit=Toolkit([lookup_order])).stream(
            "where?", context=ALICE
        )
    ]
    kinds = [e.type for e in events]
    assert kinds.index("tool_started") < kinds.index("tool_finished") < kinds.index("text_delta")
    assert kinds[-1] == "final" and kinds.count("final") == 1
    deltas = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert deltas == "Your order has shipped."
    assert len([e for e in events if isinstance(e, TextDelta)]) > 1
    started = next(e for e in events if isinstance(e, ToolStarted))
    finished = next(e for e in events if isinstance(e, ToolFinished))
    assert started.call_id == finished.call_id and not finished.is_error
    final = events[-1]
    assert isinstance(final, Final) and final.result.output == deltas


async def test_an_exhausted_script_fails_loudly() -> None:
    model = ScriptedModel([tool_call("lookup_order", {"order_id": "SO-1"})])
    with pytest.raises(ScriptExhaustedError):
        await Agent(model=model, toolkit=Toolkit([lookup_order])).run("x", context=ALICE)


async def test_external_tools_are_returned_to_the_caller_not_executed() -> None:
    called = False

    @tool(external=True)
    def approve_refund(order_id: str) -> str:
        """Ask a human to approve a refund."""
        nonlocal called
        called = True
        return "approved"

    model = ScriptedModel([tool_call("approve_refund", {"order_id": "SO-1"})])
    result = await Agent(model=model, toolkit=Toolkit([approve_refund])).run("refund")
    assert result.stop_reason == "external_tool"
    assert result.external_calls[0].name == "approve_refund"
    assert not called


async def test_admin_tools_are_hidden_from_plain_users() -> None:
    @tool(permission="admin")
    def drop_cache() -> str:
        """Admin only."""
        return "dropped"

    model = ScriptedModel([tool_call("drop_cache", {}), text("no")])
    result = await Agent(model=model, toolkit=Toolkit([drop_cache, lookup_order])).run(
        "x", context=ALICE
    )
    names = [s["function"]["name"] for s in model.tool_schemas[0]]
    assert names == ["lookup_order"]
    err = result.messages[2].tool_results[0]
    assert err.is_error and "dropped" not in err.content


def test_run_sync_works_outside_an_event_loop() -> None:
    model = ScriptedModel([text("hello")])
    assert Agent(model=model).run_sync("hi").output == "hello"
