"""The stages of ``shelfhand eval --ablation``: one list, one entry per pipeline switch.

The corpus is ingested once; each stage runs the same queries with different switches::

    keyword        BM25 alone, every switch off
    vector         vector search alone, every switch off
    hybrid         both sides fused, every switch off
    + exact boost  hybrid with identifier matches first       (SearchOptions.exact_boost)
    + threshold    ... and weak hits dropped                  (SearchOptions.min_relevance)
    + rerank       ... and the fused list reranked            (SearchOptions.rerank)
    + compression  ... and the evidence compressed            (shelfhand.knowledge.evidence.compress)

A switch is a field of :class:`~shelfhand.knowledge.types.SearchOptions`. Each stage starts
from the knowledge base's configured options (``kb.search_options``), sets every switch that
exists to its *off* value, and a ``+`` stage turns on its own switch and those before it; the
options go with every search of the stage, so the shared knowledge base is never changed
(a concurrent search, or the next stage, sees it as it came). A switch this build lacks, or one
the workspace did not configure (rerank with ``rerank=off``), makes its stage ``skipped`` with
the reason — never silently dropped; an earlier switch that is missing only leaves it out of
the later stages' ``on`` list. Adding a stage is one :class:`Switch` entry in :data:`SWITCHES`.
Compression is a step of the stage itself, applied to each search's evidence.
"""

from __future__ import annotations

import importlib
import inspect
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from shelfhand.core.messages import Citation
from shelfhand.core.tokens import count_tokens
from shelfhand.evals.retrieval import (
    CaseResult,
    EvalCase,
    case_report,
    latency_summary,
    quality_row,
)
from shelfhand.knowledge.evidence.citations import to_citations
from shelfhand.knowledge.types import SearchHit, SearchOptions

if TYPE_CHECKING:
    from shelfhand.knowledge.base import KnowledgeBase
    from shelfhand.knowledge.types import SearchMode

__all__ = [
    "EVIDENCE_K",
    "STAGES",
    "SWITCHES",
    "SearchRun",
    "Stage",
    "StageSkipped",
    "Switch",
    "load_compressor",
    "run_stages",
]

EVIDENCE_K = 3
"""Passages handed to compression: the ``retrieve`` tool's default top_k."""
COMPRESS_MODULE = "shelfhand.knowledge.evidence.compress"
"""Where ``compress_citation(citation, query, *, tokens)`` and ``DEFAULT_COMPRESS_TOKENS`` are."""
EVIDENCE_MODULE = "shelfhand.knowledge.evidence.citations"
"""Where ``prepare_evidence(citations, query, *, compress_tokens)`` is: what the ``retrieve``
tool does to its passages (conflict notes, then compression); used when present."""

Compressor = Callable[[str, list[Citation]], list[Citation]]


class StageSkipped(Exception):
    """A stage cannot run in this build or workspace; the message says why."""


def _same(configured: object) -> object:
    return configured


def _configured_threshold(configured: object) -> object:
    if not configured:
        raise StageSkipped(
            "min_relevance is not set (settings key min_relevance, env SHELFHAND_MIN_RELEVANCE)"
        )
    return configured


def _configured_reranker(configured: object) -> object:
    if not configured:  # the knowledge base has no reranker
        raise StageSkipped("rerank is off (settings key rerank, env SHELFHAND_RERANK)")
    return True


@dataclass(frozen=True, slots=True, kw_only=True)
class Switch:
    """One pipeline switch: a field of the searches' :class:`SearchOptions`."""

    name: str
    """The stage is called ``+ <name>``."""
    attr: str
    """The :class:`SearchOptions` field."""
    off: object
    """The value that turns it off (set in every stage that does not turn it on)."""
    on: Callable[[object], object]
    """The workspace's configured value → the value for the ``+`` stage; raises
    :class:`StageSkipped` when the workspace did not configure it."""
    where: str
    """Where the field is expected, for the "not available in this build" reason."""


