"""Evidence benchmark (issue 13, points 6 and 7): conflict flags and context compression.

    python bench/evidence.py            # the sample corpus, keyword and hybrid (default embedder)

Over every query of the sample case sets (``projector-cases.jsonl`` + ``projector-eval.jsonl``),
top 5 passages each:

- conflicts: every flagged pair is printed, so precision can be read off (the corpus has one
  real disagreement: warranty v1 says 12 个月, v2 says 24 个月);
- compression at several per-passage budgets: tokens shown before/after, and for the cases
  with a ``contains`` string (an identifier the rank-1 passage must hold) whether the
  compressed rank-1 passage still holds it;
- the time ``prepare_evidence`` (flags + compression) adds per query, p50/p95.

Markdown to stdout, JSON to ``bench/results/evidence.json``.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from importlib.resources import files
from pathlib import Path
from typing import Any

from shelfhand.core.tokens import count_tokens
from shelfhand.knowledge.base import KnowledgeBase, sample_corpus
from shelfhand.knowledge.embeddings.local import default_router
from shelfhand.knowledge.evidence.citations import prepare_evidence, to_citations
from shelfhand.knowledge.evidence.conflicts import cache_clear, find_conflicts

RESULTS = Path(__file__).resolve().parent / "results"
BUDGETS = (60, 100, 200)
K = 5


def _cases() -> list[dict[str, Any]]:
    out = []
    for name in ("projector-cases.jsonl", "projector-eval.jsonl"):
        text = (files("shelfhand") / "samples" / name).read_text(encoding="utf-8")
        out += [json.loads(line) for line in text.splitlines() if line.strip()]
    return out


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(kb: KnowledgeBase, mode: str, cases: list[dict[str, Any]]) -> dict[str, Any]:
    flagged: list[dict[str, Any]] = []
    tokens_before = 0
    tokens_after = dict.fromkeys(BUDGETS, 0)
    kept = dict.fromkeys(BUDGETS, 0)
    contains_cases = 0
    cold_ms: list[float] = []
    warm_ms: list[float] = []
    for case in cases:
        query = case["query"]
        full = to_citations(kb.search(query, k=K, mode=mode))  # type: ignore[arg-type]
        cache_clear()
        started = time.perf_counter()
        prepare_evidence(full, query, compress_tokens=BUDGETS[-1])
        cold_ms.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        prepared = prepare_evidence(full, query)
        warm_ms.append((time.perf_counter() - started) * 1000)
        by_index = {c.index: c for c in prepared}
        for conflict in find_conflicts(prepared):
            pair = sorted((by_index[conflict.a].chunk_id, by_index[conflict.b].chunk_id))
            flagged.append({"query": query, "pair": pair, "note": conflict.note})
        tokens_before += sum(count_tokens(c.text) for c in full)
        contains = case.get("contains")
        has_it = bool(full) and bool(contains) and contains in full[0].text
        contains_cases += has_it
        for budget in BUDGETS:
            compressed = prepare_evidence(full, query, compress_tokens=budget)
            tokens_after[budget] += sum(count_tokens(c.text) for c in compressed)
            kept[budget] += has_it and contains in compressed[0].text
    return {
        "mode": mode,
        "queries": len(cases),
        "flagged": flagged,
        "tokens_before": tokens_before,
        "tokens_after": tokens_after,
        "contains_cases": contains_cases,
        "contains_kept": kept,
        "cold_ms_p50": statistics.median(cold_ms),
        "cold_ms_p95": _pct(cold_ms, 0.95),
        "warm_ms_p50": statistics.median(warm_ms),
        "warm_ms_p95": _pct(warm_ms, 0.95),
    }


def main() -> int:
    cases = _cases()
    reports = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode, router in (("keyword", None), ("hybrid", default_router())):
            with KnowledgeBase(Path(tmp) / mode, router) as kb:
                kb.ingest([sample_corpus()])
                reports.append(run(kb, mode, cases))
    for r in reports:
        print(f"\n### {r['mode']}: {r['queries']} queries, top {K}\n")
        pairs = sorted({tuple(f["pair"]) for f in r["flagged"]})
        print(f"queries with a conflict flag: {len({f['query'] for f in r['flagged']})}")
        print(f"distinct passage pairs flagged: {len(pairs)}")
        for pair in pairs:
            print(f"- {pair[0]} vs {pair[1]}")
        for f in r["flagged"]:
            print(f"  - {f['query']!r}: {f['note']}")
        print(
            "\n| budget (tokens/passage) | tokens shown | of uncompressed | rank-1 keeps `contains` |"
        )
        print("|---|---|---|---|")
        print(
            f"| off | {r['tokens_before']} | 100% | {r['contains_cases']}/{r['contains_cases']} |"
        )
        for b in BUDGETS:
            share = r["tokens_after"][b] / max(1, r["tokens_before"])
            print(
                f"| {b} | {r['tokens_after'][b]} | {share:.0%} | "
                f"{r['contains_kept'][b]}/{r['contains_cases']} |"
            )
        print(
            f"\nprepare_evidence (flags + compression at {BUDGETS[-1]}) per query, cold caches: "
            f"p50 {r['cold_ms_p50']:.2f} ms, p95 {r['cold_ms_p95']:.2f} ms; flags only, warm: "
            f"p50 {r['warm_ms_p50']:.2f} ms, p95 {r['warm_ms_p95']:.2f} ms"
        )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "evidence.json").write_text(
        json.dumps(reports, ensure_ascii=False, indent=2), encoding="utf-8"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
