"""``run_ablation``: every stage over one ingested sample corpus, skipped stages with reasons."""

from __future__ import annotations

import dataclasses
import json
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shelfhand.app import App
from shelfhand.core.messages import Citation
from shelfhand.core.settings import Settings
from shelfhand.evals.ablation import (
    STAGES,
    SWITCHES,
    SearchRun,
    Stage,
    StageSkipped,
    Switch,
    run_stages,
)
from shelfhand.evals.retrieval import cases_to_qrels, load_cases
from shelfhand.evals.runner import CHUNKS_PER_QUERY, _case_key, run_ablation
from shelfhand.knowledge.base import KnowledgeBase, sample_corpus

SAMPLE_CASES = sample_corpus().parent / "projector-cases.jsonl"


def _app(workspace: Path, env: dict[str, str]) -> App:
    return App(settings=Settings.load(workspace, env=env))


def _ingested(workspace: Path, env: dict[str, str]) -> App:
    app = _app(workspace, env)
    kb = app.open_knowledge(writer="ingest")
    try:
        kb.ingest([sample_corpus()])
    finally:
        kb.close()
    return app


@pytest.fixture(scope="module")
def keyword_app(tmp_path_factory: pytest.TempPathFactory) -> App:
    return _ingested(tmp_path_factory.mktemp("kw"), {"SHELFHAND_RETRIEVAL_MODE": "keyword"})


@pytest.fixture(scope="module")
def hybrid_app(tmp_path_factory: pytest.TempPathFactory) -> App:
    return _ingested(tmp_path_factory.mktemp("hy"), {"SHELFHAND_EMBEDDER": "hashing"})


def _rows(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["stage"]: row for row in report["stages"]}


def test_a_keyword_only_workspace_runs_keyword_and_says_why_vector_stages_are_skipped(
    keyword_app: App,
) -> None:
    report = run_ablation(keyword_app, cases_path=SAMPLE_CASES)
    rows = _rows(report)
    assert [row["stage"] for row in report["stages"]] == [s.name for s in STAGES]
    assert rows["keyword"]["status"] == "ok"
    for name in ("vector", "hybrid"):
        assert rows[name]["status"] == "skipped"
        assert "no embedder in this workspace" in rows[name]["reason"]
    for row in report["stages"]:
        assert row["status"] in ("ok", "skipped")
        if row["status"] == "skipped":
            assert row["reason"]
        elif row["stage"].startswith("+"):
            assert row["mode"] == "keyword"  # the `+` stages build on what the workspace has
    assert report["n_cases"] == len(load_cases(SAMPLE_CASES))
    json.dumps(report)  # the --json output


def test_each_stage_reports_quality_latency_and_per_kind_figures(keyword_app: App) -> None:
    row = _rows(run_ablation(keyword_app, cases_path=SAMPLE_CASES))["keyword"]
    for key in ("ndcg@10", "recall@5", "recall@10", "mrr@10", "p50_ms", "p95_ms"):
        assert isinstance(row[key], float)
    assert row["recall@5"] >= 0.8
    assert {"keyword_ms", "fuse_ms"} <= set(row["timings"])
    assert set(row["kinds"]) == {"identifier", "question", "not_found"}
    assert row["kinds"]["identifier"]["n"] == 8
    assert 0 <= row["kinds"]["not_found"]["not_found"] <= 1
    # E-203 is found whole by keywords: its case is not among the misses
    assert "id-e203" not in row["kinds"]["identifier"]["missed"]
    assert set(row["langs"]) == {"en", "zh"}


def test_a_switch_missing_from_the_build_skips_its_stage_with_the_reason(
    keyword_app: App,
) -> None:
    report = run_ablation(keyword_app, cases_path=SAMPLE_CASES)
    rows = _rows(report)
    kb = keyword_app.open_knowledge(embed=False)
    try:
        from shelfhand.evals.ablation import _holder

        for switch in SWITCHES:
            row = rows[f"+ {switch.name}"]
            if _holder(kb, switch.attr) is None:
                assert row == {
                    "stage": f"+ {switch.name}",
                    "status": "skipped",
                    "reason": f"not available in this build ({switch.where})",
                }
            else:  # landed: it runs, or says what the workspace did not configure
                assert row["status"] == "ok" or "not set" in row["reason"] or "off" in row["reason"]
    finally:
        kb.close()


@pytest.fixture
def kb(keyword_app: App) -> Iterator[KnowledgeBase]:
    kb = keyword_app.open_knowledge(embed=False)
    yield kb
    kb.close()


def _run(limit: int | None = None) -> SearchRun:
    cases = load_cases(SAMPLE_CASES)[:limit]
    queries, qrels = cases_to_qrels(cases)
    return SearchRun(
        queries=queries, qrels=qrels, cases=cases, key=_case_key(cases), k=CHUNKS_PER_QUERY
    )


