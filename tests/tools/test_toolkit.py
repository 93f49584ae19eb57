"""Toolkit: registry, groups, permission filtering, schema cache and ``call`` (docs/design.md T4)."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest

from shelfhand.core.context import RunContext, UserContext
from shelfhand.core.errors import TransientToolError
from shelfhand.core.messages import Citation, ToolCallBlock
from shelfhand.tools import Tool, Toolkit, ToolOutput, tool
from shelfhand.tools.toolkit import META_TOOL_NAME

pytestmark = pytest.mark.anyio

USER = UserContext(tenant_id="acme", user_id="alice")
ADMIN = UserContext(tenant_id="acme", user_id="root", roles=("admin",))
USER_RUN = RunContext(user=USER)
ADMIN_RUN = RunContext(user=ADMIN)


@tool(read_only=True)
def query_stock(sku: str) -> str:
    """Check how many units of a SKU are in stock.

    Args:
        sku: The product SKU, e.g. SKU2024-011.
    """
    return f"{sku}: 12 in stock"


@tool(permission="admin")
def delete_order(order_id: str) -> str:
    """Delete an order for good."""
    return f"deleted {order_id}"


@tool
def create_return(order_id: str, reason: str) -> str:
    """Create a return for an order."""
    return f"return for {order_id}: {reason}"


@tool(read_only=True)
def list_invoices(customer: str) -> list[str]:
    """List a customer's invoices."""
    return [f"INV-{customer}-1"]


def call(name: str, arguments: str = "{}") -> ToolCallBlock:
    return ToolCallBlock(id="call-1", name=name, arguments=arguments)


def names(tools: list[Tool[..., Any]]) -> list[str]:
    return [t.name for t in tools]


def test_plain_functions_are_wrapped_and_duplicates_refused_by_name() -> None:
    def ping() -> str:
        """Say pong."""
        return "pong"

    kit = Toolkit([query_stock, ping])
    assert isinstance(kit.get("ping"), Tool)
    assert names(kit.tools) == ["query_stock", "ping"]
    with pytest.raises(ValueError, match="query_stock"):
        kit.add(query_stock)
    assert kit.remove("ping").name == "ping"
    assert kit.get("ping") is None
    with pytest.raises(KeyError, match="ping"):
        kit.remove("ping")


def test_admin_tools_are_hidden_from_users_and_shown_to_admins() -> None:
    kit = Toolkit([query_stock, delete_order])
    assert names(kit.visible_tools()) == ["query_stock"]
    assert names(kit.visible_tools(USER)) == ["query_stock"]
    assert names(kit.visible_tools(ADMIN)) == ["query_stock", "delete_order"]
    assert [s["function"]["name"] for s in kit.schemas(USER)] == ["query_stock"]
    assert [s["function"]["name"] for s in kit.schemas(ADMIN)] == ["query_stock", "delete_order"]


def test_schemas_are_the_same_list_until_the_toolkit_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kit = Toolkit([query_stock, delete_order])
    builds: list[str] = []
    original = Toolkit._build_schemas

    def counting(self: Toolkit, user: UserContext | None) -> list[dict[str, Any]]:
        builds.append("user" if user is None else user.permission_level)
        return original(self, user)

    monkeypatch.setattr(Toolkit, "_build_schemas", counting)
    first = kit.schemas(USER)
    assert kit.schemas(USER) is first
    assert kit.schemas() is first  # None means a plain user: the same cache entry
    assert builds == ["user"]
    admin = kit.schemas(ADMIN)
    assert kit.schemas(ADMIN) is admin
    assert builds == ["user", "admin"]

    kit.add(create_return)
    after_add = kit.schemas(USER)
    assert after_add is not first
    assert [s["function"]["name"] for s in after_add] == ["query_stock", "create_return"]
    assert builds == ["user", "admin", "user"]
    assert kit.schemas(USER) is after_add
    assert builds == ["user", "admin", "user"]


def test_each_tool_schema_is_built_once() -> None:
    assert query_stock.schema() is query_stock.schema()


def test_groups_are_inactive_until_switched_on() -> None:
    kit = Toolkit([query_stock])
    kit.add_group("billing", "Invoices and refunds.", [list_invoices])
    assert names(kit.visible_tools()) == ["query_stock", META_TOOL_NAME]
    kit.activate("billing")
    assert names(kit.visible_tools()) == ["query_stock", "list_invoices", META_TOOL_NAME]
    kit.deactivate("billing")
    assert names(kit.visible_tools()) == ["query_stock", META_TOOL_NAME]
    with pytest.raises(ValueError, match="unknown tool group 'nope'"):
        kit.activate("nope")


def test_without_groups_there_is_no_meta_tool() -> None:
    kit = Toolkit([query_stock])
    assert names(kit.visible_tools()) == ["query_stock"]
    assert kit.get(META_TOOL_NAME) is None


