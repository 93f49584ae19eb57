"""No empty answers (issue 9.4) and the tool-call loop guard (issue 9.6)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from shelfhand import Agent, KnowledgeBase, Toolkit, UserContext, retrieve_tool, tool
from shelfhand.agent.answer_check import AnswerCheck
from shelfhand.agent.fallbacks import MARKS_NUDGE, NUDGE
from shelfhand.agent.guard import REPEATED_NOTE
from shelfhand.core.events import Final, TextDelta, ToolFinished
from shelfhand.core.messages import Citation, Message
from shelfhand.testing import CyclingScriptModel, FunctionModel, ScriptedModel, text, tool_call
from shelfhand.tools.tool import ToolOutput
from support.knowledge import sample_kb

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KnowledgeBase]:
    with sample_kb(tmp_path_factory.mktemp("kb"), tenant_id="t1") as base:
        yield base


ALICE = UserContext(tenant_id="t1", user_id="alice")


def counting_tools() -> tuple[Toolkit, dict[str, int]]:
    runs: dict[str, int] = {"lookup": 0, "flaky": 0}

    @tool(cache_ttl=0)
    def lookup(sku: str) -> ToolOutput:
        """Find a product's manual passage."""
        runs["lookup"] += 1
        citation = Citation(index=1, source="manual.md", title="手册", text=f"{sku} 保修两年。")
        return ToolOutput(content=f"[1] {sku} 保修两年。", citations=(citation,))

    @tool(retries=0)
    def flaky(order_id: str) -> str:
        """Look up an order (always fails here)."""
        runs["flaky"] += 1
        raise ValueError(f"order {order_id} does not exist")

    return Toolkit([lookup, flaky]), runs


async def test_a_blank_answer_gets_one_nudge_and_the_second_answer_is_used() -> None:
    model = ScriptedModel([text(""), text("保修两年。")])
    result = await Agent(model=model).run("保修多久？")

    assert result.output == "保修两年。" and result.stop_reason == "final"
    assert model.requests[1][-1].text == NUDGE
    assert NUDGE not in [m.text for m in result.messages]  # the nudge is not in the transcript


async def test_a_blank_answer_twice_ends_with_the_passages_found() -> None:
    kit, _ = counting_tools()
    model = ScriptedModel([tool_call("lookup", {"sku": "P20"}), text("  \n"), text("")])
    result = await Agent(model=model, toolkit=kit).run("P20 保修多久？", context=ALICE)

    assert result.stop_reason == "empty"
    assert result.output.startswith("The model returned an empty reply")
    assert "[1] 手册: P20 保修两年。" in result.output
    assert result.messages[-1].role == "assistant" and result.messages[-1].text == result.output


async def test_a_blank_answer_without_passages_says_there_is_no_answer_also_when_streamed() -> None:
    model = ScriptedModel([text(""), text("")])
    events = [e async for e in Agent(model=model).stream("hi")]

    final = events[-1]
    assert isinstance(final, Final) and final.result.stop_reason == "empty"
    assert final.result.output.startswith("No answer")
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == final.result.output


async def test_a_reply_of_citation_marks_alone_with_nothing_to_cite_is_nudged() -> None:
    # the local 0.5B model answered "[1][2]" (and "[[1][2]]" fenced) before any search
    model = ScriptedModel([text("[1][2]"), text("```\n[[1][2]]\n```")])
    result = await Agent(model=model).run("P20 保修多久？", context=ALICE)

    assert model.requests[1][-1].text == MARKS_NUDGE
    assert result.stop_reason == "empty" and result.output.startswith("No answer")

    kit, _ = counting_tools()  # nudged, the model searches and answers in words
    model = ScriptedModel(
        [text("[1]"), tool_call("lookup", {"sku": "P20"}), text("保修两年 [1]。")]
    )
    result = await Agent(model=model, toolkit=kit).run("P20 保修多久？", context=ALICE)
    assert result.output == "保修两年 [1]。" and result.stop_reason == "final"


