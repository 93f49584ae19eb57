"""Model calls a run makes beside its loop: the query rewrite of a follow-up, the answer
judge's verdicts, the summary of older turns, an LLM reranker's ranking of a search's
candidates (on the reranker's own loop, in the caller's context).

Each is a model call like the loop's, so each is treated like one: reserved against the
caller's budget before it is made and settled after (:mod:`shelfhand.core.metering`), traced
as a ``chat`` span, counted for ``/metrics`` and the usage ledger, and its usage added to the
:func:`side_usage` block it is made in (the run's own tally, or one its caller adds). A call
the budget refuses is recorded on the current span and heard by the meter (the service
audits it). Before, a turn whose follow-up was rewritten by the model made a model call that
no reply's usage, budget, metric or trace showed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING

from shelfhand.agent.budget import (
    CUT_OFF,
    cut_call,
    cut_off_usage,
    message_tokens,
    positive_int,
)
from shelfhand.agent.spans import chat_span, end_chat, fail_chat
from shelfhand.core import metering
from shelfhand.core.errors import BudgetExceededError, ModelTimeoutError
from shelfhand.core.metering import current_meter
from shelfhand.core.results import Usage, UsageTally
from shelfhand.core.tracing import current_span

if TYPE_CHECKING:
    from shelfhand.core.messages import Message
    from shelfhand.core.metering import Meter
    from shelfhand.core.pricing import ModelPrice
    from shelfhand.models.base import ChatModel, ModelResponse

__all__ = ["side_request", "side_usage", "usage_of"]

_COLLECTING: ContextVar[UsageTally | None] = ContextVar("shelfhand_side_usage", default=None)


@contextlib.contextmanager
def side_usage(into: UsageTally | None = None) -> Iterator[UsageTally]:
    """Collect the usage of the side calls made in this block (by this task, and by the
    threads and loops it carries its context to) into ``into`` (a run's
    ``RunContext.delegated``: the query rewrite's, up front; a search's ranking, which may
    end after the block when the search outlives its tool's deadline), or into a tally of
    its own (the answer judge's, after the loop has summed the run's usage)."""
    collected = UsageTally() if into is None else into
    token = _COLLECTING.set(collected)
    try:
        yield collected
    finally:
        _COLLECTING.reset(token)


async def side_request(
    model: ChatModel,
    request: Sequence[Message],
    *,
    reply_tokens: int,
    price: ModelPrice | None = None,
    timeout: float | None = None,
    purpose: str = "side call",
) -> ModelResponse:
    """``model.request(request)``, reserved against the caller's budget (the request and
    ``reply_tokens``, or the model's ``max_tokens`` when larger), traced and counted; its
    usage (at ``price``) added to the :func:`side_usage` block it is made in, if any.
    ``timeout``: seconds it may take (its span then says it timed out, where a deadline of
    the caller's would read as a cancellation). ``purpose``: what the call is for
    (``rerank``, ``query rewrite``...), named where a budget's refusal of it is recorded: a
    ``budget.exceeded`` event on the current span, and the meter's ``refused`` (the service
    audits it).

    A call cut off (past ``timeout``, its caller gone) is charged, counted and added to the
    block's usage at its request's estimate, as a call of the loop is: the provider read the
    request, and no reply arrived to count. One that failed (an error answer, a server out
    of reach) is charged nothing and counted failed.

    Raises:
        BudgetExceededError: The caller's budget has no room for it (no call is made).
        TimeoutError: No answer within ``timeout``.
        Exception: What the model raised (the call is counted failed, its reservation
            released).
    """
    meter = current_meter()
    reserved = asked = 0
    if meter is not None:
        # the request by the loop's cautious estimate (a digit, a CJK character, a symbol: a
        # token each) and the longest reply the model may give, so that what concurrent calls
        # reserve holds what they will be charged
        longest = positive_int(getattr(model, "max_tokens", None)) or 0
        asked = sum(message_tokens(m) for m in request)
        size = asked + max(reply_tokens, longest)
        try:
            reserved = await metering.reserve(meter, size)
        except BudgetExceededError as exc:
            _refused(meter, exc, purpose)
            raise
    call = chat_span(model)
    try:
        async with asyncio.timeout(timeout):
            response = await model.request(list(request))
    except BaseException as exc:  # a cancellation too: nothing stays reserved or open
        # cut off (past its timeout, its caller gone): the provider read the request, so it
        # is charged and counted at the request's estimate, as a call of the loop (before, it
        # kept its whole reservation as spent, request and longest reply, while the usage
        # ledger booked nothing); failed (an error answer, a server out of reach): nothing
        cut_off = isinstance(exc, CUT_OFF)
        if cut_off and not asked:
            asked = sum(message_tokens(m) for m in request)
        charged = cut_off_usage(exc, asked, ())
        if meter is not None:  # (now, and without waiting: the caller may be cancelled)
            meter.settle_soon(reserved, charged)
        if call is not None:
            late = isinstance(exc, TimeoutError) and timeout is not None
            said = f"model {call.model!r} did not answer within {timeout:g}s" if late else ""
            fail_chat(call, ModelTimeoutError(said) if late else exc, charged if cut_off else None)
        collecting = _COLLECTING.get()
        if cut_off and collecting is not None:
            collecting.add(cut_call(charged, price))
        raise
    if call is not None:
        end_chat(call, response, None)
    if meter is not None:
        await metering.settle(meter, reserved, response.usage)
    collecting = _COLLECTING.get()
    if collecting is not None:
        collecting.add(usage_of(response, price))
    return response


def _refused(meter: Meter, error: BudgetExceededError, purpose: str) -> None:
    """Record that the caller's budget refused the side call ``purpose``: on the span it
    was to be made in (the search's, the turn's) and through the meter."""
    span = current_span()
    if span is not None:
        span.event("budget.exceeded", **error.to_dict(), **{"shelfhand.side_call": purpose})
    meter.refused(error, purpose)


def usage_of(response: ModelResponse, price: ModelPrice | None = None) -> Usage:
    """One call's usage, as a run's usage counts it (its cost at ``price``, when known)."""
    used = response.usage or Usage()
    return Usage(
        input_tokens=used.input_tokens,
        output_tokens=used.output_tokens,
        model_calls=1,
        cost=price.cost(response.usage) if price is not None and response.usage else None,
    )
