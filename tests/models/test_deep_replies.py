"""A model's reply nested thousands of levels deep (``[[[[…``, a looping small model, or a
hostile endpoint) is text that does not parse as a call, in every tool mode: before, the JSON
decoder's ``RecursionError`` escaped the recovery of calls written as text, the constrained
mode's parser, the echo check and the LLM reranker, and ended the whole run. Real HTTP server
on 127.0.0.1, the official openai SDK."""

from __future__ import annotations

import pytest

from shelfhand import Agent, Toolkit, UserContext, tool
from shelfhand.agent.llm_rerank import parse_ranking
from shelfhand.core.errors import RerankError
from shelfhand.knowledge.retrieval.rerank import parse_rerank_response
from shelfhand.models.textcalls import json_reply, recover_tool_calls
from shelfhand.providers.openai_chat import OpenAIChatModel
from shelfhand.providers.tool_modes import parse_constrained
from shelfhand.testing import ScriptedModel, text
from shelfhand.tools.repair import repair_arguments
from support.chat_server import ChatServer, Reply, completion

pytestmark = pytest.mark.anyio

ALICE = UserContext(tenant_id="acme", user_id="alice")
DEEP = {
    "array": "[" * 5000,
    "object": '{"a":' * 3000 + "1" + "}" * 3000,
    "fenced": "```json\n" + "[" * 5000 + "\n```",
    "call-shaped": '{"name": "add", "arguments": ' + "[" * 5000 + "]" * 5000 + "}",
}


@tool(read_only=True)
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@pytest.mark.parametrize("reply", list(DEEP.values()), ids=list(DEEP))
def test_the_parsers_of_a_reply_take_deep_text_as_no_json(reply: str) -> None:
    assert recover_tool_calls(reply, ["add"])[1] == []
    assert json_reply(reply) is None
    assert parse_constrained(reply, {"add"}) is None
    assert isinstance(parse_ranking(reply, 3), list)  # (the numbers in it, if any)
    assert repair_arguments(reply, add.spec.parameters)[0] == reply
    with pytest.raises(RerankError, match="not JSON"):  # a rerank endpoint's answer
        parse_rerank_response(reply, 3)


@pytest.mark.parametrize("mode", ["native", "plain", "constrained"])
@pytest.mark.parametrize("reply", list(DEEP.values()), ids=list(DEEP))
async def test_a_run_whose_model_replies_deep_json_ends_with_that_text(
    chat_server: ChatServer, mode: str, reply: str
) -> None:
    chat_server.add(Reply(body=completion(reply)), Reply(body=completion(reply)))
    model = OpenAIChatModel("m", base_url=chat_server.url, api_key="k", tool_mode=mode)
    try:
        result = await Agent(model=model, toolkit=Toolkit([add])).run("2+3?", context=ALICE)
    finally:
        await model.aclose()
    assert result.stop_reason == "final" and not result.messages[-1].tool_calls


async def test_a_scripted_deep_reply_is_the_answer() -> None:
    agent = Agent(model=ScriptedModel([text(DEEP["array"])]), toolkit=Toolkit([add]))
    result = await agent.run("2+3?", context=ALICE)
    assert result.stop_reason == "final" and result.output == DEEP["array"]
