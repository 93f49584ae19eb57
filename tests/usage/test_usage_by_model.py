"""The ledger books a turn's usage by model: a subagent with a model of its own gets its
calls, tokens and cost on that model's row, the turn's own model the rest (and the turn),
also when two tenants' turns run at once."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from shelfhand import Toolkit, UserContext, tool
from shelfhand.agent.subagents import Subagent
from shelfhand.agent.supervisor import Supervisor
from shelfhand.core.messages import Message, ToolCallBlock
from shelfhand.core.pricing import ModelPrice
from shelfhand.core.results import Usage
from shelfhand.core.step_counts import count_steps, stop_counting
from shelfhand.models.base import ModelResponse
from shelfhand.testing import FunctionModel
from shelfhand.usage.by_model import ModelTally
from shelfhand.usage.ledger import SqliteUsageLedger

pytestmark = pytest.mark.anyio

ACME = UserContext(tenant_id="acme", user_id="alice")
GLOBEX = UserContext(tenant_id="globex", user_id="bob")
PRICES = {
    "qwen-max": ModelPrice(input=2.0, output=8.0),
    "qwen-turbo": ModelPrice(input=0.3, output=0.6),
}


@tool(read_only=True)
def query_stock(sku: str) -> str:
    """Stock of a product.

    Args:
        sku: The product code, e.g. SKU2024-011.
    """
    return f"{sku}: 12 in stock"


def delegating(name: str, to: str, answer: str, tokens: tuple[int, int, int, int]) -> Any:
    """A model called ``name`` that calls ``to`` first, then answers ``answer``."""

    def turn(messages: Sequence[Message], tools: Sequence[Any]) -> ModelResponse:
        if messages[-1].role != "tool":
            block = ToolCallBlock(id=f"c-{to}", name=to, arguments='{"task": "SKU2024-011？"}')
            message, (i, o) = Message.assistant(tool_calls=[block]), tokens[:2]
        else:
            message, (i, o) = Message.assistant(answer), tokens[2:]
        return ModelResponse(message=message, usage=Usage(input_tokens=i, output_tokens=o))

    return FunctionModel(turn, name=name)


def supervisor() -> Supervisor:
    advisor = Subagent(
        "product_advisor",
        "Answers questions about stock.",
        model=delegating("qwen-turbo", "query_stock", "12 台有货。", (30, 3, 40, 4)),
        tools=["query_stock"],
    )
    return Supervisor(
        model=delegating("qwen-max", "product_advisor", "有货，12 台。", (100, 10, 200, 20)),
        toolkit=Toolkit([query_stock]),
        subagents=[advisor],
        prices=PRICES,
    )


async def book_turn(sup: Supervisor, ledger: SqliteUsageLedger, user: UserContext) -> None:
    """One turn as the service runs it: its calls tallied by model, then booked."""
    tally = ModelTally(prices=PRICES)
    counting, token = count_steps(tally)
    try:
        result = await sup.run("SKU2024-011 有货吗？", context=user)
    finally:
        stop_counting(token)
    assert counting.open_calls == []
    ledger.add(user, "s1", "qwen-max", result.usage, others=tally.others("qwen-max"))


async def test_a_subagents_own_model_gets_its_own_row_and_the_turn_stays_whole(
    tmp_path: Path,
) -> None:
    ledger = SqliteUsageLedger(tmp_path / "usage.db")
    sup = supervisor()
    async with anyio.create_task_group() as tg:  # two tenants' turns at once
        tg.start_soon(book_turn, sup, ledger, ACME)
        tg.start_soon(book_turn, sup, ledger, GLOBEX)
    for user in (ACME, GLOBEX):
        rows = {r.model: r for r in ledger.report(user)}
        assert set(rows) == {"qwen-max", "qwen-turbo"}
        own, sub = rows["qwen-max"], rows["qwen-turbo"]
        assert (own.turns, own.model_calls, own.input_tokens, own.output_tokens) == (1, 2, 300, 30)
        assert (sub.turns, sub.model_calls, sub.input_tokens, sub.output_tokens) == (0, 2, 70, 7)
        assert own.tool_calls + sub.tool_calls == 2  # the delegation and the stock query
        assert sub.cost == pytest.approx((70 * 0.3 + 7 * 0.6) / 1e6)
        assert own.cost == pytest.approx((300 * 2.0 + 30 * 8.0) / 1e6)
    ledger.close()


def test_a_turn_of_one_model_is_one_row_as_before(tmp_path: Path) -> None:
    ledger = SqliteUsageLedger(tmp_path / "usage.db")
    usage = Usage(input_tokens=5, output_tokens=2, model_calls=1, cost=0.5)
    ledger.add(ACME, "s1", "qwen-max", usage, others={})
    (row,) = ledger.report(ACME)
    assert (row.model, row.turns, row.input_tokens, row.cost) == ("qwen-max", 1, 5, 0.5)
    ledger.close()


def test_calls_that_did_not_answer_count_as_their_budget_charged_them() -> None:
    """A call whose caller left, one past its deadline and a stream broken after text count
    at their estimates (what the budget charged); one that failed before any text, not at
    all. Before, only the first counted, so the ledger booked less than the budget charged."""
    tally = ModelTally()
    tally.count_model_call("qwen-max", "ok", 300, 30)
    tally.count_model_call("qwen-max", "cut", 120, 4)
    tally.count_model_call("qwen-max", "timeout", 110, 0)
    tally.count_model_call("qwen-max", "error", 100, 9)  # broken after 9 tokens of text
    tally.count_model_call("qwen-max", "error", 0, 0)  # refused, or a server out of reach
    assert tally.total() == Usage(input_tokens=630, output_tokens=43, model_calls=4)
