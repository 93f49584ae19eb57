"""Vector spaces: exact and HNSW search, tombstones, persistence, the cached ACL selector."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import faiss  # type: ignore[import-untyped]
import numpy as np
import pytest

from shelfhand.knowledge.stores.faiss import (
    EF_MAX,
    EF_REFERENCE_SIZE,
    VectorSpace,
    adaptive_ef,
)
from shelfhand.knowledge.stores.sqlite import SqliteKnowledgeStore
from shelfhand.knowledge.stores.vector_indexes import VectorIndexes
from shelfhand.knowledge.stores.vector_labels import VectorLabels
from shelfhand.knowledge.types import Chunk, Document, Scope, Section

DIM = 32


def clustered(n: int, seed: int = 0) -> np.ndarray:
    # Real embeddings cluster by topic; queries come from the same topics as the passages.
    centres = np.random.default_rng(0).standard_normal((20, DIM))
    rng = np.random.default_rng(seed)
    x = centres[rng.integers(0, 20, n)] + 0.3 * rng.standard_normal((n, DIM))
    x = x.astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def add_docs(
    store: SqliteKnowledgeStore,
    vectors: np.ndarray,
    *,
    per_doc: int = 10,
    tags_of: dict[int, tuple[str, ...]] | None = None,
    tenant_of: dict[int, str] | None = None,
    prefix: str = "d",
) -> None:
    for d in range(0, len(vectors), per_doc):
        doc_id = f"{prefix}{d}"
        tags = (tags_of or {}).get(d // per_doc, ())
        tenant = (tenant_of or {}).get(d // per_doc, "default")
        rows = vectors[d : d + per_doc]
        doc = Document(
            doc_id=doc_id,
            source=doc_id,
            title="",
            doc_type="text",
            sections=(Section(text="x"),),
            content_hash=doc_id,
            permission_tags=tags,
            tenant_id=tenant,
        )
        chunks = [
            Chunk(
                chunk_id=f"{doc_id}::{i}",
                doc_id=doc_id,
                chunk_index=i,
                text=f"{doc_id} chunk {i}",
                title="",
                section_path=(),
                page=None,
                source=doc_id,
                start=0,
                end=1,
                content_hash=hashlib.sha256(f"{doc_id}/{i}".encode()).hexdigest(),
                doc_type="text",
                permission_tags=tags,
                tenant_id=tenant,
            )
            for i in range(len(rows))
        ]
        store.upsert_document(doc, chunks, {"default": (list(range(len(rows))), rows)})


def test_exact_search_returns_the_nearest_readable_vectors(tmp_path: Path) -> None:
    store = SqliteKnowledgeStore(tmp_path / "k.db")
    vectors = VectorIndexes(tmp_path / "v", store)
    store.attach(vectors)
    x = clustered(200)
    add_docs(store, x, tags_of={0: ("secret",)})
    assert vectors.space("default").mode == "exact"  # type: ignore[union-attr]
    hits = vectors.search("default", x[15], 5, scope=Scope(tenant_id="default", roles=()))
    assert store.chunks_by_rowids([hits[0][0]])[0].chunk_id == "d10::5"
    assert hits[0][1] == pytest.approx(1.0, abs=1e-5)
    # d0 is tagged: its own vector is not returned to a caller without the role.
    hidden = vectors.search("default", x[3], 200, scope=Scope(tenant_id="default", roles=()))
    assert all(
        not c.chunk_id.startswith("d0::") for c in store.chunks_by_rowids([r for r, _ in hidden])
    )
    shown = vectors.search("default", x[3], 1, scope=Scope(tenant_id="default", roles=("secret",)))
    assert store.chunks_by_rowids([shown[0][0]])[0].chunk_id == "d0::3"
    store.close()


def test_hnsw_recall_at_10_matches_exact_search(tmp_path: Path) -> None:
    x = clustered(4000, seed=1)
    ids = np.arange(1, 4001, dtype=np.int64)
    hnsw = VectorSpace(DIM, hnsw_threshold=1000)
    hnsw.load_all(ids, x)
    assert hnsw.mode == "hnsw"
    exact = VectorSpace(DIM, hnsw_threshold=10**9)
    exact.load_all(ids, x)
    queries = clustered(100, seed=2)
    sel_h, sel_e = hnsw.select(ids), exact.select(ids)
    found = 0
    for q in queries:
        truth = {r for r, _ in exact.search(q, 10, sel_e)}
        found += len(truth & {r for r, _ in hnsw.search(q, 10, sel_h)})
    assert found / 1000 >= 0.99


def test_deleted_vectors_are_tombstoned_then_compacted(tmp_path: Path) -> None:
    space = VectorSpace(DIM, hnsw_threshold=50)
    x = clustered(100)
    space.load_all(np.arange(100, dtype=np.int64), x)
    space.remove(range(10))
    assert space.n == 100  # tombstones, still in the graph
    hits = space.search(x[5], 3, space.select(np.arange(100, dtype=np.int64)))
    assert 5 not in {r for r, _ in hits}
    space.remove(range(10, 25))  # 25% tombstones: compact
    assert space.n == 75 and space.live_count == 75


def test_a_growing_space_switches_to_hnsw_and_is_persisted(tmp_path: Path) -> None:
    store = SqliteKnowledgeStore(tmp_path / "k.db")
    store.attach(VectorIndexes(tmp_path / "v", store, hnsw_threshold=300))
    x = clustered(400)
    with store.deferred_sync():
        add_docs(store, x)
    store.close()

    store = SqliteKnowledgeStore(tmp_path / "k.db")
    vectors = VectorIndexes(tmp_path / "v", store, hnsw_threshold=300)
    assert vectors.space("default").mode == "hnsw"  # type: ignore[union-attr]
    assert vectors.durable_generation() == store.generation  # loaded, no rebuild needed
    store.attach(vectors)
    hits = vectors.search("default", x[123], 1, scope=Scope(tenant_id="default", roles=()))
    assert store.chunks_by_rowids([hits[0][0]])[0].chunk_id == "d120::3"
    store.close()


def test_a_selective_acl_on_hnsw_still_returns_the_few_readable_vectors(tmp_path: Path) -> None:
    store = SqliteKnowledgeStore(tmp_path / "k.db")
    vectors = VectorIndexes(tmp_path / "v", store, hnsw_threshold=300)
    store.attach(vectors)
    x = clustered(600)
    with store.deferred_sync():
        add_docs(store, x, tags_of={7: ("rare",)})
    hits = vectors.search(
        "default", x[0], 10, scope=Scope(tenant_id="default", roles=("rare", "x"))
    )
    # Everything untagged is readable too; the rare doc's vectors come first for its own vector.
    rare = vectors.search("default", x[75], 3, scope=Scope(tenant_id="default", roles=("rare",)))
    assert len(hits) == 10
    assert store.chunks_by_rowids([rare[0][0]])[0].chunk_id == "d70::5"
    none = vectors.search("default", x[75], 3, scope=Scope(tenant_id="elsewhere", roles=("rare",)))
    assert none == []
    store.close()


def test_the_acl_selection_is_cached_until_the_space_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqliteKnowledgeStore(tmp_path / "k.db")
    vectors = VectorIndexes(tmp_path / "v", store)
    store.attach(vectors)
    x = clustered(50)
    add_docs(store, x[:40])
    calls = []
    original = VectorLabels.mask

    def counting(self: VectorLabels, *args: Any, **kwargs: Any) -> np.ndarray:
        calls.append(args)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(VectorLabels, "mask", counting)
    # the filter comes from the space's own labels: the chunk table is never asked
    monkeypatch.setattr(store, "allowed_rowids", None)
    for q in x[:5]:
        vectors.search("default", q, 3, scope=Scope(tenant_id="default", roles=("a", "b")))
    assert len(calls) == 1
    add_docs(store, x[40:], prefix="e")
    hits = vectors.search("default", x[45], 1, scope=Scope(tenant_id="default", roles=("b", "a")))
    assert len(calls) == 2
    assert store.chunks_by_rowids([hits[0][0]])[0].doc_id == "e0"
    store.close()


def test_labels_are_persisted_with_the_graph_and_rebuilt_for_an_old_graph(
    tmp_path: Path,
) -> None:
    store = SqliteKnowledgeStore(tmp_path / "k.db")
    vectors = VectorIndexes(tmp_path / "v", store, hnsw_threshold=50)
    store.attach(vectors)
    x = clustered(80)
    with store.deferred_sync():
        add_docs(store, x, tags_of={3: ("hr",)}, tenant_of={5: "acme"})
    before = {
        roles: vectors.search("default", x[35], 80, scope=Scope(tenant_id="default", roles=roles))
        for roles in ((), ("hr",), ("admin",))
    }
    store.close()
    space_dir = next(p for p in (tmp_path / "v").iterdir() if p.is_dir())
    assert (space_dir / "labels.npz").exists()

    def reopened() -> dict[tuple[str, ...], list[tuple[int, float]]]:
        again = SqliteKnowledgeStore(tmp_path / "k.db")
        vi = VectorIndexes(tmp_path / "v", again, hnsw_threshold=50)
        again.attach(vi)
        space = vi.space("default")
        assert space is not None and space.mode == "hnsw"
        found = {
            roles: vi.search("default", x[35], 80, scope=Scope(tenant_id="default", roles=roles))
            for roles in before
        }
        again.close()
        return found

    assert reopened() == before
    # a graph saved before labels existed: labelled from the store on open
    (space_dir / "labels.npz").unlink()
    assert reopened() == before
    hr_only = {r for r, _ in before[("hr",)]} - {r for r, _ in before[()]}
    assert len(hr_only) == 10  # the ten chunks of the hr document
    assert len(before[("admin",)]) == 70  # not the ten chunks of tenant acme


@pytest.fixture
def one_faiss_thread() -> Iterator[None]:
    # A graph built by one thread is the same on every run: recall figures are reproducible.
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


def test_adaptive_ef_keeps_ef_search_at_reference_scale_and_widens_beyond() -> None:
    assert adaptive_ef(128, 10, 50_000, 50_000) == 128
    assert adaptive_ef(128, 30, EF_REFERENCE_SIZE, EF_REFERENCE_SIZE) == 128
    # Bigger graph, more results wanted, a more selective caller: each widens the search.
    assert adaptive_ef(128, 10, 1_000_000, 1_000_000) > adaptive_ef(128, 10, 100_000, 100_000)
    assert adaptive_ef(128, 10, 10_000_000, 10**7) > adaptive_ef(128, 10, 1_000_000, 10**6)
    assert adaptive_ef(128, 200, 50_000, 50_000) == 400
    half = adaptive_ef(128, 10, 1_000_000, 500_000)
    tenth = adaptive_ef(128, 10, 1_000_000, 100_000)
    assert adaptive_ef(128, 10, 1_000_000, 1_000_000) < half < tenth
    # Bounded, except that it never asks for fewer candidates than results.
    assert adaptive_ef(128, 10, 10**9, 10**3) == EF_MAX
    assert adaptive_ef(128, EF_MAX + 5, 10**6, 10**6) == EF_MAX + 5


def search_recall(space: VectorSpace, exact: VectorSpace, allowed: np.ndarray) -> float:
    sel, sel_exact = space.select(allowed), exact.select(allowed)
    found = 0
    queries = clustered(100, seed=2)
    for q in queries:
        truth = {r for r, _ in exact.search(q, 10, sel_exact)}
        found += len(truth & {r for r, _ in space.search(q, 10, sel)})
    return found / (10 * len(queries))


def test_a_filtered_graph_search_is_widened_by_the_filters_selectivity(
    one_faiss_thread: None,
) -> None:
    x = clustered(4000, seed=1)
    ids = np.arange(1, 4001, dtype=np.int64)
    exact = VectorSpace(DIM, hnsw_threshold=10**9)
    exact.load_all(ids, x)
    # A caller reads a tenth of the documents (10 vectors each); graph search, not exact.
    readable = np.random.default_rng(3).random(400) < 0.1
    allowed = ids[np.repeat(readable, 10)]
    recall = {}
    for adaptive in (False, True):
        space = VectorSpace(
            DIM,
            hnsw_threshold=1000,
            ef_search=16,
            adaptive_ef=adaptive,
            exact_below=50,
            exact_fraction=0.0,
        )
        space.load_all(ids, x)
        sel = space.select(allowed)
        assert sel.selector is not None and sel.subset is None
        assert space.effective_ef(10, sel) == (
            adaptive_ef(16, 10, 4000, len(allowed)) if adaptive else 16
        )
        recall[adaptive] = search_recall(space, exact, allowed)
    assert recall[True] >= 0.97
    assert recall[False] < recall[True]


def test_a_caller_reading_under_the_exact_bound_gets_exact_search(one_faiss_thread: None) -> None:
    x = clustered(4000, seed=1)
    ids = np.arange(1, 4001, dtype=np.int64)
    exact = VectorSpace(DIM, hnsw_threshold=10**9)
    exact.load_all(ids, x)
    space = VectorSpace(DIM, hnsw_threshold=1000, exact_below=10, exact_fraction=0.25)
    space.load_all(ids, x)
    a_fifth = ids[np.repeat(np.random.default_rng(4).random(400) < 0.2, 10)]
    a_third = ids[np.repeat(np.random.default_rng(4).random(400) < 0.33, 10)]
    assert len(a_fifth) < 1000 < len(a_third)
    sel = space.select(a_fifth)
    assert sel.subset is not None and sel.selector is None
    assert search_recall(space, exact, a_fifth) == 1.0
    assert space.select(a_third).selector is not None


def test_the_state_file_records_build_params_and_an_older_state_still_loads(
    tmp_path: Path,
) -> None:
    store = SqliteKnowledgeStore(tmp_path / "k.db")
    store.attach(VectorIndexes(tmp_path / "v", store, hnsw_threshold=300, m=16))
    x = clustered(400)
    with store.deferred_sync():
        add_docs(store, x)
    store.close()
    state_path = tmp_path / "v" / "state.json"
    state = json.loads(state_path.read_text(encoding="utf-8"))
    entry = state["spaces"]["default"]
    assert (entry["mode"], entry["m"], entry["ef_construction"]) == ("hnsw", 16, 80)
    # A state file written before these keys existed loads the same graph.
    del entry["m"], entry["ef_construction"]
    state_path.write_text(json.dumps(state), encoding="utf-8")
    store = SqliteKnowledgeStore(tmp_path / "k.db")
    vectors = VectorIndexes(tmp_path / "v", store, hnsw_threshold=300)  # configured M=32
    space = vectors.space("default")
    assert space is not None and space.mode == "hnsw"
    assert vectors.durable_generation() == store.generation  # loaded, not rebuilt
    assert space.built_params() == {"m": 16, "ef_construction": 80}  # kept until a rebuild
    store.attach(vectors)
    hits = vectors.search("default", x[123], 1, scope=Scope(tenant_id="default", roles=()))
    assert store.chunks_by_rowids([hits[0][0]])[0].chunk_id == "d120::3"
    store.close()
