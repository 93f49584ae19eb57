"""A block of PostgreSQL work on the request path that outlives its deadline is hung up:
the blocked call fails at once with DependencyUnavailableError, its connection is dropped,
and the pool's next connection works. A real server, slowed by pg_sleep."""

from __future__ import annotations

import time

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
