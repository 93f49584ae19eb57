"""What shared state costs per operation: in the process vs Redis / PostgreSQL (issue 14.3).

Starts a local redis-server and PostgreSQL 18 (``shelfhand.dev.services``) in a temporary
folder, then times, as medians of ``--repeats`` blocks of ``--n`` operations (wall time,
loopback, one client):

- a governed tool call with a rate limit and a breaker (``Toolkit.execute``), governance in
  the process vs in Redis (one bucket script + breaker before/success scripts per call);
- a session turn-lock claim + release, in the process vs in Redis;
- recording a 4-message turn and reading the session's window back, SQLite vs PostgreSQL.

    python bench/shared_state.py [--n 2000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from shelfhand import Toolkit, UserContext, tool
from shelfhand.backends.postgres import open_pool
from shelfhand.backends.redis import open_redis
from shelfhand.core.context import RunContext
from shelfhand.core.messages import Message, ToolCallBlock
from shelfhand.dev.services import start_postgres, start_redis
from shelfhand.service.turn_lock import LocalTurnLock, RedisTurnLock, TurnLock
from shelfhand.sessions.pg import PgSessionStore
from shelfhand.sessions.store import SessionStore, SqliteSessionStore
from shelfhand.tools.governance import Governance
from shelfhand.tools.redis_state import RedisGovernanceState

USER = UserContext(tenant_id="acme", user_id="alice")
RUN = RunContext(user=USER)


@tool(rate_limit="1000000/second")
async def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first addend.
        b: The second addend.
    """
    return a + b


def median_us(block: Callable[[int], float], n: int, repeats: int) -> float:
    block(min(n, 200))  # warm up
    return statistics.median(block(n) for _ in range(repeats)) / n * 1e6


def governed(kit: Toolkit) -> Callable[[int], float]:
    call = ToolCallBlock(id="c1", name="add", arguments='{"a": 1, "b": 2}')

    async def many(n: int) -> float:
        started = time.perf_counter()
        for _ in range(n):
            report = await kit.execute(call, RUN)
            assert report.outcome == "ok", report.result.content
        return time.perf_counter() - started

    return lambda n: asyncio.run(many(n))


def locking(lock: TurnLock) -> Callable[[int], float]:
    def many(n: int) -> float:
        started = time.perf_counter()
        for i in range(n):
            claim = lock.claim(f"s{i % 64}")
            assert claim is not None
            claim.release()
        return time.perf_counter() - started

    return many


def turns(store: SessionStore) -> Callable[[int], float]:
    def many(n: int) -> float:
        sid = store.create(USER).id
        started = time.perf_counter()
        for _ in range(n):
            turn = [Message.user("保修期多久？"), Message.assistant("12 个月 [1]。")] * 2
            store.record_turn(sid, USER, turn, window=turn, summary="", trace_id="t")
            store.window(sid, USER)
        return time.perf_counter() - started

    return many


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    n, repeats = args.n, args.repeats
    with tempfile.TemporaryDirectory(prefix="shelfhand-bench-") as tmp:
        folder = Path(tmp)
        redis_server = start_redis(folder / "redis")
        pg = start_postgres(folder / "pg")
        try:
            redis = open_redis(redis_server.url)
            url = pg.create_database("bench")
            pool = open_pool(url)
            rows = [
                (
                    "governed call (rate limit + breaker)",
                    median_us(governed(Toolkit([add], governance=Governance())), n, repeats),
                    median_us(
                        governed(
                            Toolkit(
                                [add], governance=Governance(shared=RedisGovernanceState(redis))
                            )
                        ),
                        n,
                        repeats,
                    ),
                ),
                (
                    "turn lock claim + release",
                    median_us(locking(LocalTurnLock()), n, repeats),
                    median_us(locking(RedisTurnLock(redis)), n, repeats),
                ),
                (
                    "record a turn + read its window",
                    median_us(turns(SqliteSessionStore(folder / "sessions.db")), n // 4, repeats),
                    median_us(turns(PgSessionStore(pool, url=url)), n // 4, repeats),
                ),
            ]
            pool.close()
            redis.close()
        finally:
            pg.stop()
            redis_server.stop()
    print(f"{'operation':40} {'in process / SQLite':>20} {'Redis / PostgreSQL':>20}")
    for name, local, shared in rows:
        print(f"{name:40} {local:>17.1f} us {shared:>17.1f} us")


if __name__ == "__main__":
    main()
