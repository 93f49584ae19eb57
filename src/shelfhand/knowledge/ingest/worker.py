"""The service's background embedder: ingest phase 2 while ``shelfhand serve`` runs.

Uploads and ingests store text first (keyword-searchable at once); this worker embeds whatever
is pending, so vectors follow without anyone waiting on them. It polls cheaply (a count over a
partial index), can be woken, backs off while the embedder fails (the chunks stay pending and
keyword-searchable), and stops after its current batch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

from shelfhand.knowledge.ingest.ingestor import EmbedReport

logger = logging.getLogger(__name__)

__all__ = ["EmbeddingWorker", "PendingEmbedder"]


class PendingEmbedder(Protocol):
    """What the worker drives: :class:`~shelfhand.knowledge.base.KnowledgeBase` fits."""

    def embed_pending(self, *, should_stop: Callable[[], bool] | None = None) -> EmbedReport: ...


class EmbeddingWorker:
    """Runs ``target.embed_pending`` in a daemon thread until :meth:`stop`.

    Args:
        target: The knowledge base whose pending chunks to embed.
        poll_s: Seconds between looks for new pending chunks (:meth:`wake` cuts it short).
        max_backoff_s: Longest wait after repeated embedder failures (doubling from
            ``poll_s``).
    """

    def __init__(
        self, target: PendingEmbedder, *, poll_s: float = 2.0, max_backoff_s: float = 300.0
    ) -> None:
        self.target = target
        self.poll_s = poll_s
        self.max_backoff_s = max_backoff_s
        self.last_report: EmbedReport | None = None
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="shelfhand-embedder", daemon=True
            )
            self._thread.start()

    def wake(self) -> None:
        """Look for pending chunks now (e.g. right after an upload)."""
        self._wake.set()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the current batch (its vectors are committed) and wait for the thread."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                logger.warning("background embedder still busy after %.0f s; leaving it", timeout)
            self._thread = None

    def _run(self) -> None:
        delay = self.poll_s
        while not self._stop.is_set():
            try:
                report = self.target.embed_pending(should_stop=self._stop.is_set)
                self.last_report = report
                self.last_error = report.error
            except Exception as exc:  # a bad configuration must not kill the service
                report = None
                self.last_error = f"{type(exc).__name__}: {exc}"
                logger.error("background embedding failed: %s", self.last_error)
            if report is not None and (report.embedded_chunks or report.bridged_chunks):
                logger.info(
                    "embedded %d pending chunks (%d still pending; %d in bridge spaces)",
                    report.embedded_chunks,
                    report.pending_chunks,
                    report.bridged_chunks,
                )
            if self.last_error is not None:
                logger.warning("background embedding paused %.0f s: %s", delay, self.last_error)
                wait = delay
                delay = min(delay * 2, self.max_backoff_s)
            else:
                wait = delay = self.poll_s
            self._wake.wait(wait)
            self._wake.clear()
