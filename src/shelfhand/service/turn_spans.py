"""The root span of a service turn: everything the turn does (the agent run, its model and
tool calls, retrievals, subagents) nests under it.

The span is named ``turn`` and carries the session (``gen_ai.conversation.id``), the caller
and, when the turn ends, its usage, its stop reason and how its answer was made (the answer
check's verdict, why the model's answer was replaced: ``shelfhand.answer.*``), and a
``budget.exceeded`` event when a budget ran out mid-turn; a failed turn records its error
code.
Its trace id is the turn's (``X-Trace-Id``), its parent the caller's span when the request
came with a ``traceparent``.

The turn's steps are also counted for the service's metrics (:mod:`shelfhand.core.step_counts`)
when it has a counter: with tracing off, that is all a turn pays for.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from shelfhand.core.errors import TurnFailed
from shelfhand.core.step_counts import count_steps, stop_counting
from shelfhand.core.tracing import Span, Tracer, enter, leave

if TYPE_CHECKING:
    from shelfhand.core.context import UserContext
    from shelfhand.core.step_counts import StepCounter

__all__ = ["traced_turn"]


async def traced_turn(
    events: AsyncGenerator[dict[str, Any], None],
    tracer: Tracer | None,
    counter: StepCounter | None,
    session_id: str,
    user: UserContext,
    trace_id: str,
    parent_span_id: str,
) -> AsyncGenerator[dict[str, Any], None]:
    """``events`` (one turn's) inside the turn's root span (with ``tracer``, when it samples
    the trace), its steps counted by ``counter``."""
    span = (
        None
        if tracer is None or not tracer.sampled(trace_id)
        else tracer.start_root(
            "turn",
            trace_id=trace_id,
            parent_id=parent_span_id,
            tenant_id=user.tenant_id,
            user_id=user.user_id,
            attributes={
                "gen_ai.conversation.id": session_id,
                "shelfhand.tenant": user.tenant_id,
                "shelfhand.user": user.user_id,
            },
        )
    )
    counting, counting_token = count_steps(counter) if counter is not None else (None, None)
    token = enter(span)
    status = "ok"
    try:
        async with aclosing(events):
            async for event in events:
                if event.get("type") == "final":
                    if span is not None:
                        _finish(span, event)
                    if counting is not None and event.get("fallback_reason"):
                        counting.counter.count_fallback(event["fallback_reason"])
                yield event
    except TurnFailed as exc:
        status = exc.code
        if span is not None:
            span.fail(exc.code)
            span.set("shelfhand.turn.status", exc.status)
        raise
    except BaseException as exc:
        status = type(exc).__name__
        if span is not None:
            span.fail(status)
        raise
    finally:
        leave(span, token)
        if counting is not None and counting_token is not None:
            counting.fail_open_calls()  # a failed subagent's call, or the turn's
            counting.counter.count_turn(status)
            stop_counting(counting_token)


def _finish(span: Span, final: dict[str, Any]) -> None:
    usage = final.get("usage") or {}
    span.update(
        {
            "gen_ai.usage.input_tokens": usage.get("input_tokens", 0),
            "gen_ai.usage.output_tokens": usage.get("output_tokens", 0),
            "shelfhand.usage.model_calls": usage.get("model_calls", 0),
            "shelfhand.usage.tool_calls": usage.get("tool_calls", 0),
            "shelfhand.usage.retrievals": usage.get("retrievals", 0),
            "shelfhand.turn.stop_reason": final.get("stop_reason"),
        }
    )
    if usage.get("cost") is not None:
        span.set("shelfhand.usage.cost", usage["cost"])
    _answer(span, final)
    budget = final.get("budget")
    if budget:  # a budget ran out mid-turn: answered without the model
        span.event("budget.exceeded", **budget)


def _answer(span: Span, final: dict[str, Any]) -> None:
    """How the answer shown was made: why the model's was replaced (or why no model
    answered: ``shelfhand.answer.fallback_reason``, e.g. ``ungrounded``, ``off_topic``,
    ``model_timeout``), whether it quotes the passages (``shelfhand.answer.extractive``), and
    the answer check's verdict on it (``shelfhand.answer.grounded``, how many of its
    sentences no passage supports, and the chunks of the passages that support the others:
    ``shelfhand.answer.passages``)."""
    if final.get("fallback_reason"):
        span.set("shelfhand.answer.fallback_reason", final["fallback_reason"])
    if final.get("extractive"):
        span.set("shelfhand.answer.extractive", True)
    grounding = final.get("grounding")
    if grounding:
        sentences = grounding.get("sentences") or ()
        span.update(
            {
                "shelfhand.answer.grounded": bool(grounding.get("grounded")),
                "shelfhand.answer.unsupported_sentences": sum(
                    1 for s in sentences if not s.get("supported")
                ),
            }
        )
        resting = {s["passage"] for s in sentences if s.get("supported") and s.get("passage")}
        if resting:
            chunks = {c.get("index"): c.get("chunk_id") for c in final.get("citations") or ()}
            span.set(
                "shelfhand.answer.passages", [chunks.get(i) or f"[{i}]" for i in sorted(resting)]
            )
