"""The governance pipeline, driven through the agent and the scripted model (docs/design.md T5)."""

from __future__ import annotations

import asyncio
import threading

import anyio
import httpx
import pytest
from governance_helpers import FakeClock, governance

from shelfhand import Agent, Toolkit, UserContext, tool
from shelfhand.core.context import RunContext
from shelfhand.core.errors import ToolArgumentError, TransientToolError
from shelfhand.core.events import ToolFinished
from shelfhand.core.messages import ToolCallBlock, ToolResultBlock
from shelfhand.testing import ScriptedModel, text, tool_call
from shelfhand.tools.governance import GovernancePolicy, is_transient
from shelfhand.tools.limits import parse_rate

pytestmark = pytest.mark.anyio

ALICE = UserContext(tenant_id="acme", user_id="alice")
BOB = UserContext(tenant_id="acme", user_id="bob")
ALICE_ELSEWHERE = UserContext(tenant_id="globex", user_id="alice")


def tool_results(result: object) -> list[ToolResultBlock]:
    return [r for m in result.messages for r in m.tool_results]  # type: ignore[attr-defined]


async def test_a_sleeping_tool_times_out_and_the_run_goes_on() -> None:
    never = anyio.Event()

    @tool(read_only=True, timeout=0.05)
    async def slow_stock(sku: str) -> str:
        """Check stock (hangs)."""
        await never.wait()
        return "unreachable"

    model = ScriptedModel(
        [tool_call("slow_stock", {"sku": "SKU2024-011"}), text("库存系统超时了。")]
    )
    with anyio.fail_after(5):
        result = await Agent(model=model, toolkit=Toolkit([slow_stock])).run("有货吗？")
    [res] = tool_results(result)
    assert res.is_error and res.content == "tool slow_stock failed: timed out after 0.05 s"
    assert result.output == "库存系统超时了。"
    # the model read the timeout on its next turn
    assert "timed out" in str(model.requests[1][-1])


async def test_the_toolkit_default_timeout_abandons_a_blocked_sync_tool() -> None:
    release = threading.Event()

    @tool
    def block_forever() -> str:
        """Blocks its worker thread."""
        release.wait(5)
        return "late"

    kit = Toolkit([block_forever], policy=GovernancePolicy(timeout=0.05))
    model = ScriptedModel([tool_call("block_forever", {}), text("gave up")])
    try:
        with anyio.fail_after(5):
            result = await Agent(model=model, toolkit=kit).run("go")
    finally:
        release.set()
    assert tool_results(result)[0].content == "tool block_forever failed: timed out after 0.05 s"
    assert result.output == "gave up"


async def test_a_flaky_read_only_tool_succeeds_on_attempt_three(clock: FakeClock) -> None:
    attempts: list[str] = []

    @tool(read_only=True)
    def warranty_lookup(sku: str) -> str:
        """Warranty of a product."""
        attempts.append(sku)
        if len(attempts) < 3:
            raise ConnectionError("warranty service reset the connection")
        return "保修两年"

    kit = Toolkit([warranty_lookup], governance=governance(clock))
    model = ScriptedModel([tool_call("warranty_lookup", {"sku": "P-1"}), text("保修两年。")])
    events = [e async for e in Agent(model=model, toolkit=kit).stream("保修多久？")]
    assert attempts == ["P-1", "P-1", "P-1"]
    finished = [e for e in events if isinstance(e, ToolFinished)]
    assert finished[0].content == "保修两年" and not finished[0].is_error
    assert clock.slept == [0.2, 0.4]  # exponential backoff from 200 ms


async def test_retries_give_up_after_three_attempts_with_a_clear_message(
    clock: FakeClock,
) -> None:
    calls = 0

    @tool(read_only=True)
    async def quote_price(sku: str, quantity: int) -> str:
        """Quote a price."""
        nonlocal calls
        calls += 1
        raise TransientToolError("pricing service returned 503")

    kit = Toolkit([quote_price], governance=governance(clock))
    model = ScriptedModel(
        [tool_call("quote_price", {"sku": "SKU2024-011", "quantity": 2}), text("稍后再试")]
    )
    result = await Agent(model=model, toolkit=kit).run("报个价")
    assert calls == 3
    assert tool_results(result)[0].content == (
        "tool quote_price failed after 3 attempts: TransientToolError: pricing service returned 503"
    )


