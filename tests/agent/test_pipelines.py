"""Pipelines (docs/design.md K6): sequential, conditional and fan-out order and merge, with scripted
models; a pipeline is itself an agent (run, stream, a tool, a subagent)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from shelfhand import Agent, Toolkit, UserContext, tool
from shelfhand.agent.agent import RunResult
from shelfhand.agent.pipelines import RoutingError, conditional, fan_out, sequential
from shelfhand.agent.subagents import Subagent
from shelfhand.agent.supervisor import Supervisor, as_tool
from shelfhand.core.context import RunContext
from shelfhand.core.events import (
    Final,
    SubagentFinished,
    SubagentStarted,
    TextDelta,
    ToolStarted,
)
from shelfhand.core.messages import Citation, Message
from shelfhand.testing import FunctionModel, ScriptedModel, failure, text, tool_call
from shelfhand.tools.audit import AuditLog
from shelfhand.tools.tool import ToolOutput

pytestmark = pytest.mark.anyio

ALICE = UserContext(tenant_id="acme", user_id="alice")


def echo(name: str, fmt: str = "{name}({task})") -> Agent:
    """An agent whose answer shows what it was asked."""
    model = FunctionModel(lambda messages, tools: fmt.format(name=name, task=messages[-1].text))
    return Agent(name=name, model=model)


@tool(read_only=True)
def search(run: RunContext, query: str) -> ToolOutput:
    """Search the documents.

    Args:
        query: What to look for.
    """
    passage = Citation(index=0, source="warranty.md", chunk_id="w1", text="保修 24 个月")
    (numbered,) = run.citations.number([passage])
    return ToolOutput(content=f"[{numbered.index}] 保修 24 个月", citations=(numbered,))


async def test_sequential_feeds_each_answer_to_the_next_agent_in_order() -> None:
    pipe = sequential(echo("search"), echo("summarise"), echo("translate"), name="sst")
    result = await pipe.run("保修多久？", context=ALICE)
    assert result.output == "translate(summarise(search(保修多久？)))"
    assert result.messages[0].text == "保修多久？" and result.messages[-1].text == result.output
    assert pipe.name == "sst"


async def test_sequential_streams_steps_in_order_and_only_the_last_steps_text() -> None:
    pipe = sequential(echo("a"), echo("b"))
    events = [e async for e in pipe.stream("x", context=ALICE)]
    steps = [
        (type(e).__name__, e.subagent, e.depth)
        for e in events
        if isinstance(e, SubagentStarted | SubagentFinished)
    ]
    assert steps == [
        ("SubagentStarted", "a", 1),
        ("SubagentFinished", "a", 1),
        ("SubagentStarted", "b", 1),
        ("SubagentFinished", "b", 1),
    ]
    shown = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert shown == "b(a(x))"
    assert isinstance(events[-1], Final)


async def test_a_steps_passages_keep_their_numbers_through_the_pipeline() -> None:
    finder = Agent(
        name="finder",
        model=ScriptedModel([tool_call("search", {"query": "保修"}), text("保修 24 个月 [1]。")]),
        toolkit=Toolkit([search]),
    )
    pipe = sequential(finder, echo("translate", "EN: {task}"))
    events = [e async for e in pipe.stream("保修多久？", context=ALICE)]
    result = events[-1].result  # type: ignore[attr-defined]
    assert result.output == "EN: 保修 24 个月 [1]。"
    assert [(c.index, c.source) for c in result.citations] == [(1, "warranty.md")]
    assert result.unknown_citations == ()
    tagged = [e for e in events if isinstance(e, ToolStarted)]
    assert [(e.name, e.agent) for e in tagged] == [("search", "finder")]


async def test_conditional_runs_the_route_a_function_picks() -> None:
    routes = {"zh": echo("chinese"), "en": echo("english")}
    pipe = conditional(
        lambda q: "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in q) else "en", routes
    )
    assert (await pipe.run("保修多久？")).output == "chinese(保修多久？)"
    assert (await pipe.run("How long is the warranty?")).output == (
        "english(How long is the warranty?)"
    )


async def test_conditional_with_an_agent_router_reads_the_route_from_its_answer() -> None:
    router = Agent(name="router", model=ScriptedModel([text("Route: returns."), text("天气")]))
    routes = {"returns": echo("returns_clerk"), "troubleshooting": echo("troubleshooter")}
    pipe = conditional(router, routes, default=echo("fallback"))
    result = await pipe.run("我要退货", context=ALICE)
    assert result.output == "returns_clerk(我要退货)"
    # an answer naming no route goes to the default
    assert (await pipe.run("今天天气", context=ALICE)).output == "fallback(今天天气)"


async def test_conditional_without_a_route_or_default_says_which_routes_exist() -> None:
    pipe = conditional(lambda q: "weather", {"returns": echo("r"), "repair": echo("p")})
    with pytest.raises(RoutingError, match=r"'weather'.*returns, repair"):
        await pipe.run("?")


async def test_fan_out_merges_in_the_order_the_agents_were_given_not_finish_order() -> None:
    release: dict[str, asyncio.Event] = {"slow": asyncio.Event(), "fast": asyncio.Event()}
    finished: list[str] = []

    def waiter(name: str) -> Agent:
        async def answer(messages: Sequence[Message], tools: list[dict]) -> str:
            if name == "slow":
                await release["slow"].wait()  # the fast one finishes first
            finished.append(name)
            if name == "fast":
                release["slow"].set()
            return f"{name}: {messages[-1].text}"

        return Agent(name=name, model=FunctionModel(answer))

    seen: list[list[str]] = []

    def merge(results: Sequence[RunResult]) -> str:
        seen.append([r.output for r in results])
        return " | ".join(r.output for r in results)

    pipe = fan_out(waiter("slow"), waiter("fast"), merge=merge)
    with_timeout = asyncio.wait_for(pipe.run("q", context=ALICE), 5)
    result = await with_timeout
    assert finished == ["fast", "slow"]
    assert seen == [["slow: q", "fast: q"]]
    assert result.output == "slow: q | fast: q"


async def test_fan_out_default_merge_lists_answers_under_names_and_caps_concurrency() -> None:
    running = 0
    most = 0

    def member(name: str) -> Agent:
        async def answer(messages: Sequence[Message], tools: list[dict]) -> str:
            nonlocal running, most
            running += 1
            most = max(most, running)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            running -= 1
            return f"{name} says hi"

        return Agent(name=name, model=FunctionModel(answer))

    pipe = fan_out(member("a"), member("b"), member("c"), max_concurrency=2)
    result = await pipe.run("hi", context=ALICE)
    assert result.output == "## a\n\na says hi\n\n## b\n\nb says hi\n\n## c\n\nc says hi"
    assert most == 2


async def test_fan_out_can_merge_with_an_agent() -> None:
    merger = FunctionModel(
        lambda messages, tools: "merged: " + messages[-1].text.replace("\n", " ")
    )
    pipe = fan_out(echo("x"), echo("y"), merge=Agent(name="merger", model=merger))
    result = await pipe.run("q", context=ALICE)
    assert result.output == "merged: q  ## x  x(q)  ## y  y(q)"


async def test_a_pipeline_is_a_tool_and_a_subagent() -> None:
    pipe = sequential(echo("a"), echo("b"), name="chain")
    main = ScriptedModel([tool_call("chain", {"task": "t"}), text("done")])
    result = await Agent(model=main, toolkit=Toolkit([as_tool(pipe, description="Chains.")])).run(
        "go", context=ALICE
    )
    assert result.messages[2].tool_results[0].content == "b(a(t))"

    main = ScriptedModel([tool_call("chain", {"task": "t"}), text("done")])
    sup = Supervisor(
        model=main,
        toolkit=Toolkit(),
        subagents=[Subagent("chain", "Chains.", agent=pipe)],
    )
    events = [e async for e in sup.stream("go", context=ALICE)]
    started = [(e.subagent, e.depth) for e in events if isinstance(e, SubagentStarted)]
    assert started == [("chain", 1), ("a", 2), ("b", 2)]


async def test_pipeline_steps_run_for_the_caller_and_are_audited_under_the_pipeline(
    tmp_path: Path,
) -> None:
    owners: list[str] = []

    @tool(read_only=True)
    def whoami(ctx: UserContext) -> str:
        """Who is calling."""
        owners.append(ctx.scope)
        return ctx.scope

    with AuditLog(tmp_path / "audit.db") as audit:
        step = Agent(
            name="checker",
            model=ScriptedModel([tool_call("whoami", {}), text("ok")]),
            toolkit=Toolkit([whoami], audit=audit),
        )
        result = await sequential(step, echo("b")).run("x", context=ALICE, trace_id="pipe-1")
        assert owners == ["acme/alice"]
        (record,) = audit.query(parent_trace_id="pipe-1")
        assert (record.tool, record.depth, record.agent) == ("whoami", 1, "checker")
        assert result.trace_id == "pipe-1"


async def test_a_pipeline_counts_its_steps_usage_and_hands_it_to_the_run_that_delegated_it() -> (
    None
):
    # each step: one model call (tokens as the scripted model reports them); before, the
    # pipeline's result had the tokens only, and a supervisor delegating to it counted nothing
    first, second = ScriptedModel([text("a")]), ScriptedModel([text("b")])
    pipe = sequential(Agent(name="one", model=first), Agent(name="two", model=second), name="p")
    result = await pipe.run("go", context=ALICE)
    assert result.usage.model_calls == 2
    tokens = result.usage.input_tokens + result.usage.output_tokens
    assert tokens > 0

    done = await over_a_chain(ScriptedModel([text("b")])).run("go", context=ALICE)
    assert done.usage.model_calls == 4  # the supervisor's two and the pipeline's two


def over_a_chain(second: ScriptedModel) -> Supervisor:
    """A supervisor that delegates to a two-step pipeline once, then answers "done"."""
    inner = sequential(
        Agent(name="one", model=ScriptedModel([text("a")])),
        Agent(name="two", model=second),
        name="chain",
    )
    return Supervisor(
        model=ScriptedModel([tool_call("chain", {"task": "go"}), text("done")]),
        toolkit=Toolkit(),
        subagents=[Subagent("chain", "Chains.", agent=inner)],
    )


async def test_a_pipeline_whose_step_fails_still_hands_its_steps_usage_to_its_parent() -> None:
    """The second step's model fails; the supervisor goes on and answers. The first step's
    call (and the second's, cut off at its deadline, at its request's estimate) still count
    in the supervisor's usage, as the caller's budget was charged them: before, a pipeline
    that raised handed nothing to the run that delegated it."""
    done = await over_a_chain(ScriptedModel([failure("timeout")])).run("go", context=ALICE)
    assert done.output == "done"
    # the supervisor's two, the first step's, and the second step's cut off
    assert done.usage.model_calls == 4
