"""Running one ingest job in a worker: parse, chunk, store (keyword-searchable at once), embed.

:meth:`JobRunner.run` is what the queue's task calls with a job id. It is safe to call again
for the same job, any number of times, from any worker: that is what makes a job complete
**exactly once** when a worker dies mid-job and procrastinate hands the job to another:

1. it holds the job's advisory lock and the locks of the sources the job writes (a second run
   waits for the first; two jobs writing one source never interleave);
2. a job already ``done`` or ``failed`` is left alone;
3. an upload first rolls back what an earlier, killed attempt left half-done
   (:meth:`~shelfhand.service.uploads.Uploads.rollback_unfinished`), then ingests as the service
   would in process (:meth:`~shelfhand.service.uploads.Uploads.ingest`: access checks, pending
   registry rows, all or nothing);
4. writes are idempotent: a file whose content hash is stored is skipped, and a changed one
   replaces its source's documents (see :mod:`shelfhand.knowledge.ingest.ingestor`), so a retried job
   leaves one version of each document and no duplicate chunks.

**Text first, embeddings by one job at a time.** A job stores its text (phase 1: parse, chunk,
store; keyword-searchable at once) in parallel with other jobs, then embeds the chunks still
pending (phase 2) only if no other job is embedding: embedding takes every pending chunk, so
two jobs embedding at once would compute the same vectors twice. A job that finds phase 2 taken
is done when its text is stored; the embedding job looks for pending chunks again after it lets
go of phase 2, so chunks stored meanwhile are never left behind.

A job whose files cannot be ingested (a malformed file) or that the caller may not write (a
source someone else owns) is ``failed`` for good with the reason; anything unexpected is
recorded and raised, so the queue retries it (up to :data:`MAX_ATTEMPTS` attempts).
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from shelfhand.core.errors import KnowledgeError
from shelfhand.knowledge.ingest.ingestor import (
    EmbedReport,
    IngestEvent,
    IngestFailure,
    IngestReport,
)
from shelfhand.service.job_records import JobFile, JobProgress, JobQueue, JobRecord
from shelfhand.service.source_access import StoredSource
from shelfhand.service.uploads import (
    KnowledgeTarget,
    Staged,
    UploadRejected,
    Uploads,
    tenant_folder,
)

logger = logging.getLogger(__name__)

__all__ = ["MAX_ATTEMPTS", "JobRunner", "report_dict"]

MAX_ATTEMPTS = 5
"""Attempts of a job that keeps failing unexpectedly (or whose worker keeps dying)."""

EMBED_LOCK = "embed-pending"
"""The advisory lock of phase 2: one job at a time embeds the pending chunks."""


class JobKnowledge(KnowledgeTarget, Protocol):
    """What a job needs of a knowledge base: :class:`~shelfhand.knowledge.base.KnowledgeBase`
    fits."""

    @property
    def keyword_only(self) -> bool: ...

    def embed_pending(
        self, *, progress: Callable[[IngestEvent], None] | None = None, backfill: bool = True
    ) -> EmbedReport: ...

    def status(self) -> Any: ...


class _TextFirst:
    """A knowledge base whose ``ingest`` stores text only (phase 1); the runner embeds."""

    def __init__(self, kb: JobKnowledge) -> None:
        self.kb = kb

    def ingest(self, paths: Sequence[Path], **options: Any) -> IngestReport:
        return self.kb.ingest(paths, **{**options, "wait": False})

    def forget(self, source: str) -> int:
        return self.kb.forget(source)

    def sources(self) -> Sequence[object]:
        return self.kb.sources()

    def source_access(self, sources: Sequence[str]) -> dict[str, StoredSource]:
        return self.kb.source_access(sources)


KnowledgeOpener = Callable[[], AbstractContextManager[JobKnowledge]]
EventHook = Callable[[JobRecord, IngestEvent], None]


def report_dict(report: IngestReport) -> dict[str, Any]:
    """An ingest report as JSON-able data (what a job record keeps)."""
    return dataclasses.asdict(report)


class _Progress:
    """Turns ingest events into the job's progress, written at most every ``every`` seconds
    (and on every change of phase)."""

    def __init__(self, queue: JobQueue, job: JobRecord, every: float) -> None:
        self.queue = queue
        self.job = job
        self.every = every
        self.state = JobProgress(files_total=job.files, bytes_total=job.bytes, phase="index")
        self._written = 0.0
        self._lock = threading.Lock()

    def __call__(self, event: IngestEvent) -> None:
        s = self.state
        if event.phase == "embed":
            new = dataclasses.replace(
                s, phase="embed", chunks_embedded=event.done, chunks_to_embed=event.total
            )
        elif event.kind == "done":
            new = s
        else:
            new = dataclasses.replace(
                s,
                phase="index",
                files_done=event.done,
                files_total=event.total or s.files_total,
                bytes_done=event.bytes_done,
                bytes_total=event.bytes_total or s.bytes_total,
                source=event.source or s.source,
            )
        with self._lock:
            changed_phase = new.phase != s.phase
            self.state = new
            now = time.monotonic()
            if changed_phase or now - self._written >= self.every:
                self._written = now
                self.queue.set_progress(self.job.id, new)


class JobRunner:
    """Runs ingest jobs against the knowledge base a worker opens.

    Args:
        queue: Job records and locks.
        uploads: The service's upload logic (registry, kept files, access checks).
        open_knowledge: Opens the knowledge base for one job (a context manager): the
            embedded store takes the workspace's writer lock for the job; a shared store
            hands out the one the worker keeps open.
        staging: A folder of the worker's own for the files of running jobs.
        progress_every: Seconds between progress writes.
        on_event: Called after each ingest event of a job (tests: to hold a job mid-way).
    """

    def __init__(
        self,
        queue: JobQueue,
        uploads: Uploads,
        open_knowledge: KnowledgeOpener,
        *,
        staging: Path,
        progress_every: float = 0.5,
        on_event: EventHook | None = None,
    ) -> None:
        self.queue = queue
        self.uploads = uploads
        self.open_knowledge = open_knowledge
        self.staging = staging
        self.progress_every = progress_every
        self.on_event = on_event

    def run(self, job_id: str) -> JobRecord | None:
        """Run (or finish, or skip) one job; returns its final record, ``None`` if unknown.

        Raises:
            Exception: An unexpected failure, recorded on the job; the queue retries it.
        """
        known = self.queue.get(job_id)
        if known is None:
            logger.warning("ingest job %s is unknown; skipped", job_id)
            return None
        with self.queue.exclusive([f"job:{job_id}", *self._lock_keys(known)]):
            job = self.queue.start(job_id)
            if job is None:  # completed by an earlier run: it completes once
                return self.queue.get(job_id)
            logger.info("running ingest job %s (attempt %d)", job.id, job.attempts)
            progress = _Progress(self.queue, job, self.progress_every)

            def on_progress(event: IngestEvent) -> None:
                progress(event)
                if self.on_event is not None:
                    self.on_event(job, event)

            try:
                report = self._ingest(job, on_progress)
            except UploadRejected as exc:
                self.queue.fail(job.id, str(exc), exc.code)
            except KnowledgeError as exc:
                self.queue.fail(job.id, str(exc), "ingest_failed")
            except Exception as exc:
                reason = f"{type(exc).__name__}: {exc}"
                if job.attempts >= MAX_ATTEMPTS:
                    logger.exception("ingest job %s failed for good", job.id)
                    self.queue.fail(
                        job.id, f"gave up after {job.attempts} attempts: {reason}", "error"
                    )
                    return self.queue.get(job_id)
                logger.exception("ingest job %s failed; it will be retried", job.id)
                self.queue.note_error(job.id, reason)
                raise
            else:
                done = dataclasses.replace(
                    progress.state,
                    phase="done",
                    files_done=job.files,
                    bytes_done=job.bytes,
                    chunks_embedded=report.embedded_chunks,
                    chunks_to_embed=report.embedded_chunks + report.pending_chunks,
                )
                self.queue.finish(job.id, report_dict(report), done)
        return self.queue.get(job_id)

    @staticmethod
    def _lock_keys(job: JobRecord) -> list[str]:
        if job.kind == "upload":
            return [f"source:{s}" for s in job.sources]
        return [f"root:{s.split('/', 1)[0]}" for s in job.sources]

    def _ingest(self, job: JobRecord, progress: Callable[[IngestEvent], None]) -> IngestReport:
        files = self.queue.files(job.id)
        with self.open_knowledge() as kb:
            text = _TextFirst(kb)
            if job.kind == "upload":
                report = self._upload(job, files, text, progress)
            else:
                report = self._ingest_files(job, files, text, progress)
            embedded = self._embed(kb, progress)
        if embedded is None:
            return report
        failed = sorted({*report.added, *report.updated}) if embedded.error else []
        return dataclasses.replace(
            report,
            embedded_chunks=embedded.embedded_chunks,
            embed_seconds=embedded.seconds,
            pending_chunks=embedded.pending_chunks,
            embedding_error=embedded.error,
            embedding_failed=tuple(
                IngestFailure(source=s, reason=embedded.error or "") for s in failed
            ),
            total_seconds=report.total_seconds + embedded.seconds,
        )

    def _embed(
        self, kb: JobKnowledge, progress: Callable[[IngestEvent], None]
    ) -> EmbedReport | None:
        """Phase 2, unless another job is at it (see the module docstring)."""
        if kb.keyword_only:
            return None
        total = EmbedReport()
        while True:
            with self.queue.try_exclusive(EMBED_LOCK) as mine:
                if not mine:  # another job embeds, and looks again when it is done
                    return dataclasses.replace(total, pending_chunks=kb.status().pending_chunks)
                # (a job embeds its own chunks; the bridge spaces of older ones are the
                # background embedder's, or `shelfhand embed`'s: hours on a large workspace)
                report = kb.embed_pending(progress=progress, backfill=False)
            total = EmbedReport(
                embedded_chunks=total.embedded_chunks + report.embedded_chunks,
                pending_chunks=report.pending_chunks,
                seconds=total.seconds + report.seconds,
                error=report.error,
                interrupted=report.interrupted,
            )
            if report.error or report.interrupted:
                return total
            # jobs that found phase 2 taken while this one held it left their chunks pending
            if kb.status().pending_chunks == 0:
                return dataclasses.replace(total, pending_chunks=0)

    def _upload(
        self,
        job: JobRecord,
        files: list[JobFile],
        kb: KnowledgeTarget,
        progress: Callable[[IngestEvent], None],
    ) -> IngestReport:
        folder = self.staging / "uploads" / job.id
        shutil.rmtree(folder, ignore_errors=True)
        target = folder / tenant_folder(job.tenant_id)
        target.mkdir(parents=True)
        staged = Staged(folder=folder, files=[])
        try:
            for file in files:
                path = target / file.name
                path.write_bytes(file.data)
                staged.files.append((path, len(file.data)))
            # an Uploads of the job's own: its lock serialises uploads within one service, while
            # jobs are kept apart by their source locks and may run in parallel
            uploads = Uploads(
                self.uploads.root,
                self.uploads.registry,
                max_file_bytes=self.uploads.max_file_bytes,
                max_files=self.uploads.max_files,
                max_tenant_bytes=self.uploads.max_tenant_bytes,
                max_tenant_files=self.uploads.max_tenant_files,
            )
            uploads.rollback_unfinished(kb, job.sources)
            return uploads.ingest(staged, job.user, kb, progress, job.permission_tags)
        finally:
            self.uploads.discard(staged)

    def _ingest_files(
        self,
        job: JobRecord,
        files: list[JobFile],
        kb: KnowledgeTarget,
        progress: Callable[[IngestEvent], None],
    ) -> IngestReport:
        """``shelfhand ingest``: a folder root is written out under a stable path of the
        worker's (``<staging>/roots/<name>``, so its sources keep their names and what
        vanished from it is pruned); files given one by one under the job's own folder."""
        roots: dict[str, bool] = {}
        origins: dict[str, str] = {}  # root -> the client's folder (the root's identity)
        for file in files:
            root = file.name.split("/", 1)[0]
            roots[root] = roots.get(root, False) or file.folder
            if file.origin:  # (a file given alone too: it is named by its real folder)
                origins[root] = file.origin
        scratch = self.staging / "files" / job.id
        targets: list[Path] = []
        made: list[Path] = [scratch]
        for root, folder in roots.items():
            base = self.staging / "roots" if folder else scratch
            shutil.rmtree(base / root, ignore_errors=True)
            if folder:
                made.append(base / root)
                targets.append(base / root)
        try:
            for file in files:
                root = file.name.split("/", 1)[0]
                base = self.staging / "roots" if roots[root] else scratch
                path = base / file.name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(file.data)
                if not roots[root]:
                    targets.append(path)
            return kb.ingest(
                targets,
                tenant_id=job.tenant_id,
                permission_tags=job.permission_tags or (),
                progress=progress,
                root_origins=origins,
            )
        finally:
            for path in made:
                shutil.rmtree(path, ignore_errors=True)
