"""What the PostgreSQL pool's check per checkout costs a search, in one process, interleaved.

A PostgreSQL + Qdrant Edge store built by ``bench/qdrant_store.py latency`` (its
``--database-url`` and ``--workspace``) is opened once; its pool then hands out connections
with the check of this tree (:class:`shelfhand.backends.postgres.IdleCheck`: a round trip only
for a connection not handed out in the last 2 s) or with a round trip at every checkout
(``ConnectionPool.check_connection``, what the pool did before), switched search by search,
the order flipped every round. Wall ms per search (query vectors given), p50 and p95, and the
checkouts per search.

    python bench/qdrant_store.py latency --chunks 20000 --stores none \\
        --database-url postgresql://.../bench20k --workspace /tmp/w20k        # builds it once
    python bench/pg_pool_check.py --chunks 20000 --database-url postgresql://.../bench20k \\
        --workspace /tmp/w20k
"""

from __future__ import annotations

import argparse
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

    from shelfhand.knowledge.stack import open_pg_store

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--database-url", required=True)
    ap.add_argument("--workspace", required=True, help="bench/qdrant_store.py's workspace")
    ap.add_argument("--chunks", type=int, default=20_000)
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--mode", default="hybrid", choices=["keyword", "vector", "hybrid"])
    a = ap.parse_args()
    corpus = rl.make_corpus(a.chunks, seed=0, n_queries=a.queries)
    kb = open_pg_store(
        a.database_url, None, qdrant_url=str(Path(a.workspace) / f"qdrant-{a.chunks}")
    )
    pool = kb.store.db.pool
    idle_check = pool._check
    checks = [0]
    every_time = ConnectionPool.check_connection

    def checked(conn: Any) -> None:
        checks[0] += 1
        every_time(conn)

    cases = {"check every checkout (before)": checked, "IdleCheck (this tree)": idle_check}
    times: dict[str, list[float]] = {name: [] for name in cases}
    load = os.getloadavg()[0]
    for r in range(a.rounds):
        names = list(cases) if r % 2 == 0 else list(reversed(cases))
        for query, vector in zip(corpus.queries, corpus.qvecs, strict=True):
            for user in rl.USERS.values():
                for name in names:
                    pool._check = cases[name]
                    t0 = time.perf_counter()
                    kb.retriever.search_timed(
                        query, k=10, user=user, mode=a.mode, query_vectors={rl.SPACE: vector}
                    )
                    times[name].append((time.perf_counter() - t0) * 1000)
    kb.close()
    per_search = checks[0] / len(times["check every checkout (before)"])
    print(
        f"{a.mode} searches, {a.chunks:,} chunks, {len(next(iter(times.values())))} per case"
        f" (3 callers); load {load:.1f} → {os.getloadavg()[0]:.1f};"
        f" {per_search:.1f} checkouts per search\n"
    )
    print("| pool check | p50 ms | p95 ms |\n|---|---:|---:|")
    for name, values in times.items():
        values.sort()
        p95 = values[int(len(values) * 0.95)]
        print(f"| {name} | {statistics.median(values):.1f} | {p95:.1f} |")


if __name__ == "__main__":
    main()
