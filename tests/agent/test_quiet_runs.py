"""A delegated run builds no events nobody reads (issue 12, acceptance 2).

A subagent's run inside a supervisor's ``run`` has no reader for its step events, and inside a
``stream`` only its tool and approval events are shown (tagged with its id). Such a run is
"quiet" (``Agent._run_quiet``): the same loop, the same calls, replays, approvals and
concurrency, but its step events are not built, or handed straight to the supervisor's sink.
These tests hold it to what the full event stream of the same run says, scenario by scenario
(English and Chinese, with real retrieval), and check that a supervisor uses it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from shelfhand import Agent, KnowledgeBase, Toolkit, UserContext, retrieve_tool, tool
from shelfhand.agent import tool_round as agent_module
from shelfhand.agent.agent import RunResult
from shelfhand.agent.step_events import EventSink
from shelfhand.agent.subagents import Subagent
from shelfhand.agent.supervisor import Supervisor
from shelfhand.core.context import RunContext
from shelfhand.core.events import (
    ApprovalDecided,
    ApprovalRequired,
    CitationsFound,
    Event,
    Final,
    SubagentFinished,
    SubagentStarted,
    ToolFinished,
    ToolStarted,
)
from shelfhand.testing import ScriptedModel, text, tool_call
from shelfhand.tools.approvals import Approvals
from support.knowledge import sample_kb

pytestmark = pytest.mark.anyio

ALICE = UserContext(tenant_id="acme", user_id="alice")


@tool(read_only=True)
def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: The first.
        b: The second.
    """
    return a + b


@tool(read_only=True)
def broken(item: str) -> str:
    """Always fails.

    Args:
        item: Anything.
    """
    raise ValueError(f"no such item: {item}")


@tool(confirm=True)
def refund(order_id: str) -> str:
    """Refund an order (needs a human's approval).

    Args:
        order_id: The order.
    """
    return f"refunded {order_id}"


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    with sample_kb(tmp_path) as base:
        yield base


Scenario = Callable[[KnowledgeBase], tuple[Agent, str, Approvals | None]]


def plain(kb: KnowledgeBase) -> tuple[Agent, str, Approvals | None]:
    model = ScriptedModel([tool_call("add", {"a": 2, "b": 3}), text("5")])
    return Agent(name="w", model=model, toolkit=Toolkit([add])), "2 + 3?", None


def parallel_then_replayed(kb: KnowledgeBase) -> tuple[Agent, str, Approvals | None]:
    model = ScriptedModel(
        [
            [tool_call("add", {"a": 2, "b": 3}), tool_call("add", {"a": 4, "b": 5})],
            tool_call("add", {"a": 2, "b": 3}),  # answered from the first call
            text("5 and 9"),
        ]
    )
    return Agent(name="w", model=model, toolkit=Toolkit([add])), "两个和", None


def failing_until_stopped(kb: KnowledgeBase) -> tuple[Agent, str, Approvals | None]:
    model = ScriptedModel([tool_call("broken", {"item": "x"})] * 3 + [text("never")])
    return Agent(name="w", model=model, toolkit=Toolkit([broken])), "find x", None


def approved(kb: KnowledgeBase) -> tuple[Agent, str, Approvals | None]:
    model = ScriptedModel([tool_call("refund", {"order_id": "SO-1"}), text("退款完成")])
    approvals = Approvals(handler=lambda request: True)
    return Agent(name="w", model=model, toolkit=Toolkit([refund])), "退款 SO-1", approvals


def retrieved_by_tool(kb: KnowledgeBase) -> tuple[Agent, str, Approvals | None]:
    model = ScriptedModel([tool_call("retrieve", {"query": "E-203 故障"}), text("灯泡过热 [1]")])
    return (
        Agent(name="w", model=model, toolkit=Toolkit([retrieve_tool(kb)])),
        "E-203 是什么故障？",
        None,
    )


def retrieved_up_front(kb: KnowledgeBase) -> tuple[Agent, str, Approvals | None]:
    model = ScriptedModel([text("E-203 means the lamp overheats [1]")])
    agent = Agent(name="w", model=model, toolkit=Toolkit([retrieve_tool(kb)]), retrieval="context")
    return agent, "What does error E-203 mean?", None


SCENARIOS = [
    plain,
    parallel_then_replayed,
    failing_until_stopped,
    approved,
    retrieved_by_tool,
    retrieved_up_front,
]


class Ids:
    """Call ids numbered by first appearance (an up-front retrieval's call id is random)."""

    def __init__(self) -> None:
        self.known: dict[str, str] = {}

    def __call__(self, call_id: str) -> str:
        return self.known.setdefault(call_id, f"#{len(self.known)}")


def comparable(events: list[Event]) -> list[Event]:
    """``events`` without what differs between two runs of the same script (timings, ids)."""
    ids = Ids()
    out: list[Event] = []
    for e in events:
        if isinstance(e, ToolStarted):
            e = dataclasses.replace(e, call_id=ids(e.call_id))
        elif isinstance(e, ToolFinished):
            e = dataclasses.replace(e, call_id=ids(e.call_id), duration_ms=0.0)
        elif isinstance(e, ApprovalRequired | ApprovalDecided):
            e = dataclasses.replace(e, call_id=ids(e.call_id), approval_id="")
        out.append(e)
    return out