SWITCHES: tuple[Switch, ...] = (
    Switch(
        name="exact boost",
        attr="exact_boost",
        off=False,
        on=lambda _configured: True,
        where="SearchOptions.exact_boost",
    ),
    Switch(
        name="threshold",
        attr="min_relevance",
        off=0.0,
        on=_configured_threshold,
        where="SearchOptions.min_relevance",
    ),
    Switch(
        name="rerank",
        attr="rerank",
        off=False,
        on=_configured_reranker,
        where="SearchOptions.rerank",
    ),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Stage:
    """One row of the ablation: a search mode, the switches it turns on, and compression."""

    name: str
    mode: SearchMode | None
    """``None``: hybrid, or keyword in a workspace without embedders."""
    switches: tuple[str, ...] = ()
    compress: bool = False


def _stages() -> tuple[Stage, ...]:
    names = [sw.name for sw in SWITCHES]
    return (
        Stage(name="keyword", mode="keyword"),
        Stage(name="vector", mode="vector"),
        Stage(name="hybrid", mode="hybrid"),
        *(
            Stage(name=f"+ {name}", mode=None, switches=tuple(names[: i + 1]))
            for i, name in enumerate(names)
        ),
        Stage(name="+ compression", mode=None, switches=tuple(names), compress=True),
    )


STAGES = _stages()


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchRun:
    """The queries every stage runs, and how to score them."""

    queries: Mapping[str, str]
    qrels: Mapping[str, Mapping[str, int]]
    cases: Sequence[EvalCase]
    """The case file's cases (empty for BEIR): adds per-kind and per-language figures."""
    key: Callable[[SearchHit], str]
    """Hit → the id the qrels use."""
    k: int
    """Chunks fetched per query."""


def _holder(kb: KnowledgeBase, attr: str) -> SearchOptions | None:
    """The knowledge base's configured options when ``attr`` is one of their fields."""
    options = kb.search_options
    return options if attr in {f.name for f in fields(options)} else None


def load_compressor(tokens: int | None = None) -> tuple[Compressor, int]:
    """The evidence compressor of this build, adapted to ``(query, citations) -> citations``,
    and the tokens it keeps per passage.

    Args:
        tokens: Tokens kept per passage (the ``compress_tokens`` setting); ``None``: the
            compressor's default.

    Raises:
        StageSkipped: This build has none (or it cannot be imported: the reason says why).
    """
    try:
        module = importlib.import_module(COMPRESS_MODULE)
    except ImportError as exc:
        if getattr(exc, "name", None) == COMPRESS_MODULE:
            raise StageSkipped(f"not available in this build ({COMPRESS_MODULE})") from None
        raise StageSkipped(f"{COMPRESS_MODULE} failed to import: {exc}") from None
    budget = tokens or getattr(module, "DEFAULT_COMPRESS_TOKENS", None)
    if not isinstance(budget, int) or budget < 1:
        raise StageSkipped("no token budget for compression (settings key compress_tokens)")
    prepare = getattr(importlib.import_module(EVIDENCE_MODULE), "prepare_evidence", None)
    if callable(prepare) and "compress_tokens" in inspect.signature(prepare).parameters:

        def prepared(query: str, citations: list[Citation]) -> list[Citation]:
            return list(prepare(citations, query, compress_tokens=budget))

        return prepared, budget
    one = getattr(module, "compress_citation", None)
    if not callable(one):
        raise StageSkipped(f"not available in this build ({COMPRESS_MODULE}.compress_citation)")

    def each(query: str, citations: list[Citation]) -> list[Citation]:
        return [one(c, query, tokens=budget) for c in citations]

    return each, budget


def _plain(value: object) -> bool:
    return value is None or isinstance(value, bool | int | float | str)


def _apply(
    kb: KnowledgeBase,
    stage: Stage,
    switches: Sequence[Switch],
    configured: Mapping[str, object],
) -> tuple[SearchOptions, dict[str, object]]:
    """The stage's options (its switches on, the others off) and the ones on (name → value)."""
    own = stage.switches[-1] if stage.switches and not stage.compress else None
    changes: dict[str, Any] = {}  # field -> value, as the switches give them
    on: dict[str, object] = {}
    for sw in switches:
        available = _holder(kb, sw.attr) is not None
        if sw.name not in stage.switches:
            if available:
                changes[sw.attr] = sw.off
            continue
        if not available:
            if sw.name == own:
                raise StageSkipped(f"not available in this build ({sw.where})")
            continue
        try:
            value = sw.on(configured[sw.name])
        except StageSkipped:
            if sw.name == own:
                raise
            changes[sw.attr] = sw.off
            continue
        changes[sw.attr] = value
        on[sw.name] = value if _plain(value) else type(value).__name__
    return replace(kb.search_options, **changes), on


def _mode(kb: KnowledgeBase, stage: Stage) -> SearchMode:
    if stage.mode == "keyword":
        return "keyword"
    if kb.keyword_only:
        if stage.mode is None:
            return "keyword"
        why = kb.degraded_reason or "retrieval_mode is keyword"
        raise StageSkipped(f"no embedder in this workspace ({why})")
    return "hybrid" if stage.mode is None else stage.mode


class _Compression:
    """Evidence tokens before/after compression, and whether what matters survived."""

    def __init__(self, compressor: Compressor, tokens: int) -> None:
        self.compressor = compressor
        self.tokens = tokens
        self.ms: list[float] = []
        self.tokens_before = 0
        self.tokens_after = 0
        self.contains = [0, 0]  # kept, cases whose evidence held the text
        self.relevant = [0, 0]  # kept, queries whose evidence held a relevant passage

    def measure(
        self,
        query: str,
        hits: list[SearchHit],
        rels: set[str],
        contains: str | None,
        run: SearchRun,
    ) -> float:
        before = to_citations(hits[:EVIDENCE_K])
        t0 = time.perf_counter()
        after = self.compressor(query, before)
        ms = (time.perf_counter() - t0) * 1000
        self.ms.append(ms)
        self.tokens_before += sum(count_tokens(c.text) for c in before)
        self.tokens_after += sum(count_tokens(c.text) for c in after)
        keys = {h.chunk.chunk_id: run.key(h) for h in hits[:EVIDENCE_K]}
        if rels and any(keys[c.chunk_id] in rels for c in before):
            self.relevant[1] += 1
            self.relevant[0] += any(keys.get(c.chunk_id) in rels and c.text for c in after)
        needle = contains.casefold() if contains else None
        if needle and any(needle in c.text.casefold() for c in before):
            self.contains[1] += 1
            self.contains[0] += any(needle in c.text.casefold() for c in after)
        return ms

    def report(self, queries: int) -> dict[str, Any]:
        lat = latency_summary(self.ms)
        return {
            "evidence_k": EVIDENCE_K,
            "tokens_per_passage": self.tokens,
            "tokens_before": self.tokens_before / queries if queries else 0.0,
            "tokens_after": self.tokens_after / queries if queries else 0.0,
            "contains_kept": self.contains[0],
            "contains_total": self.contains[1],
            "relevant_kept": self.relevant[0],
            "relevant_total": self.relevant[1],
            "p50_ms": lat["p50_ms"],
            "p95_ms": lat["p95_ms"],
        }


def _measure(
    kb: KnowledgeBase,
    run: SearchRun,
    mode: SearchMode,
    options: SearchOptions,
    compression: _Compression | None,
) -> dict[str, Any]:
    contains = {c.case_id: c.contains for c in run.cases}
    ranked: dict[str, list[str]] = {}
    tops: dict[str, str | None] = {}
    totals: list[float] = []
    parts: dict[str, list[float]] = {}
    degraded: Counter[str] = Counter()
    for qid, query in run.queries.items():
        found = kb.search_result(query, k=run.k, mode=mode, options=options)
        hits, timings = list(found.hits), found.timings
        total = timings.total_ms
        for f in fields(timings):
            value = getattr(timings, f.name)
            if f.name.endswith("_ms") and f.name != "total_ms" and isinstance(value, float):
                parts.setdefault(f.name, []).append(value)
        if found.degraded_reason:  # this search's own fallback to keywords
            degraded[found.degraded_reason] += 1
        fallback = found.rerank_reason
        if fallback:  # the reranker failed and the fused order was kept
            degraded[f"rerank kept the fused order: {fallback}"] += 1
        ranked[qid] = [run.key(h) for h in hits]
        tops[qid] = hits[0].chunk.text if hits else None
        if compression is not None:
            rels = {d for d, g in run.qrels.get(qid, {}).items() if g > 0}
            total += compression.measure(query, hits, rels, contains.get(qid), run)
        totals.append(total)
    row: dict[str, Any] = quality_row(ranked, run.qrels, totals)
    del row["n_queries"]  # the run's, reported once
    row["timings"] = {name: latency_summary(values) for name, values in parts.items()}
    if degraded:
        row["degraded"] = dict(degraded)
    if run.cases:
        results = {q: CaseResult(ranked=tuple(ranked[q]), top_text=tops[q]) for q in ranked}
        row.update(case_report(run.cases, results))
    if compression is not None:
        row["compression"] = compression.report(len(run.queries))
    return row


def run_stages(
    kb: KnowledgeBase,
    run: SearchRun,
    stages: Sequence[Stage] = STAGES,
    *,
    switches: Sequence[Switch] = SWITCHES,
    compress_tokens: int | None = None,
    log: Callable[[str], Any] | None = None,
) -> list[dict[str, Any]]:
    """Run ``run``'s queries once per stage; one row per stage, skipped ones with the reason.

    ``compress_tokens`` is the compression stage's budget per passage (``None``: the
    compressor's default).

    Each stage's switches go with its searches (:class:`SearchOptions`): the knowledge base
    is never changed.
    """
    configured: dict[str, object] = {}
    for sw in switches:
        holder = _holder(kb, sw.attr)
        if holder is not None:
            configured[sw.name] = getattr(holder, sw.attr)
    rows: list[dict[str, Any]] = []
    for stage in stages:
        try:
            mode = _mode(kb, stage)
            compression = (
                _Compression(*load_compressor(compress_tokens)) if stage.compress else None
            )
            options, on = _apply(kb, stage, switches, configured)
            if log:
                log(f"stage {stage.name}: {len(run.queries)} queries ({mode}) …")
            row = {"stage": stage.name, "status": "ok", "mode": mode, "on": on}
            if compression is not None:
                on["compression"] = True
            row.update(_measure(kb, run, mode, options, compression))
        except StageSkipped as exc:
            row = {"stage": stage.name, "status": "skipped", "reason": str(exc)}
        rows.append(row)
    return rows
