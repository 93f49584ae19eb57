"""``@tool(examples=...)``: routing examples declared with a tool, checked at declaration."""

from __future__ import annotations

import pytest

from shelfhand.core.context import UserContext
from shelfhand.tools import tool
from shelfhand.tools.tool import MAX_EXAMPLES, ToolExample


def order_status(ctx: UserContext, order_id: str, detail: bool = False) -> str:
    """Look up one of the caller's orders.

    Args:
        order_id: The order number, e.g. SO-1001.
        detail: Include the shipping events.
    """
    return order_id


def test_examples_are_kept_and_appear_in_the_schema() -> None:
    declared = tool(
        examples=[
            "Where is my parcel?",
            {"request": "订单 SO-3047 到哪了？", "arguments": {"order_id": "SO-3047"}},
            ToolExample("Has SO-1 shipped?", {"order_id": "SO-1", "detail": True}),
        ]
    )(order_status)

    assert declared.examples == (
        ToolExample("Where is my parcel?"),
        ToolExample("订单 SO-3047 到哪了？", {"order_id": "SO-3047"}),
        ToolExample("Has SO-1 shipped?", {"order_id": "SO-1", "detail": True}),
    )
    assert declared.schema()["function"]["examples"] == [
        {"request": "Where is my parcel?"},
        {"request": "订单 SO-3047 到哪了？", "arguments": {"order_id": "SO-3047"}},
        {"request": "Has SO-1 shipped?", "arguments": {"order_id": "SO-1", "detail": True}},
    ]


def test_a_tool_without_examples_has_the_schema_it_had_before() -> None:
    function = tool(order_status).schema()["function"]
    assert set(function) == {"name", "description", "parameters"}


@pytest.mark.parametrize(
    ("examples", "message"),
    [
        (["  "], "example 1: the request must be non-empty text"),
        ([{"request": "Where is SO-1?", "arguments": {}}], "order_id: missing"),
        ([{"request": "x", "arguments": {"order_id": "SO-1", "user_id": "u9"}}], "user_id"),
        ([{"request": "x", "arguments": {"order_id": 12}}], "order_id"),
        ([{"request": "x", "args": {}}], "unknown key(s) ['args']"),
        ([{"request": "x", "arguments": "SO-1"}], "arguments must be an object"),
        ([42], "expected a request string or an object"),
        ("Where is my parcel?", "must be a list of examples"),
        (["x" * 301], "longer than 300 characters"),
        (["q"] * (MAX_EXAMPLES + 1), f"at most {MAX_EXAMPLES} examples"),
    ],
)
def test_a_wrong_example_fails_at_declaration(examples: object, message: str) -> None:
    with pytest.raises(ValueError, match="order_status") as caught:
        tool(examples=examples)(order_status)  # type: ignore[call-overload]
    assert message in str(caught.value)
