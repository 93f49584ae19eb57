"""shelfhand adapter for the shared agent-overhead harness (``../shared/bench/agent``).

Same contract as the harness's other ``fw_*.py`` adapters: a scripted model that decides from
the history it is shown (number of tool results), is offered the tool schemas on every call,
and counts model calls; ``add`` counts tool calls. Everything else is shelfhand's real code:
``@tool`` schema + validation, ``Toolkit`` (permission filter, schema cache), ``Agent`` loop,
immutable messages, sync tools run in a worker thread.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

import common  # type: ignore[import-not-found]  # the harness puts its own folder on sys.path

from shelfhand import Agent, Toolkit, tool
from shelfhand.core.messages import Message
from shelfhand.testing import FunctionModel, text, tool_call

NAME = "shelfhand"
VERSION = f"shelfhand {version('shelfhand')}"
IS_ASYNC = True
NOTES = "Agent + Toolkit + @tool, FunctionModel; sync tool in a worker thread"


def _model() -> FunctionModel:
    def decide(messages: list[Message], tools: list[dict[str, Any]]) -> Any:
        common.CALLS[0] += 1
        n = sum(1 for m in messages if m.role == "tool")
        call = common.decide(n, N_CALLS[0])
        if call is None:
            return text(common.FINAL_TEXT)
        return tool_call(call["name"], call["args"], id=call["id"])

    return FunctionModel(decide)


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
