"""What ``ask`` and ``chat`` print under an answer (the tools used, the grounding flags, why
an answer was replaced, a citation of no passage) is in the language the question is asked
in, as the answer shelfhand writes itself is."""

from __future__ import annotations

import pytest
from rich.console import Console

from shelfhand.agent.answer_check import REASONS_ZH
from shelfhand.cli.answers import REASONS, print_answer
from shelfhand.core.grounding import Grounding, SentenceSupport
from shelfhand.core.messages import Message, ToolCallBlock, ToolResultBlock
from shelfhand.core.results import RunResult


def shown(result: RunResult, question: str) -> str:
    console = Console(record=True, width=200, color_system=None)
    print_answer(console, result, question)
    return console.export_text()


def failed_stock_lookup() -> tuple[Message, ...]:
    call = ToolCallBlock(id="c1", name="query_stock", arguments={"sku": "SKU2024-012"})
    return (
        Message.user("question"),
        Message.assistant("", tool_calls=[call]),
        Message.tool(
            [
                ToolResultBlock(
                    call_id="c1",
                    name="query_stock",
                    content="tool query_stock failed: ConnectionError",
                    is_error=True,
                    failure="failed: ConnectionError",
                )
            ]
        ),
    )


def flagged(answer: str) -> RunResult:
    sentence = SentenceSupport(
        text=answer, supported=False, missing=("45",), misplaced=("3999",), cited=(9,)
    )
    return RunResult(
        output=answer,
        messages=failed_stock_lookup(),
        grounding=Grounding(sentences=(sentence,)),
        unknown_citations=(9,),
    )


def test_a_chinese_question_gets_chinese_lines_under_its_answer() -> None:
    out = shown(flagged("等待 45 分钟 [9]。"), "E-203 要等多久？")

    assert "工具：query_stock（失败）" in out
    assert "无依据：等待 45 分钟 [9]。（段落中没有 45）（3999 在段落的表格中属于另一行）" in out
    assert "注意：回答引用了 [9]，但没有这样的段落：不算依据" in out
    for english in ("tools:", "unsupported:", "not in the passages", "the answer cites"):
        assert english not in out


def test_an_english_question_keeps_the_english_lines() -> None:
    out = shown(flagged("Wait 45 minutes [9]."), "How long do I wait after E-203?")

    assert "tools: query_stock (failed)" in out
    assert (
        "unsupported: Wait 45 minutes [9]. (45 not in the passages) "
        "(3999 is another row's in the passages' table)"
    ) in out
    assert "the answer cites [9], which no passage has: not evidence" in out


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("E-203 要等多久？", "摘录式回答：文档的原句，并非模型所写（模型在为此调用的工具出错后拒绝了回答）"),
        ("How long after E-203?", "extractive answer: sentences of the documents, not written by a model (the model declined after a tool called for the question failed)"),
    ],
)  # fmt: skip
def test_why_the_answer_was_replaced_is_said_in_the_question_s_language(
    question: str, expected: str
) -> None:
    result = RunResult(
        output="…",
        messages=failed_stock_lookup(),
        extractive=True,
        fallback_reason="tool_failed",
    )

    assert expected in shown(result, question)


def test_a_model_s_answer_the_passages_do_not_hold_is_said_so_in_chinese() -> None:
    result = RunResult(output="保修 36 个月。", messages=(), fallback_reason="ungrounded")

    assert "注意：文档不支持这个回答；没有段落回答这个问题" in shown(result, "保修期多久？")


def test_every_reason_has_words_in_both_languages() -> None:
    assert set(REASONS) == set(REASONS_ZH)


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("Is SKU2024-012 in stock?", "tools: query_stock (not run)"),
        ("还有货吗？", "工具：query_stock（未执行）"),
    ],
)
def test_a_tool_the_model_only_called_wrongly_is_not_said_to_have_failed(
    question: str, expected: str
) -> None:
    # invalid arguments: the model's mistake, the stock system never asked (no failure)
    call = ToolCallBlock(id="c1", name="query_stock", arguments={"sku": 12})
    rejected = ToolResultBlock(
        call_id="c1",
        name="query_stock",
        content="invalid arguments for query_stock: sku: Input should be a valid string",
        is_error=True,
    )
    messages = (
        Message.user(question),
        Message.assistant("", tool_calls=[call]),
        Message.tool([rejected]),
    )
    out = shown(RunResult(output="I could not check.", messages=messages), question)

    assert expected in out
    assert "failed" not in out and "失败" not in out


def test_a_tool_that_failed_once_and_was_called_wrongly_once_failed() -> None:
    calls = [
        ToolCallBlock(id="c1", name="query_stock", arguments={"sku": 12}),
        ToolCallBlock(id="c2", name="query_stock", arguments={"sku": "SKU2024-012"}),
    ]
    messages = (
        Message.user("Is SKU2024-012 in stock?"),
        Message.assistant("", tool_calls=calls),
        Message.tool(
            [
                ToolResultBlock(call_id="c1", name="query_stock", content="invalid", is_error=True),
                ToolResultBlock(
                    call_id="c2",
                    name="query_stock",
                    content="tool query_stock timed out",
                    is_error=True,
                    failure="timed out after 5 s",
                ),
            ]
        ),
    )
    out = shown(RunResult(output="I could not check.", messages=messages), "Is it in stock?")

    assert "tools: query_stock (failed)" in out
