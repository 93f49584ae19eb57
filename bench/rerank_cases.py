"""The LLM reranker on the sample case set (issue 13 point 3): fused order vs. reranked.

Indexes the bundled sample corpus in a temporary workspace and runs every ``identifier`` and
``question`` case of ``src/shelfhand/samples/projector-cases.jsonl`` twice: plain search, and
search with :class:`~shelfhand.agent.llm_rerank.LlmReranker` over the configured chat model.
``not_found`` cases are left out (a reranker orders passages; "not found" is the relevance
threshold's job). Per kind it reports:

- ``rank1``: the rank-1 passage comes from a relevant source (and, for identifier cases,
  contains the identifier, the case's ``contains``);
- ``recall@k``: a relevant source among the top ``k``;
- ``mrr@k``;
- ``fallbacks``: searches where the reranker failed and the fused order was kept;
- ``reordered``: searches whose top ``k`` came back in a different order than fused;
- rerank latency p50 / p95 (ms).

The chat model comes from the usual settings, e.g. a local llama.cpp server::

    SHELFHAND_MODEL=qwen2.5-coder-0.5b OPENAI_BASE_URL=http://127.0.0.1:8091/v1 \\
    OPENAI_API_KEY=none python bench/rerank_cases.py [--mode keyword] [--json out.json]

``--mode keyword`` (default) needs no embedder; ``hybrid`` loads the default embedders.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from shelfhand.agent.llm_rerank import LlmReranker
from shelfhand.core.settings import Settings
from shelfhand.knowledge.base import KnowledgeBase, sample_corpus
from shelfhand.knowledge.retrieval.hybrid import SearchMode
from shelfhand.knowledge.types import SearchHit
from shelfhand.providers.openai_chat import OpenAIChatModel

CASES = (
    Path(__file__).resolve().parents[1] / "src" / "shelfhand" / "samples" / "projector-cases.jsonl"
)


def load_cases() -> list[dict[str, Any]]:
    lines = CASES.read_text(encoding="utf-8").splitlines()
    cases = [json.loads(line) for line in lines if line.strip()]
    return [c for c in cases if c["kind"] in ("identifier", "question")]


def relevant(hit: SearchHit, case: dict[str, Any]) -> bool:
    """As ``shelfhand eval`` matches: a source, a bare file name or a doc id."""
    names = (hit.chunk.doc_id, hit.chunk.source, Path(hit.chunk.source).name)
    return any(name in case["relevant"] for name in names)


def score(hits: list[SearchHit], case: dict[str, Any], k: int) -> dict[str, float]:
    first = bool(hits) and relevant(hits[0], case)
    if first and case.get("contains"):
        first = case["contains"] in hits[0].chunk.text
    ranks = [i for i, h in enumerate(hits[:k], start=1) if relevant(h, case)]
    return {
        "rank1": float(first),
        f"recall@{k}": float(bool(ranks)),
        f"mrr@{k}": 1.0 / ranks[0] if ranks else 0.0,
    }


def summary(rows: list[dict[str, Any]], k: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in ("identifier", "question", "all"):
        chosen = [r for r in rows if kind in ("all", r["kind"])]
        if not chosen:
            continue
        entry: dict[str, Any] = {"n": len(chosen)}
        for metric in ("rank1", f"recall@{k}", f"mrr@{k}"):
            entry[metric] = round(statistics.fmean(r[metric] for r in chosen), 3)
        out[kind] = entry
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", default="keyword", choices=("keyword", "hybrid"))
    parser.add_argument("-k", type=int, default=3)
    parser.add_argument("--candidates", type=int, default=10)
    parser.add_argument("--passage-chars", type=int, default=300)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    settings = Settings.load(tempfile.mkdtemp())
    model = OpenAIChatModel.from_env(settings, max_tokens=40, temperature=0.0)
    reranker = LlmReranker(
        model,
        timeout=args.timeout,
        max_passage_chars=args.passage_chars,
        max_candidates=args.candidates,
    )
    router = None
    if args.mode == "hybrid":
        from shelfhand.knowledge.embeddings.local import default_router

        router = default_router()
    mode: SearchMode = "hybrid" if router is not None else "keyword"
    kb = KnowledgeBase(
        Path(tempfile.mkdtemp()) / "ws",
        router,
        reranker=reranker,
        rerank_candidates=args.candidates,
    )
    kb.ingest([sample_corpus()])
    plain_rows: list[dict[str, Any]] = []
    rerank_rows: list[dict[str, Any]] = []
    latencies: list[float] = []
    reasons: list[str] = []
    reordered = 0
    try:
        for case in load_cases():
            plain = kb.search(case["query"], k=args.k, mode=mode, rerank=False)
            found = kb.search_result(case["query"], k=args.k, mode=mode)
            ranked, timings = list(found.hits), found.timings
            plain_rows.append({"kind": case["kind"], **score(plain, case, args.k)})
            rerank_rows.append({"kind": case["kind"], **score(ranked, case, args.k)})
            latencies.append(timings.rerank_ms)
            reordered += [h.chunk.chunk_id for h in plain] != [h.chunk.chunk_id for h in ranked]
            if timings.rerank_reason:
                reasons.append(f"{case['id']}: {timings.rerank_reason}")
            print(
                f"{case['id']:<28} fused={plain_rows[-1]['rank1']:.0f} "
                f"reranked={rerank_rows[-1]['rank1']:.0f} {timings.rerank_ms:7.0f} ms"
                + (" (fallback)" if timings.rerank_reason else ""),
                flush=True,
            )
    finally:
        kb.close()
    quantiles = statistics.quantiles(latencies, n=20) if len(latencies) > 1 else latencies * 19
    report = {
        "model": model.name,
        "mode": mode,
        "k": args.k,
        "candidates": args.candidates,
        "passage_chars": args.passage_chars,
        "fused": summary(plain_rows, args.k),
        "llm_rerank": summary(rerank_rows, args.k),
        "fallbacks": len(reasons),
        "reordered": reordered,
        "fallback_reasons": reasons,
        "rerank_p50_ms": round(statistics.median(latencies), 1),
        "rerank_p95_ms": round(quantiles[18], 1),
    }
    print(json.dumps(report, ensure_ascii=False, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, ensure_ascii=False, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
