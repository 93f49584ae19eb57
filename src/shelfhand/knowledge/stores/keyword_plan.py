"""What the keyword indexes see of a chunk, and how the embedded one plans a caller's search
before it asks tantivy.

* :func:`index_text` and :func:`index_head`: a chunk's analysed body and own heading, the same
  for the tantivy index and the PostgreSQL store's ``tsvector`` columns.
* :func:`filter_terms`: a :class:`~shelfhand.knowledge.types.Scope` as the raw terms the
  tantivy index's filter fields must match (tenant, permission tags, doc type, source).
* :func:`oversample_size`: how many hits of the plain, unfiltered ranking to check against
  those filters for ``k`` readable ones.

A filter clause costs the ranked query its block-max WAND pruning: tantivy prunes only a plain
union of terms, so a filtered query scores every matching chunk of the caller (3-6 ms p50 at 1M
chunks against ~1 ms unfiltered, docs/benchmarks/history.md "The embedded store at 1M chunks"). The tantivy
index therefore first ranks the plain union for a few more hits than the caller's estimated
readable share needs (``k / share``, the share from the filter terms' document frequencies),
then checks which of those rowids the caller may read. When at least ``k`` pass, they are
exactly the filtered top ``k`` (the filters score zero, so the ranking is the same); otherwise,
and for callers who may read too little for this to pay, the filtered query runs as before.
The writing process checks the hits against labels it keeps per rowid (tenant, tags, doc type
and source codes, :class:`~shelfhand.knowledge.stores.vector_labels.VectorLabels`, filled as
chunks are indexed and saved next to the index); a reading process, which does not see the
writer's labels, asks tantivy which of those rowids pass the same filter clauses (a second
query over just those rowids; 0.7-1.2 ms CPU at 1M chunks, against a few microseconds for the
labels).

Nothing here imports tantivy: a searcher is anything with ``num_docs`` and
``doc_freq(field, term)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from shelfhand.knowledge.analysis import tokenize_for_index
from shelfhand.knowledge.types import Chunk, Scope

__all__ = [
    "PUBLIC_TAG",
    "UNION_MAX",
    "Filters",
    "filter_terms",
    "index_head",
    "index_text",
    "oversample_size",
]

PUBLIC_TAG = "__public__"
"""Tag given in the indexes to chunks without permission tags (readable by the whole tenant)."""
UNION_MAX = 16
"""Filter values beyond this many are never a lazy union of term queries (the tantivy index's
``_filter_query``) and are not counted for the share estimate."""
# Unfiltered ranking then a filter check of its hits: fetch
# ``k / share * _OVERSAMPLE + _OVERSAMPLE_EXTRA`` hits, unless that passes the index's limit.
_OVERSAMPLE = 1.5
_OVERSAMPLE_EXTRA = 10

Filters = Sequence[tuple[str, list[str]]]
"""``(field, allowed values)`` pairs; a chunk must match each."""


def index_text(chunk: Chunk) -> str:
    """What the keyword index sees of a chunk: title, section path and text, analysed."""
    parts = [chunk.title, " ".join(chunk.section_path), chunk.text]
    return " ".join(tokenize_for_index("\n".join(p for p in parts if p)))


def index_head(chunk: Chunk) -> str:
    """The heading of a chunk's own section, analysed; nothing when that is the document title
    (a title is shared by every chunk of the document and weighting it cost 0.04 nDCG@10 on
    SciFact, whose titles are whole sentences)."""
    if not chunk.section_path or chunk.section_path[-1].strip() == chunk.title.strip():
        return ""
    return " ".join(tokenize_for_index(chunk.section_path[-1]))


def filter_terms(scope: Scope) -> list[tuple[str, list[str]]]:
    """What ``scope`` may read as ``(field, allowed values)``; a chunk must match each."""
    filters: list[tuple[str, list[str]]] = [("tenant", [scope.tenant_id])]
    if not scope.privileged:
        filters.append(("tags", sorted(scope.roles | {PUBLIC_TAG})))
    if scope.doc_types is not None:
        filters.append(("doc_type", sorted(set(scope.doc_types))))
    if scope.sources is not None:
        filters.append(("source", sorted(set(scope.sources))))
    return filters


def oversample_size(searcher: Any, k: int, filters: Filters, limit: int) -> int | None:
    """How many unfiltered hits to rank for ``k`` readable ones, 0 when the caller's tenant
    has no chunk, None when the filtered query is the better plan (or ``limit`` is 0, or the
    estimate passes it).

    The readable share is estimated from document frequencies (which still count deleted
    chunks until a merge) as if the filters were independent: a wrong estimate costs time
    (the filtered query runs after all), never correctness.
    """
    total = int(searcher.num_docs)
    if total == 0 or searcher.doc_freq("tenant", filters[0][1][0]) == 0:
        return 0
    if limit == 0:
        return None
    share = 1.0
    for field, values in filters:
        if len(values) > UNION_MAX:
            return None
        matching = sum(int(searcher.doc_freq(field, v)) for v in values)
        share *= min(1.0, matching / total)
    if share <= 0.0:
        return None  # e.g. a doc type no chunk has: the filtered query finds that fast
    fetch = math.ceil(k / share * _OVERSAMPLE) + _OVERSAMPLE_EXTRA
    return fetch if fetch <= limit else None
