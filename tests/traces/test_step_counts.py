"""A service turn's steps counted for its metrics without spans: with tracing off no span is
made and the turn, its model calls (with tokens), tool calls (by outcome) and retrievals are
still counted; with tracing on they are counted once; a failed model call is counted failed;
two tenants' turns at once count their own steps."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from shelfhand import Agent, Toolkit, UserContext, retrieve_tool, tool
from shelfhand.core.errors import InvalidArgumentError, ModelError
from shelfhand.core.step_counts import count_steps, current_counting, stop_counting
from shelfhand.core.tracing import Tracer, current_span
from shelfhand.knowledge import KnowledgeBase
from shelfhand.models.base import ChatModel
from shelfhand.service.turn_spans import traced_turn
from shelfhand.testing import ScriptedModel, failure, text, tool_call
from support.knowledge import sample_kb
from support.spans import ListProcessor

pytestmark = pytest.mark.anyio

ALICE = UserContext(tenant_id="acme", user_id="alice", roles=["user"])
BOB = UserContext(tenant_id="globex", user_id="bob", roles=["user"])
seen_spans: list[object] = []


@tool(read_only=True, cache_ttl=0)
def order_status(order_id: str) -> str:
    """The status of an order."""
    seen_spans.append(current_span())
    return f"{order_id}: 已发货"


@tool(permission="admin")
def refund(order_id: str) -> str:
    """Refund an order (admins only)."""
    return "refunded"


class Recorder:
    """A step counter that keeps what it was told."""

    def __init__(self) -> None:
        self.steps: list[tuple[Any, ...]] = []
        self.tokens = [0, 0]

    def count_turn(self, status: str) -> None:
        self.steps.append(("turn", status))

    def count_model_call(
        self, model: str, status: str, input_tokens: int, output_tokens: int
    ) -> None:
        self.steps.append(("model", model, status))
        self.tokens[0] += input_tokens
        self.tokens[1] += output_tokens

    def count_tool_call(self, tool: str, outcome: str) -> None:
        self.steps.append(("tool", tool, outcome))

    def count_retrieval(self, mode: str, seconds: float) -> None:
        assert seconds >= 0
        self.steps.append(("retrieval", mode))


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    with sample_kb(tmp_path) as base:
        yield base


def support_agent(kb: KnowledgeBase, model: ChatModel | None = None) -> Agent:
    model = model or ScriptedModel(
        [
            tool_call("retrieve", {"query": "退货政策"}),
            [
                tool_call("order_status", {"order_id": "A-1"}),
                tool_call("refund", {"order_id": "A-1"}),
            ],
            text("七天内可退 [1]。"),
        ]
    )
    toolkit = Toolkit([retrieve_tool(kb), order_status, refund])
    return Agent(name="support", model=model, toolkit=toolkit, replay_repeated_calls=False)


async def run_events(agent: Agent, user: UserContext) -> AsyncGenerator[dict[str, Any], None]:
    result = await agent.run("退货政策是什么？", context=user)
    usage = result.usage
    yield {
        "type": "final",
        "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens},
    }


async def counted_turn(
    agent: Agent, user: UserContext, counter: Recorder, tracer: Tracer | None = None
) -> list[dict[str, Any]]:
    turn = traced_turn(
        run_events(agent, user), tracer, counter, "s1", user, f"{user.tenant_id:0>32}", ""
    )
    return [event async for event in turn]


EXPECTED = [
    ("retrieval", "hybrid"),
    ("tool", "retrieve", "ok"),
    ("model", "scripted", "ok"),
    ("tool", "order_status", "ok"),
    ("tool", "refund", "denied"),
    ("model", "scripted", "ok"),
    ("model", "scripted", "ok"),
    ("turn", "ok"),
]


async def test_with_tracing_off_a_turn_is_counted_step_by_step_and_makes_no_span(
    kb: KnowledgeBase,
) -> None:
    counter = Recorder()
    seen_spans.clear()
    (final,) = await counted_turn(support_agent(kb), ALICE, counter)
    assert sorted(counter.steps, key=str) == sorted(EXPECTED, key=str)
    usage = final["usage"]
    assert counter.tokens == [usage["input_tokens"], usage["output_tokens"]]
    assert counter.tokens[1] > 0  # (the scripted model counts no input tokens)
    assert seen_spans == [None]
    assert current_counting() is None  # the turn's counting ended with it


async def test_with_tracing_on_each_step_is_counted_once_beside_its_span(
    kb: KnowledgeBase,
) -> None:
    counter, spans = Recorder(), ListProcessor()
    seen_spans.clear()
    await counted_turn(support_agent(kb), ALICE, counter, Tracer([spans]))
    assert sorted(counter.steps, key=str) == sorted(EXPECTED, key=str)
    assert seen_spans[0] is not None
    assert len(spans.named("chat scripted")) == 3


async def test_a_failed_model_call_is_counted_failed_and_the_turn_with_its_error(
    kb: KnowledgeBase,
) -> None:
    counter = Recorder()
    model = ScriptedModel([tool_call("retrieve", {"query": "保修"}), failure("provider")])
    with pytest.raises(ModelError) as raised:
        await counted_turn(support_agent(kb, model), ALICE, counter)
    assert counter.steps[-2:] == [
        ("model", "scripted", "error"),
        ("turn", type(raised.value).__name__),
    ]
    assert ("model", "scripted", "ok") in counter.steps


async def test_two_tenants_turns_at_once_count_their_own_steps(kb: KnowledgeBase) -> None:
    counter = Recorder()
    failing = ScriptedModel([tool_call("retrieve", {"query": "保修"}), failure("timeout")])
    outcomes: dict[str, str] = {}

    async def one(user: UserContext, agent: Agent) -> None:
        try:
            await counted_turn(agent, user, counter)
            outcomes[user.tenant_id] = "ok"
        except ModelError:
            outcomes[user.tenant_id] = "failed"

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(one, ALICE, support_agent(kb))
            tg.start_soon(one, BOB, support_agent(kb, failing))
    assert outcomes == {"acme": "ok", "globex": "failed"}
    turns = sorted(s[1] for s in counter.steps if s[0] == "turn")
    assert turns[1] == "ok" and turns[0] != "ok"
    model_calls = [s[2] for s in counter.steps if s[0] == "model"]
    assert sorted(model_calls) == ["ok", "ok", "ok", "ok", "timeout"]


def test_a_sampling_tracer_records_a_share_of_traces_chosen_by_trace_id() -> None:
    half = Tracer(sample_ratio=0.5)
    ids = [f"{i:032x}" for i in range(2000)]
    kept = [t for t in ids if half.sampled(t)]
    assert 850 < len(kept) < 1150
    assert kept == [t for t in ids if Tracer(sample_ratio=0.5).sampled(t)]  # any replica
    assert all(Tracer().sampled(t) for t in ids)
    assert not any(Tracer(sample_ratio=0.0).sampled(t) for t in ids)
    with pytest.raises(InvalidArgumentError):
        Tracer(sample_ratio=1.5)


async def test_a_turn_left_out_by_sampling_makes_no_span_and_is_still_counted(
    kb: KnowledgeBase,
) -> None:
    counter, spans = Recorder(), ListProcessor()
    seen_spans.clear()
    await counted_turn(support_agent(kb), ALICE, counter, Tracer([spans], sample_ratio=0.0))
    assert spans.spans == [] and seen_spans == [None]
    assert sorted(counter.steps, key=str) == sorted(EXPECTED, key=str)


async def test_a_background_call_still_running_when_the_turn_ends_is_counted_once_when_done() -> (
    None
):
    counter = Recorder()
    counting, token = count_steps(counter)
    started, release = anyio.Event(), anyio.Event()

    async def background_call() -> None:
        counting.model_call_started("helper-model")
        started.set()
        await release.wait()
        counting.model_call_ended("helper-model", 3, 2)

    async def failed_call() -> None:
        counting.model_call_started("scripted")  # raised before it ended

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(failed_call)
            tg.start_soon(background_call)
            await started.wait()  # (the failed call's task, started first, has ended)
            counting.fail_open_calls()  # the turn ends here; the background call runs on
            assert counter.steps == [("model", "scripted", "error")]
            release.set()
    stop_counting(token)
    assert counter.steps == [("model", "scripted", "error"), ("model", "helper-model", "ok")]
    assert counting.open_calls == []
