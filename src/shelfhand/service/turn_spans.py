"""The root span of a service turn: everything the turn does (the agent run, its model and
tool calls, retrievals, subagents) nests under it.

The span is named ``turn`` and carries the session (``gen_ai.conversation.id``), the caller
and, when the turn ends, its usage and stop reason (and a ``budget.exceeded`` event when a budget
ran out mid-turn); a failed turn records its error code.
Its trace id is the turn's (``X-Trace-Id``), its parent the caller's span when the request
came with a ``traceparent``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from shelfhand.core.errors import TurnFailed
from shelfhand.core.tracing import Span, Tracer, enter, leave

if TYPE_CHECKING:
    from shelfhand.core.context import UserContext

__all__ = ["traced_turn"]


async def traced_turn(
    events: AsyncGenerator[dict[str, Any], None],
    tracer: Tracer,
    session_id: str,
    user: UserContext,
    trace_id: str,
    parent_span_id: str,
) -> AsyncGenerator[dict[str, Any], None]:
    """``events`` (one turn's) inside the turn's root span."""
    span = tracer.start_root(
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
    token = enter(span)
    try:
        async with aclosing(events):
            async for event in events:
                if event.get("type") == "final":
                    _finish(span, event)
                yield event
    except TurnFailed as exc:
        span.fail(exc.code)
        span.set("shelfhand.turn.status", exc.status)
        raise
    except BaseException as exc:
        span.fail(type(exc).__name__)
        raise
    finally:
        leave(span, token)


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
    budget = final.get("budget")
    if budget:  # a budget ran out mid-turn: answered without the model
        span.event("budget.exceeded", **budget)
