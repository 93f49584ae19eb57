"""What a finished run leaves behind, and the event copies a delegation makes.

A run that returns while one of its async generators is still suspended leaves that generator
to the event loop, which closes it later through a task it schedules from the loop's
finalizer hook (a write to its self-pipe, a task, a ``GeneratorExit``): work on every run for
nothing. ``run`` drains what it starts instead; these tests watch the hook.
"""

from __future__ import annotations

import dataclasses
import gc
import sys
from collections.abc import AsyncGenerator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from shelfhand import Agent, Toolkit, UserContext, tool
from shelfhand.agent.pipelines import sequential
from shelfhand.agent.subagents import Subagent
from shelfhand.agent.supervisor import Supervisor, as_tool, tag_event
from shelfhand.core.events import ToolFinished, ToolStarted
from shelfhand.testing import ScriptedModel, text, tool_call

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


def adder() -> ScriptedModel:
    return ScriptedModel([tool_call("add", {"a": 2, "b": 3}), text("2 + 3 = 5")])


@contextmanager
def finalized() -> Iterator[list[str]]:
    """The names of async generators the event loop is asked to finalize meanwhile."""
    hooks = sys.get_asyncgen_hooks()
    names: list[str] = []

    def finalizer(agen: AsyncGenerator[Any, None]) -> None:
        names.append(agen.__qualname__)
        if hooks.finalizer is not None:
            hooks.finalizer(agen)

    sys.set_asyncgen_hooks(firstiter=hooks.firstiter, finalizer=finalizer)
    try:
        yield names
        gc.collect()
    finally:
        sys.set_asyncgen_hooks(*hooks)


async def test_an_agent_run_leaves_no_generator_for_the_event_loop_to_close() -> None:
    agent = Agent(name="single", model=adder(), toolkit=Toolkit([add]))
    with finalized() as names:
        result = await agent.run("what is 2 + 3?", context=ALICE)
    assert result.output == "2 + 3 = 5"
    assert names == []


def supervisor() -> Supervisor:
    main = ScriptedModel([tool_call("worker", {"task": "add 2 and 3"}), text("it is 5")])
    return Supervisor(
        model=main,
        toolkit=Toolkit([add]),
        tools=[],
        subagents=[Subagent("worker", "Adds numbers.", model=adder(), tools=["add"])],
    )


async def test_a_supervisor_run_leaves_no_generator_for_the_event_loop_to_close() -> None:
    with finalized() as names:
        result = await supervisor().run("what is 2 + 3?", context=ALICE)
        events = [e async for e in supervisor().stream("what is 2 + 3?", context=ALICE)]
    assert result.output == "it is 5"
    assert events[-1].result.output == "it is 5"  # type: ignore[union-attr]
    assert names == []


async def test_a_plain_agent_delegating_leaves_no_generator_behind() -> None:
    worker = Agent(name="worker", model=adder(), toolkit=Toolkit([add]))
    pipeline = sequential(Agent(name="first", model=adder(), toolkit=Toolkit([add])), name="p")
    main = ScriptedModel(
        [
            tool_call("worker", {"task": "add 2 and 3"}),
            tool_call("p", {"task": "add 2 and 3"}),
            text("5 both ways"),
        ]
    )
    kit = Toolkit([as_tool(worker, description="Adds."), as_tool(pipeline, description="Adds.")])
    with finalized() as names:
        result = await Agent(name="main", model=main, toolkit=kit).run("2 + 3?", context=ALICE)
    assert result.output == "5 both ways"
    assert [r.content for m in result.messages for r in m.tool_results] == ["2 + 3 = 5"] * 2
    assert names == []


@pytest.mark.parametrize("kind", [ToolStarted, ToolFinished])
def test_tagging_a_subagents_tool_event_keeps_every_field(kind: type[Any]) -> None:
    """``tag_event`` copies the event field by field (for speed): a field added to the event
    class later must be copied too, which this test notices."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(kind):
        if f.name == "type":
            continue
        if f.type in ("str", "str | None"):
            values[f.name] = f"{f.name}-值"
        elif f.type == "bool":
            values[f.name] = True
        elif f.type == "float":
            values[f.name] = 12.5
        else:  # a new kind of field: extend this test with a value for it
            raise AssertionError(f"{kind.__name__}.{f.name}: {f.type}")
    event = kind(**values)
    assert tag_event(event, "returns_clerk") == dataclasses.replace(event, agent="returns_clerk")