async def test_marks_of_passages_found_are_left_to_the_answer_check() -> None:
    kit, _ = counting_tools()
    model = ScriptedModel([tool_call("lookup", {"sku": "P20"}), text("[1]")])
    result = await Agent(model=model, toolkit=kit).run("P20 保修多久？", context=ALICE)

    assert result.output == "[1]" and model.remaining == 0  # no model call more


async def test_an_answer_in_words_with_its_marks_is_not_nudged() -> None:
    kit, _ = counting_tools()
    model = ScriptedModel([tool_call("lookup", {"sku": "P20"}), text("保修两年 [1]。")])
    result = await Agent(model=model, toolkit=kit).run("P20 保修多久？", context=ALICE)

    assert result.output == "保修两年 [1]。" and result.stop_reason == "final"
    assert model.remaining == 0


async def test_a_blank_answer_on_the_last_allowed_step_is_not_nudged() -> None:
    model = ScriptedModel([text("")])
    result = await Agent(model=model, max_iters=1).run("hi")

    assert result.stop_reason == "empty" and model.remaining == 0


async def test_identical_failing_calls_are_told_to_stop_and_end_the_run_by_the_third() -> None:
    kit, runs = counting_tools()
    model = CyclingScriptModel([tool_call("flaky", {"order_id": "SO-9"})])
    result = await Agent(model=model, toolkit=kit, max_iters=10).run("SO-9?", context=ALICE)

    assert runs["flaky"] == 2  # the third identical call is not run
    assert result.stop_reason == "repeated_call" and result.iterations == 3
    assert "flaky failed 2 times with the same error" in result.output
    assert "order SO-9 does not exist" in result.output
    results = [r for m in result.messages for r in m.tool_results]
    assert "Do not call it again" not in results[0].content
    assert "failed 2 times with the same error. Do not call it again" in results[1].content
    assert results[2].content.startswith("not run")
    # the transcript stays valid: every call has a result, the last message is the answer
    calls = [c.id for m in result.messages for c in m.tool_calls]
    assert calls == [r.call_id for r in results]
    assert result.messages[-1].role == "assistant" and result.messages[-1].text == result.output


async def test_failing_calls_with_other_arguments_are_not_stopped() -> None:
    kit, runs = counting_tools()
    model = ScriptedModel(
        [
            tool_call("flaky", {"order_id": "SO-1"}),
            tool_call("flaky", {"order_id": "SO-2"}),
            tool_call("flaky", {"order_id": "SO-1"}),
            tool_call("flaky", {"order_id": "SO-2"}),
            text("Neither order exists."),
        ]
    )
    result = await Agent(model=model, toolkit=kit).run("?", context=ALICE)

    assert runs["flaky"] == 4
    assert result.stop_reason == "final" and result.output == "Neither order exists."


async def test_a_repeated_successful_call_is_answered_from_the_runs_own_result() -> None:
    kit, runs = counting_tools()
    model = ScriptedModel(
        [
            tool_call("lookup", {"sku": "P20"}),
            tool_call("lookup", {"sku": "P20"}),  # same arguments, another spelling below
            tool_call("lookup", '{ "sku" : "P20" }'),
            text("两年 [1]。"),
        ]
    )
    events = [e async for e in Agent(model=model, toolkit=kit).stream("?", context=ALICE)]

    assert runs["lookup"] == 1
    finished = [e for e in events if isinstance(e, ToolFinished)]
    assert [e.replayed for e in finished] == [False, True, True]
    assert all("P20 保修两年。" in e.content and not e.is_error for e in finished)
    result = events[-1]
    assert isinstance(result, Final)
    assert len(result.result.citations) == 1  # numbered once, not again per replay
    assert result.result.usage.tool_calls == 1  # the calls that ran


