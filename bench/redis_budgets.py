"""What a model call's budget costs on Redis: one reservation and its settlement
(``RedisBudgetBook``, two round trips), per tree, against one local ``redis-server``.

Each tree runs in its own process (``PYTHONPATH`` at its ``src``), trees interleaved round
by round; reported: µs of wall time per reservation + settlement (median of the rounds), and
the client process's CPU µs.

    python bench/redis_budgets.py                               # this tree
    python bench/redis_budgets.py --trees /tmp/before .         # a worktree beside it
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def cell(url: str, calls: int) -> dict[str, float]:
    """Run ``calls`` reservations and settlements in this process."""
    from shelfhand import UserContext
    from shelfhand.backends.redis import open_redis
    from shelfhand.core.results import Usage
    from shelfhand.usage.budgets import BudgetLimits, BudgetPolicy, TurnMeter
    from shelfhand.usage.redis_budgets import RedisBudgetBook

    book = RedisBudgetBook(open_redis(url))
    policy = BudgetPolicy(
        tenant=BudgetLimits(tokens_per_month=10**12),
        user=BudgetLimits(tokens_per_day=10**12, model_calls_per_day=10**9),
    )
    user = UserContext(tenant_id="acme", user_id="alice")
    meter = TurnMeter(book, policy, user)
    for _ in range(200):  # warm-up (scripts loaded, connection open)
        meter.settle(meter.reserve(8192), Usage(input_tokens=100, output_tokens=20))
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(calls):
        meter.settle(meter.reserve(8192), Usage(input_tokens=100, output_tokens=20))
    return {
        "wall_us": (time.perf_counter() - w0) / calls * 1e6,
        "cpu_us": (time.process_time() - c0) / calls * 1e6,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trees", nargs="+", default=["."])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--cell", nargs=2, metavar=("URL", "CALLS"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.cell:
        print(json.dumps(cell(a.cell[0], int(a.cell[1]))))
        return
    from shelfhand.dev.services import start_redis

    with tempfile.TemporaryDirectory() as tmp:
        server = start_redis(Path(tmp) / "redis")
        try:
            results: dict[str, list[dict[str, float]]] = {t: [] for t in a.trees}
            for _ in range(a.rounds):
                for tree in a.trees:
                    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve() / "src")}
                    out = subprocess.run(
                        [sys.executable, __file__, "--cell", server.url, str(a.calls)],
                        env=env,
                        capture_output=True,
                        text=True,
                        check=True,
                    )
                    results[tree].append(json.loads(out.stdout.strip().splitlines()[-1]))
        finally:
            server.stop()
    print("| tree | reserve + settle, wall µs (median) | client CPU µs |")
    print("|---|---|---|")
    for tree, rows in results.items():
        wall = statistics.median(r["wall_us"] for r in rows)
        cpu = statistics.median(r["cpu_us"] for r in rows)
        print(f"| {tree} | {wall:.1f} | {cpu:.1f} |")


if __name__ == "__main__":
    main()
