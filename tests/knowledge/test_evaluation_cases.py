"""Case files with kinds (identifier, question, not_found) and their per-kind report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shelfhand.core.errors import KnowledgeError
from shelfhand.evals.retrieval import (
    CaseResult,
    EvalCase,
    case_lang,
    case_report,
    load_cases,
)
from shelfhand.knowledge.base import sample_corpus

SAMPLE_CASES = sample_corpus().parent / "projector-cases.jsonl"


def _write(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text(
        "\n".join(json.dumps(r, ensure_ascii=False) for r in records) + "\n", encoding="utf-8"
    )
    return path


def test_load_cases_reads_kinds_languages_contains_and_empty_relevant(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "cases.jsonl",
        [
            {"id": "a", "kind": "identifier", "lang": "zh", "query": "SKU2024-011 价格",
             "relevant": ["product-specs.docx"], "contains": "SKU2024-011"},
            {"id": "b", "kind": "not_found", "lang": "en", "query": "Capital of France?",
             "relevant": []},
            {"id": "c", "kind": "not_found", "query": "世界杯冠军是哪个国家？"},
            {"query": "How long is the warranty?", "relevant": ["warranty-policy-v2.md"]},
        ],
    )  # fmt: skip
    cases = load_cases(path)
    assert cases[0] == EvalCase(
        query="SKU2024-011 价格",
        relevant=("product-specs.docx",),
        case_id="a",
        kind="identifier",
        lang="zh",
        contains="SKU2024-011",
    )
    assert (cases[1].kind, cases[1].relevant, cases[1].lang) == ("not_found", (), "en")
    assert (cases[2].kind, cases[2].relevant) == ("not_found", ())
    # the old format: no kind means a question, no id means the line number
    assert (cases[3].kind, cases[3].case_id, cases[3].contains) == ("question", "line-4", None)


def test_the_shipped_case_set_loads_with_every_kind() -> None:
    cases = load_cases(SAMPLE_CASES)
    kinds = {kind: [c for c in cases if c.kind == kind] for kind in ("identifier", "question")}
    not_found = [c for c in cases if c.kind == "not_found"]
    assert len(kinds["identifier"]) >= 5 and len(kinds["question"]) >= 5 and len(not_found) >= 3
    assert all(c.relevant == () for c in not_found)
    assert all(c.contains for c in kinds["identifier"])
    assert {case_lang(c) for c in cases} == {"en", "zh"}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"query": "q", "kind": "lookup", "relevant": ["a"]}', "'kind' must be one of"),
        ('{"query": "q", "kind": "not_found", "relevant": ["a"]}', "must be empty for a not_found"),
        ('{"query": "q", "kind": "question", "relevant": []}', "non-empty list"),
        ('{"query": "q", "relevant": ["a"], "contains": ""}', "'contains' must be"),
        ('{"query": "q", "relevant": ["a"], "lang": 7}', "'lang' must be"),
        ('{"id": "one", "query": "q", "relevant": ["a"]}', "id 'one' repeats line 1"),
    ],
)
def test_load_cases_rejects_a_bad_case_with_its_line(
    tmp_path: Path, line: str, message: str
) -> None:
    path = tmp_path / "cases.jsonl"
    path.write_text('{"id": "one", "query": "ok", "relevant": ["a.md"]}\n' + line + "\n")
    with pytest.raises(KnowledgeError, match=rf"cases\.jsonl:2: .*{message}"):
        load_cases(path)


def test_case_lang_uses_the_file_then_guesses_from_the_query() -> None:
    assert case_lang(EvalCase(query="E-203", relevant=("a",), lang="zh")) == "zh"
    assert case_lang(EvalCase(query="保修期多久", relevant=("a",))) == "zh"
    assert case_lang(EvalCase(query="How long is the warranty?", relevant=("a",))) == "en"


CASES = [
    EvalCase(query="E-203", relevant=("manual.pdf",), case_id="i1", kind="identifier",
             contains="E-203"),
    EvalCase(query="显示 E-105 怎么办", relevant=("manual.pdf",), case_id="i2", kind="identifier",
             contains="E-105"),
    EvalCase(query="E-310", relevant=("manual.pdf",), case_id="i3", kind="identifier",
             contains="E-310"),
    EvalCase(query="How long is the warranty?", relevant=("v1.md", "v2.md"), case_id="q1"),
    EvalCase(query="退款多久到账？", relevant=("returns.md",), case_id="q2"),
    EvalCase(query="Capital of France?", relevant=(), case_id="n1", kind="not_found"),
    EvalCase(query="红烧肉怎么做？", relevant=(), case_id="n2", kind="not_found"),
]  # fmt: skip
RESULTS = {
    # relevant and holds the code: right
    "i1": CaseResult(ranked=("manual.pdf", "faq.html"), top_text="E-203: lamp overheating"),
    # relevant source, but the rank-1 passage is another code's: wrong
    "i2": CaseResult(ranked=("manual.pdf",), top_text="E-550 风扇故障"),
    # holds the code, but the rank-1 source is not the relevant one: wrong
    "i3": CaseResult(ranked=("faq.html", "manual.pdf"), top_text="see e-310 in the manual"),
    "q1": CaseResult(ranked=("x.md", "v2.md", "v1.md"), top_text="..."),
    "q2": CaseResult(ranked=("returns.md",), top_text="退款 3 个工作日内到账"),
    "n1": CaseResult(ranked=(), top_text=None),
    "n2": CaseResult(ranked=("recipes.md",), top_text="红烧肉"),
}


def test_case_report_scores_identifiers_by_their_rank_1_passage() -> None:
    ident = case_report(CASES, RESULTS)["kinds"]["identifier"]
    assert ident["n"] == 3
    assert ident["rank1"] == pytest.approx(1 / 3)
    assert ident["rank1_contains"] == pytest.approx(2 / 3)  # case-insensitive: e-310
    assert ident["rank1_relevant"] == pytest.approx(2 / 3)
    assert ident["missed"] == ["i2", "i3"]


def test_case_report_counts_not_found_cases_answered_with_no_hits() -> None:
    nf = case_report(CASES, RESULTS)["kinds"]["not_found"]
    assert nf == {"n": 2, "not_found": 0.5, "answered": ["n2"]}


def test_case_report_scores_questions_with_the_usual_metrics() -> None:
    q = case_report(CASES, RESULTS)["kinds"]["question"]
    assert q["n"] == 2
    assert q["mrr@10"] == pytest.approx((1 / 2 + 1) / 2)
    assert q["recall@5"] == 1.0
    assert 0 < q["ndcg@10"] < 1
    assert "rank1_contains" not in q  # no question names a contains text


def test_case_report_splits_every_kind_by_language() -> None:
    langs = case_report(CASES, RESULTS)["langs"]
    assert set(langs) == {"en", "zh"}
    en, zh = langs["en"], langs["zh"]
    assert (en["n"], zh["n"]) == (4, 3)
    assert en["identifier_rank1"] == pytest.approx(1 / 2)  # i1 right, i3 wrong
    assert zh["identifier_rank1"] == 0.0  # i2
    assert (en["not_found"], zh["not_found"]) == (1.0, 0.0)
    # MRR scores sources: i2's source is at rank 1 although its passage is another code's
    assert zh["mrr@10"] == 1.0
    assert en["mrr@10"] == pytest.approx((1 + 1 / 2 + 1 / 2) / 3)  # i1, i3, q1


def test_a_group_without_a_kind_reports_none_for_it() -> None:
    only_questions = [c for c in CASES if c.kind == "question"]
    report = case_report(only_questions, RESULTS)
    assert set(report["kinds"]) == {"question"}
    assert report["langs"]["en"]["identifier_rank1"] is None
    assert report["langs"]["en"]["not_found"] is None


def test_case_report_refuses_a_case_without_a_result() -> None:
    with pytest.raises(KnowledgeError, match="n1"):
        case_report(CASES, {k: v for k, v in RESULTS.items() if k != "n1"})
