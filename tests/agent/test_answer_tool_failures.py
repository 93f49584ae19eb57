"""When the tool that could answer failed (the order system timed out, refused, its circuit
is open), the answer check does not tell the user "the documents do not cover this": the
answer that replaces the model's says which tools did not answer, in the question's language.
Real governance (timeouts, retries, breakers) under a scripted model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from shelfhand import KnowledgeBase, UserContext, tool
from shelfhand.agent.answer_check import (
    TOOLS_FAILED_LEAD,
    TOOLS_FAILED_LEAD_ZH,
)
from shelfhand.agent.fallbacks import NOT_COVERED, readable, tool_failure_lines
from shelfhand.core.errors import ToolError
from shelfhand.core.messages import Message, ToolResultBlock
from shelfhand.core.secrets import REDACTED
from shelfhand.testing import text, tool_call
from shelfhand.tools.tool import ToolOutput
from support.answers import answers_at_once, call_then_answer
from support.answers import tool_agent as agent
from support.knowledge import sample_kb

pytestmark = pytest.mark.anyio

ALICE = UserContext(tenant_id="acme", user_id="alice", roles=["user"])
BOB = UserContext(tenant_id="globex", user_id="bob", roles=["user"])
WHERE = "Where is my order SO-1001?"
MADE_UP = "Your order SO-1001 has shipped and arrives on 2025-03-09."


@tool(read_only=True, timeout=0.2)
async def order_status(ctx: UserContext, order_id: str) -> dict[str, str]:
    """Look up one of the caller's orders (its system hangs)."""
    await anyio.sleep(5)
    return {}


@tool(read_only=True)
def order_refused(ctx: UserContext, order_id: str) -> dict[str, str]:
    """Look up one of the caller's orders (its system refuses connections)."""
    raise ConnectionError("the order system refused the connection")


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    with sample_kb(tmp_path) as base:
        yield base


def told(failures: str, lead: str = TOOLS_FAILED_LEAD) -> str:
    return f"{lead}\n{failures}"


async def test_a_made_up_answer_after_a_timeout_becomes_the_failure_not_not_covered(
    kb: KnowledgeBase,
) -> None:
    call = tool_call("order_status", {"order_id": "SO-1001"})
    result = await agent(kb, order_status, call, text(MADE_UP)).run(WHERE, context=ALICE)

    assert result.output == told("- order_status: failed: timed out after 0.2 s")
    assert result.fallback_reason in ("ungrounded", "off_topic") and not result.extractive
    assert result.messages[-1].text == result.output  # the conversation remembers what was read


async def test_an_apology_in_words_is_replaced_by_which_tool_failed_and_how(
    kb: KnowledgeBase,
) -> None:
    call = tool_call("order_refused", {"order_id": "SO-1001"})
    answer = text("I could not reach the order system right now. Please try again later.")
    result = await agent(kb, order_refused, call, answer).run(WHERE, context=ALICE)

    # retried (a ConnectionError is transient), then given up: what the user reads says so,
    # by the exception's class (its message may hold an internal address)
    assert result.output == told("- order_refused: failed after 3 attempts: ConnectionError")


async def test_a_tool_error_is_told_by_its_message_written_for_the_reader(
    kb: KnowledgeBase,
) -> None:
    @tool(read_only=True)
    def order_lookup(ctx: UserContext, order_id: str) -> dict[str, str]:
        """Look up one of the caller's orders."""
        raise ToolError(f"no order {order_id} for this customer")

    call = tool_call("order_lookup", {"order_id": "SO-9"})
    result = await agent(kb, order_lookup, call, text(MADE_UP)).run(WHERE, context=ALICE)
    assert result.output == told("- order_lookup: failed: no order SO-9 for this customer")


async def test_in_chinese_the_lead_is_chinese(kb: KnowledgeBase) -> None:
    call = tool_call("order_status", {"order_id": "SO-1001"})
    answer = text("您的订单 SO-1001 已发货，预计 2025-03-09 送达。")
    result = await agent(kb, order_status, call, answer).run(
        "我的订单 SO-1001 到哪了？", context=ALICE
    )
    assert result.output == told(
        "- order_status: failed: timed out after 0.2 s", TOOLS_FAILED_LEAD_ZH
    )


