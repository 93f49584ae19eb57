"""The agent run's spans: ``invoke_agent {name}`` around a run, ``chat {model}`` around each
model call (OpenTelemetry GenAI names; see :mod:`shelfhand.core.tracing`).

A run only pays for these when tracing is on: :meth:`AgentLoop._loop
<shelfhand.agent.loop.AgentLoop._loop>` hands back the bare steps otherwise. A model call is
also counted for the service's metrics when the turn counts its steps
(:mod:`shelfhand.core.step_counts`), with or without its span.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from contextvars import Token
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shelfhand.core.context import ANONYMOUS
from shelfhand.core.errors import ModelError, ModelTimeoutError
from shelfhand.core.events import Final
from shelfhand.core.step_counts import Counting, current_counting
from shelfhand.core.tracing import Span, current_span, enter, leave, start_span, tracing_on
from shelfhand.tools.spans import tool_span_attributes

from .budget import LATE, LEFT

if TYPE_CHECKING:
    from shelfhand.core.context import UserContext
    from shelfhand.core.events import Event
    from shelfhand.core.messages import Message, ToolCallBlock, ToolResultBlock
    from shelfhand.core.results import Usage
    from shelfhand.models.base import ChatModel, ModelResponse

__all__ = [
    "ChatCall",
    "chat_span",
    "cut_chat",
    "end_chat",
    "fail_chat",
    "failure_attributes",
    "invoke_agent",
    "model_attributes",
    "replayed_call",
]


def model_attributes(model: ChatModel) -> Mapping[str, Any]:
    """What a ``chat`` span says of the model's provider: the model's ``span_attributes``
    when it has them (an OpenAI-compatible endpoint: ``gen_ai.provider.name`` ``openai``,
    ``server.address`` and ``server.port``), else its class name as the provider."""
    attributes: Mapping[str, Any] | None = getattr(model, "span_attributes", None)
    if attributes is None:
        kind = type(model)
        attributes = _BY_CLASS.get(kind)
        if attributes is None:
            attributes = _BY_CLASS[kind] = {"gen_ai.provider.name": kind.__name__}
    return attributes


_BY_CLASS: dict[type, Mapping[str, Any]] = {}
"""The provider attributes of models without their own, by class (made once)."""


def failure_attributes(exc: BaseException, *, record_content: bool) -> dict[str, Any]:
    """Why a model call failed, for its span: ``error.type``; the HTTP status a provider
    answered with (``shelfhand.chat.status_code``); and the failure in words
    (``shelfhand.chat.failure``: "sent no first token within 30s (after 2 attempts)") for a
    timeout or a connection that failed or broke (shelfhand's and the HTTP client's words),
    else only with ``record_content`` (a provider's error may quote the request)."""
    attributes: dict[str, Any] = {"error.type": type(exc).__name__}
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        attributes["shelfhand.chat.status_code"] = status
    if isinstance(exc, ModelTimeoutError) or (
        isinstance(exc, ModelError) and (record_content or getattr(exc, "connection_lost", False))
    ):
        attributes["shelfhand.chat.failure"] = str(exc)
    return attributes


async def invoke_agent(
    steps: AsyncGenerator[Event, None],
    agent_name: str,
    trace_id: str,
    prompt: str | Message,
    user: UserContext | None,
) -> AsyncGenerator[Event, None]:
    """``steps`` (one run's events) inside an ``invoke_agent`` span: the run's usage and stop
    reason on it, its error type when the run fails. A failure leaves no span of the run
    open (an unfinished model call's span ends failed too)."""
    span = start_span(
        f"invoke_agent {agent_name}",
        "agent",
        trace_id=trace_id,
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent_name},
    )
    if span is None:  # tracing was turned off meanwhile
        async with aclosing(steps):
            async for event in steps:
                yield event
        return
    if span.root:  # a run outside any turn: the trace is its caller's
        who = user or ANONYMOUS
        span.tenant_id, span.user_id = who.tenant_id, who.user_id
    if span.tracer.record_content:
        span.set("gen_ai.input.messages", prompt if isinstance(prompt, str) else prompt.text)
    token = enter(span)
    try:
        async with aclosing(steps):
            async for event in steps:
                if isinstance(event, Final):
                    _finish(span, event)
                yield event
    except BaseException as exc:
        _close_open_children(span, exc)
        span.fail(type(exc).__name__)
        raise
    finally:
        leave(span, token)


def _finish(span: Span, event: Final) -> None:
    result = event.result
    usage = result.usage
    span.update(
        {
            "gen_ai.usage.input_tokens": usage.input_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
            "shelfhand.usage.model_calls": usage.model_calls,
            "shelfhand.usage.tool_calls": usage.tool_calls,
            "shelfhand.usage.retrievals": usage.retrievals,
            "shelfhand.run.stop_reason": result.stop_reason,
            "shelfhand.run.iterations": result.iterations,
        }
    )
    if span.tracer.record_content:
        span.set("gen_ai.output.messages", result.output)


def _close_open_children(span: Span, exc: BaseException) -> None:
    """End, failed, the spans a failure left current below ``span`` (a model call that
    raised: with why, see :func:`failure_attributes`)."""
    open_span = current_span()
    while open_span is not None and open_span is not span:
        if open_span.kind == "chat":
            _failed_call(open_span, exc)
        else:
            open_span.fail(type(exc).__name__)
        open_span.end()
        parent_id = open_span.parent_id
        open_span = span if parent_id == span.span_id else None


