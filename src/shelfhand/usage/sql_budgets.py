"""Budget counters in SQL: the workspace's ``budgets.db`` (SQLite), or PostgreSQL with
``database_url`` (shared by every replica, when no ``redis_url`` is set).

One row per counter (a scope's budget in one period: ``tenant:acme:tokens_per_day:20261206``)
with what is used or reserved and when its period ends. A reservation is one transaction: it
makes sure a row exists for each counter it charges (``ON CONFLICT DO NOTHING``), locks
them in key order (``FOR UPDATE`` in PostgreSQL; SQLite's write transaction holds the
file), reads them, and adds to every one only when all stay within their limits. So two
replicas (or two processes on one workspace) can never both take the last of a budget, and a
restart forgets nothing: before, the embedded service counted in its memory, and a restart
gave every caller their day's budget again.

Settling adds the difference (never below zero). A settlement the database does not take
(PostgreSQL out of reach) is logged and dropped: the reservation, the call's largest possible
size, stays counted until its period ends, an overcount, never an overspend. A reservation
the database does not take fails the call (``DependencyUnavailableError``, 503), never an
unmetered call. Rows of ended periods are deleted now and then.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from shelfhand.core.db import Migration, SqliteDatabase
from shelfhand.core.errors import DependencyUnavailableError
from shelfhand.core.sql import SQLITE, Database, Dialect, Statements
from shelfhand.usage.budgets import Charge

__all__ = ["SCHEMA", "SqlBudgetBook", "SqliteBudgetBook", "budget_names"]

logger = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE {counters} (
    key TEXT PRIMARY KEY,
    used BIGINT NOT NULL,
    reset_at {real} NOT NULL
);
CREATE INDEX {counters}_reset ON {counters} (reset_at);
"""
"""The counters, for either database (see :func:`budget_names`)."""

PRUNE_EVERY = 1000
"""Reservations between two deletions of the rows of ended periods."""


def budget_names(dialect: Dialect, *, prefix: str = "") -> dict[str, str]:
    del dialect  # the same for both databases
    return {"counters": f"{prefix}budget_counters"}


MIGRATIONS = [
    Migration(name="budgets_001_initial", sql=SQLITE.ddl(SCHEMA, **budget_names(SQLITE))),
]


class SqlBudgetBook:
    """A :class:`~shelfhand.usage.budgets.BudgetBook` in a SQL
    :class:`~shelfhand.core.sql.Database` (see the module docstring).

    Args:
        database: Where the table is (created by the caller's migrations).
        prefix: Before the table's name (``pg_`` in PostgreSQL).
    """

    def __init__(self, database: Database, *, prefix: str = "") -> None:
        self.database = database
        self._sql = Statements(database.dialect, **budget_names(database.dialect, prefix=prefix))
        self._create = self._sql(
            "INSERT INTO {counters} (key, used, reset_at) VALUES (?, 0, ?) "
            "ON CONFLICT (key) DO NOTHING"
        )
        self._set = self._sql("UPDATE {counters} SET used = ?, reset_at = ? WHERE key = ?")
        self._read = self._sql("SELECT used, reset_at FROM {counters} WHERE key = ?")
        self._add = self._sql(
            "INSERT INTO {counters} (key, used, reset_at) VALUES (?, ?, ?) "
            "ON CONFLICT (key) DO UPDATE SET used = CASE "
            "WHEN {counters}.used + ? > 0 THEN {counters}.used + ? ELSE 0 END"
        )
        self._prune = self._sql("DELETE FROM {counters} WHERE reset_at < ?")
        self._takes = 0

    def close(self) -> None:
        self.database.close()

    def take(self, charges: Sequence[Charge], now: float) -> Charge | None:
        if not charges:
            return None
        ordered = sorted(charges, key=lambda c: c.key)  # (locks in one order: no deadlock)
        lock = self._lock(len(ordered))
        self._takes += 1
        prune = self._takes % PRUNE_EVERY == 0
        with self.database.transaction() as conn:
            conn.executemany(self._create, [(c.key, c.reset_at) for c in ordered])
            rows = conn.execute(lock, [c.key for c in ordered]).fetchall()
            used = {key: (n if reset_at > now else 0) for key, n, reset_at in rows}
            for charge in charges:
                if used.get(charge.key, 0) + charge.amount > charge.limit:
                    return charge
            conn.executemany(
                self._set,
                [(used.get(c.key, 0) + c.amount, c.reset_at, c.key) for c in ordered],
            )
            if prune:  # a period's rows are never read once it has ended
                conn.execute(self._prune, (now - 60,))
        return None

    @functools.cache  # noqa: B019  (a handful of sizes: a caller has 1 to 4 counters a call)
    def _lock(self, n: int) -> str:
        """The statement that reads and locks ``n`` counters."""
        placeholders = ", ".join("?" for _ in range(n))
        return self._sql(
            f"SELECT key, used, reset_at FROM {{counters}} WHERE key IN ({placeholders}) "
            "ORDER BY key {for_update}"
        )

    def used(self, key: str) -> int:
        with self.database.connection() as conn:
            row = conn.execute(self._read, (key,)).fetchone()
        if row is None or row[1] <= time.time():
            return 0
        return int(row[0])

    def adjust(self, changes: Mapping[str, tuple[int, float]]) -> None:
        """Add each change (settling, or releasing a reservation); a database out of reach
        leaves the reservation counted (logged), and this returns."""
        if not changes:
            return
        rows = [
            (key, max(0, delta), reset_at, delta, delta)
            for key, (delta, reset_at) in sorted(changes.items())
        ]
        try:
            with self.database.transaction() as conn:
                conn.executemany(self._add, rows)
        except DependencyUnavailableError as exc:
            logger.warning("settling budgets: %s; the reservations stay counted", exc)


class SqliteBudgetBook(SqlBudgetBook):
    """The budget counters in one SQLite file (the workspace's ``budgets.db``), kept across
    restarts and shared by the processes that open it."""

    FILENAME = "budgets.db"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        super().__init__(SqliteDatabase(self.path, MIGRATIONS))

    @classmethod
    def for_workspace(cls, workspace: str | Path) -> SqliteBudgetBook:
        """The workspace's book, ``<workspace>/budgets.db``."""
        return cls(Path(workspace) / cls.FILENAME)
