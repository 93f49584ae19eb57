"""The demo shop's orders belong to a tenant: a user of another tenant with the same user id
(``u7`` of tenant ``beta``) sees none of them, nor can return one. It looked orders up by
user id alone: in a service with ``--demo-tools``, beta's u7 read the order SO-1001."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from shelfhand.core.context import RunContext, UserContext
from shelfhand.core.messages import ToolCallBlock
from shelfhand.tools.demo import DEMO_TENANT, DEMO_USER, demo_database, make_tools
from shelfhand.tools.toolkit import Toolkit

pytestmark = pytest.mark.anyio

OWNER = UserContext(tenant_id=DEMO_TENANT, user_id=DEMO_USER)
NAMESAKE = UserContext(tenant_id="beta", user_id=DEMO_USER)


async def call(kit: Toolkit, user: UserContext, name: str, **arguments: str) -> str:
    block = ToolCallBlock(id="c1", name=name, arguments=json.dumps(arguments))
    return (await kit.call(block, RunContext(user=user))).content


async def test_another_tenants_user_of_the_same_id_sees_no_order() -> None:
    db = demo_database(":memory:")
    kit = Toolkit(make_tools(db))
    mine = await call(kit, OWNER, "query_order", order_id="SO-1001")
    theirs = await call(kit, NAMESAKE, "query_order", order_id="SO-1001")
    assert "delivered" in mine
    assert "delivered" not in theirs and "false" in theirs.lower()


def test_a_demo_database_made_before_tenants_keeps_its_orders_in_the_demo_tenant(
    tmp_path: Path,
) -> None:
    path = tmp_path / "demo-shop.db"
    old = sqlite3.connect(path)
    old.executescript(
        "CREATE TABLE orders (id TEXT PRIMARY KEY, user_id TEXT, sku TEXT, status TEXT);"
        "INSERT INTO orders VALUES ('SO-1001', 'u7', 'SKU2024-011', 'delivered');"
    )
    old.commit()
    old.close()
    db = demo_database(path)
    rows = db.execute("SELECT id, tenant_id FROM orders ORDER BY id").fetchall()
    assert rows == [("SO-1001", DEMO_TENANT), ("SO-2002", DEMO_TENANT)]
