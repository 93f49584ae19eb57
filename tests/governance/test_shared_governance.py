"""Governance state shared by replicas in a real Redis: rate limits, circuit breakers, the
result cache and its single-flight. Each "replica" is a Governance of its own, with its own
Redis connection; what one does, the other sees."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from governance_helpers import LoopTicks

from shelfhand import Toolkit, UserContext, tool
from shelfhand.backends.redis import open_redis
from shelfhand.core.context import RunContext
from shelfhand.core.errors import DependencyUnavailableError
from shelfhand.core.messages import ToolCallBlock
from shelfhand.dev.services import free_port, start_redis
from shelfhand.tools.governance import Governance, GovernancePolicy
from shelfhand.tools.redis_state import RedisGovernanceState

pytestmark = pytest.mark.anyio

ALICE = RunContext(user=UserContext(tenant_id="acme", user_id="alice"))
BOB = RunContext(user=UserContext(tenant_id="globex", user_id="alice"))  # same id, other tenant


def call(name: str, arguments: str = "{}") -> ToolCallBlock:
    return ToolCallBlock(id="c1", name=name, arguments=arguments)


@tool(rate_limit="5/minute")
def send_sms(text: str) -> str:
    """Send a text message."""
    return "sent"


@tool(read_only=True, cache_ttl=60)
def exchange_rate(pair: str) -> str:
    """Exchange rate of a currency pair."""
    return f"{pair}=7.1"


def replica(redis_url: str, **policy: object) -> Governance:
    shared = RedisGovernanceState(open_redis(redis_url), poll_interval=0.02)
    return Governance(GovernancePolicy(**policy), shared=shared)  # type: ignore[arg-type]


async def test_a_rate_limit_holds_across_replicas_per_caller(redis_url: str) -> None:
    @tool(rate_limit="2/hour")
    def send_sms(text: str) -> str:
        """Send a text message."""
        return f"sent {text}"

    a = Toolkit([send_sms], governance=replica(redis_url))
    b = Toolkit([send_sms], governance=replica(redis_url))
    assert not (await a.execute(call("send_sms", '{"text": "一"}'), ALICE)).result.is_error
    assert not (await b.execute(call("send_sms", '{"text": "二"}'), ALICE)).result.is_error
    third = await a.execute(call("send_sms", '{"text": "三"}'), ALICE)
    assert third.outcome == "rate_limited" and "at most 2/hour" in third.result.content
    again = await b.execute(call("send_sms", '{"text": "三"}'), ALICE)
    assert again.outcome == "rate_limited"
    # keyed by caller scope as in one process: another tenant's alice has her own bucket
    assert (await b.execute(call("send_sms", '{"text": "x"}'), BOB)).outcome == "ok"


async def test_failures_on_one_replica_open_the_breaker_for_the_other(redis_url: str) -> None:
    runs = 0

    @tool(read_only=True, retries=0)
    def inventory(sku: str) -> str:
        """Stock level of a product."""
        nonlocal runs
        runs += 1
        raise ConnectionError("warehouse service refused the connection")

    policy = {"breaker_min_calls": 2, "breaker_failure_rate": 0.5, "breaker_reset_after": 600}
    a = Toolkit([inventory], governance=replica(redis_url, **policy))
    b = Toolkit([inventory], governance=replica(redis_url, **policy))
    for n in range(2):
        failed = await a.execute(call("inventory", f'{{"sku": "P{n}"}}'), ALICE)
        assert failed.outcome == "error"
    blocked = await b.execute(call("inventory", '{"sku": "P9"}'), ALICE)
    assert blocked.outcome == "circuit_open" and "unavailable" in blocked.result.content
    assert runs == 2  # replica B never ran it
    breaker = b.governance.breaker("inventory")
    assert breaker is not None and breaker.state == "open"


class GatedRate:
    """A cached ``exchange_rate`` that counts its runs and answers once released."""

    def __init__(self) -> None:
        self.runs = 0
        self.release = asyncio.Event()

        @tool(read_only=True, cache_ttl=60, timeout=20)
        async def exchange_rate(pair: str) -> str:
            """Exchange rate of a currency pair."""
            self.runs += 1
            await self.release.wait()
            return f"{pair}=7.{self.runs}"

        self.tool = exchange_rate

    async def asked_by_both(
        self, a: Toolkit, b: Toolkit, pair: str
    ) -> tuple[asyncio.Task[Any], asyncio.Task[Any]]:
        """``a`` asks first; once its call runs, ``b`` asks the same."""
        arguments = json.dumps({"pair": pair})
        first = asyncio.create_task(a.execute(call("exchange_rate", arguments), ALICE))
        while self.runs == 0:  # replica A is computing
            await asyncio.sleep(0.01)
        return first, asyncio.create_task(b.execute(call("exchange_rate", arguments), ALICE))


async def test_a_cached_call_runs_once_across_replicas_and_others_wait_for_it(
    redis_url: str,
) -> None:
    rate = GatedRate()
    a = Toolkit([rate.tool], governance=replica(redis_url))
    b = Toolkit([rate.tool], governance=replica(redis_url))
    first, second = await rate.asked_by_both(a, b, "USD/CNY")
    await asyncio.sleep(0.2)
    assert not second.done()  # B waits for A's result instead of running the tool
    rate.release.set()
    one, two = await first, await second
    assert rate.runs == 1
    assert one.result.content == two.result.content == "USD/CNY=7.1"
    assert two.shared and not two.replayed
    later = await b.execute(call("exchange_rate", '{"pair": "USD/CNY"}'), ALICE)
    assert later.replayed and later.result.content == "USD/CNY=7.1"
    other = await b.execute(call("exchange_rate", '{"pair": "USD/CNY"}'), BOB)
    assert not other.replayed and rate.runs == 2  # the cache is per caller, as in one process


class SlowCachePut(RedisGovernanceState):
    """A Redis whose writes of a result take a while (a loaded server, a far network)."""

    def cache_put(self, key: tuple[str, str, str], output: object, ttl: float) -> None:
        time.sleep(0.3)
        super().cache_put(key, output, ttl)  # type: ignore[arg-type]


async def test_a_replica_waiting_on_a_lead_that_ends_finds_the_result_not_a_second_run(
    redis_url: str,
) -> None:
    # CI once saw B run the tool again: the leader ended its lead before its result was in
    # the cache, and B, finding neither, took the lead. The result goes in first now.
    rate = GatedRate()
    slow = SlowCachePut(open_redis(redis_url), poll_interval=0.02)
    a = Toolkit([rate.tool], governance=Governance(GovernancePolicy(), shared=slow))
    b = Toolkit([rate.tool], governance=replica(redis_url))
    first, second = await rate.asked_by_both(a, b, "EUR/CNY")
    await asyncio.sleep(0.1)
    rate.release.set()
    one, two = await first, await second
    assert rate.runs == 1
    assert one.result.content == two.result.content == "EUR/CNY=7.1"
    assert two.shared


async def test_without_redis_the_cache_degrades_but_guards_fail_closed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    down = RedisGovernanceState(
        open_redis(f"redis://127.0.0.1:{free_port()}/0", check=False, timeout=0.3)
    )
    key = ("exchange_rate", "acme/alice", '{"pair":"EUR/CNY"}')
    with caplog.at_level(logging.WARNING):
        assert down.cache_get(key) is None  # a miss, not an error
        assert down.lead(key, 5) is True  # everyone computes, uncached
    assert "result cache unavailable" in caplog.text

    kit = Toolkit([exchange_rate, send_sms], governance=Governance(shared=down))
    # rate limits and breakers never run unguarded: the turn fails with 503 instead
    with pytest.raises(DependencyUnavailableError, match="rate limits") as failed:
        await kit.execute(call("send_sms", '{"text": "hi"}'), ALICE)
    assert failed.value.dependency == "redis"
    with pytest.raises(DependencyUnavailableError, match="circuit breakers"):
        await kit.execute(call("exchange_rate", '{"pair": "EUR/CNY"}'), ALICE)


async def test_a_redis_that_stops_answering_holds_up_the_call_not_the_event_loop(
    tmp_path: Path,
) -> None:
    """Rate limits, breakers and the result cache in Redis are asked from a state thread: a
    Redis that stopped answering (SIGSTOP) holds up the call that needs it, up to the
    client's timeout, while the event loop runs everything else. Before, each of those
    commands ran on the loop, and the whole service stopped with it (the ticker below
    stood still for the timeout of each command)."""
    server = start_redis(tmp_path / "redis")  # its own: stopped below
    assert server.process is not None
    try:
        shared = RedisGovernanceState(open_redis(server.url, timeout=0.5), poll_interval=0.02)
        kit = Toolkit([send_sms, exchange_rate], governance=Governance(shared=shared))
        assert (await kit.execute(call("send_sms", '{"text": "hi"}'), ALICE)).outcome == "ok"
        ticks = LoopTicks()
        server.process.send_signal(signal.SIGSTOP)
        running = asyncio.create_task(ticks.run())
        try:
            for name, arguments in [
                ("send_sms", '{"text": "hi"}'),
                ("exchange_rate", '{"pair": "EUR/CNY"}'),
            ]:
                before, start = ticks.count, time.monotonic()
                with pytest.raises(DependencyUnavailableError):
                    await kit.execute(call(name, arguments), ALICE)
                waited = time.monotonic() - start
                assert waited >= 0.4  # the command's timeout, on a state thread
                ran = ticks.count - before
                assert ran >= waited / 0.01 / 4, (name, ran, waited)
        finally:
            running.cancel()
            server.process.send_signal(signal.SIGCONT)
    finally:
        server.process.send_signal(signal.SIGCONT)
        server.stop()