async def test_a_successful_call_asked_again_after_two_replays_ends_the_run() -> None:
    # the 0.5B model sent one search eight times in a row, each replayed, until max_iters
    kit, runs = counting_tools()
    model = CyclingScriptModel([tool_call("lookup", {"sku": "P20"})])
    result = await Agent(model=model, toolkit=kit, max_iters=10).run("?", context=ALICE)

    assert runs["lookup"] == 1
    assert result.stop_reason == "repeated_call" and result.iterations == 4
    assert result.output.startswith(
        "I stopped: the model kept repeating the tool call lookup, whose result it already "
        "had (3 times in all)"
    )
    assert "[1] 手册: P20 保修两年。" in result.output  # the passages it found
    results = [r for m in result.messages for r in m.tool_results]
    assert [r.content.startswith(REPEATED_NOTE) for r in results[:3]] == [False, True, True]
    assert results[3].content == "not run: the run stopped because lookup kept being repeated"
    assert result.messages[-1].role == "assistant" and result.messages[-1].text == result.output


async def test_a_stopped_repeat_of_a_search_is_answered_from_its_passages(
    kb: KnowledgeBase,
) -> None:
    model = CyclingScriptModel([tool_call("retrieve", {"query": "E-203"})])
    agent = Agent(model=model, toolkit=Toolkit([retrieve_tool(kb)]), answer_check=AnswerCheck())
    result = await agent.run("What does E-203 mean?", context=ALICE)

    assert result.stop_reason == "repeated_call" and result.iterations == 4
    assert result.extractive and result.fallback_reason == "repeated_call"
    assert "E-203" in result.output and result.citations
    # one search ran; two calls got its result, the fourth was not run
    assert (result.usage.tool_calls, result.usage.retrievals, result.usage.model_calls) == (1, 1, 4)


async def test_group_switches_are_never_replayed() -> None:
    switches: list[Any] = []

    @tool(group="orders")
    def cancel_order(order_id: str) -> str:
        """Cancel an order."""
        return "cancelled"

    kit = Toolkit()
    kit.add_group("orders", "Order tools", [cancel_order])
    model = ScriptedModel(
        [
            tool_call("use_tool_group", {"group": "orders"}),
            tool_call("use_tool_group", {"group": "orders", "active": False}),
            tool_call("use_tool_group", {"group": "orders"}),
            text("ok"),
        ]
    )

    def spy(messages: list[Message], tools: list[Any]) -> Any:
        switches.append(kit.groups["orders"])
        return model._turn(messages, tools)

    result = await Agent(model=FunctionModel(spy), toolkit=kit).run("?", context=ALICE)

    assert result.output == "ok"
    assert switches == [False, True, False, True]


async def test_replaying_can_be_switched_off_and_failing_calls_are_still_stopped() -> None:
    kit, runs = counting_tools()
    model = ScriptedModel(
        [
            tool_call("lookup", {"sku": "P20"}),
            tool_call("lookup", {"sku": "P20"}),
            tool_call("flaky", {"order_id": "SO-9"}),
            tool_call("flaky", {"order_id": "SO-9"}),
            tool_call("flaky", {"order_id": "SO-9"}),
        ]
    )
    agent = Agent(model=model, toolkit=kit, replay_repeated_calls=False)
    result = await agent.run("?", context=ALICE)

    assert runs == {"lookup": 2, "flaky": 2}
    assert result.stop_reason == "repeated_call"


def price_tools() -> Toolkit:
    @tool(cache_ttl=0)
    def quote_price(sku: str, quantity: int = 1) -> dict[str, Any]:
        """Quote a price."""
        return {"sku": sku, "quantity": quantity, "total_cny": 2969.1 * quantity}

    return Toolkit([quote_price])


PRICE = {"sku": "SKU2024-011", "quantity": 3}
# what the 0.5B model answered in native mode (BENCHMARKS, round 4): the replayed result, copied
ECHO_OF_REPLAY = (
    "[The same call already succeeded earlier in this run; this is that result.]\n"
    '{"sku":"SKU2024-011","quantity":3,"total_cny":8907.3}'
)


