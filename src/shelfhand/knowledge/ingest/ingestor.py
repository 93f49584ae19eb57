"""Incremental, two-phase ingest: files → reader → chunker → store, then → embedder (R3, R4).

**Phase 1 (keyword-first).** A file's bytes are hashed first, with the tenant and permission
tags it is ingested for (:func:`ingest_key`); a file whose key matches the last ingest of its
source is skipped without reading, and one given for another tenant or other tags is stored
again, with them. Changed and new files, smallest first,
are read, chunked as they are stored and committed ``batch_chunks`` chunks at a time (a small
file in one transaction, a big one in several), without vectors: each batch is keyword-searchable
as soon as the keyword index syncs (every ``sync_chunks`` chunks or ``sync_every`` files). The
file hash is recorded with the last batch, so a file whose ingest was interrupted is redone
next time. Any exception while reading or storing one file is that file's failure (reported,
the rest go on). Files that vanished from a directory given to :meth:`Ingestor.ingest` are
removed.

**Phase 2 (embedding).** Chunks without vectors ("pending") are embedded ``group_chunks`` at a
time (:mod:`shelfhand.knowledge.ingest.pending`); if the embedder fails they stay pending (still
keyword-searchable) until the next ingest, ``shelfhand embed`` or the service's background
worker embeds them (:meth:`Ingestor.embed_pending`).

Every file is read within the ingestor's :class:`~shelfhand.knowledge.reading.limits.ReadLimits`
(a file over one is skipped with the reason).

Either phase stops between batches when ``should_stop()`` turns true (Ctrl-C in the CLI):
what was committed stays.

Sources are ``<dir name>/<path relative to it>`` (a file given directly counts as under its
parent directory), so they are stable across runs and machines; a folder or file inside a
folder already indexed keeps that folder's names, and the workspace is never ingested (see
:mod:`shelfhand.knowledge.ingest.naming`).

An indexed file that is now empty (emptied on purpose) is removed from the index, and
reported as skipped with that said; one that fails to read for another reason keeps its
previous version.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from shelfhand.core.context import ANONYMOUS
from shelfhand.core.errors import (
    DependencyUnavailableError,
    InvalidArgumentError,
    KnowledgeError,
    UnreadableDocumentError,
)
from shelfhand.core.names import is_text, shown_bytes
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.knowledge.ingest.chunking import iter_chunks
from shelfhand.knowledge.ingest.naming import NOT_TEXT_NAME, SourceNamer
from shelfhand.knowledge.ingest.pending import PendingEmbedder
from shelfhand.knowledge.ingest.reports import (
    EmbedReport,
    EventKind,
    IngestEvent,
    IngestFailure,
    IngestReport,
    Progress,
    ShouldStop,
    Tally,
)
from shelfhand.knowledge.protocols import KnowledgeStore
from shelfhand.knowledge.reading.limits import ReadLimits
from shelfhand.knowledge.reading.readers import read_bounded, read_file
from shelfhand.knowledge.types import Chunk, Document

logger = logging.getLogger(__name__)

__all__ = [
    "NOT_TEXT_NAME",
    "EmbedReport",
    "IngestEvent",
    "IngestFailure",
    "IngestReport",
    "Ingestor",
]


def _never() -> bool:
    return False


EMPTIED = "the file is empty; its indexed version was removed"
"""Why an indexed file that is now empty is gone from the index (it was emptied on purpose)."""

KEPT = " (the previous version is kept)"
"""Said of an indexed file that failed to read for another reason (binary, corrupt)."""


def ingest_key(file_hash: str, tenant_id: str, permission_tags: Sequence[str]) -> str:
    """What decides that a file is unchanged: its bytes, and who may read them.

    The same bytes ingested again for another tenant, or with other permission tags, are
    stored again with them (a file moved to another tenant, or its roles narrowed, would
    otherwise keep the old ones and be reported "unchanged"). For the default tenant and no
    tags the key is the file hash itself, as stores written before this key hold it.
    """
    tags = sorted(set(permission_tags))
    if tenant_id == ANONYMOUS.tenant_id and not tags:
        return file_hash
    scope = json.dumps([file_hash, tenant_id, tags])  # (unambiguous, whatever the names hold)
    return hashlib.sha256(scope.encode()).hexdigest()


def _failure_reason(exc: BaseException, file: Path | None = None) -> str:
    """Why a file failed, without its path (the failure is reported under its source)."""
    if isinstance(exc, UnreadableDocumentError | KnowledgeError | OSError | ValueError):
        reason = str(exc) or type(exc).__name__
    else:
        reason = f"{type(exc).__name__}: {exc}"  # unexpected: name the kind of failure
    if file is not None:
        for prefix in (f"{file}: ", f"cannot read {file}: "):
            reason = reason.removeprefix(prefix)
        reason = reason.replace(str(file), file.name)
    return reason


class Ingestor:
    """Keeps a store in step with files on disk (or with documents handed over directly).

    Args:
        store: The store; its attached indexes follow through the outbox.
        router: Embeds chunks per vector space; ``None`` stores text only (keyword search).
        max_tokens: Chunk size bound.
        overlap_tokens: Overlap between consecutive chunks of a section.
        batch_size: Texts per embedder call.
        group_chunks: Pending chunks embedded per commit in phase 2.
        sync_every: Files stored between keyword-index syncs in phase 1.
        batch_chunks: Chunks per phase 1 commit (a bigger file spans several commits).
        sync_chunks: Chunks stored between keyword-index syncs in phase 1.
        limits: Reading limits of each file (bytes, characters, pages, chunks…); the
            defaults (``ReadLimits()``) when not given.
    """

    def __init__(
        self,
        store: KnowledgeStore,
        router: EmbeddingRouter | None,
        *,
        max_tokens: int = 400,
        overlap_tokens: int = 40,
        batch_size: int = 32,
        group_chunks: int = 256,
        sync_every: int = 200,
        batch_chunks: int = 500,
        sync_chunks: int = 2000,
        limits: ReadLimits | None = None,
    ) -> None:
        if min(batch_size, group_chunks, sync_every, batch_chunks, sync_chunks) < 1:
            raise InvalidArgumentError("batch sizes and sync intervals must be >= 1")
        self.store = store
        self.router = router
        self.max_tokens = max_tokens
        self.overlap_tokens = overlap_tokens
        self.batch_size = batch_size
        self.group_chunks = group_chunks
        self._bridged = False
        """Whether a run has filled the bridge spaces (after which each run embeds new
        chunks in them as it goes, and only a failure there calls for another backfill)."""
        self.sync_every = sync_every
        self.batch_chunks = batch_chunks
        self.sync_chunks = sync_chunks
        self.limits = ReadLimits() if limits is None else limits

    def forget(self, source: str) -> int:
        """Remove every document of ``source``; a name ending in ``/`` (``docs/``) removes every
        source under that folder. Returns how many documents were removed."""
        if not source.endswith("/"):
            return self.store.delete_source(source)
        removed = sum(
            self.store.delete_source(s) for s in self.store.all_sources() if s.startswith(source)
        )
        self.store.forget_root(source.rstrip("/"))
        return removed

    def ingest(
        self,
        paths: Sequence[Path],
        *,
        tenant_id: str = "default",
        permission_tags: Sequence[str] = (),
        progress: Progress | None = None,
        wait: bool = True,
        should_stop: ShouldStop | None = None,
        root_origins: Mapping[str, str] | None = None,
        skip_folders: Sequence[Path] = (),
    ) -> IngestReport:
        """Ingest files and directories incrementally; see the module docstring.

        Args:
            paths: Files and folders.
            tenant_id: Tenant of the new documents.
            permission_tags: Roles allowed to read them (none: the whole tenant).
            progress: Called with :class:`IngestEvent` values.
            wait: Run phase 2 (embed pending chunks) before returning; ``False`` leaves them
                to a later :meth:`embed_pending`.
            should_stop: Polled between batches; when true, the ingest ends early (keeping what
                was committed) with ``interrupted`` set.
            root_origins: Folder name -> the folder it stands for, when ``paths`` holds a copy
                of it (an ingest worker's staging copy of a client's folder): the copy is
                claimed as that folder, so queued and in-process ingests of one folder agree.
            skip_folders: Folders a walk never goes into (the workspace: its index files
                change with every ingest).

        Raises:
            UnreadableDocumentError: A given path does not exist (nothing is changed then).
            KnowledgeError: A folder of the same name from elsewhere is already indexed
                (given as a folder, or one of its files given).
        """
        started = time.perf_counter()
        stop = should_stop or _never
        tally = Tally()
        files: list[tuple[Path, str, int]] = []
        namer = SourceNamer(
            self.store, skip_folders=skip_folders, root_origins=dict(root_origins or {})
        )
        seen: set[str] = set()
        for given in paths:
            for file, source in namer.files(Path(given)):
                if source in seen:  # (a folder and a file in it, both given)
                    continue
                seen.add(source)
                if not is_text(source):  # no store, index or report can hold it as it is
                    tally.failed.append(
                        IngestFailure(source=shown_bytes(source), reason=NOT_TEXT_NAME)
                    )
                    continue
                try:
                    size = file.stat().st_size
                except OSError:
                    size = 0  # reported when it is read
                files.append((file, source, size))
        namer.record_claims()
        roots = namer.roots
        # Smallest first: a big file never holds the small ones back.
        files.sort(key=lambda f: (f[2], f[1]))
        total_bytes = sum(size for _, _, size in files)
        total = len(files)
        if progress and files:  # the totals, up front
            progress(
                IngestEvent(
                    kind="progress", source="", done=0, total=total, bytes_total=total_bytes
                )
            )
        with self.store.deferred_sync():
            for file, source, size in files:
                if stop():
                    tally.interrupted = True
                    break
                kind = self._index_file(
                    file, source, size, tenant_id, permission_tags, tally, progress, total,
                    total_bytes, stop,
                )  # fmt: skip
                tally.files_done += 1
                tally.bytes_done += size
                if kind == "stored":
                    tally.unsynced_files += 1
                    if tally.unsynced_files >= self.sync_every:
                        self._sync(tally)
                if progress:
                    progress(
                        IngestEvent(
                            kind=kind,
                            source=source,
                            done=tally.files_done,
                            total=total,
                            bytes_done=tally.bytes_done,
                            bytes_total=total_bytes,
                            message=tally.failed[-1].reason if kind == "failed" else "",
                        )
                    )
            if not tally.interrupted:
                for source in self.store.all_sources():
                    if source not in seen and any(source.startswith(r) for r in roots):
                        self.store.delete_source(source)
                        tally.removed.append(source)
                        if progress:
                            progress(
                                IngestEvent(
                                    kind="removed",
                                    source=source,
                                    done=tally.files_done,
                                    total=total,
                                    bytes_done=tally.bytes_done,
                                    bytes_total=total_bytes,
                                )
                            )
        embed = self._phase_two(wait and not tally.interrupted, progress, stop)
        stored = [*tally.added, *tally.updated, *tally.unchanged]
        failed_embedding = sorted(set(stored) & self.store.pending_sources()) if embed.error else []
        report = tally.report(started, embed, failed_embedding, total_bytes)
        if progress:
            progress(
                IngestEvent(
                    kind="done",
                    source="",
                    done=tally.files_done,
                    total=total,
                    bytes_done=tally.bytes_done,
                    bytes_total=total_bytes,
                )
            )
        return report

    def ingest_documents(
        self,
        docs: Iterable[Document],
        *,
        progress: Progress | None = None,
        wait: bool = True,
        should_stop: ShouldStop | None = None,
    ) -> IngestReport:
        """Ingest ready-made documents (e.g. an evaluation corpus); unchanged ones are skipped.

        A document is unchanged when its ``content_hash`` and permission tags match the stored
        ones for its ``doc_id`` (see :func:`ingest_key`). Nothing is removed. Phase 2 runs as
        for :meth:`ingest`.

        Raises:
            InvalidArgumentError: A document's ``doc_id`` is stored (or given before in
                ``docs``) for another tenant: ids are the store's, across tenants, so it
                would replace that tenant's document, or be skipped as unchanged. The
                documents before it are ingested.
        """
        started = time.perf_counter()
        stop = should_stop or _never
        tally = Tally()
        batch: list[tuple[Document, list[Chunk]]] = []
        size = 0

        def commit() -> None:
            nonlocal batch, size
            if batch:
                self.store.write_batch("", new_docs=batch)
                tally.unsynced_chunks += size
                if tally.unsynced_chunks >= self.sync_chunks:
                    self._sync(tally)
            batch, size = [], 0

        owners: dict[str, str] = {}  # doc_id -> tenant, of this call's documents
        with self.store.deferred_sync():
            for doc in docs:
                if stop():
                    tally.interrupted = True
                    break
                # one lookup for both: whether the document changed, and whose the id is
                existing, owner = self.store.get_document_state(doc.doc_id) or (None, None)
                owner = owners.get(doc.doc_id) or owner
                if owner is not None and owner != doc.tenant_id:
                    commit()  # the documents before it are kept
                    raise InvalidArgumentError(
                        f"document id {doc.doc_id!r} is stored for tenant {owner!r}, not "
                        f"{doc.tenant_id!r}: document ids are the store's, across tenants "
                        "(prefix them with the tenant, as uploads do)"
                    )
                owners[doc.doc_id] = doc.tenant_id
                tally.files_done += 1
                # the tags count, as for a file: narrowed, they take effect, not "unchanged"
                # (not the tenant: an id stored for another is refused above; so an untagged
                # document keeps its plain hash, as stores written before this hold it)
                key = ingest_key(doc.content_hash, ANONYMOUS.tenant_id, doc.permission_tags)
                if existing == key:
                    tally.unchanged.append(doc.doc_id)
                    continue
                if key != doc.content_hash:
                    doc = dataclasses.replace(doc, content_hash=key)
                chunks = list(
                    iter_chunks(doc, max_tokens=self.max_tokens, overlap_tokens=self.overlap_tokens)
                )
                batch.append((doc, chunks))
                size += len(chunks)
                tally.chunks += len(chunks)
                (tally.updated if existing is not None else tally.added).append(doc.doc_id)
                if size >= self.batch_chunks:
                    commit()
            commit()
        embed = self._phase_two(wait and not tally.interrupted, progress, stop)
        return tally.report(started, embed, [], 0)

    # -- phase 1 -------------------------------------------------------------------------------

    def _sync(self, tally: Tally) -> None:
        try:
            self.store.sync()
        except DependencyUnavailableError as exc:  # the outbox keeps what it could not apply
            logger.warning("index not updated yet, the outbox keeps the change: %s", exc)
        tally.unsynced_chunks = tally.unsynced_files = 0

    def _index_file(
        self,
        file: Path,
        source: str,
        size: int,
        tenant_id: str,
        permission_tags: Sequence[str],
        tally: Tally,
        progress: Progress | None,
        total: int,
        total_bytes: int,
        stop: ShouldStop,
    ) -> EventKind:
        """Phase 1 for one file. Any exception is this file's failure, reported once."""
        try:
            data = read_bounded(file, self.limits)  # (a huge file or a pipe: never read)
            file_hash = ingest_key(hashlib.sha256(data).hexdigest(), tenant_id, permission_tags)
            stored = self.store.get_source_hash(source)
            if stored == file_hash:
                tally.unchanged.append(source)
                return "unchanged"
            if not data.strip() and (stored is not None or self.store.embed_state(source)):
                # emptied on purpose: what it said is no longer so (the reader refuses it)
                self.store.delete_source(source)
                tally.removed.append(source)
                tally.failed.append(IngestFailure(source=source, reason=EMPTIED))
                return "failed"
            # the bytes just hashed: read once, and the stored hash matches what was indexed
            docs = read_file(
                file,
                source=source,
                tenant_id=tenant_id,
                permission_tags=permission_tags,
                data=data,
                limits=self.limits,
            )
            del data
            existed = stored is not None or bool(self.store.embed_state(source))
            complete = self._write_file(
                source, file_hash, docs, tally, stop, progress, size, total, total_bytes
            )
        except Exception as exc:  # one file's failure never stops the others
            if self.store.get_source_hash(source) is None and self.store.embed_state(source):
                # batches of this file were committed before it failed (e.g. it ran over
                # max_chunks): nothing half-stored stays searchable
                self.store.delete_source(source)
            reason = _failure_reason(exc, file)
            if self.store.get_source_hash(source) is not None:  # (none once half-stored)
                reason += KEPT
            logger.info("skipping %s: %s", source, reason)  # the report names it, once
            logger.debug("failure of %s", source, exc_info=True)
            tally.failed.append(IngestFailure(source=source, reason=reason))
            return "failed"
        if not complete:
            tally.interrupted = True
            tally.failed.append(
                IngestFailure(source=source, reason="interrupted; ingest it again to finish")
            )
            return "failed"
        (tally.updated if existed else tally.added).append(source)
        return "stored"

    def _write_file(
        self,
        source: str,
        file_hash: str,
        docs: Sequence[Document],
        tally: Tally,
        stop: ShouldStop,
        progress: Progress | None,
        size: int,
        total: int,
        total_bytes: int,
    ) -> bool:
        """Store a file's documents in batches of ``batch_chunks``; ``False`` if stopped."""
        new: dict[str, tuple[Document, list[Chunk]]] = {}
        more: dict[str, list[Chunk]] = {}
        inserted: set[str] = set()
        first = True
        count = 0

        def commit(final: bool) -> None:
            nonlocal first, count, new, more
            self.store.write_batch(
                source,
                new_docs=list(new.values()),
                appended=list(more.items()),
                start=first,
                finish_hash=file_hash if final else None,
                doc_type=docs[0].doc_type if docs else "",
            )
            inserted.update(new)
            tally.chunks += count
            tally.unsynced_chunks += count
            if tally.unsynced_chunks >= self.sync_chunks:
                self._sync(tally)
            first, count, new, more = False, 0, {}, {}

        limits = self.limits
        file_chunks = 0
        for n, doc in enumerate(docs):
            new[doc.doc_id] = (doc, [])
            length = max(1, sum(len(s.text) + 2 for s in doc.sections))
            for chunk in iter_chunks(
                doc, max_tokens=self.max_tokens, overlap_tokens=self.overlap_tokens
            ):
                if doc.doc_id in inserted:
                    more.setdefault(doc.doc_id, []).append(chunk)
                else:
                    new[doc.doc_id][1].append(chunk)
                count += 1
                file_chunks += 1
                if file_chunks > limits.max_chunks:
                    limits.check_chunks(source, file_chunks)  # raises DocumentTooLarge
                if count < self.batch_chunks:
                    continue
                commit(final=False)
                if progress:
                    share = (n + min(chunk.end / length, 1.0)) / len(docs)
                    progress(
                        IngestEvent(
                            kind="progress",
                            source=source,
                            done=tally.files_done,
                            total=total,
                            bytes_done=tally.bytes_done + int(size * share),
                            bytes_total=total_bytes,
                        )
                    )
                if stop():
                    return False
        commit(final=True)
        return True

    # -- phase 2 -------------------------------------------------------------------------------

    def _phase_two(self, run: bool, progress: Progress | None, stop: ShouldStop) -> EmbedReport:
        if self.router is None:
            return EmbedReport()
        if not run:
            return EmbedReport(pending_chunks=self.store.count_pending())
        # (the bridge spaces of chunks embedded before are filled by `shelfhand embed` and the
        # service's worker: on a large workspace that is hours, not part of an ingest)
        return self.embed_pending(progress=progress, should_stop=stop, backfill=False)

    def embed_pending(
        self,
        *,
        progress: Progress | None = None,
        should_stop: ShouldStop | None = None,
        backfill: bool = True,
    ) -> EmbedReport:
        """Phase 2: embed every chunk that has no vectors yet, ``group_chunks`` per commit
        (:class:`~shelfhand.knowledge.ingest.pending.PendingEmbedder`); a keyword-only ingestor
        does nothing.

        Never raises for an embedder failure: it stops, and the report says why (the chunks
        stay pending). A vector space whose stored model differs from the configured embedder
        raises :class:`KnowledgeError`. With ``backfill`` (not in an ingest), the first run
        of this ingestor also embeds the chunks a bridge space lacks (a workspace embedded
        before ``cross_language``; one whose bridge embedder failed).
        """
        if self.router is None:
            return EmbedReport()
        pending = PendingEmbedder(
            self.store, self.router, batch_size=self.batch_size, group_chunks=self.group_chunks
        )
        report = pending.run(
            progress=progress, should_stop=should_stop, backfill=backfill and not self._bridged
        )
        if report.error is not None:
            self._bridged = False  # (a bridge space may lack chunks: the next backfill looks)
        elif backfill and not report.interrupted:
            self._bridged = True
        return report
