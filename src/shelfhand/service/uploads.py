"""Uploaded documents: limits, staging, all-or-nothing ingest, ownership per tenant.

An upload goes through four steps, and only the last one changes anything a user can see:

Steps 1 and 2 live in :mod:`shelfhand.service.upload_staging`, the registry in
:mod:`shelfhand.service.upload_registry`; this module ingests, keeps, deletes and recovers.

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
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from shelfhand.core.context import UserContext
from shelfhand.core.errors import UnreadableDocumentError, UploadRejected
from shelfhand.knowledge.ingest.ingestor import IngestEvent, IngestReport
from shelfhand.knowledge.reading.limits import ReadLimits
from shelfhand.service import upload_staging
from shelfhand.service.source_access import StoredSource, access, merge_reports, replacement_tags
from shelfhand.service.upload_registry import UploadRecord, UploadRecords, UploadRegistry
from shelfhand.service.upload_staging import IncomingFile, Staged, safe_name, tenant_folder

logger = logging.getLogger(__name__)

__all__ = [
    "IncomingFile",
    "KnowledgeTarget",
    "Staged",
    "UploadRecord",
    "UploadRecords",
    "UploadRegistry",
    "UploadRejected",
    "Uploads",
    "safe_name",
    "tenant_folder",
]


class KnowledgeTarget(Protocol):
    """What uploads (and ingest jobs) need of a knowledge base; ``wait=False`` stores the
    text now and leaves the embeddings pending (jobs embed in a phase of their own)."""

    def ingest(
        self,
        paths: Sequence[Path],
        *,
        tenant_id: str = "default",
        permission_tags: Sequence[str] = (),
        progress: Callable[[IngestEvent], None] | None = None,
        root_origins: Mapping[str, str] | None = None,
        wait: bool = True,
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
        """Stream the parts to a staging folder, enforcing names, types, count and size (see
        :func:`~shelfhand.service.upload_staging.receive`)."""
        return await upload_staging.receive(
            files,
            user.tenant_id,
            root=self.root,
            max_files=self.max_files,
            max_file_bytes=self.max_file_bytes,
        )

    def validate(self, staged: Staged, user: UserContext, limits: ReadLimits | None = None) -> None:
        """Read every staged file with its reader, within ``limits`` (those the knowledge base
        ingests with; the defaults when not given); one failure rejects the upload (blocking,
        see :func:`~shelfhand.service.upload_staging.validate`)."""
        upload_staging.validate(staged, user.tenant_id, limits)

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
                    code=UnreadableDocumentError.code,
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
        upload_staging.discard(staged)
