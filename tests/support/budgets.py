"""A chat model for budget tests: every call uses its whole context window, and the first
calls wait for each other, so the turns a budget admits are all in flight at once."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from shelfhand.core.context import UserContext
from shelfhand.core.messages import Message
from shelfhand.core.results import Usage
from shelfhand.models.base import ModelResponse
from shelfhand.testing import FunctionModel
from shelfhand.usage.budgets import BudgetPolicy, LocalBudgetBook, TurnMeter


def full_window_model(window: int, entered: list[int], *, together: int = 5) -> FunctionModel:
    """A model with a context window of ``window`` tokens whose every reply uses all of it;
    each call appends to ``entered``, and the first ``together`` calls wait until that many
    have entered (at most 10 s)."""
    release = threading.Event()

    async def answer(messages: list[Message], tools: Sequence[Any]) -> ModelResponse:
        entered.append(1)
        if len(entered) >= together:
            release.set()
        await asyncio.to_thread(release.wait, 10)
        return ModelResponse(
            message=Message.assistant("好的。"),
            usage=Usage(input_tokens=window - 100, output_tokens=100),
        )

    model = FunctionModel(answer)
    model.context_tokens = window  # type: ignore[attr-defined]  # as a configured model has
    return model


def spent_book(policy: BudgetPolicy, user: UserContext) -> LocalBudgetBook:
    """A book in which ``user`` has already made one call of ``policy`` today (as a turn
    before theirs did): with a budget of one call a day, the next is refused."""
    book = LocalBudgetBook()
    spent = TurnMeter(book, policy, user)
    spent.settle(spent.reserve(10), None)
    return book
