"""Trace ids for requests and turns (docs/design.md P4, first step).

Every HTTP request gets a trace id: the caller's ``X-Trace-Id`` header when it is a plausible
id, otherwise a new one. It is returned in the ``X-Trace-Id`` response header, put into every
streamed event of a chat turn, stored with the turn's messages, and attached to every log
record written while the request is handled (:class:`TraceIdFilter`), so one id finds a turn
in the logs, in the session store and in the client.

A W3C ``traceparent`` header is honoured: without an ``X-Trace-Id``, its trace id names the
request, and its span is the parent of the turn's root span (:func:`current_parent_span_id`),
so the turn joins the caller's distributed trace.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shelfhand.core.tracing import parse_traceparent

__all__ = ["TRACE_HEADER", "TraceIdFilter", "TraceIdMiddleware", "current_trace_id"]

TRACE_HEADER = "X-Trace-Id"
_HEADER_KEY = TRACE_HEADER.lower().encode("latin-1")
_VALID = re.compile(r"^[A-Za-z0-9._:-]{8,64}$")

_trace_id: ContextVar[str] = ContextVar("shelfhand_trace_id", default="")
_parent_span: ContextVar[str] = ContextVar("shelfhand_parent_span", default="")
_TRACEPARENT_KEY = b"traceparent"


def current_parent_span_id() -> str:
    """The caller's span id from the request's ``traceparent`` ('' when it sent none)."""
    return _parent_span.get()


def current_trace_id() -> str:
    """The trace id of the request being handled ('' outside a request)."""
    return _trace_id.get()


def new_trace_id() -> str:
    return uuid.uuid4().hex


class TraceIdMiddleware:
    """ASGI middleware: pick the request's trace id, expose it to logs and the response.

    Written as plain ASGI (not ``BaseHTTPMiddleware``) so that streamed responses pass
    through untouched and the context variable is visible to the streaming generator.

    Args:
        app: The application.
        on_error: The response to an exception the application raised before it started
            its response (logged by it); sent from here, with the header, while the trace id
            is still the request's (a handler outside this middleware, as Starlette's for
            ``Exception``, runs after it is reset). ``None``: raised on.
    """

    def __init__(
        self, app: ASGIApp, on_error: Callable[[Scope, Exception], Response] | None = None
    ) -> None:
        self.app = app
        self.on_error = on_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        trace_id = parent = ""
        for key, value in scope.get("headers", ()):
            if key == _HEADER_KEY:
                candidate = value.decode("latin-1")
                if _VALID.match(candidate):
                    trace_id = candidate
            elif key == _TRACEPARENT_KEY:
                found = parse_traceparent(value.decode("latin-1"))
                if found is not None:
                    parent_trace, parent = found
                    trace_id = trace_id or parent_trace
        trace_id = trace_id or new_trace_id()
        token = _trace_id.set(trace_id)
        parent_token = _parent_span.set(parent)
        raw = trace_id.encode("latin-1")

        started = False

        async def send_with_header(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = [h for h in message.get("headers", ()) if h[0] != _HEADER_KEY]
                headers.append((_HEADER_KEY, raw))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_header)
        except Exception as exc:
            if started or self.on_error is None:
                raise
            await self.on_error(scope, exc)(scope, receive, send_with_header)
        finally:
            _trace_id.reset(token)
            _parent_span.reset(parent_token)


class TraceIdFilter(logging.Filter):
    """Adds ``trace_id`` to every record (``-`` outside a request) for log formats."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.trace_id = _trace_id.get() or "-"
        return True


def install_log_filter(logger: logging.Logger | None = None) -> Any:
    """Attach :class:`TraceIdFilter` to the handlers of ``logger`` (the root by default)."""
    target = logger or logging.getLogger()
    flt = TraceIdFilter()
    for handler in target.handlers:
        if not any(isinstance(f, TraceIdFilter) for f in handler.filters):
            handler.addFilter(flt)
    return flt
