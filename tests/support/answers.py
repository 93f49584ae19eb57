"""The answer check as the chat agents run it, and an agent over the sample documents with one
tool of the test's, for the tests of the answer check around tools."""

from __future__ import annotations

from typing import Any

import anyio

from shelfhand import Agent, KnowledgeBase, Toolkit, UserContext, retrieve_tool
from shelfhand.agent.answer_check import AGENT_SCAFFOLDS, AnswerCheck
from shelfhand.core.messages import Citation, Message
from shelfhand.core.settings import AnswerRetrieval
from shelfhand.models.base import ChatModel
from shelfhand.providers.tool_modes import PROMPT_TEXTS
from shelfhand.testing import FunctionModel, ScriptedModel, text, tool_call
from shelfhand.tools.tool import Tool

CHECK = AnswerCheck(scaffolds=AGENT_SCAFFOLDS + PROMPT_TEXTS)
"""The answer check with every scaffold a model may echo (the agent's and the tool modes')."""

VPN_FAQ = Citation(
    index=1,
    source="it-faq.md",
    title="IT Help Desk FAQ",
    section="IT Help Desk FAQ > VPN",
    text="Install the GlobalProtect client from the software center. If the VPN disconnects "
    "every few minutes, update the client to version 6.2 or later.",
)
"""An English FAQ entry that "VPN 老是断线怎么办？" finds by its VPN alone."""


def tool_agent(
    kb: KnowledgeBase,
    the_tool: Tool[..., Any],
    *replies: object,
    retrieval: AnswerRetrieval = "both",
    model: ChatModel | None = None,
) -> Agent:
    """``retrieve`` over ``kb`` and ``the_tool``, ``model`` (default: a scripted model giving
    ``replies`` in turn), and :data:`CHECK`."""
    return Agent(
        model=model or ScriptedModel(list(replies)),  # type: ignore[arg-type]
        toolkit=Toolkit([retrieve_tool(kb), the_tool]),
        retrieval=retrieval,
        answer_check=CHECK,
    )


def call_then_answer(tool_name: str, arguments: dict[str, Any], answer: str) -> FunctionModel:
    """A model for runs at once: each run's own turns, ``tool_name`` called first, ``answer``
    once its result is in."""

    def turn(messages: list[Message], tools: Any) -> object:
        if not any(r.name == tool_name for m in messages for r in m.tool_results):
            return tool_call(tool_name, arguments)
        return text(answer)

    return FunctionModel(turn)  # type: ignore[arg-type]


async def answers_at_once(agent: Agent, question: str, *callers: UserContext) -> dict[str, str]:
    """``agent``'s answers to ``question`` asked by ``callers`` at once, by tenant."""
    outcomes: dict[str, str] = {}

    async def ask(who: UserContext) -> None:
        outcomes[who.tenant_id] = (await agent.run(question, context=who)).output

    async with anyio.create_task_group() as tg:
        for who in callers:
            tg.start_soon(ask, who)
    return outcomes
