"""Spans: one tree per turn, recorded by the code that does the work (no monkey-patching).

A span is one step of a turn (the turn, an agent run, a model call, a tool call, a
retrieval, an MCP call) with its start and end times, attributes and events. Names and
attribute keys follow the OpenTelemetry GenAI semantic conventions (``invoke_agent {name}``,
``chat {model}``, ``execute_tool {tool}``, ``retrieval``; ``gen_ai.*``), so the same spans
are stored in the workspace and exported over OTLP without renaming.

Tracing is off unless a :class:`Tracer` is in play: the service opens each turn's root span
with its tracer (:meth:`Tracer.start_root`), or a process sets a default one
(:func:`set_default_tracer`). Everything below a root finds its parent in a context
variable, so the off path costs one ``ContextVar.get()`` and a ``None`` check per step::

    child = start_span("execute_tool lookup", kind="tool")   # None when tracing is off
    token = enter(child)
    try:
        ...
    finally:
        leave(child, token)

Finished spans go to the tracer's processors (:class:`SpanProcessor`): the trace store's
recorder (batched writes), the OpenTelemetry exporter. A processor must be cheap on the
caller's path: queue, never write.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from random import getrandbits as _bits
from typing import Any, Literal, Protocol

from shelfhand.core.errors import InvalidArgumentError

__all__ = [
    "Span",
    "SpanEvent",
    "SpanKind",
    "SpanList",
    "SpanProcessor",
    "Tracer",
    "current_span",
    "enter",
    "format_traceparent",
    "leave",
    "new_span_id",
    "new_trace_id",
    "parse_traceparent",
    "set_default_tracer",
    "start_span",
    "tracing_on",
]

logger = logging.getLogger(__name__)

SpanKind = Literal["turn", "agent", "chat", "tool", "retrieval", "mcp", "pipeline"]
"""What a span is a step of (stored with it; the OTel exporter maps it to a span kind)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SpanEvent:
    """Something that happened at one moment of a span (a governance decision, a budget)."""

    name: str
    time_ns: int
    attributes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(slots=True, kw_only=True)
class Span:
    """One step of a trace, open until :meth:`end` (then handed to the tracer's
    processors; not changed afterwards)."""

    tracer: Tracer = field(repr=False)
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: SpanKind
    start_ns: int
    tenant_id: str = ""
    user_id: str = ""
    root: bool = False
    """The first span of the trace in this process (a turn, or a run outside one)."""
    end_ns: int = 0
    status: Literal["ok", "error"] = "ok"
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[SpanEvent] = field(default_factory=list)

    def set(self, key: str, value: Any) -> None:
        """Set one attribute (``None`` values are left out)."""
        if value is not None:
            self.attributes[key] = value

    def update(self, attributes: Mapping[str, Any]) -> None:
        """Set several attributes (``None`` values are left out)."""
        # most updates hold no None: one C-level scan and update, no per-key Python loop
        if None in attributes.values():
            attributes = {k: v for k, v in attributes.items() if v is not None}
        self.attributes.update(attributes)

    def event(self, name: str, **attributes: Any) -> None:
        """Record that ``name`` happened now."""
        self.events.append(SpanEvent(name=name, time_ns=time.time_ns(), attributes=attributes))

    def fail(self, error_type: str) -> None:
        """Mark the span failed, with ``error.type`` (an error class or code)."""
        self.status = "error"
        self.attributes["error.type"] = error_type

    def end(self) -> None:
        """Close the span (once; later calls do nothing) and hand it to the processors."""
        if self.end_ns:
            return
        self.end_ns = time.time_ns()
        for processor in self.tracer.processors:  # (Tracer.finished, one call less per span)
            try:
                processor.on_end(self)
            except Exception:  # a broken exporter never fails a turn
                logger.exception("span processor %s failed", type(processor).__name__)

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6 if self.end_ns else 0.0


class SpanProcessor(Protocol):
    """Where finished spans go (the trace store's recorder, the OpenTelemetry exporter)."""

    def on_end(self, span: Span) -> None:
        """Take a finished span; must not block (queue it)."""
        ...

    def flush(self) -> None:
        """Write what is queued now (tests, shutdown)."""
        ...

    def close(self) -> None:
        """Flush and stop."""
        ...


class SpanList:
    """A :class:`SpanProcessor` that keeps finished spans in a list, in the order they
    ended (tests, benchmarks, a look at one run)."""

    def __init__(self) -> None:
        self.spans: list[Span] = []

    def on_end(self, span: Span) -> None:
        self.spans.append(span)

    def flush(self) -> None:
        """Nothing to write."""

    def close(self) -> None:
        """Nothing to close."""


