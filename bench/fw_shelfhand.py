"""shelfhand adapter for the shared agent-overhead harness (``../shared/bench/agent``).

Same contract as the harness's other ``fw_*.py`` adapters: a scripted model that decides from
the history it is shown (number of tool results), is offered the tool schemas on every call,
and counts model calls; ``add`` counts tool calls. Everything else is shelfhand's real code:
``@tool`` schema + validation, ``Toolkit`` (permission filter, schema cache, governance),
``Agent`` loop, immutable messages, sync tools run in a worker thread.

The model is a minimal :class:`~shelfhand.models.base.ChatModel` written here, as the
LangChain adapter writes its ``BaseChatModel``: it answers with an assistant ``Message``, as
a provider adapter does. ``shelfhand.testing.FunctionModel`` is made for tests: it keeps every
request and a copy of every schema offered (``requests``, ``tool_schemas``), about twice the
cost of this model per request, none of it the loop's.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from importlib.metadata import version
from typing import Any

import common  # type: ignore[import-not-found]  # the harness puts its own folder on sys.path

from shelfhand import Agent, Toolkit, tool
from shelfhand.core.messages import Message, ToolCallBlock
from shelfhand.models.base import ModelResponse, StreamChunk, StreamDone, StreamText, ToolSchema

NAME = "shelfhand"
VERSION = f"shelfhand {version('shelfhand')}"
IS_ASYNC = True
NOTES = "Agent + Toolkit + @tool, scripted ChatModel; sync tool in a worker thread"


class ScriptedModel:
    """Asks for ``add`` until ``N_CALLS`` results are in the history, then answers."""

    name = "scripted"

    async def request(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSchema] = ()
    ) -> ModelResponse:
        common.CALLS[0] += 1
        n = sum(1 for m in messages if m.role == "tool")
        call = common.decide(n, N_CALLS[0])
        if call is None:
            return ModelResponse(message=Message.assistant(common.FINAL_TEXT), finish_reason="stop")
        block = ToolCallBlock(id=call["id"], name=call["name"], arguments=json.dumps(call["args"]))
        return ModelResponse(
            message=Message.assistant(tool_calls=(block,)), finish_reason="tool_calls"
        )

    async def stream(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSchema] = ()
    ) -> AsyncIterator[StreamChunk]:
        response = await self.request(messages, tools=tools)
        if response.message.text:
            yield StreamText(text=response.message.text)
        yield StreamDone(response=response)


def _model() -> ScriptedModel:
    return ScriptedModel()


N_CALLS = [1]


INLINE = [False]
"""``fw_shelfhand_inline`` sets this: the sync tool runs on the loop (``@tool(inline=True)``)."""


def make_runner(n_calls: int, n_tools: int, async_tool: bool = False) -> Any:
    N_CALLS[0] = n_calls
    fn = common.add_async if async_tool else common.add
    # cache off: every run must really execute the tool, as in the other adapters
    kit = Toolkit([tool(name="add", read_only=True, cache_ttl=0, inline=INLINE[0])(fn)])
    for f in common.FILLER_TOOLS[: n_tools - 1]:
        kit.add(tool(f))
    # the harness repeats the identical add(2, 3): replaying it from the run's own result
    # (the default) would skip the tool the harness means to time
    agent = Agent(
        name="calc",
        model=_model(),
        toolkit=kit,
        system_prompt=common.SYSTEM_PROMPT,
        max_iters=50,
        replay_repeated_calls=False,
        # 50 tool schemas do not fit the default 8192-token window; a model offered that
        # many tools has a larger one
        context_tokens=128_000,
    )

    async def run_once() -> str:
        result = await agent.run(common.USER_PROMPT)
        return result.output

    return run_once


def schema() -> dict[str, Any]:
    return tool(common.find_places).schema()["function"]  # type: ignore[no-any-return]
