"""Approvals shared by replicas in a real Redis: a call paused on replica A is seen, and
decided, through replica B (each replica has its own registry and Redis connection)."""

from __future__ import annotations

import functools
import signal
import time
from pathlib import Path

import anyio
import pytest
from governance_helpers import LoopTicks, create_return, created, script

from shelfhand import Agent, Toolkit, UserContext
from shelfhand.backends.redis import open_redis
from shelfhand.core.errors import DependencyUnavailableError
from shelfhand.core.events import ApprovalDecided, ApprovalRequired, Event, Final, ToolFinished
from shelfhand.dev.services import free_port, start_redis
from shelfhand.tools.approvals import ApprovalDecision
from shelfhand.tools.redis_approvals import RedisApprovals

pytestmark = pytest.mark.anyio

ALICE = UserContext(tenant_id="acme", user_id="alice", roles=["user"])
OTHER_ALICE = UserContext(tenant_id="globex", user_id="alice")


@pytest.fixture(autouse=True)
def _reset() -> None:
    created.clear()


def replicas(redis_url: str) -> tuple[RedisApprovals, RedisApprovals]:
    a = RedisApprovals(open_redis(redis_url), timeout=60, poll_interval=0.02)
    b = RedisApprovals(open_redis(redis_url), timeout=60, poll_interval=0.02)
    return a, b


async def test_a_call_paused_on_one_replica_is_approved_on_the_other(redis_url: str) -> None:
    a, b = replicas(redis_url)
    agent = Agent(model=script(), toolkit=Toolkit([create_return]), approvals=a)
    events: list[Event] = []
    with anyio.fail_after(20):
        async for event in agent.stream("我要退货", context=ALICE):
            events.append(event)
            if isinstance(event, ApprovalRequired):
                a.bind_session(event.approval_id, "session-1")
                seen = b.pending(ALICE)  # the owner sees it from replica B
                assert [r.id for r in seen] == [event.approval_id]
                assert seen[0].user == ALICE and seen[0].arguments["api_key"] == "[REDACTED]"
                assert b.pending(OTHER_ALICE) == []  # never another tenant's
                assert b.session_of(event.approval_id) == "session-1"
                request = b.get(event.approval_id)
                assert request is not None and request.tool == "create_return"
                assert created == []
                approve = functools.partial(b.approve, event.approval_id, by="alice")
                await anyio.to_thread.run_sync(approve)
                with pytest.raises(KeyError):  # decided once, on any replica
                    a.reject(event.approval_id, "too late")
    decided = next(e for e in events if isinstance(e, ApprovalDecided))
    assert decided.approved
    finished = next(e for e in events if isinstance(e, ToolFinished))
    assert finished.content == "退货单 RMA-SO-1001 已创建"
    assert created == ["SO-1001"]
    assert isinstance(events[-1], Final) and events[-1].result.output == "好的。"
    assert b.pending(ALICE) == [] and a.pending(ALICE) == []  # nothing left behind


async def test_a_rejection_on_the_other_replica_reaches_the_model(redis_url: str) -> None:
    a, b = replicas(redis_url)
    model = script()
    agent = Agent(model=model, toolkit=Toolkit([create_return]), approvals=a)
    with anyio.fail_after(20):
        async for event in agent.stream("我要退货", context=ALICE):
            if isinstance(event, ApprovalRequired):
                b.decide(event.approval_id, ApprovalDecision(approved=False, reason="订单号不对"))
    assert created == []
    seen = model.requests[1][-1].tool_results[0]
    assert seen.is_error and "订单号不对" in seen.content


async def test_a_decision_on_the_same_replica_still_resumes_at_once(redis_url: str) -> None:
    a, _ = replicas(redis_url)
    agent = Agent(model=script(), toolkit=Toolkit([create_return]), approvals=a)
    with anyio.fail_after(20):
        async for event in agent.stream("我要退货", context=ALICE):
            if isinstance(event, ApprovalRequired):
                a.approve(event.approval_id)
    assert created == ["SO-1001"]


