"""How long migration ``knowledge_pg_004_tenant_statistics`` takes on a database of N chunks.

    python bench/pg_tenant_migration.py [--chunks 100000]

A local PostgreSQL (started in a temporary folder) is filled with the first N chunks of the
synthetic corpus in three tenants (``bench/tenant_statistics.py``'s), set back to the state
migration 003 left (the all-tenant term table, no tenant tables), and opened again: the
store's open applies the migration, which fills each tenant's counts from the chunks. Prints
the time of that open and what the tenant tables hold.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chunks", type=int, default=100_000)
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    import psycopg
    import tenant_statistics

    from shelfhand.dev.services import start_postgres
    from shelfhand.knowledge.stack import open_pg_store

    server = start_postgres(Path(tempfile.mkdtemp(prefix="shelfhand-bench-pg-")) / "data")
    try:
        url = server.create_database("migration")
        t0 = time.perf_counter()
        tenant_statistics._build_pg(url, args.chunks)
        print(f"{args.chunks:,} chunks stored in {time.perf_counter() - t0:.0f} s")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DROP TABLE knowledge_pg_tenant_terms")
            conn.execute("DROP TABLE knowledge_pg_tenant_stats")
            conn.execute(
                "CREATE TABLE knowledge_pg_terms (field CHAR(1) NOT NULL, term TEXT NOT NULL,"
                " df BIGINT NOT NULL, PRIMARY KEY (field, term))"
            )
            conn.execute(
                "DELETE FROM shelfhand_migrations WHERE name = 'knowledge_pg_004_tenant_statistics'"
            )
        t0 = time.perf_counter()
        open_pg_store(url, None).close()
        print(f"open with migration 004: {time.perf_counter() - t0:.1f} s")
        with psycopg.connect(url) as conn:
            terms = conn.execute("SELECT count(*) FROM knowledge_pg_tenant_terms").fetchone()
            stats = conn.execute("SELECT count(*) FROM knowledge_pg_tenant_stats").fetchone()
        print(
            f"tenant term rows {terms[0] if terms else 0:,}, tenant field rows {stats[0] if stats else 0}"
        )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
