"""Citations are numbered once per run: every ``retrieve`` call of a run shares one numbering,
a passage keeps its first number, and numbers the answer cites but never got are flagged."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from shelfhand import Agent, KnowledgeBase, Toolkit, UserContext, retrieve_tool
from shelfhand.core.citations import CitationLedger, announces_only, cited_numbers, only_marks
from shelfhand.core.events import Final, event_to_dict
from shelfhand.core.messages import Citation, ToolResultBlock
from shelfhand.testing import ScriptedModel, text, tool_call
from shelfhand.tools.governance import Governance
from support.knowledge import sample_kb

pytestmark = pytest.mark.anyio

ACME = UserContext(tenant_id="acme", user_id="u1", roles=["user"])


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    with sample_kb(tmp_path) as base:
        yield base


def tool_results(messages: tuple[object, ...]) -> list[ToolResultBlock]:
    return [r for m in messages for r in getattr(m, "tool_results", ())]


def passage_blocks(content: str) -> dict[int, str]:
    """``[n] label\\ntext`` blocks of a retrieve result, by number."""
    parts = re.split(r"(?m)^\[(\d+)\] ", content)
    return {int(n): body for n, body in zip(parts[1::2], parts[2::2], strict=True)}


@pytest.mark.parametrize(
    ("first", "second"),
    [("E-203 灯泡过热", "拆封 退货 7 天"), ("lamp overheating error", "warranty period years")],
)
async def test_two_retrieves_in_one_turn_give_distinct_numbers_that_match_their_passages(
    kb: KnowledgeBase, first: str, second: str
) -> None:
    model = ScriptedModel(
        [
            tool_call("retrieve", {"query": first}),
            tool_call("retrieve", {"query": second}),
            tool_call("retrieve", {"query": first}),  # the same passages again
            text("answer [1][4]"),
        ]
    )
    result = await Agent(model=model, toolkit=Toolkit([retrieve_tool(kb)])).run(first, context=ACME)
    one, two, again = tool_results(result.messages)

    # the second call goes on from where the first stopped
    assert [c.index for c in one.citations] == list(range(1, len(one.citations) + 1))
    assert one.citations and two.citations
    seen = {c.chunk_id: c.index for c in one.citations}
    fresh = [c for c in two.citations if c.chunk_id not in seen]
    assert [c.index for c in fresh] == list(
        range(len(one.citations) + 1, len(one.citations) + len(fresh) + 1)
    )
    for c in two.citations:  # a chunk both calls found keeps its first number
        if c.chunk_id in seen:
            assert c.index == seen[c.chunk_id]
    # a repeated chunk keeps its number
    assert [(c.index, c.chunk_id) for c in again.citations] == [
        (c.index, c.chunk_id) for c in one.citations
    ]

    # the model was shown those numbers, each next to its own passage
    for result_block in (one, two, again):
        blocks = passage_blocks(result_block.content)
        assert sorted(blocks) == sorted(c.index for c in result_block.citations)
        for c in result_block.citations:
            assert c.text[:40] in blocks[c.index]

    # the run's citations: one per number, every number naming one passage
    numbers = [c.index for c in result.citations]
    assert numbers == sorted(set(numbers)) == list(range(1, len(numbers) + 1))
    by_number = {c.index: c.chunk_id for c in result.citations}
    for c in (*one.citations, *two.citations, *again.citations):
        assert by_number[c.index] == c.chunk_id
    assert result.unknown_citations == ()


async def test_a_cited_number_that_was_never_given_is_flagged(kb: KnowledgeBase) -> None:
    model = ScriptedModel(
        [tool_call("retrieve", {"query": "拆封 退货", "top_k": 2}), text("可以退 [1]，详见 [9]。")]
    )
    agent = Agent(model=model, toolkit=Toolkit([retrieve_tool(kb)]))
    events = [e async for e in agent.stream("拆封后还能退吗？", context=ACME)]
    final = events[-1]
    assert isinstance(final, Final)
    assert [c.index for c in final.result.citations] == [1, 2]
    assert final.result.unknown_citations == (9,)
    assert event_to_dict(final)["unknown_citations"] == [9]


async def test_an_answer_citing_without_any_retrieval_has_only_unknown_numbers() -> None:
    model = ScriptedModel([text("It is covered [1][2].")])
    result = await Agent(model=model).run("Is it covered?")
    assert result.citations == ()
    assert result.unknown_citations == (1, 2)


async def test_concurrent_runs_never_share_numbers(kb: KnowledgeBase) -> None:
    toolkit = Toolkit([retrieve_tool(kb)])  # one toolkit, one governance: as in the service
    busy = Agent(
        model=ScriptedModel(
            [
                tool_call("retrieve", {"query": "warranty period years"}),
                tool_call("retrieve", {"query": "E-203 灯泡过热"}),
                text("done [4]"),
            ]
        ),
        toolkit=toolkit,
    )
    other = Agent(
        model=ScriptedModel([tool_call("retrieve", {"query": "E-203 灯泡过热"}), text("[1]")]),
        toolkit=toolkit,
    )
    first, second = await asyncio.gather(busy.run("a", context=ACME), other.run("b", context=ACME))
    assert [c.index for c in second.citations] == list(range(1, len(second.citations) + 1))
    assert second.unknown_citations == ()
    assert len(first.citations) > len(second.citations)
    assert first.unknown_citations == ()
    # identical concurrent retrieve calls of two runs each run: the numbers belong to a run
    assert Governance().plan(retrieve_tool(kb)).dedup is False


def test_the_ledger_keeps_first_numbers_and_drops_duplicates_within_one_call() -> None:
    ledger = CitationLedger()
    a, b, c = (Citation(index=1, source="s.md", chunk_id=f"s::{i}", text=f"t{i}") for i in "abc")
    assert [x.index for x in ledger.number([a, b])] == [1, 2]
    assert [(x.chunk_id, x.index) for x in ledger.number([c, a, a])] == [("s::c", 3), ("s::a", 1)]
    assert ledger.numbers == {1, 2, 3}
    assert ledger.unknown("see [2] and [5]") == (5,)


@pytest.mark.parametrize(
    ("answer", "numbers"),
    [
        ("Lamp overheating [1][2].", (1, 2)),
        ("See [3, 1] and [1，4].", (3, 1, 4)),
        ("灯泡过热【2】，请更换［5］。", (2, 5)),
        ("Use `items[0]` or\n```\nx[7]\n```\nthen [2].", (2,)),
        ("No citations here [a] [].", ()),
    ],
)
def test_cited_numbers_reads_the_markers_of_an_answer(
    answer: str, numbers: tuple[int, ...]
) -> None:
    assert cited_numbers(answer) == numbers


@pytest.mark.parametrize(
    ("text", "marks_alone"),
    [
        ("[1][2]", True),
        ("  [1]，[2]。", True),
        ("```\n[[1][2]]\n```", True),
        ("【1】", True),
        ("[1, 2]", True),
        ("See [1].", False),
        ("保修两年 [1]。", False),
        ("3", False),
        ("[]", False),
        ("a[0]", False),
        ("", False),
    ],
)
def test_a_reply_of_citation_marks_alone_is_told_from_an_answer(
    text: str, marks_alone: bool
) -> None:
    assert only_marks(text) is marks_alone


@pytest.mark.parametrize(
    ("text", "announces"),
    [
        ("The answer to the user is:", True),
        ("答案是：", True),
        ("根据文档 [1]：", True),
        ("The answer is: The answer is:", True),
        ("E-203 means overheating. To fix it:\n- clean the filter", False),
        ("Steps:\n1. Unplug it.\n2. Wait.", False),
        ("保修两年 [1]。", False),
        ("Time: 10:30", False),
        ("", False),
    ],
)
def test_a_reply_announcing_an_answer_that_does_not_follow_is_told_from_one(
    text: str, announces: bool
) -> None:
    assert announces_only(text) is announces
