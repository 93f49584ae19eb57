"""Hybrid retrieval: BM25 + vectors fused convexly, permission-filtered inside each query (R6).

::

    kb = open_embedded_store(workspace, router)
    result = kb.retriever.search_result("E-203 是什么故障？", k=5, user=user)
    kb.close()

A search's outcome travels with it (:class:`~shelfhand.knowledge.types.SearchResult`: the hits,
the time of each stage, why it fell back to keywords if it did); nothing of one search is
kept on the retriever, which many threads share. Its switches (exact boost, relevance
threshold, version siblings, candidates per side) are a
:class:`~shelfhand.knowledge.types.SearchOptions` per call, the configured ones by default.

Each side fetches ``candidates_factor × k`` candidates: keyword from tantivy, vectors from every
space that holds vectors (the query embedded by that space's embedder, so a mixed Chinese and
English corpus works). Lists are fused by :func:`~shelfhand.knowledge.retrieval.fusion.convex_fusion`
(BM25 scaled by the query's best score, plus cosine; a keyword candidate outside a space's top
list gets its exact cosine from its stored vector) and deduplicated by chunk content hash. When
one side has nothing, the other's ranking and scores are used as is. The ``rrf`` fusion choice
(:attr:`SearchOptions.fusion`) fuses ranks instead
(:func:`~shelfhand.knowledge.retrieval.fusion.weighted_rrf`, the space weights below as list
weights); on a Qdrant index the server fuses, the whole hybrid search one request
(:class:`~shelfhand.knowledge.protocols.FusedSearch`), and every candidate's cosine comes with
it. Convex fusion cannot be one Qdrant query (it scales BM25 by the query's best score and
reads the cosine of keyword candidates outside the vector list), so it stays the two queries
fused here. Every hit gets a
``relevance`` (0..1, comparable across queries); hits under ``min_relevance`` are dropped, so a
query the documents do not answer finds nothing.
If embedding the query fails (quota, model unavailable) or does not finish within
``embed_timeout`` seconds, the search continues on keywords and its result's
``degraded_reason`` says why. After ``breaker_failures`` such failures in a row the query
embedder is not asked at all for ``breaker_cooldown`` seconds (searches go straight to
keywords, with the reason), then one search tries it again (a
:class:`~shelfhand.core.breaker.CircuitBreaker`). The first query of each space in a process
may take ``load_timeout`` (loading the model); :meth:`HybridRetriever.warm_up` does that before
a service reports ready.
Chunks still waiting for ingest phase 2 have no vectors: they are found by keywords only, and
:attr:`SearchResult.pending_chunks` says how many there are.

Exact identifiers win in every mode: when the query names identifiers (``E-888``,
``SKU2024-011``), the passages whose text holds one go first
(:mod:`~shelfhand.knowledge.retrieval.exact`; ``exact_boost=False`` turns this off, for
ablations).

In hybrid mode the keyword side runs on a worker thread while the calling thread embeds the
query and searches the vectors (tantivy, faiss and the PostgreSQL driver release the GIL), so a
hybrid search takes about as long as its slower side rather than the sum of both; when every
worker is busy (many concurrent searches) it runs in the calling thread as before.

Versions side by side: a hit from one version of a document (``保修政策（第 1 版）``) brings the
same section of its other versions along (:mod:`shelfhand.knowledge.retrieval.versions`), so their
disagreements can be flagged; ``version_siblings=False`` turns this off.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Unpack

from shelfhand.core.breaker import OPEN, CircuitBreaker
from shelfhand.core.context import UserContext
from shelfhand.core.errors import KnowledgeError
from shelfhand.knowledge.analysis import (
    SynonymTable,
    chinese_only,
    glued_candidates,
    holds_chinese,
    query_words,
    split_words,
    synonym_candidates,
    synonym_table,
    unglued,
    with_synonyms,
)
from shelfhand.knowledge.embeddings.interrupt import call_with_deadline
from shelfhand.knowledge.embeddings.router import (
    EmbeddingRouter,
    Vectors,
    detect_language,
    is_bridge_space,
)
from shelfhand.knowledge.protocols import FusedSearch, KeywordIndex, KnowledgeStore, VectorSearch
from shelfhand.knowledge.retrieval.exact import exact_first
from shelfhand.knowledge.retrieval.fusion import (
    KEYWORD_WEIGHT,
    by_score,
    candidate_relevance,
    closeness,
    convex_fusion,
    weighted_rrf,
)
from shelfhand.knowledge.retrieval.sides import KeywordSide, Overlap, VectorSide, default_workers
from shelfhand.knowledge.retrieval.versions import add_version_siblings
from shelfhand.knowledge.scoring import bm25_idf
from shelfhand.knowledge.stores.outbox import search_start
from shelfhand.knowledge.types import (
    Chunk,
    FusedCandidates,
    Fusion,
    Scope,
    SearchArgs,
    SearchCounts,
    SearchHit,
    SearchMode,
    SearchOptions,
    SearchResult,
    SearchTimings,
)

logger = logging.getLogger(__name__)

__all__ = ["MAX_QUERY_CHARS", "HybridRetriever", "SearchMode", "SearchTimings"]

MAX_QUERY_CHARS = 2000
"""The most characters of a query that are embedded (the rest is searched by keyword only);
the search API and the ``retrieve`` tool refuse a longer query. Embedding a query costs more
than its length: USE-multilingual took 0.2 s for 2,000 Chinese characters, 7.8 s and
600 MB for 20,000, and three ``retrieve`` calls of 200 KB over MCP grew a server to 5 GB
(each embedding kept running on its thread after the search's timeout gave up on it)."""


class HybridRetriever:
    """Searches the keyword index and every vector space, fuses and deduplicates.

    Thread-safe: one retriever serves concurrent searches, each with its own outcome.

    Args:
        store: The system of record (chunk texts, ACL for the vector side).
        keyword_index: The BM25 index.
        vector_indexes: The vector spaces, or ``None`` for keyword-only search.
        router: Embeds queries per space; ``None`` disables the vector side.
        candidates_factor: Each side fetches ``candidates_factor * k`` candidates.
        rrf_k: ``k`` of the ``rrf`` fusion (:func:`~shelfhand.knowledge.retrieval.fusion.weighted_rrf`).
        other_space_weight: Weight of vector spaces other than the one the query's language
            routes to (a model weak in the query's language ranks worse), in fusion and in
            relevance. A space whose embedder is ``multilingual`` (USE) is weighted 1 for every
            language: it matches an English question to a Chinese passage; so is a bridge
            space, searched only by queries not of the language it bridges (a Chinese
            question, an English passage; see
            :mod:`~shelfhand.knowledge.embeddings.router`).
        keyword_weight: ``α`` of the convex fusion, the keyword side's share (0..1).
        min_relevance: Hits whose ``relevance`` is under this are dropped (0 keeps all).
        embed_timeout: Seconds a query embedding may take before the search goes on with
            keywords alone (``None``: wait for it).
        load_timeout: The same for the first query of each space (it loads the model).
        breaker_failures: Failed or late query embeddings in a row that pause the embedder.
        breaker_cooldown: Seconds the paused embedder is left alone.
        exact_boost: Put passages holding an identifier of the query first (see the module
            docstring).
        version_siblings: Bring the same section of a hit's other document versions along
            (see :mod:`shelfhand.knowledge.retrieval.versions`).
        overlap_workers: Threads that run hybrid searches' keyword side alongside their vector
            side (module docstring); ``None``: one fewer than the CPUs, at most 8; 0: none.
        fusion: ``convex`` (the default) or ``rrf`` (see the module docstring).

    ``candidates_factor``, ``min_relevance``, ``exact_boost``, ``version_siblings`` and ``fusion`` make
    :attr:`options`, the defaults of every search; a search may be given others.
    """

    def __init__(
        self,
        store: KnowledgeStore,
        keyword_index: KeywordIndex,
        vector_indexes: VectorSearch | None,
        router: EmbeddingRouter | None,
        *,
        candidates_factor: int = 3,
        rrf_k: int = 60,
        other_space_weight: float = 0.5,
        keyword_weight: float = KEYWORD_WEIGHT,
        min_relevance: float = 0.0,
        embed_timeout: float | None = None,
        load_timeout: float = 60.0,
        breaker_failures: int = 3,
        breaker_cooldown: float = 30.0,
        exact_boost: bool = True,
        version_siblings: bool = True,
        overlap_workers: int | None = None,
        fusion: Fusion = "convex",
    ) -> None:
        self.options = SearchOptions(
            exact_boost=exact_boost,
            min_relevance=min_relevance,
            version_siblings=version_siblings,
            candidates_factor=candidates_factor,
            fusion=fusion,
        )
        """The configured switches: what a search uses unless it is given others."""
        self.store = store
        self.keyword_index = keyword_index
        self.vector_indexes = vector_indexes
        self.router = router
        self.rrf_k = rrf_k
        self.other_space_weight = other_space_weight
        if not 0.0 <= keyword_weight <= 1.0:
            raise KnowledgeError(f"keyword_weight must be within 0..1, not {keyword_weight}")
        self.keyword_weight = keyword_weight
        self.synonyms: SynonymTable = synonym_table()
        """What a query's keyword search adds to its words (the built-in synonyms; a
        knowledge base sets the workspace's)."""
        self._warned: set[str] = set()
        self.embed_timeout = embed_timeout
        self.load_timeout = load_timeout
        self.breaker_failures = breaker_failures
        self.breaker_cooldown = breaker_cooldown
        self.breaker = CircuitBreaker(
            "query embedding", trip_after=breaker_failures, reset_after=breaker_cooldown
        )
        """Pauses the query embedder after failures in a row (guarded by a lock: a
        :class:`~shelfhand.core.breaker.CircuitBreaker` is not thread-safe)."""
        self._breaker_lock = threading.Lock()
        self._last_failure = ""
        self._warm: set[str] = set()
        self._overlap = Overlap(default_workers() if overlap_workers is None else overlap_workers)
        self._fused = keyword_index if isinstance(keyword_index, FusedSearch) else None

    def close(self) -> None:
        """Stop the keyword side's worker threads (searches still work, without overlap)."""
        self._overlap.close()

    def warm_up(self) -> str | None:
        """Load every space's query embedder (one embedding each, waiting at most
        ``load_timeout``) so that later queries meet ``embed_timeout``; returns why that
        failed, if it did (searches then fall back to keywords as usual)."""
        if self.router is None or self.vector_indexes is None:
            return None
        for space in self.router.routed_spaces:  # (a bridge space has one of their embedders)
            limit = None if self.embed_timeout is None else self.load_timeout
            try:
                self._embed_one(space, "warm up", limit)
            except Exception as exc:
                return f"warming up the {space!r} embedder failed ({type(exc).__name__}: {exc})"
            self._warm.add(space)
        self._warm.update(self.router.spaces)
        return None

    def search(self, query: str, **args: Unpack[SearchArgs]) -> list[SearchHit]:
        """The hits of :meth:`search_result` (same arguments)."""
        return list(self.search_result(query, **args).hits)

    def search_timed(
        self,
        query: str,
        *,
        query_vectors: Mapping[str, Vectors] | None = None,
        **args: Unpack[SearchArgs],
    ) -> tuple[list[SearchHit], SearchTimings]:
        """The hits and timings of :meth:`search_result` (same arguments; for benchmarks)."""
        result = self.search_result(query, query_vectors=query_vectors, **args)
        return list(result.hits), result.timings

    def search_result(
        self,
        query: str,
        *,
        k: int = 5,
        user: UserContext | None = None,
        mode: SearchMode = "hybrid",
        filters: Mapping[str, Any] | None = None,
        options: SearchOptions | None = None,
        query_vectors: Mapping[str, Vectors] | None = None,
    ) -> SearchResult:
        """Top ``k`` chunks for ``query`` that ``user`` may read, with how the search went.

        Args:
            query: The user's words, any language.
            k: How many hits at most.
            user: The caller; ``None`` is an anonymous caller of tenant ``default``.
            mode: ``hybrid``, or one side only.
            filters: ``{"doc_type": ..., "source": ...}``, each a value or a list of values.
            options: This search's switches (default: :attr:`options`).
            query_vectors: Space → query vector: skips query embedding (benchmarks).

        Raises:
            KnowledgeError: An unknown filter key or mode.
        """
        # the indexes' look for other processes' writes: once in this search, not per side
        token = search_start.set(time.monotonic())
        try:
            return self._search_result(query, k, user, mode, filters, options, query_vectors)
        finally:
            search_start.reset(token)

    def _search_result(
        self,
        query: str,
        k: int,
        user: UserContext | None,
        mode: SearchMode,
        filters: Mapping[str, Any] | None,
        options: SearchOptions | None,
        query_vectors: Mapping[str, Vectors] | None,
    ) -> SearchResult:
        if mode not in ("hybrid", "keyword", "vector"):
            raise KnowledgeError(f"unknown search mode {mode!r}; use hybrid, keyword or vector")
        scope = Scope.of(user, filters)
        opts = options or self.options
        t0 = time.perf_counter()
        fetch = max(k, 1) * opts.candidates_factor
        degraded: str | None = None
        keyword: list[tuple[int, float]] = []
        vectors = VectorSide([], [], [], [])
        t_kw = t_embed = t_vec = 0.0
        tokens: list[str] | None = None  # the query's tokens, analysed once when needed
        use_keyword = mode != "vector"
        keyword_side: Future[KeywordSide] | None = None
        # an index that fuses by itself (rrf on Qdrant) takes both sides in one request
        fused_by = self._fused if mode == "hybrid" and opts.fusion == "rrf" else None
        fused: FusedCandidates | None = None
        weighted: dict[str, tuple[Vectors, float]] = {}
        if mode == "hybrid" and fused_by is None:  # overlaps the embedding and vector search
            keyword_side = self._overlap.submit(self._keyword_side, query, fetch, scope)
        if mode != "keyword":
            t1 = time.perf_counter()
            if query_vectors is not None:
                embedded: Mapping[str, Vectors] | None = query_vectors
            else:
                embedded, degraded = self._embed(query)
            t_embed = time.perf_counter() - t1
            if embedded is None:
                use_keyword = True  # degraded: keywords stand in for vectors
            elif fused_by is not None:
                t1 = time.perf_counter()
                tokens = self._query_tokens(query, scope)
                weighted = self._weighted(query, embedded)
                fused = fused_by.search_fused(
                    tokens, weighted, fetch, scope=scope, rrf_k=self.rrf_k
                )
                keyword, use_keyword = fused.keyword, False
                t_vec = time.perf_counter() - t1
            elif self.vector_indexes is not None:
                t1 = time.perf_counter()
                vectors = self._vector_side(query, embedded, fetch, scope)
                t_vec = time.perf_counter() - t1
        if use_keyword:
            side = (
                keyword_side.result()
                if keyword_side is not None
                else self._keyword_side(query, fetch, scope)
            )
            tokens, keyword, t_kw = side.tokens, side.hits, side.seconds
        t1 = time.perf_counter()
        split = split_words(tokens, query) if tokens else ()
        wider = functools.partial(_translated, query=query)
        if fused is not None:
            hits, n_fused, relevant = self._fused_hits(
                tokens or [],
                fused,
                weighted,
                fetch,
                k,
                opts.min_relevance,
                split,
                wider=wider,
                scope=scope,
            )
        else:
            rrf = mode == "hybrid" and opts.fusion == "rrf"  # one side alone keeps its scores
            hits, n_fused, relevant = self._fuse(
                tokens or [],
                keyword,
                vectors,
                k,
                opts.min_relevance,
                split,
                rrf=rrf,
                wider=wider,
                scope=scope,
            )
        if len(hits) > k:
            hits = own_language_first(hits, query)[:k]
        t_fuse = time.perf_counter() - t1
        t1 = time.perf_counter()
        if opts.exact_boost:
            hits = exact_first(
                query,
                hits,
                k=k,
                scope=scope,
                keyword_index=self.keyword_index,
                store=self.store,
                tokens=tokens,
                keyword=keyword,
            )
        if opts.version_siblings:
            hits = add_version_siblings(hits, self.store, scope, k)
        t_exact = time.perf_counter() - t1
        pending = self.store.count_pending() if mode != "keyword" and self.router else 0
        timings = SearchTimings(
            keyword_ms=t_kw * 1000,
            embed_ms=t_embed * 1000,
            vector_ms=t_vec * 1000,
            fuse_ms=t_fuse * 1000,
            exact_ms=t_exact * 1000,
            total_ms=(time.perf_counter() - t0) * 1000,
            pending_chunks=pending,
        )
        counts = SearchCounts(
            keyword=len(keyword),
            vector=len({rowid for found in vectors.lists for rowid, _ in found})
            if fused is None
            else len({rowid for found in fused.cosines.values() for rowid in found}),
            fused=n_fused,
            relevant=relevant,
            returned=len(hits),
        )
        return SearchResult(
            hits=tuple(hits), timings=timings, degraded_reason=degraded, counts=counts
        )

    def _vector_side(
        self, query: str, embedded: Mapping[str, Vectors], fetch: int, scope: Scope
    ) -> VectorSide:
        assert self.vector_indexes is not None
        side = VectorSide([], [], [], [])
        for space, (qvec, weight) in self._weighted(query, embedded).items():
            found = self.vector_indexes.search(space, qvec, fetch, scope=scope)
            if found:
                side.lists.append(found)
                side.weights.append(weight)
                side.spaces.append(space)
                side.query_vectors.append(qvec)
        return side

    def _weighted(
        self, query: str, embedded: Mapping[str, Vectors]
    ) -> dict[str, tuple[Vectors, float]]:
        """Each space's query vector and weight: 1 for the space the query's language routes
        to, for multilingual ones and for bridge spaces (which :meth:`_embed` leaves out for
        a query of their own language), ``other_space_weight`` for the rest."""
        home = self.router.space_for(query) if self.router is not None else None
        full = self._full_weight_spaces()
        return {
            space: (qvec, 1.0 if space == home or space in full else self.other_space_weight)
            for space, qvec in embedded.items()
        }

    def _full_weight_spaces(self) -> frozenset[str]:
        """The spaces whose embedder declares ``multilingual = True``, and bridge spaces."""
        router = self.router
        if router is None:
            return frozenset()
        return frozenset(
            space
            for space in router.spaces
            if router.bridged_from(space) is not None
            or getattr(router.embedder(space), "multilingual", False) is True
        )

    def _embed(self, query: str) -> tuple[dict[str, Vectors] | None, str | None]:
        """The query vector in every space that holds vectors, or ``None`` with the reason
        when embedding failed, took too long, or is paused by the breaker."""
        if self.router is None or self.vector_indexes is None:
            return {}, None
        with self._breaker_lock:
            wait = self.breaker.before(time.monotonic())
            last = self._last_failure
        if wait is not None:
            return None, (
                f"query embedding paused after {self.breaker_failures} failures in a row "
                f"(last: {last}); using keyword search, retrying in {wait:.0f}s"
            )
        out: dict[str, Vectors] = {}
        router = self.router
        query = query[:MAX_QUERY_CHARS]
        home: str | None = None  # (the query's space, read for a bridge space only)
        # (bridge spaces last: their query vector is that of the space they bridge to)
        spaces = sorted(self.vector_indexes.spaces(), key=lambda s: router.bridged_from(s) or "")
        try:
            for space in spaces:
                if space not in router.spaces:
                    if not is_bridge_space(space):  # (one turned off: cross_language = false)
                        self._warn_once(f"no embedder configured for vector space {space!r}")
                    continue
                source = router.bridged_from(space)
                if source is not None:
                    home = home or router.space_for(query)
                    if source == home:  # (the query's own language has its own space)
                        continue
                    # the same embedder as the space it bridges to: one embedding
                    embedder = router.embedder(space)
                    same = next((s for s in out if router.embedder(s) is embedder), None)
                    if same is not None:
                        out[space] = out[same]
                        continue
                timeout = self.embed_timeout
                if timeout is not None and space not in self._warm:
                    timeout = max(timeout, self.load_timeout)
                try:
                    out[space] = self._embed_one(space, query, timeout)
                except Exception as exc:  # any provider failure degrades to keyword search
                    what = (
                        f"did not finish within {timeout:g}s"
                        if isinstance(exc, TimeoutError)
                        else f"failed ({type(exc).__name__}: {exc})"
                    )
                    self._record_failure(what)
                    reason = f"query embedding {what}; using keyword search"
                    self._warn_once(reason)
                    return None, reason
                self._warm.add(space)
        except BaseException:
            with self._breaker_lock:  # neither health nor failure (e.g. interrupted)
                self.breaker.neutral()
            raise
        with self._breaker_lock:
            self.breaker.success(time.monotonic())
        return out, None

    def _embed_one(self, space: str, query: str, timeout: float | None) -> Vectors:
        """Embed on a daemon thread and wait at most ``timeout`` seconds (a hung embedder
        keeps its thread, never the caller); past it a local model's embedding is stopped
        (:func:`~shelfhand.knowledge.embeddings.interrupt.call_with_deadline`)."""
        assert self.router is not None
        embedder = self.router.embedder(space)
        if timeout is None:
            return embedder.embed_query(query)
        return call_with_deadline(
            functools.partial(embedder.embed_query, query), timeout, name="shelfhand-query-embed"
        )

    def _record_failure(self, what: str) -> None:
        with self._breaker_lock:
            was = self.breaker.state
            self._last_failure = what
            self.breaker.failure(time.monotonic())
            opened = self.breaker.state is OPEN and was is not OPEN
        if opened:
            logger.warning(
                "query embedding paused for %gs after %d failures in a row (last: %s)",
                self.breaker_cooldown,
                self.breaker_failures,
                what,
            )

    def _warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            logger.warning("%s", message)

    def _keyword_side(self, query: str, fetch: int, scope: Scope) -> KeywordSide:
        t1 = time.perf_counter()
        tokens = self._query_tokens(query, scope)
        hits = self.keyword_index.search(tokens, fetch, scope=scope)
        return KeywordSide(tokens, hits, time.perf_counter() - t1)

    def _query_tokens(self, query: str, scope: Scope) -> list[str]:
        """The keyword tokens of ``query``, a word no document holds searched as its synonym
        that some do, and a Chinese word jieba guessed from a name and the character beside it
        searched as the name (:func:`~shelfhand.knowledge.analysis.unglued`); one look-up of
        document frequencies, only for a query that has a word with synonyms or of three
        Chinese characters or more, or characters jieba's dictionary has no word for, whose
        pairs the index holds are searched too (:func:`~shelfhand.knowledge.analysis.unknown_pairs`:
        大促 of "大促期间能发版吗？" meets the policy's "大促封网期", cut 大/促封/网期)."""
        tokens, pairs = query_words(query)
        glued = glued_candidates(tokens)
        synonyms = synonym_candidates(tokens, self.synonyms)
        if not glued and not synonyms and not pairs:
            return tokens
        words = list(dict.fromkeys([*synonyms, *glued, *pairs]))
        _, freqs = self.keyword_index.doc_freqs(words, scope)
        doc_freq = dict(zip(words, freqs, strict=True))
        if glued:
            tokens = unglued(tokens, doc_freq)
        if synonyms:
            tokens = with_synonyms(tokens, self.synonyms, doc_freq)
        held = [p for p in pairs if doc_freq[p] and p not in tokens]
        return tokens + held if held else tokens

    def _fuse(
        self,
        query_tokens: list[str],
        keyword: list[tuple[int, float]],
        vectors: VectorSide,
        k: int,
        min_relevance: float,
        split: tuple[str, ...] = (),
        *,
        rrf: bool = False,
        wider: Callable[[Sequence[Chunk]], bool] | None = None,
        scope: Scope,
    ) -> tuple[list[SearchHit], int, int]:
        """The top ``k`` hits, and how many candidates were fused and how many of them were
        relevant enough (``split``, ``wider``: see :meth:`_choose`)."""
        keyword_rank = {rowid: i for i, (rowid, _) in enumerate(keyword, start=1)}
        vector_rank: dict[int, int] = {}
        for found in vectors.lists:
            for i, (rowid, _) in enumerate(found, start=1):
                vector_rank[rowid] = min(i, vector_rank.get(rowid, i))
        if not keyword and not vectors.lists:
            return [], 0, 0
        cosines = [dict(found) for found in vectors.lists]
        if rrf:
            lists = [[r for r, _ in keyword]] + [[r for r, _ in f] for f in vectors.lists]
            ranked = weighted_rrf(lists, [1.0, *vectors.weights], self.rrf_k)
            self._fill_cosines([(r, 0.0) for r, _ in ranked], vectors, cosines, each_space=True)
        elif keyword and vectors.lists:
            self._fill_cosines(keyword, vectors, cosines)
            pairs = list(zip(cosines, vectors.weights, strict=True))
            ranked = convex_fusion(keyword, pairs, self.keyword_weight)
        else:
            ranked = keyword or vectors.lists[0]
            if len(vectors.lists) > 1:  # several spaces, no keywords: one convex list
                ranked = convex_fusion([], list(zip(cosines, vectors.weights, strict=True)), 0.0)
        near = closeness(cosines, vectors.weights)
        strength = candidate_relevance(
            query_tokens, keyword, cosines, vectors.weights, self.keyword_index, scope, near
        )
        unsure = _unsure(
            split, query_tokens, cosines, vectors.weights, min_relevance, self.keyword_index, scope
        )
        near = self._calibrated(vectors.spaces, cosines, vectors.weights, near)
        return self._choose(
            ranked, strength, near, keyword_rank, vector_rank, k, min_relevance, unsure, wider
        )

    def _fused_hits(
        self,
        query_tokens: list[str],
        fused: FusedCandidates,
        weighted: Mapping[str, tuple[Vectors, float]],
        fetch: int,
        k: int,
        min_relevance: float,
        split: tuple[str, ...] = (),
        *,
        wider: Callable[[Sequence[Chunk]], bool] | None = None,
        scope: Scope,
    ) -> tuple[list[SearchHit], int, int]:
        """The hits of a search the index fused: relevance and ranks from the candidates'
        cosines (each space's top ``fetch`` by cosine is its vector list) and keyword hits."""
        keyword = fused.keyword
        keyword_rank = {rowid: i for i, (rowid, _) in enumerate(keyword, start=1)}
        vector_rank: dict[int, int] = {}
        for found in fused.cosines.values():
            for i, (rowid, _) in enumerate(by_score(found.items())[:fetch], start=1):
                vector_rank[rowid] = min(i, vector_rank.get(rowid, i))
        spaces = list(fused.cosines)
        weights = [weighted[space][1] for space in spaces]
        cosines = [fused.cosines[space] for space in spaces]
        near = closeness(cosines, weights)
        strength = candidate_relevance(
            query_tokens, keyword, cosines, weights, self.keyword_index, scope, near
        )
        ranked = by_score(fused.ranked)
        unsure = _unsure(
            split, query_tokens, cosines, weights, min_relevance, self.keyword_index, scope
        )
        near = self._calibrated(spaces, cosines, weights, near)
        return self._choose(
            ranked, strength, near, keyword_rank, vector_rank, k, min_relevance, unsure, wider
        )

    def _calibrated(
        self,
        spaces: Sequence[str],
        cosines: Sequence[Mapping[int, float]],
        weights: Sequence[float],
        near: dict[int, float],
    ) -> dict[int, float]:
        """The candidates' :func:`closeness` in the spaces whose embedder is ``calibrated``
        (the built-in models, whose cosines the extractive answer's nearness rule was
        measured on): ``near`` itself when every space's is, none when no space's is."""
        router = self.router
        if router is None:
            return {}
        kept = [getattr(router.embedder(s), "calibrated", False) is True for s in spaces]
        if all(kept):
            return near
        if not any(kept):
            return {}
        pairs = [(c, w) for c, w, k in zip(cosines, weights, kept, strict=True) if k]
        return closeness([c for c, _ in pairs], [w for _, w in pairs])

    def _choose(
        self,
        ranked: list[tuple[int, float]],
        strength: dict[int, float],
        near: Mapping[int, float],
        keyword_rank: dict[int, int],
        vector_rank: dict[int, int],
        k: int,
        min_relevance: float,
        unsure: Callable[[int, Chunk], bool] | None = None,
        wider: Callable[[Sequence[Chunk]], bool] | None = None,
    ) -> tuple[list[SearchHit], int, int]:
        """The top ``k`` of ``ranked`` at or over ``min_relevance``, one per passage, and how
        many candidates were ranked and how many of them were relevant enough.

        A candidate that ``unsure`` (:func:`_unsure`) says the keywords alone brought in on
        the characters of a word jieba lacks ("2025 年" for 年假) is not one. When ``wider``
        says so of the top ``k`` (a document's passage in another language than the query's
        among them, :func:`_translated`), :data:`LANGUAGE_SLACK` more are chosen, for
        :func:`own_language_first` to move up."""
        # too weak to count as an answer
        strong = [(r, s) for r, s in ranked if strength.get(r, 0.0) >= min_relevance]
        dropped = 0
        chosen: list[tuple[int, float]] = []
        chunks: dict[int, Chunk] = {}
        seen: set[str] = set()
        start = 0
        want = k
        while len(chosen) < want and start < len(strong):
            # read the chunks a few more than still needed at a time: usually one query
            batch = strong[start : start + want - len(chosen) + 2]
            start += len(batch)
            read = self.store.chunk_map([rowid for rowid, _ in batch])
            for rowid, score in batch:
                chunk = read.get(rowid)
                if chunk is None or chunk.content_hash in seen:
                    continue  # deleted since indexing, or a duplicate passage
                if unsure is not None and unsure(rowid, chunk):
                    dropped += 1
                    continue
                seen.add(chunk.content_hash)
                chosen.append((rowid, score))
                chunks[rowid] = chunk
                if len(chosen) == want:
                    if want == k and wider is not None and wider(list(chunks.values())):
                        want += LANGUAGE_SLACK
                        continue
                    break
        hits = [
            SearchHit(
                chunk=chunks[rowid],
                score=score,
                keyword_rank=keyword_rank.get(rowid),
                vector_rank=vector_rank.get(rowid),
                relevance=strength.get(rowid, 0.0),
                cosine=near.get(rowid),
            )
            for rowid, score in chosen
            if rowid in chunks
        ]
        return hits, len(ranked), len(strong) - dropped

    def _fill_cosines(
        self,
        keyword: list[tuple[int, float]],
        vectors: VectorSide,
        cosines: list[dict[int, float]],
        *,
        each_space: bool = False,
    ) -> None:
        """Exact cosines of keyword candidates that no space's top list has (their indexed
        vectors, read from memory): fusion then weighs what the vector side thinks of them.
        ``each_space``: of the candidates missing from each space's list (every candidate
        gets its cosine in every space, as a search fused by the index has them)."""
        if self.vector_indexes is None:
            return
        in_none = [] if each_space else [r for r, _ in keyword if not any(r in c for c in cosines)]
        for i, space in enumerate(vectors.spaces):
            missing = [r for r, _ in keyword if r not in cosines[i]] if each_space else in_none
            if missing:
                found = self.vector_indexes.similarities(space, vectors.query_vectors[i], missing)
                cosines[i].update(found)


LANGUAGE_SLACK = 3
"""Hits chosen beyond ``k`` so that :func:`own_language_first` has passages to move up (only
when the top ``k`` hold a document's passages in both languages)."""
LANGUAGE_SAMPLE = 200
"""Characters of a passage's start :func:`own_language_first` reads its language from."""


def _own_language(chunks: Sequence[Chunk], query: str) -> list[bool] | None:
    """For each of ``chunks`` of a document with two or more among them, whether it is in
    ``query``'s language (a chunk is Chinese when a Chinese character starts it, within
    :data:`LANGUAGE_SAMPLE` characters: a chunk is seldom in two languages, and the share of
    a whole text took 50 µs a passage); ``True`` for the others. ``None`` when each document
    has one chunk among them (nothing to tell apart)."""
    per_doc = Counter(c.doc_id for c in chunks)
    if len(per_doc) == len(chunks):
        return None
    zh = detect_language(query) == "zh"
    return [per_doc[c.doc_id] == 1 or holds_chinese(c.text, LANGUAGE_SAMPLE) == zh for c in chunks]


def _translated(chunks: Sequence[Chunk], query: str) -> bool:
    """Whether a document has passages among ``chunks`` in ``query``'s language and in the
    other one (see :func:`own_language_first`)."""
    same = _own_language(chunks, query)
    if same is None:
        return False
    langs: dict[str, set[bool]] = {}
    for chunk, own in zip(chunks, same, strict=True):
        langs.setdefault(chunk.doc_id, set()).add(own)
    return any(len(both) == 2 for both in langs.values())


def own_language_first(hits: Sequence[SearchHit], query: str) -> list[SearchHit]:
    """``hits`` with each passage in another language than ``query`` moved after the last
    passage of its document in the query's language: a bilingual policy's English section
    (found for a Chinese question through the bridge space of English chunks, see
    :mod:`~shelfhand.knowledge.embeddings.router`) below its Chinese ones, which it
    translates, so that it does not take the place of one of them ("怎么退货？" over the
    samples' returns policy lost the section on 订单号 to it). A document in one language
    keeps its place."""
    same = _own_language([h.chunk for h in hits], query)
    if same is None:
        return list(hits)  # (one passage a document: nothing to move)
    last = {h.chunk.doc_id: i for i, (h, own) in enumerate(zip(hits, same, strict=True)) if own}
    order = [
        (
            i
            if own or h.chunk.doc_id not in last or last[h.chunk.doc_id] < i
            else last[h.chunk.doc_id] + 0.5
        )
        for i, (h, own) in enumerate(zip(hits, same, strict=True))
    ]
    return [hits[i] for i in sorted(range(len(hits)), key=lambda i: order[i])]


def _unsure(
    split: tuple[str, ...],
    query_tokens: Sequence[str],
    cosines: Sequence[Mapping[int, float]],
    weights: Sequence[float],
    min_relevance: float,
    keyword_index: KeywordIndex,
    scope: Scope,
) -> Callable[[int, Chunk], bool] | None:
    """For a query with words its analysis cut into characters (``split``: ``年假``), whether
    a candidate is one the keywords brought in on the commonest of those characters alone:

    * its own vectors are not close enough to count (a passage about paid leave stays);
    * its text holds none of those words whole and none of the query's other Chinese words
      ("公司政策" is still about "公司的年假政策");
    * and the characters it holds are less than half of those words' weight (their IDF):
      "2025 年" holds 年, in most passages, not 假, in none. A run that a common word joins
      ("䲟又叫做什么？": 䲟 and 又) is still found by its rare character.

    ``None`` when there is nothing to check, when every hit is asked for (``min_relevance``
    0), or when the query has a word of another script, which the text is not searched for
    here (its analysed form, ``warranti``, is not in the text as such)."""
    if not split or min_relevance <= 0:
        return None
    chars = list(dict.fromkeys("".join(split)))
    others = [t for t in dict.fromkeys(query_tokens) if t not in chars]
    if any(not chinese_only(t) for t in others):
        return None
    close: set[int] = set()
    for found, weight in zip(cosines, weights, strict=True):
        close.update(r for r, c in found.items() if weight * c >= min_relevance)
    needles = (*split, *others)
    num_docs, freqs = keyword_index.doc_freqs(chars, scope)
    idf = {c: bm25_idf(df, num_docs) for c, df in zip(chars, freqs, strict=True)}
    total = sum(idf.values())

    def unsure(rowid: int, chunk: Chunk) -> bool:
        if rowid in close:
            return False
        text = unicodedata.normalize(
            "NFKC", f"{chunk.title}\n{' '.join(chunk.section_path)}\n{chunk.text}"
        )
        if any(n in text for n in needles):
            return False
        return sum(w for c, w in idf.items() if c in text) < 0.5 * total

    return unsure
