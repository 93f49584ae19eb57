"""The budget of the running turn, as the agent loop sees it: reserve before each model
call, settle after.

The service sets a :class:`Meter` for each turn of a caller with budgets
(:func:`metered`); every run of the turn (subagents' included) finds it in a context
variable and asks it before each model call. A meter that refuses raises
:class:`~shelfhand.core.errors.BudgetExceededError` and the call is not made. Without a
meter (no budgets, a script's own ``Agent.run``) the loop pays one ``ContextVar.get()``.

A meter whose counters are in a file or on a server (``blocking``: ``budgets.db``,
PostgreSQL, Redis) is asked from a worker thread (:func:`reserve`, :func:`settle`,
:meth:`Meter.settle_soon`), so that a counter that waits (a file another process holds
locked, a server that stopped answering) holds up its own turn only, never the event loop
and every other turn of the service with it (:mod:`shelfhand.core.offload`: threads of their
own, not the loop's default executor).
"""

from __future__ import annotations

import asyncio
import contextlib
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Protocol

from shelfhand.core.offload import off_loop_if

if TYPE_CHECKING:
    from shelfhand.core.errors import BudgetExceededError
    from shelfhand.core.results import Usage

__all__ = [
    "Meter",
    "current_meter",
    "metered",
    "reserve",
    "settle",
    "unmetered",
]


class Meter(Protocol):
    """Reserves budget for model calls and settles it with what they used."""

    @property
    def blocking(self) -> bool:
        """Its counters are in a file or on a server: a turn asks them from a state thread
        (:func:`~shelfhand.core.offload.off_loop_if`)."""
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


async def reserve(meter: Meter, tokens: int) -> int:
    """``meter.reserve(tokens)``, off the event loop when the meter is ``blocking``."""
    return await off_loop_if(meter.blocking, meter.reserve, tokens)


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