class Tracer:
    """Starts root spans and hands finished spans to its processors.

    Args:
        processors: Where finished spans go.
        record_content: Record message contents and tool results (prompts, answers) in
            spans; off by default, as they may hold personal data.
        sample_ratio: The share of traces recorded (:meth:`sampled`: the service's turns,
            the runs a default tracer starts); 1 records every one.
    """

    def __init__(
        self,
        processors: Iterable[SpanProcessor] = (),
        *,
        record_content: bool = False,
        sample_ratio: float = 1.0,
    ) -> None:
        self.processors = tuple(processors)
        self.record_content = record_content
        if not 0.0 <= sample_ratio <= 1.0:
            raise InvalidArgumentError(f"sample_ratio must be within 0 and 1, not {sample_ratio}")
        self.sample_ratio = sample_ratio
        self._sample_below = int(sample_ratio * 2**32)

    def sampled(self, trace_id: str) -> bool:
        """Whether the trace ``trace_id`` is recorded: decided by the trace id alone, so every
        replica and every run of one trace decides alike."""
        if self._sample_below >= 2**32:
            return True
        return zlib.crc32(trace_id.encode("utf-8")) < self._sample_below

    def start_root(
        self,
        name: str,
        *,
        kind: SpanKind = "turn",
        trace_id: str,
        parent_id: str = "",
        tenant_id: str = "",
        user_id: str = "",
        attributes: Mapping[str, Any] | None = None,
    ) -> Span:
        """A span with no parent in this process (``parent_id``: the caller's span, from an
        incoming ``traceparent``)."""
        return Span(
            tracer=self,
            trace_id=trace_id,
            span_id=new_span_id(),
            parent_id=parent_id,
            name=name,
            kind=kind,
            start_ns=time.time_ns(),
            tenant_id=tenant_id,
            user_id=user_id,
            root=True,
            attributes=_present(attributes),
        )

    @contextlib.contextmanager
    def root(
        self,
        name: str,
        *,
        trace_id: str,
        tenant_id: str = "",
        user_id: str = "",
        attributes: Mapping[str, Any] | None = None,
    ) -> Iterator[Span]:
        """A root span, current for the block (the runs inside it are its children); it
        ends with the block, failed with the error's type if the block raises::

            with tracer.root("turn", trace_id=trace_id, tenant_id="acme", user_id="alice"):
                await agent.run(question, context=alice, trace_id=trace_id)
        """
        span = self.start_root(
            name, trace_id=trace_id, tenant_id=tenant_id, user_id=user_id, attributes=attributes
        )
        token = enter(span)
        try:
            yield span
        except BaseException as exc:
            span.fail(type(exc).__name__)
            raise
        finally:
            leave(span, token)

    def finished(self, span: Span) -> None:
        for processor in self.processors:
            try:
                processor.on_end(span)
            except Exception:  # a broken exporter never fails a turn
                logger.exception("span processor %s failed", type(processor).__name__)

    def flush(self) -> None:
        """Write every processor's queue now."""
        for processor in self.processors:
            processor.flush()

    def close(self) -> None:
        for processor in self.processors:
            processor.close()


_current: ContextVar[Span | None] = ContextVar("shelfhand_span", default=None)
_default: list[Tracer | None] = [None]


def set_default_tracer(tracer: Tracer | None) -> None:
    """Trace runs that start outside any span (a script's ``Agent.run``) with ``tracer``;
    ``None`` turns that off again. The service does not need this: it opens each turn's
    root span itself."""
    _default[0] = tracer


def tracing_on() -> bool:
    """Whether a step starting now would be traced (a span is open, or a default tracer is
    set)."""
    return _current.get() is not None or _default[0] is not None


def current_span() -> Span | None:
    """The open span of the running step (``None`` when tracing is off)."""
    return _current.get()


def start_span(
    name: str,
    kind: SpanKind,
    *,
    trace_id: str = "",
    attributes: Mapping[str, Any] | None = None,
    parent: Span | None = None,
) -> Span | None:
    """A child of ``parent`` (default: the current span), or a root of the default tracer
    under ``trace_id`` when there is no current span; ``None`` when tracing is off."""
    if parent is None:
        parent = _current.get()
    if parent is None:
        tracer = _default[0]
        if tracer is None:
            return None
        trace_id = trace_id or new_trace_id()
        if not tracer.sampled(trace_id):
            return None
        return tracer.start_root(name, kind=kind, trace_id=trace_id, attributes=attributes)
    return Span(
        tracer=parent.tracer,
        trace_id=parent.trace_id,
        span_id=new_span_id(),
        parent_id=parent.span_id,
        name=name,
        kind=kind,
        start_ns=time.time_ns(),
        tenant_id=parent.tenant_id,
        user_id=parent.user_id,
        attributes=_present(attributes),
    )


def _present(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    """A span's own copy of ``attributes``, ``None`` values left out."""
    if not attributes:
        return {}
    if None in attributes.values():
        return {k: v for k, v in attributes.items() if v is not None}
    return dict(attributes)


def enter(span: Span | None) -> Token[Span | None] | None:
    """Make ``span`` the current span (for the steps it calls); ``None`` for no span."""
    return None if span is None else _current.set(span)


def leave(span: Span | None, token: Token[Span | None] | None) -> None:
    """End ``span`` and make its parent current again."""
    if span is None:
        return
    span.end()
    if token is not None:
        try:  # (not contextlib.suppress: this runs for every span)
            _current.reset(token)
        except ValueError:  # a generator closed from another context: that context is gone
            return


def new_span_id() -> str:
    # not a secret, only unique: the PRNG is several times cheaper than os.urandom, and
    # bytes.hex three times cheaper than a formatted string
    return (_bits(64) or 1).to_bytes(8, "big").hex()


def new_trace_id() -> str:
    return f"{_bits(128) or 1:032x}"


_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def parse_traceparent(header: str) -> tuple[str, str] | None:
    """The trace id and parent span id of a W3C ``traceparent`` header; ``None`` when it is
    malformed or all zeros (then the caller starts a trace of its own)."""
    match = _TRACEPARENT.match(header.strip().lower())
    if match is None:
        return None
    trace_id, span_id = match.group(1), match.group(2)
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    return trace_id, span_id


def format_traceparent(trace_id: str, span_id: str) -> str:
    """The W3C ``traceparent`` header of a span (sampled)."""
    return f"00-{trace_id}-{span_id}-01"
