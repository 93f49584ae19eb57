"""Several agents: a supervisor and three specialists of the after-sales scenario (issue 12).

- ``product_advisor``: the documents (``retrieve``) + ``query_stock`` + ``quote_price``;
- ``troubleshooter``: the documents only;
- ``returns_clerk``: ``query_order`` + ``create_return`` (a write: the customer confirms).

The supervisor sees each specialist as a tool with one ``task`` argument; each specialist
gets only its own tools and sees only its task; the customer's identity flows down from the
run, never from the task text. The stream shows who does what.

Runs offline: scripted models play the turns a real model would. With ``--real`` every agent
uses the configured chat model instead (``SHELFHAND_MODEL``, ``OPENAI_BASE_URL``,
``OPENAI_API_KEY``)::

    python examples/supervisor.py [WORKSPACE] [--real]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from shelfhand import Approvals, KnowledgeBase, Toolkit, UserContext, retrieve_tool
from shelfhand.agent import Subagent, Supervisor
from shelfhand.core.events import (
    ApprovalRequired,
    Final,
    SubagentFinished,
    SubagentStarted,
    ToolFinished,
    ToolStarted,
)
from shelfhand.knowledge import sample_corpus
from shelfhand.models import ChatModel
from shelfhand.testing import ScriptedModel, text, tool_call
from shelfhand.tools import ApprovalRequest
from shelfhand.tools.demo import demo_database, make_tools

QUESTIONS = (
    "投影仪的保修期是多久？SKU2024-011 有货吗？报个价",
    "E-203 是什么故障？",
    "SO-1001 屏幕有坏点，我要退货",
)


def scripted() -> tuple[ChatModel, dict[str, ChatModel]]:
    """The turns a real model would play: the supervisor's, and each specialist's."""
    supervisor = ScriptedModel([
        tool_call("product_advisor", {"task": "保修期多久？SKU2024-011 有没有货，单价多少？"}),
        text("保修期见 [1]；SKU2024-011 有 12 台现货，单价 3999 元。"),
        tool_call("troubleshooter", {"task": "错误代码 E-203 是什么故障，怎么处理？"}),
        text("E-203 的含义和处理见 [1]。"),
        tool_call("returns_clerk", {"task": "订单 SO-1001 屏幕有坏点，客户要退货。"}),
        text("退货单已创建。"),
    ])  # fmt: skip
    specialists: dict[str, ChatModel] = {
        "product_advisor": ScriptedModel(
            [
                [
                    tool_call("retrieve", {"query": "投影仪 保修期"}),
                    tool_call("query_stock", {"sku": "SKU2024-011"}),
                    tool_call("quote_price", {"sku": "SKU2024-011", "quantity": 1}),
                ],
                text("保修期见 [1]；SKU2024-011 有 12 台现货，单价 3999 元。"),
            ]
        ),
        "troubleshooter": ScriptedModel(
            [
                tool_call("retrieve", {"query": "E-203"}),
                text("E-203 的含义和处理见 [1]。"),
            ]
        ),
        "returns_clerk": ScriptedModel(
            [
                tool_call("query_order", {"order_id": "SO-1001"}),
                tool_call("create_return", {"order_id": "SO-1001", "reason": "屏幕有坏点"}),
                text("退货单已创建。"),
            ]
        ),
    }
    return supervisor, specialists


def specialists(models: dict[str, ChatModel]) -> list[Subagent]:
    return [
        Subagent(
            "product_advisor",
            "Product questions: specifications, warranty, stock and prices.",
            tools=["retrieve", "query_stock", "quote_price"],
            model=models.get("product_advisor"),
            max_iters=4,
            system_prompt="You advise customers on projectors. Cite passages like [1].",
        ),
        Subagent(
            "troubleshooter",
            "Error codes and faults: what they mean and how to fix them.",
            tools=["retrieve"],
            model=models.get("troubleshooter"),
            max_iters=3,
            system_prompt="You explain faults from the troubleshooting manual. Cite like [1].",
        ),
        Subagent(
            "returns_clerk",
            "Orders and returns of the customer: looks orders up and creates returns.",
            tools=["query_order", "create_return"],
            model=models.get("returns_clerk"),
            max_iters=4,
            system_prompt="You handle the customer's orders and returns.",
        ),
    ]


async def main(workspace: Path, *, real: bool = False) -> list[str]:
    kb = KnowledgeBase(workspace / "kb", None, mode="keyword")
    kb.ingest([sample_corpus()])
    toolkit = Toolkit([retrieve_tool(kb), *make_tools(demo_database(workspace / "shop.db"))])
    customer = UserContext(tenant_id="default", user_id="u7", roles=["user"])
    if real:
        from shelfhand.providers import OpenAIChatModel

        model: ChatModel = OpenAIChatModel.from_env()
        models: dict[str, ChatModel] = {}
    else:
        model, models = scripted()

    def customer_confirms(request: ApprovalRequest) -> bool:
        print(f"    confirm {request.tool}({dict(request.arguments)})? yes")
        return True

    supervisor = Supervisor(
        model=model,
        toolkit=toolkit,
        tools=[],  # the supervisor only delegates
        subagents=specialists(models),
        approvals=Approvals(handler=customer_confirms),
    )
    answers: list[str] = []
    for question in QUESTIONS:
        print(f"> {question}")
        async for event in supervisor.stream(question, context=customer):
            if isinstance(event, SubagentStarted):
                print(f"  -> {event.subagent} (depth {event.depth}): {event.task}")
            elif isinstance(event, SubagentFinished):
                print(f"  <- {event.subagent} ({event.stop_reason}, {event.duration_ms:.0f} ms)")
            elif isinstance(event, ToolStarted) and event.agent:
                print(f"    [{event.agent}] {event.name} {event.arguments}")
            elif isinstance(event, ToolFinished) and event.agent:
                print(f"    [{event.agent}] {event.name} -> {event.content[:70]}")
            elif isinstance(event, ApprovalRequired):
                print(f"    approval asked for {event.tool}")
            elif isinstance(event, Final):
                print(event.result.output)
                for c in event.result.citations:
                    print(f"    [{c.index}] {c.source}")
                answers.append(event.result.output)
    kb.close()
    return answers


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--real"]
    target = Path(args[0]) if args else Path(tempfile.mkdtemp(prefix="supervisor-"))
    asyncio.run(main(target, real="--real" in sys.argv))
