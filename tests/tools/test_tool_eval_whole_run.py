"""``eval-tools`` judges the whole run: every call against the expected one, no write that was
not asked for (denied, never run), and the facts the answer must state."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from shelfhand.evals.tool_eval import ToolCase, run_tool_eval
from shelfhand.testing import ScriptedModel, text, tool_call

pytestmark = pytest.mark.anyio

STOCK = ToolCase(
    id="stock-en",
    request="Is the SKU2024-011 projector in stock?",
    tool="query_stock",
    arguments={"sku": "SKU2024-011"},
    facts=("12",),
)
RETURN = ToolCase(
    id="return-en",
    request="Please create a return for order SO-1001, the fan is too loud.",
    tool="create_return",
    arguments={"order_id": "SO-1001"},
    facts=("RMA",),
)


def returns(workspace: Path) -> int:
    with sqlite3.connect(workspace / "tool-eval-shop.db") as db:
        return int(db.execute("SELECT count(*) FROM returns").fetchone()[0])


async def test_a_right_run_states_the_facts(tmp_path: Path) -> None:
    model = ScriptedModel(
        [tool_call("query_stock", {"sku": "SKU2024-011"}), text("12 units are in stock.")]
    )
    report = await run_tool_eval(model, [STOCK], workspace=tmp_path)

    result = report["results"][0]
    assert result["run_ok"] and result["facts_ok"] and report["whole_run_accuracy"] == 1.0


async def test_a_write_nobody_asked_for_is_denied_and_counted(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            tool_call("query_stock", {"sku": "SKU2024-011"}),
            tool_call("create_return", {"order_id": "SO-1001", "reason": "why not"}),
            text("12 in stock, and I returned your order."),
        ]
    )
    report = await run_tool_eval(model, [STOCK], workspace=tmp_path)

    result = report["results"][0]
    assert result["arguments_ok"]  # the first call was right...
    assert result["unasked_writes"] == ["create_return"] and not result["run_ok"]  # ...the run not
    assert report["unasked_writes"] == 1
    assert returns(tmp_path) == 0  # denied: it never ran


async def test_the_write_a_case_asks_for_is_approved_and_runs(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            tool_call("create_return", {"order_id": "SO-1001", "reason": "fan too loud"}),
            text("Your return RMA-1 is created."),
        ]
    )
    report = await run_tool_eval(model, [RETURN], workspace=tmp_path)

    assert report["results"][0]["run_ok"] and returns(tmp_path) == 1


async def test_an_answer_without_the_facts_is_not_a_right_run(tmp_path: Path) -> None:
    model = ScriptedModel([tool_call("query_stock", {"sku": "SKU2024-011"}), text("3507.3")])
    report = await run_tool_eval(model, [STOCK], workspace=tmp_path)

    result = report["results"][0]
    assert result["arguments_ok"] and result["facts_ok"] is False and not result["run_ok"]
