"""``serve --demo-tools``: the reference scenario's stock and price question answered over
HTTP, the caller's identity (not the model) deciding whose orders are visible."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from service_helpers import ALICE, ThreadServer, ask_turn, start_thread_server
from typer.testing import CliRunner

from shelfhand.api import create_app
from shelfhand.app import App
from shelfhand.cli import serve as serve_command
from shelfhand.core.context import UserContext
from shelfhand.core.messages import Message
from shelfhand.core.settings import Settings
from shelfhand.testing import FunctionModel, hashing_router, text, tool_call
from shelfhand.tools.demo import DEMO_TENANT, DEMO_USER

KEYS = {
    "key-alice": UserContext(tenant_id="t1", user_id="alice", roles=["user"]),
    "key-u7": UserContext(tenant_id=DEMO_TENANT, user_id=DEMO_USER, roles=["user"]),
    "key-t1-u7": UserContext(tenant_id="t1", user_id=DEMO_USER, roles=["user"]),
}
U7 = {"Authorization": "Bearer key-u7"}
NAMESAKE = {"Authorization": "Bearer key-t1-u7"}  # another tenant's u7


def shop_model(messages: list[Message], tools: list[Any]) -> Any:
    """Calls the tool the question names once, then answers with its result."""
    names = {t["function"]["name"] for t in tools}
    last = messages[-1]
    if last.role == "tool":
        return text(f"Result: {last.tool_results[0].content}")
    question = last.text
    if "stock" in question and "query_stock" in names:
        return tool_call("query_stock", {"sku": "SKU2024-011"})
    if "order" in question and "query_order" in names:
        return tool_call("query_order", {"order_id": "SO-1001"})
    return text("no tool for this")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ThreadServer]:
    settings = Settings.load(
        tmp_path, env={"SHELFHAND_EMBEDDER": "hashing", "SHELFHAND_ANSWER_RETRIEVAL": "tool"}
    )
    app = App(settings=settings, model=FunctionModel(shop_model), router=hashing_router())
    app.use_demo_tools()
    running = start_thread_server(create_app(app, api_keys=KEYS))
    yield running
    running.stop()


def ask(server: ThreadServer, who: dict[str, str], question: str) -> dict[str, Any]:
    return ask_turn(server.url, who, question)


def test_the_stock_question_of_the_reference_scenario_is_answered_over_http(
    server: ThreadServer,
) -> None:
    reply = ask(server, ALICE, "Is SKU2024-011 in stock?")

    assert [s["name"] for s in reply["tool_steps"]] == ["query_stock"]
    assert '"stock":12' in reply["output"] and '"Lumen X1"' in reply["output"]


def test_orders_are_visible_to_their_owner_only(server: ThreadServer) -> None:
    owner = ask(server, U7, "Where is my order SO-1001?")
    other = ask(server, ALICE, "Where is my order SO-1001?")
    namesake = ask(server, NAMESAKE, "Where is my order SO-1001?")

    assert '"status":"delivered"' in owner["output"]
    assert '"found":false' in other["output"]
    assert '"found":false' in namesake["output"]  # (it read the order: user ids alone)


def test_serve_offers_the_demo_tools_flag() -> None:
    result = CliRunner().invoke(serve_command.app, ["serve", "--help"])

    assert "--demo-tools" in result.output