def test_switches_are_set_per_stage_and_restored_afterwards(kb: KnowledgeBase) -> None:
    seen: list[int] = []

    def record(configured: object) -> object:
        return configured

    # candidates_factor is a real search option: 1 when "off", configured (3) when on
    switch = Switch(name="wide", attr="candidates_factor", off=1, on=record, where="x")
    original_search = kb.search_result

    def spy(query: str, **kwargs: Any) -> Any:
        seen.append(kwargs["options"].candidates_factor)
        return original_search(query, **kwargs)

    kb.search_result = spy  # type: ignore[method-assign]
    stages = [
        Stage(name="keyword", mode="keyword"),
        Stage(name="+ wide", mode=None, switches=("wide",)),
    ]
    rows = run_stages(kb, _run(limit=3), stages, switches=[switch])
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert rows[0]["on"] == {} and rows[1]["on"] == {"wide": 3}
    assert kb.search_options.candidates_factor == 3  # put back
    assert seen == [1, 1, 1, 3, 3, 3]  # off in the keyword stage, on in the `+ wide` stage


def test_a_switch_the_workspace_did_not_configure_skips_only_its_own_stage(
    kb: KnowledgeBase,
) -> None:
    def not_configured(_configured: object) -> object:
        raise StageSkipped("rerank is off (settings key rerank)")

    switches = [
        Switch(name="rerank", attr="rerank", off=False, on=not_configured, where="x"),
        Switch(name="missing", attr="no_such_switch", off=False, on=lambda c: True, where="Y.z"),
        Switch(name="wide", attr="candidates_factor", off=1, on=lambda c: 5, where="x"),
    ]
    stages = [
        Stage(name="+ rerank", mode=None, switches=("rerank",)),
        Stage(name="+ missing", mode=None, switches=("rerank", "missing")),
        Stage(name="+ wide", mode=None, switches=("rerank", "missing", "wide")),
    ]
    rows = run_stages(kb, _run(limit=2), stages, switches=switches)
    assert rows[0] == {
        "stage": "+ rerank",
        "status": "skipped",
        "reason": "rerank is off (settings key rerank)",
    }
    assert rows[1]["reason"] == "not available in this build (Y.z)"
    assert rows[2]["status"] == "ok" and rows[2]["on"] == {"wide": 5}
    assert kb.search_options.candidates_factor == 3


def _fake_module(monkeypatch: pytest.MonkeyPatch, name: str, **attrs: Any) -> None:
    module = types.ModuleType(name)
    for key, value in attrs.items():
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, name, module)


