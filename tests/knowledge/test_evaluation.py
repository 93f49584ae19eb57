"""Evaluation loaders and metrics: hand-computed values and a cross-check with the bench."""

from __future__ import annotations

import importlib.util
import json
import math
import random
from pathlib import Path
from types import ModuleType

import pytest

from shelfhand.core.errors import KnowledgeError
from shelfhand.evals.retrieval import (
    EvalCase,
    cases_to_qrels,
    evaluate,
    latency_summary,
    load_beir,
    load_cases,
    mrr_at_k,
    ndcg_at_k,
    recall_at_k,
)

REFERENCE = Path("/work/shared/bench/retrieval/metrics.py")

# qrels: d1 grade 1, d3 grade 2, d5 grade 1; ranking d3 d2 d1 d4 d5.
RELS = {"d1": 1, "d3": 2, "d5": 1}
RANKED = ["d3", "d2", "d1", "d4", "d5"]


def test_ndcg_uses_linear_gain_as_trec_eval_does() -> None:
    # DCG@5 = 2/log2(2) + 1/log2(4) + 1/log2(6); IDCG@5 = 2/log2(2) + 1/log2(3) + 1/log2(4)
    dcg = 2 + 0.5 + 1 / math.log2(6)
    idcg = 2 + 1 / math.log2(3) + 0.5
    assert ndcg_at_k(RANKED, RELS, 5) == pytest.approx(dcg / idcg)
    assert ndcg_at_k(RANKED, RELS, 5) == pytest.approx(0.922044, abs=1e-6)
    assert ndcg_at_k(RANKED, RELS, 2) == pytest.approx(2 / (2 + 1 / math.log2(3)))
    assert ndcg_at_k(RANKED, RELS, 1) == 1.0


def test_ndcg_is_zero_without_hits_or_without_judgments() -> None:
    assert ndcg_at_k(["x", "y"], RELS, 10) == 0.0
    assert ndcg_at_k(["x"], {"x": 0}, 10) == 0.0
    assert ndcg_at_k([], RELS, 10) == 0.0


def test_recall_counts_relevant_documents_in_the_top_k() -> None:
    assert recall_at_k(RANKED, RELS, 2) == pytest.approx(1 / 3)
    assert recall_at_k(RANKED, RELS, 3) == pytest.approx(2 / 3)
    assert recall_at_k(RANKED, RELS, 5) == 1.0
    assert recall_at_k(RANKED, {"d2": 0}, 5) == 0.0


def test_mrr_is_the_reciprocal_rank_of_the_first_relevant_hit_within_k() -> None:
    assert mrr_at_k(["d2", "d4", "d1"], RELS, 10) == pytest.approx(1 / 3)
    assert mrr_at_k(["d2", "d4", "d1"], RELS, 2) == 0.0
    assert mrr_at_k(["d3"], RELS, 10) == 1.0


def test_a_document_repeated_in_the_ranking_counts_once() -> None:
    # Chunk hits mapped to doc ids repeat documents; the second d3 must not add gain.
    assert ndcg_at_k(["d3", "d3", "d1"], RELS, 3) == pytest.approx(ndcg_at_k(["d3", "d1"], RELS, 3))
    assert recall_at_k(["d2", "d2", "d2", "d1"], RELS, 2) == pytest.approx(1 / 3)


def test_evaluate_averages_over_judged_queries_and_skips_unjudged_ones() -> None:
    run = {"q1": RANKED, "q2": ["a", "b", "c"], "q3": ["z"]}
    qrels = {"q1": RELS, "q2": {"c": 1}, "q3": {"z": 0}, "q4": {"d": 1}}
    result = evaluate(run, qrels, k=5)
    # q1 0.922044, q2 DCG 1/log2(4) = 0.5, q4 has no results: 0; q3 has no relevant doc: skipped.
    assert result["n_queries"] == 3
    assert result["nDCG@5"] == pytest.approx((0.922044 + 0.5 + 0) / 3, abs=1e-6)
    assert result["Recall@5"] == pytest.approx((1 + 1 + 0) / 3)
    assert result["MRR@5"] == pytest.approx((1 + 1 / 3 + 0) / 3)
    assert result["Recall@100"] == pytest.approx(2 / 3)


def test_evaluate_without_judged_queries_returns_zeros() -> None:
    assert evaluate({}, {}) == {
        "nDCG@10": 0.0,
        "Recall@10": 0.0,
        "MRR@10": 0.0,
        "Recall@100": 0.0,
        "n_queries": 0,
    }


def _reference() -> ModuleType:
    if not REFERENCE.is_file():
        pytest.skip("bench metrics reference not present")
    spec = importlib.util.spec_from_file_location("bench_retrieval_metrics", REFERENCE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("seed", range(5))
def test_metrics_match_the_bench_reference_on_random_runs(seed: int) -> None:
    reference = _reference()
    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(60)]
    run: dict[str, list[str]] = {}
    qrels: dict[str, dict[str, int]] = {}
    for q in range(40):
        qid = f"q{q}"
        qrels[qid] = {d: rng.choice([0, 1, 1, 2, 3]) for d in rng.sample(docs, rng.randint(1, 8))}
        if rng.random() < 0.9:
            run[qid] = rng.sample(docs, rng.randint(0, 50))
    for k in (1, 5, 10):
        mine = evaluate(run, qrels, k=k)
        ref = reference.evaluate(run, qrels, k=k)
        for name in (f"nDCG@{k}", f"Recall@{k}", f"MRR@{k}", "Recall@100", "n_queries"):
            assert mine[name] == pytest.approx(ref[name], abs=1e-12), (k, name)
        for qid, rels in qrels.items():
            ranked = run.get(qid, [])
            assert ndcg_at_k(ranked, rels, k) == pytest.approx(
                reference.ndcg_at_k(ranked, rels, k), abs=1e-12
            )


