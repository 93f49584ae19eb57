"""What PostgreSQL round trips cost a PostgreSQL + Qdrant search, in one process, interleaved.

A PostgreSQL + Qdrant Edge store built by ``bench/qdrant_store.py latency`` (its
``--database-url`` and ``--workspace``) is opened once, then searched three ways, switched
search by search (the order flipped every round):

- ``before``: the pool checks every connection it hands out with a round trip
  (``ConnectionPool.check_connection``), and the Qdrant index looks for other processes' writes
  (one query) on each side of a search (keyword, vector, exact identifiers);
- ``IdleCheck``: the pool checks only a connection not handed out in the last 2 s
  (:class:`shelfhand.backends.postgres.IdleCheck`), a look per side still;
- ``IdleCheck + a look per search``: this tree
  (:class:`shelfhand.knowledge.stores.outbox.OncePerSearch`).

Wall ms per search (query vectors given), p50 and p95, and PostgreSQL checkouts per search.
Everything else is this tree's in all three (the Qdrant index's kept term counts included:
the figures in docs/benchmarks/scale.md were measured before those).

    python bench/qdrant_store.py latency --chunks 20000 --stores none \\
        --database-url postgresql://.../bench20k --workspace /tmp/w20k        # builds it once
    python bench/pg_search_roundtrips.py --chunks 20000 --database-url postgresql://.../bench20k \\
        --workspace /tmp/w20k
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
    from psycopg_pool import ConnectionPool
    from qdrant_store import open_reused_store, reused_store_parser

    ap = reused_store_parser(__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--mode", default="hybrid", choices=["keyword", "vector", "hybrid"])
    a = ap.parse_args()
    corpus, kb = open_reused_store(a)
    pool = kb.store.db.pool
    idle_check = pool._check
    every_time = ConnectionPool.check_connection
    index = kb.keyword.index
    once = index._refresh
    per_side = once._check  # the store's look, without the once-per-search gate
    checkouts = {"n": 0}
    connection = kb.store.db.connection

    def counted_connection() -> Any:
        checkouts["n"] += 1
        return connection()

    kb.store.db.connection = counted_connection
    cases = {
        "before: a check per checkout, a look per side": (every_time, per_side),
        "IdleCheck, a look per side": (idle_check, per_side),
        "IdleCheck, a look per search (this tree)": (idle_check, once),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    counts: dict[str, int] = dict.fromkeys(cases, 0)
    load = os.getloadavg()[0]
    for r in range(a.rounds):
        names = list(cases) if r % 2 == 0 else list(reversed(cases))
        for query, vector in zip(corpus.queries, corpus.qvecs, strict=True):
            for user in rl.USERS.values():
                for name in names:
                    pool._check, index._refresh = cases[name]
                    before = checkouts["n"]
                    t0 = time.perf_counter()
                    kb.retriever.search_timed(
                        query, k=10, user=user, mode=a.mode, query_vectors={rl.SPACE: vector}
                    )
                    times[name].append((time.perf_counter() - t0) * 1000)
                    counts[name] += checkouts["n"] - before
    kb.close()
    n = len(next(iter(times.values())))
    print(
        f"{a.mode} searches, {a.chunks:,} chunks, {n} per case (3 callers);"
        f" load {load:.1f} → {os.getloadavg()[0]:.1f}\n"
    )
    print("| PostgreSQL round trips | checkouts per search | p50 ms | p95 ms |")
    print("|---|---:|---:|---:|")
    for name, values in times.items():
        values.sort()
        p95 = values[int(len(values) * 0.95)]
        print(f"| {name} | {counts[name] / n:.1f} | {statistics.median(values):.1f} | {p95:.1f} |")


if __name__ == "__main__":
    main()
