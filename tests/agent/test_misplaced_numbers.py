"""The grounding check reads a table by its rows: a number the passages hold only in another
row than the one the sentence names is not support ("right number, wrong row"). English and
Chinese, a document table and a Markdown one, and the answer check's fallback end to end with
a scripted model over the sample documents."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shelfhand import Agent, KnowledgeBase, Toolkit, UserContext, retrieve_tool
from shelfhand.agent.answer_check import AGENT_SCAFFOLDS, AnswerCheck
from shelfhand.agent.extractive import LEAD
from shelfhand.agent.grounding_check import check_grounding
from shelfhand.core.messages import Citation
from shelfhand.testing import ScriptedModel, text
from support.knowledge import sample_kb

SPECS = Citation(
    index=1,
    source="specs.docx",
    title="Lumen specifications",
    section="Prices",
    text=(
        "SKU | Model | Brightness (ANSI lm) | Resolution | Light source | Price (CNY)\n"
        "SKU2024-011 | Lumen X1 | 3,000 | 1920 × 1080 (Full HD) | UHP lamp, 4,000 h | 3,999\n"
        "SKU2024-012 | Lumen X1 Pro | 3,600 | 3840 × 2160 (4K UHD) | Laser, 20,000 h | 5,999\n"
        "SKU2024-020 | Lumen Mini M2 | 800 | 1280 × 720 (HD) | LED, 30,000 h | 1,999\n"
        "SKU2024-031 | Lumen Cinema C4K | 4,200 | 3840 × 2160 (4K UHD) | Laser, 25,000 h | 12,999"
    ),
)
FEES = Citation(
    index=1,
    source="fees.md",
    title="维修收费",
    text=(
        "| 项目 | 保内 | 保外 |\n"
        "|---|---|---|\n"
        "| 更换灯泡 | 0 元 | 499 元 |\n"
        "| 主板维修 | 0 元 | 1,200 元 |\n"
    ),
)
X1_PRO_PRICE = "What is the list price of the Lumen X1 Pro?"


def misplaced(
    answer: str, passage: Citation = SPECS, question: str = X1_PRO_PRICE
) -> tuple[str, ...]:
    (sentence,) = check_grounding(answer, [passage], question=question).sentences
    assert sentence.supported == (not sentence.misplaced)
    return sentence.misplaced


@pytest.mark.parametrize(
    "answer",
    [
        "The list price of the Lumen X1 Pro is 3,999 CNY [1].",
        "Lumen X1 Pro 的标价是 3,999 元。",
        "SKU2024-012 costs 3,999 CNY.",
        # naming no row: read as about the question's row
        "The price is 3,999 CNY.",
    ],
)
def test_another_rows_number_said_of_the_named_row_is_misplaced(answer: str) -> None:
    assert misplaced(answer) == ("3999",)


@pytest.mark.parametrize(
    "answer",
    [
        "The list price of the Lumen X1 Pro is 5,999 CNY [1].",
        "The price is 5,999 CNY.",
        "SKU2024-011 costs 3,999 CNY.",
        "The Lumen X1 costs 3,999 CNY.",
        "The Lumen X1 Pro gives 3,600 ANSI lumens.",
        # a comparison speaks of two rows: each number is some row's
        "The X1 costs 3,999 CNY and the X1 Pro 5,999 CNY.",
    ],
)
def test_a_number_of_the_named_row_or_of_rows_named_together_is_not(answer: str) -> None:
    assert misplaced(answer) == ()


def test_a_markdown_table_in_chinese() -> None:
    question = "保外更换灯泡多少钱？"
    assert misplaced("保外更换灯泡要 1,200 元。", FEES, question) == ("1200",)
    assert misplaced("保外更换灯泡要 499 元。", FEES, question) == ()


def test_numbers_outside_tables_are_checked_as_before() -> None:
    prose = Citation(index=1, source="a.md", text="The Lumen X1 costs 3,999 CNY; the X1 Pro 5,999.")
    (sentence,) = check_grounding("The X1 Pro costs 3,999 CNY.", [prose]).sentences
    assert sentence.misplaced == () and sentence.supported


def test_the_flag_travels_in_the_grounding_dict() -> None:
    grounding = check_grounding("The price is 3,999 CNY.", [SPECS], question=X1_PRO_PRICE)
    assert grounding.to_dict()["sentences"][0]["misplaced"] == ["3999"]
    assert not grounding.grounded


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KnowledgeBase]:
    with sample_kb(tmp_path_factory.mktemp("kb")) as base:
        yield base


@pytest.mark.anyio
async def test_another_rows_price_is_replaced_by_the_passages_sentences(
    kb: KnowledgeBase,
) -> None:
    # the local model's answer in eval-answers (price-x1pro-en, `both` mode): the Lumen X1's
    # price for the X1 Pro
    agent = Agent(
        model=ScriptedModel([text("The list price of the Lumen X1 Pro is 3,999 CNY.")]),
        toolkit=Toolkit([retrieve_tool(kb)]),
        retrieval="context",
        answer_check=AnswerCheck(scaffolds=AGENT_SCAFFOLDS),
    )

    result = await agent.run(X1_PRO_PRICE, context=UserContext(tenant_id="acme", user_id="u1"))

    assert result.fallback_reason == "ungrounded" and result.extractive
    assert result.output.startswith(LEAD) and "5,999" in result.output


def test_a_number_another_passage_states_outside_a_table_is_not_misplaced() -> None:
    # "12" is in the table only as digits of SKU2024-012; the policy says 12 months
    policy = Citation(index=2, source="warranty.md", text="All Lumen models: 12 months warranty.")
    grounding = check_grounding(
        "The Lumen Mini M2 has a 12 months warranty.", [SPECS, policy], question="M2 warranty?"
    )
    assert grounding.sentences[0].misplaced == () and grounding.grounded
    # and a price the prose gives for that row stands, whatever the table's other rows hold
    prose = Citation(index=2, source="news.md", text="The Lumen Mini M2 now sells for 3,999 CNY.")
    (sentence,) = check_grounding("The Lumen Mini M2 costs 3,999 CNY.", [SPECS, prose]).sentences
    assert sentence.misplaced == ()


def prose(section: str, text: str) -> Citation:
    """A passage beside :data:`SPECS` (number 2), under ``section``."""
    return Citation(index=2, source="specs.md", section=section, text=text)


X1_DESCRIPTION = Citation(
    index=2,
    source="specs.docx",
    title="Lumen specifications",
    section="Lumen specifications › Lumen X1 (SKU2024-011)",
    text="The Lumen X1 is our best-selling home projector. Its UHP lamp lasts about 4,000 hours "
    "in eco mode; a replacement lamp (part LMP-X1) costs 499 CNY.",
)


@pytest.mark.parametrize(
    ("answer", "misplaced_numbers"),
    [
        # Qwen2.5-Coder-0.5B, asked "它的光源能用多久？" after the Lumen Mini M2's price: the
        # X1's 4,000 hours, which its description (headed "Lumen X1") states outside the table
        ("Lumen Mini M2's light source lasts about 4,000 hours in eco mode.", ("4000",)),
        ("Lumen Mini M2 的光源可以使用约 4,000 小时。", ("4000",)),
        ("The Lumen X1's lamp lasts about 4,000 hours in eco mode.", ()),
        ("The Lumen Mini M2's LED lasts 30,000 h.", ()),
        ("The lamp lasts about 4,000 hours in eco mode.", ()),  # names no row
    ],
    ids=["other-row-en", "other-row-zh", "its-row", "the-table", "no-row"],
)
def test_prose_under_another_rows_heading_does_not_bear_out_a_number(
    answer: str, misplaced_numbers: tuple[str, ...]
) -> None:
    (sentence,) = check_grounding(answer, [SPECS, X1_DESCRIPTION]).sentences

    assert sentence.misplaced == misplaced_numbers
    assert sentence.supported == (not misplaced_numbers)


def test_prose_under_a_heading_that_names_no_row_still_bears_out_a_number() -> None:
    faq = prose("FAQ › Lamps", "Every Lumen Mini M2 lamp lasts about 4,000 hours in eco mode.")

    (sentence,) = check_grounding(
        "The Lumen Mini M2's lamp lasts 4,000 hours.", [SPECS, faq]
    ).sentences

    assert sentence.misplaced == () and sentence.supported


def test_prose_under_the_questions_row_bears_out_a_sentence_that_names_none() -> None:
    # "30,000" is the Mini M2's row in the table; the X1's own description says it too
    x1 = prose(
        "Lumen specifications › Lumen X1 (SKU2024-011)",
        "The Lumen X1's lamp lasts 30,000 hours in eco mode.",
    )

    (sentence,) = check_grounding(
        "It lasts 30,000 hours.", [SPECS, x1], question="How long does the Lumen X1's lamp last?"
    ).sentences
    (other,) = check_grounding(
        "It lasts 4,000 hours.",
        [SPECS, X1_DESCRIPTION],
        question="How long does the Lumen Mini M2's light source last?",
    ).sentences

    assert sentence.misplaced == () and sentence.supported
    assert other.misplaced == ("4000",) and not other.supported


@pytest.mark.parametrize(
    ("answer", "asked", "misplaced_numbers"),
    [
        # "X1" names the Lumen X1's row: the X1 Pro's row shares it, and says "Pro" too
        ("The Lumen X1 costs 5,999 CNY.", "", ("5999",)),
        ("The Lumen X1 costs 3,999 CNY.", "", ()),
        ("The Lumen X1 Pro costs 5,999 CNY.", "", ()),
        # Qwen2.5-Coder-0.5B, "那价格呢？" after "Lumen X1 的亮度是多少？": the X1 Pro's price
        ("5,999 CNY", "Lumen X1 的亮度是多少？ 那价格呢？", ("5999",)),
        ("3,999 CNY", "Lumen X1 的亮度是多少？ 那价格呢？", ()),
    ],
    ids=["x1-given-the-pro-s", "x1", "pro", "follow-up-pro-s", "follow-up-x1"],
)
def test_a_name_another_row_extends_names_the_row_that_says_least_else(
    answer: str, asked: str, misplaced_numbers: tuple[str, ...]
) -> None:
    (sentence,) = check_grounding(answer, [SPECS], question="那价格呢？", asked=asked).sentences

    assert sentence.misplaced == misplaced_numbers
