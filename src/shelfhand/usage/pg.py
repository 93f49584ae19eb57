"""The usage ledger in PostgreSQL, shared by several service replicas
(``pip install 'shelfhand[pg]'``): the statements of
:class:`~shelfhand.usage.ledger.SqlUsageLedger` in the table ``pg_usage_ledger``, created by
the migration ``usage_pg_*``."""

from __future__ import annotations

from typing import Any

from shelfhand.backends.pg_database import PgDatabase
from shelfhand.backends.pg_deadline import QUERY_DEADLINE_S
from shelfhand.backends.postgres import pg_migrations
from shelfhand.core.sql import POSTGRES
from shelfhand.usage.ledger import ADD_COST, SCHEMA, SqlUsageLedger, usage_names
from shelfhand.usage.sql_budgets import LEASES as BUDGET_LEASES
from shelfhand.usage.sql_budgets import SCHEMA as BUDGETS_SCHEMA
from shelfhand.usage.sql_budgets import SqlBudgetBook, budget_names

__all__ = ["BUDGETS_PG_MIGRATIONS", "USAGE_PG_MIGRATIONS", "PgBudgetBook", "PgUsageLedger"]

_PREFIX = "pg_"

USAGE_PG_MIGRATIONS = pg_migrations(
    usage_names(POSTGRES, prefix=_PREFIX),
    ("usage_pg_001_initial", SCHEMA),
    ("usage_pg_002_cost", ADD_COST),
)

BUDGETS_PG_MIGRATIONS = pg_migrations(
    budget_names(POSTGRES, prefix=_PREFIX),
    ("budgets_pg_001_initial", BUDGETS_SCHEMA),
    ("budgets_pg_002_leases", BUDGET_LEASES),
)


class PgUsageLedger(SqlUsageLedger):
    """The usage ledger in PostgreSQL.

    Args:
        pool: An open ``psycopg_pool.ConnectionPool``.
        url: The database URL (named, without password, in errors).
        deadline: Seconds a query may wait for the server (see
            :mod:`shelfhand.backends.pg_deadline`); ``None``: no deadline.
    """

    def __init__(self, pool: Any, *, url: str, deadline: float | None = QUERY_DEADLINE_S) -> None:
        self.pool = pool
        self.url = url
        database = PgDatabase(pool, url=url, migrations=USAGE_PG_MIGRATIONS, deadline=deadline)
        super().__init__(database, prefix=_PREFIX)


class PgBudgetBook(SqlBudgetBook):
    """The budget counters in PostgreSQL (tables ``pg_budget_counters`` and
    ``pg_budget_leases``), shared by every
    replica: the service's book with ``database_url`` and no ``redis_url`` (see
    :mod:`shelfhand.usage.sql_budgets`).

    Args:
        pool: An open ``psycopg_pool.ConnectionPool``.
        url: The database URL (named, without password, in errors).
        deadline: Seconds a query may wait for the server; ``None``: no deadline.
    """

    def __init__(self, pool: Any, *, url: str, deadline: float | None = QUERY_DEADLINE_S) -> None:
        self.pool = pool
        self.url = url
        database = PgDatabase(pool, url=url, migrations=BUDGETS_PG_MIGRATIONS, deadline=deadline)
        super().__init__(database, prefix=_PREFIX)
