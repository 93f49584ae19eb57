"""The delegation of ``bench/delegation.py`` done with LangChain 1.x / LangGraph, for comparison.

Run it with a Python that has ``langchain`` and ``langgraph`` (not a shelfhand dependency)::

    python -m venv /tmp/peers/venv-langchain
    /tmp/peers/venv-langchain/bin/pip install langchain langchain-core langgraph
    /tmp/peers/venv-langchain/bin/python bench/delegation_langgraph.py

Same shape as shelfhand's cases: ``single`` is one ``create_agent`` graph calling ``add`` once;
``delegation`` is a main graph whose one tool ``worker(task)`` runs a second graph (the
subagent) that calls ``add``. Both answer ``result 5`` (the subagent hands back the bare sum),
checked before timing. Scripted chat models; CPU microseconds per run (minimum over the
repeats) and wall microseconds (median).
"""

from __future__ import annotations

import argparse
import asyncio
from importlib.metadata import version
from typing import Any

from interleaved import interleaved, print_ratios
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool


class Calls(BaseChatModel):
    """Calls ``name`` once with ``args``, then answers with the tool's result."""

    name_: str
    args: dict[str, Any]
    answer: str = "result {}"

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, *, tool_choice: Any = None, **kwargs: Any) -> Any:
        return super().bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _answer(self, messages: Any) -> ChatResult:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            msg = AIMessage(content=self.answer.format(last.content))
        else:
            call = {"name": self.name_, "args": self.args, "id": "call_1", "type": "tool_call"}
            msg = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=msg)])

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        return self._answer(messages)

    async def _agenerate(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Any:
        return self._answer(messages)


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def build() -> dict[str, Any]:
    single = create_agent(Calls(name_="add", args={"a": 2, "b": 3}), [add])
    worker_graph = create_agent(Calls(name_="add", args={"a": 2, "b": 3}, answer="{}"), [add])

    @tool
    async def worker(task: str) -> str:
        """Adds numbers."""
        out = await worker_graph.ainvoke({"messages": [{"role": "user", "content": task}]})
        return str(out["messages"][-1].content)

    main = create_agent(Calls(name_="worker", args={"task": "add 2 and 3"}), [worker])
    prompt = {"messages": [{"role": "user", "content": "what is 2 + 3?"}]}
    return {
        "single": lambda: single.ainvoke(prompt),
        "delegation": lambda: main.ainvoke(prompt),
    }


async def measure(runs: int, repeats: int) -> dict[str, tuple[float, float]]:
    cases = build()
    for name, make in cases.items():  # the same answer both ways
        out = await make()
        assert out["messages"][-1].content == "result 5", (name, out["messages"][-1])
    return await interleaved(cases, runs, repeats, warmup=20)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=9)
    a = ap.parse_args()
    figures = asyncio.run(measure(a.runs, a.repeats))
    print(f"langchain {version('langchain')} / langgraph {version('langgraph')}")
    print_ratios(figures)


if __name__ == "__main__":
    main()
