"""Two other ways to hand a sync call to a thread, tried against ``workers.run_sync`` by
``bench/agent_hop.py`` (experiments: the library does not use them, see
docs/benchmarks/agent-loop.md for why).

* ``loop waits``: the loop thread blocks on a lock (the GIL released) for up to ``WAIT``
  seconds for the worker's result before it falls back to awaiting a future; a fast call is
  then taken back without the event loop's self-pipe and ``epoll`` wake-up (the loop thread is
  still woken, by the lock). While it waits no other coroutine runs: that is the price.
* ``worker spins``: after a call the worker polls its queue (``time.sleep(0)`` between polls,
  the GIL released) for ``SPIN`` seconds before it parks, so back-to-back calls find it awake;
  the loop is still woken through ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

WAIT = 100e-6
SPIN = 200e-6


class _Slot:
    """One call handed to the waiting worker: its outcome, and who takes it."""

    __slots__ = ("done", "future", "loop", "result", "taken_by_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.done = threading.Lock()
        self.done.acquire()
        self.result: Any = None
        self.taken_by_loop = False  # the caller stopped waiting: hand back through the loop
        self.future: asyncio.Future[Any] | None = None


_slots: queue.SimpleQueue[tuple[_Slot, Callable[..., Any], tuple[Any, ...]]] = queue.SimpleQueue()
_state = threading.Lock()


def _waiting_worker() -> None:
    while True:
        slot, fn, args = _slots.get()
        slot.result = fn(*args)
        with _state:
            late = slot.taken_by_loop
        if not late:
            slot.done.release()
        else:
            future = slot.future
            assert future is not None
            slot.loop.call_soon_threadsafe(future.set_result, slot.result)


async def loop_waits(fn: Callable[..., Any], *args: Any) -> Any:
    loop = asyncio.get_running_loop()
    slot = _Slot(loop)
    _slots.put((slot, fn, args))
    if slot.done.acquire(timeout=WAIT):
        return slot.result
    with _state:
        if slot.done.acquire(blocking=False):
            return slot.result
        slot.taken_by_loop = True
        slot.future = loop.create_future()
    return await slot.future


_jobs: queue.SimpleQueue[
    tuple[asyncio.AbstractEventLoop, asyncio.Future[Any], contextvars.Context, Callable[..., Any]]
] = queue.SimpleQueue()


def _spinning_worker() -> None:
    clock = time.perf_counter
    while True:
        try:
            job = _jobs.get_nowait()
        except queue.Empty:
            job = None
            end = clock() + SPIN
            while job is None and clock() < end:
                time.sleep(0)  # the GIL released: the loop thread runs meanwhile
                try:
                    job = _jobs.get_nowait()
                except queue.Empty:
                    job = None
            if job is None:
                job = _jobs.get()
        loop, future, context, fn = job
        loop.call_soon_threadsafe(future.set_result, context.run(fn))


async def worker_spins(fn: Callable[..., Any], *args: Any) -> Any:
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    _jobs.put((loop, future, contextvars.copy_context(), lambda: fn(*args)))
    return await future


for _target in (_waiting_worker, _spinning_worker):
    threading.Thread(target=_target, daemon=True).start()