def same_run(result: RunResult) -> tuple[Any, ...]:
    """``result`` without its ids (trace, messages, calls)."""
    ids = Ids()
    messages = [
        (
            m.role,
            m.text,
            [(ids(c.id), c.name, c.arguments) for c in m.tool_calls],
            [(ids(r.call_id), r.name, r.content, r.is_error, r.citations) for r in m.tool_results],
        )
        for m in result.messages
    ]
    return (
        result.output,
        result.stop_reason,
        result.iterations,
        result.citations,
        result.unknown_citations,
        result.usage,
        result.external_calls,
        messages,
    )


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
async def test_a_quiet_run_emits_what_the_full_stream_shows_and_ends_the_same(
    kb: KnowledgeBase, scenario: Scenario
) -> None:
    parent = RunContext.start(agent_name="main", user=ALICE)

    agent, task, approvals = scenario(kb)
    full: list[Event] = [
        e async for e in agent.stream(task, approvals=approvals, parent=parent, text_deltas=False)
    ]
    final = full[-1]
    assert isinstance(final, Final)
    # what a supervisor shows of a subagent: its tool events tagged, its approvals
    shown = [
        dataclasses.replace(e, agent="worker") if isinstance(e, ToolStarted | ToolFinished) else e
        for e in full[:-1]
        if not isinstance(e, CitationsFound)
    ]
    assert any(isinstance(e, ToolStarted) for e in shown)

    agent, task, approvals = scenario(kb)
    emitted: list[Event] = []
    result = await agent._run_quiet(
        task, history=(), approvals=approvals, parent=parent, emit=emitted.append, tag="worker"
    )
    assert comparable(emitted) == comparable(shown)
    assert same_run(result) == same_run(final.result)

    agent, task, approvals = scenario(kb)  # nobody watching: no events at all, same result
    silent = await agent._run_quiet(task, history=(), approvals=approvals, parent=parent)
    assert same_run(silent) == same_run(final.result)
    assert silent.trace_id != result.trace_id != final.result.trace_id  # a run each


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
async def test_a_streamed_run_tags_its_tool_events_as_a_quiet_run_does(
    kb: KnowledgeBase, scenario: Scenario
) -> None:
    parent = RunContext.start(agent_name="main", user=ALICE)

    agent, task, approvals = scenario(kb)
    sink = EventSink(stream=True, tag="worker")
    streamed = [
        e
        async for e in agent._loop(task, sink, {"approvals": approvals, "parent": parent})
        if isinstance(e, ToolStarted | ToolFinished)
    ]
    assert streamed and all(e.agent == "worker" for e in streamed)

    agent, task, approvals = scenario(kb)
    emitted: list[Event] = []
    await agent._run_quiet(
        task, history=(), approvals=approvals, parent=parent, emit=emitted.append, tag="worker"
    )
    tool_events = [e for e in emitted if isinstance(e, ToolStarted | ToolFinished)]
    assert comparable(tool_events) == comparable(list(streamed))


async def test_a_quiet_run_is_delegated_for_the_parents_caller_one_level_deeper() -> None:
    seen: list[RunContext] = []

    @tool(read_only=True)
    def whoami(run: RunContext) -> str:
        """Who is calling."""
        seen.append(run)
        return run.user.scope

    parent = RunContext.start(agent_name="main", user=ALICE)
    model = ScriptedModel([tool_call("whoami"), text("done")])
    agent = Agent(name="w", model=model, toolkit=Toolkit([whoami]))
    result = await agent._run_quiet("who?", history=(), approvals=None, parent=parent)
    assert result.messages[2].tool_results[0].content == "acme/alice"
    assert seen[0].user == ALICE and seen[0].depth == 1
    assert seen[0].parent_trace_id == parent.trace_id
    assert seen[0].trace_id == result.trace_id != parent.trace_id


def worker_supervisor() -> Supervisor:
    main = ScriptedModel([tool_call("worker", {"task": "add 2 and 3"}), text("it is 5")])
    adder = ScriptedModel([tool_call("add", {"a": 2, "b": 3}), text("5")])
    return Supervisor(
        model=main,
        toolkit=Toolkit([add]),
        tools=[],
        subagents=[Subagent("worker", "Adds numbers.", model=adder, tools=["add"])],
    )


class _Counted(ToolStarted):
    """A ``ToolStarted`` that counts how many are built."""

    __slots__ = ()
    built = 0

    def __init__(self, **kwargs: Any) -> None:
        type(self).built += 1
        super().__init__(**kwargs)


async def test_a_supervisors_run_builds_no_events_for_its_subagents_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(agent_module, "ToolStarted", _Counted)
    _Counted.built = 0
    result = await worker_supervisor().run("what is 2 + 3?", context=ALICE)
    assert result.output == "it is 5"
    assert _Counted.built == 1  # the main agent's call of the subagent, not the subagent's

    _Counted.built = 0
    events = [e async for e in worker_supervisor().stream("what is 2 + 3?", context=ALICE)]
    assert _Counted.built == 2  # streamed: the subagent's call is shown too
    assert [type(e).__name__ for e in events if not isinstance(e, Final)] == [
        "_Counted",
        "SubagentStarted",
        "_Counted",
        "ToolFinished",
        "SubagentFinished",
        "ToolFinished",
        *(["TextDelta"] * (len(events) - 7)),
    ]
    started = [e for e in events if isinstance(e, ToolStarted | SubagentStarted)]
    assert [getattr(e, "agent", None) for e in started] == [None, None, "worker"]
    finished = [e for e in events if isinstance(e, ToolFinished | SubagentFinished)]
    assert [getattr(e, "agent", "-") for e in finished] == ["worker", "-", None]