def test_latency_summary_reports_median_and_p95() -> None:
    summary = latency_summary([float(x) for x in range(1, 101)])
    assert summary == {"p50_ms": pytest.approx(50.5), "p95_ms": pytest.approx(95.05)}
    assert latency_summary([]) == {"p50_ms": 0.0, "p95_ms": 0.0}
    assert latency_summary([7.0]) == {"p50_ms": 7.0, "p95_ms": 7.0}


def _write_beir(root: Path) -> None:
    (root / "qrels").mkdir(parents=True)
    corpus = [
        {"_id": "d1", "title": "Returns", "text": "Opened items can be returned within 7 days."},
        {"_id": "d2", "title": "退货政策", "text": "拆封后 7 天内可退。"},
        {"_id": "d3", "text": "No title here."},
    ]
    queries = [
        {"_id": "q1", "text": "Can I return an opened item?"},
        {"_id": "q2", "text": "拆封后还能退吗？"},
        {"_id": "q3", "text": "an unjudged query"},
    ]
    (root / "corpus.jsonl").write_text(
        "\n".join(json.dumps(r, ensure_ascii=False) for r in corpus) + "\n", encoding="utf-8"
    )
    (root / "queries.jsonl").write_text(
        "\n".join(json.dumps(r, ensure_ascii=False) for r in queries) + "\n", encoding="utf-8"
    )
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t2\nq2\td1\t0\n", encoding="utf-8"
    )


def test_load_beir_keeps_only_queries_judged_in_the_split(tmp_path: Path) -> None:
    _write_beir(tmp_path)
    data = load_beir(tmp_path)
    assert set(data.queries) == {"q1", "q2"}
    assert data.queries["q2"] == "拆封后还能退吗？"
    assert data.qrels == {"q1": {"d1": 1}, "q2": {"d2": 2, "d1": 0}}
    assert data.corpus["d2"].title == "退货政策"
    assert data.corpus["d3"].title == ""
    assert len(data.corpus) == 3


def test_load_beir_names_a_missing_split_file(tmp_path: Path) -> None:
    _write_beir(tmp_path)
    with pytest.raises(KnowledgeError, match=r"dev\.tsv"):
        load_beir(tmp_path, split="dev")


def test_load_beir_names_the_line_of_a_bad_score(tmp_path: Path) -> None:
    _write_beir(tmp_path)
    with (tmp_path / "qrels" / "test.tsv").open("a", encoding="utf-8") as handle:
        handle.write("q1\td2\thigh\n")
    with pytest.raises(KnowledgeError, match=r"test\.tsv:5"):
        load_beir(tmp_path)


def test_load_beir_reads_the_shared_scifact_copy() -> None:
    path = Path("/work/shared/data/scifact")
    if not (path / "qrels" / "test.tsv").is_file():
        pytest.skip("SciFact not present")
    data = load_beir(path)
    assert len(data.queries) == 300
    assert len(data.corpus) == 5183
    assert set(data.qrels) == set(data.queries)


def test_load_cases_reads_english_and_chinese_cases(tmp_path: Path) -> None:
    path = tmp_path / "cases.jsonl"
    lines = [
        {"query": "Can I return an opened item?", "relevant": ["returns.md"]},
        {"id": "zh-1", "query": "拆封后还能退吗？", "relevant": ["returns.md", "faq.md#3"]},
    ]
    path.write_text(
        "\n".join(json.dumps(r, ensure_ascii=False) for r in lines) + "\n\n", encoding="utf-8"
    )
    cases = load_cases(path)
    assert cases == [
        EvalCase(query="Can I return an opened item?", relevant=("returns.md",), case_id="line-1"),
        EvalCase(query="拆封后还能退吗？", relevant=("returns.md", "faq.md#3"), case_id="zh-1"),
    ]
    queries, qrels = cases_to_qrels(cases)
    assert queries["zh-1"] == "拆封后还能退吗？"
    assert qrels["zh-1"] == {"returns.md": 1, "faq.md#3": 1}


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"query": "q"}', "'relevant' must be"),
        ('{"query": "", "relevant": ["a"]}', "'query' must be"),
        ('{"query": "q", "relevant": "a.md"}', "'relevant' must be"),
        ('["q", ["a"]]', "expected a JSON object"),
    ],
)
def test_load_cases_reports_the_line_number_of_a_bad_line(
    tmp_path: Path, bad_line: str, message: str
) -> None:
    path = tmp_path / "cases.jsonl"
    path.write_text('{"query": "ok", "relevant": ["a.md"]}\n' + bad_line + "\n", encoding="utf-8")
    with pytest.raises(KnowledgeError, match=rf"cases\.jsonl:2: {message}"):
        load_cases(path)
