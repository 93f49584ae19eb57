"""The extractive answer to a broad question ("怎么退货？", "退货政策是什么？"): one or two words
naming a topic, which every section of the policy holds. It is one sentence of each section
the search found, in the document's order, each under its section's name, and not the one
section the search ranked first."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shelfhand.agent.extractive import extractive_answer
from shelfhand.core.messages import Citation

TITLE = "退货与换货政策"
SECTIONS = [  # (section, text) in the document's order, as the bundled returns policy has them
    (
        TITLE,
        "本政策适用于明光官方商城售出的投影仪及配件。申请退货时请提供订单号，"
        "退货商品需附带原包装、配件和赠品。",
    ),
    (
        f"{TITLE} > 未拆封商品",
        "未拆封、包装完好的商品，自签收之日起 30 天内可申请无理由退货，全额退款。",
    ),
    (
        f"{TITLE} > 已拆封商品",
        "已拆封的商品，自签收之日起 7 天内可申请退货：\n\n- 因质量问题退货：全额退款；\n"
        "- 非质量问题退货：收取 10% 的翻新费。",
    ),
    (f"{TITLE} > 退款时效", "仓库收到退货并验货通过后，退款在 3 至 5 个工作日内原路退回。"),
    (f"{TITLE} > 不支持退货的情况", "定制刻字商品和已激活的延保服务卡不支持退货。"),
]


def _policy(order: list[int]) -> list[Citation]:
    """The policy's sections as the search found them, in ``order`` (indexes of SECTIONS)."""
    starts = [0]
    for _, text in SECTIONS:
        starts.append(starts[-1] + len(text) + 2)
    return [
        Citation(
            index=rank,
            source="returns-policy.md",
            title=TITLE,
            section=SECTIONS[i][0],
            doc_id="returns",
            chunk_id=f"returns#{i}",
            text=SECTIONS[i][1],
            start=starts[i],
            end=starts[i] + len(SECTIONS[i][1]),
        )
        for rank, i in enumerate(order, start=1)
    ]


# the search's order for "怎么退货？" over the bundled samples: the exceptions first (their
# heading holds 退货 once more), the opening last
SEARCHED = _policy([4, 3, 2, 1, 0])


def _lines(question: str, passages: list[Citation]) -> list[str]:
    found = extractive_answer(question, passages)
    assert found is not None
    return found.text.splitlines()


def test_a_broad_question_gets_each_section_in_the_documents_order() -> None:
    # before: "- 定制刻字商品和已激活的延保服务卡不支持退货。 [1]" alone, the search's first
    assert _lines("怎么退货？", SEARCHED) == [
        "摘自文档：",
        "- 申请退货时请提供订单号，退货商品需附带原包装、配件和赠品。 [5]",
        "- 未拆封商品：未拆封、包装完好的商品，自签收之日起 30 天内可申请无理由退货，全额退款。 [4]",
        "- 已拆封商品：已拆封的商品，自签收之日起 7 天内可申请退货： [3]",
        "- 退款时效：仓库收到退货并验货通过后，退款在 3 至 5 个工作日内原路退回。 [2]",
        "- 不支持退货的情况：定制刻字商品和已激活的延保服务卡不支持退货。 [1]",
    ]


def test_the_quoted_sentences_are_the_passages_own() -> None:
    # the section's name is shown before the sentence, and not quoted as part of it
    found = extractive_answer("退货政策是什么？", SEARCHED)
    assert found is not None
    texts = {c.index: c.text for c in SEARCHED}
    assert [n for _, n in found.sentences] == [5, 4, 3, 2, 1]
    assert all(sentence in texts[n] for sentence, n in found.sentences)
    # "本政策适用于…" and "申请退货时…" each hold one of 退货 and 政策: the first is taken
    assert found.sentences[0][0] == "本政策适用于明光官方商城售出的投影仪及配件。"


def test_an_overview_in_english_is_labelled_in_english() -> None:
    sections = [
        ("Returns policy", "This policy covers projectors bought in our shop."),
        ("Returns policy > Unopened items", "Unopened items can be returned within 30 days."),
        ("Returns policy > Opened items", "Opened items can be returned within 7 days."),
        ("Returns policy > Refunds", "Money comes back 3 to 5 days after a return."),
    ]
    passages = [
        Citation(
            index=n, source="returns.md", title="Returns policy", section=section,
            doc_id="returns-en", text=text, start=100 * i, end=100 * i + len(text),
        )
        for n, (i, (section, text)) in enumerate(reversed(list(enumerate(sections))), start=1)
    ]  # fmt: skip
    assert _lines("What is the returns policy?", passages) == [
        "From the documents:",
        "- This policy covers projectors bought in our shop. [4]",
        # (a sentence starting with its section's name is not labelled with it)
        "- Unopened items can be returned within 30 days. [3]",
        "- Opened items can be returned within 7 days. [2]",
        "- Refunds: Money comes back 3 to 5 days after a return. [1]",
    ]


