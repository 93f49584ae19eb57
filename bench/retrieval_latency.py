"""shelfhand side of ``bench/retrieval.py``: synthetic corpus, 100k store latency, 1M indexes.

Not run directly; ``python bench/retrieval.py latency|scale`` drives it. Kept apart from
``retrieval.py`` because that file also runs inside the LlamaIndex venv, where shelfhand is not
installed.

Corpus (seeded, like ``shared/bench/retrieval/gen_data.py``): Zipf(s=1) over a 50,000-word
vocabulary ``w0 … w49999`` (tokens that every engine's analysis leaves as they are: no stemming,
no stopwords), chunk length Gamma(k=8, θ=15) ≥ 10 tokens (mean ~120), 10 chunks per document.
Documents cycle through the tags public, public, ``sales``, ``hr`` (anonymous callers read half,
``sales`` three quarters, ``admin`` all). Queries take 3-6 distinct words of a random chunk,
skipping the 100 most frequent ranks. Vectors are 384-d and clustered (one centre per ~100
chunks, chunk = centre + noise); a query vector is its source chunk's vector plus noise, so it
has real neighbours.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tantivy

from shelfhand.core.context import UserContext
from shelfhand.knowledge.analysis import tokenize_for_index, tokenize_query
from shelfhand.knowledge.embeddings.local import MiniLMEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.knowledge.retrieval.hybrid import HybridRetriever, SearchMode
from shelfhand.knowledge.stack import EmbeddedKnowledge, open_embedded_store
from shelfhand.knowledge.stores.keyword_plan import PUBLIC_TAG
from shelfhand.knowledge.stores.sqlite import IndexChange, StoredChunk
from shelfhand.knowledge.stores.tantivy import TantivyKeywordIndex
from shelfhand.knowledge.stores.vector_indexes import VectorIndexes
from shelfhand.knowledge.types import Chunk, Document, Scope, Section

logger = logging.getLogger("bench.retrieval")

VOCAB = 50_000
STOP_RANKS = 100
TAGS: tuple[tuple[str, ...], ...] = ((), (), ("sales",), ("hr",))
SPACE = "default"
USERS = {
    "admin": UserContext(tenant_id="default", user_id="bench", roles=["admin"]),
    "anonymous": UserContext(tenant_id="default", user_id="bench"),
    "sales": UserContext(tenant_id="default", user_id="bench", roles=["sales"]),
}


@dataclass(slots=True)
class Corpus:
    """N synthetic chunks with vectors and queries; chunk ``i`` is ``doc{i // per_doc}::{j}``."""

    texts: list[str]
    vectors: np.ndarray
    queries: list[str]
    qvecs: np.ndarray
    q_source: list[int]
    per_doc: int

    @property
    def n(self) -> int:
        return len(self.texts)

    def tag_code(self) -> np.ndarray:
        """Per chunk: 0 public, 1 ``sales``, 2 ``hr``."""
        doc = np.arange(self.n) // self.per_doc
        return np.array([0, 0, 1, 2], dtype=np.int8)[doc % 4]

    def visible(self, user: str) -> np.ndarray:
        code = self.tag_code()
        if user == "admin":
            return np.ones(self.n, dtype=bool)
        visible: np.ndarray = code != 2 if user == "sales" else code == 0
        return visible


def make_corpus(
    n: int, *, seed: int = 0, dim: int = 384, per_doc: int = 10, n_queries: int = 300
) -> Corpus:
    """The synthetic corpus described in the module docstring (seeded, deterministic)."""
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    cdf = np.cumsum(1.0 / np.arange(1, VOCAB + 1))
    cdf /= cdf[-1]
    lens = np.maximum(10, np.rint(rng.gamma(8.0, 15.0, size=n))).astype(np.int64)
    offs = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offs[1:])
    ids = np.minimum(np.searchsorted(cdf, rng.random(int(offs[-1])), side="right"), VOCAB - 1)
    words = np.array([f"w{r}" for r in range(VOCAB)], dtype=object)
    texts = [" ".join(words[ids[offs[i] : offs[i + 1]]]) for i in range(n)]
    queries: list[str] = []
    q_source: list[int] = []
    while len(queries) < n_queries:
        src = int(rng.integers(0, n))
        pool = np.unique(ids[offs[src] : offs[src + 1]])
        pool = pool[pool >= STOP_RANKS]
        want = int(rng.integers(3, 7))
        if len(pool) < want:
            continue
        queries.append(" ".join(words[rng.choice(pool, size=want, replace=False)]))
        q_source.append(src)
    centres = rng.standard_normal((max(10, n // 100), dim)).astype(np.float32)
    vectors = np.empty((n, dim), dtype=np.float32)
    for a in range(0, n, 100_000):  # blocks: a 1M x 384 float64 temporary would be 3 GB
        b = min(n, a + 100_000)
        x = centres[rng.integers(0, len(centres), b - a)]
        x = x + 0.5 * rng.standard_normal((b - a, dim)).astype(np.float32)
        vectors[a:b] = x / np.linalg.norm(x, axis=1, keepdims=True)
    q = vectors[q_source] + 0.05 * rng.standard_normal((n_queries, dim)).astype(np.float32)
    qvecs = (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)
    logger.info("corpus of %d chunks generated in %.1f s", n, time.perf_counter() - t0)
    return Corpus(
        texts=texts,
        vectors=vectors,
        queries=queries,
        qvecs=qvecs,
        q_source=q_source,
        per_doc=per_doc,
    )


def _chunk(corpus: Corpus, i: int) -> Chunk:
    d, j = divmod(i, corpus.per_doc)
    text = corpus.texts[i]
    return Chunk(
        chunk_id=f"doc{d}::{j}",
        doc_id=f"doc{d}",
        chunk_index=j,
        text=text,
        title="",
        section_path=(),
        page=None,
        source=f"doc{d}",
        start=0,
        end=len(text),
        content_hash=hashlib.sha256(text.encode()).hexdigest(),
        doc_type="text",
        permission_tags=TAGS[d % 4],
    )


def document(corpus: Corpus, d: int, tenant: str = "default") -> tuple[Document, list[Chunk]]:
    """Document ``d`` of the corpus and its chunks, as the PostgreSQL benches import them
    (``bench/pg_store.py``, ``bench/tenant_statistics.py``), of ``tenant``."""
    doc = Document(
        doc_id=f"doc{d}",
        source=f"doc{d}",
        title="",
        doc_type="text",
        sections=(Section(text=""),),
        content_hash=f"doc{d}",
        permission_tags=TAGS[d % 4],
        tenant_id=tenant,
    )
    a, b = d * corpus.per_doc, (d + 1) * corpus.per_doc
    return doc, [dataclasses.replace(_chunk(corpus, i), tenant_id=tenant) for i in range(a, b)]


def chunk_index(chunk_id: str, per_doc: int) -> int:
    doc, j = chunk_id.split("::")
    return int(doc[3:]) * per_doc + int(j)


def word_queries(n: int, *, seed: int = 3) -> list[list[str]]:
    """``n`` keyword queries of 3-6 words of the corpus, drawn by Zipf frequency, skipping
    the ``STOP_RANKS`` most frequent (``bench/keyword_filters.py``, ``bench/tenant_statistics.py``)."""
    cdf = np.cumsum(1.0 / np.arange(1, VOCAB + 1))
    cdf /= cdf[-1]
    rng = np.random.default_rng(seed)

    def word() -> str:
        while True:
            rank = int(np.searchsorted(cdf, rng.random()))
            if rank >= STOP_RANKS:
                return f"w{rank}"

    return [[word() for _ in range(int(rng.integers(3, 7)))] for _ in range(n)]


def percentiles(values: Sequence[float]) -> dict[str, float]:
    arr = np.asarray(values, dtype=np.float64)
    return {
        "p50_ms": float(np.percentile(arr, 50)),
        "p95_ms": float(np.percentile(arr, 95)),
        "n": len(values),
    }


# -- the real store (latency, peers) ---------------------------------------------------------


def build_store(workspace: Path, corpus: Corpus) -> tuple[EmbeddedKnowledge, np.ndarray, float]:
    """Store every chunk through ``SqliteKnowledgeStore.upsert_document`` (SQLite + outbox +
    tantivy + HNSW, synced every 1,000 documents as a bulk ingest does); reuse ``workspace``
    when it already holds this corpus. Returns the store, rowid per chunk index, build seconds.
    """
    meta_path = workspace / "bench-corpus.json"
    meta = {
        "n": corpus.n,
        "per_doc": corpus.per_doc,
        "head": hashlib.sha256("\n".join(corpus.texts[:50]).encode()).hexdigest(),
    }
    rowids = np.zeros(corpus.n, dtype=np.int64)
    if meta_path.exists() and json.loads(meta_path.read_text(encoding="utf-8")) == meta:
        kb = open_embedded_store(workspace, None)
        for stored in kb.store.iter_chunks():
            rowids[chunk_index(stored.chunk.chunk_id, corpus.per_doc)] = stored.rowid
        logger.info("reusing the %d-chunk store in %s", kb.store.count_chunks(), workspace)
        return kb, rowids, float("nan")
    workspace.mkdir(parents=True, exist_ok=True)
    kb = open_embedded_store(workspace, None)
    t0 = time.perf_counter()
    with kb.store.deferred_sync():
        for d in range(corpus.n // corpus.per_doc):
            a, b = d * corpus.per_doc, (d + 1) * corpus.per_doc
            chunks = [_chunk(corpus, i) for i in range(a, b)]
            doc = Document(
                doc_id=f"doc{d}",
                source=f"doc{d}",
                title="",
                doc_type="text",
                sections=(Section(text="\n".join(c.text for c in chunks)),),
                content_hash=f"doc{d}",
                permission_tags=TAGS[d % 4],
            )
            ids = kb.store.upsert_document(
                doc, chunks, {SPACE: (list(range(len(chunks))), corpus.vectors[a:b])}
            )
            rowids[a:b] = ids
            if (d + 1) % 1000 == 0:
                kb.store.sync()
                logger.info("%d chunks stored (%.0f s)", b, time.perf_counter() - t0)
    build_s = time.perf_counter() - t0
    meta_path.write_text(json.dumps(meta), encoding="utf-8")
    return kb, rowids, build_s


def exact_topk(corpus: Corpus, visible: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    scores = corpus.vectors @ q
    scores[~visible] = -np.inf
    top = np.argpartition(-scores, k)[:k]
    return top[np.argsort(-scores[top])]


def vector_recall(
    search: Any, corpus: Corpus, rowids: np.ndarray, user: str, k: int = 10, n: int = 100
) -> float:
    """Mean recall@k of ``search(qvec, k, user) -> [(rowid, score)]`` against exact search."""
    visible = corpus.visible(user)
    found_total = 0
    for q in corpus.qvecs[:n]:
        truth = set(rowids[exact_topk(corpus, visible, q, k)].tolist())
        got = {r for r, _ in search(q, k, USERS[user])}
        found_total += len(truth & got)
    return found_total / (k * min(n, len(corpus.qvecs)))


def measure_latency(
    kb: EmbeddedKnowledge, corpus: Corpus, rowids: np.ndarray, *, k: int = 10
) -> dict[str, Any]:
    """keyword / vector / hybrid p50/p95 per caller, query vectors given (no embedding)."""
    retriever = kb.retriever
    out: dict[str, Any] = {"k": k, "candidates_per_side": k * retriever.options.candidates_factor}
    for user_name, user in USERS.items():
        # Warm the ACL selection cache (computed once per store generation, never per query).
        retriever.search_timed(
            corpus.queries[0], k=k, user=user, query_vectors={SPACE: corpus.qvecs[0]}
        )
        modes: tuple[SearchMode, ...] = ("keyword", "vector", "hybrid")
        totals: dict[str, list[float]] = {m: [] for m in modes}
        cpu: dict[str, list[float]] = {m: [] for m in modes}
        stages: dict[str, dict[str, list[float]]] = {
            m: {"keyword_ms": [], "vector_ms": [], "fuse_ms": [], "exact_ms": []} for m in modes
        }
        hit = dict.fromkeys(modes, 0)
        # Modes interleaved query by query, in rotating order, so load spikes of the shared
        # machine fall on all three alike.
        items = zip(corpus.queries, corpus.qvecs, corpus.q_source, strict=True)
        for i, (q, v, src) in enumerate(items):
            for mode in modes[i % 3 :] + modes[: i % 3]:
                c0 = time.process_time()
                hits, timing = retriever.search_timed(
                    q, k=k, user=user, mode=mode, query_vectors={SPACE: v}
                )
                cpu[mode].append((time.process_time() - c0) * 1000)
                totals[mode].append(timing.total_ms)
                for name, values in stages[mode].items():
                    values.append(getattr(timing, name))
                hit[mode] += any(chunk_index(h.chunk.chunk_id, corpus.per_doc) == src for h in hits)
        visible = corpus.visible(user_name)
        for mode in modes:
            out[f"{user_name}/{mode}"] = {
                **percentiles(totals[mode]),
                "cpu_p50_ms": statistics.median(cpu[mode]),
                **{f"{s}_p50": statistics.median(v) for s, v in stages[mode].items()},
                "source_hit_rate": hit[mode] / len(corpus.queries),
                "source_visible_rate": float(np.mean(visible[corpus.q_source])),
            }
    vi = kb.vectors

    def search(q: np.ndarray, kk: int, user: UserContext) -> list[tuple[int, float]]:
        return vi.search(SPACE, q, kk, scope=Scope.of(user))

    space = vi.space(SPACE)
    out["vector_mode"] = space.mode if space else None
    out["recall@10_vs_exact"] = {
        u: vector_recall(search, corpus, rowids, u) for u in ("admin", "anonymous")
    }
    return out


def measure_with_embedding(
    kb: EmbeddedKnowledge, corpus: Corpus, *, k: int = 10, n: int = 100
) -> dict[str, Any]:
    """Hybrid search embedding the query with the real MiniLM (int8 ONNX) embedder."""
    embedder = MiniLMEmbedder()
    retriever = HybridRetriever(
        kb.store, kb.keyword, kb.vectors, EmbeddingRouter({SPACE: embedder})
    )
    embedder.embed_query("warm up: load the model")
    queries = corpus.queries[:n]
    alone: list[float] = []
    for q in queries:
        t = time.perf_counter()
        embedder.embed_query(q)
        alone.append((time.perf_counter() - t) * 1000)
    user = USERS["anonymous"]
    retriever.search_timed(queries[0], k=k, user=user)
    inside: list[float] = []
    total: list[float] = []
    for q in queries:
        _, timing = retriever.search_timed(q, k=k, user=user)
        inside.append(timing.embed_ms)
        total.append(timing.total_ms)
    return {
        "user": "anonymous",
        "embed_alone": percentiles(alone),
        "embed_inside_search": percentiles(inside),
        "embed_plus_hybrid": percentiles(total),
        "note": "query vector from MiniLM, searched against the synthetic vectors (latency only)",
    }


# -- 1M: our indexes without the SQLite chunk table --------------------------------------------


class ArrayStore:
    """Stands in for ``SqliteKnowledgeStore`` towards the indexes: chunks, vectors and the ACL
    answer (``allowed_rowids``; the vector spaces now label their vectors from ``chunk_map``
    instead) come from the in-memory corpus; rowid = chunk index + 1. ``bench/retrieval.py
    embedded`` measures the real store instead."""

    def __init__(self, corpus: Corpus, block: int) -> None:
        self.corpus = corpus
        self.block = block
        self.generation = 0
        self.active = False
        self._code = corpus.tag_code()

    def vector_spaces(self) -> list[str]:
        return [SPACE] if self.active else []

    def iter_vectors(
        self, space: str, doc_ids: Sequence[str] | None = None
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for doc_id in doc_ids or ():
            a = int(doc_id[1:]) * self.block
            b = min(self.corpus.n, a + self.block)
            yield np.arange(a + 1, b + 1, dtype=np.int64), self.corpus.vectors[a:b]

    def iter_chunks(self, doc_ids: Sequence[str] | None = None) -> Iterator[StoredChunk]:
        raise NotImplementedError("the keyword index is bulk-loaded by the bench")

    def vectors_by_rowids(self, rowids: Sequence[int]) -> dict[str, Any]:
        return {}  # the bench adds whole blocks as replaced documents, never single vectors

    def chunk_map(self, rowids: Sequence[int]) -> dict[int, Chunk]:
        """What the vector spaces label their vectors with: tenant, tags, doc type, source."""
        return {int(r): _chunk(self.corpus, int(r) - 1) for r in rowids}

    def allowed_rowids(self, scope: Scope) -> np.ndarray:
        role_set = set(scope.roles)
        if scope.privileged:
            ok = np.ones(len(self._code), dtype=bool)
        else:
            ok = self._code == 0
            if "sales" in role_set:
                ok |= self._code == 1
            if "hr" in role_set:
                ok |= self._code == 2
        return (np.flatnonzero(ok) + 1).astype(np.int64)


def build_keyword(
    directory: Path,
    corpus: Corpus,
    n: int,
    budget_s: float,
    tenant_of: Callable[[int], str] | None = None,
) -> tuple[Any, int, float]:
    """Bulk-load ``TantivyKeywordIndex`` with its own writer (1 thread, 64 MB), the same fields
    as ``TantivyKeywordIndex._add``. The body is the text itself: the synthetic tokens are fixed
    points of ``tokenize_for_index`` (checked on a sample), so the per-chunk analysis is skipped.
    ``tenant_of``: a document number's tenant (all ``default`` without it).
    """
    for text in corpus.texts[:200]:
        assert tokenize_for_index(text) == text.split(), "synthetic tokens must be fixed points"
    kw = TantivyKeywordIndex(directory)
    writer = kw._get_writer()
    t0 = time.perf_counter()
    built = 0
    step = 100_000
    for a in range(0, n, step):
        b = min(n, a + step)
        for i in range(a, b):
            d = i // corpus.per_doc
            doc = tantivy.Document()
            doc.add_unsigned("rowid", i + 1)
            doc.add_text("doc_id", f"doc{d}")
            doc.add_text("tenant", "default" if tenant_of is None else tenant_of(d))
            for tag in TAGS[d % 4] or (PUBLIC_TAG,):
                doc.add_text("tags", tag)
            doc.add_text("doc_type", "text")
            doc.add_text("source", f"doc{d}")
            doc.add_text("body", corpus.texts[i])
            writer.add_document(doc)
        kw.flush(b, durable=True)  # commit + reload, as a store sync does
        built = b
        elapsed = time.perf_counter() - t0
        logger.info("keyword: %d chunks in %.0f s", built, elapsed)
        if elapsed / built * min(n, b + step) > budget_s and b < n:
            logger.warning("keyword build would pass its %d s budget: stopping at %d", budget_s, b)
            break
    return kw, built, time.perf_counter() - t0


def build_vectors(
    directory: Path, store: ArrayStore, n: int, budget_s: float
) -> tuple[VectorIndexes, int, float]:
    """Grow ``VectorIndexes`` through its ``apply`` path (exact → HNSW at 20k, then incremental
    faiss adds), one 10k-chunk batch per change; no persistence (``flush``) is timed."""
    vi = VectorIndexes(directory, store)  # type: ignore[arg-type]
    store.active = True
    t0 = time.perf_counter()
    built = 0
    for blk in range((n + store.block - 1) // store.block):
        change = IndexChange(outbox_id=blk + 1, generation=blk + 1, doc_id=f"b{blk}", old_rowids=())
        vi.apply(store, [change])  # type: ignore[arg-type]
        store.generation = blk + 1
        built = min(n, (blk + 1) * store.block)
        elapsed = time.perf_counter() - t0
        if built % 100_000 == 0:
            logger.info("vectors: %d in %.0f s", built, elapsed)
        if elapsed / built * min(n, built + store.block) > budget_s and built < n:
            logger.warning(
                "vector build would pass its %d s budget: stopping at %d", budget_s, built
            )
            break
    return vi, built, time.perf_counter() - t0


def measure_scale(
    workdir: Path, corpus: Corpus, *, n: int, budget_s: float, k: int = 10
) -> dict[str, Any]:
    """Build both indexes at ``n`` chunks (or as far as ``budget_s`` each allows) and time
    searches of ``3k`` candidates, as a hybrid search of ``k`` asks each side for."""
    fetch = 3 * k
    out: dict[str, Any] = {"target_chunks": n, "fetch": fetch}
    kw, kw_n, kw_s = build_keyword(workdir / "keyword", corpus, n, budget_s)
    out["keyword_build"] = {"chunks": kw_n, "seconds": kw_s, "docs_in_index": kw.num_docs()}
    sub = Corpus(
        texts=corpus.texts[:kw_n],
        vectors=corpus.vectors[:kw_n],
        queries=corpus.queries,
        qvecs=corpus.qvecs,
        q_source=corpus.q_source,
        per_doc=corpus.per_doc,
    )
    for user_name in ("admin", "anonymous"):
        user = USERS[user_name]
        lat: list[float] = []
        cpu: list[float] = []
        for q in corpus.queries:
            t, c = time.perf_counter(), time.process_time()
            kw.search(tokenize_query(q), fetch, scope=Scope.of(user))
            lat.append((time.perf_counter() - t) * 1000)
            cpu.append((time.process_time() - c) * 1000)
        out[f"keyword/{user_name}"] = {**percentiles(lat), "cpu_p50_ms": statistics.median(cpu)}
    kw.close()
    store = ArrayStore(corpus, block=10_000)
    vi, vec_n, vec_s = build_vectors(workdir / "vectors", store, n, budget_s)
    space = vi.space(SPACE)
    out["vector_build"] = {"chunks": vec_n, "seconds": vec_s, "mode": space.mode if space else None}
    if vec_n < corpus.n:
        store.corpus = sub = Corpus(  # the ACL answer must cover only what was built
            texts=corpus.texts[:vec_n],
            vectors=corpus.vectors[:vec_n],
            queries=corpus.queries,
            qvecs=corpus.qvecs,
            q_source=corpus.q_source,
            per_doc=corpus.per_doc,
        )
        store._code = sub.tag_code()
    else:
        sub = corpus

    def search(q: np.ndarray, kk: int, user: UserContext) -> list[tuple[int, float]]:
        return vi.search(SPACE, q, kk, scope=Scope.of(user))

    for user_name in ("admin", "anonymous"):
        user = USERS[user_name]
        t = time.perf_counter()
        search(corpus.qvecs[0], fetch, user)  # builds the cached ACL selection
        select_ms = (time.perf_counter() - t) * 1000
        lat, cpu = [], []
        for q in corpus.qvecs:
            t, c = time.perf_counter(), time.process_time()
            search(q, fetch, user)
            lat.append((time.perf_counter() - t) * 1000)
            cpu.append((time.process_time() - c) * 1000)
        out[f"vector/{user_name}"] = {
            **percentiles(lat),
            "cpu_p50_ms": statistics.median(cpu),
            "first_query_with_acl_selection_ms": select_ms,
        }
    rowids = np.arange(1, sub.n + 1, dtype=np.int64)
    out["recall@10_vs_exact"] = {
        u: vector_recall(search, sub, rowids, u) for u in ("admin", "anonymous")
    }
    return out
