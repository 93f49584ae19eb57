"""Governed tools: a write tool that waits for a human's approval, and the audit log.

Runs offline (a scripted model stands in for the chat model); writes ``.shelfhand/audit.db``
under the current directory. Then try ``shelfhand audit -w .shelfhand``.
"""

import asyncio

from shelfhand import Agent, Approvals, AuditLog, Toolkit, UserContext, tool
from shelfhand.core.events import ApprovalRequired, Final
from shelfhand.testing import ScriptedModel, text, tool_call


@tool(read_only=True, timeout=2.0, retries=2, rate_limit="30/minute", cache_ttl=300)
def query_stock(sku: str) -> str:
    """Check how many units of a SKU are in stock.

    Args:
        sku: The product SKU, e.g. SKU2024-011.
    """
    return f"{sku}: 12 in stock"


@tool(confirm=True)  # a write: never retried, runs only once a human approves it
def create_return(order_id: str, reason: str, api_token: str = "") -> str:
    """Create a return for one of the caller's orders.

    Args:
        order_id: The order number, e.g. SO-1001.
        reason: Why the customer sends it back.
        api_token: Token for the returns service (redacted in events and the audit log).
    """
    return f"return RMA-{order_id} created"


audit = AuditLog.for_workspace(".shelfhand")  # <workspace>/audit.db
approvals = Approvals()
model = ScriptedModel(  # stands in for a real chat model
    [
        [
            tool_call("query_stock", {"sku": "SKU2024-011"}),
            tool_call(
                "create_return",
                {"order_id": "SO-1001", "reason": "屏幕有坏点", "api_token": "tok-123"},
            ),
        ],
        text("SKU2024-011 有货；退货单 RMA-SO-1001 已创建。"),
    ]
)
toolkit = Toolkit([query_stock, create_return], audit=audit)
agent = Agent(model=model, toolkit=toolkit, approvals=approvals)
alice = UserContext(tenant_id="acme", user_id="alice")


async def main() -> str:
    answer = ""
    async for event in agent.stream("SO-1001 屏幕有坏点，我要退货", context=alice):
        if isinstance(event, ApprovalRequired):
            print(f"approve {event.tool} {dict(event.arguments)}? yes")
            approvals.approve(event.approval_id)  # in a web app: a separate request
        elif isinstance(event, Final):
            answer = event.result.output
    return answer


print(asyncio.run(main()))
for record in audit.query(user="alice"):
    print(record.tool, record.decision, record.outcome, record.arguments)
audit.close()
