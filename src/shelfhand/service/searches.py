"""A search through the API (``GET /v1/knowledge/search``), counted as a turn's search is.

A search is cheap and made without a model, except with ``rerank = "llm"``: then each search
asks the chat model to order its candidates. That call is treated as a turn's model calls are:
reserved against the caller's budgets (none left: the fused order is kept, with that reason),
counted for ``/metrics``, and booked in the usage ledger on the caller's rows, as no turn
(``turns`` 0) and no session. The search's own latency joins ``/metrics``'s retrieval
histogram, as a turn's searches do.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from shelfhand.core.metering import metered, unmetered
from shelfhand.core.step_counts import count_steps, stop_counting
from shelfhand.usage.by_model import ModelTally

if TYPE_CHECKING:
    from shelfhand.core.context import UserContext
    from shelfhand.knowledge.types import SearchMode, SearchResult

    from .chat import ChatService

__all__ = ["search"]


async def search(
    chat: ChatService,
    query: str,
    *,
    k: int,
    user: UserContext,
    mode: SearchMode,
    trace_id: str = "",
) -> SearchResult:
    """``chat.kb.search_result(query, ...)`` for ``user``, in a worker thread, metered,
    counted and booked (see the module docstring); ``trace_id``: the request's (in the audit
    record of a ranking its budget refused)."""
    tally = ModelTally(chat.counter, prices=chat.prices)
    _, counting = count_steps(tally)
    meter = None
    if chat.budgets is not None:
        meter = chat.budgets.meter(user, trace_id)
    budget = metered(meter)
    try:
        found = await asyncio.to_thread(chat.kb.search_result, query, k=k, user=user, mode=mode)
    finally:
        unmetered(budget)
        if meter is not None:
            meter.close()
        stop_counting(counting)
    calls = tally.by_model()
    if chat.ledger is not None and calls:
        model = next(iter(calls))  # (its row takes the search; other models their own)
        await chat.store(chat.ledger.add, user, "", model, tally.total(), others=calls, turns=0)
    return found
