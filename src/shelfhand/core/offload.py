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
import contextvars
import functools
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["STATE_THREADS", "in_background", "on_state_thread"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

STATE_THREADS = 16
"""Threads for calls on shared state (see the module doc). Each takes 0.1-2 ms when its
dependency answers; more of them than this at once wait for a free thread."""

_threads: ThreadPoolExecutor | None = None
_threads_lock = threading.Lock()


def _state_threads() -> ThreadPoolExecutor:
    """The threads, started on first use. (At the interpreter's exit, calls still queued are
    finished first: an executor's threads are joined then.)"""
    global _threads
    if _threads is None:
        with _threads_lock:
            if _threads is None:
                _threads = ThreadPoolExecutor(STATE_THREADS, "shelfhand-state")
    return _threads


def _forget_threads() -> None:
    global _threads
    _threads = None  # a forked child has none of them


os.register_at_fork(after_in_child=_forget_threads)


async def on_state_thread(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` on one of the state threads, in the caller's context (its context
    variables)."""
    call = functools.partial(contextvars.copy_context().run, fn, *args)
    return await asyncio.get_running_loop().run_in_executor(_state_threads(), call)


def in_background(fn: Callable[..., Any], *args: Any) -> asyncio.Future[None] | None:
    """Run ``fn(*args)`` on one of the state threads without waiting for it, and return its
    future (``None`` where no loop runs, or the interpreter is exiting: then it ran at once);
    what it raises is logged."""

    def run() -> None:
        try:
            fn(*args)
        except Exception:
            logger.exception("a write in the background failed (%s)", getattr(fn, "__name__", fn))

    try:
        return asyncio.get_running_loop().run_in_executor(_state_threads(), run)
    except RuntimeError:  # no loop runs here, or the interpreter exits (no new threads)
        run()
        return None