@pytest.fixture
def budgets(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A real (simple) compressor: keeps the lines that share a word with the query."""
    seen: list[int] = []

    def compress_citation(citation: Citation, query: str, *, tokens: int) -> Citation:
        seen.append(tokens)
        words = {w.casefold() for w in query.split()}
        kept = [s for s in citation.text.split("\n") if words & {w.casefold() for w in s.split()}]
        return dataclasses.replace(citation, text="\n".join(kept))

    _fake_module(
        monkeypatch,
        "fake_compress",
        compress_citation=compress_citation,
        DEFAULT_COMPRESS_TOKENS=99,
    )
    _fake_module(monkeypatch, "fake_evidence")  # no prepare_evidence: passage by passage
    monkeypatch.setattr("shelfhand.evals.ablation.COMPRESS_MODULE", "fake_compress")
    monkeypatch.setattr("shelfhand.evals.ablation.EVIDENCE_MODULE", "fake_evidence")
    return seen


def test_compression_reports_tokens_and_what_survived(
    kb: KnowledgeBase, budgets: list[int]
) -> None:
    stages = [Stage(name="+ compression", mode=None, compress=True)]
    (row,) = run_stages(kb, _run(), stages, switches=[])
    assert row["status"] == "ok", row
    c = row["compression"]
    assert 0 < c["tokens_after"] < c["tokens_before"]
    assert c["contains_total"] > 0 and 0 <= c["contains_kept"] <= c["contains_total"]
    assert c["relevant_total"] > 0 and 0 <= c["relevant_kept"] <= c["relevant_total"]
    assert row["on"] == {"compression": True}
    assert c["tokens_per_passage"] == 99 and set(budgets) == {99}  # the module's default
    (row,) = run_stages(kb, _run(limit=2), stages, switches=[], compress_tokens=40)
    assert row["compression"]["tokens_per_passage"] == 40 and budgets[-1] == 40


def test_compression_goes_through_prepare_evidence_when_the_build_has_it(
    kb: KnowledgeBase, budgets: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, int]] = []

    def prepare_evidence(
        citations: list[Citation], query: str, *, compress_tokens: int | None = None
    ) -> list[Citation]:
        calls.append((query, compress_tokens or 0))
        return [dataclasses.replace(c, text=c.text[:20]) for c in citations]

    _fake_module(monkeypatch, "fake_evidence", prepare_evidence=prepare_evidence)
    stages = [Stage(name="+ compression", mode=None, compress=True)]
    (row,) = run_stages(kb, _run(limit=3), stages, switches=[], compress_tokens=50)
    assert row["status"] == "ok"
    assert len(calls) == 3 and {t for _, t in calls} == {50}
    assert budgets == []  # compress_citation was not called directly


def test_without_a_compressor_the_compression_stage_is_skipped(kb: KnowledgeBase) -> None:
    stages = [Stage(name="+ compression", mode=None, compress=True)]
    try:
        import shelfhand.knowledge.evidence.compress  # noqa: F401
    except ImportError:
        (row,) = run_stages(kb, _run(limit=1), stages, switches=[])
        assert row["status"] == "skipped"
        assert (
            row["reason"] == "not available in this build (shelfhand.knowledge.evidence.compress)"
        )
    else:
        pytest.skip("this build has a compressor")


def test_a_hybrid_workspace_runs_vector_and_hybrid_with_their_timings(hybrid_app: App) -> None:
    rows = _rows(run_ablation(hybrid_app, cases_path=SAMPLE_CASES, limit=6))
    for name in ("keyword", "vector", "hybrid"):
        assert rows[name]["status"] == "ok", rows[name]
        assert rows[name]["mode"] == name
    assert {"embed_ms", "vector_ms"} <= set(rows["hybrid"]["timings"])
    assert rows["hybrid"]["timings"]["vector_ms"]["p50_ms"] > 0
    assert rows["keyword"]["timings"]["vector_ms"]["p50_ms"] == 0


def _write_beir(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    corpus = [
        {"_id": "d1", "title": "Returns", "text": "Opened items can be returned within 7 days."},
        {"_id": "d2", "title": "退货政策", "text": "拆封后 7 天内可退，退款 3 个工作日到账。"},
        {"_id": "d3", "title": "Lamp", "text": "Error E-203 means the lamp is overheating."},
    ]
    queries = [
        {"_id": "q1", "text": "Can I return an opened item?"},
        {"_id": "q2", "text": "退款多久到账"},
        {"_id": "q3", "text": "E-203"},
    ]
    for name, records in (("corpus", corpus), ("queries", queries)):
        (root / f"{name}.jsonl").write_text(
            "\n".join(json.dumps(r, ensure_ascii=False) for r in records) + "\n", encoding="utf-8"
        )
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq3\td3\t1\n", encoding="utf-8"
    )
    return root


def test_an_ablation_over_a_beir_folder_ingests_once_and_scores_every_stage(
    tmp_path: Path,
) -> None:
    beir = _write_beir(tmp_path / "tiny")
    app = _app(tmp_path / "ws", {"SHELFHAND_RETRIEVAL_MODE": "keyword"})
    report = run_ablation(app, beir=beir)
    assert (report["dataset"], report["n_queries"], report["n_docs"]) == ("tiny", 3, 3)
    row = _rows(report)["keyword"]
    assert row["mrr@10"] == 1.0 and row["recall@5"] == 1.0
    assert "kinds" not in row  # BEIR queries have no kinds
    again = run_ablation(app, beir=beir)  # the second run ingests nothing new
    assert _rows(again)["keyword"]["ndcg@10"] == row["ndcg@10"]


@dataclasses.dataclass(frozen=True)
class _RerankTimings:
    keyword_ms: float
    rerank_ms: float
    total_ms: float
    rerank_reason: str | None


def test_new_timing_fields_and_rerank_fallbacks_are_reported(kb: KnowledgeBase) -> None:
    original = kb.search_result
    reasons = iter([None, "rerank endpoint timed out after 5s", None])

    def with_rerank(query: str, **kwargs: Any) -> Any:
        found = original(query, **kwargs)
        timings = found.timings
        return dataclasses.replace(
            found,
            timings=_RerankTimings(
                keyword_ms=timings.keyword_ms,
                rerank_ms=7.0,
                total_ms=timings.total_ms + 7.0,
                rerank_reason=next(reasons),
            ),
        )

    kb.search_result = with_rerank  # type: ignore[method-assign]
    (row,) = run_stages(kb, _run(limit=3), [Stage(name="keyword", mode="keyword")], switches=[])
    assert row["timings"]["rerank_ms"] == {"p50_ms": 7.0, "p95_ms": 7.0}
    assert row["degraded"] == {"rerank kept the fused order: rerank endpoint timed out after 5s": 1}
