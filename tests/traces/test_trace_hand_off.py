"""A trace's finished spans wait for its root and reach the store in one hand-off: a turn's
spans arrive together when the turn ends, two tenants' turns at once never mix, and spans
whose root does not end (a cancelled turn, a process stopping mid-turn, a search thread
outliving its turn, a very long run) are stored all the same."""

from __future__ import annotations

import threading
from collections.abc import AsyncGenerator, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from shelfhand import Agent, Toolkit, UserContext, retrieve_tool, tool
from shelfhand.core.tracing import (
    TRACE_HAND_OFF,
    Span,
    Tracer,
    enter,
    leave,
    start_span,
)
from shelfhand.knowledge import KnowledgeBase, sample_corpus
from shelfhand.service.turn_spans import traced_turn
from shelfhand.testing import ScriptedModel, text, tool_call
from shelfhand.traces import SqliteTraceStore, StoreRecorder
from support.knowledge import sample_kb

pytestmark = pytest.mark.anyio

ALICE = UserContext(tenant_id="acme", user_id="alice")
BOB = UserContext(tenant_id="globex", user_id="bob")


class HandOffs:
    """A trace processor that keeps each hand-off (a trace's spans, as handed over)."""

    def __init__(self) -> None:
        self.hand_offs: list[list[Span]] = []

    def on_trace(self, spans: Sequence[Span]) -> None:
        self.hand_offs.append(list(spans))

    def flush(self) -> None:
        """Nothing to write."""

    def close(self) -> None:
        """Nothing to close."""


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    with sample_kb(tmp_path) as base:
        base.ingest([sample_corpus()], tenant_id="globex")
        yield base


def agent_for(kb: KnowledgeBase, order_tool: Any) -> Agent:
    model = ScriptedModel(
        [
            tool_call("order_status", {"order_id": "A-1"}),
            tool_call("retrieve", {"query": "退货政策"}),
            text("七天内可退 [1]。"),
        ]
    )
    return Agent(name="support", model=model, toolkit=Toolkit([order_tool, retrieve_tool(kb)]))


async def run_turn(agent: Agent, tracer: Tracer, user: UserContext, trace_id: str) -> None:
    async def events() -> AsyncGenerator[dict[str, Any], None]:
        await agent.run("退货政策是什么？", context=user, trace_id=trace_id)
        yield {"type": "final", "usage": {"input_tokens": 3, "output_tokens": 2}}

    async for _ in traced_turn(events(), tracer, None, "s1", user, trace_id, parent_span_id=""):
        pass


async def test_a_turns_spans_are_handed_over_once_together_when_the_turn_ends(
    kb: KnowledgeBase,
) -> None:
    traces = HandOffs()
    seen_during_the_turn: list[int] = []

    @tool(read_only=True, cache_ttl=0)
    def order_status(order_id: str) -> str:
        """The status of an order."""
        seen_during_the_turn.append(len(traces.hand_offs))
        return f"{order_id}: shipped"

    await run_turn(agent_for(kb, order_status), Tracer([traces]), ALICE, "a" * 32)

    assert seen_during_the_turn == [0]
    [spans] = traces.hand_offs
    assert spans[-1].name == "turn" and spans[-1].root
    names = sorted(s.name for s in spans)
    assert "execute_tool order_status" in names and "retrieval" in names
    assert {s.trace_id for s in spans} == {"a" * 32}
    assert {s.parent_id for s in spans[:-1]} <= {s.span_id for s in spans}


