"""The reference scenario: an after-sales assistant for a company selling projectors.

Bookshelf: the bundled sample documents (warranty, returns, troubleshooting manual, specs).
Hands: four tools over a small SQLite demo database, the caller's identity injected:
``query_stock`` and ``quote_price`` (read-only), ``query_order`` (scoped to the caller: nobody
sees another user's order) and ``create_return`` (a write: never retried, needs confirmation).

Runs offline: a scripted model stands in for the chat model and plays the turns a real model
would. Point ``model`` at ``OpenAIChatModel(...)`` to talk to a real one.

    python examples/after_sales.py [WORKSPACE]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from shelfhand import Agent, Approvals, KnowledgeBase, Toolkit, UserContext, retrieve_tool
from shelfhand.knowledge import default_router, label, sample_corpus
from shelfhand.testing import ScriptedModel, text, tool_call
from shelfhand.tools import ApprovalRequest
from shelfhand.tools.demo import demo_database, make_tools


async def main(workspace: Path) -> list[str]:
    kb = KnowledgeBase(workspace / "kb", default_router())
    kb.ingest([sample_corpus()])
    toolkit = Toolkit([retrieve_tool(kb), *make_tools(demo_database(workspace / "shop.db"))])
    customer = UserContext(tenant_id="default", user_id="u7", roles=["user"])
    answers: list[str] = []

    # 1. knowledge + two tools in one turn (the three calls run concurrently: all read-only)
    model = ScriptedModel([
        [
            tool_call("retrieve", {"query": "投影仪 保修期"}),
            tool_call("query_stock", {"sku": "SKU2024-011"}),
            tool_call("quote_price", {"sku": "SKU2024-011", "quantity": 1}),
        ],
        text("保修期见 [1]；SKU2024-011（Lumen X1）有 12 台现货，单价 3999 元。"),
    ])  # fmt: skip
    result = await Agent(model=model, toolkit=toolkit).run(
        "投影仪的保修期是多久？SKU2024-011 有货吗？报个价", context=customer
    )
    answers.append(result.output)
    print(result.output)
    for c in result.citations[:2]:
        print(f"  [{c.index}] {label(c)}")

    # 2. another customer's order stays invisible, whatever the model asks for
    model = ScriptedModel(
        [tool_call("query_order", {"order_id": "SO-2002"}), text("没有找到这个订单。")]
    )
    result = await Agent(model=model, toolkit=toolkit).run("SO-2002 到哪了？", context=customer)
    print(result.messages[2].tool_results[0].content)
    answers.append(result.messages[2].tool_results[0].content)

    # 3. a write waits for the customer's confirmation (here: a handler that approves)
    def customer_confirms(request: ApprovalRequest) -> bool:
        print(f"  confirm {request.tool}({dict(request.arguments)})? yes")
        return True

    model = ScriptedModel([
        tool_call("create_return", {"order_id": "SO-1001", "reason": "屏幕有坏点"}),
        text("退货单已创建。"),
    ])  # fmt: skip
    result = await Agent(model=model, toolkit=toolkit).run(
        "SO-1001 屏幕有坏点，我要退货",
        context=customer,
        approvals=Approvals(handler=customer_confirms),
    )
    print(result.messages[2].tool_results[0].content)
    answers.append(result.messages[2].tool_results[0].content)

    # 4. E-203: an exact error code found by keyword search, no model needed
    hits = kb.search("E-203 是什么故障？", k=1, user=customer)
    print(f"E-203 → {hits[0].chunk.source}, p. {hits[0].chunk.page}")
    answers.append(hits[0].chunk.source)
    kb.close()
    return answers


if __name__ == "__main__":
    target = (
        Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="after-sales-"))
    )
    asyncio.run(main(target))
