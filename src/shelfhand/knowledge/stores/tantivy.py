"""BM25 keyword search with tantivy, permission filter inside the query (docs/design.md R6).

Text is analysed by :mod:`shelfhand.knowledge.analysis` and handed to tantivy pre-split by
whitespace, so Chinese segmentation, stemming and whole codes are ours and identical at index
and query time. Queries are built from term objects, never parsed from user text (no syntax
errors, no injection). Tenant, permission tags, doc type and source are indexed raw and form
zero-scored ``Must`` clauses of every query, so a caller never gets a hit they may not read.

A filter clause costs the ranked query its block-max WAND pruning, so
:meth:`TantivyKeywordIndex.search` first ranks the plain union of the query's terms and checks
its hits against the caller's filters, and runs the filtered query only when that cannot pay
(:mod:`~shelfhand.knowledge.stores.keyword_plan` says how, and why). Query terms found in more
than ``common_share`` of the chunks do not rank while the rarer terms find k readable chunks
(:func:`~shelfhand.knowledge.scoring.ranking_terms`).

Several processes may open one index, but only one may write it (tantivy allows one
``IndexWriter`` per directory; the workspace's writer lock decides which process that is).
``access`` says how this process uses it:

* ``"write"`` — the writer: keeps its ``IndexWriter`` between commits;
* ``"read"`` — no other writer was running at open: it may replay pending changes, but lets go
  of the ``IndexWriter`` after each commit so that a writer starting later is not blocked;
* ``"read-only"`` — another process writes: this one never touches the files.

Before each search, both reading kinds look whether the writer committed since their last
look (tantivy's ``meta.json``) and reload the searcher when it did, so they see a writer's
commits.

Section headings are indexed twice: with the title and text in ``body`` and on their own in
``head``, which a query also searches with ``head_boost``. A passage whose heading names the
query's subject (``保修期限`` for ``保修期多久``) so beats one that mentions it in passing.
The identifiers of the passage text (not of its headings: a cited passage should show the code)
are indexed in ``codes``; :meth:`TantivyKeywordIndex.search_exact` looks them up for the
exact-identifier step of :class:`~shelfhand.knowledge.retrieval.hybrid.HybridRetriever`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import tantivy

from shelfhand.core.errors import InvalidArgumentError, KnowledgeError
from shelfhand.knowledge.analysis import identifier_tokens
from shelfhand.knowledge.scoring import (
    COMMON_SHARE,
    check_keyword_weights,
    ranking_terms,
    tenant_boost,
)
from shelfhand.knowledge.stores.keyword_plan import (
    PUBLIC_TAG,
    UNION_MAX,
    Filters,
    filter_terms,
    index_head,
    index_text,
    oversample_size,
)
from shelfhand.knowledge.stores.outbox import OncePerSearch, split_changes
from shelfhand.knowledge.stores.sqlite import IndexChange, SqliteKnowledgeStore
from shelfhand.knowledge.stores.vector_labels import RowLabels
from shelfhand.knowledge.types import Chunk, KeywordHits, Scope

logger = logging.getLogger(__name__)

__all__ = ["TantivyKeywordIndex", "index_head", "index_text"]

# 2: identifiers without sub-token noise (analysis), the ``head`` and ``codes`` fields.
_SCHEMA_VERSION = 2
_STATE_FILE = "shelfhand-state.json"
_META_FILE = "meta.json"
"""tantivy's list of the committed segments, replaced at each commit."""
_LABELS_DIR = "labels"

Access = Literal["write", "read", "read-only"]
# Measured on the sample corpus, CMRC 2018 and SciFact (see docs/benchmarks/history.md).
_HEAD_BOOST = 1.0
_OVERSAMPLE_LIMIT = 2000
# Indexing buffer of a rebuild: big enough that a rebuild of 1M chunks writes one segment
# (searches of one segment: 15-20% faster at 1M than of the nine that ingest left, BENCHMARKS
# "Keyword index in one segment"); tantivy takes the memory as it fills, not up front.
_REBUILD_HEAP = 1_500_000_000
# A required clause matching at most this share of the chunks is narrow: filters check its
# chunks (lazy unions) rather than collect their own (term sets); see _run.
_NARROW_SHARE = 0.05
# The exact-identifier step scores its holders term by term (intersections) while holders x
# ranking clauses stay under this share of the clauses' postings (measured at 1M chunks: the
# intersections win below ~0.06, lose 1.2-3x above 0.1).
_INTERSECT_RATIO = 0.05