def test_tools_naming_a_group_join_it() -> None:
    @tool(group="returns")
    def return_status(return_id: str) -> str:
        return return_id

    kit = Toolkit([return_status, query_stock])
    kit.add(create_return, group="returns")
    assert kit.groups == {"returns": False}
    kit.activate("returns")
    assert names(kit.visible_tools()) == [
        "return_status",
        "query_stock",
        "create_return",
        META_TOOL_NAME,
    ]


def test_meta_tool_lists_groups_with_their_descriptions() -> None:
    kit = Toolkit()
    kit.add_group("billing", "Invoices and refunds.", [list_invoices])
    kit.add_group("售后", "退货与换货。", [create_return], active=True)
    meta = kit.schemas()[-1]["function"]
    assert meta["name"] == META_TOOL_NAME
    assert "- billing (inactive): Invoices and refunds." in meta["description"]
    assert "- 售后 (active): 退货与换货。" in meta["description"]
    assert set(meta["parameters"]["properties"]) == {"group", "active"}
    assert meta["parameters"]["required"] == ["group"]


async def test_the_model_switches_a_group_on_through_the_meta_tool() -> None:
    kit = Toolkit([query_stock])
    kit.add_group("billing", "Invoices and refunds.", [list_invoices])
    before = kit.schemas()
    result = await kit.call(call(META_TOOL_NAME, '{"group": "billing"}'), USER_RUN)
    assert not result.is_error
    assert "Tool group 'billing' is now on" in result.content
    assert "list_invoices" in result.content and "query_stock" in result.content
    after = kit.schemas()
    assert after is not before
    assert "list_invoices" in [s["function"]["name"] for s in after]
    assert "- billing (active)" in after[-1]["function"]["description"]

    off = await kit.call(call(META_TOOL_NAME, '{"group": "billing", "active": false}'), USER_RUN)
    assert "now off" in off.content
    assert "list_invoices" not in [s["function"]["name"] for s in kit.schemas()]


async def test_the_meta_tool_rejects_an_unknown_group() -> None:
    kit = Toolkit()
    kit.add_group("billing", "Invoices.", [list_invoices])
    result = await kit.call(call(META_TOOL_NAME, '{"group": "hr"}'), USER_RUN)
    assert result.is_error
    assert "unknown tool group 'hr'; groups: billing" in result.content


async def test_calling_a_tool_of_an_inactive_group_says_how_to_switch_it_on() -> None:
    kit = Toolkit()
    kit.add_group("billing", "Invoices.", [list_invoices])
    result = await kit.call(call("list_invoices", '{"customer": "c1"}'), USER_RUN)
    assert result.is_error
    assert "group 'billing', which is not active" in result.content
    assert META_TOOL_NAME in result.content


def test_copies_keep_their_own_group_state() -> None:
    kit = Toolkit()
    kit.add_group("billing", "Invoices.", [list_invoices])
    mine = kit.copy()
    mine.activate("billing")
    assert kit.groups == {"billing": False}
    assert "list_invoices" in names(mine.visible_tools())


async def test_a_successful_call_returns_the_content_and_citations() -> None:
    @tool(read_only=True)
    def warranty() -> ToolOutput:
        return ToolOutput(
            content="保修期为两年 [1]", citations=(Citation(index=1, source="warranty.md"),)
        )

    kit = Toolkit([query_stock, warranty])
    result = await kit.call(call("query_stock", '{"sku": "SKU2024-011"}'), USER_RUN)
    assert (result.call_id, result.name, result.is_error) == ("call-1", "query_stock", False)
    assert result.content == "SKU2024-011: 12 in stock"
    cited = await kit.call(call("warranty"), USER_RUN)
    assert cited.content == "保修期为两年 [1]"
    assert cited.citations[0].source == "warranty.md"


async def test_an_unknown_tool_lists_the_available_ones() -> None:
    kit = Toolkit([query_stock, create_return])
    result = await kit.call(call("send_email"), USER_RUN)
    assert result.is_error
    assert (
        result.content == "unknown tool 'send_email'. Available tools: query_stock, create_return."
    )


async def test_a_tool_the_caller_may_not_use_looks_unknown() -> None:
    kit = Toolkit([query_stock, delete_order])
    result = await kit.call(call("delete_order", '{"order_id": "SO-1"}'), USER_RUN)
    assert result.is_error
    assert result.content == "unknown tool 'delete_order'. Available tools: query_stock."
    allowed = await kit.call(call("delete_order", '{"order_id": "SO-1"}'), ADMIN_RUN)
    assert allowed.content == "deleted SO-1"


