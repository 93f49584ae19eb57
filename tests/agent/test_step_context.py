"""The run's context a tool is given at each step of an agent run.

A tool that takes the ``RunContext`` reads the step it was called at; every step's context is
the run's (caller, trace, citation numbers); a tool that does not take it is given the run's
own context (nothing is built for it per step).
"""

from __future__ import annotations

import pytest

from shelfhand import Agent, Toolkit, UserContext, tool
from shelfhand.core.context import RunContext
from shelfhand.testing import ScriptedModel, text, tool_call

pytestmark = pytest.mark.anyio

ALICE = UserContext(tenant_id="acme", user_id="alice")


async def test_a_tool_that_takes_the_run_context_reads_the_step_it_was_called_at() -> None:
    seen: list[RunContext] = []

    @tool(read_only=True, cache_ttl=0)
    def stock(run: RunContext, sku: str) -> str:
        """库存查询 (stock of one article)."""
        seen.append(run)
        return f"{sku}: 12 件"

    model = ScriptedModel(
        [
            tool_call("stock", {"sku": "A-1"}),
            tool_call("stock", {"sku": "B-2"}),
            tool_call("stock", {"sku": "C-3"}),
            text("三件商品都有库存"),
        ]
    )
    agent = Agent(model=model, toolkit=Toolkit([stock]))
    result = await agent.run("查一下库存", context=ALICE)
    assert [r.iteration for r in seen] == [1, 2, 3]
    assert {r.trace_id for r in seen} == {result.trace_id}
    assert all(r.user == ALICE for r in seen)
    # one run: the steps share its citation numbers
    assert seen[0].citations is seen[1].citations is seen[2].citations


async def test_a_tool_without_the_run_context_gets_the_same_results_at_every_step() -> None:
    @tool(read_only=True, cache_ttl=0)
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    model = ScriptedModel(
        [tool_call("add", {"a": 2, "b": 3}), tool_call("add", {"a": 5, "b": 8}), text("13")]
    )
    agent = Agent(model=model, toolkit=Toolkit([add]))
    result = await agent.run("2 + 3, then + 8", context=ALICE)
    results = [m.tool_results[0].content for m in result.messages if m.role == "tool"]
    assert results == ["5", "13"] and result.iterations == 3
