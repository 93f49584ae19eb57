"""PostgreSQL plumbing: versioned migrations, clear errors, and the local dev servers."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from shelfhand.backends.postgres import (
    IdleCheck,
    PgMigration,
    applied_pg_migrations,
    apply_pg_migrations,
    check_postgres,
    connect,
    open_pool,
    pg_errors,
    redact_url,
)
from shelfhand.core.errors import ConfigurationError, DependencyUnavailableError
from shelfhand.core.settings import Settings
from shelfhand.dev.services import LocalPostgres, free_port

MIGRATIONS = [
    PgMigration(name="t_001", sql="CREATE TABLE t (id INT PRIMARY KEY, name TEXT NOT NULL)"),
    PgMigration(name="t_002", sql="ALTER TABLE t ADD COLUMN note TEXT; CREATE INDEX ON t (name)"),
]


def test_migrations_apply_once_even_from_two_processes_at_once(pg_url: str) -> None:
    results: list[int] = []

    def run() -> None:
        with connect(pg_url) as conn:
            results.append(apply_pg_migrations(conn, MIGRATIONS))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [0, 0, 0, 2]
    with connect(pg_url) as conn:
        assert applied_pg_migrations(conn) == ["t_001", "t_002"]
        conn.execute("INSERT INTO t (id, name, note) VALUES (1, '保修', 'x')")
        # a later version adds one more; the earlier ones are not run again
        more = [*MIGRATIONS, PgMigration(name="t_003", sql="ALTER TABLE t ADD COLUMN n INT")]
        assert apply_pg_migrations(conn, more) == 1
        assert conn.execute("SELECT name FROM t").fetchone() == ("保修",)


def test_a_failing_migration_names_itself_and_changes_nothing(pg_url: str) -> None:
    bad = [*MIGRATIONS, PgMigration(name="t_bad", sql="CREATE TABLE u (id INT); SELEC 1")]
    with connect(pg_url) as conn:
        with pytest.raises(ConfigurationError, match="t_bad"):
            apply_pg_migrations(conn, bad)
        # the whole run is one transaction: nothing of it stays
        assert applied_pg_migrations(conn) == []
        assert conn.execute("SELECT to_regclass('u')").fetchone() == (None,)


def test_duplicate_migration_names_are_refused(pg_url: str) -> None:
    with connect(pg_url) as conn, pytest.raises(ValueError, match="duplicate"):
        apply_pg_migrations(conn, [MIGRATIONS[0], MIGRATIONS[0]])


def test_an_unreachable_server_fails_fast_without_showing_the_password() -> None:
    url = f"postgresql://app:s3cret@127.0.0.1:{free_port()}/db"
    with pytest.raises(ConfigurationError) as err:
        connect(url, timeout=1)
    assert "unreachable" in str(err.value) and "s3cret" not in str(err.value)
    with pytest.raises(ConfigurationError) as err:
        open_pool(url, timeout=1)
    assert "s3cret" not in str(err.value)


def test_redact_url() -> None:
    assert redact_url("postgresql://app:pw@h:5432/db") == "postgresql://app:***@h:5432/db"
    assert redact_url("postgresql://h/db") == "postgresql://h/db"


def test_check_postgres_reports_the_version_and_enables_pgvector(pg_url: str) -> None:
    assert check_postgres(pg_url, need_vector=True).startswith("18")
    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT extname FROM pg_extension WHERE extname = 'vector'").fetchone()
    assert row == ("vector",)


def test_a_pool_hands_out_autocommit_connections(pg_url: str) -> None:
    pool = open_pool(pg_url, max_size=2)
    try:
        with pool.connection() as conn:
            assert conn.autocommit
            assert conn.execute("SELECT 'ok'").fetchone() == ("ok",)
    finally:
        pool.close()


def _counting_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the pool's round-trip checks (``ConnectionPool.check_connection``)."""
    from psycopg_pool import ConnectionPool

    checks: list[int] = []
    real = ConnectionPool.check_connection

    def counted(conn: psycopg.Connection[object]) -> None:
        checks.append(1)
        real(conn)

    monkeypatch.setattr(ConnectionPool, "check_connection", staticmethod(counted))
    return checks


