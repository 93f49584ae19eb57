"""The cost of a turn from the configured prices: per model and million tokens, input and
output; summed over every model call (subagents' on other models included); a model without
a price has no cost, never a guessed one."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from shelfhand import Agent, Toolkit, UserContext, tool
from shelfhand.agent.subagents import Subagent
from shelfhand.agent.supervisor import Supervisor
from shelfhand.core.errors import ConfigurationError
from shelfhand.core.messages import Message, ToolCallBlock
from shelfhand.core.pricing import ModelPrice, PriceTable, parse_prices
from shelfhand.core.results import Usage
from shelfhand.core.settings import Settings
from shelfhand.models.base import ModelResponse
from shelfhand.testing import FunctionModel
from shelfhand.usage.ledger import SqliteUsageLedger, SqlUsageLedger
from support.pg import pg_pool

pytestmark = pytest.mark.anyio

ACME = UserContext(tenant_id="acme", user_id="alice")
PRICES = parse_prices(
    {"main-model": {"input": 2.0, "output": 8.0}, "small": {"input": 0.5, "output": 1.0}}
)


@tool(read_only=True)
def query_stock(sku: str) -> str:
    """Stock of a product.

    Args:
        sku: The product code.
    """
    return f"{sku}: 12"


def model(name: str, calls: list[tuple[Message, int, int]]) -> FunctionModel:
    """A model named ``name`` answering ``calls`` in turn (message, tokens in, tokens out)."""
    queue = list(calls)

    def turn(messages: Sequence[Message], tools: Sequence[Any]) -> ModelResponse:
        message, tokens_in, tokens_out = queue.pop(0)
        return ModelResponse(
            message=message, usage=Usage(input_tokens=tokens_in, output_tokens=tokens_out)
        )

    return FunctionModel(turn, name=name)


def call(name: str, arguments: str) -> Message:
    block = ToolCallBlock(id=f"c-{name}", name=name, arguments=arguments)
    return Message.assistant(tool_calls=[block])


async def test_a_runs_cost_is_its_calls_tokens_at_its_models_price() -> None:
    agent = Agent(
        model=model(
            "main-model",
            [(call("query_stock", '{"sku": "A"}'), 1000, 100), (Message.assistant("12"), 3000, 50)],
        ),
        toolkit=Toolkit([query_stock]),
        prices=PRICES,
    )
    result = await agent.run("库存？", context=ACME)
    # 4000 tokens in at 2 per million, 150 out at 8 per million
    assert result.usage.cost == pytest.approx((4000 * 2.0 + 150 * 8.0) / 1_000_000)
    assert result.usage.to_dict()["cost"] == pytest.approx(0.0092)


async def test_a_model_without_a_price_has_no_cost() -> None:
    for prices in (None, PRICES):
        agent = Agent(model=model("unpriced", [(Message.assistant("hi"), 10, 2)]), prices=prices)
        result = await agent.run("hi", context=ACME)
        assert result.usage.cost is None
        assert "cost" not in result.usage.to_dict()


def supervisor_with_advisor_on(advisor_model: str) -> Supervisor:
    """A supervisor on ``main-model`` that delegates once to an advisor on ``advisor_model``
    (the main model: 1000+10 and 1500+5 tokens; the advisor: 2000+200)."""
    advisor = Subagent(
        "advisor",
        "Answers stock questions.",
        model=model(advisor_model, [(Message.assistant("12 台"), 2000, 200)]),
        tools=[],
    )
    main = model(
        "main-model",
        [(call("advisor", '{"task": "A 有货吗"}'), 1000, 10), (Message.assistant("有"), 1500, 5)],
    )
    return Supervisor(
        model=main, toolkit=Toolkit([query_stock]), subagents=[advisor], prices=PRICES
    )


async def test_a_supervisor_adds_its_subagents_cost_at_their_own_models_price() -> None:
    result = await supervisor_with_advisor_on("small").run("A 有货吗？", context=ACME)
    main = (2500 * 2.0 + 15 * 8.0) / 1_000_000
    small = (2000 * 0.5 + 200 * 1.0) / 1_000_000
    assert result.usage.model_calls == 3
    assert result.usage.cost == pytest.approx(main + small)


async def test_one_unpriced_subagent_makes_the_turns_cost_unknown() -> None:
    result = await supervisor_with_advisor_on("other").run("A 有货吗？", context=ACME)
    assert result.usage.model_calls == 3 and result.usage.cost is None


def test_usage_sums_cost_only_when_every_model_call_is_priced() -> None:
    priced = Usage(input_tokens=1, model_calls=1, cost=0.5)
    unknown = Usage(input_tokens=1, model_calls=1)
    nothing = Usage(tool_calls=1)  # no model call: costs nothing
    assert (priced + priced).cost == 1.0
    assert (priced + nothing).cost == 0.5
    assert (priced + unknown).cost is None
    assert (nothing + nothing).cost is None


def test_prices_are_read_from_shelfhand_toml_and_the_environment(tmp_path: Path) -> None:
    (tmp_path / "shelfhand.toml").write_text(
        '[shelfhand.prices."qwen-plus"]\ninput = 0.8\noutput = 2\n', encoding="utf-8"
    )
    settings = Settings.load(tmp_path, env={})
    assert settings.prices == PriceTable({"qwen-plus": ModelPrice(input=0.8, output=2.0)})
    from_env = Settings.load(
        tmp_path, env={"SHELFHAND_PRICES": '{"通义": {"input": 1, "output": 3}}'}
    )
    assert from_env.prices["通义"] == ModelPrice(input=1.0, output=3.0)
    assert Settings.load(tmp_path / "none", env={}).prices == PriceTable()


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ('{"m": {"input": -1, "output": 2}}', "m.input is below 0"),
        ('{"m": {"input": 1}}', "m has missing output"),
        ('{"m": {"input": 1, "output": 2, "cached": 1}}', "m has unknown cached"),
        ('{"m": {"input": "cheap", "output": 2}}', "m.input is not a number"),
        ("input=1", "not JSON"),
    ],
)
def test_a_bad_price_fails_at_start_up_saying_which(tmp_path: Path, value: str, why: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Settings.load(tmp_path, env={"SHELFHAND_PRICES": value})
    assert why in str(caught.value) and "SHELFHAND_PRICES" in str(caught.value)


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlUsageLedger]:
    if request.param == "sqlite":
        found: SqlUsageLedger = SqliteUsageLedger(tmp_path / "usage.db")
        yield found
        found.close()
        return
    from shelfhand.usage.pg import PgUsageLedger

    with pg_pool(request) as (pool, url):
        yield PgUsageLedger(pool, url=url)


def test_the_ledger_sums_known_costs_and_keeps_unknown_ones_unknown(
    ledger: SqlUsageLedger,
) -> None:
    ledger.add(ACME, "s1", "main-model", Usage(model_calls=1, cost=0.25))
    ledger.add(ACME, "s2", "main-model", Usage(model_calls=1, cost=0.5))
    ledger.add(ACME, "s1", "unpriced", Usage(model_calls=2))
    ledger.add(ACME, "s1", "unpriced", Usage(model_calls=1))
    rows = {r.model: r for r in ledger.report(ACME)}
    assert rows["main-model"].cost == pytest.approx(0.75) and rows["main-model"].turns == 2
    assert rows["unpriced"].cost is None and rows["unpriced"].model_calls == 3
    assert rows["unpriced"].to_dict()["cost"] is None
