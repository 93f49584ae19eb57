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

Finished spans go to the tracer's processors: a :class:`SpanProcessor` takes each span as
it ends (the OpenTelemetry exporter, :class:`SpanList`); a :class:`TraceProcessor` (the
trace store's recorder) takes a trace's finished spans together, once, when its root ends:
until then a child's end is one append to its trace's list. A trace whose root does not end
(a process stopping mid-turn) hands over what has finished on :meth:`Tracer.flush` and
:meth:`Tracer.close`, and a very long one every :data:`TRACE_HAND_OFF` spans. A processor
must be cheap on the caller's path: queue, never write.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import time
import zlib
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar, Token
from random import getrandbits as _bits
from typing import Any, Literal, Protocol, cast

from shelfhand.core.errors import InvalidArgumentError

__all__ = [
    "Span",
    "SpanEvent",
    "SpanKind",
    "SpanList",
    "SpanProcessor",
    "TraceProcessor",
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


class SpanEvent:
    """Something that happened at one moment of a span (a governance decision, a budget).

    A plain class with slots, not a frozen dataclass: one is made per governance step of
    every traced tool call, and a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``. Treat it as read-only.
    """

    __slots__ = ("attributes", "name", "time_ns")

    def __init__(self, name: str, time_ns: int, attributes: Mapping[str, Any] | None = None):
        self.name = name
        self.time_ns = time_ns
        self.attributes: Mapping[str, Any] = {} if attributes is None else attributes

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SpanEvent):
            return NotImplemented
        return (self.name, self.time_ns, self.attributes) == (
            other.name,
            other.time_ns,
            other.attributes,
        )

    __hash__ = None  # type: ignore[assignment]  # (its attributes are a mapping)

    def __repr__(self) -> str:
        return (
            f"SpanEvent(name={self.name!r}, time_ns={self.time_ns}, attributes={self.attributes!r})"
        )


class _Trace:
    """The finished spans of one trace in this process, kept until its root ends (for the
    tracer's :class:`TraceProcessor` s). ``closed`` once the root has ended: a child that
    ends later (a search thread outliving its cancelled turn) is handed over on its own.

    A deque and a flag, no lock: a span is appended before ``closed`` is read, and the root
    sets ``closed`` before it empties the deque, so every span is taken by exactly one of
    the two (``popleft`` is atomic)."""

    __slots__ = ("closed", "spans")

    def __init__(self) -> None:
        self.spans: deque[Span] = deque()
        self.closed = False


TRACE_HAND_OFF = 256
"""A trace whose root is still open hands its finished spans over when this many wait (a
long run outside any turn: its memory stays bounded)."""


class Span:
    """One step of a trace, open until :meth:`end` (then handed to the tracer's
    processors; not changed afterwards).

    A plain class with slots (one is made per step of every traced turn): attributes are
    kept as given, in the span's own dict, and turned into their stored form only when
    a processor encodes them.
    """

    __slots__ = (
        "_trace",
        "attributes",
        "end_ns",
        "events",
        "kind",
        "name",
        "parent_id",
        "root",
        "span_id",
        "start_ns",
        "status",
        "tenant_id",
        "trace_id",
        "tracer",
        "user_id",
    )

    def __init__(
        self,
        tracer: Tracer,
        trace_id: str,
        span_id: str,
        parent_id: str,
        name: str,
        kind: SpanKind,
        start_ns: int,
        tenant_id: str = "",
        user_id: str = "",
        root: bool = False,
        attributes: dict[str, Any] | None = None,
        trace: _Trace | None = None,
    ) -> None:
        self.tracer = tracer
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_id = parent_id
        self.name = name
        self.kind = kind
        self.start_ns = start_ns
        self.tenant_id = tenant_id
        self.user_id = user_id
        self.root = root
        """The first span of the trace in this process (a turn, or a run outside one)."""
        self.end_ns = 0
        self.status: Literal["ok", "error"] = "ok"
        self.attributes: dict[str, Any] = {} if attributes is None else attributes
        self.events: list[SpanEvent] = []
        self._trace = trace

    def __repr__(self) -> str:
        return (
            f"Span(name={self.name!r}, kind={self.kind!r}, trace_id={self.trace_id!r}, "
            f"span_id={self.span_id!r}, parent_id={self.parent_id!r}, status={self.status!r})"
        )

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
        self.events.append(SpanEvent(name, time.time_ns(), attributes))

    def fail(self, error_type: str) -> None:
        """Mark the span failed, with ``error.type`` (an error class or code)."""
        self.status = "error"
        self.attributes["error.type"] = error_type

    def end(self) -> None:
        """Close the span (once; later calls do nothing) and hand it to the processors: a
        :class:`SpanProcessor` now, a :class:`TraceProcessor` with its trace (when the root
        ends)."""
        if self.end_ns:
            return
        self.end_ns = time.time_ns()
        tracer = self.tracer
        for processor in tracer.span_processors:  # (not Tracer.finished: one call less)
            try:
                processor.on_end(self)
            except Exception:  # a broken exporter never fails a turn
                logger.exception("span processor %s failed", type(processor).__name__)
        trace = self._trace
        if trace is None:
            return
        trace.spans.append(self)
        if self.root:
            trace.closed = True
            tracer._open.discard(trace)
            tracer._hand_over(trace)
        elif trace.closed or len(trace.spans) >= TRACE_HAND_OFF:
            tracer._hand_over(trace)

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6 if self.end_ns else 0.0


class SpanProcessor(Protocol):
    """Where finished spans go one by one (the OpenTelemetry exporter, a :class:`SpanList`)."""

    def on_end(self, span: Span) -> None:
        """Take a finished span; must not block (queue it)."""
        ...

    def flush(self) -> None:
        """Write what is queued now (tests, shutdown)."""
        ...

    def close(self) -> None:
        """Flush and stop."""
        ...


class TraceProcessor(Protocol):
    """Where finished spans go a trace at a time (the trace store's recorder): the tracer
    keeps a trace's finished spans until its root ends, and hands them over in one call."""

    def on_trace(self, spans: Sequence[Span]) -> None:
        """Take finished spans of one trace, in the order they ended (all of them, the root
        last, when the root has ended; else those finished so far, see
        :meth:`Tracer.flush`); must not block (queue them)."""
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
        processors: Iterable[SpanProcessor | TraceProcessor] = (),
        *,
        record_content: bool = False,
        sample_ratio: float = 1.0,
    ) -> None:
        self.processors = tuple(processors)
        by_span: list[SpanProcessor] = []
        by_trace: list[TraceProcessor] = []
        for processor in self.processors:
            if hasattr(processor, "on_trace"):
                by_trace.append(cast("TraceProcessor", processor))
            else:
                by_span.append(processor)
        self.span_processors = tuple(by_span)
        """The processors that take each span as it ends."""
        self.trace_processors = tuple(by_trace)
        """The processors that take a trace's spans when its root ends."""
        self._open: set[_Trace] = set()
        """The traces whose root is open (their finished spans wait for it)."""
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
        trace = None
        if self.trace_processors:
            trace = _Trace()
            self._open.add(trace)
        return Span(
            self,
            trace_id,
            new_span_id(),
            parent_id,
            name,
            kind,
            time.time_ns(),
            tenant_id,
            user_id,
            True,
            _present(attributes),
            trace,
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
        """Hand a finished span to the processors (what :meth:`Span.end` does)."""
        span.end_ns = span.end_ns or time.time_ns()
        for processor in self.span_processors:
            try:
                processor.on_end(span)
            except Exception:  # a broken exporter never fails a turn
                logger.exception("span processor %s failed", type(processor).__name__)
        if self.trace_processors:
            self._deliver([span])

    def _hand_over(self, trace: _Trace) -> None:
        """Hand the finished spans waiting in ``trace`` to the trace processors."""
        waiting = trace.spans
        # as many as wait now, each taken by one atomic popleft (a span appended meanwhile
        # stays for the next hand-over: its own, once the root has closed the trace); no
        # IndexError to end the loop but when another thread (a flush) took some meanwhile
        take = waiting.popleft
        spans: list[Span] = []
        try:
            for _ in range(len(waiting)):
                spans.append(take())
        except IndexError:
            pass
        if spans:
            self._deliver(spans)

    def _deliver(self, spans: Sequence[Span]) -> None:
        for processor in self.trace_processors:
            try:
                processor.on_trace(spans)
            except Exception:  # a broken store never fails a turn
                logger.exception("trace processor %s failed", type(processor).__name__)

    def flush(self) -> None:
        """Hand over the finished spans of traces whose root is still open (a running turn,
        or one whose process is stopping), then write every processor's queue now."""
        for trace in list(self._open):
            self._hand_over(trace)
        for processor in self.processors:
            processor.flush()

    def close(self) -> None:
        """Hand over what has finished (as :meth:`flush`) and close the processors."""
        for trace in list(self._open):
            self._hand_over(trace)
        self._open.clear()
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
    if attributes:  # (_present, inlined: this runs for every span)
        if None in attributes.values():
            attributes = {k: v for k, v in attributes.items() if v is not None}
        own: dict[str, Any] | None = dict(attributes)
    else:
        own = None
    return Span(
        parent.tracer,
        parent.trace_id,
        _next_span_number().to_bytes(8, "big").hex(),  # (new_span_id, inlined)
        parent.span_id,
        name,
        kind,
        time.time_ns(),
        parent.tenant_id,
        parent.user_id,
        False,
        own,
        parent._trace,
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


def _span_counter() -> Iterator[int]:
    # from a random 63-bit start: never 0 (an invalid OpenTelemetry id), and no two
    # processes (replicas, workers) counting from the same place
    return itertools.count(_bits(63) | 1)


_span_ids = _span_counter()
_next_span_number = _span_ids.__next__


def _reseed_after_fork() -> None:
    global _span_ids, _next_span_number  # a forked child counts anew
    _span_ids = _span_counter()
    _next_span_number = _span_ids.__next__


if hasattr(os, "register_at_fork"):  # (not on Windows)
    os.register_at_fork(after_in_child=_reseed_after_fork)


def new_span_id() -> str:
    """A span id: 16 hex digits (OpenTelemetry's 8 bytes), unique within the process and,
    with a random start per process, across processes.

    Not a secret, only unique: counting is cheaper than drawing 64 random bits per span,
    and ``bytes.hex`` three times cheaper than a formatted string."""
    return _next_span_number().to_bytes(8, "big").hex()


def new_trace_id() -> str:
    """A trace id: 32 random hex digits (OpenTelemetry's 16 bytes)."""
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
