"""OpenTelemetry export of shelfhand's spans (``pip install 'shelfhand[otel]'``).

The spans the agent loop, the toolkit, the knowledge base and the service record
(:mod:`shelfhand.core.tracing`) already carry the GenAI semantic-convention names and
attributes; :class:`OtelProcessor` hands each finished one to an OpenTelemetry SDK span
processor with the same trace id, span id, parent, times, attributes, events and status, so
a collector (Arize Phoenix, Jaeger, an OTel collector) shows the tree shelfhand stores.

- Trace ids: the turn's (``X-Trace-Id``). One that is not 32 hex digits is hashed into one,
  and the original is kept as ``shelfhand.trace_id``.
- Configuration: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the collector's OTLP/HTTP root),
  ``OTEL_SERVICE_NAME`` (default ``shelfhand``) and ``OTEL_TRACES_SAMPLER`` (read by the
  SDK), as for any OpenTelemetry program.
- Attribute values OpenTelemetry cannot carry (mappings, lists of mappings) are sent as
  JSON text.
- The request's thread pays for a span's ids, its sampling decision and the hand-off to the
  SDK's processor; its attributes and events are converted when the exporter reads them (on
  the ``BatchSpanProcessor``'s thread).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from shelfhand.core.errors import ConfigurationError

try:
    from opentelemetry import trace as otel_trace
    from opentelemetry.attributes import BoundedAttributes
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import (
        Event,
        ReadableSpan,
        SpanLimits,
        TracerProvider,
    )
    from opentelemetry.sdk.trace import SpanProcessor as OtelSpanProcessor
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import Decision
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags
    from opentelemetry.util.types import Attributes
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ConfigurationError(
        "OpenTelemetry export needs the otel extra: pip install 'shelfhand[otel]'"
    ) from exc

if TYPE_CHECKING:
    from shelfhand.core.tracing import Span

__all__ = ["OtelProcessor", "otel_trace_id", "otlp_processor"]

_KINDS = {
    "turn": SpanKind.SERVER,
    "chat": SpanKind.CLIENT,
    "mcp": SpanKind.CLIENT,
}
_HEX = frozenset("0123456789abcdef")


def otel_trace_id(trace_id: str) -> int:
    """The 128-bit OpenTelemetry trace id of a shelfhand trace id (hashed unless it is 32
    hex digits already)."""
    text = trace_id.lower()
    if len(text) == 32 and _HEX.issuperset(text) and text != "0" * 32:
        return int(text, 16)
    return int(hashlib.sha256(trace_id.encode("utf-8")).hexdigest()[:32], 16)


def _value(value: Any) -> Any:
    if isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return list(value)
    if isinstance(value, list | tuple) and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value
    ):
        return list(value)
    return json.dumps(value, ensure_ascii=False, default=str)


class _Exported(ReadableSpan):
    """A finished shelfhand span as OpenTelemetry's processors and exporters read it.

    Its ids, times, kind and status are set when it is made, on the caller's thread; its
    attributes and events are converted (:func:`_value`, the SDK's span limits) the first
    time an exporter reads them: on the batch processor's thread, not on the request's.
    """

    def __init__(
        self,
        span: Span,
        *,
        context: SpanContext,
        parent: SpanContext | None,
        resource: Resource,
        scope: InstrumentationScope,
        limits: SpanLimits,
    ) -> None:
        error = span.attributes.get("error.type") if span.status == "error" else None
        super().__init__(
            name=span.name,
            context=context,
            parent=parent,
            resource=resource,
            kind=_KINDS.get(span.kind, SpanKind.INTERNAL),
            status=Status(StatusCode.ERROR, str(error)) if span.status == "error" else _UNSET,
            start_time=span.start_ns,
            end_time=span.end_ns,
            instrumentation_scope=scope,
        )
        self._source: Span | None = span
        self._limits = limits
        self._convert_lock = threading.Lock()

    def _converted(self) -> None:
        """Convert the source span's attributes and events (once, whichever thread reads
        first)."""
        with self._convert_lock:
            span = self._source
            if span is None:
                return
            limits = self._limits
            attributes = {k: _value(v) for k, v in span.attributes.items()}
            if span.root:
                attributes["shelfhand.trace_id"] = span.trace_id
                attributes["shelfhand.tenant"] = span.tenant_id
            self._attributes = BoundedAttributes(
                limits.max_span_attributes,
                attributes,
                immutable=True,
                max_value_len=limits.max_span_attribute_length,
            )
            self._events = [
                Event(
                    e.name,
                    BoundedAttributes(
                        limits.max_event_attributes,
                        {k: _value(v) for k, v in e.attributes.items()},
                        immutable=True,
                        max_value_len=limits.max_attribute_length,
                    ),
                    timestamp=e.time_ns,
                )
                for e in span.events[: limits.max_events]
            ]
            self._source = None

    @property
    def attributes(self) -> Attributes:
        if self._source is not None:
            self._converted()
        return super().attributes

    @property
    def events(self) -> Sequence[Event]:
        if self._source is not None:
            self._converted()
        return super().events

    @property
    def dropped_attributes(self) -> int:
        if self._source is not None:
            self._converted()
        return super().dropped_attributes

    @property
    def dropped_events(self) -> int:
        if self._source is not None:
            self._converted()
        return super().dropped_events

    def to_json(self, indent: int | None = 4) -> str:
        if self._source is not None:
            self._converted()
        text: str = super().to_json(indent)
        return text


_UNSET = Status(StatusCode.UNSET)


class OtelProcessor:
    """A :class:`~shelfhand.core.tracing.SpanProcessor` that hands each finished span to
    ``processor`` (a ``BatchSpanProcessor`` over an OTLP exporter in production, a
    ``SimpleSpanProcessor`` over the in-memory exporter in tests) as an OpenTelemetry span
    with the same trace id, span id, parent, times, attributes, events and status.

    On the caller's thread a span costs its ids, its sampling decision (the SDK's sampler,
    ``OTEL_TRACES_SAMPLER``) and the hand-off to ``processor``; its attributes and events
    are converted when the exporter reads them (the batch processor's thread).

    Args:
        processor: The OpenTelemetry SDK span processor.
        resource: The OpenTelemetry resource (default: ``service.name`` from
            ``OTEL_SERVICE_NAME``, else ``shelfhand``).
    """

    def __init__(self, processor: OtelSpanProcessor, *, resource: Resource | None = None) -> None:
        if resource is None:
            given = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "shelfhand"}
            resource = Resource.create(given)
        self.provider = TracerProvider(resource=resource)
        self.provider.add_span_processor(processor)
        self._processor = processor
        self._sampler = self.provider.sampler
        self._resource = resource
        self._scope = InstrumentationScope("shelfhand")
        self._limits = SpanLimits()

    def on_end(self, span: Span) -> None:
        trace_id = otel_trace_id(span.trace_id)
        parent = None
        context = None
        if span.parent_id:
            parent = SpanContext(
                trace_id=trace_id,
                span_id=int(span.parent_id, 16),
                is_remote=span.root,  # a root's parent is the caller's (traceparent)
                trace_flags=_SAMPLED,
            )
            context = otel_trace.set_span_in_context(otel_trace.NonRecordingSpan(parent))
        kind = _KINDS.get(span.kind, SpanKind.INTERNAL)
        decision = self._sampler.should_sample(context, trace_id, span.name, kind).decision
        if decision is not Decision.RECORD_AND_SAMPLE:
            return
        own = SpanContext(
            trace_id=trace_id,
            span_id=int(span.span_id, 16),
            is_remote=False,
            trace_flags=_SAMPLED,
        )
        self._processor.on_end(
            _Exported(
                span,
                context=own,
                parent=parent,
                resource=self._resource,
                scope=self._scope,
                limits=self._limits,
            )
        )

    def flush(self) -> None:
        self.provider.force_flush()

    def close(self) -> None:
        self.provider.shutdown()


_SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def otlp_processor(endpoint: str) -> OtelProcessor:
    """Export over OTLP/HTTP to the collector at ``endpoint`` (its root: ``/v1/traces`` is
    added), in batches from a background thread."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    exporter = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces")
    return OtelProcessor(BatchSpanProcessor(exporter))
