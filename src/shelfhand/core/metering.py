"""The budget of the running turn, as the agent loop sees it: reserve before each model
call, settle after.

The service sets a :class:`Meter` for each turn of a caller with budgets
(:func:`metered`); every run of the turn (subagents' included) finds it in a context
variable and asks it before each model call. A meter that refuses raises
:class:`~shelfhand.core.errors.BudgetExceededError` and the call is not made. Without a
meter (no budgets, a script's own ``Agent.run``) the loop pays one ``ContextVar.get()``.

A meter whose counters are in a file or on a server (``blocking``: ``budgets.db``,
PostgreSQL, Redis) is asked from a worker thread (:func:`reserve`, :func:`settle`,
:func:`settle_soon`), so that a counter that waits (a file another process holds locked, a
server that stopped answering) holds up its own turn only, never the event loop and every
other turn of the service with it. Those threads are the counters' own
(:data:`COUNTER_THREADS`), not the event loop's default executor: turns waiting on their
counters would otherwise take all of its few threads (cores + 4), and every other caller's
search, which runs there, would wait behind them.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from shelfhand.core.errors import BudgetExceededError
    from shelfhand.core.results import Usage

__all__ = [
    "COUNTER_THREADS",
    "Meter",
    "current_meter",
    "in_background",
    "metered",
    "off_loop",
    "reserve",
    "settle",
    "unmetered",
]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

COUNTER_THREADS = 16
"""Threads that write budget counters and usage (see the module doc). Each write takes
0.1-2 ms; more of them than this at once wait for a free thread."""

_counters: ThreadPoolExecutor | None = None
_counters_lock = threading.Lock()


def _counter_threads() -> ThreadPoolExecutor:
    """The counters' threads, started on first use. (At the interpreter's exit, writes still
    queued are finished first: an executor's threads are joined then.)"""
    global _counters
    if _counters is None:
        with _counters_lock:
            if _counters is None:
                _counters = ThreadPoolExecutor(COUNTER_THREADS, "shelfhand-counters")
    return _counters


def _forget_threads() -> None:
    global _counters
    _counters = None  # a forked child has none of them


os.register_at_fork(after_in_child=_forget_threads)


class Meter(Protocol):
    """Reserves budget for model calls and settles it with what they used."""

    @property
    def blocking(self) -> bool:
        """Its counters are in a file or on a server: a turn asks them from a worker thread
        (:func:`off_loop`)."""
        ...

    def reserve(self, tokens: int) -> int:
        """Reserve one model call of at most ``tokens`` tokens (input and output); returns
        the reservation to settle.

        Raises:
            BudgetExceededError: It does not fit a budget; nothing is reserved.
        """
        ...

    def settle(self, reserved: int, usage: Usage | None) -> None:
        """The call ended: replace the reservation with what it used (``None``: unknown,
        the reservation is kept as used)."""
        ...

    def settle_soon(self, reserved: int, usage: Usage | None) -> asyncio.Future[None] | None:
        """:meth:`settle` without waiting on the counters: the reservation ends now, and a
        ``blocking`` meter's write goes on from a worker thread (its future returned;
        ``None``: written already). For a call cut off, whose run is being cancelled or
        closed and may not wait."""
        ...

    def refused(self, error: BudgetExceededError, purpose: str) -> None:
        """:meth:`reserve` refused a model call made beside the run's loop (``purpose``:
        what for, such as ``rerank``); the turn goes on without it. (The loop's own refusals end
        the run, and whoever runs the turn hears of them.)"""
        ...


_meter: ContextVar[Meter | None] = ContextVar("shelfhand_meter", default=None)


def current_meter() -> Meter | None:
    """The running turn's meter, or ``None`` (no budgets)."""
    return _meter.get()


def metered(meter: Meter | None) -> Token[Meter | None]:
    """Make ``meter`` the running turn's; undo with :func:`unmetered`."""
    return _meter.set(meter)


def unmetered(token: Token[Meter | None]) -> None:
    with contextlib.suppress(ValueError):  # reset from another context: it is gone anyway
        _meter.reset(token)


async def off_loop(meter: Meter, fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` (one of ``meter``'s methods), from one of the counters' threads when the
    meter is ``blocking``."""
    if meter.blocking:
        call = functools.partial(contextvars.copy_context().run, fn, *args)
        return await asyncio.get_running_loop().run_in_executor(_counter_threads(), call)
    return fn(*args)


async def reserve(meter: Meter, tokens: int) -> int:
    """``meter.reserve(tokens)``, off the event loop when the meter is ``blocking``."""
    return await off_loop(meter, meter.reserve, tokens)


async def settle(meter: Meter, reserved: int, usage: Usage | None) -> None:
    """``meter.settle(reserved, usage)``; for a ``blocking`` meter, the reservation ends
    before its write (:meth:`Meter.settle_soon`) and the write goes on if this is cancelled
    meanwhile (a turn the caller left as its call answered): the turn's end cannot release it
    first."""
    if not meter.blocking:
        meter.settle(reserved, usage)
        return
    written = meter.settle_soon(reserved, usage)
    if written is not None:
        await asyncio.shield(written)


def in_background(fn: Callable[..., Any], *args: Any) -> asyncio.Future[None] | None:
    """Run ``fn(*args)`` on one of the counters' threads without waiting for it, and return
    its future (``None`` where no loop runs, or the interpreter is exiting: then it ran at
    once); what it raises is logged."""

    def run() -> None:
        try:
            fn(*args)
        except Exception:
            logger.exception("a write in the background failed (%s)", getattr(fn, "__name__", fn))

    try:
        return asyncio.get_running_loop().run_in_executor(_counter_threads(), run)
    except RuntimeError:  # no loop runs here, or the interpreter exits (no new threads)
        run()
        return None
