"""Whether a turn waiting on its budget counters holds up the rest of the service: against a
running ``shelfhand serve`` whose workspace has ``[budgets]`` (counted in ``budgets.db``),
hold the file's write lock for ``--hold`` seconds (as another process writing would), send
one turn meanwhile, and time ``GET /healthz`` every 100 ms while the turn waits.

    python bench/budget_stall.py --workspace WS --key KEY --hold 4
"""

from __future__ import annotations

import argparse
import sqlite3
import threading
import time
from pathlib import Path

import httpx


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--url", default="http://127.0.0.1:8093")
    ap.add_argument("--workspace", type=Path, required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--hold", type=float, default=4.0)
    a = ap.parse_args()
    headers = {"Authorization": f"Bearer {a.key}"}
    took: list[float] = []

    def hold() -> None:
        conn = sqlite3.connect(a.workspace / "budgets.db", isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        time.sleep(a.hold)
        conn.execute("COMMIT")
        conn.close()

    def turn() -> None:
        with httpx.Client(base_url=a.url, headers=headers, timeout=120) as c:
            session = c.post("/v1/sessions").json()["id"]
            start = time.perf_counter()
            c.post(f"/v1/sessions/{session}/messages", json={"content": "你好", "stream": False})
            took.append(time.perf_counter() - start)

    holder = threading.Thread(target=hold)
    holder.start()
    time.sleep(0.2)
    asker = threading.Thread(target=turn)
    asker.start()
    time.sleep(0.3)
    worst = 0.0
    for _ in range(int(a.hold * 7)):
        start = time.perf_counter()
        httpx.get(f"{a.url}/healthz", timeout=60)
        worst = max(worst, time.perf_counter() - start)
        time.sleep(0.1)
    holder.join()
    asker.join()
    print(f"/healthz worst latency while the turn waited: {worst:.3f} s; the turn: {took[0]:.2f} s")


if __name__ == "__main__":
    main()