async def test_a_model_repeating_the_failing_call_until_stopped_gets_the_failure(
    kb: KnowledgeBase,
) -> None:
    call = tool_call("order_refused", {"order_id": "SO-1001"})
    result = await agent(kb, order_refused, *[call] * 8).run(WHERE, context=ALICE)

    assert result.stop_reason == "repeated_call" and result.fallback_reason == "repeated_call"
    assert result.output.startswith(TOOLS_FAILED_LEAD + "\n- order_refused: ")
    assert NOT_COVERED not in result.output and len(result.output.splitlines()) == 2


async def test_without_a_search_a_fact_stated_after_a_failed_call_is_checked_too(
    kb: KnowledgeBase,
) -> None:
    """``retrieval="tool"`` and no ``retrieve`` call: no passage, yet the answer states a date
    the failed call never gave."""
    call = tool_call("order_status", {"order_id": "SO-1001"})
    made_up = await agent(kb, order_status, call, text(MADE_UP), retrieval="tool").run(
        WHERE, context=ALICE
    )
    assert made_up.output == told("- order_status: failed: timed out after 0.2 s")

    # an answer in words that states nothing is the model's to give: it stands
    honest = "Sorry, I could not look that order up just now."
    kept = await agent(kb, order_status, call, text(honest), retrieval="tool").run(
        WHERE, context=ALICE
    )
    assert kept.output == honest and not kept.fallback_reason


@pytest.mark.parametrize("retrieval", ["both", "tool"])
@pytest.mark.parametrize(
    ("question", "refusal", "lead"),
    [
        (WHERE, "Your order's status is not in the knowledge base.", TOOLS_FAILED_LEAD),
        (WHERE, "I cannot find any information about your order.", TOOLS_FAILED_LEAD),
        ("我的订单 SO-1001 到哪了？", "抱歉，我无法协助查询这个订单。", TOOLS_FAILED_LEAD_ZH),
    ],
)
async def test_a_refusal_after_a_failed_call_becomes_which_tool_did_not_answer(
    kb: KnowledgeBase, retrieval: str, question: str, refusal: str, lead: str
) -> None:
    """ "Not in the knowledge base" or "I cannot help" when the order system timed out: the
    wrong reason (the model's, kept before); the user reads which tool did not answer."""
    call = tool_call("order_status", {"order_id": "SO-1001"})
    result = await agent(kb, order_status, call, text(refusal), retrieval=retrieval).run(
        question, context=ALICE
    )
    assert result.output == told("- order_status: failed: timed out after 0.2 s", lead)
    assert result.fallback_reason == "tool_failed" and not result.extractive
    assert result.messages[-1].text == result.output


async def test_a_refusal_stands_when_no_tool_failed_or_the_failed_one_answered_later(
    kb: KnowledgeBase,
) -> None:
    answers = {"n": 0}

    @tool(read_only=True, retries=0)
    def flaky_order(ctx: UserContext, order_id: str) -> dict[str, str]:
        """Look up one of the caller's orders (fails once, then answers)."""
        answers["n"] += 1
        if answers["n"] == 1:
            raise ConnectionError("refused")
        return {"order": order_id, "status": "shipped"}

    call = tool_call("flaky_order", {"order_id": "SO-1001"})
    refusal = "I cannot help with that order."
    result = await agent(kb, flaky_order, call, call, text(refusal), retrieval="tool").run(
        WHERE, context=ALICE
    )
    assert answers["n"] == 2 and result.output == refusal and not result.fallback_reason


async def test_passages_about_the_question_come_first_the_failed_tools_under_them(
    kb: KnowledgeBase,
) -> None:
    """The passages' sentences answer what they can; the tool that could answer the rest
    (or all of it: "Is the Lumen X1 in stock?" finds the product's description) did not,
    and the user reads that too."""
    call = tool_call("order_status", {"order_id": "SO-1001"})
    question = "投影仪的保修期是多久？"
    result = await agent(kb, order_status, call, text("保修期是 36 个月。")).run(
        question, context=ALICE
    )
    assert result.extractive and result.fallback_reason == "ungrounded"
    passages, failed = result.output.split("\n\n")
    assert passages.startswith("摘自文档：") and "24 个月" in passages
    assert failed == told("- order_status: failed: timed out after 0.2 s", TOOLS_FAILED_LEAD_ZH)
    assert result.messages[-1].text == result.output
    assert all("timed out" not in s.text for s in result.grounding.sentences)  # type: ignore[union-attr]

    # no tool failed: the passages' sentences alone, as before
    ok = await agent(kb, order_status, text("保修期是 36 个月。")).run(question, context=ALICE)
    assert ok.extractive and "24 个月" in ok.output and TOOLS_FAILED_LEAD_ZH not in ok.output


