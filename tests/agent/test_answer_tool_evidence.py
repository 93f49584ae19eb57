"""An answer may state what the run's own tools returned (an order's status from the
caller's order system), not only what the passages say: the answer check counts those
results as evidence, so such an answer stands, while a fact neither holds is still caught."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shelfhand import Agent, KnowledgeBase, Toolkit, UserContext, retrieve_tool, tool
from shelfhand.agent.answer_check import (
    TOOLS_LEAD,
    TOOLS_LEAD_ZH,
    AnswerCheck,
    tool_evidence,
)
from shelfhand.agent.grounding_check import check_grounding
from shelfhand.agent.model_check import ModelJudge
from shelfhand.core.messages import Citation, Message, ToolResultBlock
from shelfhand.testing import FunctionModel, ScriptedModel, text, tool_call
from shelfhand.tools.tool import Tool
from support.answers import CHECK
from support.knowledge import sample_kb

pytestmark = pytest.mark.anyio

ALICE = UserContext(tenant_id="acme", user_id="alice", roles=["user"])
ORDER = '{"order": "SO-1001", "status": "shipped", "carrier": "SF Express", "eta": "2025-03-09"}'
LAMP = Citation(index=1, source="specs.md", text="The Lumen X1 has a 3,000 ANSI lumen lamp.")


@tool(read_only=True)
def order_status(ctx: UserContext, order_id: str) -> dict[str, str]:
    """Look up one of the caller's orders."""
    return {"order": order_id, "owner": ctx.user_id, "status": "shipped", "eta": "2025-03-09"}


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    with sample_kb(tmp_path) as base:
        yield base


def agent(kb: KnowledgeBase, answer: str, *also: Tool[..., Any], **options: object) -> Agent:
    """Up-front retrieval (the default ``both``), then ``order_status`` (and ``also``, called
    with ``SKU2024-011`` in the same reply), then ``answer``."""
    calls = [tool_call("order_status", {"order_id": "SO-1001"})]
    calls += [tool_call(t.name, {"sku": "SKU2024-011"}) for t in also]
    return Agent(
        model=ScriptedModel([calls if also else calls[0], text(answer)]),
        toolkit=Toolkit([retrieve_tool(kb), order_status, *also]),
        retrieval="both",
        answer_check=options.pop("check", CHECK),  # type: ignore[arg-type]
        **options,  # type: ignore[arg-type]
    )


def test_a_sentence_no_passage_holds_rests_on_the_tool_result_that_does() -> None:
    grounding = check_grounding(
        "Your order SO-1001 ships with SF Express and arrives on 2025-03-09.",
        [LAMP],
        tools=[("order_status", ORDER)],
    )
    (sentence,) = grounding.sentences
    assert sentence.supported and sentence.tool == "order_status" and sentence.passage is None
    assert grounding.to_dict()["sentences"][0]["tool"] == "order_status"


def test_a_fact_neither_the_passages_nor_the_tools_hold_is_still_missing() -> None:
    grounding = check_grounding(
        "Your order SO-1001 arrives on 2025-03-12.", [LAMP], tools=[("order_status", ORDER)]
    )
    (sentence,) = grounding.sentences
    # about the order (its result holds most of its words), not supported by it
    assert not sentence.supported and sentence.tool == "order_status"
    assert sentence.missing == ("12", "--03-12")  # the number, and the day as a date


def test_a_date_is_held_whole_not_by_its_numbers_found_apart() -> None:
    """The order's date is the 9th; its quantity is 12: "the 12th of March" is held by
    neither, though 2025, 3 and 12 are all in the result."""
    result = '{"order": "SO-1001", "eta": "2025-03-09", "qty": 12}'
    told = [("order_status", result)]
    wrong = [
        "SO-1001 arrives on 2025-03-12.",
        "SO-1001 arrives on March 12.",
        "SO-1001 预计 3 月 12 日送达。",
    ]
    right = [
        "SO-1001 arrives on 2025-03-09.",
        "SO-1001 (12 units) arrives on the 9th of March.",
        "SO-1001 预计 2025 年 3 月 9 日送达。",
    ]
    for answer in wrong:
        (sentence,) = check_grounding(answer, [LAMP], tools=told).sentences
        assert not sentence.supported and sentence.missing == ("--03-12",), answer
    for answer in right:
        (sentence,) = check_grounding(answer, [LAMP], tools=told).sentences
        assert sentence.supported and sentence.tool == "order_status", answer


def test_a_sentence_a_passage_holds_better_stays_with_the_passage() -> None:
    grounding = check_grounding(
        "The Lumen X1 has a 3,000 ANSI lumen lamp [1].", [LAMP], tools=[("order_status", ORDER)]
    )
    assert [(s.passage, s.tool) for s in grounding.sentences] == [(1, None)]


def test_a_tool_result_about_the_product_does_not_excuse_another_rows_price() -> None:
    table = Citation(
        index=1,
        source="specs.md",
        text="SKU | Model | Price (CNY)\nSKU2024-011 | Lumen X1 | 3,999\n"
        "SKU2024-012 | Lumen X1 Pro | 5,999",
    )
    stock = '{"sku": "SKU2024-012", "name": "Lumen X1 Pro", "stock": 3}'
    grounding = check_grounding(
        "The Lumen X1 Pro costs 3,999 CNY.", [table], tools=[("query_stock", stock)]
    )
    (sentence,) = grounding.sentences
    assert not sentence.supported and sentence.misplaced == ("3999",) and sentence.tool is None


def test_a_chinese_answer_rests_on_a_tool_result_in_english() -> None:
    grounding = check_grounding("您的订单 SO-1001 已发货。", [], tools=[("order_status", ORDER)])
    assert grounding.grounded and grounding.sentences[0].tool == "order_status"


