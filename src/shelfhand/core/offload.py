"""Threads for calls that wait on state shared with other processes: the budget counters
(``budgets.db``, PostgreSQL, Redis), the usage ledger written for a cancelled turn, and the
session turn lock in Redis.

Such a call usually takes well under a millisecond, but waits as long as its dependency does:
a file another process holds locked, a Redis or PostgreSQL that stopped answering (up to its
timeout). On the event loop, that wait would hold up every request of the service. On the
loop's default executor (cores + 4 threads) it would not, but calls waiting on a stalled
dependency would soon take every one of its threads, and every other caller's search, which
runs there, would wait behind them. So they have threads of their own (:data:`STATE_THREADS`):
a stalled dependency holds up those who need it, and nobody else.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from shelfhand.core.workers import SyncWorkers

__all__ = [
    "STATE_THREADS",
    "in_background",
    "off_loop_if",
    "on_state_thread",
    "soon_if",
    "undone_if_left",
]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

STATE_THREADS = 16
"""Threads for calls on shared state (see the module doc). Each takes 0.1-2 ms when its
dependency answers; more of them than this at once wait for a free thread."""

DRAIN_AT_EXIT_S = 5.0
"""Seconds the interpreter's exit waits for writes still queued (a cancelled turn's
settlement, its usage)."""

_threads = SyncWorkers(STATE_THREADS, name="shelfhand-state")
atexit.register(lambda: _threads.drain(DRAIN_AT_EXIT_S))


def on_state_thread(fn: Callable[..., _T], *args: Any) -> asyncio.Future[_T]:
    """``fn(*args)`` on one of the state threads, in the caller's context (its context
    variables): a future to await."""
    return _threads.call(fn, *args)


async def off_loop_if(blocking: bool, fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)``: on a state thread when it waits on shared state (``blocking``: a
    budget book, a turn lock or approvals in a file or on a server), else here at once."""
    if blocking:
        return await on_state_thread(fn, *args)
    return fn(*args)


def soon_if(blocking: bool, fn: Callable[..., Any], *args: Any) -> asyncio.Future[None] | None:
    """``fn(*args)`` without waiting for it: on a state thread when it waits on shared state
    (``blocking``; its future returned, see :func:`in_background`), else here at once
    (``None``). For what must not wait where it runs: a turn or a call being cancelled."""
    if blocking:
        return in_background(fn, *args)
    fn(*args)
    return None


async def undone_if_left(fn: Callable[..., _T], *args: Any, undo: Callable[[_T], object]) -> _T:
    """``await on_state_thread(fn, *args)``; if the caller is cancelled while it runs (its
    request's client went away), ``fn`` still ends on its thread, and ``undo`` is then called
    with its result, on a state thread too: a claim or a copy made for nobody is taken back
    at once, not when it expires."""
    pending = _threads.call(fn, *args)
    try:
        return await asyncio.shield(pending)
    except asyncio.CancelledError:

        def take_back(done: asyncio.Future[_T]) -> None:
            if not done.cancelled() and done.exception() is None:
                in_background(undo, done.result())

        pending.add_done_callback(take_back)
        raise


def in_background(fn: Callable[..., Any], *args: Any) -> asyncio.Future[None] | None:
    """Run ``fn(*args)`` on one of the state threads without waiting for it, and return its
    future (``None`` where no loop runs: then it ran at once); what it raises is logged."""

    def run() -> None:
        try:
            fn(*args)
        except Exception:
            logger.exception("a write in the background failed (%s)", getattr(fn, "__name__", fn))

    try:
        return _threads.call(run)
    except RuntimeError:  # no loop runs here
        run()
        return None