@pytest.mark.parametrize(
    ("question", "first"),
    [
        # one fact asked: the best passage's sentences, as before
        ("拆封后还能退货吗？", "- 已拆封的商品，自签收之日起 7 天内可申请退货： [3]"),
        ("退款多久能到账？", "- 仓库收到退货并验货通过后，退款在 3 至 5 个工作日内原路退回。 [2]"),
        ("哪些定制商品不支持退货？", "- 定制刻字商品和已激活的延保服务卡不支持退货。 [1]"),
    ],
)
def test_a_question_asking_one_fact_gets_its_passage(question: str, first: str) -> None:
    lines = _lines(question, SEARCHED)
    assert lines[1] == first
    labels = tuple(f"- {section.split(' > ')[-1]}：" for section, _ in SECTIONS)
    assert not any(line.startswith(labels) for line in lines[1:])


def test_sections_of_several_documents_are_not_an_overview() -> None:
    # two sections of the policy and one of a FAQ hold 退货: no document has three
    faq = replace(
        SEARCHED[3], index=3, source="faq.html", doc_id="faq", title="FAQ", section="FAQ > 退货"
    )
    passages = [SEARCHED[0], SEARCHED[1], faq]
    lines = _lines("怎么退货？", passages)
    assert lines[1] == "- 定制刻字商品和已激活的延保服务卡不支持退货。 [1]"
    assert len(lines) == 2


def test_a_section_holding_the_topic_in_its_heading_alone_is_left_out() -> None:
    # "不在保修范围内" lists cases, none of which says 退货: its heading does
    listed = Citation(
        index=6, source="returns-policy.md", title=TITLE, section=f"{TITLE} > 退货须知",
        doc_id="returns", text="请保留快递单据。", start=900, end=908,
    )  # fmt: skip
    lines = _lines("怎么退货？", [*SEARCHED, listed])
    assert "请保留快递单据。" not in "".join(lines)
    assert len(lines) == 6


def test_an_older_version_that_disagrees_follows_the_sentence_it_disagrees_with() -> None:
    v2 = "明光投影仪保修政策（第 2 版）"
    newer = [
        (f"{v2} > 保修期限", "整机保修期为自购买之日起 24 个月。", 0),
        (f"{v2} > 保修范围", "非人为硬件故障在保修期内免费维修。", 40),
        (f"{v2} > 维修时效", "保修维修在 7 个工作日内完成。", 80),
    ]
    passages = [
        Citation(
            index=n, source="warranty-v2.md", title=v2, section=section, doc_id="v2",
            text=text, start=start, end=start + len(text),
        )
        for n, (section, text, start) in enumerate(newer, start=1)
    ]  # fmt: skip
    older = Citation(
        index=4, source="warranty-v1.md", title="明光投影仪保修政策（第 1 版）",
        section="明光投影仪保修政策（第 1 版） > 保修期限", doc_id="v1",
        text="整机保修期为自购买之日起 12 个月。", start=0, end=18, conflicts_with=(1,),
    )  # fmt: skip
    passages[0] = replace(passages[0], conflicts_with=(4,))
    assert _lines("保修政策是什么？", [*passages, older]) == [
        "摘自文档：",
        "- 保修期限：整机保修期为自购买之日起 24 个月。 [1]",
        "- 保修期限：整机保修期为自购买之日起 12 个月。 [4]",
        "- 保修范围：非人为硬件故障在保修期内免费维修。 [2]",
        "- 维修时效：保修维修在 7 个工作日内完成。 [3]",
    ]


@pytest.mark.parametrize("question", ["介绍一下退货政策", "简单介绍下退货", "请讲讲退货政策"])
def test_words_asking_to_be_told_are_not_what_is_asked(question: str) -> None:
    # 介绍, 一下, 下, 讲讲 ask; counted, "介绍一下退货政策" was four words, no broad question
    lines = _lines(question, SEARCHED)
    assert [line.rsplit(" [", 1)[1] for line in lines[1:]] == ["5]", "4]", "3]", "2]", "1]"]
