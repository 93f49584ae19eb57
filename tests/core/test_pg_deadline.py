"""A block of PostgreSQL work on the request path that outlives its deadline is hung up:
the blocked call fails at once with DependencyUnavailableError, its connection is dropped,
and the pool's next connection works. A real server, slowed by pg_sleep."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from shelfhand.backends.pg_database import PgDatabase
from shelfhand.backends.postgres import open_pool
from shelfhand.core.errors import DependencyUnavailableError


@pytest.fixture
def database(pg_url: str):  # type: ignore[no-untyped-def]
    pool = open_pool(pg_url, max_size=2)
    yield PgDatabase(pool, url=pg_url, deadline=0.5)
    pool.close()


def test_a_query_past_the_deadline_fails_at_once_and_the_next_one_works(
    database: PgDatabase,
) -> None:
    started = time.monotonic()
    with (
        pytest.raises(DependencyUnavailableError, match=r"did not answer within 0\.5 s"),
        database.connection() as conn,
    ):
        conn.execute("SELECT pg_sleep(20)")
    assert time.monotonic() - started < 5  # hung up, not waited for
    for _ in range(3):  # the hung-up connection was dropped: none of these gets it
        with database.connection() as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_transaction_past_the_deadline_is_rolled_back(database: PgDatabase) -> None:
    with database.connection() as conn:
        conn.execute("CREATE TABLE hung (n int)")
    with pytest.raises(DependencyUnavailableError), database.transaction() as conn:
        conn.execute("INSERT INTO hung VALUES (1)")
        conn.execute("SELECT pg_sleep(20)")
    with database.connection() as conn:
        assert conn.execute("SELECT count(*) FROM hung").fetchone() == (0,)


def test_blocks_within_the_deadline_are_left_alone(database: PgDatabase) -> None:
    for _ in range(20):
        with database.transaction() as conn:
            conn.execute("SELECT pg_sleep(0.01)")
    time.sleep(0.7)  # past the deadlines of blocks that ended: none hangs up a connection
    with database.connection() as conn:
        assert conn.execute("SELECT 2").fetchone() == (2,)


@pytest.fixture
def locker(pg_url: str):  # type: ignore[no-untyped-def]
    """A second connection that can hold a table's lock (a migration, a dump: the server
    answers everyone else, not the statements that need that table)."""
    import psycopg

    conn = psycopg.connect(pg_url)
    yield conn
    conn.rollback()
    conn.close()


def test_trace_reads_and_audit_writes_stuck_on_a_lock_end_in_time_the_retention_waits(
    pg_url: str, locker: Any
) -> None:
    from shelfhand.core.context import UserContext
    from shelfhand.tools.pg_audit import PgAuditLog
    from shelfhand.traces.pg import PgTraceStore

    pool = open_pool(pg_url, max_size=4)
    traces = PgTraceStore(pool, url=pg_url, deadline=0.5)
    audit = PgAuditLog(pool, url=pg_url, deadline=0.5, flush_interval=3600)
    try:
        locker.execute("LOCK TABLE pg_traces, audit_pg_log IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        with pytest.raises(DependencyUnavailableError, match="did not answer within"):
            traces.recent(UserContext(tenant_id="t1", user_id="alice"))
        audit.record(
            tool="lookup", tenant="t1", user="alice", trace_id="t", request_id="r",
            call_id="c", arguments={}, canonical=None, decision="allow", outcome="ok",
            duration_ms=1.0,
        )  # fmt: skip
        with pytest.raises(DependencyUnavailableError):  # (the writer thread logs it)
            audit.flush()
        assert time.monotonic() - started < 5

        # the retention may run long on purpose: it waits for the lock, past the deadline
        pruned: list[int] = []
        thread = threading.Thread(target=lambda: pruned.append(traces.prune(max_traces=10)))
        thread.start()
        time.sleep(1.0)
        locker.rollback()  # the lock goes
        thread.join(timeout=10)
        assert pruned == [0]
    finally:
        audit.close()
        pool.close()
