"""When the answer check replaces an answer that is not about what the run's tools returned
(the model quoted the product's description to "how many are left?" while the stock system
said 12), what those tools returned is listed under the passages' sentences, or under "the
documents do not cover this": the user reads the count the question was for. Seen with
Qwen2.5-Coder-0.5B: ``shelfhand ask "Lumen X1（SKU2024-011）库存还剩多少台？" --demo-tools``
answered with the spec table and the stock count never reached the user."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shelfhand import Agent, KnowledgeBase, Toolkit, UserContext, retrieve_tool, tool
from shelfhand.agent.answer_check import (
    TOOLS_FAILED_LEAD,
    TOOLS_RETURNED_LEAD,
    TOOLS_RETURNED_LEAD_ZH,
)
from shelfhand.agent.answer_topic import quotes_beyond_names
from shelfhand.agent.fallbacks import NOT_COVERED
from shelfhand.core.messages import Citation, Message
from shelfhand.testing import FunctionModel, text, tool_call
from support.answers import CHECK, answers_at_once, call_then_answer
from support.answers import tool_agent as agent
from support.knowledge import sample_kb

pytestmark = pytest.mark.anyio

ALICE = UserContext(tenant_id="acme", user_id="alice", roles=["user"])
BOB = UserContext(tenant_id="globex", user_id="bob", roles=["user"])
# what Qwen2.5-Coder-0.5B answered (the sample corpus's description of the product)
DESCRIPTION = (
    "The Lumen X1 is our best-selling home projector: 3,000 ANSI lumens, Full HD, a 1.2x "
    "optical zoom and two HDMI 2.0 inputs."
)
STOCK_ZH = "Lumen X1（SKU2024-011）库存还剩多少台？"
STOCK_EN = "How many Lumen X1 units are left?"


@tool(read_only=True)
def query_stock(ctx: UserContext, sku: str) -> dict[str, object]:
    """How many units of a product the caller's warehouse holds."""
    units = 12 if ctx.tenant_id == "acme" else 3
    return {"sku": sku, "name": "Lumen X1", "stock": units}


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    with sample_kb(tmp_path) as base:
        yield base


@pytest.mark.parametrize(
    ("question", "answer", "lead"),
    [
        (STOCK_ZH, DESCRIPTION, TOOLS_RETURNED_LEAD_ZH),
        (STOCK_ZH, "Lumen X1 的整机保修期为自购买之日起 24 个月。", None),
        (STOCK_EN, DESCRIPTION, TOOLS_RETURNED_LEAD),
    ],
    ids=["zh", "zh-in-chinese", "en"],
)
async def test_a_quote_about_the_product_gives_way_to_the_passages_and_what_the_tool_returned(
    kb: KnowledgeBase, question: str, answer: str, lead: str | None
) -> None:
    call = tool_call("query_stock", {"sku": "SKU2024-011"})
    result = await agent(kb, query_stock, call, text(answer)).run(question, context=ALICE)

    # (the warranty sentence is not among a stock question's passages: ungrounded too)
    assert result.fallback_reason in ("off_topic", "ungrounded"), result.output
    assert result.extractive
    passages, returned = result.output.split("\n\n")
    assert passages.startswith(("摘自文档：", "From the documents:"))
    assert returned == "\n".join(
        [
            lead or TOOLS_RETURNED_LEAD_ZH,
            "- query_stock: sku: SKU2024-011, name: Lumen X1, stock: 12",
        ]
    )
    assert result.messages[-1].text == result.output  # the memory holds what the user read

    # no tool called: nothing listed under whatever the checks make of the same quote
    quiet = await agent(kb, query_stock, text(answer)).run(question, context=ALICE)
    assert (lead or TOOLS_RETURNED_LEAD_ZH) not in quiet.output


@pytest.mark.parametrize(
    "answer",
    [
        "Yes, the Lumen X1 is currently available.",  # the tool's in_stock, in other words
        "There are 12 Lumen X1 units left.",  # the tool's count
        "Lumen X1 还剩 12 台。",
    ],
)
async def test_an_answer_from_the_tool_stands(kb: KnowledgeBase, answer: str) -> None:
    call = tool_call("query_stock", {"sku": "SKU2024-011"})
    result = await agent(kb, query_stock, call, text(answer)).run(STOCK_EN, context=ALICE)
    assert result.output == answer and not result.fallback_reason


