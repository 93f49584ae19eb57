"""Property: search on the Qdrant index is exactly a brute-force filter over brute-force
scores, on both backends (Qdrant Edge in process, and qdrant-client's local mode), so the two
translations of the query model also agree with each other.

Random documents (tenants, permission tags, doc types, sources, English and Chinese words,
vectors) and random callers and filters, each example in a fresh store. The reference is
written plainly: every chunk the rule lets the caller read, scored by BM25 from the points'
own term weights with the IDF over the caller's tenant's chunks (keyword; the common-terms
rule applied as the other indexes apply it), or by inner product (vectors).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from shelfhand.knowledge.analysis import query_identifiers, tokenize_query
from shelfhand.knowledge.scoring import ranking_terms
from shelfhand.knowledge.stores.qdrant import QdrantKeywordSearch, QdrantVectorSearch
from shelfhand.knowledge.stores.qdrant.edge import EdgeBackend
from shelfhand.knowledge.stores.qdrant.index import QdrantIndex
from shelfhand.knowledge.stores.qdrant.model import chunk_point, term_id
from shelfhand.knowledge.stores.qdrant.server import ServerBackend
from shelfhand.knowledge.stores.sqlite import SqliteKnowledgeStore
from support.acl_specs import (
    DIM,
    SPACE,
    WORDS,
    callers,
    doc_specs,
    load_specs,
    may_read,
    scope_of,
)

pytest.importorskip("qdrant_edge")
_runs = itertools.count()


def close_ranking(got: Sequence[tuple[int, float]], want: Sequence[tuple[int, float]]) -> None:
    """The same scores (float32 against float64) and the same chunks, up to the order of
    chunks whose scores tie within that precision."""
    tol = 1e-4
    assert len(got) == len(want), (got, want)
    np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=1e-5, atol=tol)
    assert len({r for r, _ in got}) == len(got)
    if want:
        cut = want[-1][1]
        above = {r for r, s in want if s > cut + tol}
        assert above <= {r for r, _ in got}, (got, want)


def bm25_reference(
    index: QdrantIndex, chunks: dict[int, Any], tokens: Sequence[str]
) -> dict[int, float]:
    """Every chunk's BM25 for ``tokens``: its point's weights times the IDF over ``chunks``
    (the caller's tenant's)."""
    points = {
        r: chunk_point(r, c, avg_len=index.avg_len, head_avg_len=4.0, head_boost=1.0)
        for r, c in chunks.items()
    }
    weights = {
        r: dict(zip(p.sparse.indices, p.sparse.values, strict=True)) for r, p in points.items()
    }
    n = len(points)
    scores: dict[int, float] = {}
    for t in {term_id(t) for t in tokens}:
        df = sum(1 for w in weights.values() if t in w)
        idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
        for r, w in weights.items():
            if t in w:
                scores[r] = scores.get(r, 0.0) + idf * w[t]
    return scores


def _text_doc(tenant: str, chunks: list[list[str]]) -> dict[str, Any]:
    return {"tenant": tenant, "chunks": chunks, "source": "a.md", "doc_type": "text", "tags": []}


def top(scores: dict[int, float], allowed: set[int], k: int) -> list[tuple[int, float]]:
    ranked = sorted(
        ((r, s) for r, s in scores.items() if r in allowed), key=lambda h: (-h[1], h[0])
    )
    return ranked[:k]


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@example(  # a stemmed term ("warranty" → "warranti") found in one chunk: the reference had 0
    specs=[
        _text_doc("default", [["lamp"] * 3, *[["lamp", "保修", "lamp", "lamp", "lamp"]] * 2]),
        *[_text_doc("default", [["lamp"]])] * 6,
        _text_doc("globex", [["warranty", "保修"], ["lamp"], ["lamp"]]),
        *[_text_doc("default", [["lamp"]])] * 5,
        _text_doc("default", [["保修", "lamp"]]),
    ],
    caller={"tenant": "globex", "doc_types": None, "roles": [], "sources": None},
    query=["warranty", "lamp", "保修"],
    k=1,
    seed=0,
)
@given(
    specs=doc_specs,
    caller=callers,
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
    k=st.integers(1, 8),
    seed=st.integers(0, 2**16),
)
def test_filtered_qdrant_search_equals_a_brute_force_filter(
    tmp_path_factory: pytest.TempPathFactory,
    specs: list[dict[str, Any]],
    caller: dict[str, Any],
    query: list[str],
    k: int,
    seed: int,
) -> None:
    root: Path = tmp_path_factory.mktemp("qdrant-property")
    store = SqliteKnowledgeStore(root / "knowledge.db")
    edge = QdrantIndex(EdgeBackend(root / "edge"))
    local = QdrantIndex(ServerBackend(":memory:", collection=f"p{next(_runs)}"))
    store.attach(edge, local)
    try:
        rows = load_specs(store, specs, seed, 0)
        every = store.chunk_map(list(rows))
        # BM25's statistics are of the caller's tenant's chunks, whatever other tenants hold
        chunks = {r: c for r, c in every.items() if c.tenant_id == caller["tenant"]}
        readable = {r for r, spec in rows.items() if may_read(spec, caller)}
        scope = scope_of(caller)
        tokens = tokenize_query(" ".join(query))
        terms = list(dict.fromkeys(tokens))
        body_dfs = [
            sum(1 for c in chunks.values() if t in set(tokenize_query(c.text))) for t in terms
        ]
        q = np.random.default_rng(seed + 1).standard_normal(DIM).astype(np.float32)
        asked = " ".join([*query, "E-203"])
        exact_tokens = tokenize_query(asked)
        holders = {r for r, c in every.items() if "E-203" in c.text.split()}
        for index in (edge, local):
            keyword = QdrantKeywordSearch(index)
            # keyword: the rarer terms rank while they find k readable chunks, else every term
            scores = bm25_reference(index, chunks, terms)
            rarer = ranking_terms(terms, body_dfs, len(chunks), keyword.common_share)
            if len(rarer) < len(terms):
                by_rarer = top(bm25_reference(index, chunks, rarer), readable, k)
                if len(by_rarer) == k:
                    scores = bm25_reference(index, chunks, rarer)
            close_ranking(keyword.search(tokens, k, scope=scope), top(scores, readable, k))

            # the exact-identifier lookup: readable holders of the code, by BM25 of the query
            found = keyword.search_exact(
                query_identifiers(asked), k, rank_by=exact_tokens, scope=scope
            )
            want = top(bm25_reference(index, chunks, exact_tokens), readable & holders, k)
            close_ranking(found, want)

            # vectors, searched exactly: inner product over the readable chunks
            vectors = QdrantVectorSearch(index, exact=True)
            dots = {r: float(rows[r]["vector"] @ q) for r in rows}
            close_ranking(vectors.search(SPACE, q, k, scope=scope), top(dots, readable, k))
    finally:
        store.close()
