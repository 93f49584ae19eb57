"""Calls on shared state run on threads of their own (``shelfhand.core.offload``)."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import anyio
import pytest

from shelfhand.core.offload import in_background, on_state_thread, undone_if_left

pytestmark = pytest.mark.anyio

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="")


async def test_a_call_runs_on_a_state_thread_with_the_callers_context() -> None:
    WHO.set("租户甲")
    name, who = await on_state_thread(lambda: (threading.current_thread().name, WHO.get()))
    assert name.startswith("shelfhand-state") and who == "租户甲"


async def test_what_a_left_caller_made_is_undone_once_made() -> None:
    """A claim made for a request whose client went away while it was being made (Redis slow
    to answer) is taken back as soon as it exists, not when it expires."""
    started, go = threading.Event(), threading.Event()
    undone: list[str] = []

    def claim() -> str:
        started.set()
        go.wait(5)
        return "claim-1"

    async with anyio.create_task_group() as tg:

        async def ask() -> None:
            await undone_if_left(claim, undo=undone.append)
            raise AssertionError("the caller was cancelled before the claim was made")

        tg.start_soon(ask)
        await anyio.to_thread.run_sync(started.wait, 5)
        tg.cancel_scope.cancel()
    assert undone == []
    go.set()
    for _ in range(500):
        if undone:
            break
        await asyncio.sleep(0.01)
    assert undone == ["claim-1"]


async def test_what_a_caller_waited_for_is_not_undone() -> None:
    undone: list[int] = []
    assert await undone_if_left(pow, 2, 10, undo=undone.append) == 1024
    await asyncio.sleep(0.05)
    assert undone == []


async def test_a_background_write_that_fails_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> None:
        raise OSError("disk full")

    written = in_background(broken)
    assert written is not None
    await written
    assert "a write in the background failed (broken)" in caplog.text


def test_without_a_loop_a_background_write_runs_at_once() -> None:
    done: list[int] = []
    assert in_background(done.append, 1) is None
    assert done == [1]
