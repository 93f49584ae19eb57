"""Passages that disagree are flagged, never silently resolved; passages that agree are not."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from importlib.resources import files

import pytest

from shelfhand.core.messages import Citation
from shelfhand.knowledge.base import KnowledgeBase, sample_corpus
from shelfhand.knowledge.evidence.citations import format_passages, prepare_evidence, to_citations
from shelfhand.knowledge.evidence.conflicts import (
    annotate_conflicts,
    doc_version,
    find_conflicts,
    quantities,
)

V1_TITLE = "明光投影仪保修政策（第 1 版）"
V2_TITLE = "明光投影仪保修政策（第 2 版）"


def cite(index: int, doc: str, text: str, *, title: str = "", section: str = "") -> Citation:
    return Citation(
        index=index,
        source=doc,
        title=title,
        section=section,
        doc_id=doc,
        chunk_id=f"{doc}::{index}",
        text=text,
    )


def warranty_v1() -> Citation:
    return cite(
        2,
        "warranty-policy-v1.md",
        "整机保修期为自购买之日（以发票或订单日期为准）起 12 个月。\n\n"
        "光源（灯泡或激光模组）保修 6 个月或累计使用 1000 小时，以先到者为准。",
        title=V1_TITLE,
        section=f"{V1_TITLE} > 保修期限",
    )


def warranty_v2() -> Citation:
    return cite(
        4,
        "warranty-policy-v2.md",
        "2025 年 1 月 1 日及之后购买的投影仪，整机保修期为自购买之日（以发票或订单日期为准）起 "
        "24 个月。2025 年 1 月 1 日之前购买的产品仍按购买时的政策执行。\n\n"
        "光源（灯泡或激光模组）保修 6 个月或累计使用 1000 小时，以先到者为准。",
        title=V2_TITLE,
        section=f"{V2_TITLE} > 保修期限",
    )


def v2_intro() -> Citation:
    return cite(
        5,
        "warranty-policy-v2.md",
        "本政策适用于 Lumen 系列投影仪。本版本自 2025 年 1 月 1 日起生效，"
        "取代第 1 版中关于整机保修期限的规定。",
        title=V2_TITLE,
        section=V2_TITLE,
    )


def test_two_versions_of_the_warranty_disagree_and_the_newer_one_is_named() -> None:
    conflicts = find_conflicts([warranty_v1(), warranty_v2(), v2_intro()])
    assert len(conflicts) == 1
    c = conflicts[0]
    assert (c.a, c.b, c.values) == (2, 4, (("12 个月", "24 个月"),))
    assert c.newer == 4
    # the effective date comes from another passage of the same document
    assert c.note == (
        "[2] and [4] disagree: 12 个月 vs 24 个月; [4] is newer (version 2, effective 2025-01-01)."
    )


def test_without_an_effective_date_the_version_in_the_title_decides() -> None:
    (c,) = find_conflicts([warranty_v2(), warranty_v1()])
    assert c.values == (("12 个月", "24 个月"),)
    assert c.newer == 4 and c.newer_info == "version 2"


def test_english_durations_prices_and_effective_dates() -> None:
    old = cite(
        1,
        "warranty-2022.md",
        "Effective: 2022-01-01. The projector is covered for 2 years from the date of purchase.",
        title="Warranty",
        section="Warranty > Coverage",
    )
    new = cite(
        3,
        "warranty-2024.md",
        "This policy is effective from March 1, 2024. "
        "The projector is covered for 3 years from the date of purchase.",
        title="Warranty terms",
        section="Warranty terms > Coverage",
    )
    (c,) = find_conflicts([old, new])
    assert c.values == (("2 years", "3 years"),)
    assert c.newer == 3 and c.newer_info == "effective 2024-03-01"

    a = cite(1, "price-list.md", "A replacement lamp (part LMP-X1) costs 499 CNY.")
    b = cite(2, "dealer-sheet.md", "A replacement lamp (part LMP-X1) costs 599 CNY.")
    (p,) = find_conflicts([a, b])
    assert p.values == (("499 CNY", "599 CNY"),) and p.newer is None
    assert p.note == "[1] and [2] disagree: 499 CNY vs 599 CNY."


def test_passages_that_agree_are_not_flagged() -> None:
    same = cite(
        6,
        "warranty-copy.md",
        warranty_v1().text,
        title="保修政策摘要",
        section="保修政策摘要 > 保修期限",
    )
    assert find_conflicts([warranty_v1(), same]) == []
    # the same duration written differently is agreement, not conflict
    a = cite(1, "a.md", "The warranty period is 1 year from purchase.", section="Warranty")
    b = cite(2, "b.md", "The warranty period is 12 months from purchase.", section="Warranty")
    assert find_conflicts([a, b]) == []


def test_the_same_kind_of_number_in_different_statements_is_not_a_conflict() -> None:
    overheating = cite(
        1,
        "manual.pdf",
        "灯泡过热（E-203）：请等待 30 分钟让灯泡冷却，并在投影仪四周留出至少 30 厘米的空间。",
    )
    fan = cite(2, "faq.html", "风扇故障（E-105）：5 分钟后重新开机。")
    filters = cite(3, "faq2.html", "Clean the air filter every 3 months.")
    lamp = cite(4, "policy.md", "光源保修 6 个月。配件保修 3 个月。")
    assert find_conflicts([overheating, fan, filters, lamp]) == []


def test_different_identifiers_mean_different_subjects() -> None:
    x1 = cite(1, "specs.md", "The Lumen X1 has 3,000 ANSI lumens.", section="Brightness")
    x2 = cite(2, "brochure.md", "The Lumen X2 has 4,200 ANSI lumens.", section="Brightness")
    assert find_conflicts([x1, x2]) == []
    pro = cite(4, "brochure.md", "The Lumen X1 Pro has 3,600 ANSI lumens.", section="Brightness")
    assert find_conflicts([x1, pro]) == []
    same_model = cite(3, "brochure.md", "The Lumen X1 has 3,600 ANSI lumens.", section="Brightness")
    (c,) = find_conflicts([x1, same_model])
    assert c.values == (("3,000 ANSI lumens", "3,600 ANSI lumens"),)


def test_differences_inside_one_document_are_cases_not_contradictions() -> None:
    unopened = cite(1, "returns.md", "未拆封的商品，自签收之日起 30 天内可申请退货。")
    opened = cite(2, "returns.md", "已拆封的商品，自签收之日起 7 天内可申请退货。")
    assert find_conflicts([unopened, opened]) == []
    # nor between the records of one file (a CSV row per model)
    row = Citation(index=1, source="prices.csv", doc_id="prices.csv#1", text="Lumen: 3,999 CNY.")
    other = replace(row, index=2, doc_id="prices.csv#2", text="Lumen: 5,999 CNY.")
    assert find_conflicts([row, other]) == []
    # the same two statements in two files are a conflict
    assert len(find_conflicts([row, replace(other, source="dealer.csv")])) == 1


def test_the_effective_dates_of_two_editions_are_not_themselves_a_conflict() -> None:
    v1_intro = cite(
        1,
        "warranty-policy-v1.md",
        "本政策适用于 Lumen 系列投影仪。本版本自 2023 年 3 月 1 日起生效。",
        title=V1_TITLE,
        section=V1_TITLE,
    )
    assert find_conflicts([v1_intro, v2_intro()]) == []


def test_flags_reach_the_structured_citations_and_the_text_once() -> None:
    annotated = annotate_conflicts([warranty_v1(), v2_intro(), warranty_v2()])
    first, intro, second = annotated
    assert first.conflicts_with == (4,) and second.conflicts_with == (2,)
    assert intro.conflicts_with == () and intro.conflict_note == ""
    assert first.conflict_note == second.conflict_note
    text = format_passages(annotated)
    note = (
        "Note: [2] and [4] disagree: 12 个月 vs 24 个月; [4] is newer "
        "(version 2, effective 2025-01-01)."
    )
    assert text.endswith(note) and text.count("Note:") == 1
    restored = Citation.from_dict(json.loads(json.dumps(first.to_dict(), ensure_ascii=False)))
    assert restored == first
    # citations stored before these fields existed still load
    old = {k: v for k, v in first.to_dict().items() if k not in ("conflicts_with", "conflict_note")}
    assert Citation.from_dict(old).conflicts_with == ()


def test_a_conflict_with_a_passage_of_an_earlier_retrieval_is_flagged_too() -> None:
    (current,) = prepare_evidence([warranty_v2()], "整机保修期", earlier=[warranty_v1()])
    assert current.conflicts_with == (2,)
    assert current.conflict_note.startswith("[2] 与 [4] 不一致：12 个月 vs 24 个月；[4] 较新")
    # the same passages for a question in English: the note in English
    (current,) = prepare_evidence([warranty_v2()], "warranty period", earlier=[warranty_v1()])
    assert current.conflict_note.startswith(
        "[2] and [4] disagree: 12 个月 vs 24 个月; [4] is newer"
    )


def test_quantities_are_numbers_with_units_not_codes_or_phone_numbers() -> None:
    found = quantities(
        "E-203 出现时拨打 400-800-1234，等待 30 分钟；保修两年，价格 ¥3,999，10% 翻新费"
    )
    assert [(q.text, q.kind, q.value) for q in found] == [
        ("30 分钟", "minute", 30.0),
        ("两年", "month", 24.0),
        ("¥3,999", "money:cny", 3999.0),
        ("10%", "percent", 10.0),
    ]


def test_the_version_comes_from_the_title_or_else_the_file_name() -> None:
    assert doc_version(warranty_v1()).version == (1,)
    assert doc_version(warranty_v1()).base_title == "明光投影仪保修政策"
    untitled = cite(1, "docs/warranty-policy-v3.md", "保修 36 个月。")
    assert doc_version(untitled).version == (3,)


# --- the whole sample corpus ----------------------------------------------------------------


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KnowledgeBase]:
    kb = KnowledgeBase(tmp_path_factory.mktemp("conflicts") / "ws", None)
    kb.ingest([sample_corpus()])
    yield kb
    kb.close()


def _sample_queries() -> list[str]:
    queries = ["整机保修期", "保修", "warranty", "退货", "E-203 30 分钟", "价格 price", "lumens"]
    for name in ("projector-cases.jsonl", "projector-eval.jsonl"):
        text = (files("shelfhand") / "samples" / name).read_text(encoding="utf-8")
        queries += [json.loads(line)["query"] for line in text.splitlines() if line.strip()]
    return queries


def test_over_the_sample_corpus_only_the_two_warranty_versions_are_flagged(
    samples: KnowledgeBase,
) -> None:
    queries = _sample_queries()
    assert len(queries) > 30
    flagged: list[str] = []
    for query in queries:
        citations = to_citations(samples.search(query, k=8, mode="keyword"))
        by_index = {c.index: c for c in citations}
        for c in find_conflicts(citations):
            pair = {by_index[c.a].chunk_id, by_index[c.b].chunk_id}
            assert pair == {
                "projector/warranty-policy-v1.md::1",
                "projector/warranty-policy-v2.md::1",
            }, (query, c.note)
            assert set(c.values[0]) == {"12 个月", "24 个月"} and len(c.values) == 1
            assert by_index[c.newer or 0].source == "projector/warranty-policy-v2.md"
            flagged.append(query)
    assert "整机保修期" in flagged


def test_the_sample_warranty_search_shows_both_versions_with_the_flag(
    samples: KnowledgeBase,
) -> None:
    citations = prepare_evidence(
        to_citations(samples.search("整机保修期", k=5, mode="keyword")), "整机保修期"
    )
    sources = [c.source for c in citations]
    assert "projector/warranty-policy-v1.md" in sources
    assert "projector/warranty-policy-v2.md" in sources
    flagged = [c for c in citations if c.conflicts_with]
    assert {c.source for c in flagged} == {
        "projector/warranty-policy-v1.md",
        "projector/warranty-policy-v2.md",
    }
    text = format_passages(citations)
    v1 = next(c.index for c in flagged if c.source.endswith("v1.md"))
    v2 = next(c.index for c in flagged if c.source.endswith("v2.md"))
    assert f"注意：[{v1}] 与 [{v2}] 不一致：12 个月 vs 24 个月；[{v2}] 较新" in text


def test_an_abbreviated_month_with_its_full_stop_is_a_date() -> None:
    """ "Sept. 5, 2025" (the month table is the answer check's, abbreviations included)."""
    (date,) = [q for q in quantities("Effective Sept. 5, 2025.") if q.kind == "date"]
    assert date.value == "2025-09-05"