async def test_two_tenants_turns_at_once_under_one_trace_id_keep_their_traces_apart(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    store = SqliteTraceStore(tmp_path / "traces.db")
    traces = HandOffs()
    tracer = Tracer([traces, StoreRecorder(store, interval=3600)])
    both_inside = anyio.Event()
    inside = [0]

    @tool(read_only=True, cache_ttl=0)
    async def order_status(order_id: str) -> str:
        """The status of an order."""
        inside[0] += 1
        if inside[0] == 2:
            both_inside.set()
        with anyio.fail_after(10):
            await both_inside.wait()  # each turn's tool call waits for the other's
        return f"{order_id}: shipped"

    trace_id = "b" * 32  # chosen by the clients: the same for both
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_turn, agent_for(kb, order_status), tracer, ALICE, trace_id)
        tg.start_soon(run_turn, agent_for(kb, order_status), tracer, BOB, trace_id)
    tracer.flush()

    assert len(traces.hand_offs) == 2
    for spans in traces.hand_offs:
        assert len({s.tenant_id for s in spans}) == 1
        assert len({s.user_id for s in spans}) == 1
    for user in (ALICE, BOB):
        stored = store.spans(trace_id, user)
        assert stored is not None
        assert len(stored) == len(traces.hand_offs[0])
        assert [s.parent_id for s in stored].count("") == 1
        [retrieval] = [s for s in stored if s.name == "retrieval"]
        assert retrieval.attributes["shelfhand.retrieval.scope.tenant"] == user.tenant_id
    tracer.close()


async def test_a_cancelled_turn_is_stored_failed_with_the_spans_it_finished(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    store = SqliteTraceStore(tmp_path / "traces.db")
    tracer = Tracer([StoreRecorder(store, interval=3600)])
    called = anyio.Event()

    @tool(read_only=True, cache_ttl=0)
    async def order_status(order_id: str) -> str:
        """The status of an order."""
        called.set()
        await anyio.sleep_forever()
        return order_id

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_turn, agent_for(kb, order_status), tracer, ALICE, "c" * 32)
        with anyio.fail_after(10):
            await called.wait()
        tg.cancel_scope.cancel()
    tracer.flush()

    summary = store.summary("c" * 32, ALICE)
    assert summary is not None and summary.status == "error"
    stored = store.spans("c" * 32, ALICE)
    assert stored is not None
    assert sorted((s.name, s.status, s.attributes.get("error.type")) for s in stored) == [
        ("chat scripted", "ok", None),
        ("execute_tool order_status", "error", "CancelledError"),
        ("invoke_agent support", "error", "CancelledError"),
        ("turn", "error", "CancelledError"),
    ]
    tracer.close()


def test_spans_of_a_trace_whose_root_never_ends_are_stored_when_the_tracer_closes(
    tmp_path: Path,
) -> None:
    store = SqliteTraceStore(tmp_path / "traces.db")
    tracer = Tracer([StoreRecorder(store, interval=3600)])
    root = tracer.start_root("turn", trace_id="d" * 32, tenant_id="acme", user_id="alice")
    token = enter(root)
    for name in ("chat m", "execute_tool 查询"):
        child = start_span(name, "tool")
        assert child is not None
        child.end()
    # the process stops mid-turn: the root never ends
    tracer.close()

    reopened = SqliteTraceStore(tmp_path / "traces.db")
    with reopened.database.connection() as conn:
        rows = conn.execute("SELECT tenant, trace_id, spans FROM trace_span_batches").fetchall()
    assert [(r[0], r[1]) for r in rows] == [("acme", "d" * 32)]
    assert "execute_tool 查询" in rows[0][2] and "chat m" in rows[0][2]
    reopened.close()
    leave(root, token)


def test_a_child_ending_after_its_root_on_another_thread_is_handed_over_on_its_own() -> None:
    traces = HandOffs()
    tracer = Tracer([traces])
    root = tracer.start_root("turn", trace_id="e" * 32, tenant_id="acme")
    search = start_span("retrieval", "retrieval", parent=root)
    assert search is not None
    root.end()  # the turn was cancelled; its search thread is still running
    worker = threading.Thread(target=search.end)
    worker.start()
    worker.join(10)

    assert [[s.name for s in spans] for spans in traces.hand_offs] == [["turn"], ["retrieval"]]


def test_a_long_run_hands_its_spans_over_before_its_root_ends() -> None:
    traces = HandOffs()
    tracer = Tracer([traces])
    root = tracer.start_root("invoke_agent long", kind="agent", trace_id="f" * 32)
    for _ in range(TRACE_HAND_OFF + 1):
        child = start_span("execute_tool step", "tool", parent=root)
        assert child is not None
        child.end()

    assert [len(spans) for spans in traces.hand_offs] == [TRACE_HAND_OFF]
    root.end()
    assert [len(spans) for spans in traces.hand_offs] == [TRACE_HAND_OFF, 2]
