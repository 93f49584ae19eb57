"""Whether a turn waiting on its budget counters holds up the rest of the service: against a
running ``shelfhand serve`` whose workspace has ``[budgets]`` (counted in ``budgets.db``),
hold the file's write lock for ``--hold`` seconds (as another process writing would), send
one turn meanwhile, and time ``GET /healthz`` every 100 ms while the turn waits.

With ``--waiting N --other KEY2``: N turns of ``KEY`` wait on the lock at once, and a turn of
``KEY2`` (a caller with no budgets) is timed meanwhile: whether the counters' waits hold up
another caller's turn (its search runs on a worker thread too).

    python bench/budget_stall.py --workspace WS --key KEY --hold 4
    python bench/budget_stall.py --workspace WS --key KEY --hold 4 --waiting 18 --other KEY2
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
    ap.add_argument("--waiting", type=int, default=1, help="turns of KEY waiting at once")
    ap.add_argument("--other", help="the key of a caller without budgets, whose turn is timed")
    a = ap.parse_args()
    if a.other:
        other_turn(a)
        return
    headers = {"Authorization": f"Bearer {a.key}"}
    took: list[float] = []

    def turn() -> None:
        with httpx.Client(base_url=a.url, headers=headers, timeout=120) as c:
            session = c.post("/v1/sessions").json()["id"]
            start = time.perf_counter()
            c.post(f"/v1/sessions/{session}/messages", json={"content": "你好", "stream": False})
            took.append(time.perf_counter() - start)

    holder = threading.Thread(target=hold, args=(a.workspace, a.hold))
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


def hold(workspace: Path, seconds: float) -> None:
    """Hold ``budgets.db``'s write lock for ``seconds``, as another process writing would."""
    conn = sqlite3.connect(workspace / "budgets.db", isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    time.sleep(seconds)
    conn.execute("COMMIT")
    conn.close()


def other_turn(a: argparse.Namespace) -> None:
    """``--waiting`` turns of ``--key`` wait on the held lock; time a turn of ``--other``."""
    done: list[float] = []

    def turn(key: str, into: list[float]) -> None:
        with httpx.Client(base_url=a.url, headers={"Authorization": f"Bearer {key}"}) as c:
            session = c.post("/v1/sessions").json()["id"]
            start = time.perf_counter()
            reply = c.post(
                f"/v1/sessions/{session}/messages",
                json={"content": "E-203 是什么故障？", "stream": False},
                timeout=120,
            )
            reply.raise_for_status()
            into.append(time.perf_counter() - start)

    turn(a.other, [])  # warm
    holder = threading.Thread(target=hold, args=(a.workspace, a.hold))
    holder.start()
    time.sleep(0.2)
    waiting = [threading.Thread(target=turn, args=(a.key, done)) for _ in range(a.waiting)]
    for t in waiting:
        t.start()
    time.sleep(0.5)
    other: list[float] = []
    turn(a.other, other)
    others_done = len(done)
    holder.join()
    for t in waiting:
        t.join()
    print(
        f"the other caller's turn: {other[0]:.3f} s while {a.waiting} turns waited on the lock "
        f"({others_done} of them had ended by then); theirs: {min(done):.2f}-{max(done):.2f} s"
    )


if __name__ == "__main__":
    main()
