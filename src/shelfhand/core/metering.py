"""The budget of the running turn, as the agent loop sees it: reserve before each model
call, settle after.

The service sets a :class:`Meter` for each turn of a caller with budgets
(:func:`metered`); every run of the turn (subagents' included) finds it in a context
variable and asks it before each model call. A meter that refuses raises
:class:`~shelfhand.core.errors.BudgetExceededError` and the call is not made. Without a
meter (no budgets, a script's own ``Agent.run``) the loop pays one ``ContextVar.get()``.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from shelfhand.core.errors import BudgetExceededError
    from shelfhand.core.results import Usage

__all__ = ["Meter", "current_meter", "metered", "unmetered"]


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
