"""One statement for SQLite and PostgreSQL: the dialect adapter renders it, a real SQLite file
and a real PostgreSQL run it and agree."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shelfhand.core.db import SqliteDatabase
from shelfhand.core.sql import POSTGRES, SQLITE, Database, Statements

SCHEMA = """
CREATE TABLE {notes} (
    id {id_key},
    text TEXT NOT NULL,
    weight {real} NOT NULL{order_column}
);
"""
NAMES = {"notes": "notes"}


@pytest.fixture(params=["sqlite", "pg"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    if request.param == "sqlite":
        from shelfhand.core.db import Migration

        order = SQLITE.insertion_column("seq")
        schema = SQLITE.ddl(SCHEMA, order_column=order, **NAMES)
        sqlite = SqliteDatabase(tmp_path / "notes.db", [Migration(name="notes_001", sql=schema)])
        yield sqlite
        sqlite.close()
        return
    from shelfhand.backends.pg_database import PgDatabase
    from shelfhand.backends.postgres import PgMigration, open_pool

    url = request.getfixturevalue("pg_url")
    order = POSTGRES.insertion_column("seq")
    schema = POSTGRES.ddl(SCHEMA, order_column=order, **NAMES)
    pool = open_pool(url, max_size=2)
    yield PgDatabase(pool, url=url, migrations=[PgMigration(name="notes_001", sql=schema)])
    pool.close()


def test_a_question_mark_or_percent_sign_in_a_literal_is_text_not_a_placeholder(
    database: Database,
) -> None:
    sql = Statements(database.dialect, **NAMES)
    with database.transaction() as conn:
        conn.executemany(
            sql("INSERT INTO {notes} (text, weight) VALUES (? || ' (why?) 100%', ?)"),
            [("保修", 1.5), ("退货", 7.0)],
        )
    with database.connection() as conn:
        rows = conn.execute(
            sql("SELECT text, weight FROM {notes} WHERE weight > ? ORDER BY id"), (1.0,)
        ).fetchall()
        remainder = conn.execute(sql("SELECT CAST(? AS INTEGER) % 4"), (7,)).fetchone()
    assert [tuple(r) for r in rows] == [("保修 (why?) 100%", 1.5), ("退货 (why?) 100%", 7.0)]
    assert remainder[0] == 3


def test_rows_come_back_in_insertion_order_on_either_database(database: Database) -> None:
    order = database.dialect.insertion_order("seq")
    sql = Statements(database.dialect, order=order, **NAMES)
    with database.connection() as conn:
        for text in ("b", "a", "c"):
            conn.execute(sql("INSERT INTO {notes} (text, weight) VALUES (?, 0)"), (text,))
        rows = conn.execute(sql("SELECT text FROM {notes} ORDER BY {order} DESC")).fetchall()
    assert [r[0] for r in rows] == ["c", "a", "b"]


def test_a_failed_transaction_leaves_nothing_behind(database: Database) -> None:
    sql = Statements(database.dialect, **NAMES)
    with pytest.raises(RuntimeError), database.transaction() as conn:
        conn.execute(sql("INSERT INTO {notes} (text, weight) VALUES (?, 1)"), ("gone",))
        raise RuntimeError("the block failed")
    with database.connection() as conn:
        assert conn.execute(sql("SELECT COUNT(*) FROM {notes}")).fetchone()[0] == 0


def test_postgresql_gets_its_own_placeholders_and_words() -> None:
    template = "SELECT {real} FROM t WHERE a=? AND b='?'{for_update}"
    assert POSTGRES.render(template) == (
        "SELECT DOUBLE PRECISION FROM t WHERE a=%s AND b='?' FOR UPDATE"
    )
    assert SQLITE.render(template) == "SELECT REAL FROM t WHERE a=? AND b='?'"
