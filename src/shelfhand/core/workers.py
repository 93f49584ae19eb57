"""Persistent worker threads that run sync functions for coroutines: sync tools
(:mod:`shelfhand.tools.workers`) and calls on shared state (:mod:`shelfhand.core.offload`),
so that a function that blocks never stalls the event loop.

A call is handed to a persistent worker thread through a ``SimpleQueue``; the thread runs it
in the caller's context (``contextvars``) and hands the outcome back with
``loop.call_soon_threadsafe``. That is the whole hop: no ``concurrent.futures.Future`` (with
its condition variable and callbacks), no chaining of two futures, no executor bookkeeping.
Measured on the agent harness it is about half of ``loop.run_in_executor`` with a
``ThreadPoolExecutor`` (docs/benchmarks/agent-loop.md); the two thread wake-ups (the worker's,
then the loop's) are what remains.

Guarantees, as with an executor:

* the event loop never runs the function: a blocking call blocks one worker thread;
* a call whose awaiting task is cancelled (a timeout) returns at once; the function cannot be
  stopped and keeps its thread until it returns, its outcome is dropped;
* up to ``max_threads`` calls run at the same time; more wait in the queue.

The threads are daemon threads: a process that exits does not wait for a call it abandoned
(a hung call would otherwise hold the exit forever). A forked child starts with no threads.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
import time
import weakref
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any

__all__ = ["SyncWorkers"]

_Job = tuple[
    asyncio.AbstractEventLoop,
    "asyncio.Future[Any]",
    contextvars.Context,
    Callable[..., Any],
    tuple[Any, ...],
    dict[str, Any],
]


class SyncWorkers:
    """A pool of persistent threads that run sync functions for coroutines.

    Args:
        max_threads: The most threads it starts; calls beyond them wait for a free one.
        name: Prefix of the threads' names (shown by ``py-spy`` and in thread dumps).
    """

    def __init__(self, max_threads: int, name: str = "shelfhand-worker") -> None:
        if max_threads < 1:
            raise ValueError(f"max_threads must be at least 1, got {max_threads}")
        self.max_threads = max_threads
        self.name = name
        self._reset()
        # a forked child has none of the parent's threads: it starts with an empty pool (by a
        # weak reference: a pool dropped later is not kept alive for the sake of a fork)
        reset = weakref.WeakMethod(self._reset)
        os.register_at_fork(after_in_child=lambda: (r := reset()) is not None and r())

    def _reset(self) -> None:
        """No threads, nothing queued (a new pool, or a forked child: its threads are gone)."""
        self._jobs: SimpleQueue[_Job | None] = SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # threads waiting for a job (under _lock)
        self._threads: list[threading.Thread] = []

    @property
    def threads(self) -> int:
        """How many worker threads have been started."""
        return len(self._threads)

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        """Run ``fn(*args, **kwargs)`` on a worker thread with the caller's context variables;
        the future (to await) has its result (or what it raised). The call is queued now.

        Cancelling the future (or a task awaiting it) stops the waiting, not the function (see
        the module doc). (A future, not a coroutine: one frame less for each sync call.)
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            if self._idle:
                self._idle -= 1
                start = False
            else:
                start = len(self._threads) < self.max_threads
        if start:
            self._start()
        self._jobs.put((loop, future, contextvars.copy_context(), fn, args, kwargs))
        return future

    def _start(self) -> None:
        with self._lock:
            if len(self._threads) >= self.max_threads:
                return
            thread = threading.Thread(
                target=self._work, name=f"{self.name}-{len(self._threads)}", daemon=True
            )
            self._threads.append(thread)
        thread.start()

    def _work(self) -> None:
        jobs = self._jobs
        lock = self._lock
        while True:
            job = jobs.get()
            if job is None:  # shutdown()
                return
            loop, future, context, fn, args, kwargs = job
            del job
            result: Any = None
            error: BaseException | None = None
            try:
                result = context.run(fn, *args, **kwargs)
            except BaseException as exc:  # handed to the caller, whatever it is
                error = exc
            # idle before the caller learns the outcome: its next call must find this thread
            with lock:
                self._idle += 1
            # not contextlib.suppress: its context manager was 4,000 instructions a call (callgrind),
            # a twentieth of the whole hop
            try:  # noqa: SIM105
                loop.call_soon_threadsafe(_settle, future, result, error)
            except RuntimeError:  # the loop closed meanwhile: nobody is waiting any more
                pass
            # nothing of the call is kept alive while the thread waits for the next one
            del loop, future, context, fn, args, kwargs, result, error

    def drain(self, timeout: float) -> None:
        """Let the threads end once the calls queued now have run, and wait for that at most
        ``timeout`` seconds (the interpreter's exit, for writes still queued)."""
        threads = list(self._threads)
        self.shutdown()
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def shutdown(self) -> None:
        """Let the threads end once their current calls return (the pool stays usable: a
        later call starts new ones)."""
        with self._lock:
            threads, self._threads, self._idle = self._threads, [], 0
            jobs, self._jobs = self._jobs, SimpleQueue()
        for _ in threads:
            jobs.put(None)


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.done():  # the caller was cancelled (timed out): the outcome is dropped
        return
    if exc is None:
        future.set_result(result)
    elif isinstance(exc, StopIteration):  # a future cannot carry it (as for coroutines)
        future.set_exception(RuntimeError(f"sync function raised StopIteration: {exc}"))
    else:
        future.set_exception(exc)