async def test_the_documents_do_not_cover_it_and_the_tool_returned_are_both_told(
    kb: KnowledgeBase,
) -> None:
    """No passage is about the question; the model's answer states a number neither the
    passages nor the tool hold: "not covered", and what the tool did return."""

    @tool(read_only=True)
    def parcel_locker(ctx: UserContext, code: str) -> dict[str, object]:
        """Where a parcel locker stands."""
        return {"code": code, "site": "Hall B, level 2"}

    call = tool_call("parcel_locker", {"code": "PL-77"})
    question = "Which floor is the parcel locker PL-77 on?"
    result = await agent(kb, parcel_locker, call, text("It is on floor 9 [1].")).run(
        question, context=ALICE
    )
    assert result.fallback_reason and not result.extractive, result.output
    assert result.output == (
        f"{NOT_COVERED}\n\n{TOOLS_RETURNED_LEAD}\n- parcel_locker: code: PL-77, site: Hall B, level 2"
    )


async def test_a_tool_that_returned_and_one_that_failed_are_both_listed(
    kb: KnowledgeBase,
) -> None:
    @tool(read_only=True, retries=0)
    def query_price(ctx: UserContext, sku: str) -> dict[str, int]:
        """Today's price of a product."""
        raise ConnectionError("the price system refused the connection")

    def model(messages: list[Message], tools: Any) -> object:
        called = {r.name for m in messages for r in m.tool_results}
        if "query_stock" not in called:
            return tool_call("query_stock", {"sku": "SKU2024-011"})
        if "query_price" not in called:
            return tool_call("query_price", {"sku": "SKU2024-011"})
        return text(DESCRIPTION)

    both = Agent(
        model=FunctionModel(model),
        toolkit=Toolkit([retrieve_tool(kb), query_stock, query_price]),
        retrieval="both",
        answer_check=CHECK,
    )
    result = await both.run(STOCK_EN, context=ALICE)
    passages, returned, failed = result.output.split("\n\n")
    assert passages.startswith("From the documents:")
    assert returned.endswith("- query_stock: sku: SKU2024-011, name: Lumen X1, stock: 12")
    assert failed == f"{TOOLS_FAILED_LEAD}\n- query_price: failed: ConnectionError"


async def test_two_callers_at_once_each_read_their_own_tool_result(kb: KnowledgeBase) -> None:
    """One agent, two tenants at once, the same off-topic quote: each reads its own count."""

    model = call_then_answer("query_stock", {"sku": "SKU2024-011"}, DESCRIPTION)
    outcomes = await answers_at_once(agent(kb, query_stock, model=model), STOCK_EN, ALICE, BOB)

    assert outcomes["acme"].endswith("stock: 12") and "stock: 3" not in outcomes["acme"]
    assert outcomes["globex"].endswith("stock: 3") and "stock: 12" not in outcomes["globex"]


def test_quotes_beyond_names() -> None:
    passage = Citation(
        index=1,
        source="projector/product-specs.docx",
        text=DESCRIPTION + " Its UHP lamp lasts about 4,000 hours in eco mode.",
    )
    assert quotes_beyond_names(DESCRIPTION, [passage])
    assert not quotes_beyond_names("Yes, the Lumen X1 is currently available.", [passage])
    assert not quotes_beyond_names("Lumen X1 还剩 12 台。", [passage])
    assert not quotes_beyond_names("SKU2024-011", [passage])  # a name only: it says nothing
    assert not quotes_beyond_names(DESCRIPTION, [])


async def test_a_tool_result_about_something_else_is_not_listed(kb: KnowledgeBase) -> None:
    """Qwen2.5-Coder-0.5B looks the stock up for questions on returns too: the passages'
    sentences replace its answer, and the stock of a product the question does not name is
    not listed under them."""
    call = tool_call("query_stock", {"sku": "SKU2024-011"})
    question = "拆封后还能退货吗？"
    result = await agent(kb, query_stock, call, text("可以，90 天内都能退货。")).run(
        question, context=ALICE
    )
    assert result.extractive and "7 天" in result.output, result.output
    assert TOOLS_RETURNED_LEAD_ZH not in result.output
    assert "query_stock" not in result.output


async def test_an_answer_in_another_language_stands_beside_a_tool_result_about_something_else(
    kb: KnowledgeBase,
) -> None:
    """The same model answered "风扇不转，显示 E-105 怎么办？" in English from the manual, after
    looking E-105 up as a SKU (``found: false``, which names E-105 too): an answer in the
    other language shares no word with the question whatever it says, so sharing only its
    names tells nothing; the answer stands."""
    answer = (
        "The fan does not turn or spins too slowly. The projector shuts down after 60 seconds "
        "to protect the optical engine."
    )

    @tool(read_only=True)
    def lookup_sku(ctx: UserContext, sku: str) -> dict[str, object]:
        """How many units of a product the caller's warehouse holds."""
        return {"sku": sku, "found": False}

    call = tool_call("lookup_sku", {"sku": "E-105"})
    result = await agent(kb, lookup_sku, call, text(answer)).run(
        "风扇不转，显示 E-105 怎么办？", context=ALICE
    )
    assert result.output == answer and not result.fallback_reason
