"""Runs retrieval evaluations over a workspace (docs/design.md R12): BEIR folders and JSONL case files.

Metrics come from :mod:`shelfhand.evals.retrieval`; this module ingests the corpus
(incrementally, so a kept ``--workspace`` costs nothing the second time), runs every query
through the same :class:`KnowledgeBase` search the tools use, and reports quality and latency.

An *ablation* (:func:`run_ablation`) runs the same queries once per stage of the retrieval
pipeline (see :mod:`shelfhand.evals.ablation`), side by side, on one ingested corpus.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shelfhand.core.errors import ConfigurationError
from shelfhand.evals.ablation import STAGES, SearchRun, Stage, run_stages
from shelfhand.evals.retrieval import (
    BeirDataset,
    CaseResult,
    EvalCase,
    case_report,
    cases_to_qrels,
    load_beir,
    load_cases,
    quality_row,
)
from shelfhand.knowledge.types import Document, SearchHit, Section

if TYPE_CHECKING:
    from shelfhand.app import App
    from shelfhand.knowledge.base import KnowledgeBase

Log = Callable[[str], Any]
Key = Callable[[SearchHit], str]
CHUNKS_PER_QUERY = 30
"""Chunks fetched per query: documents may span several chunks, and metrics need 10 docs."""


def _documents(ds: BeirDataset) -> Iterator[Document]:
    for d in ds.corpus.values():
        body = d.text.strip()
        digest = hashlib.sha256(f"{d.title}\x00{body}".encode()).hexdigest()
        yield Document(
            doc_id=d.doc_id,
            source=d.doc_id,
            title=d.title,
            doc_type="beir",
            sections=(Section(text=body or d.title),),
            content_hash=digest,
        )


def _open(app: App, mode: str) -> KnowledgeBase:
    if mode == "keyword":  # no embedders: a keyword run must not pay for embedding the corpus
        return app.open_knowledge(embed=False)
    kb = app.open_knowledge()
    if kb.keyword_only:
        kb.close()
        raise ConfigurationError(
            f"--mode {mode} needs embeddings, but none are available: {kb.degraded_reason}"
        )
    return kb


def _score(
    kb: KnowledgeBase,
    queries: dict[str, str],
    qrels: dict[str, dict[str, int]],
    *,
    mode: str,
    key: Key,
    cases: Sequence[EvalCase] = (),
) -> dict[str, Any]:
    run: dict[str, list[str]] = {}
    tops: dict[str, str | None] = {}
    latencies: list[float] = []
    for qid, query in queries.items():
        found = kb.search_result(query, k=CHUNKS_PER_QUERY, mode=mode)  # type: ignore[arg-type]
        latencies.append(found.timings.total_ms)
        run[qid] = [key(h) for h in found.hits]
        tops[qid] = found.hits[0].chunk.text if found.hits else None
    result: dict[str, Any] = {"mode": mode, **quality_row(run, qrels, latencies)}
    if cases:
        results = {q: CaseResult(ranked=tuple(run[q]), top_text=tops[q]) for q in run}
        result.update(n_cases=len(cases), **case_report(cases, results))
    return result


def _ingest_beir(kb: KnowledgeBase, ds: BeirDataset, log: Log | None) -> float:
    t0 = time.perf_counter()
    if log:
        log(f"ingesting {len(ds.corpus)} documents into {kb.workspace} …")
    report = kb.ingest_documents(_documents(ds))
    ingest_s = time.perf_counter() - t0
    if log:
        log(
            f"ingest: {len(report.added) + len(report.updated)} indexed, "
            f"{len(report.unchanged)} unchanged, {ingest_s:.1f} s"
        )
    return ingest_s


def _beir_queries(
    ds: BeirDataset, limit: int | None
) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    qids = [q for q in ds.queries if q in ds.qrels][:limit]
    return {q: ds.queries[q] for q in qids}, {q: dict(ds.qrels[q]) for q in qids}


def run_beir_eval(
    app: App, path: Path, *, mode: str = "hybrid", limit: int | None = None, log: Log | None = None
) -> dict[str, Any]:
    """Ingest a BEIR corpus into the app's workspace (incremental) and score its test queries."""
    ds = load_beir(path)
    kb = _open(app, mode)
    try:
        ingest_s = _ingest_beir(kb, ds, log)
        queries, qrels = _beir_queries(ds, limit)
        result = _score(kb, queries, qrels, mode=mode, key=lambda h: h.chunk.doc_id)
        result.update(dataset=path.resolve().name, n_docs=len(ds.corpus), ingest_s=ingest_s)
        return result
    finally:
        kb.close()