async def test_bad_json_arguments_are_reported() -> None:
    kit = Toolkit([query_stock])
    result = await kit.call(call("query_stock", '{"sku": '), USER_RUN)
    assert result.is_error
    assert result.content.startswith("arguments for tool query_stock are not valid JSON")


async def test_arguments_that_are_not_an_object_are_reported() -> None:
    kit = Toolkit([query_stock])
    result = await kit.call(call("query_stock", '["SKU-1"]'), USER_RUN)
    assert result.is_error
    assert "must be a JSON object of named arguments, not an array" in result.content


async def test_invalid_arguments_are_reported_field_by_field() -> None:
    kit = Toolkit([create_return])
    result = await kit.call(call("create_return", '{"order_id": 17}'), USER_RUN)
    assert result.is_error
    assert "invalid arguments for tool create_return" in result.content
    assert "order_id: Input should be a valid string (got 17)" in result.content
    assert "reason: missing (required)" in result.content


async def test_a_failing_tool_becomes_an_error_result() -> None:
    @tool
    def broken(sku: str) -> str:
        raise RuntimeError(f"database is locked for {sku}")

    @tool
    async def flaky() -> str:
        raise TransientToolError("upstream returned 503")

    kit = Toolkit([broken, flaky])
    result = await kit.call(call("broken", '{"sku": "A"}'), USER_RUN)
    assert result.is_error
    assert result.content == "tool broken failed: RuntimeError: database is locked for A"
    flaky_result = await kit.call(call("flaky"), USER_RUN)
    assert flaky_result.content == "tool flaky failed: TransientToolError: upstream returned 503"


async def test_an_async_tool_past_its_timeout_is_abandoned() -> None:
    never = anyio.Event()

    @tool(timeout=0.05)
    async def hang() -> str:
        await never.wait()
        return "unreachable"

    kit = Toolkit([hang])
    with anyio.fail_after(5):
        result = await kit.call(call("hang"), USER_RUN)
    assert result.is_error
    assert result.content == "tool hang failed: timed out after 0.05 s"


async def test_a_sync_tool_past_its_timeout_is_abandoned() -> None:
    release = threading.Event()

    @tool(timeout=0.05)
    def block() -> str:
        release.wait(5)
        return "late"

    kit = Toolkit([block])
    try:
        with anyio.fail_after(5):
            result = await kit.call(call("block"), USER_RUN)
    finally:
        release.set()
    assert result.content == "tool block failed: timed out after 0.05 s"


async def test_a_tool_that_raises_timeout_error_itself_is_not_called_a_timeout() -> None:
    @tool(timeout=5)
    def slow_upstream() -> str:
        raise TimeoutError("upstream took too long")

    kit = Toolkit([slow_upstream])
    result = await kit.call(call("slow_upstream"), USER_RUN)
    assert result.content == "tool slow_upstream failed: TimeoutError: upstream took too long"


async def test_external_tools_are_never_executed_by_the_toolkit() -> None:
    ran: list[str] = []

    @tool(external=True)
    def confirm_with_human(question: str) -> str:
        ran.append(question)
        return "yes"

    kit = Toolkit([confirm_with_human])
    assert "confirm_with_human" in names(kit.visible_tools())
    result = await kit.call(call("confirm_with_human", '{"question": "退货吗？"}'), USER_RUN)
    assert result.is_error
    assert "external" in result.content
    assert ran == []


def test_concurrency_safety_of_a_batch_of_calls() -> None:
    kit = Toolkit([query_stock, list_invoices, create_return])
    assert kit.is_concurrency_safe(["query_stock", "list_invoices"])
    assert not kit.is_concurrency_safe(["query_stock", "create_return"])
    assert kit.is_concurrency_safe(["query_stock", "no_such_tool"])


def test_the_meta_tool_name_is_reserved() -> None:
    @tool(name=META_TOOL_NAME)
    def imposter(group: str) -> str:
        return group

    with pytest.raises(ValueError, match="reserved"):
        Toolkit([imposter])


async def test_a_call_s_report_is_the_frozen_dataclass_with_every_field() -> None:
    # built as a twin (shelfhand.core.slots): it must be the dataclass its constructor makes
    import dataclasses
    import pickle

    from shelfhand.tools.toolkit import CallReport

    kit = Toolkit([query_stock])
    report = await kit.execute(call("query_stock", '{"sku": "A-1"}'), USER_RUN)
    assert type(report) is CallReport
    same = CallReport(**{f.name: getattr(report, f.name) for f in dataclasses.fields(report)})
    assert report == same and repr(report) == repr(same)
    assert (report.decision, report.outcome, report.attempts) == ("allow", "ok", 1)
    assert report.request_id and report.duration_ms >= 0
    assert pickle.loads(pickle.dumps(report)) == report
    assert dataclasses.replace(report, attempts=2).attempts == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.outcome = "error"  # type: ignore[misc]
