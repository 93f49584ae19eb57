"""One SQL statement for SQLite and PostgreSQL: a store writes it once, a dialect renders it.

The stores that keep the same records in an embedded SQLite file or in a shared PostgreSQL
(sessions, user memories, the audit log) write each statement once, as a template, and run it
through a :class:`Database`, which knows its :class:`Dialect`:

- placeholders are written ``?``; PostgreSQL gets ``%s`` (a ``?`` inside a quoted literal is
  left alone; a ``%`` becomes ``%%``, as its driver wants);
- ``{name}`` slots take the store's own names (``{sessions}``: ``sessions`` or ``pg_sessions``)
  and the dialect's words: ``{real}`` (``REAL`` / ``DOUBLE PRECISION``), ``{id_key}`` (an
  auto-numbered primary key), ``{for_update}`` (row locks, which SQLite does not need: its
  write transactions take the file's lock), ``{without_rowid}``;
- insertion order: SQLite numbers rows itself (``rowid``), a PostgreSQL table has a
  ``BIGSERIAL`` column for it (:meth:`Dialect.insertion_order` and
  :meth:`Dialect.insertion_column`).

Upserts (``ON CONFLICT ... DO NOTHING``) and ``RETURNING`` are written as they are: both
databases read them alike (SQLite since 3.35). ::

    statement = SQLITE.render("SELECT body FROM {messages} WHERE session_id=?", messages="m")
    with database.transaction() as conn:
        rows = conn.execute(statement, (session_id,)).fetchall()

The SQLite :class:`Database` is :class:`shelfhand.core.db.SqliteDatabase`; the PostgreSQL one
is :class:`shelfhand.backends.pg_database.PgDatabase`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "POSTGRES",
    "SQLITE",
    "Database",
    "Dialect",
    "SqlConnection",
    "SqlCursor",
    "Statements",
]

# A quoted literal or identifier (kept as it is), or a placeholder or a percent sign.
_TOKENS = re.compile(r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|[?%]""")


@dataclass(frozen=True, slots=True, kw_only=True)
class Dialect:
    """How one database spells what the templates leave open (see the module docstring)."""

    name: str
    placeholder: str
    """``?`` (SQLite) or ``%s`` (PostgreSQL)."""
    real: str
    """The type of a double-precision number."""
    id_key: str
    """The definition of an auto-numbered integer primary key."""
    for_update: str
    """What locks the rows a ``SELECT`` read until the transaction ends."""
    without_rowid: str
    """The table option for a table keyed by its primary key only."""
    implicit_rowid: bool
    """Every table numbers its rows in insertion order by itself (``rowid``)."""

    def render(self, template: str, **names: str) -> str:
        """The statement ``template`` for this database: its ``{...}`` slots filled (see
        :meth:`ddl`), its ``?`` placeholders in this database's spelling."""
        text = self.ddl(template, **names)
        if self.placeholder == "?":
            return text
        return _TOKENS.sub(self._token, text)

    def ddl(self, template: str, **names: str) -> str:
        """A schema script (no placeholders): ``{...}`` slots filled from ``names`` and the
        dialect's words."""
        words = {
            "real": self.real,
            "id_key": self.id_key,
            "for_update": self.for_update,
            "without_rowid": self.without_rowid,
        }
        return template.format_map({**words, **names})

    def insertion_order(self, column: str) -> str:
        """The column that orders a table's rows by insertion: ``rowid`` or ``column``."""
        return "rowid" if self.implicit_rowid else column

    def insertion_column(self, column: str) -> str:
        """The definition of that column in ``CREATE TABLE`` (after a comma; empty when the
        database numbers rows by itself)."""
        return "" if self.implicit_rowid else f",\n    {column} BIGSERIAL"

    def _token(self, match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "?":
            return self.placeholder
        # the driver reads every "%" as the start of a placeholder, inside quotes too
        return token.replace("%", "%%")


SQLITE = Dialect(
    name="sqlite",
    placeholder="?",
    real="REAL",
    id_key="INTEGER PRIMARY KEY",
    for_update="",
    without_rowid=" WITHOUT ROWID",
    implicit_rowid=True,
)

POSTGRES = Dialect(
    name="postgresql",
    placeholder="%s",
    real="DOUBLE PRECISION",
    id_key="BIGSERIAL PRIMARY KEY",
    for_update=" FOR UPDATE",
    without_rowid="",
    implicit_rowid=False,
)


class SqlCursor(Protocol):
    """What a statement returns (a DB-API cursor)."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> Sequence[Any]: ...


class SqlConnection(Protocol):
    """A connection that runs rendered statements."""

    def execute(self, sql: str, params: Sequence[Any] = (), /) -> SqlCursor: ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]], /) -> object: ...


class Database(Protocol):
    """Where a store's statements run: a SQLite file or a PostgreSQL pool.

    Both context managers give one connection for the block; errors reaching the database
    are :class:`~shelfhand.core.errors.DependencyUnavailableError` where the database says it
    is out of reach (a locked SQLite file, a PostgreSQL that cannot be reached).
    """

    dialect: Dialect

    def connection(self) -> AbstractContextManager[SqlConnection]:
        """A connection whose statements commit one by one."""
        ...

    def transaction(self) -> AbstractContextManager[SqlConnection]:
        """A connection inside one transaction: committed when the block ends, rolled back
        when it raises."""
        ...

    def close(self) -> None:
        """Release what this object opened (a pool passed in stays open)."""
        ...


class Statements:
    """A store's templates, rendered for one database and its names (each once, then kept).

    Args:
        dialect: The database's dialect.
        **names: The store's names for the templates' slots (tables, columns).
    """

    def __init__(self, dialect: Dialect, **names: str) -> None:
        self.dialect = dialect
        self.names = names
        self._rendered: dict[str, str] = {}

    def __call__(self, template: str) -> str:
        """``template`` rendered (see :meth:`Dialect.render`)."""
        rendered = self._rendered.get(template)
        if rendered is None:
            rendered = self._rendered[template] = self.dialect.render(template, **self.names)
        return rendered
