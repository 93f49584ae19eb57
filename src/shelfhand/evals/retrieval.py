"""Retrieval evaluation (docs/design.md R12): dataset loaders and IR metrics, as pure functions.

Metrics follow trec_eval as BEIR reports it through pytrec_eval:

* nDCG@k uses *linear* gain ``grade / log2(rank + 1)`` and an ideal DCG over all judged-relevant
  documents (not ``2**grade - 1``);
* Recall@k = relevant documents in the top k / all relevant documents;
* MRR@k = 1 / rank of the first relevant document in the top k (0 if none).

A ranked list is de-duplicated (first occurrence kept) before scoring, as pytrec_eval does:
when chunk hits are mapped to document ids, one document often appears several times.
Queries without any relevant judgment are skipped by :func:`evaluate`; a query without results
scores 0.

Case files (:func:`load_cases`) may give each case a ``kind``: ``identifier`` (an exact code
lookup: the rank-1 passage must be relevant and contain ``contains``), ``question`` (the usual
metrics) or ``not_found`` (no relevant document: the right answer is no hits at all).
:func:`case_report` scores each kind on its own terms and splits the figures by language, so
``not_found`` cases are reported rather than skipped.
"""

from __future__ import annotations

import csv
import json
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from shelfhand.core.errors import KnowledgeError

logger = logging.getLogger(__name__)

__all__ = [
    "BeirDataset",
    "BeirDocument",
    "CaseKind",
    "CaseResult",
    "EvalCase",
    "case_lang",
    "case_report",
    "cases_to_qrels",
    "evaluate",
    "latency_summary",
    "load_beir",
    "load_cases",
    "mrr_at_k",
    "ndcg_at_k",
    "quality_row",
    "recall_at_k",
]