@dataclass(slots=True, kw_only=True)
class ChatCall:
    """One model call being observed: its span (tracing on) and the turn's counting
    (metrics)."""

    model: str
    span: Span | None
    token: Token[Span | None] | None
    counting: Counting | None


def chat_span(model: ChatModel) -> ChatCall | None:
    """A ``chat {model}`` span for one model call, made current, and the call counted
    (end both with :func:`end_chat`); ``None`` when nothing observes the call."""
    counting = current_counting()
    if not tracing_on():
        if counting is None:
            return None
        span = None
        name = model.name
    else:
        name = model.name  # (a property: read once)
        span = start_span(
            f"chat {name}",
            "chat",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": name,
                **model_attributes(model),
            },
        )
    if counting is not None:
        counting.model_call_started(name)
    return ChatCall(model=name, span=span, token=enter(span), counting=counting)


def end_chat(call: ChatCall, response: ModelResponse, first_token_ns: int | None) -> None:
    """Count the call; record the reply's model, tokens, finish reason and time to first
    token on its span; end it."""
    usage = response.usage
    input_tokens = usage.input_tokens if usage is not None else 0
    output_tokens = usage.output_tokens if usage is not None else 0
    if call.counting is not None:
        call.counting.model_call_ended(call.model, input_tokens, output_tokens)
    span = call.span
    if span is None:
        return
    attributes = span.attributes  # (set on the span's own dict: nothing here is None)
    if response.model_name:
        attributes["gen_ai.response.model"] = response.model_name
    if response.finish_reason:
        attributes["gen_ai.response.finish_reasons"] = [response.finish_reason]
    attributes["gen_ai.usage.input_tokens"] = input_tokens
    attributes["gen_ai.usage.output_tokens"] = output_tokens
    attributes["shelfhand.chat.tool_calls"] = len(response.message.tool_calls)
    if first_token_ns is not None:
        span.set("shelfhand.chat.time_to_first_token_ms", (first_token_ns - span.start_ns) / 1e6)
    if span.tracer.record_content:
        span.set("gen_ai.output.messages", response.message.text)
    leave(span, call.token)


def cut_chat(call: ChatCall, usage: Usage, exc: BaseException) -> None:
    """A model call ``exc`` ended before its reply was complete: counted (and so booked in
    the usage ledger) at ``usage``, what its budget charged (the request, the text streamed),
    since no reply will carry it. Its status: ``cut`` when its caller left, ``timeout`` past
    its deadline, ``error`` for a stream broken after text. Its span says those tokens, marked
    estimated (``shelfhand.usage.estimated``), so a trace's calls add up to its turn's usage;
    it is ended by the run's or the turn's end."""
    span = call.span
    if span is not None:
        span.update(
            {
                "gen_ai.usage.input_tokens": usage.input_tokens,
                "gen_ai.usage.output_tokens": usage.output_tokens,
                "shelfhand.usage.estimated": True,
            }
        )
    if call.counting is not None:
        if isinstance(exc, LEFT):
            status = "cut"
        elif isinstance(exc, LATE):
            status = "timeout"
        else:
            status = "error"
        call.counting.model_call_ended(
            call.model, usage.input_tokens, usage.output_tokens, status=status
        )


def fail_chat(call: ChatCall, exc: BaseException, cut: Usage | None = None) -> None:
    """A model call that raised (one whose failure the caller survives, such as the memory's
    summary): counted failed, or at ``cut`` when it was cut off (what its budget charged: see
    :func:`cut_chat`); its span ended failed with ``exc``'s type (and, for a timeout, its
    words: :func:`failure_attributes`)."""
    if cut is not None:
        cut_chat(call, cut, exc)
    elif call.counting is not None:
        call.counting.model_call_ended(call.model, 0, 0, status="error")
    span = call.span
    if span is not None:
        _failed_call(span, exc)
        leave(span, call.token)


def _failed_call(span: Span, exc: BaseException) -> None:
    """Mark a ``chat`` span failed, with why (:func:`failure_attributes`)."""
    span.status = "error"
    span.update(failure_attributes(exc, record_content=span.tracer.record_content))


def replayed_call(call: ToolCallBlock, earlier: ToolResultBlock) -> None:
    """An ``execute_tool`` span for a call the run answered from an earlier identical call's
    result (:class:`~.guard.CallGuard`), with no execution and no governance. Decision
    ``replayed``, and the call whose result it got as ``shelfhand.tool.replayed_from``. Without
    it, the trace shows the model asking for a call and nothing after it."""
    span = start_span(f"execute_tool {call.name}", "tool")
    if span is None:
        return
    attributes = span.attributes
    attributes.update(tool_span_attributes(call))
    attributes["shelfhand.tool.decision"] = "replayed"
    attributes["shelfhand.tool.outcome"] = "ok"
    attributes["shelfhand.tool.attempts"] = 0
    attributes["shelfhand.tool.replayed_from"] = earlier.call_id
    span.event("run.replayed", from_call_id=earlier.call_id)
    if span.tracer.record_content:
        attributes["gen_ai.tool.call.result"] = earlier.content
    span.end()


def first_token_time() -> int:
    return time.time_ns()
