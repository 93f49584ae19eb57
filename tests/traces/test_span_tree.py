"""A traced run: the tree of spans an agent run with retrieval, two tools (one denied by
permission) and a subagent records, with OpenTelemetry GenAI names and attributes; secrets
and, by default, message contents stay out of it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from shelfhand import Agent, Toolkit, UserContext, retrieve_tool, tool
from shelfhand.agent.supervisor import as_tool
from shelfhand.core.tracing import Span, Tracer, current_span, set_default_tracer
from shelfhand.knowledge import KnowledgeBase
from shelfhand.testing import ScriptedModel, text, tool_call
from support.knowledge import sample_kb
from support.spans import ListProcessor

pytestmark = pytest.mark.anyio

ALICE = UserContext(tenant_id="acme", user_id="alice", roles=["user"])
SECRET = "sk-live-0123456789"
QUESTION = "退货政策是什么？"


@tool(read_only=True)
def order_status(order_id: str, api_key: str) -> str:
    """The status of an order.

    Args:
        order_id: The order number.
        api_key: The shop's key.
    """
    return f"{order_id}: shipped"


@tool(permission="admin")
def refund(order_id: str) -> str:
    """Refund an order (admins only)."""
    return "refunded"


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    with sample_kb(tmp_path) as base:
        yield base


def traced_agent(kb: KnowledgeBase) -> Agent:
    helper = Agent(
        name="helper",
        model=ScriptedModel([text("订单已发货。")]),
    )
    model = ScriptedModel(
        [
            tool_call("retrieve", {"query": "退货政策"}),
            [
                tool_call("order_status", {"order_id": "A-1", "api_key": SECRET}),
                tool_call("refund", {"order_id": "A-1"}),
            ],
            tool_call("helper", {"task": "总结订单 A-1"}),
            text("七天内可退 [1]。"),
        ]
    )
    toolkit = Toolkit(
        [retrieve_tool(kb), order_status, refund, as_tool(helper, description="Helps.")]
    )
    return Agent(name="support", model=model, toolkit=toolkit)


async def run_traced(kb: KnowledgeBase, tracer: Tracer) -> tuple[Span, str]:
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    with tracer.root("turn", trace_id=trace_id, tenant_id="acme", user_id="alice") as root:
        result = await traced_agent(kb).run(QUESTION, context=ALICE, trace_id=trace_id)
    return root, result.output


async def test_a_traced_run_records_the_expected_tree_with_genai_names(
    kb: KnowledgeBase,
) -> None:
    spans = ListProcessor()
    root, output = await run_traced(kb, Tracer([spans]))
    assert output == "七天内可退 [1]。"

    (run,) = spans.named("invoke_agent support")
    assert run.parent_id == root.span_id
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    steps = [s.name for s in spans.children(run)]
    assert steps == [
        "chat scripted",
        "execute_tool retrieve",
        "chat scripted",
        "execute_tool order_status",
        "execute_tool refund",
        "chat scripted",
        "execute_tool helper",
        "chat scripted",
    ]
    chat = spans.children(run)[0]
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.request.model"] == "scripted"
    assert chat.attributes["gen_ai.provider.name"]
    assert "gen_ai.usage.output_tokens" in chat.attributes

    (retrieve_call,) = spans.named("execute_tool retrieve")
    (retrieval,) = spans.children(retrieve_call)
    assert retrieval.name == "retrieval"
    assert retrieval.attributes["gen_ai.retrieval.query.text"] == "退货政策"
    assert retrieval.attributes["shelfhand.retrieval.scope.tenant"] == "acme"
    documents = retrieval.attributes["gen_ai.retrieval.documents"]
    assert documents and all("score" in d and "id" in d for d in documents)
    assert all("text" not in d for d in documents)  # passage texts only when opted in

    (allowed,) = spans.named("execute_tool order_status")
    assert allowed.attributes["gen_ai.tool.name"] == "order_status"
    assert allowed.attributes["gen_ai.tool.call.id"]
    assert allowed.status == "ok"
    (denied,) = spans.named("execute_tool refund")
    assert denied.status == "error"
    assert denied.attributes["error.type"] == "denied"
    assert denied.attributes["shelfhand.tool.decision"] == "deny"
    assert [e.name for e in denied.events] == ["governance.permission"]

    (delegation,) = spans.named("execute_tool helper")
    (subagent,) = spans.children(delegation)
    assert subagent.name == "invoke_agent helper"
    assert [s.name for s in spans.children(subagent)] == ["chat scripted"]
    assert {s.trace_id for s in spans.spans} == {root.trace_id}

    usage = run.attributes  # the run's own four model calls and its helper's one
    assert usage["shelfhand.usage.model_calls"] == 5
    assert usage["shelfhand.usage.tool_calls"] == 4
    assert usage["shelfhand.usage.retrievals"] == 1


async def test_secrets_and_message_contents_stay_out_of_the_spans_by_default(
    kb: KnowledgeBase,
) -> None:
    spans = ListProcessor()
    await run_traced(kb, Tracer([spans]))
    dumped = json.dumps([s.attributes for s in spans.spans], ensure_ascii=False, default=str)
    assert SECRET not in dumped
    assert "[REDACTED]" in dumped
    assert QUESTION not in dumped and "七天内可退" not in dumped and "shipped" not in dumped


async def test_contents_are_recorded_when_opted_in(kb: KnowledgeBase) -> None:
    spans = ListProcessor()
    await run_traced(kb, Tracer([spans], record_content=True))
    (run,) = spans.named("invoke_agent support")
    assert run.attributes["gen_ai.input.messages"] == QUESTION
    assert run.attributes["gen_ai.output.messages"] == "七天内可退 [1]。"
    (retrieval,) = spans.named("retrieval")
    assert all(d["text"] for d in retrieval.attributes["gen_ai.retrieval.documents"])
    dumped = json.dumps([s.attributes for s in spans.spans], ensure_ascii=False, default=str)
    assert SECRET not in dumped


async def test_without_a_tracer_a_run_records_nothing(kb: KnowledgeBase) -> None:
    assert current_span() is None
    result = await traced_agent(kb).run(QUESTION, context=ALICE)
    assert result.output == "七天内可退 [1]。"
    assert result.usage.model_calls == 5  # four of its own, one of the helper it delegated to


async def test_a_default_tracer_traces_runs_outside_any_turn(kb: KnowledgeBase) -> None:
    spans = ListProcessor()
    set_default_tracer(Tracer([spans]))
    try:
        await traced_agent(kb).run(QUESTION, context=ALICE, trace_id="a" * 32)
    finally:
        set_default_tracer(None)
    (run,) = spans.named("invoke_agent support")
    assert run.root and run.trace_id == "a" * 32
    assert (run.tenant_id, run.user_id) == ("acme", "alice")
    assert len(spans.named("chat scripted")) == 5


async def test_the_same_tree_reaches_opentelemetry_with_its_ids_and_genai_attributes(
    kb: KnowledgeBase,
) -> None:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from shelfhand.providers.otel import OtelProcessor

    exporter = InMemorySpanExporter()
    otel = OtelProcessor(SimpleSpanProcessor(exporter))
    spans = ListProcessor()
    root, _ = await run_traced(kb, Tracer([spans, otel]))
    exported = {format(s.context.span_id, "016x"): s for s in exporter.get_finished_spans()}
    assert set(exported) == {s.span_id for s in spans.spans}
    for ours in spans.spans:
        theirs = exported[ours.span_id]
        assert theirs.name == ours.name
        assert format(theirs.context.trace_id, "032x") == root.trace_id
        parent = theirs.parent
        assert (format(parent.span_id, "016x") if parent else "") == ours.parent_id
        assert (theirs.start_time, theirs.end_time) == (ours.start_ns, ours.end_ns)
    (chat, *_) = [s for s in exporter.get_finished_spans() if s.name == "chat scripted"]
    assert chat.attributes is not None
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.request.model"] == "scripted"
    (tool_span,) = [s for s in exporter.get_finished_spans() if s.name == "execute_tool refund"]
    assert tool_span.attributes is not None
    assert tool_span.attributes["gen_ai.tool.name"] == "refund"
    assert tool_span.attributes["error.type"] == "denied"
    assert not tool_span.status.is_ok
    (retrieval,) = [s for s in exporter.get_finished_spans() if s.name == "retrieval"]
    assert retrieval.attributes is not None
    documents = json.loads(str(retrieval.attributes["gen_ai.retrieval.documents"]))
    assert documents[0]["score"] > 0
    assert SECRET not in json.dumps(
        [dict(s.attributes or {}) for s in exporter.get_finished_spans()], default=str
    )
    otel.close()


async def test_a_pipeline_is_one_span_with_its_steps_runs_under_it() -> None:
    from shelfhand.agent.pipelines import sequential

    spans = ListProcessor()
    draft = Agent(name="draft", model=ScriptedModel([text("草稿")]))
    polish = Agent(name="polish", model=ScriptedModel([text("定稿")]))
    pipeline = sequential(draft, polish, name="writer")
    with Tracer([spans]).root("turn", trace_id="b" * 32, tenant_id="acme") as root:
        result = await pipeline.run("写一段话", context=ALICE)
    assert result.output == "定稿"
    (span,) = spans.named("invoke_agent writer")
    assert span.kind == "pipeline" and span.parent_id == root.span_id
    assert [s.name for s in spans.children(span)] == ["invoke_agent draft", "invoke_agent polish"]


async def test_a_call_answered_from_an_earlier_identical_call_has_a_span_of_its_own() -> None:
    @tool(read_only=True, cache_ttl=0)
    def lookup(sku: str, api_key: str = "") -> str:
        """A product's warranty."""
        return f"{sku} 保修两年。"

    model = ScriptedModel(
        [
            tool_call("lookup", {"sku": "E-203", "api_key": SECRET}, id="c1"),
            tool_call("lookup", {"api_key": SECRET, "sku": "E-203"}, id="c2"),  # again
            text("两年。"),
        ]
    )
    spans = ListProcessor()
    tracer = Tracer([spans])
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    with tracer.root("turn", trace_id=trace_id, tenant_id="acme", user_id="alice"):
        agent = Agent(name="a", model=model, toolkit=Toolkit([lookup]))
        await agent.run("E-203 保修多久？", context=ALICE, trace_id=trace_id)

    (run,) = spans.named("invoke_agent a")
    ran, replayed = spans.named("execute_tool lookup")
    assert [s.name for s in spans.children(run)] == [
        "chat scripted",
        "execute_tool lookup",
        "chat scripted",
        "execute_tool lookup",
        "chat scripted",
    ]
    assert ran.attributes["shelfhand.tool.decision"] == "allow"
    assert replayed.parent_id == run.span_id
    assert replayed.attributes["gen_ai.tool.call.id"] == "c2"
    assert replayed.attributes["shelfhand.tool.decision"] == "replayed"
    assert replayed.attributes["shelfhand.tool.outcome"] == "ok"
    assert replayed.attributes["shelfhand.tool.replayed_from"] == "c1"
    assert [e.name for e in replayed.events] == ["run.replayed"]
    assert SECRET not in replayed.attributes["gen_ai.tool.call.arguments"]
    assert "gen_ai.tool.call.result" not in replayed.attributes  # contents only when opted in


async def test_a_failed_call_s_span_says_why_in_words_without_its_message() -> None:
    @tool(read_only=True, retries=0)
    def warehouse(sku: str) -> str:
        """Stock of a product (its system refuses connections)."""
        raise ConnectionError(f"refused by 10.0.0.7 (key {SECRET})")

    spans = ListProcessor()
    agent = Agent(
        model=ScriptedModel([tool_call("warehouse", {"sku": "X1"}), text("稍后再试。")]),
        toolkit=Toolkit([warehouse]),
    )
    trace_id = "1af7651916cd43dd8448eb211c80319c"
    with Tracer([spans]).root("turn", trace_id=trace_id, tenant_id="acme", user_id="alice"):
        await agent.run("X1 有货吗？", context=ALICE, trace_id=trace_id)

    (failed,) = spans.named("execute_tool warehouse")
    assert failed.status == "error" and failed.attributes["error.type"] == "error"
    assert failed.attributes["shelfhand.tool.failure"] == "failed: ConnectionError"
    assert "10.0.0.7" not in str(failed.attributes) and SECRET not in str(failed.attributes)
