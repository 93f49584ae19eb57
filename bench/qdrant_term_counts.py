"""What keeping the Qdrant index's term counts (BM25 document frequencies) saves a hybrid search.

A PostgreSQL + Qdrant Edge store built by ``bench/qdrant_store.py latency`` (its
``--database-url`` and ``--workspace``) is opened; the corpus's queries are searched in
order (hybrid, query vectors given, one caller), first with the kept counts cleared before
each search (what every search paid before they were kept), then with the counts kept, each
query once, then the same queries again (their terms counted already). Prints the hybrid p50
and the term counts per search of each pass.

    python bench/qdrant_term_counts.py --chunks 1000000 --database-url postgresql://.../bench1m \\
        --workspace /tmp/qbench1m
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main() -> None:
    import retrieval_latency as rl
    from qdrant_store import open_reused_store, reused_store_parser

    ap = reused_store_parser(__doc__.split("\n\n")[0])
    ap.add_argument("--caller", default="admin", choices=list(rl.USERS))
    a = ap.parse_args()
    corpus, kb = open_reused_store(a)
    index = kb.keyword.index
    backend = index.backend
    count = backend.count
    counted = [0]

    def counting(flt: Any) -> int:
        if flt.term is not None:
            counted[0] += 1
        return int(count(flt))

    backend.count = counting
    user = rl.USERS[a.caller]
    load = os.getloadavg()[0]
    passes = (
        ("the counts cleared before each search (before)", True),
        ("counts kept, each query once", False),
        ("counts kept, the same queries again", False),
    )
    index._changed()
    print(f"hybrid, {a.chunks:,} chunks, caller {a.caller}, {len(corpus.queries)} queries\n")
    print("| pass | term counts per search | p50 ms |\n|---|---:|---:|")
    for name, clear in passes:
        times: list[float] = []
        before = counted[0]
        for query, vector in zip(corpus.queries, corpus.qvecs, strict=True):
            if clear:
                index._changed()
            t0 = time.perf_counter()
            kb.retriever.search_timed(
                query, k=10, user=user, mode="hybrid", query_vectors={rl.SPACE: vector}
            )
            times.append((time.perf_counter() - t0) * 1000)
        per_search = (counted[0] - before) / len(times)
        print(f"| {name} | {per_search:.1f} | {statistics.median(times):.1f} |")
    print(f"\nload {load:.1f} → {os.getloadavg()[0]:.1f}")
    kb.close()


if __name__ == "__main__":
    main()
