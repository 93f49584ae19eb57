"""The grounding check: each sentence of an answer against the passages it cites, in English
and Chinese, with numbers, durations, codes and dates that must appear in the evidence."""

from __future__ import annotations

from shelfhand.agent.extractive import LEAD_ZH, extractive_answer
from shelfhand.agent.grounding_check import check_grounding, facts, split_sentences
from shelfhand.core.messages import Citation
from support.answers import VPN_FAQ

V2 = Citation(
    index=1,
    source="warranty-policy-v2.md",
    text="2025 年 1 月 1 日及之后购买的投影仪，整机保修期为自购买之日起 24 个月。"
    "光源保修 6 个月或累计使用 1000 小时，以先到者为准。",
)
V1 = Citation(
    index=2,
    source="warranty-policy-v1.md",
    text="整机保修期为自购买之日（以发票或订单日期为准）起 12 个月。",
    conflicts_with=(1,),
)
MANUAL = Citation(
    index=3,
    source="troubleshooting-manual.pdf",
    text="E-203 Lamp overheating. The lamp temperature is above the safe limit. Wait 30 "
    "minutes until the lamp has cooled down, then clean the air filter.",
)
SPECS = Citation(
    index=4,
    source="product-specs.docx",
    text="SKU2024-012 | Lumen X1 Pro | 3,600 ANSI lumens | Laser | 5,999 CNY",
)
PASSAGES = (V2, V1, MANUAL, SPECS)


def test_chinese_and_english_sentences_split_but_decimals_and_codes_stay_whole() -> None:
    answer = "保修期为 24 个月 [1]。光源 6 个月！E-203 means overheating [3]. Version v1.2 has 3.5x zoom."

    assert split_sentences(answer) == [
        "保修期为 24 个月 [1]。",
        "光源 6 个月！",
        "E-203 means overheating [3].",
        "Version v1.2 has 3.5x zoom.",
    ]


def test_facts_are_normalised_numbers_and_whole_identifiers() -> None:
    assert {"3999", "e203", "sku2024012"} <= facts("SKU2024-012 costs 3,999 CNY; E-203 [1]")
    assert "1" not in facts("see [1]")  # a citation marker is not a fact
    # a code's digits are the code's: SKU2024-012 holds no "12" and no "2024"; a date's
    # parts and an ordinal are numbers
    assert facts("SKU2024-012 | E-203 | HDR10") == {"sku2024012", "e203", "hdr10"}
    assert facts("2025-01-01, the 9th") == {"2025", "1", "9"}


def test_a_number_is_not_held_by_a_code_that_ends_in_its_digits() -> None:
    """ "12 units in stock" after the stock system failed was supported by the product table's
    SKU2024-012; the table holds no 12 of its own."""
    specs = (MANUAL, SPECS)
    [stock] = check_grounding("Yes, 12 units of the Lumen X1 Pro are in stock.", specs).sentences
    assert not stock.supported and stock.missing == ("12",)
    [price] = check_grounding("The Lumen X1 Pro (SKU2024-012) costs 5,999 CNY.", specs).sentences
    assert price.supported and price.passage == 4
    # a code's whole number part alone is the code's: "error 203", "order 1001"
    [error] = check_grounding("Error 203 means the lamp is overheating.", specs).sentences
    assert error.supported and error.passage == 3


def test_an_answer_that_says_what_its_passages_say_is_grounded() -> None:
    grounding = check_grounding("整机保修期为 24 个月 [1]。", PASSAGES)

    assert grounding.grounded
    assert grounding.sentences[0].passage == 1


def test_an_english_answer_is_checked_against_the_passage_it_cites() -> None:
    answer = "E-203 means the lamp is overheating [3]. Wait 30 minutes and clean the air filter."
    grounding = check_grounding(answer, PASSAGES)

    assert grounding.grounded
    assert [s.passage for s in grounding.sentences] == [3, 3]