@pytest.mark.parametrize(
    "echo",
    [
        '{"sku": "SKU2024-011", "quantity": 3, "total_cny": 8907.3}',
        '```json\n{"total_cny": 8907.3, "sku": "SKU2024-011", "quantity": 3}\n```',
        ECHO_OF_REPLAY,
        '{"total_cny": 8907.3}',  # some fields of the result (measured: {"name", "stock"})
        "[The same call already succeeded earlier in this run; this is that result.]",
    ],
    ids=["bare", "fenced", "with-the-replay-note", "some-fields", "the-note-alone"],
)
async def test_a_reply_that_only_repeats_a_tool_result_is_nudged_and_never_streamed(
    echo: str,
) -> None:
    model = ScriptedModel(
        [
            tool_call("quote_price", PRICE),
            tool_call("quote_price", PRICE),  # replayed, with the note
            text(echo),
            text("3 units of SKU2024-011 cost 8907.3 CNY."),
        ]
    )
    events = [e async for e in Agent(model=model, toolkit=price_tools()).stream("3 units?")]

    final = events[-1]
    assert isinstance(final, Final) and final.result.stop_reason == "final"
    assert final.result.output == "3 units of SKU2024-011 cost 8907.3 CNY."
    streamed = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert streamed == final.result.output  # the echo was held back, not shown
    assert model.requests[3][-1].text.startswith("Your last reply only repeated the raw result")
    assert "quote_price" in model.requests[3][-1].text
    assert echo not in [m.text for m in final.result.messages]


async def test_an_echo_after_the_nudge_ends_with_the_tool_result_named_as_such() -> None:
    model = ScriptedModel(
        [tool_call("quote_price", PRICE), text(ECHO_OF_REPLAY), text(ECHO_OF_REPLAY)]
    )
    events = [e async for e in Agent(model=model, toolkit=price_tools()).stream("3 units?")]

    final = events[-1]
    assert isinstance(final, Final) and final.result.stop_reason == "empty"
    output = final.result.output
    assert output.startswith("The model did not write an answer in words. The quote_price tool")
    assert '"total_cny":8907.3' in output.replace(" ", "")
    assert "already succeeded" not in output
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == output


async def test_json_that_is_not_a_tool_result_and_prose_about_one_are_answers() -> None:
    answers = [
        '{"answer": "8907.3 CNY"}',
        '{"sku": "SKU2024-011", "total_cny": 100}',  # not the result's value
        'It costs 8907.3 CNY: {"total_cny": 8907.3}',
    ]
    for answer in answers:
        model = ScriptedModel([tool_call("quote_price", PRICE), text(answer)])
        result = await Agent(model=model, toolkit=price_tools()).run("3 units?")
        assert result.stop_reason == "final" and result.output == answer


async def test_a_copied_replay_note_before_an_answer_in_words_is_dropped() -> None:
    answer = "3 units cost 8907.3 CNY."
    model = ScriptedModel(
        [
            tool_call("quote_price", PRICE),
            tool_call("quote_price", PRICE),
            text("[The same call already succeeded earlier in this run; this is that result.]\n"
                 + answer),
        ]
    )  # fmt: skip
    events = [e async for e in Agent(model=model, toolkit=price_tools()).stream("3 units?")]

    final = events[-1]
    assert isinstance(final, Final) and final.result.output == answer
    assert final.result.stop_reason == "final" and model.remaining == 0
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == answer


async def test_a_blank_answer_after_tool_results_without_passages_shows_the_results() -> None:
    # measured (plain mode, 0.5B): the stock looked up, the same call twice more, then blank
    model = ScriptedModel(
        [tool_call("quote_price", PRICE), tool_call("quote_price", PRICE), text(""), text("")]
    )
    result = await Agent(model=model, toolkit=price_tools()).run("3 units?")

    assert result.stop_reason == "empty"
    assert result.output.startswith("The model returned an empty reply, so there is no written")
    lines = result.output.splitlines()[1:]
    assert lines == ["- quote_price: sku: SKU2024-011, quantity: 3, total_cny: 8907.3"]  # once
    assert "8907.3" in lines[0] and "already succeeded" not in lines[0]
