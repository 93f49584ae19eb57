"""``KnowledgeBase``: one object for ingest, search, sources and forget over a workspace.

It wraps the embedded stack (SQLite system of record + tantivy BM25 + vector spaces), or the
PostgreSQL one when given a ``database_url`` (:mod:`shelfhand.knowledge.stores.pg`), and remembers
which provider mode it runs in and why it degraded, if it did (docs/design.md R11).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from shelfhand.backends.pg_deadline import QUERY_DEADLINE_S
from shelfhand.core.context import UserContext
from shelfhand.core.errors import KnowledgeError
from shelfhand.core.step_counts import current_counting
from shelfhand.core.tracing import current_span, enter, leave, start_span
from shelfhand.knowledge.analysis import SYNONYMS, synonym_table
from shelfhand.knowledge.embeddings.router import EmbeddingRouter, is_bridge_space
from shelfhand.knowledge.ingest.ingestor import EmbedReport, IngestEvent, IngestReport
from shelfhand.knowledge.reading.limits import ReadLimits
from shelfhand.knowledge.retrieval.rerank import Reranker, RerankStage
from shelfhand.knowledge.retrieval.spans import record_retrieval
from shelfhand.knowledge.scoring import COMMON_SHARE
from shelfhand.knowledge.stack import EmbeddedKnowledge, open_embedded_store
from shelfhand.knowledge.types import (
    Document,
    SearchArgs,
    SearchHit,
    SearchMode,
    SearchOptions,
    SearchResult,
    SourceInfo,
)

if TYPE_CHECKING:
    from shelfhand.knowledge.stores.tantivy import Access
    from shelfhand.knowledge.stores.workspace_lock import WorkspaceLock

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class KnowledgeStatus:
    """What a workspace holds. ``pending_chunks`` are stored and keyword-searchable but not
    embedded yet (ingest phase 2, or all of them when the base is keyword-only)."""

    sources: int
    documents: int
    chunks: int
    vectors: int
    pending_chunks: int
    keyword_only: bool
    store: str = "embedded"
    """``embedded`` (the workspace's files) or ``postgresql``."""
    bridge_vectors: int = 0
    """Vectors of chunks in a space they were embedded into for questions in another language
    (the bridge spaces, :mod:`~shelfhand.knowledge.embeddings.router`), not in ``vectors``."""


def sample_corpus() -> Path:
    """The bundled sample documents (a projector company's after-sales docs, zh + en)."""
    from importlib.resources import files

    return Path(str(files("shelfhand") / "samples" / "projector"))


class KnowledgeBase:
    """The bookshelf of one workspace.

    Args:
        workspace: The folder holding ``knowledge.db`` and the index files.
        router: Embedders per vector space; ``None`` means keyword-only.
        mode: The provider mode it was opened in (``auto``, ``simple`` or ``keyword``).
        degraded_reason: Why ``auto`` fell back to less than hybrid search, if it did.
        reranker: Reorders the fused candidates (``None``: off, the default); see
            :mod:`shelfhand.knowledge.retrieval.rerank`.
        rerank_candidates: How many fused hits a search fetches for the reranker (at
            least ``k``).
        min_relevance: Search hits with a ``relevance`` under it are dropped (0 keeps all;
            the app passes the ``min_relevance`` setting).
        keyword_common_share: Query terms in more than this share of the chunks do not rank
            keyword hits while rarer ones find enough (1 keeps every term; the app passes the
            ``keyword_common_share`` setting).
        database_url: Keep the knowledge in this PostgreSQL database (``postgresql://...``,
            :mod:`shelfhand.knowledge.stores.pg`) instead of the workspace's embedded store; the
            workspace still holds the other files (settings, agents).
        read_limits: How much one file may cost to read at ingest (the app passes the
            ``[limits]`` of the settings); the defaults when not given.
        fusion: How hybrid search fuses its sides: ``convex`` or ``rrf`` (on Qdrant fused by
            the server; :mod:`shelfhand.knowledge.retrieval.hybrid`).
        qdrant_url: Search on Qdrant (a folder: in process; ``http(s)://``: a server, with
            ``qdrant_api_key``) instead of tantivy and faiss, or of PostgreSQL's own search
            (:mod:`shelfhand.knowledge.stores.qdrant`).
        synonyms: Groups of words a query's keyword search treats as one, besides the
            built-in :data:`~shelfhand.knowledge.analysis.SYNONYMS` (the app passes the
            ``synonyms`` setting).
        pg_timeout: With ``database_url``: seconds a search's reads may wait for PostgreSQL
            before they fail with ``DependencyUnavailableError`` (see
            :mod:`shelfhand.backends.pg_deadline`; the ``pg_timeout`` setting).
    """

    def __init__(
        self,
        workspace: Path,
        router: EmbeddingRouter | None,
        *,
        mode: str = "auto",
        degraded_reason: str | None = None,
        max_tokens: int = 400,
        overlap_tokens: int = 40,
        lock: WorkspaceLock | None = None,
        access: Access = "write",
        embed_timeout: float | None = None,
        reranker: Reranker | None = None,
        rerank_candidates: int = 20,
        min_relevance: float = 0.0,
        fusion: str = "convex",
        keyword_common_share: float = COMMON_SHARE,
        database_url: str | None = None,
        read_limits: ReadLimits | None = None,
        qdrant_url: str | None = None,
        qdrant_api_key: str | None = None,
        synonyms: Sequence[Sequence[str]] = (),
        pg_timeout: float | None = QUERY_DEADLINE_S,
    ) -> None:
        self.workspace = Path(workspace)
        self.lock = lock
        """The workspace's writer lock when opened as a writer; released by :meth:`close`."""
        self.router = router
        self.mode = mode
        self._degraded_reason = degraded_reason
        self.read_limits = ReadLimits() if read_limits is None else read_limits
        """The reading limits every ingest of this base applies to each file."""
        self.store_kind = "postgresql" if database_url else "embedded"
        """Where the knowledge lives: ``embedded`` (the workspace) or ``postgresql``."""
        self._stack: EmbeddedKnowledge
        if database_url:
            from shelfhand.knowledge.stack import open_pg_store

            self._stack = open_pg_store(
                database_url,
                router,
                max_tokens=max_tokens,
                overlap_tokens=overlap_tokens,
                embed_timeout=embed_timeout,
                min_relevance=min_relevance,
                fusion=fusion,
                common_share=keyword_common_share,
                read_limits=self.read_limits,
                qdrant_url=qdrant_url,
                qdrant_api_key=qdrant_api_key,
                read_deadline=pg_timeout,
            )
        else:
            self._stack = open_embedded_store(
                self.workspace,
                router,
                max_tokens=max_tokens,
                overlap_tokens=overlap_tokens,
                access=access,
                embed_timeout=embed_timeout,
                min_relevance=min_relevance,
                fusion=fusion,
                common_share=keyword_common_share,
                read_limits=self.read_limits,
                qdrant_url=qdrant_url,
                qdrant_api_key=qdrant_api_key,
            )
        if synonyms:  # the workspace's own groups, besides the built-in ones
            self._stack.retriever.synonyms = synonym_table((*SYNONYMS, *synonyms))
        self.rerank_stage = (
            RerankStage(reranker, candidates=rerank_candidates) if reranker is not None else None
        )

    @property
    def degraded_reason(self) -> str | None:
        """Why this base was opened with less than hybrid search (an ``auto`` base whose
        embedder could not load), if it was. Each search's own fallback (its query
        embedding failed) is in its :class:`SearchResult`."""
        return self._degraded_reason

    @property
    def keyword_only(self) -> bool:
        return self.router is None

    # --- ingest ---------------------------------------------------------------------------
    def ingest(
        self,
        paths: Sequence[Path],
        *,
        tenant_id: str = "default",
        permission_tags: Sequence[str] = (),
        progress: Callable[[IngestEvent], None] | None = None,
        wait: bool = True,
        should_stop: Callable[[], bool] | None = None,
        root_origins: Mapping[str, str] | None = None,
    ) -> IngestReport:
        """Index files and folders incrementally (unchanged files cost nothing).

        Text is stored and keyword-searchable first; then (``wait``) pending chunks are
        embedded. The workspace is never walked into (a folder holding it does not index its
        index files). See :class:`~shelfhand.knowledge.ingest.ingestor.Ingestor`.
        """
        return self._stack.ingestor.ingest(
            paths,
            tenant_id=tenant_id,
            permission_tags=permission_tags,
            progress=progress,
            wait=wait,
            should_stop=should_stop,
            root_origins=root_origins,
            skip_folders=(self.workspace,),
        )

    def ingest_documents(
        self, docs: Iterable[Document], *, progress: Callable[[IngestEvent], None] | None = None
    ) -> IngestReport:
        """Index ready-made documents (unchanged ``content_hash`` → skipped).

        Document ids are the store's, across tenants: a ``doc_id`` that another tenant's
        document holds raises ``InvalidArgumentError`` (prefix ids with the tenant, as
        uploads do); the documents before it are indexed."""
        return self._stack.ingestor.ingest_documents(docs, progress=progress)

    def embed_pending(
        self,
        *,
        progress: Callable[[IngestEvent], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        backfill: bool = True,
    ) -> EmbedReport:
        """Embed chunks stored without vectors (ingest phase 2); a keyword-only base does
        nothing. An embedder failure stops it and is reported, never raised. ``backfill``:
        the first run also fills the bridge spaces (see
        :meth:`~shelfhand.knowledge.ingest.ingestor.Ingestor.embed_pending`)."""
        return self._stack.ingestor.embed_pending(
            progress=progress, should_stop=should_stop, backfill=backfill
        )

    def status(self) -> KnowledgeStatus:
        """Counts of sources, documents, chunks, vectors and chunks waiting for embedding."""
        store = self._stack.store
        counts = {space: store.count_vectors(space) for space in store.vector_spaces()}
        bridged = sum(n for space, n in counts.items() if is_bridge_space(space))
        return KnowledgeStatus(
            sources=len(store.all_sources()),
            documents=store.count_documents(),
            chunks=store.count_chunks(),
            vectors=sum(counts.values()) - bridged,
            pending_chunks=store.count_pending(),
            keyword_only=self.keyword_only,
            store=self.store_kind,
            bridge_vectors=bridged,
        )

    def forget(self, source: str) -> int:
        """Remove a source; returns how many documents went."""
        return self._stack.ingestor.forget(source)

    def sources(self) -> list[SourceInfo]:
        return self._stack.store.sources()

    def source_access(self, sources: Sequence[str]) -> dict[str, tuple[set[str], set[str]]]:
        """Tenants and permission tags of each stored source among ``sources``."""
        return self._stack.store.source_access(sources)

    def count_chunks(self) -> int:
        return self._stack.store.count_chunks()

    def pending_embeddings(self) -> int:
        """Chunks stored but not embedded yet (one count query; 0 for a keyword-only base,
        whose chunks are never embedded)."""
        return 0 if self.keyword_only else self._stack.store.count_pending()

    def breaker_states(self) -> dict[str, str]:
        """The state (``closed``, ``half_open``, ``open``) of the breaker that pauses the
        query embedder (a base with vectors) and of the one that pauses the reranker (with
        one), by name, for metrics."""
        states: dict[str, str] = {}
        if not self.keyword_only:
            states["knowledge: query embedding"] = self._stack.retriever.breaker.state
        if self.rerank_stage is not None:
            states["knowledge: rerank"] = self.rerank_stage.breaker.state
        return states

    # --- search ---------------------------------------------------------------------------
    @property
    def rerank_timeout(self) -> float:
        """Seconds a search's rerank may take (its reranker's ``timeout``; 0 without a
        reranker, or with one that sets none): a caller's deadline for a search must leave
        room for it, or the search is abandoned while its ranking is still awaited."""
        if self.rerank_stage is None:
            return 0.0
        timeout = getattr(self.rerank_stage.reranker, "timeout", None)
        return float(timeout) if isinstance(timeout, int | float) and timeout > 0 else 0.0

    @property
    def search_options(self) -> SearchOptions:
        """The configured switches, what every search uses unless given others (an ablation
        passes ``dataclasses.replace(kb.search_options, ...)`` per call)."""
        return replace(self._stack.retriever.options, rerank=self.rerank_stage is not None)

    def search(
        self, query: str, *, rerank: bool = True, **args: Unpack[SearchArgs]
    ) -> list[SearchHit]:
        """Top ``k`` passages ``user`` may read: the hits of :meth:`search_result` (same
        arguments)."""
        return list(self.search_result(query, rerank=rerank, **args).hits)

    def search_result(
        self,
        query: str,
        *,
        k: int = 5,
        user: UserContext | None = None,
        mode: SearchMode = "hybrid",
        filters: Mapping[str, Any] | None = None,
        rerank: bool = True,
        options: SearchOptions | None = None,
    ) -> SearchResult:
        """Top ``k`` passages ``user`` may read (permissions applied inside the index queries),
        with how this search went: its timings and, when it fell back to keywords, why.

        With a reranker (and ``rerank``, and ``options.rerank``), ``rerank_candidates`` fused
        hits are fetched, the reranker orders them and the best ``k`` are kept; if it fails
        the fused order is kept and the result's ``rerank_reason`` says why.

        Args:
            query: The user's words, any language.
            k: How many passages at most.
            user: The caller; ``None`` is an anonymous caller of tenant ``default``.
            mode: ``hybrid``, ``keyword`` or ``vector`` (a keyword-only base searches by
                keywords whatever the mode).
            filters: ``{"doc_type": ..., "source": ...}``, each a value or a list of values.
            rerank: ``False`` keeps the fused order even with a reranker.
            options: This search's switches (default: :attr:`search_options`).
        """
        if self.router is None and mode != "keyword":
            mode = "keyword"
        span = start_span("retrieval", "retrieval") if current_span() is not None else None
        counting = current_counting()
        if span is None and counting is None:
            return self._search(query, k, user, mode, filters, rerank, options)
        started = time.perf_counter()
        token = enter(span)  # (an LLM reranker's model call is a child of this search)
        try:
            result = self._search(query, k, user, mode, filters, rerank, options)
        except Exception as exc:
            if span is not None:
                span.fail(type(exc).__name__)
                leave(span, token)
            raise
        finally:
            if counting is not None:
                counting.counter.count_retrieval(mode, time.perf_counter() - started)
        if span is not None:
            record_retrieval(span, self.workspace.name, query, mode, user, k, result)
            leave(span, token)
        return result

    def _search(
        self,
        query: str,
        k: int,
        user: UserContext | None,
        mode: SearchMode,
        filters: Mapping[str, Any] | None,
        rerank: bool,
        options: SearchOptions | None,
    ) -> SearchResult:
        opts = options or self.search_options
        retriever = self._stack.retriever
        stage = self.rerank_stage if rerank and opts.rerank else None
        if stage is None or k <= 0:
            result = retriever.search_result(
                query, k=k, user=user, mode=mode, filters=filters, options=opts
            )
            return self._with_open_reason(result)
        started = time.perf_counter()
        fused = retriever.search_result(
            query, k=stage.fetch_count(k), user=user, mode=mode, filters=filters, options=opts
        )
        outcome = stage.run(query, list(fused.hits), k)
        total = (time.perf_counter() - started) * 1000
        timings = replace(
            fused.timings, rerank_ms=outcome.ms, rerank_reason=outcome.reason, total_ms=total
        )
        counts = replace(
            fused.counts, rerank_candidates=len(fused.hits), returned=len(outcome.hits)
        )
        reranked = replace(fused, hits=tuple(outcome.hits), timings=timings, counts=counts)
        return self._with_open_reason(reranked)

    def _with_open_reason(self, result: SearchResult) -> SearchResult:
        """The search's own fallback reason, else why the base has no embeddings at all."""
        if result.degraded_reason is None and self._degraded_reason is not None:
            return replace(result, degraded_reason=self._degraded_reason)
        return result

    def warm_up(self) -> None:
        """Load what the first search would load (query embedders, index readers) now, so a
        service reports ready only when a search is fast. Never raises for a failing
        embedder: searches then fall back to keywords, with the reason."""
        reason = self._stack.retriever.warm_up()
        if reason is not None:
            logger.warning("%s; searches fall back to keywords until it answers", reason)
        # a mixed query: loads the Chinese segmenter's dictionary and the index reader too
        self._stack.retriever.search("warm up 预热", k=1, mode="keyword")

    # --- integration ----------------------------------------------------------------------
    def as_tool(self) -> Any:
        """The ``retrieve`` tool over this knowledge base.

        .. deprecated:: use :func:`shelfhand.retrieve_tool` (``retrieve_tool(kb)``): the
           knowledge layer knows nothing of agents and tools; this shim goes in a later
           release.
        """
        import warnings

        from shelfhand.agent.retrieve import make_retrieve_tool

        warnings.warn(
            "KnowledgeBase.as_tool() is deprecated: use shelfhand.retrieve_tool(kb)",
            DeprecationWarning,
            stacklevel=2,
        )
        return make_retrieve_tool(self)

    def rebuild_keyword_index(self) -> int:
        """Re-index every chunk into a fresh keyword index in as few segments as its buffer
        allows (one at 1M chunks): keyword search over an index grown by many ingests gets
        faster (``shelfhand reindex``). Returns the number of segments after. Needs the
        workspace's writer; the embedded store only (PostgreSQL keeps its own indexes)."""
        from shelfhand.knowledge.stores.sqlite import SqliteKnowledgeStore
        from shelfhand.knowledge.stores.tantivy import TantivyKeywordIndex

        store, keyword = self._stack.store, self._stack.keyword
        if not isinstance(store, SqliteKnowledgeStore) or not isinstance(
            keyword, TantivyKeywordIndex
        ):
            raise KnowledgeError("only the embedded store has a keyword index to rebuild")
        store.rebuild_indexes([keyword.name])
        return keyword.segments()

    def index_pg_keywords(self) -> int | None:
        """Index in PostgreSQL's keyword search the chunks stored while Qdrant served the
        searches (``shelfhand knowledge reindex`` after ``qdrant_url`` was removed). Returns
        how many, or ``None`` when this knowledge base does not run keyword search in
        PostgreSQL."""
        from shelfhand.knowledge.stores.pg import PgKeywordIndex, PgKnowledgeStore
        from shelfhand.knowledge.stores.pg.backfill import analyse_keywords

        store, keyword = self._stack.store, self._stack.keyword
        if not isinstance(store, PgKnowledgeStore) or not isinstance(keyword, PgKeywordIndex):
            return None
        return analyse_keywords(store)

    def optimize_qdrant(self) -> bool | None:
        """Have Qdrant build its HNSW graphs and merge its segments now (``shelfhand
        reindex``): Qdrant Edge builds them only when asked, so until then its dense search
        is exact (slower past ~100k chunks). Blocking: minutes per 100k chunks on 2 cores.
        Returns ``None`` when this knowledge base does not search on Qdrant, else whether
        Qdrant did any work."""
        from shelfhand.knowledge.stores.qdrant.search import QdrantKeywordSearch

        keyword = self._stack.keyword
        if not isinstance(keyword, QdrantKeywordSearch):
            return None
        return keyword.index.optimize()

    def close(self) -> None:
        try:
            if self.rerank_stage is not None:
                close_reranker = getattr(self.rerank_stage.reranker, "close", None)
                if callable(close_reranker):
                    with contextlib.suppress(Exception):  # a connection pool; never blocks close
                        close_reranker()
            self._stack.close()
        finally:
            if self.lock is not None:
                self.lock.release()

    def __enter__(self) -> KnowledgeBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