def test_a_number_no_passage_holds_is_flagged_with_the_number() -> None:
    grounding = check_grounding("整机保修期为 36 个月 [1]。", PASSAGES)

    assert not grounding.grounded
    assert grounding.unsupported[0].missing == ("36",)


def test_naming_a_passages_source_is_not_a_claim_but_a_number_beside_it_still_is() -> None:
    # "v2" of the file name is not a fact to find in the passage text
    named = check_grounding("据资料 [1]（warranty-policy-v2.md）：整机保修期为 24 个月。", PASSAGES)
    assert named.grounded, [s.to_dict() for s in named.sentences]
    titled = Citation(index=1, source="d/w.md", title="保修政策", text="投影仪保修 12 个月。")
    assert check_grounding("据资料：[1] 保修政策 (d/w.md)\n投影仪保修 12 个月。", [titled]).grounded
    wrong = check_grounding("据 warranty-policy-v2.md [1]，整机保修期为 36 个月。", PASSAGES)
    assert wrong.unsupported[0].missing == ("36",)


def test_a_number_only_in_another_passage_than_the_one_cited_is_flagged() -> None:
    grounding = check_grounding("整机保修期为 12 个月 [1]。", PASSAGES)

    assert grounding.unsupported[0].missing == ("12",)


def test_a_wrong_price_and_a_wrong_code_are_flagged() -> None:
    price = check_grounding("The Lumen X1 Pro costs 4,599 CNY [4].", PASSAGES)
    code = check_grounding("The Lumen X1 Pro is SKU2024-099 [4].", PASSAGES)

    assert price.unsupported[0].missing == ("4599",)
    assert "sku2024099" in code.unsupported[0].missing


def test_a_date_is_checked_by_its_numbers_and_meets_the_chinese_date() -> None:
    assert check_grounding("Since 2025-01-01 the warranty is 24 months [1].", PASSAGES).grounded


def test_a_number_the_question_states_is_not_missing() -> None:
    answer = "For 3 units the Lumen X1 Pro costs 5,999 CNY each [4]."

    assert check_grounding(answer, PASSAGES, question="Price of 3 Lumen X1 Pro?").grounded
    assert not check_grounding(answer, PASSAGES).grounded


def test_a_sentence_about_something_else_is_unsupported_without_any_passage() -> None:
    grounding = check_grounding("Paris will be sunny with light winds this afternoon.", PASSAGES)

    assert not grounding.grounded
    assert grounding.sentences[0].passage is None


def test_a_calculator_result_with_no_passage_behind_it_is_flagged() -> None:
    grounding = check_grounding("3507.3", PASSAGES)

    assert grounding.unsupported[0].missing == ("3507.3",)


def test_sentences_without_content_are_not_checked() -> None:
    grounding = check_grounding("整机保修期为 24 个月 [1]。Hope this helps!", PASSAGES)

    assert len(grounding.sentences) == 1 and grounding.grounded


def test_the_extractive_answer_quotes_the_best_passage_and_the_one_that_disagrees() -> None:
    extract = extractive_answer("投影仪的保修期是多久？", PASSAGES)

    assert extract is not None
    assert extract.text.startswith(LEAD_ZH + "\n")
    assert "24 个月" in extract.text and "[1]" in extract.text
    assert "12 个月" in extract.text and "[2]" in extract.text  # the older version too
    assert check_grounding(extract.text, PASSAGES).grounded


def test_the_extractive_answer_needs_the_identifier_the_question_names() -> None:
    extract = extractive_answer("What does error E-203 mean?", PASSAGES)

    assert extract is not None and extract.passages == (3,)
    assert extractive_answer("What does error E-999 mean?", PASSAGES) is None


def test_nothing_is_extracted_for_a_question_the_passages_are_not_about() -> None:
    assert extractive_answer("What is the weather in Paris today?", PASSAGES) is None