Qrels = Mapping[str, Mapping[str, int]]
CaseKind = Literal["identifier", "question", "not_found"]
CASE_KINDS: tuple[CaseKind, ...] = ("identifier", "question", "not_found")


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
    """One hand-written evaluation case: a query and the sources or doc ids that answer it.

    ``relevant`` is empty exactly for ``not_found`` cases (the documents do not answer them).
    """

    query: str
    relevant: tuple[str, ...]
    case_id: str = ""
    kind: CaseKind = "question"
    lang: str = ""
    """``en``, ``zh``…; empty when the file does not say (:func:`case_lang` then guesses)."""
    contains: str | None = None
    """Text the rank-1 passage must contain (an identifier's code, say)."""


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

    Optional fields: ``"id"`` names the case (default: its line number); ``"kind"`` is
    ``identifier``, ``question`` (the default) or ``not_found``; ``"lang"`` (``en``, ``zh``…);
    ``"contains"``, text the rank-1 passage must contain. ``relevant`` must be a non-empty list,
    except for ``not_found`` cases, where it must be empty (or left out).

    Raises:
        KnowledgeError: A line is not valid JSON, lacks a query / relevant list, has an unknown
            kind or repeats an id (the message says ``file:line``).
    """
    path = Path(path)
    cases: list[EvalCase] = []
    seen: dict[str, int] = {}
    for number, record in _read_jsonl(path):
        where = f"{path}:{number}"
        query = record.get("query")
        if not isinstance(query, str) or not query.strip():
            raise KnowledgeError(f"{where}: 'query' must be a non-empty string")
        kind = record.get("kind", "question")
        if kind not in CASE_KINDS:
            raise KnowledgeError(
                f"{where}: 'kind' must be one of {', '.join(CASE_KINDS)}, not {kind!r}"
            )
        relevant = record.get("relevant", [] if kind == "not_found" else None)
        if not isinstance(relevant, list) or not all(isinstance(r, str) and r for r in relevant):
            raise KnowledgeError(f"{where}: 'relevant' must be a list of source or doc ids")
        if kind == "not_found" and relevant:
            raise KnowledgeError(f"{where}: 'relevant' must be empty for a not_found case")
        if kind != "not_found" and not relevant:
            raise KnowledgeError(
                f"{where}: 'relevant' must be a non-empty list of source or doc ids "
                '(or give the case "kind": "not_found")'
            )
        contains = record.get("contains")
        if contains is not None and (not isinstance(contains, str) or not contains.strip()):
            raise KnowledgeError(f"{where}: 'contains' must be a non-empty string")
        lang = record.get("lang", "")
        if not isinstance(lang, str):
            raise KnowledgeError(f'{where}: \'lang\' must be a string such as "en" or "zh"')
        case_id = str(record.get("id") or f"line-{number}")
        if case_id in seen:
            raise KnowledgeError(f"{where}: id {case_id!r} repeats line {seen[case_id]}")
        seen[case_id] = number
        cases.append(
            EvalCase(
                query=query,
                relevant=tuple(relevant),
                case_id=case_id,
                kind=kind,
                lang=lang,
                contains=contains,
            )
        )
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


def case_lang(case: EvalCase) -> str:
    """The case's language: as the file says, else ``zh`` when the query has CJK ideographs,
    else ``en``."""
    if case.lang:
        return case.lang
    return "zh" if any("\u3400" <= ch <= "\u9fff" for ch in case.query) else "en"


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseResult:
    """What one search returned for a case, reduced to what :func:`case_report` needs."""

    ranked: tuple[str, ...]
    """Keys of the hits (in the case file's vocabulary: sources, file names or doc ids)."""
    top_text: str | None
    """The rank-1 passage's text; ``None`` when the search returned nothing."""


def _contains(text: str | None, needle: str) -> bool:
    return text is not None and needle.casefold() in text.casefold()


def _share(flags: Sequence[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def _kind_figures(
    cases: Sequence[EvalCase], results: Mapping[str, CaseResult], k: int
) -> dict[str, Any]:
    """Figures for one group of cases, by kind (``None`` where the group has no such case)."""
    answerable = [c for c in cases if c.kind != "not_found"]
    run = {c.case_id: list(results[c.case_id].ranked) for c in answerable}
    scores = evaluate(run, cases_to_qrels(answerable)[1], k=k, recall_ks=(5,))
    idents = [c for c in cases if c.kind == "identifier"]
    nf = [c for c in cases if c.kind == "not_found"]
    return {
        "n": len(cases),
        f"ndcg@{k}": scores[f"nDCG@{k}"] if answerable else None,
        "recall@5": scores["Recall@5"] if answerable else None,
        f"mrr@{k}": scores[f"MRR@{k}"] if answerable else None,
        "identifier_rank1": _share([_rank1_ok(c, results[c.case_id]) for c in idents]),
        "not_found": _share([not results[c.case_id].ranked for c in nf]),
    }


def _rank1_ok(case: EvalCase, result: CaseResult) -> bool:
    """The rank-1 hit is a relevant source and contains the case's text (when it names one)."""
    relevant_first = bool(result.ranked) and result.ranked[0] in case.relevant
    return relevant_first and (case.contains is None or _contains(result.top_text, case.contains))


def case_report(
    cases: Sequence[EvalCase], results: Mapping[str, CaseResult], k: int = 10
) -> dict[str, Any]:
    """Score each kind of case on its own terms, and every kind by language.

    * ``identifier``: ``rank1`` = share whose rank-1 hit is relevant and contains ``contains``;
      ``rank1_contains`` / ``rank1_relevant`` split the two conditions; ``missed`` lists ids.
    * ``question``: nDCG@k, Recall@5, Recall@k, MRR@k (and ``rank1_contains`` over the
      questions that name a ``contains``).
    * ``not_found``: ``not_found`` = share answered with no hits at all; ``answered`` lists
      the ids that got hits anyway.

    Args:
        cases: The cases (all of them, ``not_found`` included).
        results: Case id → what the search returned; every case must have one.

    Returns:
        ``{"kinds": {kind: {...}}, "langs": {lang: {...}}}``; kinds without cases are left out.
    """
    missing = [c.case_id for c in cases if c.case_id not in results]
    if missing:
        raise KnowledgeError(f"no search result for cases {missing[:5]}")
    kinds: dict[str, Any] = {}
    idents = [c for c in cases if c.kind == "identifier"]
    if idents:
        ok = [_rank1_ok(c, results[c.case_id]) for c in idents]
        kinds["identifier"] = {
            "n": len(idents),
            "rank1": _share(ok),
            "rank1_contains": _share(
                [_contains(results[c.case_id].top_text, c.contains or "") for c in idents]
            ),
            "rank1_relevant": _share(
                [
                    bool(results[c.case_id].ranked) and results[c.case_id].ranked[0] in c.relevant
                    for c in idents
                ]
            ),
            "missed": [c.case_id for c, good in zip(idents, ok, strict=True) if not good],
        }
    questions = [c for c in cases if c.kind == "question"]
    if questions:
        run = {c.case_id: list(results[c.case_id].ranked) for c in questions}
        scores = evaluate(run, cases_to_qrels(questions)[1], k=k, recall_ks=(5,))
        figures: dict[str, Any] = {
            "n": len(questions),
            f"ndcg@{k}": scores[f"nDCG@{k}"],
            "recall@5": scores["Recall@5"],
            f"recall@{k}": scores[f"Recall@{k}"],
            f"mrr@{k}": scores[f"MRR@{k}"],
        }
        named = [c for c in questions if c.contains]
        if named:
            figures["rank1_contains"] = _share(
                [_contains(results[c.case_id].top_text, c.contains or "") for c in named]
            )
        kinds["question"] = figures
    nf = [c for c in cases if c.kind == "not_found"]
    if nf:
        answered = [c.case_id for c in nf if results[c.case_id].ranked]
        kinds["not_found"] = {
            "n": len(nf),
            "not_found": (len(nf) - len(answered)) / len(nf),
            "answered": answered,
        }
    langs: dict[str, list[EvalCase]] = {}
    for case in cases:
        langs.setdefault(case_lang(case), []).append(case)
    return {
        "kinds": kinds,
        "langs": {lang: _kind_figures(group, results, k) for lang, group in sorted(langs.items())},
    }


def quality_row(
    run: Mapping[str, Sequence[str]], qrels: Qrels, latencies_ms: Sequence[float]
) -> dict[str, float]:
    """What an evaluation report shows for one run: nDCG@10, Recall@5/10, MRR@10 and the
    latency's p50/p95 (keys ``ndcg@10``, ``recall@5``, ``recall@10``, ``mrr@10``,
    ``p50_ms``, ``p95_ms``, ``n_queries``)."""
    scores = evaluate(run, qrels, k=10, recall_ks=(5,))
    return {
        "ndcg@10": scores["nDCG@10"],
        "recall@5": scores["Recall@5"],
        "recall@10": scores["Recall@10"],
        "mrr@10": scores["MRR@10"],
        **latency_summary(latencies_ms),
        "n_queries": scores["n_queries"],
    }
