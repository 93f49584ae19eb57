"""Identical calls of one model reply: a read-only tool runs once and every call gets the
result; a tool with effects runs once per call."""

from __future__ import annotations

import anyio
import pytest

from shelfhand import Agent, Toolkit, UserContext, tool
from shelfhand.core.events import Final, ToolFinished
from shelfhand.testing import ScriptedModel, text, tool_call

pytestmark = pytest.mark.anyio

ALICE = UserContext(tenant_id="t1", user_id="alice")


def lookup_kit(runs: list[str], *, read_only: bool) -> Toolkit:
    @tool(read_only=read_only, concurrency_safe=True)
    async def lookup(sku: str) -> str:
        """Find a product's warranty."""
        runs.append(sku)
        await anyio.sleep(0)  # let the other calls of the round start meanwhile
        return f"{sku} 保修两年。"

    return Toolkit([lookup])


def ten_identical_calls() -> ScriptedModel:
    return ScriptedModel(
        [[tool_call("lookup", {"sku": "E-203"}, id=f"c{i}") for i in range(10)], text("两年。")]
    )


@pytest.mark.parametrize("width", [1, 3, 8, 16])
async def test_ten_identical_read_only_calls_in_one_reply_execute_once(width: int) -> None:
    runs: list[str] = []
    agent = Agent(
        name="a", model=ten_identical_calls(), toolkit=lookup_kit(runs, read_only=True),
        max_concurrency=width,
    )  # fmt: skip
    finished: list[ToolFinished] = []
    final = None
    async for event in agent.stream("E-203 保修多久？", context=ALICE):
        if isinstance(event, ToolFinished):
            finished.append(event)
        elif isinstance(event, Final):
            final = event
    assert runs == ["E-203"]
    assert final is not None
    results = next(m for m in final.result.messages if m.role == "tool").tool_results
    assert [r.call_id for r in results] == [f"c{i}" for i in range(10)]
    assert all(r.content == "E-203 保修两年。" and not r.is_error for r in results)
    assert sorted(e.call_id for e in finished) == sorted(f"c{i}" for i in range(10))


async def test_identical_calls_of_a_tool_with_effects_each_execute() -> None:
    runs: list[str] = []
    agent = Agent(name="a", model=ten_identical_calls(), toolkit=lookup_kit(runs, read_only=False))
    result = await agent.run("E-203 保修多久？", context=ALICE)
    assert runs == ["E-203"] * 10
    assert result.output == "两年。"
