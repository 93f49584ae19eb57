"""The usage ledger: what each tenant, user and session used, per day (UTC) and model.

One row per (tenant, user, session, day, model), added to at the end of every turn (one
upsert), in the workspace's ``usage.db`` or in PostgreSQL with ``database_url`` (the same
statements, :mod:`shelfhand.core.sql`). Reports sum it by day and by model for a tenant, or
for one user of it: ``GET /v1/usage`` and ``shelfhand usage``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shelfhand.core.context import UserContext
from shelfhand.core.db import Migration, SqliteDatabase
from shelfhand.core.results import Usage
from shelfhand.core.sql import SQLITE, Database, Dialect, Statements

__all__ = ["SCHEMA", "SqlUsageLedger", "SqliteUsageLedger", "UsageRow", "usage_names"]

SCHEMA = """
CREATE TABLE {ledger} (
    tenant TEXT NOT NULL,
    user_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    day TEXT NOT NULL,
    model TEXT NOT NULL,
    turns BIGINT NOT NULL DEFAULT 0,
    model_calls BIGINT NOT NULL DEFAULT 0,
    input_tokens BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    tool_calls BIGINT NOT NULL DEFAULT 0,
    retrievals BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, user_id, session_id, day, model)
);
CREATE INDEX {ledger}_day ON {ledger} (tenant, day);
"""

ADD_COST = "ALTER TABLE {ledger} ADD COLUMN cost {real};"
"""The turns' summed cost (``NULL`` while no turn of the row had a known cost)."""

_COUNTS = ("turns", "model_calls", "input_tokens", "output_tokens", "tool_calls", "retrievals")


def usage_names(dialect: Dialect, *, prefix: str = "") -> dict[str, str]:
    del dialect
    return {"ledger": f"{prefix}usage_ledger"}


MIGRATIONS = [
    Migration(name="usage_001_initial", sql=SQLITE.ddl(SCHEMA, **usage_names(SQLITE))),
    Migration(name="usage_002_cost", sql=SQLITE.ddl(ADD_COST, **usage_names(SQLITE))),
]


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageRow:
    """What was used on one day with one model (summed over the rows reported)."""

    day: str
    model: str
    turns: int = 0
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    tool_calls: int = 0
    retrievals: int = 0
    cost: float | None = None
    """What the turns cost at the configured prices; ``None`` when none had a known cost
    (turns of unknown cost add nothing to it)."""

    def to_dict(self) -> dict[str, Any]:
        counts = {c: getattr(self, c) for c in _COUNTS}
        return {"day": self.day, "model": self.model, **counts, "cost": self.cost}


def day_of(epoch: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(epoch))


class SqlUsageLedger:
    """The ledger in a SQL :class:`~shelfhand.core.sql.Database` (see the module docstring).

    Args:
        database: Where the table is (created by the caller's migrations).
        prefix: Before the table's name (``pg_`` in PostgreSQL).
    """

    def __init__(self, database: Database, *, prefix: str = "") -> None:
        self.database = database
        self._sql = Statements(database.dialect, **usage_names(database.dialect, prefix=prefix))
        updates = ", ".join(f"{c} = {{ledger}}.{c} + excluded.{c}" for c in _COUNTS)
        # a turn of unknown cost leaves the sum as it is (never a made-up figure)
        cost = (
            "cost = CASE WHEN excluded.cost IS NULL THEN {ledger}.cost "
            "ELSE COALESCE({ledger}.cost, 0) + excluded.cost END"
        )
        self._add = self._sql(
            "INSERT INTO {ledger} (tenant, user_id, session_id, day, model, "
            + ", ".join(_COUNTS)
            + ", cost) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (tenant, user_id, session_id, day, model) DO UPDATE SET "
            + updates
            + ", "
            + cost
        )

    def close(self) -> None:
        self.database.close()

    def add(
        self,
        user: UserContext,
        session_id: str,
        model: str,
        usage: Usage,
        *,
        others: Mapping[str, Usage] | None = None,
        at: float | None = None,
        turns: int = 1,
    ) -> None:
        """Add one turn's usage (in one transaction).

        Args:
            user: Whose turn it was.
            session_id: The turn's session.
            model: The turn's own model: its row gets the turn, its tool calls and
                retrievals, and what is left of ``usage`` after ``others``.
            usage: The whole turn's usage (every model call of it).
            others: The part of ``usage`` that other models made (subagents or judges
                with a model of their own), booked on their own rows.
            at: When (default: now), for the day.
            turns: How many turns it counts as (``0``: a search's ranking call through
                ``GET /v1/knowledge/search``, outside any turn).
        """
        day = day_of(time.time() if at is None else at)
        others = {m: u for m, u in (others or {}).items() if m != model and u.model_calls}
        own = usage
        for part in others.values():
            own = _less(own, part)
        rows = [_row_of(user, session_id, day, model, own, turns=turns)]
        rows += [_row_of(user, session_id, day, m, u, turns=0) for m, u in others.items()]
        with self.database.transaction() as conn:
            conn.executemany(self._add, rows)

    def report(
        self,
        owner: UserContext,
        *,
        days: int = 30,
        all_users: bool = False,
        user_id: str | None = None,
        now: float | None = None,
    ) -> list[UsageRow]:
        """Usage by day and model over the last ``days`` days (today included), newest day
        first: ``owner``'s own, or with ``all_users`` the tenant's (``user_id``: one user
        of it)."""
        since = day_of((time.time() if now is None else now) - (days - 1) * 86400)
        sums = ", ".join(f"SUM({c})" for c in (*_COUNTS, "cost"))
        where = "tenant = ? AND day >= ?"
        params: list[Any] = [owner.tenant_id, since]
        who = owner.user_id if not all_users else user_id
        if who is not None:
            where += " AND user_id = ?"
            params.append(who)
        statement = self._sql(
            f"SELECT day, model, {sums} FROM {{ledger}} WHERE {where} "
            "GROUP BY day, model ORDER BY day DESC, model"
        )
        with self.database.connection() as conn:
            rows = conn.execute(statement, params).fetchall()
        return [_row(r) for r in rows]


def _less(usage: Usage, part: Usage) -> Usage:
    """``usage`` without ``part`` (never below zero); its cost unknown when either's is."""
    cost = None
    if usage.cost is not None and part.cost is not None:
        cost = max(0.0, usage.cost - part.cost)
    return Usage(
        input_tokens=max(0, usage.input_tokens - part.input_tokens),
        output_tokens=max(0, usage.output_tokens - part.output_tokens),
        model_calls=max(0, usage.model_calls - part.model_calls),
        tool_calls=usage.tool_calls,
        retrievals=usage.retrievals,
        cost=cost,
    )


def _row_of(
    user: UserContext, session_id: str, day: str, model: str, usage: Usage, *, turns: int
) -> tuple[Any, ...]:
    return (
        user.tenant_id, user.user_id, session_id, day, model, turns, usage.model_calls,
        usage.input_tokens, usage.output_tokens, usage.tool_calls, usage.retrievals, usage.cost,
    )  # fmt: skip


def _row(r: Sequence[Any]) -> UsageRow:
    counts = {c: int(v or 0) for c, v in zip(_COUNTS, r[2:-1], strict=True)}
    cost = None if r[-1] is None else float(r[-1])
    return UsageRow(day=str(r[0]), model=str(r[1]), **counts, cost=cost)


class SqliteUsageLedger(SqlUsageLedger):
    """The ledger in a SQLite file (the workspace's ``usage.db``)."""

    def __init__(self, path: Path | str) -> None:
        super().__init__(SqliteDatabase(path, MIGRATIONS))