@tool(read_only=True, retries=0)
def query_stock(ctx: UserContext, product: str) -> dict[str, int]:
    """How many units of a product are in stock (the stock system is down)."""
    raise ConnectionError("the stock system refused the connection")


@pytest.mark.parametrize(
    ("question", "answer"),
    [
        ("Is the Lumen X1 in stock?", "The Lumen X1 is in stock."),
        ("Is the Lumen X1 in stock?", "Yes, the Lumen X1 is currently available."),
        # asked by its code, answered by its name (Qwen2.5-Coder-0.5B, the shop down)
        ("Is the SKU2024-011 projector in stock?", "The Lumen X1 is in stock."),
        ("Lumen X1 还有库存吗？", "Lumen X1 目前有库存。"),
    ],
)
async def test_in_stock_said_while_the_stock_system_is_down_is_not_the_documents_word(
    kb: KnowledgeBase, question: str, answer: str
) -> None:
    """The product's description holds "Lumen X1", so the answer's naming words carried it
    over the share of words a sentence needs; what it claims ("in stock") is what the failed
    tool was for, and no passage says it. Seen with Qwen2.5-Coder-0.5B and the shop down."""
    call = tool_call("query_stock", {"product": "Lumen X1"})
    result = await agent(kb, query_stock, call, text(answer)).run(question, context=ALICE)

    assert result.fallback_reason == "ungrounded", result.output
    assert answer not in result.output
    assert "- query_stock: failed: ConnectionError" in result.output

    # the stock system up: the same words rest on its answer and stand
    @tool(read_only=True)
    def stock_up(ctx: UserContext, product: str) -> dict[str, object]:
        """How many units of a product are in stock."""
        return {"product": product, "in_stock": True, "units": 12, "库存": 12}

    up = tool_call("stock_up", {"product": "Lumen X1"})
    kept = await agent(kb, stock_up, up, text(answer)).run(question, context=ALICE)
    assert kept.output == answer and not kept.fallback_reason


DESCRIPTION = (
    "The Lumen X1 (SKU2024-011) is our best-selling home projector: 3,000 ANSI lumens, Full "
    "HD, a 1.2x optical zoom and two HDMI 2.0 inputs."
)


@pytest.mark.parametrize(
    ("question", "answer"),
    [
        # Qwen2.5-Coder-0.5B with the shop down (bench/tool_answers.py, stock-zh-2): a true
        # quote of the product's description, whose numbers the passage holds
        ("Lumen X1（SKU2024-011）库存还剩多少台？", DESCRIPTION),
        ("How many Lumen X1 units are left?", DESCRIPTION),
    ],
    ids=["zh", "en"],
)
async def test_a_quote_about_the_product_not_its_stock_while_the_stock_system_is_down(
    kb: KnowledgeBase, question: str, answer: str
) -> None:
    """The answer shares only the product's names with the question: it is about the
    product, not what is asked of it, and the tool that could say failed."""
    call = tool_call("query_stock", {"product": "Lumen X1"})
    result = await agent(kb, query_stock, call, text(answer)).run(question, context=ALICE)

    assert result.fallback_reason == "off_topic", result.output
    assert "- query_stock: failed: ConnectionError" in result.output
    assert result.output != answer and result.messages[-1].text == result.output

    # no tool failed: the same quote is left to the checks as before (it stands)
    quiet = await agent(kb, query_stock, text(answer)).run(question, context=ALICE)
    assert quiet.output == answer and not quiet.fallback_reason


def test_a_tool_that_answered_later_in_the_run_or_a_call_the_model_got_wrong_is_not_listed() -> (
    None
):
    def results(*blocks: ToolResultBlock) -> Message:
        return Message.tool(list(blocks))

    messages = [
        results(
            ToolResultBlock(
                call_id="1",
                name="order_status",
                content="tool order_status failed: timed out after 5 s",
                is_error=True,
                failure="failed: timed out after 5 s",
            ),
            ToolResultBlock(
                call_id="2",
                name="stock",
                content="tool stock unavailable: circuit open after repeated failures; retry in about 30 s or answer without it",
                is_error=True,
                failure="unavailable: circuit open after repeated failures",
            ),
            ToolResultBlock(  # the model's mistake: the toolkit gives it no failure
                call_id="3",
                name="refund",
                content="invalid arguments for tool refund: amount: field required",
                is_error=True,
            ),
            ToolResultBlock(
                call_id="4",
                name="retrieve",
                content="tool retrieve failed: RuntimeError: x",
                is_error=True,
                failure="failed: RuntimeError",
            ),
        ),
        results(ToolResultBlock(call_id="5", name="order_status", content='{"status": "shipped"}')),
    ]
    assert tool_failure_lines(messages, leave_out="retrieve") == [
        "- stock: unavailable: circuit open after repeated failures"
    ]
    # a transcript read back from the session store keeps what failed
    stored = [Message.from_dict(m.to_dict()) for m in messages]
    assert tool_failure_lines(stored, leave_out="retrieve") == tool_failure_lines(
        messages, leave_out="retrieve"
    )


