"""Retrieval evaluation (DESIGN R12): dataset loaders and IR metrics, as pure functions.

Metrics follow trec_eval as BEIR reports it through pytrec_eval:

* nDCG@k uses *linear* gain ``grade / log2(rank + 1)`` and an ideal DCG over all judged-relevant
  documents (not ``2**grade - 1``);
* Recall@k = relevant documents in the top k / all relevant documents;
* MRR@k = 1 / rank of the first relevant document in the top k (0 if none).

A ranked list is de-duplicated (first occurrence kept) before scoring, as pytrec_eval does:
when chunk hits are mapped to document ids, one document often appears several times.
Queries without any relevant judgment are skipped; a query without results scores 0.
"""

from __future__ import annotations

import csv
import json
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shelfhand.core.errors import KnowledgeError

logger = logging.getLogger(__name__)

__all__ = [
    "BeirDataset",
    "BeirDocument",
    "EvalCase",
    "cases_to_qrels",
    "evaluate",
    "latency_summary",
    "load_beir",
    "load_cases",
    "mrr_at_k",
    "ndcg_at_k",
    "recall_at_k",
]

Qrels = Mapping[str, Mapping[str, int]]


@dataclass(frozen=True, slots=True, kw_only=True)
class BeirDocument:
    """One corpus entry of a BEIR dataset."""

    doc_id: str
    title: str
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class BeirDataset:
    """A BEIR-layout dataset: corpus, the judged queries of one split, and their qrels."""

    corpus: Mapping[str, BeirDocument]
    queries: Mapping[str, str]
    """Query id → text, only for queries that have judgments in the split."""
    qrels: Mapping[str, Mapping[str, int]]
    """Query id → {document id: relevance grade}."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalCase:
    """One hand-written evaluation case: a query and the sources or doc ids that answer it."""

    query: str
    relevant: tuple[str, ...]
    case_id: str = ""


def _read_jsonl(path: Path) -> Iterable[tuple[int, dict[str, object]]]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise KnowledgeError(f"{path}:{number}: not valid JSON ({exc.msg})") from exc
            if not isinstance(record, dict):
                raise KnowledgeError(f"{path}:{number}: expected a JSON object")
            yield number, record


def load_beir(path: Path, split: str = "test") -> BeirDataset:
    """Load a BEIR dataset folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``).

    Args:
        path: The dataset folder.
        split: Which qrels file to use.

    Returns:
        The dataset, restricted to queries that appear in the split's qrels.

    Raises:
        KnowledgeError: A file is missing or malformed (the message names file and line).
    """
    path = Path(path)
    qrels_path = path / "qrels" / f"{split}.tsv"
    for required in (path / "corpus.jsonl", path / "queries.jsonl", qrels_path):
        if not required.is_file():
            raise KnowledgeError(f"BEIR dataset file missing: {required}")

    qrels: dict[str, dict[str, int]] = {}
    with qrels_path.open(encoding="utf-8", newline="") as handle:
        for number, row in enumerate(csv.reader(handle, delimiter="\t"), start=1):
            if not row or (number == 1 and row[0] == "query-id"):
                continue
            if len(row) < 3:
                raise KnowledgeError(f"{qrels_path}:{number}: expected query-id, corpus-id, score")
            try:
                grade = int(row[2])
            except ValueError as exc:
                raise KnowledgeError(
                    f"{qrels_path}:{number}: score {row[2]!r} is not an integer"
                ) from exc
            qrels.setdefault(row[0], {})[row[1]] = grade

    corpus: dict[str, BeirDocument] = {}
    for number, record in _read_jsonl(path / "corpus.jsonl"):
        if "_id" not in record:
            raise KnowledgeError(f"{path / 'corpus.jsonl'}:{number}: missing _id")
        doc_id = str(record["_id"])
        corpus[doc_id] = BeirDocument(
            doc_id=doc_id,
            title=str(record.get("title") or ""),
            text=str(record.get("text") or ""),
        )

    queries: dict[str, str] = {}
    for number, record in _read_jsonl(path / "queries.jsonl"):
        if "_id" not in record or "text" not in record:
            raise KnowledgeError(f"{path / 'queries.jsonl'}:{number}: needs _id and text")
        qid = str(record["_id"])
        if qid in qrels:
            queries[qid] = str(record["text"])

    missing = [q for q in qrels if q not in queries]
    if missing:
        logger.warning("%d judged queries have no text in queries.jsonl; dropped", len(missing))
        for qid in missing:
            del qrels[qid]
    return BeirDataset(corpus=corpus, queries=queries, qrels=qrels)


def load_cases(path: Path) -> list[EvalCase]:
    """Load a JSONL case file: one ``{"query": str, "relevant": [str, ...]}`` per line.

    An optional ``"id"`` names the case; otherwise cases are named by line number.

    Raises:
        KnowledgeError: A line is not valid JSON or lacks a query / relevant list
            (the message says ``file:line``).
    """
    path = Path(path)
    cases: list[EvalCase] = []
    for number, record in _read_jsonl(path):
        query = record.get("query")
        relevant = record.get("relevant")
        if not isinstance(query, str) or not query.strip():
            raise KnowledgeError(f"{path}:{number}: 'query' must be a non-empty string")
        if (
            not isinstance(relevant, list)
            or not relevant
            or not all(isinstance(r, str) and r for r in relevant)
        ):
            raise KnowledgeError(
                f"{path}:{number}: 'relevant' must be a non-empty list of source or doc ids"
            )
        case_id = str(record.get("id") or f"line-{number}")
        cases.append(EvalCase(query=query, relevant=tuple(relevant), case_id=case_id))
    return cases


def cases_to_qrels(cases: Sequence[EvalCase]) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """Queries and binary qrels (grade 1) keyed by ``case_id``, ready for :func:`evaluate`."""
    queries = {c.case_id: c.query for c in cases}
    qrels = {c.case_id: dict.fromkeys(c.relevant, 1) for c in cases}
    return queries, qrels


def _dedup(ranked: Sequence[str], k: int) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for doc in ranked:
        if doc not in seen:
            seen.add(doc)
            out.append(doc)
            if len(out) == k:
                break
    return out


def ndcg_at_k(ranked: Sequence[str], rels: Mapping[str, int], k: int = 10) -> float:
    """nDCG@k with linear gain (trec_eval ``ndcg_cut``)."""
    top = _dedup(ranked, k)
    dcg = sum(rels.get(d, 0) / math.log2(i + 2) for i, d in enumerate(top))
    ideal = sorted((r for r in rels.values() if r > 0), reverse=True)[:k]
    idcg = sum(r / math.log2(i + 2) for i, r in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(ranked: Sequence[str], rels: Mapping[str, int], k: int = 10) -> float:
    """Share of the relevant documents found in the top k."""
    relevant = {d for d, r in rels.items() if r > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(_dedup(ranked, k))) / len(relevant)


def mrr_at_k(ranked: Sequence[str], rels: Mapping[str, int], k: int = 10) -> float:
    """Reciprocal rank of the first relevant document within the top k."""
    for i, doc in enumerate(_dedup(ranked, k)):
        if rels.get(doc, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def evaluate(
    run: Mapping[str, Sequence[str]],
    qrels: Qrels,
    k: int = 10,
    *,
    recall_ks: Sequence[int] = (100,),
) -> dict[str, float]:
    """Mean metrics over the judged queries.

    Args:
        run: Query id → ranked document ids (best first).
        qrels: Query id → {document id: grade}.
        k: Cut-off of nDCG, Recall and MRR.
        recall_ks: Extra recall cut-offs reported as ``Recall@n``.

    Returns:
        ``{"nDCG@k", "Recall@k", "MRR@k", "Recall@n"..., "n_queries"}``.
    """
    qids = [q for q, judged in qrels.items() if any(r > 0 for r in judged.values())]
    names = [f"nDCG@{k}", f"Recall@{k}", f"MRR@{k}"]
    names += [f"Recall@{n}" for n in recall_ks if n != k]
    totals = dict.fromkeys(names, 0.0)
    for qid in qids:
        ranked = run.get(qid, ())
        rels = qrels[qid]
        totals[f"nDCG@{k}"] += ndcg_at_k(ranked, rels, k)
        totals[f"Recall@{k}"] += recall_at_k(ranked, rels, k)
        totals[f"MRR@{k}"] += mrr_at_k(ranked, rels, k)
        for n in recall_ks:
            if n != k:
                totals[f"Recall@{n}"] += recall_at_k(ranked, rels, n)
    count = len(qids)
    result = {name: (value / count if count else 0.0) for name, value in totals.items()}
    result["n_queries"] = count
    return result


def latency_summary(ms: Sequence[float]) -> dict[str, float]:
    """Median and 95th percentile (linear interpolation) of latencies in milliseconds.

    An empty list gives zeros rather than NaN, so reports stay valid JSON.
    """
    if not ms:
        return {"p50_ms": 0.0, "p95_ms": 0.0}
    values = np.asarray(ms, dtype=np.float64)
    return {
        "p50_ms": float(np.percentile(values, 50)),
        "p95_ms": float(np.percentile(values, 95)),
    }
