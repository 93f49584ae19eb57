"""The result cache is opt-in: nothing is reused unless a tool declares ``cache_ttl`` (T5)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from governance_helpers import FakeClock, governance

from shelfhand import Toolkit, UserContext, tool
from shelfhand.core.context import RunContext
from shelfhand.core.messages import ToolCallBlock
from shelfhand.tools import builtins
from shelfhand.tools.builtins import current_time

pytestmark = pytest.mark.anyio

ALICE = RunContext(user=UserContext(tenant_id="acme", user_id="alice"))


def call(name: str, arguments: str = "{}") -> ToolCallBlock:
    return ToolCallBlock(id="c1", name=name, arguments=arguments)


async def test_a_read_only_tool_without_cache_ttl_executes_every_time(clock: FakeClock) -> None:
    versions = iter(["version 1", "version 2"])

    @tool(read_only=True, idempotent=True)
    def read_file(path: str) -> str:
        """Read a file."""
        return next(versions)

    kit = Toolkit([read_file], governance=governance(clock))
    first = await kit.execute(call("read_file", '{"path": "notes.txt"}'), ALICE)
    second = await kit.execute(call("read_file", '{"path": "notes.txt"}'), ALICE)
    assert (first.result.content, second.result.content) == ("version 1", "version 2")
    assert not first.replayed and not second.replayed
    assert kit.governance.plan(read_file).cache_ttl == 0


async def test_a_declared_cache_ttl_reuses_the_result_until_it_expires(clock: FakeClock) -> None:
    executions = 0

    @tool(read_only=True, cache_ttl=10)
    def exchange_rate(pair: str) -> str:
        """Exchange rate of a currency pair."""
        nonlocal executions
        executions += 1
        return f"{pair}=7.{executions}"

    kit = Toolkit([exchange_rate], governance=governance(clock))
    first = await kit.execute(call("exchange_rate", '{"pair": "USD/CNY"}'), ALICE)
    again = await kit.execute(call("exchange_rate", '{"pair": "USD/CNY"}'), ALICE)
    assert again.replayed and again.result.content == first.result.content == "USD/CNY=7.1"
    clock.advance(10)
    fresh = await kit.execute(call("exchange_rate", '{"pair": "USD/CNY"}'), ALICE)
    assert not fresh.replayed and fresh.result.content == "USD/CNY=7.2"


async def test_current_time_called_twice_gives_two_values(monkeypatch: pytest.MonkeyPatch) -> None:
    start = datetime(2026, 11, 30, 9, 0, 0, tzinfo=UTC)
    ticks = iter([start, start + timedelta(seconds=1)])

    class TickingClock:
        @staticmethod
        def now(tz: Any = None) -> datetime:
            return next(ticks).astimezone(tz)

    monkeypatch.setattr(builtins, "datetime", TickingClock)
    kit = Toolkit([current_time])
    first = await kit.execute(call("current_time", '{"timezone": "Asia/Shanghai"}'), ALICE)
    second = await kit.execute(call("current_time", '{"timezone": "Asia/Shanghai"}'), ALICE)
    assert first.result.content.startswith("2026-11-30T17:00:00+08:00")
    assert second.result.content.startswith("2026-11-30T17:00:01+08:00")
    assert not first.replayed and not second.replayed


def test_cache_ttl_is_refused_on_a_tool_that_writes() -> None:
    def create_ticket(title: str) -> str:
        """Open a ticket."""
        return "T-1"

    with pytest.raises(ValueError, match="cache_ttl needs read_only=True"):
        tool(cache_ttl=60)(create_ticket)
    assert tool(cache_ttl=0)(create_ticket).cache_ttl == 0  # 0 says "never": always fine


def test_the_toolkit_policy_has_no_default_ttl() -> None:
    from shelfhand.tools.governance import GovernancePolicy

    with pytest.raises(TypeError):
        GovernancePolicy(cache_ttl=300)  # type: ignore[call-arg]
