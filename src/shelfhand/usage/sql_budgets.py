"""Budget counters in SQL: the workspace's ``budgets.db`` (SQLite), or PostgreSQL with
``database_url`` (shared by every replica, when no ``redis_url`` is set).

One row per counter (a scope's budget in one period: ``tenant:acme:tokens_per_day:20261206``)
with what is used or reserved and when its period ends, and one row per lease of a call in
flight on a counter (:class:`~shelfhand.usage.budgets.Lease`). A reservation is one
transaction: it makes sure a row exists for each counter it charges (``ON CONFLICT DO
NOTHING``), locks them in key order (``FOR UPDATE`` in PostgreSQL; SQLite's write transaction
holds the file), gives back their leases whose time has passed (``DELETE ... RETURNING``: a
call's process that stopped mid-call), reads them, and adds to every one only when all stay
within their limits. So two replicas (or two processes on one workspace) can never both take
the last of a budget, and a restart forgets nothing: before, the embedded service counted in
its memory, and a restart gave every caller their day's budget again.

Settling deletes the call's lease and adds the difference (never below zero); a lease already
given back adds what the call spent. A settlement the database does not take (PostgreSQL out
of reach) is logged and kept in the process, and sent again before the book's next write: the
reservation stays counted meanwhile, an overcount, never an overspend. (Should the process
stop before it is sent, the lease is given back when its time passes, and that call's tokens
go uncounted.) A reservation the database does not take fails the call
(``DependencyUnavailableError``, 503), never an unmetered call. Rows of ended periods are
deleted now and then.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from shelfhand.core.db import Migration, SqliteDatabase
from shelfhand.core.errors import DependencyUnavailableError
from shelfhand.core.sql import SQLITE, Database, Dialect, Statements
from shelfhand.usage.budgets import Charge, Lease, settled

__all__ = ["LEASES", "SCHEMA", "SqlBudgetBook", "SqliteBudgetBook", "budget_names"]

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

LEASES = """
CREATE TABLE {leases} (
    id TEXT NOT NULL,
    key TEXT NOT NULL,
    amount BIGINT NOT NULL,
    until {real} NOT NULL,
    reset_at {real} NOT NULL,
    PRIMARY KEY (id, key)
){without_rowid};
CREATE INDEX {leases}_key ON {leases} (key, until);
"""
"""The leases of calls in flight, one row per counter a call holds."""

PRUNE_EVERY = 1000
"""Reservations between two deletions of the rows of ended periods."""


def budget_names(dialect: Dialect, *, prefix: str = "") -> dict[str, str]:
    del dialect  # the same for both databases
    return {"counters": f"{prefix}budget_counters", "leases": f"{prefix}budget_leases"}


MIGRATIONS = [
    Migration(name="budgets_001_initial", sql=SQLITE.ddl(SCHEMA, **budget_names(SQLITE))),
    Migration(name="budgets_002_leases", sql=SQLITE.ddl(LEASES, **budget_names(SQLITE))),
]


class SqlBudgetBook:
    """A :class:`~shelfhand.usage.budgets.BudgetBook` in a SQL
    :class:`~shelfhand.core.sql.Database` (see the module docstring).

    Args:
        database: Where the table is (created by the caller's migrations).
        prefix: Before the table's name (``pg_`` in PostgreSQL).
    """

    blocking = True

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
        self._hold = self._sql(
            "INSERT INTO {leases} (id, key, amount, until, reset_at) VALUES (?, ?, ?, ?, ?)"
        )
        self._end = self._sql("DELETE FROM {leases} WHERE id = ? RETURNING key, amount")
        self._late = self._sql(
            "SELECT COALESCE(SUM(amount), 0) FROM {leases} WHERE key = ? AND until < ?"
        )
        self._held = self._sql(
            "SELECT COALESCE(SUM(amount), 0), MAX(until) FROM {leases} WHERE key = ? AND until >= ?"
        )
        self._prune = self._sql("DELETE FROM {counters} WHERE reset_at < ?")
        self._prune_leases = self._sql("DELETE FROM {leases} WHERE reset_at < ?")
        self._row_locks = bool(database.dialect.for_update)
        """PostgreSQL's; SQLite's write transaction holds the whole file."""
        self._takes = 0
        self._unsent: list[tuple[Lease, int | None]] = []
        """Settlements the database did not take, sent again before the next write."""
        self._unsent_lock = threading.Lock()

    def close(self) -> None:
        self.database.close()

    def take(
        self, charges: Sequence[Charge], now: float, lease: Lease | None = None
    ) -> Charge | None:
        if not charges:
            return None
        if self._unsent:
            self._send_unsent()
        ordered = sorted(charges, key=lambda c: c.key)  # (locks in one order: no deadlock)
        keys = [c.key for c in ordered]
        lock, give_back = self._statements(len(ordered))
        self._takes += 1
        prune = self._takes % PRUNE_EVERY == 0
        with self.database.transaction() as conn:
            conn.executemany(self._create, [(c.key, c.reset_at) for c in ordered])
            rows = conn.execute(lock, [now, *keys]).fetchall()
            used = {key: (n if reset_at > now else 0) for key, n, reset_at, _late in rows}
            if any(late for *_, late in rows):  # calls whose process stopped
                for key, amount in conn.execute(give_back, [*keys, now]).fetchall():
                    used[key] = max(0, used.get(key, 0) - amount)
                conn.executemany(
                    self._set, [(used[k], c.reset_at, k) for c in ordered if (k := c.key) in used]
                )
            for charge in charges:
                if used.get(charge.key, 0) + charge.amount > charge.limit:
                    return charge
            conn.executemany(
                self._set,
                [(used.get(c.key, 0) + c.amount, c.reset_at, c.key) for c in ordered],
            )
            if lease is not None and lease.charges:
                conn.executemany(
                    self._hold,
                    [(lease.id, c.key, c.amount, lease.until, c.reset_at) for c in lease.charges],
                )
            if prune:  # a period's rows are never read once it has ended
                conn.execute(self._prune, (now - 60,))
                conn.execute(self._prune_leases, (now - 60,))
        return None

    @functools.cache  # noqa: B019  (a handful of sizes: a caller has 1 to 4 counters a call)
    def _statements(self, n: int) -> tuple[str, str]:
        """The statements that read and lock ``n`` counters (each with whether it has leases
        past their time), and that give those leases back. In PostgreSQL, a lease being
        settled at that moment is skipped (``SKIP LOCKED``): its settlement ends it, and
        neither waits for the other."""
        placeholders = ", ".join("?" for _ in range(n))
        skip = "{for_update} SKIP LOCKED" if self._row_locks else ""
        return (
            self._sql(
                "SELECT key, used, reset_at, EXISTS (SELECT 1 FROM {leases} l "
                "WHERE l.key = {counters}.key AND l.until < ?) "
                f"FROM {{counters}} WHERE key IN ({placeholders}) ORDER BY key {{for_update}}"
            ),
            self._sql(
                "DELETE FROM {leases} WHERE (id, key) IN (SELECT id, key FROM {leases} "
                f"WHERE key IN ({placeholders}) AND until < ?{skip}) RETURNING key, amount"
            ),
        )

    def used(self, key: str) -> int:
        now = time.time()
        with self.database.connection() as conn:
            row = conn.execute(self._read, (key,)).fetchone()
            if row is None or row[1] <= now:
                return 0
            late = conn.execute(self._late, (key, now)).fetchone()[0]
        return max(0, int(row[0]) - int(late))

    def reserved(self, key: str) -> tuple[int, float | None]:
        with self.database.connection() as conn:
            amount, until = conn.execute(self._held, (key, time.time())).fetchone()
        return int(amount), None if until is None else float(until)

    def settle(self, lease: Lease, spent: int | None) -> None:
        """End the lease (see :meth:`~shelfhand.usage.budgets.BudgetBook.settle`); a database
        out of reach leaves the reservation counted (logged), sent again before the next
        write, and this returns."""
        if self._unsent:
            self._send_unsent()
        try:
            self._settle(lease, spent)
        except DependencyUnavailableError as exc:
            logger.warning("settling budgets: %s; the reservations stay counted", exc)
            with self._unsent_lock:
                self._unsent.append((lease, spent))

    def _settle(self, lease: Lease, spent: int | None) -> None:
        with self.database.transaction() as conn:
            # (a reservation giving this lease back at this moment: waited for, then found
            # gone, and what was spent added)
            held = dict(conn.execute(self._end, (lease.id,)).fetchall())
            rows = []
            for charge in sorted(lease.charges, key=lambda c: c.key):
                delta = settled(charge, held.get(charge.key), spent)
                if delta:
                    rows.append((charge.key, max(0, delta), charge.reset_at, delta, delta))
            if rows:
                conn.executemany(self._add, rows)

    def _send_unsent(self) -> None:
        """Send the settlements the database did not take; those it still does not take
        wait for the next write."""
        with self._unsent_lock:
            unsent, self._unsent = self._unsent, []
        for i, (lease, spent) in enumerate(unsent):
            try:
                self._settle(lease, spent)
            except DependencyUnavailableError:
                with self._unsent_lock:
                    self._unsent[:0] = unsent[i:]
                return


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
