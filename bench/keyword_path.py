"""Keyword-mode searches through the embedded store, per caller, with where the time goes.

On a workspace built by ``bench/retrieval.py embedded`` (same corpus, queries and callers),
opens only what a keyword search needs (``knowledge.db``, the tantivy index with its access
labels, ``HybridRetriever`` without vectors), so one pass takes seconds and several passes can
alternate between two checkouts of the code (``PYTHONPATH``) to compare them::

    git worktree add /tmp/wt-base <commit>
    for i in 1 2 3; do
      PYTHONPATH=/tmp/wt-base/src python bench/keyword_path.py --ws-dir WS --label base
      PYTHONPATH=src python bench/keyword_path.py --ws-dir WS --label new
    done > passes.jsonl
    python bench/keyword_path.py --summarize passes.jsonl

Per caller: wall p50 / p95 of ``search_timed(mode="keyword")`` over every query (English and
Chinese halves apart), the share of searches within 2 ms, and per query group (English or
Chinese, with or without an identifier) the stage medians that ``SearchTimings`` reports
(keyword side, fusion with the SQLite reads, exact-identifier step). One JSON line on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import retrieval_scale as rs

import shelfhand
from shelfhand.knowledge.analysis import query_identifiers
from shelfhand.knowledge.retrieval.hybrid import HybridRetriever
from shelfhand.knowledge.stores.sqlite import SqliteKnowledgeStore
from shelfhand.knowledge.stores.tantivy import TantivyKeywordIndex


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    rs.workspace_arguments(ap)
    ap.add_argument("--rounds", type=int, default=2, help="passes over the queries per caller")
    ap.add_argument("--label", default="", help="a name for this checkout in the output")
    ap.add_argument("--summarize", type=Path, help="JSON lines of passes: medians per label")
    args = ap.parse_args()
    if args.summarize:
        summarize(args.summarize)
        return
    corpus = rs.make_mixed_corpus(args.size, seed=args.seed, n_queries=args.queries)
    ws = args.ws_dir / f"embedded-{args.size}"
    store = SqliteKnowledgeStore(ws / "knowledge.db")
    keyword = TantivyKeywordIndex(ws / "index" / "keyword", access="write")
    retriever = HybridRetriever(store, keyword, None, None)
    half = len(corpus.queries) // 2
    groups = [
        ("en" if i < half else "zh") + ("+identifier" if query_identifiers(q) else "")
        for i, q in enumerate(corpus.queries)
    ]
    out: dict[str, Any] = {
        "label": args.label,
        "code": shelfhand.__file__,
        "load_before": os.getloadavg()[0],
    }
    for q in corpus.queries:  # warm: the first searches read the index and jieba's tables
        retriever.search_timed(q, k=10, user=rs.CALLERS["admin"][0], mode="keyword")
    for name in args.callers:
        user, filters = rs.CALLERS[name]
        wall: dict[str, list[float]] = {"en": [], "zh": []}
        stages: dict[str, list[tuple[float, float, float, float]]] = {}
        for _ in range(args.rounds):
            for i, q in enumerate(corpus.queries):
                t = time.perf_counter()
                _, tm = retriever.search_timed(q, k=10, user=user, mode="keyword", filters=filters)
                ms = (time.perf_counter() - t) * 1000
                wall["en" if i < half else "zh"].append(ms)
                stages.setdefault(groups[i], []).append(
                    (ms, tm.keyword_ms, tm.fuse_ms, tm.exact_ms)
                )
        every = wall["en"] + wall["zh"]
        out[name] = {
            "p50_ms": statistics.median(every),
            "p95_ms": statistics.quantiles(every, n=20)[-1],
            "en_p50_ms": statistics.median(wall["en"]),
            "zh_p50_ms": statistics.median(wall["zh"]),
            "within_2ms": sum(ms <= 2.0 for ms in every) / len(every),
            "groups": {
                group: {
                    "queries": len(rows) // args.rounds,
                    **{
                        f"{stage}_p50_ms": statistics.median(r[j] for r in rows)
                        for j, stage in enumerate(("wall", "keyword", "fuse", "exact"))
                    },
                }
                for group, rows in sorted(stages.items())
            },
        }
    out["load_after"] = os.getloadavg()[0]
    store.close()
    print(json.dumps(out))


def summarize(path: Path) -> None:
    """Per label and caller, the median over the passes (each pass's value in brackets)."""
    passes: dict[str, list[dict[str, Any]]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            passes.setdefault(row["label"], []).append(row)
    callers = [k for k in next(iter(passes.values()))[0] if isinstance(k, str) and k in rs.CALLERS]
    for caller in callers:
        for key in ("p50_ms", "p95_ms", "en_p50_ms", "zh_p50_ms", "within_2ms"):
            cells = []
            for label, rows in passes.items():
                values = [row[caller][key] for row in rows]
                shown = " ".join(f"{v:.2f}" for v in values)
                cells.append(f"{label} {statistics.median(values):.2f} [{shown}]")
            print(f"{caller:10s} {key:11s} " + " | ".join(cells))


if __name__ == "__main__":
    main()
