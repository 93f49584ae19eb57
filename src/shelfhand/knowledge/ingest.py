"""Incremental ingest: files → reader → chunker → embedder → store (DESIGN R3, R4).

A file's bytes are hashed first; a file whose hash matches the last ingest of its source is
skipped without reading, chunking or embedding. Changed and new files are read, chunked and
embedded (routed by language to vector spaces, batched; vectors of unchanged chunks are reused),
then stored with one transaction per file. If embedding fails the text is still stored and
keyword-searchable, marked ``embedding_failed``; the next ingest retries it. Files that vanished
from a directory given to :meth:`Ingestor.ingest` are removed. Unreadable files are reported and
skipped.

Sources are ``<dir name>/<path relative to it>`` (a file given directly counts as under its
parent directory), so they are stable across runs and machines.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from shelfhand.core.errors import KnowledgeError, UnreadableDocumentError
from shelfhand.knowledge.chunking import chunk_document
from shelfhand.knowledge.embedding import EmbeddingRouter, Vectors
from shelfhand.knowledge.limits import current_limits
from shelfhand.knowledge.readers import iter_files, read_file
from shelfhand.knowledge.store import EMBED_DONE, EMBED_FAILED, EMBED_NONE, SqliteKnowledgeStore
from shelfhand.knowledge.types import Chunk, Document

logger = logging.getLogger(__name__)

__all__ = ["IngestEvent", "IngestFailure", "IngestReport", "Ingestor"]

EventKind = Literal["unchanged", "stored", "failed", "removed", "done"]


@dataclass(frozen=True, slots=True, kw_only=True)
class IngestEvent:
    """Progress: one file (or document) handled, ``done`` of ``total``."""

    kind: EventKind
    source: str
    done: int
    total: int
    message: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class IngestFailure:
    source: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class IngestReport:
    """What an ingest did. Sources are listed by outcome."""

    added: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    failed: tuple[IngestFailure, ...] = ()
    """Files skipped because they could not be read (anything stored before is kept)."""
    embedding_failed: tuple[IngestFailure, ...] = ()
    """Stored and keyword-searchable, but without vectors; retried by the next ingest."""
    chunks: int = 0
    embedded_chunks: int = 0
    embed_seconds: float = 0.0
    total_seconds: float = 0.0


@dataclass(slots=True)
class _Pending:
    source: str
    file_hash: str | None
    docs: list[tuple[Document, list[Chunk]]]
    existed: bool
    vectors: list[dict[str, tuple[list[int], list[Vectors]]]] = field(default_factory=list)
    error: str | None = None


@dataclass(slots=True)
class _Tally:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    failed: list[IngestFailure] = field(default_factory=list)
    embedding_failed: list[IngestFailure] = field(default_factory=list)
    chunks: int = 0
    embedded: int = 0
    embed_seconds: float = 0.0

    def report(self, started: float) -> IngestReport:
        return IngestReport(
            added=tuple(self.added),
            updated=tuple(self.updated),
            unchanged=tuple(self.unchanged),
            removed=tuple(self.removed),
            failed=tuple(self.failed),
            embedding_failed=tuple(self.embedding_failed),
            chunks=self.chunks,
            embedded_chunks=self.embedded,
            embed_seconds=self.embed_seconds,
            total_seconds=time.perf_counter() - started,
        )


def embedding_text(chunk: Chunk) -> str:
    """What the embedder sees of a chunk: its title (when not already leading) and text."""
    if chunk.title and not chunk.text.startswith(chunk.title):
        return f"{chunk.title}\n{chunk.text}"
    return chunk.text


class Ingestor:
    """Keeps a store in step with files on disk (or with documents handed over directly).

    Args:
        store: The store; its attached indexes follow through the outbox.
        router: Embeds chunks per vector space; ``None`` stores text only (keyword search).
        max_tokens: Chunk size bound.
        overlap_tokens: Overlap between consecutive chunks of a section.
        batch_size: Texts per embedder call.
        group_chunks: Chunks gathered from several files before embedding them together.
        sync_every: Files stored between keyword-index commits during one ingest.
    """

    def __init__(
        self,
        store: SqliteKnowledgeStore,
        router: EmbeddingRouter | None,
        *,
        max_tokens: int = 400,
        overlap_tokens: int = 40,
        batch_size: int = 32,
        group_chunks: int = 256,
        sync_every: int = 200,
    ) -> None:
        self.store = store
        self.router = router
        self.max_tokens = max_tokens
        self.overlap_tokens = overlap_tokens
        self.batch_size = batch_size
        self.group_chunks = group_chunks
        self.sync_every = sync_every

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

    def _claim_root(self, name: str, folder: str, claimed: dict[str, str]) -> None:
        """Sources are named ``<folder name>/<relative path>``: two different folders with the
        same name would overwrite, and prune, each other's sources. Refuse that, up front.
        (Files given one by one do not claim their folder: they replace by name, never prune.)"""
        known = claimed.get(name) or self.store.root_path(name)
        if known is not None and known != folder:
            raise KnowledgeError(
                f"a different folder named {name!r} is already indexed ({known}); sources are "
                f"named '{name}/...', so {folder} would overwrite and remove its documents. "
                f"Rename one of the folders, or remove the old ones first with "
                f"`shelfhand forget {name}/`"
            )
        claimed[name] = folder

    def ingest(
        self,
        paths: Sequence[Path],
        *,
        tenant_id: str = "default",
        permission_tags: Sequence[str] = (),
        progress: Callable[[IngestEvent], None] | None = None,
    ) -> IngestReport:
        """Ingest files and directories incrementally; see the module docstring.

        Raises:
            UnreadableDocumentError: A given path does not exist (nothing is changed then).
        """
        started = time.perf_counter()
        tally = _Tally()
        files: list[tuple[Path, str]] = []
        roots: list[str] = []
        claimed: dict[str, str] = {}
        for given in paths:
            path = Path(given)
            if not path.exists():
                raise UnreadableDocumentError(f"cannot read {path}: no such file or directory")
            root = path if path.is_dir() else path.parent
            root_name = root.resolve().name or "root"
            if path.is_dir():  # a folder prunes what vanished from it: it must be the same one
                self._claim_root(root_name, str(root.resolve()), claimed)
            if path.is_dir():
                roots.append(root_name + "/")
            for file in iter_files([path]):
                files.append((file, f"{root_name}/{file.relative_to(root).as_posix()}"))
        for name, folder in claimed.items():
            self.store.set_root_path(name, folder)
        seen = {source for _, source in files}
        total = len(files)
        group: list[_Pending] = []
        done = 0
        with self.store.deferred_sync():
            for file, source in files:
                pending = self._prepare_file(file, source, tenant_id, permission_tags, tally)
                if pending is None:
                    done += 1
                    self._emit(progress, tally, source, done, total)
                    continue
                group.append(pending)
                if sum(len(c) for p in group for _, c in p.docs) >= self.group_chunks:
                    done = self._store_group(group, tally, progress, done, total)
                    group = []
            done = self._store_group(group, tally, progress, done, total)
            for source in self.store.all_sources():
                if source not in seen and any(source.startswith(r) for r in roots):
                    self.store.delete_source(source)
                    tally.removed.append(source)
                    if progress:
                        progress(IngestEvent(kind="removed", source=source, done=done, total=total))
        report = tally.report(started)
        if progress:
            progress(IngestEvent(kind="done", source="", done=done, total=total))
        return report

    def ingest_documents(
        self,
        docs: Iterable[Document],
        *,
        progress: Callable[[IngestEvent], None] | None = None,
    ) -> IngestReport:
        """Ingest ready-made documents (e.g. an evaluation corpus); unchanged ones are skipped.

        A document is unchanged when its ``content_hash`` matches the stored one for its
        ``doc_id``. Nothing is removed.
        """
        started = time.perf_counter()
        tally = _Tally()
        group: list[_Pending] = []
        done = 0
        with self.store.deferred_sync():
            for doc in docs:
                existing = self.store.get_document_hash(doc.doc_id)
                if existing == doc.content_hash and not self._needs_embedding(doc.source):
                    tally.unchanged.append(doc.doc_id)
                    done += 1
                    continue
                chunks = chunk_document(
                    doc, max_tokens=self.max_tokens, overlap_tokens=self.overlap_tokens
                )
                group.append(
                    _Pending(
                        source=doc.source,
                        file_hash=None,
                        docs=[(doc, chunks)],
                        existed=existing is not None,
                    )
                )
                if sum(len(c) for p in group for _, c in p.docs) >= self.group_chunks:
                    done = self._store_group(group, tally, progress, done, 0)
                    group = []
            done = self._store_group(group, tally, progress, done, 0)
        return tally.report(started)

    # -- steps ---------------------------------------------------------------------------------

    def _needs_embedding(self, source: str) -> bool:
        # stored without vectors: embedding failed, or it was ingested keyword-only
        if self.router is None:
            return False
        return bool({EMBED_FAILED, EMBED_NONE} & self.store.embed_state(source))

    def _prepare_file(
        self,
        file: Path,
        source: str,
        tenant_id: str,
        permission_tags: Sequence[str],
        tally: _Tally,
    ) -> _Pending | None:
        try:
            data = file.read_bytes()
            file_hash = hashlib.sha256(data).hexdigest()
        except OSError as exc:
            tally.failed.append(IngestFailure(source=source, reason=str(exc)))
            return None
        stored = self.store.get_source_hash(source)
        if stored == file_hash and not self._needs_embedding(source):
            tally.unchanged.append(source)
            return None
        try:
            # the bytes just hashed: read once, and the stored hash matches what was indexed
            docs = read_file(
                file,
                source=source,
                tenant_id=tenant_id,
                permission_tags=permission_tags,
                data=data,
            )
            prepared = [
                (
                    d,
                    chunk_document(
                        d, max_tokens=self.max_tokens, overlap_tokens=self.overlap_tokens
                    ),
                )
                for d in docs
            ]
            current_limits().check_chunks(str(file), sum(len(c) for _, c in prepared))
        except (UnreadableDocumentError, KnowledgeError, ValueError) as exc:
            logger.warning("skipping %s: %s", file, exc)
            tally.failed.append(IngestFailure(source=source, reason=str(exc)))
            return None
        return _Pending(
            source=source, file_hash=file_hash, docs=prepared, existed=stored is not None
        )

    def _embed_group(self, group: list[_Pending], tally: _Tally) -> None:
        """Fill ``vectors`` of each pending item; mark ``error`` where embedding failed."""
        for item in group:
            item.vectors = [{} for _ in item.docs]
        if self.router is None:
            return
        router = self.router
        # (space) -> list of (item index, doc index, chunk index, text, content hash)
        work: dict[str, list[tuple[int, int, int, str, str]]] = {}
        for i, item in enumerate(group):
            for d, (_, chunks) in enumerate(item.docs):
                for c, chunk in enumerate(chunks):
                    text = embedding_text(chunk)
                    work.setdefault(router.space_for(text), []).append(
                        (i, d, c, text, chunk.content_hash)
                    )
        for space, entries in work.items():
            embedder = router.embedder(space)
            reuse = self.store.vectors_by_content_hash(space, [e[4] for e in entries])
            todo = [e for e in entries if e[4] not in reuse]
            fresh: dict[tuple[int, int, int], Vectors] = {}
            t0 = time.perf_counter()
            for start in range(0, len(todo), self.batch_size):
                batch = [
                    e for e in todo[start : start + self.batch_size] if group[e[0]].error is None
                ]
                if not batch:
                    continue
                try:
                    matrix = embedder.embed([e[3] for e in batch])
                    if matrix.shape != (len(batch), embedder.dim):
                        raise KnowledgeError(f"embedder returned shape {matrix.shape}")
                except Exception as exc:  # a provider failure must not lose the text
                    reason = f"embedding failed ({type(exc).__name__}: {exc})"
                    logger.warning("%s", reason)
                    for e in batch:
                        group[e[0]].error = reason
                    continue
                for e, row in zip(batch, matrix, strict=True):
                    fresh[(e[0], e[1], e[2])] = row
                tally.embedded += len(batch)
            tally.embed_seconds += time.perf_counter() - t0
            for i, d, c, _, h in entries:
                vec = reuse.get(h)
                if vec is None:
                    vec = fresh.get((i, d, c))
                if vec is None:
                    continue
                positions, rows = group[i].vectors[d].setdefault(space, ([], []))
                positions.append(c)
                rows.append(vec)

    def _store_group(
        self,
        group: list[_Pending],
        tally: _Tally,
        progress: Callable[[IngestEvent], None] | None,
        done: int,
        total: int,
    ) -> int:
        if not group:
            return done
        self._embed_group(group, tally)
        models = (
            {
                s: (self.router.embedder(s).name, self.router.embedder(s).dim)
                for s in self.router.spaces
            }
            if self.router is not None
            else None
        )
        for item in group:
            failed = item.error is not None
            state = EMBED_NONE if self.router is None else (EMBED_FAILED if failed else EMBED_DONE)
            items = [
                (
                    doc,
                    chunks,
                    None
                    if failed
                    else {s: (p, np.stack(rows)) for s, (p, rows) in vectors.items() if rows},
                )
                for (doc, chunks), vectors in zip(item.docs, item.vectors, strict=True)
            ]
            if item.file_hash is not None:
                self.store.replace_source(
                    item.source,
                    item.file_hash,
                    items,
                    embed_state=state,
                    embed_error=item.error,
                    space_models=models,
                )
            else:
                for one in items:
                    self.store.replace_source(
                        item.source,
                        None,
                        [one],
                        embed_state=state,
                        embed_error=item.error,
                        remove_others=False,
                        space_models=models,
                    )
            tally.chunks += sum(len(c) for _, c in item.docs)
            (tally.updated if item.existed else tally.added).append(
                item.source if item.file_hash is not None else item.docs[0][0].doc_id
            )
            if failed:
                tally.embedding_failed.append(
                    IngestFailure(source=item.source, reason=item.error or "")
                )
            done += 1
            if done % self.sync_every == 0:
                self.store.sync()
            self._emit(progress, tally, item.source, done, total, kind="stored")
        return done

    @staticmethod
    def _emit(
        progress: Callable[[IngestEvent], None] | None,
        tally: _Tally,
        source: str,
        done: int,
        total: int,
        kind: EventKind | None = None,
    ) -> None:
        if progress is None:
            return
        if kind is None:
            kind = "failed" if tally.failed and tally.failed[-1].source == source else "unchanged"
        progress(IngestEvent(kind=kind, source=source, done=done, total=total))
