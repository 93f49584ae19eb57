"""Property: the tenant, role, doc-type and source filters inside the indexes are exact.

Random documents (tenants, permission tags, doc types, sources, English and Chinese words,
vectors) and random callers and filters. The reference is brute force, written plainly: every
chunk the rule lets the caller read, ranked by the index's own unfiltered scores (keyword,
with the caller's tenant's term statistics, as tests/knowledge/test_tenant_statistics.py
checks) or by inner product (vectors).

* keyword search returns exactly the reference's top ``k`` on each of its paths: the filtered
  query, the unfiltered ranking checked against the writer's per-rowid labels, the same
  ranking checked by a second tantivy query (a reading process), and that check with too few
  candidates (forced), which must fall back to the filtered query;
* the exact-identifier lookup returns the reference's readable chunks holding the identifier,
  ranked like the reference, on each of its query forms and paths;
* exact (flat) vector search returns exactly the reference's top ``k``;
* HNSW vector search (filtered graph walk with faiss' selector) returns only readable chunks,
  each once, and as many as the reference has up to ``k``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shelfhand.knowledge.analysis import query_identifiers, tokenize_query
from shelfhand.knowledge.stores import tantivy as keyword_module
from shelfhand.knowledge.stores.sqlite import SqliteKnowledgeStore
from shelfhand.knowledge.stores.tantivy import TantivyKeywordIndex
from shelfhand.knowledge.stores.vector_indexes import VectorIndexes
from shelfhand.knowledge.types import Scope
from support.acl_specs import (
    DIM,
    SPACE,
    WORDS,
    callers,
    doc_specs,
    load_specs,
    may_read,
    same_ranking,
    scope_of,
)


@dataclass(slots=True)
class Stores:
    store: SqliteKnowledgeStore
    keyword: TantivyKeywordIndex
    exact: VectorIndexes
    hnsw: VectorIndexes
    keyword_dir: Path


class ForcedFetch(TantivyKeywordIndex):
    """Reads the same index; ranks exactly ``fetch`` unfiltered hits before the filter check,
    whatever the share estimate says, so the check-then-fall-back path runs."""

    fetch = 1

    def _oversample_size(self, searcher: Any, k: int, filters: Any) -> int | None:
        if super()._oversample_size(searcher, k, filters) == 0:
            return 0
        return self.fetch


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stores]:
    root: Path = tmp_path_factory.mktemp("filters")
    store = SqliteKnowledgeStore(root / "knowledge.db")
    keyword = TantivyKeywordIndex(root / "keyword")
    exact = VectorIndexes(root / "exact", store, hnsw_threshold=10**9)
    # A graph from 16 vectors on, and no exact fallback for selective callers: the filtered
    # graph walk itself is under test.
    hnsw = VectorIndexes(root / "hnsw", store, hnsw_threshold=16, exact_below=0, exact_fraction=0)
    store.attach(keyword, exact, hnsw)
    yield Stores(store, keyword, exact, hnsw, root / "keyword")
    store.close()


_runs = itertools.count()


def _load(stores: Stores, specs: list[dict[str, Any]], seed: int) -> dict[int, dict[str, Any]]:
    """Replace the stores' content with ``specs``; per rowid its spec and vector."""
    return load_specs(stores.store, specs, seed, next(_runs))


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    specs=doc_specs,
    caller=callers,
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
    k=st.integers(1, 8),
    fetch=st.integers(1, 6),
    seed=st.integers(0, 2**16),
)
def test_filtered_search_equals_a_brute_force_filter(
    stores: Stores,
    specs: list[dict[str, Any]],
    caller: dict[str, Any],
    query: list[str],
    k: int,
    fetch: int,
    seed: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rows = _load(stores, specs, seed)
    readable = {r for r, spec in rows.items() if may_read(spec, caller)}
    scope = scope_of(caller)

    # keyword: the reference ranks every chunk by the index's own unfiltered BM25, on the
    # query's rarer terms while those find k readable chunks, else on every term
    tokens = tokenize_query(" ".join(query))
    tenant = caller["tenant"]
    unfiltered = _unfiltered(stores.keyword, tokens, len(rows) + 1, tenant)
    ranking = unfiltered
    rarer = _rarer_terms(stores.keyword, tokens, tenant)
    if rarer is not None:
        by_rarer = _unfiltered(stores.keyword, rarer, len(rows) + 1, tenant)
        if sum(1 for r, _ in by_rarer if r in readable) >= k:
            ranking = by_rarer
    want = [(r, s) for r, s in ranking if r in readable][:k]
    assert stores.keyword._labels is not None  # the writer checks with its labels
    for limit in (0, 10**6):  # the filtered query; the unfiltered ranking, then the check
        stores.keyword.oversample_limit = limit
        same_ranking(stores.keyword.search(tokens, k, scope=scope), want)
    reader = TantivyKeywordIndex(stores.keyword_dir, access="read-only")  # checks with tantivy
    same_ranking(reader.search(tokens, k, scope=scope), want)
    forced = ForcedFetch(stores.keyword_dir, access="read-only")
    forced.fetch = fetch
    same_ranking(forced.search(tokens, k, scope=scope), want)
    if len(want) == k and len(ranking) > fetch and ranking is unfiltered and rarer is None:
        # the forced check saw too few readable hits unless the top ``fetch`` held k of them
        held = sum(1 for r, _ in ranking[:fetch] if r in readable)
        assert forced.paths["filtered" if held < k else "oversampled"] == 1

    # the exact-identifier lookup (the query and a code): readable chunks holding the code,
    # ranked by BM25 on the query, on each path: filters that check the holders (narrow) or
    # collect their own chunks; ranking terms scored on the holders one by one or as a union;
    # the filtered query, or the unfiltered ranking then checked (labels, or tantivy)
    asked = " ".join([*query, "E-203"])
    tokens = tokenize_query(asked)
    texts = stores.store.chunk_map(list(rows))
    holders = {r for r, c in texts.items() if "E-203" in c.text.split()}
    ranked_all = _unfiltered(stores.keyword, tokens, len(rows) + 1, tenant)
    want_exact = [(r, s) for r, s in ranked_all if r in readable & holders][:k]
    for narrow_share, intersect, limit in itertools.product((0.0, 1.0), (0.0, 1e9), (0, 10**6)):
        monkeypatch.setattr(keyword_module, "_NARROW_SHARE", narrow_share)
        monkeypatch.setattr(keyword_module, "_INTERSECT_RATIO", intersect)
        stores.keyword.oversample_limit = limit  # the filtered query, or ranked then checked
        found = stores.keyword.search_exact(
            query_identifiers(asked), k, rank_by=tokens, scope=scope
        )
        same_ranking(found, want_exact)
    found = reader.search_exact(query_identifiers(asked), k, rank_by=tokens, scope=scope)
    same_ranking(found, want_exact)  # checked by a second tantivy query

    # vectors: exact search equals brute force; the HNSW walk returns only readable chunks
    q = np.random.default_rng(seed + 1).standard_normal(DIM).astype(np.float32)
    ranked = sorted(readable, key=lambda r: -float(rows[r]["vector"] @ q))[:k]
    exact = stores.exact.search(SPACE, q, k, scope=scope)
    assert [r for r, _ in exact] == ranked
    np.testing.assert_allclose(
        [s for _, s in exact], [float(rows[r]["vector"] @ q) for r in ranked], rtol=1e-5, atol=1e-6
    )
    graph = stores.hnsw.search(SPACE, q, k, scope=scope)
    got_ids = [r for r, _ in graph]
    assert set(got_ids) <= readable
    assert len(got_ids) == len(set(got_ids)) == min(k, len(readable))


def _rarer_terms(index: TantivyKeywordIndex, tokens: list[str], tenant: str) -> list[str] | None:
    """The query's terms found in at most ``common_share`` of the tenant's chunks, when some
    are and some are not (else None: every term ranks)."""
    terms = list(dict.fromkeys(t for t in tokens if t))
    num_docs, freqs = index.doc_freqs(terms, Scope(tenant_id=tenant))
    limit = index.common_share * num_docs
    rarer = [t for t, df in zip(terms, freqs, strict=True) if df <= limit]
    if len(rarer) == len(terms) or not any(freqs[terms.index(t)] for t in rarer):
        return None
    return rarer


def _unfiltered(
    index: TantivyKeywordIndex, tokens: list[str], k: int, tenant: str
) -> list[tuple[int, float]]:
    """Every matching chunk of any tenant, by the index's BM25 with ``tenant``'s statistics
    (the same scores a filtered search gives, since its filter clauses score zero)."""

    terms = list(dict.fromkeys(t for t in tokens if t))
    if not terms:
        return []
    searcher, own = index._searcher_of(tenant)
    query = index._ranked(searcher, terms, None, own)
    if query is None:  # none of the tenant's chunks holds a term
        return []
    result = searcher.search(query, k, count=False)
    rowids = searcher.fast_field_values("rowid", [a for _, a in result.hits])
    return [(int(r), float(s)) for (s, _), r in zip(result.hits, rowids, strict=True)]