async def test_without_redis_a_confirmation_cannot_be_opened() -> None:
    down = RedisApprovals(
        open_redis(f"redis://127.0.0.1:{free_port()}/0", check=False, timeout=0.3)
    )
    with pytest.raises(DependencyUnavailableError, match="approvals"):
        down.open(call_id="c1", tool="create_return", arguments={}, user=ALICE)
    assert down.pending() == []  # nothing half-open is left in the process


async def test_a_timeout_never_overrides_a_decision_another_replica_made(
    redis_url: str,
) -> None:
    a, b = replicas(redis_url)
    # B decides in the instant between A's last look and A's timeout: A's timeout loses
    raced = a.open(call_id="c1", tool="create_return", arguments={}, user=ALICE)
    b.approve(raced.id, by="alice")  # B told its caller: approved
    assert a._time_out(raced.id).approved is True
    # no decision: the timeout is recorded like one, and nobody can decide after it
    quiet = a.open(call_id="c2", tool="create_return", arguments={}, user=ALICE)
    assert a._time_out(quiet.id).approved is False
    with pytest.raises(KeyError):
        b.approve(quiet.id)


async def test_an_undecided_request_times_out_and_cannot_be_decided_later(
    redis_url: str,
) -> None:
    a, b = replicas(redis_url)
    a.timeout = 0.3
    model = script()
    agent = Agent(model=model, toolkit=Toolkit([create_return]), approvals=a)
    asked: list[str] = []
    with anyio.fail_after(20):
        async for event in agent.stream("我要退货", context=ALICE):
            if isinstance(event, ApprovalRequired):
                asked.append(event.approval_id)
    assert created == []
    assert "no decision within 0.3 s" in model.requests[1][-1].tool_results[0].content
    with pytest.raises(KeyError):
        b.approve(asked[0])


async def test_a_redis_that_stops_answering_holds_up_the_waiting_run_not_the_event_loop(
    tmp_path: Path,
) -> None:
    """A paused call looks for a decision made on another replica every ``poll_interval``;
    each look is a Redis command, made from a state thread. With Redis stopped (SIGSTOP)
    each look waits for the client's timeout there, while the event loop runs everything
    else. Before, each look ran on the loop: the whole service stood still as long as Redis
    did, for as long as an approval was pending."""
    server = start_redis(tmp_path / "redis")  # its own: stopped below
    assert server.process is not None
    try:
        a = RedisApprovals(open_redis(server.url, timeout=0.5), timeout=60, poll_interval=0.02)
        agent = Agent(model=script(), toolkit=Toolkit([create_return]), approvals=a)
        ticks = LoopTicks()
        events: list[Event] = []
        required = anyio.Event()

        async def run() -> None:
            async for event in agent.stream("我要退货", context=ALICE):
                events.append(event)
                if isinstance(event, ApprovalRequired):
                    required.set()  # the run goes on to wait for a decision

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(ticks.run)
                tg.start_soon(run)
                await required.wait()
                server.process.send_signal(signal.SIGSTOP)
                try:
                    before, start = ticks.count, time.monotonic()
                    await anyio.sleep(1.5)  # the run's looks wait on Redis
                    waited = time.monotonic() - start
                    ran = ticks.count - before
                    assert ran >= waited / 0.01 / 4, (ran, waited)
                finally:
                    server.process.send_signal(signal.SIGCONT)
                (asked,) = [e for e in events if isinstance(e, ApprovalRequired)]
                approve = functools.partial(a.approve, asked.approval_id, by="alice")
                await anyio.to_thread.run_sync(approve)
                while not events or not isinstance(events[-1], Final):
                    await anyio.sleep(0.01)
                tg.cancel_scope.cancel()
        assert created == ["SO-1001"]
        assert isinstance(events[-1], Final)
    finally:
        server.process.send_signal(signal.SIGCONT)
        server.stop()