def _schema() -> tantivy.Schema:
    sb = tantivy.SchemaBuilder()
    sb.add_unsigned_field("rowid", stored=False, indexed=True, fast=True)
    for name in ("doc_id", "tenant", "tags", "doc_type", "source"):
        sb.add_text_field(name, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("body", tokenizer_name="whitespace", index_option="freq")
    sb.add_text_field("head", tokenizer_name="whitespace", index_option="freq")
    sb.add_text_field("codes", tokenizer_name="whitespace", index_option="freq")
    return sb.build()


class TantivyKeywordIndex:
    """A tantivy index in ``directory``, keyed by chunk rowid; a :class:`DerivedIndex`.

    Args:
        directory: Where the index lives (created when missing), e.g. ``<workspace>/keyword``.
        writer_heap_bytes: Memory for the indexing buffer.
        access: ``write``, ``read`` or ``read-only`` (see the module docstring).
        head_boost: Weight of a query term's match in the title and section headings, on top
            of its match in the body (0 turns heading weighting off).
        oversample_limit: Most unfiltered hits :meth:`search` ranks before checking them
            against the caller's filter (module docstring); 0 always runs the filtered query.
        rebuild_heap_bytes: Memory for the indexing buffer of :meth:`rebuild`.
        common_share: Query terms found in more than this share of the chunks are left out of
            the ranking when the query has rarer terms (:func:`~shelfhand.knowledge.retrieval.fusion.
            ranking_terms`); 1 keeps every term.

    ``paths`` counts how searches were answered: ``"oversampled"`` (unfiltered ranking, then
    the filter check), ``"filtered"`` (the filtered query) or ``"empty"`` (no chunk of the
    caller's tenant, or nothing matched); ``"common terms"`` counts searches whose rarer terms
    found fewer than k readable chunks, so that every term ranked them after all.
    """

    name = "keyword"

    def __init__(
        self,
        directory: Path,
        *,
        writer_heap_bytes: int = 64_000_000,
        access: Access = "write",
        head_boost: float = _HEAD_BOOST,
        oversample_limit: int = _OVERSAMPLE_LIMIT,
        rebuild_heap_bytes: int = _REBUILD_HEAP,
        common_share: float = COMMON_SHARE,
    ) -> None:
        check_keyword_weights(head_boost, common_share)
        self.common_share = common_share
        if oversample_limit < 0:
            raise InvalidArgumentError(f"oversample_limit must be >= 0, not {oversample_limit}")
        self.head_boost = head_boost
        self.oversample_limit = oversample_limit
        self.paths: Counter[str] = Counter()
        self.directory = Path(directory)
        self.access: Access = access
        self._heap = writer_heap_bytes
        self.rebuild_heap_bytes = rebuild_heap_bytes
        self._schema = _schema()
        self._lock = threading.RLock()
        self._writer: Any = None
        self._generation: int | None = None
        # Per-rowid access labels, kept by the writing process only (module docstring).
        self._labels: RowLabels | None = None
        self._index = self._open()
        if self.access == "write" and self._generation is not None:
            self._labels = RowLabels.load(self.directory / _LABELS_DIR, self._generation)
        self.reloads = 0
        """How many times a search reloaded the index (a reading process only: when the
        writer committed since the last reload)."""
        self._committed: bytes | None = None
        """The index's ``meta.json`` as read before the last reload (a reading process)."""
        # another process may write: reload before searching, once per search (a hybrid
        # search asks twice: its keyword side and the exact-identifier step)
        self._reload = OncePerSearch(self._reload_now)
        self._version = 0
        """Bumped at every reload of the searcher (the tenants' counts are of one version)."""
        self._counts: tuple[int, dict[tuple[str, str, str], int]] = (0, {})

    def _reloaded(self) -> None:
        # bumped on both sides: a search whose searcher may be the old or the new one either
        # sees the version change (and keeps no counts) or counts into the in-between
        # version's memo, which no search after the reload reads
        self._version += 1
        self._index.reload()
        self._version += 1

    def _read_generation(self) -> int:
        state = json.loads((self.directory / _STATE_FILE).read_text(encoding="utf-8"))
        if state.get("schema") != _SCHEMA_VERSION:
            raise KnowledgeError("schema changed")
        return int(state["generation"])

    def _open(self) -> tantivy.Index:
        try:
            generation = self._read_generation()
            if not tantivy.Index.exists(str(self.directory)):
                raise KnowledgeError("index files missing")
            index = tantivy.Index(self._schema, path=str(self.directory), reuse=True)
            self._generation = generation
            return index
        except (OSError, ValueError, KeyError, TypeError, KnowledgeError) as exc:
            if self.access == "read-only":  # the writer's to rebuild; search nothing meanwhile
                logger.warning(
                    "keyword index at %s is unusable (%s) and another process writes the "
                    "workspace: keyword search is empty until it rebuilds the index",
                    self.directory,
                    exc,
                )
                return tantivy.Index(self._schema)  # empty, in memory

            # Missing or unreadable: start empty; the store sees generation None and rebuilds.
            if self.directory.exists():
                logger.warning(
                    "keyword index at %s is unusable (%s); rebuilding", self.directory, exc
                )
                shutil.rmtree(self.directory)
            self.directory.mkdir(parents=True, exist_ok=True)
            self._generation = None
            return tantivy.Index(self._schema, path=str(self.directory), reuse=False)

    # -- DerivedIndex ----------------------------------------------------------------------------

    def durable_generation(self) -> int | None:
        return self._generation

    def _get_writer(self) -> Any:
        if self._writer is None:
            # One thread: the machine is shared and ingest is bound by analysis, not tantivy.
            self._writer = self._index.writer(self._heap, 1)
        return self._writer

    def _add(self, writer: Any, rowid: int, chunk: Chunk) -> None:
        doc = tantivy.Document()
        doc.add_unsigned("rowid", rowid)
        doc.add_text("doc_id", chunk.doc_id)
        doc.add_text("tenant", chunk.tenant_id)
        for tag in chunk.permission_tags or (PUBLIC_TAG,):
            doc.add_text("tags", tag)
        doc.add_text("doc_type", chunk.doc_type)
        doc.add_text("source", chunk.source)
        doc.add_text("body", index_text(chunk))
        doc.add_text("head", index_head(chunk))
        doc.add_text("codes", " ".join(identifier_tokens(chunk.text)))
        writer.add_document(doc)
        if self._labels is not None:
            meta = (chunk.tenant_id, tuple(chunk.permission_tags), chunk.doc_type, chunk.source)
            self._labels.put(rowid, meta)

    def apply(self, store: SqliteKnowledgeStore, changes: Sequence[IndexChange]) -> None:
        """Delete every replaced document by id, then add its current chunks from the store;
        add chunks appended to a document by rowid (``vectors`` changes do not concern it)."""
        if self.access == "read-only":
            return  # the writing process applies them
        doc_ids, _, appended = split_changes(changes, "chunks")
        with self._lock:
            writer = self._get_writer()
            for doc_id in doc_ids:
                writer.delete_documents_by_term("doc_id", doc_id)
            if appended:  # a replayed change must not add a chunk twice
                # (delete_documents_by_term silently ignores unsigned fields; a query works)
                writer.delete_documents_by_query(
                    tantivy.Query.term_set_query(self._schema, "rowid", appended)
                )
            for stored in store.iter_chunks(doc_ids):
                self._add(writer, stored.rowid, stored.chunk)
            for rowid, chunk in store.chunk_map(appended).items():
                self._add(writer, rowid, chunk)

    def flush(self, generation: int, *, durable: bool) -> None:
        """Commit (tantivy commits are durable), reload the searcher, record the generation."""
        with self._lock:
            if self.access == "read-only":
                self._refresh()
                return
            if self._writer is not None:
                self._writer.commit()
                if self.access == "read":
                    self._release_writer()
            self._reloaded()
            self._write_state(generation)
            if durable and self._labels is not None:
                self._labels.save(generation)

    def _refresh(self) -> None:
        """Read-only: see the writer's latest commit and the generation it recorded."""
        self._reloaded()
        # the writer may be replacing the state file: then keep the last generation read
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError, KnowledgeError):
            self._generation = self._read_generation()

    def _release_writer(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.wait_merging_threads()  # also drops tantivy's directory lock

    def rebuild(self, store: SqliteKnowledgeStore, generation: int) -> None:
        """Re-index every chunk of ``store`` with one large indexing buffer
        (``rebuild_heap_bytes``), so that the index ends up in as few segments as the buffer
        allows (one at 1M chunks with the default), which searches faster than the many small
        segments that incremental ingest leaves."""
        if self.access == "read-only":
            return  # the writing process rebuilds it
        with self._lock:
            self._release_writer()  # the rebuild's own writer takes the directory lock
            writer = self._index.writer(self.rebuild_heap_bytes, 1)
            try:
                writer.delete_all_documents()
                if self.access == "write":
                    self._labels = RowLabels(self.directory / _LABELS_DIR)
                for n, stored in enumerate(store.iter_chunks(), start=1):
                    self._add(writer, stored.rowid, stored.chunk)
                    if n % 50_000 == 0:
                        logger.info("keyword index: %d chunks re-indexed", n)
                writer.commit()
            except BaseException:
                writer.rollback()
                if self.access == "write":  # labels of the rows indexed so far: read anew
                    self._labels = RowLabels.load(
                        self.directory / _LABELS_DIR, self._generation or -1
                    )
                raise
            finally:
                writer.wait_merging_threads()  # lets go of the directory lock
            self._reloaded()
            self._write_state(generation)
            if self._labels is not None:
                self._labels.save(generation)

    def segments(self) -> int:
        """How many segments the index has now (fewer search faster; see :meth:`rebuild`)."""
        return int(self._index.searcher().num_segments)

    def attached(self, store: SqliteKnowledgeStore) -> None:
        """The writer labels an index saved without labels (before they existed, or by a
        process that stopped between durable flushes) from the store, once: ~2 s CPU per
        million chunks, then saved with the index."""
        if self.access != "write" or self._labels is not None or self._generation is None:
            return
        with self._lock:
            self._labels = RowLabels.of_rows(self.directory / _LABELS_DIR, store.iter_chunk_acl())
            self._labels.save(self._generation)

    def _write_state(self, generation: int) -> None:
        path = self.directory / _STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(
            json.dumps({"generation": generation, "schema": _SCHEMA_VERSION}), encoding="utf-8"
        )
        os.replace(tmp, path)
        self._generation = generation

    def close(self) -> None:
        with self._lock:
            if self._writer is not None:
                writer, self._writer = self._writer, None
                writer.commit()
                writer.wait_merging_threads()
            if self._generation is not None and self._labels is not None:
                self._labels.save(self._generation)

    # -- search --------------------------------------------------------------------------------

    def num_docs(self) -> int:
        return int(self._index.searcher().num_docs)

    def search(
        self, query_tokens: Sequence[str], k: int, *, scope: Scope
    ) -> list[tuple[int, float]]:
        """Top ``k`` chunks by BM25 that the caller may read, as ``(rowid, score)``.

        Args:
            query_tokens: From :func:`~shelfhand.knowledge.analysis.tokenize_query`.
            k: How many hits at most.
            scope: What the caller may read (tenant, roles, doc type and source filters);
                nothing else ever matches.
        """
        terms = list(dict.fromkeys(t for t in query_tokens if t))
        if not terms or k <= 0:
            return []
        searcher, own = self._searcher_of(scope.tenant_id)
        body_df = {t: int(searcher.doc_freq("body", t)) for t in terms}
        num_docs, freqs = self._stats(searcher, own, terms, body_df)
        ranked = terms
        if self.common_share < 1:
            ranked = ranking_terms(terms, freqs, num_docs, self.common_share)
        query = self._ranked(searcher, ranked, body_df, own)
        if query is None:  # no chunk (of the caller's tenant) holds any of the terms
            self.paths["empty"] += 1
            return KeywordHits([], num_docs=num_docs, doc_freqs=freqs)
        hits = self._run(searcher, query, k, scope, True)
        if len(hits) < k and len(ranked) < len(terms):
            # few readable chunks hold the rarer terms: the common ones rank the rest
            self.paths["common terms"] += 1
            every = self._ranked(searcher, terms, body_df, own)
            if every is not None:  # (it holds the ranked terms' clauses)
                hits = self._run(searcher, every, k, scope, True)
        return KeywordHits(hits, num_docs=num_docs, doc_freqs=freqs)

    def _stats(
        self, searcher: Any, own: _Own | None, terms: Sequence[str], body_df: Mapping[str, int]
    ) -> tuple[int, list[int]]:
        """BM25's statistics for ``terms``: the caller's tenant's (``own``), or the index's
        when every chunk is that tenant's."""
        if own is None:
            return int(searcher.num_docs), [body_df[t] for t in terms]
        return own.docs, [own.df("body", t) if body_df[t] else 0 for t in terms]

    def _searcher_of(self, tenant: str) -> tuple[Any, _Own | None]:
        """The searcher, and the statistics of ``tenant``'s chunks in it (None when no other
        tenant's chunk, not even a deleted one, is in the index: the index's own statistics
        are then the tenant's).

        Whether another tenant's is, the tenant field's term dictionary says (a few µs);
        only then are the tenants' live chunks counted (the dictionary's counts when no
        chunk is deleted, else one pass over the tenant field), and each query term's chunks
        within the tenant (:class:`_Own`). Counts are kept while the searcher is unchanged
        (``_version``: until the next commit this process makes or, reading, sees)."""
        before = self._version
        searcher = self._searcher()
        if len(searcher.terms_with_prefix("tenant", "", limit=2)) < 2:
            return searcher, None  # (deleted chunks' tenants are listed too: then counted)
        version = self._version
        kept_version, memo = self._counts
        if version != kept_version or len(memo) > _COUNTS_MAX:
            memo = {}
            if version == before:  # (else a reload came between: keep nothing)
                self._counts = (version, memo)
        elif version != before:
            memo = {}
        docs = memo.get(("tenant", tenant, ""))
        if docs is None:
            # tantivy's BM25 counts every chunk, deleted ones too until a merge: so does its N
            listed = searcher.terms_with_prefix("tenant", "")
            every = memo["every", "", ""] = sum(int(count) for _, count in listed)
            live = listed  # (each chunk has one tenant: no chunk deleted, the live counts)
            if every != searcher.num_docs:  # else one pass over the live chunks' tenants
                live = searcher.terms_with_prefix(
                    "tenant", "", filter_query=tantivy.Query.all_query()
                )
            for name, count in live:
                memo["tenant", name, ""] = int(count)
            docs = memo.setdefault(("tenant", tenant, ""), 0)
        return searcher, _Own(self, searcher, tenant, docs, memo["every", "", ""], memo)

    def _term(self, field: str, value: str) -> tantivy.Query:
        return tantivy.Query.term_query(self._schema, field, value)

    def _searcher(self) -> Any:
        """The searcher of the latest commit this process may see (every commit made before
        the search began, when another process writes)."""
        if self.access != "write":
            self._reload()
        return self._index.searcher()

    def _reload_now(self) -> None:
        """Reload the searcher if the writer committed since the last reload: tantivy
        replaces ``meta.json`` at every commit and merge (its ``opstamp`` grows), and reading
        it costs 10 µs where a reload costs 27-53 µs and, with several tenants, the next
        search counts the tenants' chunks anew (:meth:`_searcher_of`, 1 ms at 300k chunks).
        It is read before the reload, so a commit landing in between is reloaded again at
        the next look, never missed."""
        with self._lock:
            try:
                committed: bytes | None = (self.directory / _META_FILE).read_bytes()
            except OSError:
                committed = None  # (reload: tantivy says what is wrong, if anything)
            if committed is not None and committed == self._committed:
                return
            self._reloaded()
            self._committed = committed
            self.reloads += 1

    def _ranked(
        self,
        searcher: Any,
        terms: Sequence[str],
        body_df: Mapping[str, int] | None = None,
        own: _Own | None = None,
    ) -> tantivy.Query | None:
        """BM25 over the body and, weighted by ``head_boost``, the section heading, with a
        clause only for the terms the field holds (None when it holds none): a term no chunk
        has adds nothing to any score, but its clause cost tantivy 22 % of the query's time at
        30k chunks without headings. ``body_df``: the terms' body frequencies, when known;
        ``own``: the caller's tenant's statistics, which each clause is scaled to."""
        should, _ = self._rank_clauses(searcher, terms, body_df, own)
        return tantivy.Query.boolean_query(should) if should else None

    def _rank_clauses(
        self,
        searcher: Any,
        terms: Sequence[str],
        body_df: Mapping[str, int] | None = None,
        own: _Own | None = None,
    ) -> tuple[list[tuple[tantivy.Occur, tantivy.Query]], int]:
        """The clauses of :meth:`_ranked`, and how many postings they hold in all."""
        known = body_df or {}
        body_freqs = {
            t: int(known[t] if t in known else searcher.doc_freq("body", t)) for t in terms
        }
        should = self._scaled("body", body_freqs, own)
        postings = sum(body_freqs.values())
        if self.head_boost > 0:
            head_freqs = {t: int(searcher.doc_freq("head", t)) for t in terms}
            should += self._scaled("head", head_freqs, own, self.head_boost)
            postings += sum(head_freqs.values())
        return should, postings

    def _scaled(
        self, field: str, freqs: Mapping[str, int], own: _Own | None, boost: float = 1.0
    ) -> list[tuple[tantivy.Occur, tantivy.Query]]:
        """A clause per term of ``freqs`` that a chunk holds in ``field``, scaled to the
        statistics of the caller's tenant (``own``) if other tenants share the index; a term
        none of that tenant's chunks holds gets none."""
        held = [t for t, df in freqs.items() if df]
        if own is None:
            return self._should(field, held, boost)
        boosts = {t: own.boost(field, t, freqs[t]) for t in held}
        return self._should(field, [t for t in held if boosts[t]], boost, boosts)

    def search_exact(
        self, identifiers: Sequence[str], k: int, *, rank_by: Sequence[str] = (), scope: Scope
    ) -> list[tuple[int, float]]:
        """Top ``k`` chunks whose text holds at least one of ``identifiers`` (index tokens from
        :func:`~shelfhand.knowledge.analysis.query_identifiers`), as ``(rowid, score)``, ranked
        like :meth:`search` ranks ``rank_by`` (the query's tokens), or by their BM25 on the
        identifiers when it is empty. ``scope`` restricts it exactly like :meth:`search`.
        """
        terms = list(dict.fromkeys(t for t in identifiers if t))
        if not terms or k <= 0:
            return []
        searcher, own = self._searcher_of(scope.tenant_id)
        freqs = {t: int(searcher.doc_freq("codes", t)) for t in terms}
        code_clauses = self._scaled("codes", freqs, own)
        if not code_clauses:  # no chunk (of the caller's tenant) holds one
            self.paths["empty"] += 1
            return []
        codes = tantivy.Query.boolean_query(code_clauses)
        holds = tantivy.Query.const_score_query(codes, 0.0)
        clauses, postings = self._rank_clauses(
            searcher, list(dict.fromkeys(t for t in rank_by if t)), None, own
        )
        holders = sum(freqs.values())
        occ = tantivy.Occur
        if not clauses:
            text = codes  # ranked by the identifiers' own BM25
        elif holders * len(clauses) <= _INTERSECT_RATIO * postings:
            # Few holders: score each ranking term on the holders only (an intersection seeks
            # the term's postings), instead of walking the terms' union up to each holder
            # (which decodes most postings on the way): the same scores, 0.5-0.7 against
            # 0.8-1.0 ms p50 at 1M chunks (docs/benchmarks/history.md, "The exact-identifier step").
            text = tantivy.Query.boolean_query(
                [(occ.Should, holds)]
                + [
                    (occ.Should, tantivy.Query.boolean_query([(occ.Must, holds), (occ.Must, q)]))
                    for _, q in clauses
                ]
            )
        else:
            text = tantivy.Query.boolean_query(
                [(occ.Must, holds), (occ.Should, tantivy.Query.boolean_query(clauses))]
            )
        # ranked unfiltered, then checked like search (oversampled), else filtered; few
        # holders: filters that only check those (lazy)
        narrow = holders <= _NARROW_SHARE * int(searcher.num_docs)
        return self._run(searcher, text, k, scope, True, narrow=narrow)

    def _should(
        self,
        field: str,
        terms: Sequence[str],
        boost: float = 1.0,
        boosts: Mapping[str, float] | None = None,
    ) -> list[tuple[tantivy.Occur, tantivy.Query]]:
        clauses = []
        for term in terms:
            query = tantivy.Query.term_query(self._schema, field, term, index_option="freq")
            weight = boost if boosts is None else boost * boosts[term]
            if weight != 1.0:
                query = tantivy.Query.boost_query(query, weight)
            clauses.append((tantivy.Occur.Should, query))
        return clauses

    def _filter_query(self, field: str, values: Sequence[str], *, lazy: bool) -> tantivy.Query:
        """One filter clause. ``lazy``: a union of term queries, which tantivy advances only to
        the documents another clause proposes (the check of a few candidates); else a term-set
        query, which first collects every chunk of its values into a bitset (1.5 against 0.3 ms
        CPU for the candidates' rowids at 1M) but beats a union when the filter drives a whole
        filtered query (5.0 against 6.6 ms for two tags at 1M, bench/keyword_filters.py)."""
        if len(values) == 1:
            return tantivy.Query.term_query(self._schema, field, values[0])
        if lazy and len(values) <= UNION_MAX:
            return tantivy.Query.boolean_query(
                [
                    (tantivy.Occur.Should, tantivy.Query.term_query(self._schema, field, v))
                    for v in values
                ]
            )
        return tantivy.Query.term_set_query(self._schema, field, list(values))

    def _run(
        self,
        searcher: Any,
        text: tantivy.Query,
        k: int,
        scope: Scope,
        oversample: bool = False,
        *,
        narrow: bool = False,
    ) -> list[tuple[int, float]]:
        """``text`` as a required clause, the caller's visibility as zero-scored filters.
        ``narrow``: ``text`` matches few chunks, so the filters only check those (lazy unions;
        a term-set filter would first collect every chunk of its values)."""
        occ = tantivy.Occur
        filters = filter_terms(scope)
        if any(not values for _, values in filters):
            self.paths["empty"] += 1
            return []  # an empty doc_types or sources list allows nothing
        fetch = self._oversample_size(searcher, k, filters) if oversample else None
        if fetch == 0:
            self.paths["empty"] += 1
            return []
        if fetch is not None:
            hits = self._oversampled(searcher, text, k, fetch, filters, scope)
            if hits is not None:
                self.paths["oversampled"] += 1
                return hits
        self.paths["filtered"] += 1
        clauses = [(occ.Must, text)] + [
            # Zero-scored: filters decide visibility, never ranking.
            (occ.Must, tantivy.Query.const_score_query(self._filter_query(f, v, lazy=narrow), 0.0))
            for f, v in filters
        ]
        result = searcher.search(tantivy.Query.boolean_query(clauses), k, count=False)
        if not result.hits:
            return []
        rowids = searcher.fast_field_values("rowid", [addr for _, addr in result.hits])
        return [(int(r or 0), float(s)) for (s, _), r in zip(result.hits, rowids, strict=True)]

    def _oversample_size(self, searcher: Any, k: int, filters: Filters) -> int | None:
        """:func:`~shelfhand.knowledge.stores.keyword_plan.oversample_size` within this
        index's ``oversample_limit``."""
        return oversample_size(searcher, k, filters, self.oversample_limit)

    def _oversampled(
        self,
        searcher: Any,
        text: tantivy.Query,
        k: int,
        fetch: int,
        filters: Sequence[tuple[str, list[str]]],
        scope: Scope,
    ) -> list[tuple[int, float]] | None:
        """The top ``k`` readable hits among the unfiltered top ``fetch``, or None when fewer
        than ``k`` of those are readable and more hits exist (then only the filtered query is
        exact)."""
        result = searcher.search(text, fetch, count=False)
        if not result.hits:
            return []
        rowids = [
            int(r or 0)
            for r in searcher.fast_field_values("rowid", [addr for _, addr in result.hits])
        ]
        allowed: list[bool] | None = None
        labels = self._labels
        if labels is not None:
            allowed = labels.allows(rowids, scope)
        if allowed is None:  # a reading process, or a rowid not labelled yet
            allowed = self._check(searcher, rowids, filters)
        hits = [
            (r, float(s)) for (s, _), r, ok in zip(result.hits, rowids, allowed, strict=True) if ok
        ]
        if len(hits) < k and len(result.hits) == fetch:
            return None
        return hits[:k]

    def _check(
        self, searcher: Any, rowids: list[int], filters: Sequence[tuple[str, list[str]]]
    ) -> list[bool]:
        """Which of ``rowids`` pass the filter clauses, asked of tantivy."""
        occ = tantivy.Occur
        schema = self._schema
        candidates = tantivy.Query.boolean_query(
            [(occ.Should, tantivy.Query.term_query(schema, "rowid", r)) for r in rowids]
        )
        check = tantivy.Query.boolean_query(
            [(occ.Must, tantivy.Query.const_score_query(candidates, 0.0))]
            + [
                (
                    occ.Must,
                    tantivy.Query.const_score_query(self._filter_query(f, v, lazy=True), 0.0),
                )
                for f, v in filters
            ]
        )
        passed = searcher.search(check, len(rowids), count=False)
        readable = {
            int(r or 0)
            for r in searcher.fast_field_values("rowid", [addr for _, addr in passed.hits])
        }
        return [r in readable for r in rowids]

    def doc_freqs(
        self, query_tokens: Sequence[str], scope: Scope | None = None
    ) -> tuple[int, list[int]]:
        """Chunks in the index and, per distinct token (first-seen order), how many contain it;
        with ``scope``, the chunks of its tenant only, as BM25 counts them for its searches.

        Statistics for the relevance estimate of :mod:`shelfhand.knowledge.retrieval.fusion` (the share
        of the query's IDF a hit matches, and which synonyms a query needs). In a reading
        process they are the latest commit's, as a search's are (the index reloads at most
        once per search).
        """
        terms = list(dict.fromkeys(t for t in query_tokens if t))
        searcher, own = (
            (self._searcher(), None) if scope is None else self._searcher_of(scope.tenant_id)
        )
        body_df = {t: int(searcher.doc_freq("body", t)) for t in terms}
        return self._stats(searcher, own, terms, body_df)


_COUNTS_MAX = 100_000
"""Tenants' counts kept for one version of the searcher at most (then counted anew)."""


def _count(searcher: Any, query: tantivy.Query) -> int:
    """How many live chunks match ``query``."""
    return int(searcher.search(query, 1, count=True).count)


class _Own:
    """The statistics of one tenant's chunks in a searcher that also holds other tenants':
    BM25 ranks a caller by them (:func:`~shelfhand.knowledge.scoring.tenant_boost`), so
    another tenant's documents never change the caller's scores. A document frequency is
    one count of the term's chunks within the tenant, kept in ``memo`` for the searcher's
    version."""

    __slots__ = ("_index", "_memo", "_searcher", "docs", "tenant", "total")

    def __init__(
        self,
        index: TantivyKeywordIndex,
        searcher: Any,
        tenant: str,
        docs: int,
        total: int,
        memo: dict[tuple[str, str, str], int],
    ) -> None:
        self._index = index
        self._searcher = searcher
        self.tenant = tenant
        self.docs = docs
        """The tenant's live chunks."""
        self.total = total
        """Every tenant's chunks, the deleted ones not merged away yet included: what
        tantivy's own BM25 counts (so do its document frequencies)."""
        self._memo = memo

    def df(self, field: str, term: str) -> int:
        """How many of the tenant's chunks hold ``term`` in ``field``."""
        key = (field, term, self.tenant)
        found = self._memo.get(key)
        if found is None:
            index = self._index
            both = tantivy.Query.boolean_query(
                [
                    (tantivy.Occur.Must, index._term(field, term)),
                    (tantivy.Occur.Must, index._term("tenant", self.tenant)),
                ]
            )
            # unscored: a third less time than the scored intersection
            found = self._memo[key] = _count(
                self._searcher, tantivy.Query.const_score_query(both, 1.0)
            )
        return found

    def boost(self, field: str, term: str, doc_freq: int) -> float:
        """The factor of ``term``'s clause in ``field`` (its index-wide ``doc_freq``)."""
        return tenant_boost(self.df(field, term), self.docs, doc_freq, self.total)
