"""The delegation of ``bench/delegation.py`` done with AgentScope 2.x, for comparison.

Run it with a Python that has ``agentscope`` (not a shelfhand dependency)::

    python -m venv /tmp/peers/venv-agentscope
    /tmp/peers/venv-agentscope/bin/pip install agentscope
    /tmp/peers/venv-agentscope/bin/python bench/delegation_agentscope.py

Same shape as shelfhand's cases: ``single`` is one AgentScope ``Agent`` (the 2.x ReAct loop)
calling ``add`` once, then answering; ``delegation`` is a main ``Agent`` whose one tool
``worker(task)`` runs a second ``Agent`` (the subagent) that calls ``add``: 4 model calls,
2 tool calls. Both answer ``result 5`` (the subagent hands back the bare sum), checked before
timing. Scripted models (a ``ChatModelBase`` subclass, as in
/work/shared/bench/agent/fw_agentscope.py); tools registered with an ALLOW permission decision
(AgentScope asks the user for function tools by default). An AgentScope ``Agent`` keeps its
conversation in its state, so every run builds fresh agents (toolkits and models are shared),
as the framework harness does. CPU microseconds per run (minimum over the repeats) and wall
microseconds (median).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from importlib.metadata import version
from typing import Any

from agentscope.agent import Agent
from agentscope.formatter import OpenAIChatFormatter
from agentscope.message import TextBlock, ToolCallBlock, ToolResultBlock, UserMsg
from agentscope.model import ChatModelBase, ChatResponse
from agentscope.permission import PermissionBehavior, PermissionDecision
from agentscope.tool import FunctionTool, Toolkit
from interleaved import interleaved, print_ratios
from pydantic import BaseModel

ALLOW = PermissionDecision(behavior=PermissionBehavior.ALLOW, message="benchmark")
PROMPT = "what is 2 + 3?"


def _text(output: Any) -> str:
    if isinstance(output, str):
        return output
    return "".join(getattr(b, "text", "") for b in output)


class Calls(ChatModelBase):
    """Calls ``name`` once with ``args``, then answers with the tool's result."""

    class Parameters(BaseModel):
        pass

    def __init__(self, name: str, args: dict[str, Any], answer: str = "result {}") -> None:
        super().__init__(
            credential=None,  # type: ignore[arg-type]
            model="scripted",
            parameters=self.Parameters(),
            stream=False,
            max_retries=0,
        )
        self.name_ = name
        self.args = args
        self.answer = answer
        # the agent reads formatter.supported_input_media_types; this model never formats
        self.formatter = OpenAIChatFormatter()

    async def _call_api(
        self, model_name: Any, messages: Any, tools: Any = None, tool_choice: Any = None, **kw: Any
    ) -> ChatResponse:
        results = [
            b
            for m in messages
            if isinstance(m.content, list)
            for b in m.content
            if isinstance(b, ToolResultBlock)
        ]
        if results:
            answer = self.answer.format(_text(results[-1].output))
            return ChatResponse(content=[TextBlock(text=answer)], is_last=True)
        call = ToolCallBlock(id="call_1", name=self.name_, input=json.dumps(self.args))
        return ChatResponse(content=[call], is_last=True)


def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: The first.
        b: The second.
    """
    return a + b


def build() -> dict[str, Any]:
    add_kit = Toolkit(tools=[FunctionTool(add, permission=ALLOW)])
    single_model = Calls("add", {"a": 2, "b": 3})
    worker_model = Calls("add", {"a": 2, "b": 3}, answer="{}")
    main_model = Calls("worker", {"task": "add 2 and 3"})

    async def worker(task: str) -> str:
        """Adds numbers.

        Args:
            task: The task.
        """
        sub = Agent(name="worker", system_prompt="You add.", model=worker_model, toolkit=add_kit)
        reply = await sub.reply(UserMsg(name="user", content=task))
        return str(reply.get_text_content())

    main_kit = Toolkit(tools=[FunctionTool(worker, permission=ALLOW)])

    async def single() -> str:
        agent = Agent(name="single", system_prompt="You add.", model=single_model, toolkit=add_kit)
        reply = await agent.reply(UserMsg(name="user", content=PROMPT))
        return str(reply.get_text_content())

    async def delegation() -> str:
        main = Agent(name="main", system_prompt="You delegate.", model=main_model, toolkit=main_kit)
        reply = await main.reply(UserMsg(name="user", content=PROMPT))
        return str(reply.get_text_content())

    return {"single": single, "delegation": delegation}


async def measure(runs: int, repeats: int) -> dict[str, tuple[float, float]]:
    cases = build()
    answers = {name: await make() for name, make in cases.items()}
    # the same answer both ways, and the subagent's tool result reached the main agent
    assert answers == {"single": "result 5", "delegation": "result 5"}, answers
    return await interleaved(cases, runs, repeats, warmup=20)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=9)
    a = ap.parse_args()
    logging.disable(logging.WARNING)  # the agents log each step at INFO/WARNING
    figures = asyncio.run(measure(a.runs, a.repeats))
    print(f"agentscope {version('agentscope')}")
    print_ratios(figures)


if __name__ == "__main__":
    main()
