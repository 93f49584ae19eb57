"""Runs retrieval evaluations over a workspace (DESIGN R12): BEIR folders and JSONL case files.

Metrics come from :mod:`shelfhand.knowledge.evaluation`; this module ingests the corpus
(incrementally, so a kept ``--workspace`` costs nothing the second time), runs every query
through the same :class:`KnowledgeBase` search the tools use, and reports quality and latency.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shelfhand.core.errors import ConfigurationError
from shelfhand.knowledge.evaluation import (
    BeirDataset,
    cases_to_qrels,
    evaluate,
    latency_summary,
    load_beir,
    load_cases,
)
from shelfhand.knowledge.types import Document, Section

if TYPE_CHECKING:
    from shelfhand.app import App
    from shelfhand.knowledge.base import KnowledgeBase

Log = Callable[[str], Any]
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
    key: Callable[[Any], str],
) -> dict[str, Any]:
    run: dict[str, list[str]] = {}
    latencies: list[float] = []
    for qid, query in queries.items():
        hits, timings = kb.search_timed(query, k=CHUNKS_PER_QUERY, mode=mode)  # type: ignore[arg-type]
        latencies.append(timings.total_ms)
        run[qid] = [key(h) for h in hits]
    scores = evaluate(run, qrels, k=10, recall_ks=(5,))
    lat = latency_summary(latencies)
    return {
        "mode": mode,
        "ndcg@10": scores["nDCG@10"],
        "recall@5": scores["Recall@5"],
        "recall@10": scores["Recall@10"],
        "mrr@10": scores["MRR@10"],
        "p50_ms": lat["p50_ms"],
        "p95_ms": lat["p95_ms"],
        "n_queries": scores["n_queries"],
    }


def run_beir_eval(
    app: App, path: Path, *, mode: str = "hybrid", limit: int | None = None, log: Log | None = None
) -> dict[str, Any]:
    """Ingest a BEIR corpus into the app's workspace (incremental) and score its test queries."""
    ds = load_beir(path)
    kb = _open(app, mode)
    try:
        t0 = time.perf_counter()
        if log:
            log(f"ingesting {len(ds.corpus)} documents into {app.settings.workspace} …")
        report = kb.ingest_documents(_documents(ds))
        ingest_s = time.perf_counter() - t0
        if log:
            log(
                f"ingest: {len(report.added) + len(report.updated)} indexed, "
                f"{len(report.unchanged)} unchanged, {ingest_s:.1f} s"
            )
        qids = [q for q in ds.queries if q in ds.qrels][:limit]
        queries = {q: ds.queries[q] for q in qids}
        qrels = {q: dict(ds.qrels[q]) for q in qids}
        result = _score(kb, queries, qrels, mode=mode, key=lambda h: h.chunk.doc_id)
        result.update(dataset=path.resolve().name, n_docs=len(ds.corpus), ingest_s=ingest_s)
        return result
    finally:
        kb.close()


def run_case_eval(
    app: App, path: Path, *, mode: str = "hybrid", limit: int | None = None
) -> dict[str, Any]:
    """Score a JSONL case file against what is already ingested in the workspace.

    ``relevant`` may name sources (``projector/returns-policy.md``), bare file names
    (``returns-policy.md``) or document ids.
    """
    cases = load_cases(path)[:limit]
    queries, qrels = cases_to_qrels(cases)
    wanted = {r for rels in qrels.values() for r in rels}
    kb = _open(app, mode)

    def key(hit: Any) -> str:
        for candidate in (hit.chunk.doc_id, hit.chunk.source, Path(hit.chunk.source).name):
            if candidate in wanted:
                return str(candidate)
        return str(hit.chunk.doc_id)

    try:
        result = _score(kb, queries, qrels, mode=mode, key=key)
        result.update(dataset=path.name)
        return result
    finally:
        kb.close()