def _case_key(cases: Sequence[EvalCase]) -> Key:
    """Hit → the name the case file uses for it: a source, a bare file name or a doc id."""
    wanted = {r for c in cases for r in c.relevant}

    def key(hit: SearchHit) -> str:
        for candidate in (hit.chunk.doc_id, hit.chunk.source, Path(hit.chunk.source).name):
            if candidate in wanted:
                return str(candidate)
        return str(hit.chunk.doc_id)

    return key


def run_case_eval(
    app: App, path: Path, *, mode: str = "hybrid", limit: int | None = None
) -> dict[str, Any]:
    """Score a JSONL case file against what is already ingested in the workspace.

    ``relevant`` may name sources (``projector/returns-policy.md``), bare file names
    (``returns-policy.md``) or document ids. Besides the overall metrics (over the cases that
    have relevant documents), the report has ``kinds`` and ``langs``
    (:func:`~shelfhand.evals.retrieval.case_report`).
    """
    cases = load_cases(path)[:limit]
    queries, qrels = cases_to_qrels(cases)
    kb = _open(app, mode)
    try:
        result = _score(kb, queries, qrels, mode=mode, key=_case_key(cases), cases=cases)
        result.update(dataset=path.name)
        return result
    finally:
        kb.close()


def run_ablation(
    app: App,
    *,
    cases_path: Path | None = None,
    beir: Path | None = None,
    limit: int | None = None,
    log: Log | None = None,
    stages: Sequence[Stage] = STAGES,
) -> dict[str, Any]:
    """Every stage of the retrieval pipeline side by side on one ingested corpus.

    Give either ``cases_path`` (a JSONL case file scored against what the workspace holds) or
    ``beir`` (a BEIR folder, ingested into the app's workspace first, incrementally).

    Returns:
        ``{"dataset", "n_queries", "stages": [...]}``: one row per stage, either measured
        (quality, latency, per-component timings, per-kind figures for case files) or
        ``{"status": "skipped", "reason": ...}``.
    """
    if (cases_path is None) == (beir is None):
        raise ConfigurationError("run_ablation needs either cases_path or beir")
    kb = app.open_knowledge()
    try:
        extra: dict[str, Any] = {}
        if beir is not None:
            ds = load_beir(beir)
            extra.update(n_docs=len(ds.corpus), ingest_s=_ingest_beir(kb, ds, log))
            queries, qrels = _beir_queries(ds, limit)
            cases: list[EvalCase] = []
            key: Key = lambda h: h.chunk.doc_id  # noqa: E731
            dataset = beir.resolve().name
        else:
            assert cases_path is not None
            cases = load_cases(cases_path)[:limit]
            queries, qrels = cases_to_qrels(cases)
            key = _case_key(cases)
            dataset = cases_path.name
        run = SearchRun(queries=queries, qrels=qrels, cases=cases, key=key, k=CHUNKS_PER_QUERY)
        kb.warm_up()  # load the query embedders now: the first stage's p95 is not a model load
        tokens = getattr(app.settings, "compress_tokens", None)  # the evidence settings
        rows = run_stages(kb, run, stages, compress_tokens=tokens, log=log)
        answerable = sum(1 for rels in qrels.values() if any(g > 0 for g in rels.values()))
        return {
            "dataset": dataset,
            "ablation": True,
            "n_queries": answerable,
            **({"n_cases": len(cases)} if cases else {}),
            **extra,
            "stages": rows,
        }
    finally:
        kb.close()
