"""The worker threads sync tools run in (``shelfhand.tools.workers``)."""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading

import anyio
import pytest

from shelfhand.core.context import RunContext, UserContext
from shelfhand.core.messages import ToolCallBlock
from shelfhand.tools import Toolkit, tool
from shelfhand.tools.workers import SyncWorkers

pytestmark = pytest.mark.anyio

REQUEST = contextvars.ContextVar("REQUEST", default="none")


async def test_a_call_runs_on_a_worker_thread_and_returns_its_result() -> None:
    workers = SyncWorkers(2, name="test-worker")
    try:
        name = await workers.call(lambda: threading.current_thread().name)
        assert name.startswith("test-worker-")
        assert name != threading.current_thread().name
        assert await workers.call(pow, 2, 10) == 1024
        assert await workers.call(int, "7f", base=16) == 127
    finally:
        workers.shutdown()


async def test_what_the_function_raises_is_raised_to_the_caller() -> None:
    workers = SyncWorkers(1)

    def fail() -> None:
        raise LookupError("no such order: SO-404")

    try:
        with pytest.raises(LookupError, match="SO-404"):
            await workers.call(fail)
        with pytest.raises(RuntimeError, match="StopIteration"):
            await workers.call(next, iter(()))
    finally:
        workers.shutdown()


async def test_the_callers_context_variables_travel_with_the_call() -> None:
    workers = SyncWorkers(2)
    try:
        REQUEST.set("租户甲")
        assert await workers.call(REQUEST.get) == "租户甲"
        REQUEST.set("tenant-b")
        assert await workers.call(REQUEST.get) == "tenant-b"
    finally:
        workers.shutdown()


async def test_idle_threads_are_reused_and_concurrent_calls_get_their_own() -> None:
    workers = SyncWorkers(4)
    try:
        for _ in range(20):
            await workers.call(int)
        assert workers.threads == 1  # one call at a time: one thread is enough

        both = threading.Barrier(2, timeout=5)  # each call waits until the other runs too
        names = await asyncio.gather(
            workers.call(lambda: both.wait() is not None and threading.current_thread().name),
            workers.call(lambda: both.wait() is not None and threading.current_thread().name),
        )
        assert len(set(names)) == 2
        assert workers.threads == 2
    finally:
        workers.shutdown()


async def test_calls_beyond_the_thread_limit_wait_for_a_free_thread() -> None:
    workers = SyncWorkers(1)
    release = threading.Event()
    order: list[str] = []

    def first() -> None:
        release.wait(5)
        order.append("first")

    try:
        with anyio.fail_after(5):
            blocked = asyncio.ensure_future(workers.call(first))
            queued = asyncio.ensure_future(workers.call(order.append, "second"))
            await asyncio.sleep(0)
            assert not queued.done()
            release.set()
            await asyncio.gather(blocked, queued)
        assert order == ["first", "second"]
        assert workers.threads == 1
    finally:
        release.set()
        workers.shutdown()


async def test_a_cancelled_call_returns_at_once_and_its_late_outcome_is_dropped() -> None:
    workers = SyncWorkers(1)
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        release.wait(5)
        finished.set()
        return "late"

    try:
        with anyio.fail_after(5):
            pending = asyncio.ensure_future(workers.call(slow))
            await anyio.to_thread.run_sync(started.wait, 5)
            pending.cancel()
            with pytest.raises(asyncio.CancelledError):
                await pending
            release.set()
            await anyio.to_thread.run_sync(finished.wait, 5)
            # the thread is free again once the abandoned function has returned
            assert await workers.call(str, "next") == "next"
    finally:
        release.set()
        workers.shutdown()


async def test_a_blocking_sync_tool_never_stalls_other_runs_on_the_loop() -> None:
    release = threading.Event()

    @tool(timeout=5)
    def wait_for_warehouse() -> str:
        """Block until the warehouse answers."""
        release.wait(5)
        return "仓库已确认"

    kit = Toolkit([wait_for_warehouse])
    run = RunContext(user=UserContext(tenant_id="acme", user_id="alice"))
    call = ToolCallBlock(id="c1", name="wait_for_warehouse", arguments="{}")
    with anyio.fail_after(5):
        pending = asyncio.ensure_future(kit.call(call, run))
        for _ in range(3):  # the loop keeps turning while the tool blocks its thread
            await asyncio.sleep(0)
        assert not pending.done()
        release.set()
        assert (await pending).content == "仓库已确认"


async def test_after_shutdown_the_threads_end_and_a_later_call_starts_new_ones() -> None:
    workers = SyncWorkers(2)
    first = await workers.call(threading.current_thread)
    workers.shutdown()
    await anyio.to_thread.run_sync(first.join, 5)
    assert not first.is_alive()
    assert workers.threads == 0
    assert await workers.call(str, "again") == "again"
    assert workers.threads == 1
    workers.shutdown()


async def test_a_forked_child_starts_with_no_worker_threads_and_can_run_sync_tools() -> None:
    from shelfhand.tools import workers

    assert await workers.run_sync(str, 1) == "1"
    assert workers._workers.threads >= 1
    pid = os.fork()
    if pid == 0:  # the child: its parent's threads do not exist here
        ok = workers._workers.threads == 0 and asyncio.run(_in_child()) == "子进程"
        os._exit(0 if ok else 1)
    _, status = await anyio.to_thread.run_sync(os.waitpid, pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


async def _in_child() -> str:
    from shelfhand.tools import workers

    return str(await workers.run_sync(str, "子进程"))


def test_a_call_whose_event_loop_closed_meanwhile_leaves_its_thread_serving_the_next() -> None:
    workers = SyncWorkers(1)
    started, release = threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        release.wait(5)
        return "nobody waits for this"

    async def abandon() -> None:
        pending = asyncio.ensure_future(workers.call(slow))
        await anyio.to_thread.run_sync(started.wait, 5)
        assert not pending.done()
        # asyncio.run cancels the pending call and closes its loop on the way out

    try:
        asyncio.run(abandon())
        release.set()  # the thread now hands its outcome to a closed loop

        async def next_call() -> int:
            with anyio.fail_after(5):
                return int(await workers.call(pow, 2, 3))

        assert asyncio.run(next_call()) == 8
        assert workers.threads == 1
    finally:
        release.set()
        workers.shutdown()
