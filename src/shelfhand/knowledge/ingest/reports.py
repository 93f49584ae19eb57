"""What an ingest reports: progress events as it goes, and what it did in the end.

The values of :mod:`shelfhand.knowledge.ingest.ingestor` (phase 1, files and documents) and
:mod:`shelfhand.knowledge.ingest.pending` (phase 2, embedding), which the service, the CLI and
the job workers show or store.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "EmbedReport",
    "EventKind",
    "IngestEvent",
    "IngestFailure",
    "IngestReport",
    "Phase",
    "Progress",
    "ShouldStop",
    "Tally",
]

EventKind = Literal["unchanged", "stored", "failed", "removed", "progress", "embedded", "done"]
Phase = Literal["index", "embed"]


@dataclass(frozen=True, slots=True, kw_only=True)
class IngestEvent:
    """Progress of an ingest.

    Phase ``index``: one file handled (``unchanged``, ``stored``, ``failed``, ``removed``) or a
    batch of a big file committed (``progress``); ``done`` of ``total`` files, ``bytes_done`` of
    ``bytes_total`` bytes (known up front). Phase ``embed`` (``embedded``): ``done`` of ``total``
    pending chunks embedded. The last event is ``done`` (``done`` = files handled).
    """

    kind: EventKind
    source: str
    done: int
    total: int
    message: str = ""
    phase: Phase = "index"
    bytes_done: int = 0
    bytes_total: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class IngestFailure:
    source: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class EmbedReport:
    """What a phase 2 run did."""

    embedded_chunks: int = 0
    pending_chunks: int = 0
    """Chunks still without vectors afterwards."""
    bridged_chunks: int = 0
    """Chunks embedded in a bridge space too (for questions in another language; see
    :mod:`~shelfhand.knowledge.embeddings.router`), those of this run's and, on the first
    run of a workspace embedded before, the others."""
    seconds: float = 0.0
    error: str | None = None
    """Why embedding stopped early (the embedder failed); the chunks stay pending."""
    interrupted: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class IngestReport:
    """What an ingest did. Sources are listed by outcome."""

    added: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    failed: tuple[IngestFailure, ...] = ()
    """Files skipped because reading or storing them failed (the others were ingested)."""
    embedding_failed: tuple[IngestFailure, ...] = ()
    """Stored and keyword-searchable, but (some) chunks still without vectors because the
    embedder failed; they are embedded later (next ingest, ``shelfhand embed``, the service)."""
    chunks: int = 0
    embedded_chunks: int = 0
    embed_seconds: float = 0.0
    total_seconds: float = 0.0
    pending_chunks: int = 0
    """Chunks without vectors after this ingest (0 for a keyword-only ingest)."""
    embedding_error: str | None = None
    interrupted: bool = False
    """``should_stop`` ended the ingest early; committed work is kept."""
    bytes_total: int = 0


@dataclass(slots=True)
class Tally:
    """What an ingest has done so far (mutable, one per ingest call)."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    failed: list[IngestFailure] = field(default_factory=list)
    chunks: int = 0
    files_done: int = 0
    bytes_done: int = 0
    unsynced_chunks: int = 0
    unsynced_files: int = 0
    interrupted: bool = False

    def report(
        self, started: float, embed: EmbedReport, failed_embedding: Sequence[str], total: int
    ) -> IngestReport:
        """The ingest's report: this tally, what phase 2 did (``embed``), the sources whose
        embedding failed, and ``total`` bytes; timed from ``started`` (``perf_counter``)."""
        return IngestReport(
            added=tuple(self.added),
            updated=tuple(self.updated),
            unchanged=tuple(self.unchanged),
            removed=tuple(self.removed),
            failed=tuple(self.failed),
            embedding_failed=tuple(
                IngestFailure(source=s, reason=embed.error or "") for s in failed_embedding
            ),
            chunks=self.chunks,
            embedded_chunks=embed.embedded_chunks,
            embed_seconds=embed.seconds,
            total_seconds=time.perf_counter() - started,
            pending_chunks=embed.pending_chunks,
            embedding_error=embed.error,
            interrupted=self.interrupted or embed.interrupted,
            bytes_total=total,
        )


Progress = Callable[[IngestEvent], None]
ShouldStop = Callable[[], bool]
