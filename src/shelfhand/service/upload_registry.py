"""Who owns each uploaded source: :class:`UploadRegistry`, a table in ``sessions.db``.

Two tables: ``knowledge_uploads`` (owned sources) and ``knowledge_uploads_pending`` (the
intent of an upload in flight, promoted by :meth:`UploadRegistry.commit` or dropped by
:meth:`UploadRegistry.abandon`; see "Crash safety" in :mod:`shelfhand.service.uploads`). With
``database_url`` the same records live in PostgreSQL
(:class:`~shelfhand.service.pg_uploads.PgUploadRegistry`); both fit :class:`UploadRecords`.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from shelfhand.core.db import Migration, apply_migrations, connect, transaction

__all__ = ["MIGRATIONS", "UploadRecord", "UploadRecords", "UploadRegistry"]

MIGRATIONS = [
    Migration(
        name="uploads_001_initial",
        sql="""
CREATE TABLE knowledge_uploads (
    source TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    filename TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    uploaded_by TEXT NOT NULL,
    uploaded_at REAL NOT NULL
);
CREATE INDEX knowledge_uploads_tenant ON knowledge_uploads (tenant_id, uploaded_at);
""",
    ),
    Migration(
        name="uploads_002_pending",
        sql="""
CREATE TABLE knowledge_uploads_pending (
    source TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    filename TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    uploaded_by TEXT NOT NULL,
    uploaded_at REAL NOT NULL
);
""",
    ),
]

_OWNED = "knowledge_uploads"
_PENDING = "knowledge_uploads_pending"
_COLUMNS = "source, tenant_id, filename, bytes, uploaded_by, uploaded_at"


@dataclass(frozen=True, slots=True, kw_only=True)
class UploadRecord:
    source: str
    tenant_id: str
    filename: str
    bytes: int
    uploaded_by: str
    uploaded_at: float


class UploadRecords(Protocol):
    """Source ownership: :class:`UploadRegistry` (``sessions.db``) or, with ``database_url``,
    :class:`~shelfhand.service.pg_uploads.PgUploadRegistry` (shared by replicas and workers)."""

    def close(self) -> None: ...
    def owner_of(self, source: str) -> str | None: ...
    def get(self, source: str) -> UploadRecord | None: ...
    def record(self, records: Sequence[UploadRecord]) -> None: ...
    def begin(self, records: Sequence[UploadRecord]) -> None: ...
    def commit(self, sources: Sequence[str]) -> None: ...
    def abandon(self, sources: Sequence[str]) -> None: ...
    def pending(self) -> list[UploadRecord]: ...
    def all_records(self) -> list[UploadRecord]: ...
    def usage(self, tenant_id: str, *, excluding: Sequence[str] = ()) -> tuple[int, int]: ...
    def for_tenant(self, tenant_id: str) -> list[UploadRecord]: ...
    def remove(self, tenant_id: str, source: str) -> bool: ...


class UploadRegistry:
    """Which tenant owns each uploaded source (a table in ``sessions.db``)."""

    def __init__(self, path: Path | str) -> None:
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection = connect(path)
        apply_migrations(self._conn, MIGRATIONS)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _select(
        self, table: str, where: str = "", params: Sequence[object] = ()
    ) -> list[UploadRecord]:
        """The records of ``table`` (owned or pending) matching ``where``."""
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_COLUMNS} FROM {table} {where}", tuple(params)
            ).fetchall()
        return [_record(r) for r in rows]

    def owner_of(self, source: str) -> str | None:
        record = self.get(source)
        return None if record is None else record.tenant_id

    def get(self, source: str) -> UploadRecord | None:
        found = self._select(_OWNED, "WHERE source=?", (source,))
        return found[0] if found else None

    def record(self, records: Sequence[UploadRecord]) -> None:
        """Record owned sources directly (an upload goes through :meth:`begin` and
        :meth:`commit` instead)."""
        self._write(_OWNED, records)

    def begin(self, records: Sequence[UploadRecord]) -> None:
        """Write the intent of an upload (pending rows) before its ingest starts."""
        self._write(_PENDING, records)

    def _write(self, table: str, records: Sequence[UploadRecord]) -> None:
        with self._lock, transaction(self._conn):
            self._conn.executemany(
                f"INSERT OR REPLACE INTO {table} ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (r.source, r.tenant_id, r.filename, r.bytes, r.uploaded_by, r.uploaded_at)
                    for r in records
                ],
            )

    def commit(self, sources: Sequence[str]) -> None:
        """Promote pending rows to owned ones, in one transaction."""
        marks = ",".join("?" * len(sources))
        with self._lock, transaction(self._conn):
            self._conn.execute(
                f"INSERT OR REPLACE INTO {_OWNED} ({_COLUMNS})"
                f" SELECT {_COLUMNS} FROM {_PENDING} WHERE source IN ({marks})",
                list(sources),
            )
            self._conn.execute(f"DELETE FROM {_PENDING} WHERE source IN ({marks})", list(sources))

    def abandon(self, sources: Sequence[str]) -> None:
        """Drop pending rows (the upload was refused or rolled back)."""
        with self._lock, transaction(self._conn):
            self._conn.executemany(
                f"DELETE FROM {_PENDING} WHERE source=?", [(s,) for s in sources]
            )

    def pending(self) -> list[UploadRecord]:
        """Pending rows: uploads that started and never finished (a crash)."""
        return self._select(_PENDING, "ORDER BY source")

    def all_records(self) -> list[UploadRecord]:
        return self._select(_OWNED, "ORDER BY source")

    def usage(self, tenant_id: str, *, excluding: Sequence[str] = ()) -> tuple[int, int]:
        """Bytes and files the tenant keeps, leaving out ``excluding`` (about to be replaced)."""
        skip = set(excluding)
        kept = [r for r in self.for_tenant(tenant_id) if r.source not in skip]
        return sum(r.bytes for r in kept), len(kept)

    def for_tenant(self, tenant_id: str) -> list[UploadRecord]:
        return self._select(
            _OWNED, "WHERE tenant_id=? ORDER BY uploaded_at DESC, source", (tenant_id,)
        )

    def remove(self, tenant_id: str, source: str) -> bool:
        with self._lock:
            cur = self._conn.execute(
                f"DELETE FROM {_OWNED} WHERE tenant_id=? AND source=?", (tenant_id, source)
            )
        return cur.rowcount > 0


def _record(r: Sequence[object]) -> UploadRecord:
    return UploadRecord(
        source=str(r[0]),
        tenant_id=str(r[1]),
        filename=str(r[2]),
        bytes=int(r[3]),  # type: ignore[call-overload]
        uploaded_by=str(r[4]),
        uploaded_at=float(r[5]),  # type: ignore[arg-type]
    )
