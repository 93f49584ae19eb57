"""What a model call's budget costs in each book: one reservation and its settlement, in
the process's memory (``LocalBudgetBook``), the workspace's ``budgets.db`` (SQLite, the
embedded service's book), a local ``redis-server`` and a local PostgreSQL (the two shared
books), books interleaved round by round in one run.

A caller with a tenant and two user budgets: each call charges three counters. Reported:
µs of wall time per reservation + settlement (median of the rounds) and the process's CPU
µs, beside the model call it meters (hundreds of ms for a hosted model).

    python bench/budget_books.py                  # ~1 min
    python bench/budget_books.py --rounds 9 --calls 2000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def measure(book: Any, calls: int) -> tuple[float, float]:
    """Wall and CPU µs per reservation + settlement of ``calls`` calls on ``book``."""
    from shelfhand import UserContext
    from shelfhand.core.results import Usage
    from shelfhand.usage.budgets import BudgetLimits, BudgetPolicy, TurnMeter

    policy = BudgetPolicy(
        tenant=BudgetLimits(tokens_per_month=10**12),
        user=BudgetLimits(tokens_per_day=10**12, model_calls_per_day=10**9),
    )
    meter = TurnMeter(book, policy, UserContext(tenant_id="acme", user_id="alice"))
    used = Usage(input_tokens=100, output_tokens=20)
    for _ in range(min(200, calls)):  # warm-up
        meter.settle(meter.reserve(8192), used)
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(calls):
        meter.settle(meter.reserve(8192), used)
    return (time.perf_counter() - w0) / calls * 1e6, (time.process_time() - c0) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=1000)
    a = ap.parse_args()

    from shelfhand.backends.postgres import open_pool
    from shelfhand.backends.redis import open_redis
    from shelfhand.dev.services import start_postgres, start_redis
    from shelfhand.usage.budgets import LocalBudgetBook
    from shelfhand.usage.pg import PgBudgetBook
    from shelfhand.usage.redis_budgets import RedisBudgetBook
    from shelfhand.usage.sql_budgets import SqliteBudgetBook

    with tempfile.TemporaryDirectory() as tmp:
        redis_server = start_redis(Path(tmp) / "redis")
        pg_server = start_postgres(Path(tmp) / "pg")
        pool = open_pool(pg_server.create_database("budgets"))
        try:
            books: dict[str, Callable[[], Any]] = {
                "memory (LocalBudgetBook)": LocalBudgetBook,
                "SQLite budgets.db (SqliteBudgetBook)": lambda: SqliteBudgetBook.for_workspace(
                    Path(tmp) / "ws"
                ),
                "Redis (RedisBudgetBook)": lambda: RedisBudgetBook(open_redis(redis_server.url)),
                "PostgreSQL (PgBudgetBook)": lambda: PgBudgetBook(pool, url="local"),
            }
            opened = {name: make() for name, make in books.items()}
            results: dict[str, list[tuple[float, float]]] = {name: [] for name in books}
            for _ in range(a.rounds):
                for name, book in opened.items():
                    results[name].append(measure(book, a.calls))
        finally:
            pool.close()
            pg_server.stop()
            redis_server.stop()
    print("| book | reserve + settle, wall µs (median) | CPU µs (median) |")
    print("|---|---:|---:|")
    for name, rows in results.items():
        wall = statistics.median(w for w, _ in rows)
        cpu = statistics.median(c for _, c in rows)
        print(f"| {name} | {wall:.1f} | {cpu:.1f} |")


if __name__ == "__main__":
    main()
