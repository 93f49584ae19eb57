"""The reference scenario's tools: an after-sales assistant for a company selling projectors.

Four tools over a small SQLite demo database, the caller's identity injected: ``query_stock``
and ``quote_price`` (read-only), ``query_order`` (scoped to the caller: nobody sees another
user's order) and ``create_return`` (a write: never retried, needs confirmation). Used by
``examples/after_sales.py`` and by ``shelfhand eval-tools`` (with ``retrieve`` over the bundled
samples, see :func:`shelfhand.knowledge.base.sample_corpus`).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from shelfhand.core.context import UserContext
from shelfhand.tools.tool import Tool, tool

__all__ = [
    "DEMO_TENANT",
    "DEMO_USER",
    "RETRIEVE_EXAMPLES",
    "TOOL_EXAMPLES",
    "demo_database",
    "make_tools",
]

DEMO_USER = "u7"
"""The customer who owns order SO-1001 in the demo database."""

DEMO_TENANT = "default"
"""The tenant of the demo database's orders: another tenant's u7 has none."""


# Routing examples as the shop's deployer writes them: from each tool's purpose, in the two
# languages its customers use, with made-up SKUs and order numbers (SKU2023-105, SO-3047) that
# are not in the demo data. Small local models route by them (docs/benchmarks/history.md, "After issue 9
# round 4"); they are not the eval cases (samples/tool-cases.jsonl), and
# bench/tool_cases_heldout.jsonl checks them on requests written separately.
TOOL_EXAMPLES: dict[str, list[dict[str, Any]]] = {
    "query_stock": [
        {
            "request": "Can I still buy SKU2023-105, or is it sold out?",
            "arguments": {"sku": "SKU2023-105"},
        },
        {"request": "SKU2023-105 缺货了吗？", "arguments": {"sku": "SKU2023-105"}},
    ],
    "quote_price": [
        {
            "request": "What is the total for 5 × SKU2023-105?",
            "arguments": {"sku": "SKU2023-105", "quantity": 5},
        },
        {
            "request": "给我报个价：SKU2023-105，要四台",
            "arguments": {"sku": "SKU2023-105", "quantity": 4},
        },
    ],
    "query_order": [
        {"request": "Has SO-3047 been delivered yet?", "arguments": {"order_id": "SO-3047"}},
        {"request": "帮我查一下 SO-3047 发货了没有", "arguments": {"order_id": "SO-3047"}},
    ],
    "create_return": [
        {
            "request": "I want to send back what I got in SO-3047, it arrived cracked.",
            "arguments": {"order_id": "SO-3047", "reason": "arrived cracked"},
        },
        {
            "request": "SO-3047 的遥控器失灵，申请退货",
            "arguments": {"order_id": "SO-3047", "reason": "遥控器失灵"},
        },
    ],
}
"""The examples of :func:`make_tools`' tools, by tool name."""

RETRIEVE_EXAMPLES: list[dict[str, Any]] = [
    {
        "request": "How often should the air filter be cleaned?",
        "arguments": {"query": "air filter cleaning"},
    },
    {"request": "光源坏了能免费换吗？", "arguments": {"query": "光源 保修"}},
]
"""Examples for ``retrieve`` over the bundled samples (a projector shop's manuals and policies)."""