@pytest.mark.parametrize(
    ("question", "refusal", "lead"),
    [
        (WHERE, "I cannot find any information about your order.", TOOLS_FAILED_LEAD),
        ("我的订单 SO-1001 到哪了？", "抱歉，我无法协助查询这个订单。", TOOLS_FAILED_LEAD_ZH),
    ],
)
async def test_a_tool_that_returned_an_error_of_its_own_did_not_answer_either(
    kb: KnowledgeBase, question: str, refusal: str, lead: str
) -> None:
    """An MCP server's ``isError`` result, or a tool returning ``ToolOutput(is_error=True)``:
    the tool ran and said it could not answer. Before, only a failure governance wrote
    ("tool X failed: …") counted, so the refusal stood as if the documents lacked the order."""

    @tool(read_only=True)
    def order_desk(ctx: UserContext, order_id: str) -> ToolOutput:
        """Look up one of the caller's orders."""
        return ToolOutput(
            content="order database unavailable (token=s3cr3t)\nretry later", is_error=True
        )

    call = tool_call("order_desk", {"order_id": "SO-1001"})
    result = await agent(kb, order_desk, call, text(refusal)).run(question, context=ALICE)

    assert result.output == told(
        f"- order_desk: returned an error: order database unavailable (token={REDACTED})", lead
    )
    assert result.fallback_reason == "tool_failed"


async def test_two_callers_at_once_each_read_their_own_outcome(kb: KnowledgeBase) -> None:
    """One agent, two tenants at once: globex's order system is down, acme's answers."""

    @tool(read_only=True, timeout=0.5)
    async def orders(ctx: UserContext, order_id: str) -> dict[str, str]:
        """Look up one of the caller's orders."""
        if ctx.tenant_id == "globex":
            await anyio.sleep(5)
        return {"order": order_id, "status": "shipped", "carrier": "SF Express"}

    shipped = "Your order SO-1001 has shipped with SF Express."
    model = call_then_answer("orders", {"order_id": "SO-1001"}, shipped)
    outcomes = await answers_at_once(agent(kb, orders, model=model), WHERE, ALICE, BOB)

    assert outcomes == {
        "acme": "Your order SO-1001 has shipped with SF Express.",
        "globex": told("- orders: failed: timed out after 0.5 s"),
    }


def test_a_json_result_reads_as_pairs_other_text_as_it_is() -> None:
    assert readable('{"order": "SO-1001", "eta": "2025-03-09", "qty": 2, "paid": true}') == (
        "order: SO-1001, eta: 2025-03-09, qty: 2, paid: true"
    )
    assert readable('[{"sku": "A", "stock": 1}, {"sku": "B", "stock": 0}]') == (
        "sku: A, stock: 1; sku: B, stock: 0"
    )
    assert (
        readable('{"order": "SO-1", "lines": [{"sku": "A"}]}')
        == 'order: SO-1, lines: [{"sku":"A"}]'
    )
    assert readable('{"名称": "投影仪"}') == "名称: 投影仪"
    assert readable("shipped on 2025-03-09") == "shipped on 2025-03-09"
    assert readable("{not json") == "{not json"
    assert readable("[" * 100_000) == "[" * 100_000  # too deep to parse: as it is


async def test_a_stock_question_reads_the_product_passage_and_that_the_stock_system_failed(
    kb: KnowledgeBase,
) -> None:
    @tool(read_only=True, retries=0)
    def query_stock(ctx: UserContext, product: str) -> dict[str, int]:
        """How many units of a product the warehouse holds."""
        raise ToolError("the warehouse system is down")

    call = tool_call("query_stock", {"product": "Lumen X1 Pro"})
    result = await agent(kb, query_stock, call, text("Yes, 37 units are in stock.")).run(
        "Is the Lumen X1 Pro in stock?", context=ALICE
    )
    passages, failed = result.output.split("\n\n")
    assert passages.startswith("From the documents:\n- The Lumen X1 Pro adds native 4K")
    assert failed == told("- query_stock: failed: the warehouse system is down")
