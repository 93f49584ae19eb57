"""``@tool`` and ``Tool.invoke``: attributes, injection, validation, serialisation (docs/design.md T1–T3)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Literal

import pytest
from pydantic import BaseModel

from shelfhand.core.context import RunContext, UserContext
from shelfhand.core.errors import InvalidArgumentError, ToolArgumentError
from shelfhand.core.messages import Citation
from shelfhand.tools import Tool, Toolkit, ToolOutput, tool

pytestmark = pytest.mark.anyio

ALICE = UserContext(tenant_id="acme", user_id="alice", roles=("sales",))
RUN = RunContext(user=ALICE, agent_name="after-sales")


@tool(read_only=True)
def lookup_order(
    ctx: UserContext, order_id: str, detail: Literal["brief", "full"] = "brief"
) -> dict:
    """Look up one of the caller's orders.

    Args:
        order_id: The order number, e.g. SO-1001.
        detail: How much to return.
    """
    return {"order": order_id, "owner": ctx.user_id, "detail": detail}


@tool
async def trace_info(run: RunContext, note: str) -> str:
    """Report the run."""
    return f"{run.agent_name}/{run.user.user_id}: {note}"


class Stock(BaseModel):
    sku: str
    available: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Quote:
    sku: str
    total: float


def test_bare_decorator_and_options_build_tools_with_their_attributes() -> None:
    assert isinstance(trace_info, Tool)
    assert trace_info.name == "trace_info"
    assert trace_info.is_async and not lookup_order.is_async
    assert lookup_order.read_only and lookup_order.concurrency_safe
    assert not trace_info.read_only and not trace_info.concurrency_safe
    assert lookup_order.permission == "user" and lookup_order.timeout is None

    @tool(
        name="refund",
        description="Refund an order.",
        permission="admin",
        timeout=2.5,
        idempotent=True,
        external=True,
        read_only=True,
        concurrency_safe=False,
        group="billing",
    )
    def do_refund(order_id: str) -> str:
        return order_id

    assert (do_refund.name, do_refund.description, do_refund.permission) == (
        "refund",
        "Refund an order.",
        "admin",
    )
    assert do_refund.timeout == 2.5 and do_refund.idempotent and do_refund.external
    assert do_refund.read_only and not do_refund.concurrency_safe
    assert do_refund.group == "billing"
    assert do_refund.func.__name__ == "do_refund"


def test_a_tool_is_still_callable_like_the_function() -> None:
    assert lookup_order(ALICE, "SO-1", "full") == {
        "order": "SO-1",
        "owner": "alice",
        "detail": "full",
    }
    assert lookup_order.__doc__ is not None and "caller's orders" in lookup_order.__doc__


def test_bad_options_are_refused_at_decoration() -> None:
    def f() -> str:
        return ""

    with pytest.raises(ValueError, match="permission level"):
        tool(permission="root")(f)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        tool(timeout=0)(f)


def test_bad_declarations_are_shelfhand_errors_a_value_error_handler_still_catches() -> None:
    def f() -> str:
        return ""

    with pytest.raises(InvalidArgumentError) as caught:
        tool(retries=-1)(f)
    assert isinstance(caught.value, ValueError) and caught.value.code == "invalid_argument"
    with pytest.raises(InvalidArgumentError, match="already in this toolkit"):
        Toolkit([tool(f), tool(f)])


def test_a_keyword_that_is_not_a_tool_option_is_refused_at_once() -> None:
    def f() -> str:
        return ""

    with pytest.raises(TypeError, match="unexpected keyword argument 'readonly'"):
        tool(readonly=True)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="unexpected keyword argument 'retry'"):
        Tool(f, retry=3)  # type: ignore[call-arg]


async def test_user_context_is_injected_from_the_run() -> None:
    out = await lookup_order.invoke({"order_id": "SO-1001"}, run=RUN)
    assert out.content == '{"order":"SO-1001","owner":"alice","detail":"brief"}'
    assert out.data == {"order": "SO-1001", "owner": "alice", "detail": "brief"}


async def test_the_model_cannot_set_an_injected_parameter() -> None:
    with pytest.raises(ToolArgumentError, match="ctx: unexpected argument"):
        await lookup_order.invoke({"order_id": "SO-1", "ctx": {"user_id": "mallory"}}, run=RUN)


async def test_run_context_is_injected_into_async_tools() -> None:
    out = await trace_info.invoke({"note": "你好"}, run=RUN)
    assert out.content == "after-sales/alice: 你好"


async def test_sync_tools_run_in_a_worker_thread() -> None:
    @tool
    def where() -> str:
        return threading.current_thread().name

    out = await where.invoke({}, run=RUN)
    assert out.content != threading.current_thread().name


async def test_validation_error_names_every_wrong_field_for_the_model() -> None:
    with pytest.raises(ToolArgumentError) as info:
        await lookup_order.invoke({"detail": "everything", "colour": "red"}, run=RUN)
    message = str(info.value)
    assert message.startswith("invalid arguments for tool lookup_order:")
    assert "order_id: missing (required)" in message
    assert "detail: Input should be 'brief' or 'full' (got 'everything')" in message
    assert "colour: unexpected argument" in message
    assert "call the tool again" in message


async def test_arguments_are_coerced_like_json_numbers() -> None:
    @tool
    def add(a: int, b: float) -> float:
        return a + b

    assert (await add.invoke({"a": "2", "b": 0.5}, run=RUN)).content == "2.5"


async def test_return_values_are_serialised_for_the_model() -> None:
    @tool
    def model_result() -> Stock:
        return Stock(sku="SKU2024-011", available=3)

    @tool
    def dataclass_result() -> Quote:
        return Quote(sku="投影仪", total=1299.0)

    @tool
    def list_result() -> list[int]:
        return [1, 2]

    @tool
    def nothing() -> None:
        return None

    @tool
    def custom() -> ToolOutput:
        return ToolOutput(
            content="see [1]", citations=(Citation(index=1, source="warranty.md"),), is_error=True
        )

    assert (await model_result.invoke({}, run=RUN)).content == '{"sku":"SKU2024-011","available":3}'
    assert (await dataclass_result.invoke({}, run=RUN)).content == '{"sku":"投影仪","total":1299.0}'
    assert (await list_result.invoke({}, run=RUN)).content == "[1,2]"
    assert (await nothing.invoke({}, run=RUN)).content == "done"
    out = await custom.invoke({}, run=RUN)
    assert out.is_error and out.citations[0].source == "warranty.md"


async def test_pydantic_arguments_arrive_as_models() -> None:
    @tool
    def restock(stock: Stock) -> str:
        return f"{type(stock).__name__}:{stock.sku}:{stock.available}"

    out = await restock.invoke({"stock": {"sku": "A-1", "available": 5}}, run=RUN)
    assert out.content == "Stock:A-1:5"


async def test_strict_tools_treat_null_as_the_default() -> None:
    @tool(strict=True)
    def pick(detail: Literal["brief", "full"] = "brief", note: str | None = "x") -> str:
        return f"{detail}:{note}"

    assert (await pick.invoke({"detail": None, "note": None}, run=RUN)).content == "brief:None"


async def test_awkward_parameter_names_still_work() -> None:
    @tool
    def f(json: str, _hidden: int = 1, model_name: str = "m", /) -> str:
        return f"{json}-{_hidden}-{model_name}"

    assert set(f.schema()["function"]["parameters"]["properties"]) == {
        "json",
        "_hidden",
        "model_name",
    }
    out = await f.invoke({"json": "a", "_hidden": 2, "model_name": "q"}, run=RUN)
    assert out.content == "a-2-q"


async def test_callable_objects_with_async_call_are_awaited() -> None:
    class Greeter:
        __name__ = "greet"

        async def __call__(self, name: str) -> str:
            return f"hello {name}"

    greet = tool(Greeter())
    assert greet.is_async
    assert (await greet.invoke({"name": "王"}, run=RUN)).content == "hello 王"