def test_a_connection_returned_just_now_is_handed_out_without_a_round_trip(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    checks = _counting_checks(monkeypatch)
    pool = open_pool(pg_url, max_size=1)
    try:
        for _ in range(5):
            with pool.connection() as conn:
                conn.execute("SELECT 1")
        assert len(checks) == 1  # the first checkout (never handed out before) only
    finally:
        pool.close()
    checks.clear()
    every = open_pool(pg_url, max_size=1, idle_check_s=0)  # 0: check every checkout
    try:
        for _ in range(5):
            with every.connection() as conn:
                conn.execute("SELECT 1")
        assert len(checks) == 5
    finally:
        every.close()


def _kill_backend(pg_url: str, pid: int) -> None:
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


def test_an_idle_connection_whose_server_side_died_is_replaced_before_use(pg_url: str) -> None:
    pool = open_pool(pg_url, max_size=1, idle_check_s=0.2)
    try:
        with pool.connection() as conn:
            pid = conn.info.backend_pid
        _kill_backend(pg_url, pid)
        time.sleep(0.3)  # idle past the threshold: checked, found dead, replaced
        with pool.connection() as conn:
            assert conn.execute("SELECT 'ok'").fetchone() == ("ok",)
            assert conn.info.backend_pid != pid
    finally:
        pool.close()


def _backend_gone(pg_url: str, pid: int) -> None:
    """Wait until the server has no backend ``pid`` (it sent its goodbye and exited)."""
    deadline = time.monotonic() + 10
    with psycopg.connect(pg_url, autocommit=True) as admin:
        while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            assert time.monotonic() < deadline, f"backend {pid} still there"
            time.sleep(0.02)


def test_a_recent_connection_the_server_closed_is_replaced_before_use(pg_url: str) -> None:
    # handed out a moment ago, so not checked by a round trip; but the server's goodbye waits
    # on its socket (a poll sees it): before, the next statement on it failed with a 503
    pool = open_pool(pg_url, max_size=1, idle_check_s=60)
    try:
        with pool.connection() as conn:
            pid = conn.info.backend_pid
        _kill_backend(pg_url, pid)
        _backend_gone(pg_url, pid)
        with pool.connection() as conn:
            assert conn.execute("SELECT 'ok'").fetchone() == ("ok",)
            assert conn.info.backend_pid != pid
    finally:
        pool.close()


def test_a_connection_whose_server_side_dies_while_out_fails_clearly_then_the_pool_recovers(
    pg_url: str,
) -> None:
    pool = open_pool(pg_url, max_size=1, idle_check_s=60)
    try:
        with (
            pytest.raises(DependencyUnavailableError) as failed,
            pg_errors(pg_url),
            pool.connection() as conn,
        ):
            pid = conn.info.backend_pid
            _kill_backend(pg_url, pid)
            _backend_gone(pg_url, pid)
            conn.execute("SELECT 1")
        assert failed.value.dependency == "postgresql"
        with pool.connection() as conn:  # the broken one was dropped when it came back
            assert conn.execute("SELECT 'ok'").fetchone() == ("ok",)
    finally:
        pool.close()


def _grown_to(pool: Any, n: int) -> None:
    """Make the pool hold ``n`` connections (taken at once, then all given back)."""
    conns = [pool.getconn() for _ in range(n)]
    for conn in conns:
        conn.execute("SELECT 1")
        pool.putconn(conn)


def test_after_a_restart_the_first_request_gets_a_working_connection_at_once(
    pg_server: LocalPostgres, pg_url: str
) -> None:
    # every idle connection is broken by the restart; each found broken made the request
    # sleep (psycopg_pool's back-off: 1 s, 2 s, 4 s): with six, 503 after the 5 s timeout
    pool = open_pool(pg_url, max_size=6, idle_check_s=0)
    try:
        _grown_to(pool, 6)
        pg_server.stop()
        pg_server.start()
        started = time.monotonic()
        with pool.connection() as conn:
            assert conn.execute("SELECT 'ok'").fetchone() == ("ok",)
        assert time.monotonic() - started < 2.5  # 0.02 s here; 5 s (PoolTimeout) before
    finally:
        pool.close()


def test_while_postgresql_is_down_the_pool_connects_only_for_requests_a_few_times_a_second(
    pg_server: LocalPostgres, pg_url: str
) -> None:
    pool = open_pool(pg_url, max_size=4, timeout=3, idle_check_s=0.5)
    try:
        with pool.connection() as conn:
            conn.execute("SELECT 1")
        pg_server.stop()
        try:
            time.sleep(1.0)  # idle past the check's threshold: found broken, not used
            assert pool.get_stats().get("connections_errors", 0) == 0  # no request: no tries
            started = time.monotonic()
            with (
                pytest.raises(DependencyUnavailableError),
                pg_errors(pg_url),
                pool.connection() as conn,
            ):
                conn.execute("SELECT 1")
            waited = time.monotonic() - started
            tries = pool.get_stats().get("connections_errors", 0)
            assert 2.5 < waited < 6 and 1 <= tries <= 4 * waited + 4  # about 2 a second
        finally:
            pg_server.start()
        with pool.connection() as conn:  # back: at once
            assert conn.execute("SELECT 'ok'").fetchone() == ("ok",)
    finally:
        pool.close()


def test_the_idle_check_checks_a_connection_it_never_saw_returned() -> None:
    calls: list[str] = []

    class Conn:
        autocommit = True

        def execute(self, query: str) -> None:
            calls.append(query)

    IdleCheck(60)(Conn())  # type: ignore[arg-type]
    assert calls == [""]


def test_the_local_server_survives_a_crash_and_restarts(
    pg_server: LocalPostgres, pg_url: str
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (v TEXT)")
        conn.execute("INSERT INTO kept VALUES ('E-203')")
    pg_server.stop(kill=True)  # kill -9 of the postmaster and its backends
    assert not pg_server.running()
    with pytest.raises(ConfigurationError):
        connect(pg_url, timeout=1)
    pg_server.start()
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT v FROM kept").fetchone() == ("E-203",)


def test_redis_fixture_gives_a_flushed_server(redis_url: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    assert client.dbsize() == 0
    client.set("k", "v")
    client.close()


def test_settings_read_and_check_the_service_urls(tmp_path: object) -> None:
    env = {
        "SHELFHAND_DATABASE_URL": "postgresql://app:pw@db:5432/shelf",
        "SHELFHAND_REDIS_URL": "redis://cache:6379/0",
    }
    s = Settings.load(str(tmp_path), env=env)
    assert s.database_url == env["SHELFHAND_DATABASE_URL"]
    assert s.redis_url == env["SHELFHAND_REDIS_URL"]
    assert "pw" not in repr(s)
    with pytest.raises(ConfigurationError, match="SHELFHAND_DATABASE_URL") as err:
        Settings.load(str(tmp_path), env={"SHELFHAND_DATABASE_URL": "mysql://u:pw@h/db"})
    assert "pw" not in str(err.value)
    with pytest.raises(ConfigurationError, match="SHELFHAND_REDIS_URL"):
        Settings.load(str(tmp_path), env={"SHELFHAND_REDIS_URL": "http://cache"})
    with pytest.raises(ConfigurationError, match="needs a PostgreSQL URL"):
        Settings.load(str(tmp_path), env={"SHELFHAND_RETRIEVAL_MODE": "pg"})
    assert Settings.load(str(tmp_path), env={}).database_url is None