def demo_database(path: str | Path) -> sqlite3.Connection:
    """The demo shop: the four projectors of the bundled spec sheet (``product-specs.docx``:
    same SKUs, names and list prices), two orders (u7's and u9's, of tenant
    :data:`DEMO_TENANT`), a returns table."""
    db = sqlite3.connect(path, check_same_thread=False)
    columns = {row[1] for row in db.execute("PRAGMA table_info(orders)")}
    if columns and "tenant_id" not in columns:  # (a demo database made before orders had one)
        db.execute(f"ALTER TABLE orders ADD COLUMN tenant_id TEXT DEFAULT '{DEMO_TENANT}'")
    db.executescript(
        f"""
        CREATE TABLE IF NOT EXISTS products (sku TEXT PRIMARY KEY, name TEXT, price REAL, stock INT);
        CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, user_id TEXT, sku TEXT, status TEXT,
                                           tenant_id TEXT DEFAULT '{DEMO_TENANT}');
        CREATE TABLE IF NOT EXISTS returns (id INTEGER PRIMARY KEY, order_id TEXT, reason TEXT);
        INSERT OR IGNORE INTO products VALUES ('SKU2024-011', 'Lumen X1', 3999, 12),
                                              ('SKU2024-012', 'Lumen X1 Pro', 5999, 0),
                                              ('SKU2024-020', 'Lumen Mini M2', 1999, 35),
                                              ('SKU2024-031', 'Lumen Cinema C4K', 12999, 3);
        INSERT OR IGNORE INTO orders (id, user_id, sku, status)
            VALUES ('SO-1001', 'u7', 'SKU2024-011', 'delivered'),
                   ('SO-2002', 'u9', 'SKU2024-012', 'shipped');
        """
    )
    return db


def make_tools(db: sqlite3.Connection, *, examples: bool = True) -> list[Tool[Any, Any]]:
    """The four tools of the reference scenario over ``db`` (see the module docstring);
    ``examples=False`` leaves out their :data:`TOOL_EXAMPLES`."""

    def shown(name: str) -> list[dict[str, Any]]:
        return TOOL_EXAMPLES[name] if examples else []

    @tool(read_only=True, examples=shown("query_stock"))
    def query_stock(sku: str) -> dict[str, Any]:
        """Live stock: how many units of a product are in stock now (is it available, how many are left).

        Args:
            sku: The product SKU exactly as the customer wrote it.
        """
        row = db.execute("SELECT name, stock FROM products WHERE sku=?", (sku,)).fetchone()
        return (
            {"sku": sku, "found": False}
            if row is None
            else {"sku": sku, "name": row[0], "stock": row[1]}
        )

    @tool(read_only=True, examples=shown("quote_price"))
    def quote_price(sku: str, quantity: int = 1) -> dict[str, Any]:
        """Live prices: quote the total price for a quantity of a product (how much it costs; 10% off from 3 units).

        Args:
            sku: The product SKU exactly as the customer wrote it.
            quantity: How many units.
        """
        row = db.execute("SELECT price FROM products WHERE sku=?", (sku,)).fetchone()
        if row is None:
            return {"sku": sku, "found": False}
        total = row[0] * quantity * (0.9 if quantity >= 3 else 1.0)
        return {"sku": sku, "quantity": quantity, "total_cny": round(total, 2)}

    @tool(read_only=True, examples=shown("query_order"))
    def query_order(ctx: UserContext, order_id: str) -> dict[str, Any]:
        """Look up the status and shipping of one of the caller's orders by its order number.

        Args:
            order_id: The order number exactly as the customer wrote it.
        """
        # the owner comes from the injected identity, never from the model
        row = db.execute(
            "SELECT sku, status FROM orders WHERE id=? AND user_id=? AND tenant_id=?",
            (order_id, ctx.user_id, ctx.tenant_id),
        ).fetchone()
        return (
            {"order": order_id, "found": False}
            if row is None
            else {"order": order_id, "sku": row[0], "status": row[1]}
        )

    @tool(confirm=True, examples=shown("create_return"))
    def create_return(ctx: UserContext, order_id: str, reason: str) -> str:
        """Create a return when the customer wants to send back the product of one of their orders (needs the customer's confirmation).

        Args:
            order_id: The order number exactly as the customer wrote it.
            reason: Why the product goes back.
        """
        owned = db.execute(
            "SELECT 1 FROM orders WHERE id=? AND user_id=? AND tenant_id=?",
            (order_id, ctx.user_id, ctx.tenant_id),
        ).fetchone()
        if owned is None:
            return f"no order {order_id} for this customer"
        cur = db.execute("INSERT INTO returns (order_id, reason) VALUES (?, ?)", (order_id, reason))
        db.commit()
        return f"return RMA-{cur.lastrowid} created for {order_id}"

    return [query_stock, quote_price, query_order, create_return]
