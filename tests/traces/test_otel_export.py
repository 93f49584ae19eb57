"""The OpenTelemetry exporter hands spans over cheaply and converts them on the exporter's
side: what reaches a batch exporter is the whole span, and the SDK's sampler still decides."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from shelfhand.core.tracing import Span, SpanList, Tracer, enter, leave, start_span
from shelfhand.providers.otel import OtelProcessor

HITS = [{"id": "退货::0", "source": "policies/退货.md", "score": 0.9}]


def one_turn(tracer: Tracer, trace_id: str = "b" * 32) -> list[Span]:
    """A turn's root with a retrieval span under it (a failed one) and a tool span."""
    kept = SpanList()
    local = Tracer([kept, *tracer.processors])
    root = local.start_root("turn", trace_id=trace_id, tenant_id="acme", user_id="alice")
    token = enter(root)
    retrieval = start_span("retrieval", "retrieval", attributes={"gen_ai.operation.name": "x"})
    assert retrieval is not None
    retrieval.update({"gen_ai.retrieval.documents": HITS, "gen_ai.retrieval.query.text": "退货"})
    retrieval.event("governance.permission", decision="allow", scopes=["acme"])
    retrieval.fail("TimeoutError")
    retrieval.end()
    tool = start_span("execute_tool lookup", "tool", attributes={"gen_ai.tool.name": "查询"})
    assert tool is not None
    tool.end()
    leave(root, token)
    return kept.spans


class ThreadRecording(SpanExporter):
    """Keeps what it exports and the thread that read each span's attributes."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []
        self.readers: set[str] = set()
        self.exported = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            assert span.attributes is not None
            self.readers.add(threading.current_thread().name)
        self.spans.extend(spans)
        self.exported.set()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def test_a_batch_exporter_gets_every_span_whole_and_converts_it_on_its_own_thread() -> None:
    exporter = ThreadRecording()
    # a full batch (the turn's three spans) wakes the processor's thread; no timer does
    batch = BatchSpanProcessor(exporter, schedule_delay_millis=600_000, max_export_batch_size=3)
    otel = OtelProcessor(batch)
    ours = one_turn(Tracer([otel]))
    assert exporter.exported.wait(10)
    assert exporter.readers and threading.current_thread().name not in exporter.readers
    by_name = {s.name: s for s in exporter.spans}
    assert set(by_name) == {s.name for s in ours}
    retrieval = by_name["retrieval"]
    assert retrieval.attributes is not None
    assert retrieval.attributes["gen_ai.retrieval.query.text"] == "退货"
    assert '"source":"policies/退货.md"' in str(
        retrieval.attributes["gen_ai.retrieval.documents"]
    ).replace(" ", "")
    assert not retrieval.status.is_ok
    assert retrieval.status.description == "TimeoutError"
    (event,) = retrieval.events
    assert event.name == "governance.permission"
    assert event.attributes == {"decision": "allow", "scopes": ("acme",)}
    root = by_name["turn"]
    assert root.attributes is not None
    assert root.attributes["shelfhand.trace_id"] == "b" * 32
    assert root.attributes["shelfhand.tenant"] == "acme"
    assert root.parent is None
    assert retrieval.parent is not None
    assert retrieval.parent.span_id == root.context.span_id
    otel.close()


def test_the_sdk_sampler_still_decides_which_spans_are_exported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    exporter = InMemorySpanExporter()
    otel = OtelProcessor(SimpleSpanProcessor(exporter))
    one_turn(Tracer([otel]))
    assert exporter.get_finished_spans() == ()
    otel.close()


def test_the_json_form_of_an_exported_span_has_its_attributes() -> None:
    exporter = InMemorySpanExporter()
    otel = OtelProcessor(SimpleSpanProcessor(exporter))
    one_turn(Tracer([otel]))
    (tool,) = [s for s in exporter.get_finished_spans() if s.name == "execute_tool lookup"]
    assert json.loads(tool.to_json())["attributes"] == {"gen_ai.tool.name": "查询"}
    otel.close()


def test_a_spans_none_attributes_are_left_out_wherever_they_are_set() -> None:
    kept = SpanList()
    tracer = Tracer([kept])
    root = tracer.start_root(
        "turn", trace_id="c" * 32, attributes={"a": 1, "gone": None, "问": "答"}
    )
    root.update({"b": [1, 2], "also_gone": None})
    root.update({"c": {"d": None}})  # a None inside a value stays: it is the value's
    root.set("never", None)
    root.end()
    (span,) = kept.spans
    assert span.attributes == {"a": 1, "问": "答", "b": [1, 2], "c": {"d": None}}
