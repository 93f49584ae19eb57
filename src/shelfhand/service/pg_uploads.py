"""The upload registry in PostgreSQL (``database_url``): which tenant owns each uploaded source.

The same records as :class:`~shelfhand.service.uploads.UploadRegistry` (owned rows and the
pending intent of an upload in flight), shared by every replica and worker: an upload that a
worker ingests is listed and deletable through any replica. Tables are created by versioned
migrations (``uploads_pg_*``); PostgreSQL going away is
:class:`~shelfhand.core.errors.DependencyUnavailableError` (503).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from shelfhand.backends.postgres import PgMigration, open_pool, pg_errors
from shelfhand.service.uploads import UploadRecord

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

__all__ = ["PgUploadRegistry"]

MIGRATIONS = [
    PgMigration(
        name="uploads_pg_001_initial",
        sql="""
CREATE TABLE uploads_pg_owned (
    source TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    filename TEXT NOT NULL,
    bytes BIGINT NOT NULL,
    uploaded_by TEXT NOT NULL,
    uploaded_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX uploads_pg_owned_tenant ON uploads_pg_owned (tenant_id, uploaded_at);
CREATE TABLE uploads_pg_pending (LIKE uploads_pg_owned INCLUDING ALL);
""",
    )
]

_COLUMNS = "source, tenant_id, filename, bytes, uploaded_by, uploaded_at"


def _record(r: Sequence[Any]) -> UploadRecord:
    return UploadRecord(
        source=str(r[0]),
        tenant_id=str(r[1]),
        filename=str(r[2]),
        bytes=int(r[3]),
        uploaded_by=str(r[4]),
        uploaded_at=float(r[5]),
    )


class PgUploadRegistry:
    """Source ownership in PostgreSQL (the interface of :class:`UploadRegistry`)."""

    def __init__(self, pool: ConnectionPool[Any], *, url: str) -> None:
        self.pool = pool
        self.url = url

    @classmethod
    def open(cls, url: str) -> PgUploadRegistry:
        return cls(open_pool(url, max_size=4, migrations=MIGRATIONS), url=url)

    def close(self) -> None:
        self.pool.close()

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        with pg_errors(self.url), self.pool.connection() as conn:
            yield conn

    def owner_of(self, source: str) -> str | None:
        record = self.get(source)
        return None if record is None else record.tenant_id

    def get(self, source: str) -> UploadRecord | None:
        with self._conn() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM uploads_pg_owned WHERE source=%s", (source,)
            ).fetchone()
        return None if row is None else _record(row)

    def record(self, records: Sequence[UploadRecord]) -> None:
        self._write("uploads_pg_owned", records)

    def begin(self, records: Sequence[UploadRecord]) -> None:
        self._write("uploads_pg_pending", records)

    def _write(self, table: str, records: Sequence[UploadRecord]) -> None:
        with self._conn() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {table} ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (source) DO UPDATE SET tenant_id=EXCLUDED.tenant_id,"
                " filename=EXCLUDED.filename, bytes=EXCLUDED.bytes,"
                " uploaded_by=EXCLUDED.uploaded_by, uploaded_at=EXCLUDED.uploaded_at",
                [
                    (r.source, r.tenant_id, r.filename, r.bytes, r.uploaded_by, r.uploaded_at)
                    for r in records
                ],
            )

    def commit(self, sources: Sequence[str]) -> None:
        """Promote pending rows to owned ones, in one transaction."""
        with self._conn() as conn, conn.transaction():
            conn.execute(
                f"INSERT INTO uploads_pg_owned ({_COLUMNS})"
                f" SELECT {_COLUMNS} FROM uploads_pg_pending WHERE source = ANY(%s)"
                " ON CONFLICT (source) DO UPDATE SET tenant_id=EXCLUDED.tenant_id,"
                " filename=EXCLUDED.filename, bytes=EXCLUDED.bytes,"
                " uploaded_by=EXCLUDED.uploaded_by, uploaded_at=EXCLUDED.uploaded_at",
                (list(sources),),
            )
            conn.execute("DELETE FROM uploads_pg_pending WHERE source = ANY(%s)", (list(sources),))

    def abandon(self, sources: Sequence[str]) -> None:
        with self._conn() as conn:
            conn.execute("DELETE FROM uploads_pg_pending WHERE source = ANY(%s)", (list(sources),))

    def pending(self) -> list[UploadRecord]:
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM uploads_pg_pending ORDER BY source"
            ).fetchall()
        return [_record(r) for r in rows]

    def all_records(self) -> list[UploadRecord]:
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM uploads_pg_owned ORDER BY source"
            ).fetchall()
        return [_record(r) for r in rows]

    def usage(self, tenant_id: str, *, excluding: Sequence[str] = ()) -> tuple[int, int]:
        with self._conn() as conn:
            row = conn.execute(
                "SELECT COALESCE(sum(bytes), 0), count(*) FROM uploads_pg_owned"
                " WHERE tenant_id=%s AND NOT (source = ANY(%s))",
                (tenant_id, list(excluding)),
            ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    def for_tenant(self, tenant_id: str) -> list[UploadRecord]:
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM uploads_pg_owned WHERE tenant_id=%s"
                " ORDER BY uploaded_at DESC, source",
                (tenant_id,),
            ).fetchall()
        return [_record(r) for r in rows]

    def remove(self, tenant_id: str, source: str) -> bool:
        with self._conn() as conn:
            cur = conn.execute(
                "DELETE FROM uploads_pg_owned WHERE tenant_id=%s AND source=%s",
                (tenant_id, source),
            )
        return cur.rowcount > 0