def test_only_results_of_other_tools_that_ran_are_evidence() -> None:
    messages = [
        Message.tool(
            [
                ToolResultBlock(call_id="1", name="retrieve", content="[1] passages"),
                ToolResultBlock(call_id="2", name="order_status", content=ORDER),
                ToolResultBlock(call_id="3", name="refund", content="failed", is_error=True),
            ]
        )
    ]
    assert tool_evidence(messages) == [("order_status", ORDER)]


async def test_an_answer_from_the_order_tool_stands_when_the_documents_have_nothing(
    kb: KnowledgeBase,
) -> None:
    answer = "Your order SO-1001 has shipped and arrives on 2025-03-09."
    result = await agent(kb, answer).run("Where is my order SO-1001?", context=ALICE)

    assert result.output == answer and result.fallback_reason == ""
    assert result.grounding is not None and result.grounding.grounded
    assert [s.tool for s in result.grounding.sentences] == ["order_status"]


async def test_an_answer_from_the_order_tool_stands_beside_passages_about_the_product(
    kb: KnowledgeBase,
) -> None:
    answer = "您的 Lumen X1 订单 SO-1001 已发货，预计 2025-03-09 送达。"
    result = await agent(kb, answer).run(
        "我买的 Lumen X1 投影仪，订单 SO-1001 到哪了？", context=ALICE
    )

    assert result.citations  # the product's passages were found up front
    assert result.output == answer and result.fallback_reason == ""


@pytest.mark.parametrize(
    ("question", "lead"),
    [("Where is my order SO-1001?", TOOLS_LEAD), ("我的订单 SO-1001 到哪了？", TOOLS_LEAD_ZH)],
)
async def test_a_date_the_order_tool_did_not_return_is_replaced_by_what_it_returned(
    kb: KnowledgeBase, question: str, lead: str
) -> None:
    # (17 is in no passage of the samples, and the 17th of March in no result)
    result = await agent(kb, "Your order SO-1001 arrives on 2025-03-17.").run(
        question, context=ALICE
    )

    assert result.fallback_reason == "ungrounded" and "2025-03-17" not in result.output
    assert result.output.splitlines() == [
        lead,
        "- order_status: order: SO-1001, owner: alice, status: shipped, eta: 2025-03-09",
    ]
    assert result.messages[-1].text == result.output  # what the next turn remembers


async def test_a_courtesy_sentence_no_tool_returns_is_flagged_not_replaced(
    kb: KnowledgeBase,
) -> None:
    answer = "Your order SO-1001 has shipped. Please contact our support team for anything else."
    result = await agent(kb, answer).run("Where is my order SO-1001?", context=ALICE)

    assert result.output == answer and result.fallback_reason == ""
    assert result.grounding is not None
    assert [(s.supported, s.tool) for s in result.grounding.sentences] == [
        (True, "order_status"),
        (False, None),
    ]


async def test_a_judge_that_sees_only_passages_leaves_the_tool_sentences_supported(
    kb: KnowledgeBase,
) -> None:
    judge = ModelJudge(model=FunctionModel(lambda messages, tools: "1: no\n2: no"))
    check = AnswerCheck(scaffolds=CHECK.scaffolds, judge=judge)
    answer = "Your order SO-1001 has shipped and arrives on 2025-03-09."
    result = await agent(kb, answer, check=check).run(
        "Where is my order SO-1001 for the Lumen X1?", context=ALICE
    )

    assert result.output == answer and result.fallback_reason == ""
    assert result.grounding is not None and result.grounding.method == "model"


@tool(read_only=True)
def stock(sku: str) -> dict[str, object]:
    """Units of a product in stock."""
    return {"sku": sku, "name": "Lumen X1", "stock": 12}


async def test_an_answer_about_another_tool_than_the_one_naming_the_order_is_off_topic(
    kb: KnowledgeBase,
) -> None:
    desk = agent(kb, "The Lumen X1 is in stock: 12 units.", stock)
    result = await desk.run("Where is my order SO-1001?", context=ALICE)

    assert result.fallback_reason == "off_topic"
    lines = result.output.splitlines()
    # each result as a person reads it, not as JSON
    assert lines == [
        TOOLS_LEAD,
        "- order_status: order: SO-1001, owner: alice, status: shipped, eta: 2025-03-09",
        "- stock: sku: SKU2024-011, name: Lumen X1, stock: 12",
    ]


@tool(read_only=True)
def query_stock(ctx: UserContext, sku: str) -> dict[str, object]:
    """Live stock of a product."""
    return {"sku": sku, "name": "Lumen X1 Pro", "stock": 0}


@pytest.mark.parametrize(
    ("answer", "stands"),
    [
        ("The Lumen X1 Pro does not have stock at the moment.", True),
        ("The documents do not mention the stock of the Lumen X1 Pro.", False),
        ("The Lumen X1 Pro is not available in the knowledge base.", False),
    ],
)
async def test_a_no_the_stock_tool_says_is_an_answer_not_a_refusal(
    kb: KnowledgeBase, answer: str, stands: bool
) -> None:
    """ "does not have" reads as a refusal ("the passages do not have it"); said of the
    product, over the stock tool's ``stock: 0``, it is the answer."""
    model = ScriptedModel([tool_call("query_stock", {"sku": "SKU2024-012"}), text(answer)])
    result = await Agent(
        model=model,
        toolkit=Toolkit([retrieve_tool(kb), query_stock]),
        retrieval="both",
        answer_check=CHECK,
    ).run("SKU2024-012 还有货吗？", context=ALICE)

    if stands:
        assert result.output == answer and not result.fallback_reason
    else:
        assert result.output != answer and result.fallback_reason == "refusal"
