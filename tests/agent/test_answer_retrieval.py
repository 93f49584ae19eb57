"""Answer retrieval modes: ``context`` (passages in the prompt before the model is asked),
``tool`` (the model calls ``retrieve``) and ``both`` — per agent, in settings, in the app."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shelfhand import Agent, KnowledgeBase, Toolkit, UserContext, retrieve_tool
from shelfhand.agent.grounding import as_model_sees
from shelfhand.agent.retrieve import make_retrieve_tool
from shelfhand.app import App
from shelfhand.core.errors import ConfigurationError
from shelfhand.core.events import CitationsFound, Final, ToolFinished, ToolStarted
from shelfhand.core.messages import Message, ToolCallBlock, ToolResultBlock
from shelfhand.core.settings import Settings
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.testing import ScriptedModel, text, tool_call
from shelfhand.tools.audit import AuditLog
from support.knowledge import sample_kb

pytestmark = pytest.mark.anyio

ACME = UserContext(tenant_id="acme", user_id="u1", roles=["user"])
GLOBEX = UserContext(tenant_id="globex", user_id="u2", roles=["user"])
HR = UserContext(tenant_id="acme", user_id="u3", roles=["hr"])

QUESTIONS = [("E-203 是什么故障？", "灯泡过热"), ("What does error E-203 mean?", "E-203")]


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    with sample_kb(tmp_path, hr_text="E-203 bonus table: 机密 secret amounts.") as base:
        yield base


def offered(model: ScriptedModel, request: int) -> set[str]:
    return {t["function"]["name"] for t in model.tool_schemas[request]}


def tool_messages(messages: list[Message] | tuple[Message, ...]) -> list[Message]:
    return [m for m in messages if m.role == "tool"]


def shown_passages(request: list[Message]) -> str:
    """The up-front passages as the model read them: text before the question it answers."""
    prompt = request[-1]
    assert prompt.role == "user"
    assert tool_messages(request) == []  # shown as text, not as a tool exchange
    return prompt.text


@pytest.mark.parametrize(("question", "expected"), QUESTIONS)
async def test_context_mode_puts_numbered_passages_in_the_first_request_and_needs_no_tool(
    kb: KnowledgeBase, question: str, expected: str
) -> None:
    model = ScriptedModel([text("答案 [1]。")])
    agent = Agent(model=model, toolkit=Toolkit([retrieve_tool(kb)]), retrieval="context")
    result = await agent.run(question, context=ACME)

    assert len(model.requests) == 1  # one model call: no tool round trip
    content = shown_passages(model.requests[0])
    assert "\n[1] " in content and expected in content
    assert content.endswith(f"Question: {question}")  # passages first, then the question
    assert "retrieve" not in offered(model, 0)  # the model is not offered retrieve
    assert result.citations and result.citations[0].index == 1
    assert result.output == "答案 [1]。" and result.unknown_citations == ()
    # the transcript records the up-front call and its result like any other
    call = result.messages[1].tool_calls[0]
    assert call.name == "retrieve" and question in call.arguments
    assert result.messages[0].text == question
    assert result.messages[2].tool_results[0].content in content


@pytest.mark.parametrize(("question", "expected"), QUESTIONS)
async def test_tool_mode_retrieves_only_when_the_model_calls(
    kb: KnowledgeBase, question: str, expected: str
) -> None:
    model = ScriptedModel([tool_call("retrieve", {"query": "E-203"}), text("[1]")])
    agent = Agent(model=model, toolkit=Toolkit([retrieve_tool(kb)]), retrieval="tool")
    result = await agent.run(question, context=ACME)
    assert tool_messages(model.requests[0]) == []  # nothing up front
    assert "retrieve" in offered(model, 0)
    assert expected in tool_messages(model.requests[1])[0].tool_results[0].content
    assert result.citations[0].index == 1

    lazy = ScriptedModel([text("I think so.")])
    alone = await Agent(model=lazy, toolkit=Toolkit([retrieve_tool(kb)])).run(
        question, context=ACME
    )
    assert tool_messages(lazy.requests[0]) == [] and alone.citations == ()  # tool is the default


@pytest.mark.parametrize(("question", "expected"), QUESTIONS)
async def test_both_mode_retrieves_up_front_and_the_model_may_retrieve_more(
    kb: KnowledgeBase, question: str, expected: str
) -> None:
    model = ScriptedModel(
        [tool_call("retrieve", {"query": "warranty 保修 period"}), text("[1][4]")]
    )
    agent = Agent(model=model, toolkit=Toolkit([retrieve_tool(kb)]), retrieval="both")
    events = [e async for e in agent.stream(question, context=ACME)]

    assert expected in shown_passages(model.requests[0])
    assert "retrieve" in offered(model, 0)
    final = events[-1]
    assert isinstance(final, Final)
    up_front, own = tool_messages(final.result.messages)
    assert up_front.tool_results[0].content in model.requests[0][-1].text
    assert tool_messages(model.requests[1]) == [own]  # the model's own call stays a tool call
    given = up_front.tool_results[0].citations
    later = own.tool_results[0].citations
    # one numbering: the model's call goes on after the up-front passages
    assert [c.index for c in given] == list(range(1, len(given) + 1))
    new = [c for c in later if c.chunk_id not in {g.chunk_id for g in given}]
    assert new and new[0].index == len(given) + 1
    # the up-front step is streamed like a tool call, before the model's own
    kinds = [type(e) for e in events]
    assert kinds[:3] == [ToolStarted, ToolFinished, CitationsFound]
    assert kinds.count(ToolStarted) == 2


async def test_up_front_retrieval_reads_only_what_the_caller_may_read(kb: KnowledgeBase) -> None:
    async def answer(user: UserContext) -> str:
        model = ScriptedModel([text("ok")])
        agent = Agent(model=model, toolkit=Toolkit([retrieve_tool(kb)]), retrieval="context")
        await agent.run("E-203 bonus table 机密", context=user)
        return shown_passages(model.requests[0])

    assert "No relevant passages" in await answer(GLOBEX)  # another tenant
    assert "salaries.md" not in await answer(ACME)  # untagged role
    assert "salaries.md" in await answer(HR)  # the tag's role


async def test_up_front_retrieval_is_an_audited_governed_call(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    audit = AuditLog(tmp_path / "audit.db")
    model = ScriptedModel([text("ok")])
    agent = Agent(model=model, toolkit=Toolkit([retrieve_tool(kb)], audit=audit), retrieval="both")
    result = await agent.run("拆封后还能退吗？", context=ACME)
    audit.flush()
    records = audit.query(tool="retrieve")
    audit.close()
    assert len(records) == 1 and records[0].user == "u1" and records[0].tenant == "acme"
    assert records[0].trace_id == result.trace_id and records[0].outcome == "ok"


def test_modes_need_a_retrieve_tool_and_a_known_name() -> None:
    model = ScriptedModel([text("ok")])
    with pytest.raises(ValueError, match="needs a 'retrieve' tool"):
        Agent(model=model, retrieval="context")
    with pytest.raises(ConfigurationError, match="context, tool, both"):
        Agent(model=model, retrieval="always")  # type: ignore[arg-type]
    assert Agent(model=model, retrieval="tool").retrieval == "tool"


# --- settings and the app ---------------------------------------------------------------------
def test_settings_default_to_both_and_read_the_env_and_shelfhand_toml(tmp_path: Path) -> None:
    assert Settings.load(tmp_path, env={}).answer_retrieval == "both"
    (tmp_path / "shelfhand.toml").write_text(
        '[shelfhand]\nanswer_retrieval = "context"\n', encoding="utf-8"
    )
    assert Settings.load(tmp_path, env={}).answer_retrieval == "context"
    env = {"SHELFHAND_ANSWER_RETRIEVAL": "Tool"}
    assert Settings.load(tmp_path, env=env).answer_retrieval == "tool"


@pytest.mark.parametrize("where", ["env", "toml"])
def test_a_bad_answer_retrieval_fails_fast_naming_the_modes(tmp_path: Path, where: str) -> None:
    env = {}
    if where == "env":
        env = {"SHELFHAND_ANSWER_RETRIEVAL": "sometimes"}
    else:
        (tmp_path / "shelfhand.toml").write_text(
            '[shelfhand]\nanswer_retrieval = "sometimes"\n', encoding="utf-8"
        )
    with pytest.raises(ConfigurationError) as err:
        Settings.load(tmp_path, env=env)
    message = str(err.value)
    assert "'sometimes'" in message and "context, tool, both" in message
    assert "SHELFHAND_ANSWER_RETRIEVAL" in message and "answer_retrieval" in message


def test_the_app_builds_chat_agents_in_the_configured_mode(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    settings = Settings.load(tmp_path / "app", env={"SHELFHAND_ANSWER_RETRIEVAL": "context"})
    app = App(settings=settings, router=EmbeddingRouter({"any": HashingEmbedder()}))
    model = ScriptedModel([text("ok")])
    try:
        assert app.chat_agent(model, kb).retrieval == "context"
        assert app.chat_agent(model, kb, retrieval="tool").retrieval == "tool"
        assert app.chat_agent(model, None).retrieval == "tool"  # nothing to retrieve from
        assert "retrieve" not in {
            s["function"]["name"] for s in app.chat_agent(model, kb).toolkit.schemas(ACME)
        }
    finally:
        app.close()


async def test_a_failed_up_front_retrieval_is_an_error_result_and_the_model_still_answers() -> None:
    class Broken:
        def search(self, query: str, *, k: int = 5, user: UserContext | None = None) -> Any:
            raise OSError("index file missing")

    model = ScriptedModel([text("文档里没有找到。")])
    agent = Agent(model=model, toolkit=Toolkit([make_retrieve_tool(Broken())]), retrieval="both")
    events = [e async for e in agent.stream("E-203 是什么故障？", context=ACME)]
    finished = [e for e in events if isinstance(e, ToolFinished)]
    assert len(finished) == 1 and finished[0].is_error
    shown = shown_passages(model.requests[0])
    assert shown.startswith("Searching the knowledge base") and "index file missing" in shown
    final = events[-1]
    assert isinstance(final, Final)
    result = final.result
    assert result.output == "文档里没有找到。" and result.citations == ()


async def test_a_message_without_text_gets_no_up_front_retrieval(kb: KnowledgeBase) -> None:
    model = ScriptedModel([text("?")])
    agent = Agent(model=model, toolkit=Toolkit([retrieve_tool(kb)]), retrieval="context")
    result = await agent.run("   ", context=ACME)
    assert tool_messages(model.requests[0]) == [] and result.citations == ()


async def test_the_up_front_call_is_marked_as_the_frameworks(kb: KnowledgeBase) -> None:
    model = ScriptedModel([tool_call("retrieve", {"query": "保修"}), text("[1][4]")])
    agent = Agent(model=model, toolkit=Toolkit([retrieve_tool(kb)]), retrieval="both")
    result = await agent.run("灯泡保修多久？", context=ACME)
    assert result.messages[1].metadata == {"upfront": True}
    assert result.messages[3].metadata == {}  # the model's own call
    calls = [c.name for m in result.messages for c in m.tool_calls]
    assert calls == ["retrieve", "retrieve"] and result.output == "[1][4]"


def test_earlier_turns_up_front_passages_are_shown_before_their_own_question() -> None:
    call = ToolCallBlock(id="call_a", name="retrieve", arguments='{"query": "q1"}')
    result = ToolResultBlock(call_id="call_a", name="retrieve", content="[1] manual\nE-203")
    history = [
        Message.user("q1"),
        Message.assistant(tool_calls=[call], metadata={"upfront": True}),
        Message.tool([result]),
        Message.assistant("a1 [1]"),
        Message.user("q2"),
    ]
    shown = as_model_sees(history)
    assert [m.role for m in shown] == ["user", "assistant", "user"]
    assert shown[0].text.endswith("[1] manual\nE-203\n\nQuestion: q1")
    assert shown[1:] == history[3:]
    # the model's own calls are left as they are
    own = [Message.user("q"), Message.assistant(tool_calls=[call]), Message.tool([result])]
    assert as_model_sees(own) == own