async def test_a_failing_write_tool_is_called_exactly_once(clock: FakeClock) -> None:
    calls = 0

    @tool
    def create_return(order_id: str, reason: str) -> str:
        """Create a return (a write)."""
        nonlocal calls
        calls += 1
        raise ConnectionError("returns service unreachable")

    kit = Toolkit([create_return], governance=governance(clock))
    model = ScriptedModel(
        [tool_call("create_return", {"order_id": "SO-1", "reason": "broken"}), text("failed")]
    )
    result = await Agent(model=model, toolkit=kit).run("return it")
    assert calls == 1
    assert clock.slept == []
    assert tool_results(result)[0].content == (
        "tool create_return failed: ConnectionError: returns service unreachable"
    )


async def test_an_idempotent_write_is_retried_but_a_permanent_error_is_not(
    clock: FakeClock,
) -> None:
    tries: list[str] = []

    @tool(idempotent=True)
    def set_address(order_id: str, address: str) -> str:
        """Set the delivery address (idempotent)."""
        tries.append(order_id)
        if order_id == "SO-bad":
            raise ValueError("no such order")
        if len(tries) < 2:
            raise TimeoutError("upstream took too long")
        return "ok"

    kit = Toolkit([set_address], governance=governance(clock))
    model = ScriptedModel(
        [
            tool_call("set_address", {"order_id": "SO-1", "address": "上海"}),
            tool_call("set_address", {"order_id": "SO-bad", "address": "上海"}),
            text("done"),
        ]
    )
    result = await Agent(model=model, toolkit=kit).run("go")
    ok, bad = tool_results(result)
    assert ok.content == "ok"
    assert bad.content == "tool set_address failed: ValueError: no such order"
    assert tries == ["SO-1", "SO-1", "SO-bad"]


def test_transient_errors_are_network_errors_429_and_5xx_only() -> None:
    request = httpx.Request("GET", "http://127.0.0.1/stock")

    def status(code: int) -> httpx.HTTPStatusError:
        response = httpx.Response(code, request=request)
        return httpx.HTTPStatusError("status", request=request, response=response)

    assert is_transient(status(429)) and is_transient(status(503))
    assert not is_transient(status(400)) and not is_transient(status(404))
    assert is_transient(httpx.ConnectError("refused", request=request))
    assert is_transient(ConnectionResetError()) and is_transient(TimeoutError())
    assert is_transient(TransientToolError("try later"))
    assert not is_transient(ValueError("bad")) and not is_transient(ToolArgumentError("x"))


async def test_the_breaker_opens_fails_fast_half_opens_and_closes(clock: FakeClock) -> None:
    healthy = False
    executed = 0

    @tool(read_only=True, retries=0, cache_ttl=0)
    def order_status(order_id: str) -> str:
        """Status of an order."""
        nonlocal executed
        executed += 1
        if not healthy:
            raise ConnectionError("order service down")
        return f"{order_id}: shipped"

    kit = Toolkit([order_status], governance=governance(clock, breaker_min_calls=3))
    turns = [tool_call("order_status", {"order_id": f"SO-{i}"}) for i in range(4)]
    model = ScriptedModel([*turns, text("down")])
    result = await Agent(model=model, toolkit=kit).run("status?")
    contents = [r.content for r in tool_results(result)]
    assert executed == 3  # the fourth call failed fast
    assert contents[:3] == ["tool order_status failed: ConnectionError: order service down"] * 3
    assert contents[3].startswith("tool order_status unavailable: circuit open")
    # what people may read of it: the exception's class, the circuit without the advice
    assert [r.failure for r in tool_results(result)] == [
        *["failed: ConnectionError"] * 3,
        "unavailable: circuit open after repeated failures",
    ]
    assert "retry in about 30 s" in contents[3]
    breaker = kit.governance.breaker("order_status")
    assert breaker is not None and breaker.state == "open"

    clock.advance(29)
    still = await kit.call(tool_call_block("order_status", '{"order_id": "SO-9"}'), run_for(ALICE))
    assert still.content.startswith("tool order_status unavailable") and executed == 3

    clock.advance(1)  # 30 s after opening: one trial call goes through
    healthy = True
    model = ScriptedModel(
        [
            tool_call("order_status", {"order_id": "SO-5"}),
            tool_call("order_status", {"order_id": "SO-6"}),
            text("ok"),
        ]
    )
    result = await Agent(model=model, toolkit=kit).run("status?")
    assert [r.content for r in tool_results(result)] == ["SO-5: shipped", "SO-6: shipped"]
    assert breaker.state == "closed" and executed == 5


