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
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from typing import TYPE_CHECKING, Any

from shelfhand.core.errors import ConfigurationError

try:
    from opentelemetry import trace as otel_trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanProcessor as OtelSpanProcessor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.id_generator import IdGenerator
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags
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


class _GivenIds(IdGenerator):
    """Hands the SDK the ids of the span being exported (set per thread just before)."""

    def __init__(self) -> None:
        self.local = threading.local()

    def generate_span_id(self) -> int:
        return int(self.local.span_id)

    def generate_trace_id(self) -> int:
        return int(self.local.trace_id)


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


class OtelProcessor:
    """A :class:`~shelfhand.core.tracing.SpanProcessor` that re-creates each finished span
    in OpenTelemetry and hands it to ``processor`` (a ``BatchSpanProcessor`` over an OTLP
    exporter in production, a ``SimpleSpanProcessor`` over the in-memory exporter in tests).

    Args:
        processor: The OpenTelemetry SDK span processor.
        resource: The OpenTelemetry resource (default: ``service.name`` from
            ``OTEL_SERVICE_NAME``, else ``shelfhand``).
    """

    def __init__(self, processor: OtelSpanProcessor, *, resource: Resource | None = None) -> None:
        if resource is None:
            given = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "shelfhand"}
            resource = Resource.create(given)
        self._ids = _GivenIds()
        self.provider = TracerProvider(resource=resource, id_generator=self._ids)
        self.provider.add_span_processor(processor)
        self._tracer = self.provider.get_tracer("shelfhand")

    def on_end(self, span: Span) -> None:
        trace_id = otel_trace_id(span.trace_id)
        ids = self._ids.local
        ids.trace_id, ids.span_id = trace_id, int(span.span_id, 16)
        context = None
        if span.parent_id:
            parent = SpanContext(
                trace_id=trace_id,
                span_id=int(span.parent_id, 16),
                is_remote=span.root,  # a root's parent is the caller's (traceparent)
                trace_flags=TraceFlags(TraceFlags.SAMPLED),
            )
            context = otel_trace.set_span_in_context(otel_trace.NonRecordingSpan(parent))
        attributes = {k: _value(v) for k, v in span.attributes.items()}
        if span.root:
            attributes["shelfhand.trace_id"] = span.trace_id
            attributes["shelfhand.tenant"] = span.tenant_id
        exported = self._tracer.start_span(
            span.name,
            context=context,
            kind=_KINDS.get(span.kind, SpanKind.INTERNAL),
            attributes=attributes,
            start_time=span.start_ns,
        )
        for event in span.events:
            exported.add_event(
                event.name,
                {k: _value(v) for k, v in event.attributes.items()},
                timestamp=event.time_ns,
            )
        if span.status == "error":
            exported.set_status(Status(StatusCode.ERROR, str(span.attributes.get("error.type"))))
        exported.end(end_time=span.end_ns)

    def flush(self) -> None:
        self.provider.force_flush()

    def close(self) -> None:
        self.provider.shutdown()


def otlp_processor(endpoint: str) -> OtelProcessor:
    """Export over OTLP/HTTP to the collector at ``endpoint`` (its root: ``/v1/traces`` is
    added), in batches from a background thread."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    exporter = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces")
    return OtelProcessor(BatchSpanProcessor(exporter))
