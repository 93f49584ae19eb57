"""``run_sync`` of an agent, a supervisor and a pipeline closes every chat model it asks
before its event loop ends (the models' connections belong to that loop)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from shelfhand import Agent, Toolkit
from shelfhand.agent.pipelines import conditional, fan_out, sequential
from shelfhand.agent.runs import chat_models
from shelfhand.agent.subagents import Subagent
from shelfhand.agent.supervisor import Supervisor
from shelfhand.core.messages import Message
from shelfhand.models.scripted import ScriptExhaustedError
from shelfhand.testing import FunctionModel, ScriptedModel, text, tool_call


class Closing(FunctionModel):
    """A function model that counts its ``aclose`` calls and the loop each ran on."""

    def __init__(self, answer: str = "ok") -> None:
        super().__init__(lambda messages, tools: answer)
        self.closed_on: list[asyncio.AbstractEventLoop] = []

    async def aclose(self) -> None:
        self.closed_on.append(asyncio.get_running_loop())


class ClosingScript(ScriptedModel):
    def __init__(self, script: Sequence[Any]) -> None:
        super().__init__(script)
        self.closed = 0

    async def aclose(self) -> None:
        self.closed += 1


def test_agent_run_sync_closes_its_model_once_per_run_even_when_the_run_fails() -> None:
    model = Closing()
    agent = Agent(model=model)
    assert agent.run_sync("hi").output == "ok"
    assert agent.run_sync("again").output == "ok"
    assert len(model.closed_on) == 2 and model.closed_on[0] is not model.closed_on[1]

    broken = ClosingScript([])  # no turns: the run raises
    with pytest.raises(ScriptExhaustedError):
        Agent(model=broken).run_sync("hi")
    assert broken.closed == 1


def test_sequential_run_sync_closes_each_step_model_once() -> None:
    shared = Closing("a")
    other = Closing("b")
    pipe = sequential(
        Agent(name="one", model=shared),
        Agent(name="two", model=shared),  # one model, two steps: closed once
        Agent(name="three", model=other),
        name="chain",
    )
    assert pipe.run_sync("go").output == "b"
    assert len(shared.closed_on) == 1 and len(other.closed_on) == 1


def test_conditional_and_fan_out_close_their_agents_models_not_their_functions() -> None:
    router_model, route_model, default_model = Closing("x"), Closing("routed"), Closing("d")
    routes = {"x": Agent(name="x", model=route_model)}
    pick = conditional(
        Agent(name="router", model=router_model),
        routes,
        default=Agent(name="d", model=default_model),
        name="pick",
    )
    assert pick.run_sync("go").output == "routed"
    assert [len(m.closed_on) for m in (router_model, route_model, default_model)] == [1, 1, 1]

    by_function = conditional(lambda prompt: "x", routes, name="fn")
    assert list(chat_models(by_function)) == [route_model]

    a, b, merger = Closing("A"), Closing("B"), Closing("merged")
    both = fan_out(
        Agent(name="a", model=a), Agent(name="b", model=b), merge=Agent(name="m", model=merger),
        name="both",
    )  # fmt: skip
    assert both.run_sync("go").output == "merged"
    assert [len(m.closed_on) for m in (a, b, merger)] == [1, 1, 1]
    listed = fan_out(Agent(name="a", model=a), merge=lambda results: "x", name="listed")
    assert list(chat_models(listed)) == [a]


def test_supervisor_run_sync_closes_its_named_models_and_declared_agents() -> None:
    main = ClosingScript(
        [tool_call("helper", {"task": "look"}), tool_call("team", {"task": "both"}), text("done")]
    )
    named = Closing("helped")
    inner = Closing("inner")
    own = Closing("own")  # a declaration's own model object, never asked in this run
    team = sequential(Agent(name="t1", model=inner), name="team")
    sup = Supervisor(
        model=main,
        toolkit=Toolkit(),
        models={"small": named},
        subagents=[
            Subagent("helper", "Helps.", model="small"),
            Subagent("team", "A team.", agent=team),
            Subagent("other", "Other things.", model=own),
        ],
    )
    assert sup.run_sync("go").output == "done"
    assert main.closed == 1
    assert len(named.closed_on) == 1 and len(inner.closed_on) == 1 and len(own.closed_on) == 1
    # a supervisor that asks nothing of a model it was not given closes only its own
    alone = Supervisor(model=Closing("solo"), toolkit=Toolkit(), subagents=[])
    assert alone.run_sync(Message.user("go")).output == "solo"
    assert [len(m.closed_on) for m in chat_models(alone)] == [1]  # type: ignore[attr-defined]
