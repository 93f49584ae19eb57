"""The extractive answer to a question comparing things the documents give a section each
("Lumen X1 和 Lumen X1 Pro 有什么区别？"): each named section's sentences, under its name, in
the order the question names them, and not the one section the search ranked first."""

from __future__ import annotations

import pytest

from shelfhand.agent.extractive import extractive_answer
from shelfhand.core.messages import Citation

SPECS = "Lumen Series Product Specifications"


def _section(index: int, name: str, text: str) -> Citation:
    return Citation(
        index=index, source="product-specs.docx", title=SPECS, section=f"{SPECS} > {name}",
        doc_id="specs", text=text, start=100 * index, end=100 * index + len(text),
    )  # fmt: skip


PRO = _section(
    1,
    "Lumen X1 Pro (SKU2024-012)",
    "The Lumen X1 Pro adds native 4K and a laser light source. It supports HDR10.",
)
X1 = _section(
    2,
    "Lumen X1 (SKU2024-011)",
    "The Lumen X1 is our best-selling home projector: 3,000 ANSI lumens. Its lamp lasts "
    "about 4,000 hours.",
)
MINI = _section(3, "Lumen Mini M2 (SKU2024-020)", "The Lumen Mini M2 is a portable projector.")
GLANCE = _section(4, "Models at a glance", "SKU | Model | Price (CNY)")
SEARCHED = [PRO, X1, GLANCE, MINI]  # the search's order: the X1 Pro first


def _lines(question: str) -> list[str]:
    found = extractive_answer(question, SEARCHED)
    assert found is not None
    return found.text.splitlines()


@pytest.mark.parametrize(
    "question",
    [
        "Lumen X1 和 Lumen X1 Pro 有什么区别？",
        "What's the difference between the X1 and the X1 Pro?",
        "Compare the Lumen X1 with the X1 Pro.",
        "X1 vs X1 Pro",
    ],
)
def test_each_named_section_is_quoted_in_the_order_named(question: str) -> None:
    # before: the X1 Pro's sentences alone (the search's first)
    lines = _lines(question)
    assert lines[1:] == [
        "- Lumen X1 (SKU2024-011): The Lumen X1 is our best-selling home projector: 3,000 "
        "ANSI lumens. [2]",
        "- Its lamp lasts about 4,000 hours. [2]",
        "- Lumen X1 Pro (SKU2024-012): The Lumen X1 Pro adds native 4K and a laser light "
        "source. [1]",
        "- It supports HDR10. [1]",
    ]


def test_a_longer_name_does_not_also_name_the_shorter_one_inside_it() -> None:
    # "X1 Pro" holds "X1": the X1 is not named, the Mini M2 is
    lines = _lines("Mini M2 和 X1 Pro 哪个更轻？")
    assert [line.rsplit(" [", 1)[1] for line in lines[1:]] == ["3]", "1]", "1]"]


@pytest.mark.parametrize(
    "question",
    [
        "What is the difference between the X1 Pro and a TV?",  # one section named
        "Lumen X1 Pro 支持 HDR 吗？",  # no comparison
        "Which is the brightest Lumen projector?",  # a comparison naming no section
    ],
)
def test_a_question_not_comparing_named_sections_gets_the_best_passage(question: str) -> None:
    lines = _lines(question)
    assert not any(line.startswith("- Lumen X1 (") for line in lines)
