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
other turn of the service with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from shelfhand.core.errors import BudgetExceededError
    from shelfhand.core.results import Usage

__all__ = [
    "Meter",
    "current_meter",
    "in_background",
    "metered",
    "reserve",
    "settle",
    "settle_soon",
    "unmetered",
]

logger = logging.getLogger(__name__)


class Meter(Protocol):
    """Reserves budget for model calls and settles it with what they used."""

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


def _blocking(meter: Meter) -> bool:
    """Whether ``meter`` waits on a file or a server (its ``blocking``; ``False`` if it has
    none: a meter in memory)."""
    return bool(getattr(meter, "blocking", False))


async def reserve(meter: Meter, tokens: int) -> int:
    """``meter.reserve(tokens)``, from a worker thread when the meter is ``blocking``."""
    if _blocking(meter):
        return await asyncio.to_thread(meter.reserve, tokens)
    return meter.reserve(tokens)


async def settle(meter: Meter, reserved: int, usage: Usage | None) -> None:
    """``meter.settle(reserved, usage)``, written from a worker thread when the meter is
    ``blocking``. A meter with ``settle_soon`` ends the reservation before the write, and the
    write goes on if this is cancelled meanwhile (a turn the caller left as its call
    answered): the turn's end cannot release it first."""
    if not _blocking(meter):
        meter.settle(reserved, usage)
        return
    soon = getattr(meter, "settle_soon", None)
    if soon is None:
        await asyncio.to_thread(meter.settle, reserved, usage)
        return
    written = soon(reserved, usage)
    if written is not None:
        await asyncio.shield(written)


def settle_soon(meter: Meter, reserved: int, usage: Usage | None) -> None:
    """Settle without waiting (a call cut off: its run is being cancelled or closed, and may
    not wait): the meter's own ``settle_soon`` if it has one, which ends the reservation now
    and writes it from a thread, else ``settle``."""
    soon = getattr(meter, "settle_soon", None)
    if soon is not None:
        soon(reserved, usage)
    else:
        meter.settle(reserved, usage)


def in_background(fn: Callable[..., Any], *args: Any) -> asyncio.Future[None] | None:
    """Run ``fn(*args)`` in the running loop's default executor without waiting for it,
    and return its future (``None`` where no loop runs, or its executor is shut down: then it
    ran at once); what it raises is logged."""

    def run() -> None:
        try:
            fn(*args)
        except Exception:
            logger.exception("a write in the background failed (%s)", getattr(fn, "__name__", fn))

    try:
        return asyncio.get_running_loop().run_in_executor(None, run)
    except RuntimeError:  # no loop runs here, or its executor is shut down (the server stops)
        run()
        return None