async def test_a_failed_trial_call_opens_the_breaker_again(clock: FakeClock) -> None:
    @tool(retries=0)
    def notify(text: str) -> str:
        """Send a notification."""
        raise ConnectionError("smtp down")

    kit = Toolkit([notify], governance=governance(clock, breaker_min_calls=2))
    run = run_for(ALICE)
    for _ in range(2):
        await kit.call(tool_call_block("notify", '{"text": "hi"}'), run)
    breaker = kit.governance.breaker("notify")
    assert breaker is not None and breaker.state == "open"
    clock.advance(30)
    trial = await kit.call(tool_call_block("notify", '{"text": "hi"}'), run)
    assert trial.content == "tool notify failed: ConnectionError: smtp down"
    assert breaker.state == "open"
    again = await kit.call(tool_call_block("notify", '{"text": "hi"}'), run)
    assert again.content.startswith("tool notify unavailable: circuit open")


async def test_bad_arguments_do_not_count_against_the_breaker(clock: FakeClock) -> None:
    @tool(read_only=True)
    def query_stock(sku: str) -> str:
        """Stock."""
        return "12"

    kit = Toolkit([query_stock], governance=governance(clock, breaker_min_calls=1))
    bad = await kit.call(tool_call_block("query_stock", '{"sku": 5}'), run_for(ALICE))
    assert bad.is_error and "invalid arguments" in bad.content
    breaker = kit.governance.breaker("query_stock")
    assert breaker is not None and breaker.state == "closed"


async def test_ten_identical_concurrent_read_only_calls_execute_once() -> None:
    release = asyncio.Event()
    executions = 0

    @tool(read_only=True)
    async def query_stock(sku: str) -> str:
        """Stock of a SKU."""
        nonlocal executions
        executions += 1
        await release.wait()
        return f"{sku}: 12 in stock"

    kit = Toolkit([query_stock])
    args = {"sku": "SKU2024-011"}
    model = ScriptedModel([[tool_call("query_stock", args) for _ in range(10)], text("有货")])
    agent = Agent(model=model, toolkit=kit, max_concurrency=10)
    events: list[object] = []

    async def consume() -> None:
        events.extend([e async for e in agent.stream("有货吗", context=ALICE)])

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            while kit.governance.waiting("query_stock", ALICE, args) < 9:
                await anyio.sleep(0)
            release.set()
    assert executions == 1
    finished = [e for e in events if isinstance(e, ToolFinished)]
    assert [e.content for e in finished] == ["SKU2024-011: 12 in stock"] * 10


async def test_identical_calls_of_different_callers_are_not_shared() -> None:
    release = asyncio.Event()
    executions: list[str] = []

    @tool(read_only=True)
    async def my_orders(user: UserContext) -> str:
        """The caller's orders."""
        executions.append(user.user_id)
        await release.wait()
        return f"orders of {user.user_id}"

    kit = Toolkit([my_orders])
    results: dict[str, str] = {}

    async def call_as(user: UserContext) -> None:
        res = await kit.call(tool_call_block("my_orders", "{}"), run_for(user))
        results[user.user_id] = res.content

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(call_as, ALICE)
            tg.start_soon(call_as, BOB)
            while len(executions) < 2:
                await anyio.sleep(0)
            release.set()
    assert results == {"alice": "orders of alice", "bob": "orders of bob"}


