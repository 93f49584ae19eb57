"""Uploaded documents: limits, staging, all-or-nothing ingest, ownership per tenant.

An upload goes through four steps, and only the last one changes anything a user can see:

1. **receive** — each part is streamed to ``<workspace>/uploads/.staging/<id>/<tenant>/<name>``
   with the size limit enforced while reading; names are reduced to a safe base name and the
   suffix must be one the readers understand.
2. **validate** — every staged file is read with the real reader; one unreadable file rejects
   the whole upload, so nothing is partially ingested.
3. **ingest** — the staged files are ingested for the caller's tenant. The source of a file is
   ``<tenant>/<name>`` (the ingestor names sources after the folder a file is in), exactly as
   if it were ingested from its final place.
4. **keep** — files move to ``<workspace>/uploads/<tenant>/<name>`` and the registry records
   which tenant owns each source; the staging folder is removed in every case.

The registry (a table in ``sessions.db``) is what scopes listing and deleting sources to a
tenant; search is scoped by the store itself. A source that exists but belongs to another
tenant (or was ingested from the command line) cannot be overwritten through the API.

**Crash safety.** The registry and the knowledge base are two databases, so an upload writes
its intent first: before step 3 each source gets a *pending* registry row, promoted to an
owned row (and the pending one deleted, in one transaction) only after step 4. If the server
dies in between, :meth:`Uploads.recover` at the next start rolls the unfinished upload back:
a pending source the tenant did not own before is forgotten (its documents and kept file
removed); one it already owned stays owned. Registry rows whose source is gone from the
knowledge base are dropped, and the staging folder is emptied (the server holds the
workspace's writer lock, so no other upload can be in flight).

**Quotas.** ``max_tenant_bytes`` and ``max_tenant_files`` bound what one tenant keeps
(replaced files count once); an upload past them is refused with 413 ``tenant_quota``.

Permission tags apply to writes as well as reads (see :mod:`shelfhand.service.source_access`):
replacing or deleting a tagged source needs one of its tags as a role, ownership or admin,
and a replacement keeps the tags its writer may not drop.
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from shelfhand.core.context import UserContext
from shelfhand.core.db import Migration, apply_migrations, connect, transaction
from shelfhand.core.errors import UnreadableDocumentError, UploadRejected
from shelfhand.knowledge.ingest.ingestor import IngestEvent, IngestReport
from shelfhand.knowledge.reading.limits import ReadLimits
from shelfhand.knowledge.reading.readers import SUPPORTED_SUFFIXES, read_file
from shelfhand.service.source_access import StoredSource, access, merge_reports, replacement_tags

logger = logging.getLogger(__name__)

__all__ = ["UploadRecords", "UploadRegistry", "UploadRejected", "Uploads", "tenant_folder"]

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

MAX_NAME_CHARS = 200
_CHUNK = 1024 * 1024


class IncomingFile(Protocol):
    """What the receiver needs of an uploaded part (Starlette's ``UploadFile`` fits)."""

    filename: str | None

    async def read(self, size: int = -1) -> bytes: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class UploadRecord:
    source: str
    tenant_id: str
    filename: str
    bytes: int
    uploaded_by: str
    uploaded_at: float


def tenant_folder(tenant_id: str) -> str:
    """A folder name for a tenant: readable for plain ids, injective for every id."""
    out = "".join(
        c if c.isascii() and (c.isalnum() or c in "-_") else f"~{ord(c):x}~" for c in tenant_id
    )
    return out or "~empty~"


def safe_name(filename: str | None) -> str:
    """The base name of an uploaded file, or :class:`UploadRejected` (422) if unusable."""
    name = (filename or "").replace("\\", "/").rsplit("/", 1)[-1].strip()
    if not name or name in (".", "..") or name.startswith("."):
        raise UploadRejected(
            f"file name {filename!r} is not usable: give each file a plain name such as faq.md",
            status=422,
            code="invalid_file_name",
        )
    if any(ord(c) < 32 for c in name) or len(name) > MAX_NAME_CHARS:
        raise UploadRejected(
            f"file name {filename!r} has control characters or is longer than "
            f"{MAX_NAME_CHARS} characters",
            status=422,
            code="invalid_file_name",
        )
    suffix = Path(name).suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        supported = ", ".join(sorted(SUPPORTED_SUFFIXES))
        raise UploadRejected(
            f"{name}: unsupported file type {suffix or '(no suffix)'!r}; supported: {supported}",
            status=415,
            code="unsupported_file_type",
        )
    return name


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

    def owner_of(self, source: str) -> str | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT tenant_id FROM knowledge_uploads WHERE source=?", (source,)
            ).fetchone()
        return None if row is None else str(row[0])

    def get(self, source: str) -> UploadRecord | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT source, tenant_id, filename, bytes, uploaded_by, uploaded_at"
                " FROM knowledge_uploads WHERE source=?",
                (source,),
            ).fetchone()
        if row is None:
            return None
        return UploadRecord(
            source=row[0],
            tenant_id=row[1],
            filename=row[2],
            bytes=row[3],
            uploaded_by=row[4],
            uploaded_at=row[5],
        )

    def record(self, records: Sequence[UploadRecord]) -> None:
        """Record owned sources directly (an upload goes through :meth:`begin` and
        :meth:`commit` instead)."""
        self._write("knowledge_uploads", records)

    def begin(self, records: Sequence[UploadRecord]) -> None:
        """Write the intent of an upload (pending rows) before its ingest starts."""
        self._write("knowledge_uploads_pending", records)

    def _write(self, table: str, records: Sequence[UploadRecord]) -> None:
        with self._lock, transaction(self._conn):
            self._conn.executemany(
                f"INSERT OR REPLACE INTO {table}"
                " (source, tenant_id, filename, bytes, uploaded_by, uploaded_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
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
                "INSERT OR REPLACE INTO knowledge_uploads"
                " (source, tenant_id, filename, bytes, uploaded_by, uploaded_at)"
                " SELECT source, tenant_id, filename, bytes, uploaded_by, uploaded_at"
                f" FROM knowledge_uploads_pending WHERE source IN ({marks})",
                list(sources),
            )
            self._conn.execute(
                f"DELETE FROM knowledge_uploads_pending WHERE source IN ({marks})", list(sources)
            )

    def abandon(self, sources: Sequence[str]) -> None:
        """Drop pending rows (the upload was refused or rolled back)."""
        with self._lock, transaction(self._conn):
            self._conn.executemany(
                "DELETE FROM knowledge_uploads_pending WHERE source=?", [(s,) for s in sources]
            )

    def pending(self) -> list[UploadRecord]:
        """Pending rows: uploads that started and never finished (a crash)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT source, tenant_id, filename, bytes, uploaded_by, uploaded_at"
                " FROM knowledge_uploads_pending ORDER BY source"
            ).fetchall()
        return [_record(r) for r in rows]

    def all_records(self) -> list[UploadRecord]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT source, tenant_id, filename, bytes, uploaded_by, uploaded_at"
                " FROM knowledge_uploads ORDER BY source"
            ).fetchall()
        return [_record(r) for r in rows]

    def usage(self, tenant_id: str, *, excluding: Sequence[str] = ()) -> tuple[int, int]:
        """Bytes and files the tenant keeps, leaving out ``excluding`` (about to be replaced)."""
        skip = set(excluding)
        kept = [r for r in self.for_tenant(tenant_id) if r.source not in skip]
        return sum(r.bytes for r in kept), len(kept)

    def for_tenant(self, tenant_id: str) -> list[UploadRecord]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT source, tenant_id, filename, bytes, uploaded_by, uploaded_at"
                " FROM knowledge_uploads WHERE tenant_id=? ORDER BY uploaded_at DESC, source",
                (tenant_id,),
            ).fetchall()
        return [_record(r) for r in rows]

    def remove(self, tenant_id: str, source: str) -> bool:
        with self._lock:
            cur = self._conn.execute(
                "DELETE FROM knowledge_uploads WHERE tenant_id=? AND source=?", (tenant_id, source)
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


@dataclass(slots=True)
class Staged:
    """Files received for one upload, not yet visible to anyone."""

    folder: Path
    """``.staging/<id>``; removed by :meth:`Uploads.discard`."""
    files: list[tuple[Path, int]]
    """Each staged file (under ``folder/<tenant>/``) with its size in bytes."""


class KnowledgeTarget(Protocol):
    """What uploads need of a knowledge base."""

    def ingest(
        self,
        paths: Sequence[Path],
        *,
        tenant_id: str = "default",
        permission_tags: Sequence[str] = (),
        progress: Callable[[IngestEvent], None] | None = None,
        root_origins: Mapping[str, str] | None = None,
    ) -> IngestReport: ...

    def forget(self, source: str) -> int: ...

    def sources(self) -> Sequence[object]: ...

    def source_access(self, sources: Sequence[str]) -> dict[str, StoredSource]: ...


class Uploads:
    """Receives, validates, ingests and keeps uploaded files for tenants.

    Args:
        root: ``<workspace>/uploads``.
        registry: Source ownership.
        max_file_bytes: The largest file accepted.
        max_files: The most files in one upload.
        max_tenant_bytes: The most bytes one tenant keeps (``None``: no quota).
        max_tenant_files: The most files one tenant keeps (``None``: no quota).
    """

    def __init__(
        self,
        root: Path,
        registry: UploadRecords,
        *,
        max_file_bytes: int,
        max_files: int,
        max_tenant_bytes: int | None = None,
        max_tenant_files: int | None = None,
    ) -> None:
        self.root = root
        self.registry = registry
        self.max_file_bytes = max_file_bytes
        self.max_files = max_files
        self.max_tenant_bytes = max_tenant_bytes
        self.max_tenant_files = max_tenant_files
        self._ingest_lock = threading.Lock()

    def recover(self, kb: KnowledgeTarget) -> None:
        """Make the registry and the knowledge base agree after a crash; empty the staging.

        Call at start-up, while holding the workspace's writer lock (no upload in flight).
        """
        with self._ingest_lock:
            existing = {str(getattr(s, "source", "")) for s in kb.sources()}
            owned = {r.source: r.tenant_id for r in self.registry.all_records()}
            pending = self.registry.pending()
            for record in pending:
                if record.source in owned:
                    continue  # a replace by its owner: it was theirs before and still is
                if record.source in existing:
                    kb.forget(record.source)
                    existing.discard(record.source)
                self._kept_file(record.source).unlink(missing_ok=True)
                logger.warning(
                    "rolled back the unfinished upload of %s (tenant %s)",
                    record.source,
                    record.tenant_id,
                )
            self.registry.abandon([r.source for r in pending])
            for source, tenant in owned.items():
                if source not in existing:
                    logger.warning("%s is no longer in the knowledge base; unlisted", source)
                    self.registry.remove(tenant, source)
            staging = self.root / ".staging"
            if staging.exists():
                leftovers = list(staging.iterdir())
                if leftovers:
                    logger.info("removing %d stale staging folder(s)", len(leftovers))
                shutil.rmtree(staging, ignore_errors=True)

    def rollback_unfinished(self, kb: KnowledgeTarget, sources: Sequence[str]) -> None:
        """Undo an earlier attempt at uploading ``sources`` that died mid-way (a worker killed
        with ``kill -9``), as :meth:`recover` does for the whole registry: a pending source
        its tenant did not own before is removed again; an owned one (a replace) stays and is
        replaced by the next attempt. Call while no other upload of these sources runs (a
        worker holds their job locks)."""
        wanted = set(sources)
        with self._ingest_lock:
            pending = [r for r in self.registry.pending() if r.source in wanted]
            for record in pending:
                if self.registry.owner_of(record.source) is not None:
                    continue
                kb.forget(record.source)
                self._kept_file(record.source).unlink(missing_ok=True)
                logger.warning("rolled back an unfinished attempt at %s", record.source)
            self.registry.abandon([r.source for r in pending])

    def _kept_file(self, source: str) -> Path:
        tenant_dir, _, name = source.partition("/")
        return self.root / tenant_dir / name

    async def receive(self, files: Sequence[IncomingFile], user: UserContext) -> Staged:
        """Stream the parts to a staging folder, enforcing names, types, count and size."""
        if not files:
            raise UploadRejected(
                "no files: send one or more parts named 'files'", status=422, code="no_files"
            )
        if len(files) > self.max_files:
            raise UploadRejected(
                f"too many files ({len(files)}); at most {self.max_files} per upload",
                status=413,
                code="too_many_files",
            )
        names = [safe_name(f.filename) for f in files]
        if len({n.lower() for n in names}) != len(names):
            raise UploadRejected(
                "two files in the upload have the same name", status=422, code="duplicate_name"
            )
        folder = self.root / ".staging" / uuid.uuid4().hex
        target = folder / tenant_folder(user.tenant_id)
        target.mkdir(parents=True)
        staged = Staged(folder=folder, files=[])
        try:
            for part, name in zip(files, names, strict=True):
                path = target / name
                size = 0
                with path.open("wb") as out:
                    while chunk := await part.read(_CHUNK):
                        size += len(chunk)
                        if size > self.max_file_bytes:
                            raise UploadRejected(
                                f"{name} is larger than the limit of {self.max_file_bytes} bytes",
                                status=413,
                                code="file_too_large",
                            )
                        out.write(chunk)
                staged.files.append((path, size))
        except BaseException:
            self.discard(staged)
            raise
        return staged

    def validate(self, staged: Staged, user: UserContext, limits: ReadLimits | None = None) -> None:
        """Read every staged file with its reader, within ``limits`` (those the knowledge base
        ingests with; the defaults when not given); one failure rejects the upload (blocking).

        Any failure of a reader is the file's problem, so it is a 422 naming the file, never a
        500 (an unexpected one is logged with its traceback as well).
        """
        problems: list[str] = []
        for path, _ in staged.files:
            try:
                read_file(path, source=path.name, tenant_id=user.tenant_id, limits=limits)
            except UnreadableDocumentError as exc:
                problems.append(f"{path.name}: {str(exc).replace(str(path), path.name)}")
            except Exception as exc:
                logger.exception("reading the uploaded file %s failed", path.name)
                problems.append(f"{path.name}: cannot be read ({type(exc).__name__}: {exc})")
        if problems:
            raise UploadRejected(
                "nothing was ingested; these files cannot be read: " + "; ".join(problems),
                status=422,
                code="unreadable_document",
            )

    def ingest(
        self,
        staged: Staged,
        user: UserContext,
        kb: KnowledgeTarget,
        progress: Callable[[IngestEvent], None] | None = None,
        permission_tags: Sequence[str] | None = None,
    ) -> IngestReport:
        """Ingest the staged files for ``user``'s tenant and keep them (blocking).

        ``permission_tags`` restrict who in the tenant may retrieve new files (roles); none =
        all. A replaced source keeps its tags when ``permission_tags`` is ``None``, and always
        keeps those the caller may not drop (see :func:`replacement_tags`).

        Raises:
            UploadRejected: A source exists that the caller may not replace (409), or a file
                failed after all (422; sources this upload added are removed again).
        """
        tenant_dir = tenant_folder(user.tenant_id)
        with self._ingest_lock:
            sources, records, groups, new = self._plan(staged, user, kb, permission_tags)
            self.registry.begin(records)  # the intent, so a crash from here on is undone
            reports: list[IngestReport] = []
            try:
                for tags, paths in groups.items():  # one ingest per tag set (usually one)
                    reports.append(
                        kb.ingest(
                            paths,
                            tenant_id=user.tenant_id,
                            permission_tags=tags,
                            progress=progress,
                        )
                    )
                    if reports[-1].failed:
                        break
            except BaseException:
                for source in new:
                    kb.forget(source)
                self.registry.abandon(sources)
                raise
            report: IngestReport = merge_reports(reports)
            if report.failed:
                for source in new:
                    kb.forget(source)
                self.registry.abandon(sources)
                reasons = "; ".join(f"{f.source}: {f.reason}" for f in report.failed)
                raise UploadRejected(
                    f"nothing was ingested; these files failed: {reasons}",
                    status=422,
                    code="unreadable_document",
                )
            keep = self.root / tenant_dir
            keep.mkdir(parents=True, exist_ok=True)
            for path, _ in staged.files:
                path.replace(keep / path.name)
            self.registry.commit(sources)
        return report

    def check(
        self,
        staged: Staged,
        user: UserContext,
        kb: KnowledgeTarget,
        permission_tags: Sequence[str] | None = None,
    ) -> None:
        """Refuse now what :meth:`ingest` would refuse (a source the caller may not replace:
        409; the tenant's quota: 413), before the upload is queued for a worker (which checks
        again when it runs)."""
        with self._ingest_lock:
            self._plan(staged, user, kb, permission_tags)

    def _plan(
        self,
        staged: Staged,
        user: UserContext,
        kb: KnowledgeTarget,
        permission_tags: Sequence[str] | None,
    ) -> tuple[list[str], list[UploadRecord], dict[tuple[str, ...], list[Path]], list[str]]:
        """Sources, registry records, files grouped by tag set and the sources no tenant owns
        yet; refused as a whole when a source is not the caller's to replace or the quota is
        exceeded."""
        tenant_dir = tenant_folder(user.tenant_id)
        sources = [f"{tenant_dir}/{path.name}" for path, _ in staged.files]
        now = time.time()
        records = [
            UploadRecord(
                source=source,
                tenant_id=user.tenant_id,
                filename=path.name,
                bytes=size,
                uploaded_by=user.user_id,
                uploaded_at=now,
            )
            for (path, size), source in zip(staged.files, sources, strict=True)
        ]
        stored = kb.source_access(sources)
        groups: dict[tuple[str, ...], list[Path]] = {}
        new: list[str] = []
        for (path, _), source in zip(staged.files, sources, strict=True):
            record = self.registry.get(source)
            if record is None:
                new.append(source)
            tags = tuple(permission_tags or ())
            if record is not None or source in stored:
                if access(user, stored.get(source), record) != "write":
                    # the same answer whether or not the caller may read it: an
                    # unreadable source's tags and owner are not revealed
                    raise UploadRejected(
                        f"source {source} already exists and is not yours to replace",
                        status=409,
                        code="source_conflict",
                    )
                old = stored[source][1] if source in stored else set()
                tags = replacement_tags(user, old, permission_tags)
            groups.setdefault(tags, []).append(path)
        self._check_quota(user.tenant_id, records)
        return sources, records, groups, new

    def _check_quota(self, tenant_id: str, records: Sequence[UploadRecord]) -> None:
        if self.max_tenant_bytes is None and self.max_tenant_files is None:
            return
        kept_bytes, kept_files = self.registry.usage(
            tenant_id, excluding=[r.source for r in records]
        )
        total_bytes = kept_bytes + sum(r.bytes for r in records)
        total_files = kept_files + len(records)
        if self.max_tenant_bytes is not None and total_bytes > self.max_tenant_bytes:
            raise UploadRejected(
                f"tenant quota exceeded: this upload would make {total_bytes} bytes stored for "
                f"your tenant, the limit is {self.max_tenant_bytes}; delete sources you no "
                "longer need (DELETE /v1/knowledge/sources/...)",
                status=413,
                code="tenant_quota",
            )
        if self.max_tenant_files is not None and total_files > self.max_tenant_files:
            raise UploadRejected(
                f"tenant quota exceeded: this upload would make {total_files} files stored for "
                f"your tenant, the limit is {self.max_tenant_files}; delete sources you no "
                "longer need (DELETE /v1/knowledge/sources/...)",
                status=413,
                code="tenant_quota",
            )

    def delete(self, source: str, user: UserContext, kb: KnowledgeTarget) -> bool:
        """Forget a source the caller's tenant uploaded and the caller may change.

        Returns ``False`` when there is no such source *for this caller* (none, another
        tenant's, or tagged with roles the caller does not hold: its existence is not
        revealed).

        Raises:
            UploadRejected: 403 when the caller may read the source but not delete it.
        """
        with self._ingest_lock:
            record = self.registry.get(source)
            allowed = access(user, kb.source_access([source]).get(source), record)
            if allowed == "read":
                raise UploadRejected(
                    f"you may read {source} but not delete it: it was not uploaded through "
                    "the API by your tenant",
                    status=403,
                    code="forbidden",
                )
            if allowed != "write":
                return False
            kb.forget(source)
            self.registry.remove(user.tenant_id, source)
            tenant_dir, _, name = source.partition("/")
            file = self.root / tenant_dir / name
            if (
                tenant_dir == tenant_folder(user.tenant_id)
                and file.parent == self.root / tenant_dir
            ):
                file.unlink(missing_ok=True)
        return True

    def discard(self, staged: Staged) -> None:
        shutil.rmtree(staged.folder, ignore_errors=True)