RETURNS = (
    Citation(
        index=1,
        source="returns-policy.md",
        title="退货与换货政策",
        text="未拆封、包装完好的商品，自签收之日起 30 天内可申请无理由退货，全额退款。",
    ),
    Citation(
        index=2,
        source="returns-policy.md",
        title="退货与换货政策",
        text="已拆封的商品，自签收之日起 7 天内可申请退货。签收 7 天后出现质量问题，可申请换货。",
    ),
    Citation(
        index=3,
        source="returns-policy.md",
        title="退货与换货政策",
        text="本政策适用于明光官方商城售出的投影仪及配件。申请退货时请提供订单号。",
    ),
)


def test_the_extractive_answer_reads_kaifeng_as_the_policy_s_opened_goods() -> None:
    # 开封 is in no passage (jieba reads it as the city): its synonym 拆封 is; and 投影仪 is
    # one idea with 投影, not two that outweigh the rest of the question
    extract = extractive_answer("开封后的投影仪可以退货吗？", RETURNS)

    assert extract is not None and "7 天" in extract.text and 2 in extract.passages


def test_with_the_tool_that_could_say_it_failed_a_name_alone_supports_nothing() -> None:
    """ "The Lumen X1 Pro is in stock." over the spec table: the names (the product, its
    code) are the passage's; "in stock" is what the failed stock tool was for."""

    def supported(question: str, answer: str, *, tool_failed: bool) -> bool:
        checked = check_grounding(answer, PASSAGES, question=question, tool_failed=tool_failed)
        return checked.grounded

    stock = "Is the Lumen X1 Pro in stock?"
    for question, answer in [
        (stock, "The Lumen X1 Pro is in stock."),
        (stock, "Yes, the Lumen X1 Pro is available now."),
        ("Is SKU2024-012 in stock?", "The Lumen X1 Pro is in stock."),  # named otherwise
        ("Lumen X1 Pro 还有货吗？", "Lumen X1 Pro 目前有库存。"),
    ]:
        assert supported(question, answer, tool_failed=False)  # (the names carry it)
        assert not supported(question, answer, tool_failed=True)
    # what the passage says beyond the question, or a number of its own, still stands
    assert supported(stock, "The Lumen X1 Pro uses a laser [4].", tool_failed=True)
    assert supported(stock, "The Lumen X1 Pro costs 5,999 CNY [4].", tool_failed=True)
    code = "What does E-203 mean?"
    assert supported(code, "E-203 means the lamp is overheating [3].", tool_failed=True)
    # a question the passage holds every word of, restated: the passage says it
    assert supported(
        "Is the Lumen X1 Pro a laser?", "The Lumen X1 Pro is a laser.", tool_failed=True
    )


LAMP_EN = Citation(
    index=1,
    source="manual-en.md",
    text="E-203 Lamp overheating. The lamp temperature is above the safe limit. Wait 30 "
    "minutes until the lamp has cooled down, then clean the air filter.",
)


def test_an_answer_in_the_other_language_rests_on_the_facts_it_states() -> None:
    """A Chinese answer over an English passage shares none of its words: its numbers are
    what can be checked ("VPN 老是断线怎么办？" over the English IT FAQ, found by its VPN).
    Before, it was unsupported, and the answer became "the documents do not cover this"."""
    question = "VPN 老是断线怎么办？"
    for answer in (
        "请把 GlobalProtect 客户端升级到 6.2 或更高版本 [1]。",
        "请更新客户端到 6.2 版本以上。",
    ):
        assert check_grounding(answer, [VPN_FAQ], question=question).grounded, answer
    # a number it does not hold is missing, as in the passage's language
    wrong = check_grounding("请把客户端升级到 7.1 版本 [1]。", [VPN_FAQ], question=question)
    assert wrong.unsupported[0].missing == ("7.1",)
    # no number of its own: nothing to check it by, and it is not borne out
    assert not check_grounding("请重新安装客户端 [1]。", [VPN_FAQ], question=question).grounded
    # beside the question's code, a number of its own the passage holds
    lamp = check_grounding("E-203 出现后请等待 30 分钟 [1]。", [LAMP_EN], question="E-203 怎么办？")
    assert lamp.grounded