async def test_user_a_cached_result_is_never_returned_to_user_b(clock: FakeClock) -> None:
    executions: list[str] = []

    @tool(read_only=True, cache_ttl=300)
    def query_order(user: UserContext, order_id: str) -> str:
        """One of the caller's orders."""
        executions.append(f"{user.tenant_id}/{user.user_id}")
        return f"{order_id} belongs to {user.user_id}@{user.tenant_id}"

    kit = Toolkit([query_order], governance=governance(clock))

    async def ask(user: UserContext) -> ToolFinished:
        model = ScriptedModel([tool_call("query_order", {"order_id": "SO-1"}), text("ok")])
        events = [e async for e in Agent(model=model, toolkit=kit).stream("订单", context=user)]
        return next(e for e in events if isinstance(e, ToolFinished))

    first = await ask(ALICE)
    again = await ask(ALICE)
    assert (first.replayed, again.replayed) == (False, True)
    assert again.content == "SO-1 belongs to alice@acme"
    bob = await ask(BOB)
    other_tenant = await ask(ALICE_ELSEWHERE)
    assert not bob.replayed and bob.content == "SO-1 belongs to bob@acme"
    assert not other_tenant.replayed and other_tenant.content == "SO-1 belongs to alice@globex"
    assert executions == ["acme/alice", "acme/bob", "globex/alice"]

    clock.advance(301)  # past the declared 5-minute TTL
    expired = await ask(ALICE)
    assert not expired.replayed and executions[-1] == "acme/alice"


async def test_errors_and_write_results_are_never_cached(clock: FakeClock) -> None:
    calls = 0

    @tool
    def create_ticket(title: str) -> str:
        """Open a ticket (a write)."""
        nonlocal calls
        calls += 1
        return f"T-{calls}"

    kit = Toolkit([create_ticket], governance=governance(clock))
    run = run_for(ALICE)
    first = await kit.call(tool_call_block("create_ticket", '{"title": "E-203"}'), run)
    second = await kit.call(tool_call_block("create_ticket", '{"title": "E-203"}'), run)
    assert (first.content, second.content) == ("T-1", "T-2")


async def test_a_rate_limited_caller_gets_an_error_and_another_caller_does_not(
    clock: FakeClock,
) -> None:
    @tool(read_only=True, rate_limit="2/minute", cache_ttl=0)
    def query_stock(sku: str) -> str:
        """Stock of a SKU."""
        return f"{sku}: 12"

    kit = Toolkit([query_stock], governance=governance(clock))

    async def ask(user: UserContext, n: int) -> list[str]:
        turns = [tool_call("query_stock", {"sku": f"S-{i}"}) for i in range(n)]
        model = ScriptedModel([*turns, text("ok")])
        result = await Agent(model=model, toolkit=kit).run("stock", context=user)
        return [r.content for r in tool_results(result)]

    alice = await ask(ALICE, 3)
    assert alice[:2] == ["S-0: 12", "S-1: 12"]
    assert alice[2] == (
        "tool query_stock rate limited: at most 2/minute for each caller; try again in 30.0 s"
    )
    limited = await kit.call(tool_call_block("query_stock", '{"sku": "S-9"}'), run_for(ALICE))
    assert limited.failure == "rate limited: at most 2/minute for each caller"
    assert await ask(BOB, 1) == ["S-0: 12"]
    clock.advance(30)  # one token refilled
    assert await ask(ALICE, 1) == ["S-0: 12"]


async def test_a_total_rate_limit_covers_every_caller(clock: FakeClock) -> None:
    @tool(read_only=True, total_rate_limit="1/second", cache_ttl=0)
    def ping() -> str:
        """Ping."""
        return "pong"

    kit = Toolkit([ping], governance=governance(clock))
    assert (await kit.call(tool_call_block("ping", "{}"), run_for(ALICE))).content == "pong"
    limited = await kit.call(tool_call_block("ping", "{}"), run_for(BOB))
    assert limited.is_error and "for all callers" in limited.content


async def test_one_reply_never_runs_more_than_eight_calls_at_once() -> None:
    active = peak = 0
    full = asyncio.Event()

    @tool(read_only=True)
    async def probe(i: int) -> int:
        """Probe."""
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        if active == 8:
            full.set()
        await full.wait()
        active -= 1
        return i

    model = ScriptedModel([[tool_call("probe", {"i": i}) for i in range(20)], text("ok")])
    with anyio.fail_after(5):
        result = await Agent(model=model, toolkit=Toolkit([probe])).run("go")
    assert peak == 8
    assert [r.content for r in tool_results(result)] == [str(i) for i in range(20)]


