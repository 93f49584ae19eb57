"""A turn's usage is the sum of every model call it made: a supervisor's run adds its
subagents' finished runs (and theirs), in ``RunResult`` and the streamed ``Final`` (the
service's reply and ledger: tests/api/test_usage_api.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import anyio
import pytest

from shelfhand import Toolkit, UserContext, tool
from shelfhand.agent.subagents import Subagent
from shelfhand.agent.supervisor import Supervisor
from shelfhand.core.errors import ModelProviderError, ModelTimeoutError
from shelfhand.core.events import Final
from shelfhand.core.messages import Message, ToolCallBlock
from shelfhand.core.results import Usage
from shelfhand.models.base import ModelResponse
from shelfhand.testing import FunctionModel

pytestmark = pytest.mark.anyio

ACME = UserContext(tenant_id="acme", user_id="alice", roles=["user"])


@tool(read_only=True)
def query_stock(sku: str) -> str:
    """Stock of a product.

    Args:
        sku: The product code, e.g. SKU2024-011.
    """
    return f"{sku}: 12 in stock"


def reply(message: Message, input_tokens: int, output_tokens: int) -> ModelResponse:
    return ModelResponse(
        message=message, usage=Usage(input_tokens=input_tokens, output_tokens=output_tokens)
    )


def call(name: str, arguments: str) -> Message:
    return Message.assistant(
        tool_calls=[ToolCallBlock(id=f"c-{name}", name=name, arguments=arguments)]
    )


def delegating(to: str, answer: str, tokens: tuple[int, int, int, int]) -> FunctionModel:
    """Delegates to ``to`` first, then answers ``answer``; reports ``tokens`` (in and out of
    its two calls)."""

    def turn(messages: Sequence[Message], tools: Sequence[Any]) -> ModelResponse:
        if messages[-1].role != "tool":
            return reply(call(to, '{"task": "SKU2024-011 有货吗？"}'), tokens[0], tokens[1])
        return reply(Message.assistant(answer), tokens[2], tokens[3])

    return FunctionModel(turn)


ADVISOR_CALLS = (30, 3, 40, 4)
MAIN_CALLS = (100, 10, 200, 20)
SUM = Usage(input_tokens=370, output_tokens=37, model_calls=4, tool_calls=2)


def supervisor() -> Supervisor:
    advisor = Subagent(
        "product_advisor",
        "Answers questions about stock.",
        model=delegating("query_stock", "12 台有货。", ADVISOR_CALLS),
        tools=["query_stock"],
    )
    return Supervisor(
        model=delegating("product_advisor", "有货，12 台。", MAIN_CALLS),
        toolkit=Toolkit([query_stock]),
        subagents=[advisor],
    )


async def test_a_supervisors_usage_adds_its_subagents_model_calls() -> None:
    result = await supervisor().run("SKU2024-011 有货吗？", context=ACME)
    assert result.output == "有货，12 台。"
    assert result.usage == SUM


async def test_the_streamed_final_carries_the_same_sum() -> None:
    finals = [e async for e in supervisor().stream("SKU2024-011 有货吗？", context=ACME)]
    (final,) = [e for e in finals if isinstance(e, Final)]
    assert final.result.usage == SUM


async def test_usage_sums_through_two_levels_of_delegation() -> None:
    leaf = Subagent(
        "stock_clerk",
        "Looks up stock.",
        model=delegating("query_stock", "12。", (5, 1, 6, 1)),
        tools=["query_stock"],
    )
    middle = Subagent(
        "product_advisor",
        "Answers questions about stock.",
        model=delegating("stock_clerk", "12 台有货。", ADVISOR_CALLS),
        tools=["stock_clerk"],  # another subagent: two levels deep
    )
    sup = Supervisor(
        model=delegating("product_advisor", "有货，12 台。", MAIN_CALLS),
        toolkit=Toolkit([query_stock]),
        subagents=[middle, leaf],
    )
    result = await sup.run("SKU2024-011 有货吗？", context=ACME)
    assert result.usage == Usage(input_tokens=381, output_tokens=39, model_calls=6, tool_calls=3)


async def test_two_callers_at_once_each_get_their_own_sum() -> None:
    sup = supervisor()
    results: dict[str, Usage] = {}

    async def ask(user: UserContext) -> None:
        results[user.tenant_id] = (await sup.run("SKU2024-011 有货吗？", context=user)).usage

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask, ACME)
        tg.start_soon(ask, UserContext(tenant_id="globex", user_id="bob"))
    assert results == {"acme": SUM, "globex": SUM}


@pytest.mark.parametrize("failure", ["error", "timeout"])
async def test_a_subagent_that_fails_after_some_calls_still_adds_them(failure: str) -> None:
    """The advisor looks the stock up (one call answered, one tool call), then its model
    fails; the supervisor answers anyway. The turn's usage holds the advisor's answered call
    and its tool call, as the caller's budget was charged them: before, a subagent's run that
    raised handed nothing to its parent, and its calls were missing from the reply's usage
    and from the usage ledger, which books it. A call past its timeout counts too, at its
    request's estimate (what the budget charged it)."""

    def advisor_turn(messages: Sequence[Message], tools: Sequence[Any]) -> ModelResponse:
        if messages[-1].role != "tool":
            return reply(call("query_stock", '{"sku": "SKU2024-011"}'), 30, 3)
        if failure == "timeout":
            raise ModelTimeoutError("the advisor's model did not answer within 60s")
        raise ModelProviderError("the advisor's model server went away", status_code=502)

    advisor = Subagent(
        "product_advisor",
        "Answers questions about stock.",
        model=FunctionModel(advisor_turn),
        tools=["query_stock"],
    )
    sup = Supervisor(
        model=delegating("product_advisor", "暂时无法确认库存。", MAIN_CALLS),
        toolkit=Toolkit([query_stock]),
        subagents=[advisor],
    )
    result = await sup.run("SKU2024-011 有货吗？", context=ACME)
    assert result.output == "暂时无法确认库存。"
    # the supervisor's two calls and its delegation; the advisor's answered call and lookup
    answered = Usage(input_tokens=330, output_tokens=33, model_calls=3, tool_calls=2)
    if failure == "error":  # failed before any text: charged nothing, counted nowhere
        assert result.usage == answered
    else:  # cut off: its request, as estimated (its prompt, tools, question and lookup)
        cut = result.usage.input_tokens - answered.input_tokens
        assert 50 < cut < 2000, cut
        assert result.usage == replace(answered, input_tokens=330 + cut, model_calls=4)