def test_tool_attributes_and_policies_are_checked_at_decoration() -> None:
    def f() -> str:
        return ""

    with pytest.raises(ValueError, match="30/minute"):
        tool(rate_limit="thirty per minute")(f)
    with pytest.raises(ValueError, match="retries"):
        tool(retries=-1)(f)
    with pytest.raises(ValueError, match="cache_ttl"):
        tool(cache_ttl=-5)(f)
    with pytest.raises(ValueError):
        GovernancePolicy(breaker_failure_rate=0)
    assert parse_rate("30/minute").period == 60 and parse_rate("5 / s").calls == 5
    assert parse_rate("100/hours").period == 3600


def test_a_toolkit_copy_shares_governance_state() -> None:
    kit = Toolkit(policy=GovernancePolicy(timeout=1))
    assert kit.copy().governance is kit.governance
    with pytest.raises(ValueError, match="either governance"):
        Toolkit(policy=GovernancePolicy(), governance=kit.governance)


# --- small helpers ---------------------------------------------------------------------------
def tool_call_block(name: str, arguments: str) -> ToolCallBlock:
    return ToolCallBlock(id="c1", name=name, arguments=arguments)


def run_for(user: UserContext) -> RunContext:
    return RunContext(user=user)


def test_permission_decisions_are_data_and_denied_tools_are_hidden() -> None:
    @tool(read_only=True)
    def query_stock(sku: str) -> str:
        """Stock."""
        return "12"

    @tool(permission="admin")
    def delete_order(order_id: str) -> str:
        """Delete an order."""
        return "deleted"

    @tool(confirm=True)
    def create_return(order_id: str) -> str:
        """Create a return."""
        return "ok"

    admin = UserContext(tenant_id="acme", user_id="root", roles=["admin"])
    kit = Toolkit([query_stock, delete_order, create_return])
    assert kit.decide("query_stock", ALICE) == "allow"
    assert kit.decide("delete_order", ALICE) == "deny"
    assert kit.decide("delete_order", admin) == "allow"
    assert kit.decide("create_return", ALICE) == "ask"
    assert kit.decide("no_such_tool", ALICE) == "deny"
    offered = [s["function"]["name"] for s in kit.schemas(ALICE)]
    assert offered == ["query_stock", "create_return"]


async def test_concurrent_calls_each_time_out_at_their_own_deadline() -> None:
    never = asyncio.Event()

    @tool(read_only=True, timeout=0.2)
    async def slow_report(name: str) -> str:
        """Hangs for good."""
        await never.wait()
        return "unreachable"

    @tool(read_only=True, timeout=0.05)
    async def quick_hang(name: str) -> str:
        """Hangs, with a shorter timeout."""
        await never.wait()
        return "unreachable"

    @tool(read_only=True)
    async def instant(name: str) -> str:
        """Answers at once."""
        return f"hi {name}"

    @tool(read_only=True, timeout=0.05)
    async def stubborn(name: str) -> str:
        """Swallows its cancellation and answers late."""
        try:
            await never.wait()
        except asyncio.CancelledError:
            return "late answer"
        return "unreachable"

    kit = Toolkit([slow_report, quick_hang, instant, stubborn])
    run = run_for(ALICE)
    results: dict[str, str] = {}

    async def call(name: str) -> None:
        res = await kit.call(tool_call_block(name, '{"name": "x"}'), run)
        results[name] = res.content

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for name in ("slow_report", "quick_hang", "instant", "stubborn"):
                tg.start_soon(call, name)
    assert results == {
        "slow_report": "tool slow_report failed: timed out after 0.2 s",
        "quick_hang": "tool quick_hang failed: timed out after 0.05 s",
        "instant": "hi x",
        "stubborn": "tool stubborn failed: timed out after 0.05 s",
    }
    # the task that ran the calls is not left half-cancelled
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
