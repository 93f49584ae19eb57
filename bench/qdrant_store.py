"""Search on Qdrant (Qdrant Edge in process) beside the embedded and PostgreSQL stores, in one
run, interleaved query by query.

    python bench/qdrant_store.py latency --chunks 20000
    python bench/qdrant_store.py latency --chunks 100000 --hnsw --database-url postgresql://...
    python bench/qdrant_store.py fusion --chunks 20000

The synthetic corpus of ``bench/retrieval_latency.py`` (Zipf words, clustered 384-d vectors,
tags public/public/sales/hr) is stored in the embedded store (SQLite + tantivy + faiss) and in
PostgreSQL (``bench/pg_store.py``'s bulk load); the PostgreSQL store then feeds a Qdrant Edge
index through its outbox (the attach rebuilds it: that is the ingest into Qdrant, timed, without
an HNSW graph), and with ``--hnsw`` the shard's optimizer builds the graph (timed). Keyword,
vector and hybrid searches per caller kind (admin, anonymous, role ``sales``) run with the query
vectors given (no query embedding) on ``embedded``, ``pg`` (BM25 and pgvector in SQL) and
``pg+qdrant`` (records in PostgreSQL, searches on Qdrant). Without ``--database-url`` a local
PostgreSQL 18 + pgvector is started in a temporary folder. Markdown tables go to stdout, JSON to
``bench/results/``.

``fusion`` compares the fusion choices of a hybrid search on one SQLite store with a Qdrant Edge
index (and its tantivy + faiss indexes beside it), interleaved query by query: ``convex`` (two
queries fused here, the default), ``rrf`` fused by Qdrant in one request (prefetch + weighted
RRF), and the same ``rrf`` fused here from two queries.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
RESULTS = HERE / "results"
logger = logging.getLogger("bench.qdrant_store")

from pg_store import _build_pg, _server, _table, interleaved_latency  # noqa: E402  # bench/ on sys.path
from retrieval import _load  # noqa: E402


def reused_store_parser(description: str) -> argparse.ArgumentParser:
    """The options of a benchmark that reopens the PostgreSQL + Qdrant store of a ``latency``
    run (``bench/pg_search_roundtrips.py``, ``bench/qdrant_term_counts.py``)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--database-url", required=True)
    ap.add_argument("--workspace", required=True, help="bench/qdrant_store.py's workspace")
    ap.add_argument("--chunks", type=int, default=20_000)
    ap.add_argument("--queries", type=int, default=20)
    return ap


def open_reused_store(args: argparse.Namespace) -> tuple[Any, Any]:
    """The corpus of ``args`` and its PostgreSQL + Qdrant store, as a ``latency`` run left it."""
    import retrieval_latency as rl

    corpus = rl.make_corpus(args.chunks, seed=0, n_queries=args.queries)
    kb, _ = _qdrant_stack(args.database_url, Path(args.workspace) / f"qdrant-{args.chunks}")
    return corpus, kb


def _qdrant_stack(url: str, folder: Path) -> tuple[Any, dict[str, float]]:
    """The PostgreSQL store with a Qdrant Edge index fed from it (built by the attach)."""
    from shelfhand.knowledge.stack import open_pg_store

    t0 = time.perf_counter()
    kb = open_pg_store(url, None, qdrant_url=str(folder))
    ingest_s = time.perf_counter() - t0
    return kb, {"ingest_s": ingest_s}


def run_latency(args: argparse.Namespace) -> dict[str, Any]:
    import retrieval_latency as rl

    corpus = rl.make_corpus(args.chunks, seed=args.seed, n_queries=args.queries)
    url, server = _server(args)
    root = Path(args.workspace or tempfile.mkdtemp(prefix="shelfhand-bench-qdrant-"))
    try:
        stores: dict[str, Any] = {}
        emb_build = float("nan")
        if "embedded" in args.stores:
            stores["embedded"], _, emb_build = rl.build_store(root / "embedded", corpus)
        pg, pg_build = _build_pg(url, corpus, records_only="pg" not in args.stores)
        logger.info("PostgreSQL store built in %.0f s", pg_build)
        folder = root / f"qdrant-{corpus.n}"
        reused = (folder / "segments").exists()  # an earlier run's index (opened, not built)
        qdrant, build = _qdrant_stack(url, folder)
        index = qdrant.keyword.index
        shard = index.backend._shard  # (for its info: vectors indexed)
        info = shard.info()
        build["rows_per_s"] = corpus.n / build["ingest_s"]
        if args.hnsw:
            t0 = time.perf_counter()
            index.optimize()
            build["hnsw_s"] = time.perf_counter() - t0
            info = shard.info()
        build["indexed_vectors"] = float(info.indexed_vectors_count)
        logger.info("qdrant: %s", build)
        if "pg" in args.stores:
            stores["pg"] = pg
        stores["pg+qdrant"] = qdrant
        out: dict[str, Any] = {
            "chunks": corpus.n,
            "queries": len(corpus.queries),
            "build_s": {"embedded": emb_build, "pg": pg_build},
            "qdrant": build,
            "load_before": _load(),
        }
        rows = interleaved_latency(stores, corpus, args.k, out)
        out["load_after"] = _load()
        rows.sort(key=lambda r: (r[0], r[1], r[2]))
        graph = (
            f"HNSW built in {build['hnsw_s']:.0f} s"
            if args.hnsw
            else f"{build['indexed_vectors']:.0f} vectors indexed (dense and sparse)"
        )
        if reused:  # the "ingest" was opening it (and applying what was pending)
            graph += ", index of an earlier run reused: its ingest time is its opening"
        _table(
            f"latency, {corpus.n:,} chunks, k={args.k}, no query embedding, stores interleaved"
            f" (build: embedded {emb_build:.0f} s, PostgreSQL {pg_build:.0f} s, Qdrant ingest"
            f" {build['ingest_s']:.0f} s = {build['rows_per_s']:.0f} rows/s, {graph};"
            f" {out['load_before']} → {out['load_after']})",
            ["caller", "mode", "store", "p50 ms", "p95 ms", "source hit rate"],
            rows,
        )
        for kb in stores.values():
            kb.close()
        if "pg" not in stores:
            pg.close()
    finally:
        if server is not None:
            server.stop()
    return out


class _ClientSide:
    """A Qdrant keyword search without its server-side fusion (the retriever fuses)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.common_share = inner.common_share

    def __getattr__(self, name: str) -> Any:
        if name == "search_fused":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def num_docs(self) -> int:
        return int(self.inner.num_docs())

    def search(self, *args: Any, **kw: Any) -> Any:
        return self.inner.search(*args, **kw)

    def search_exact(self, *args: Any, **kw: Any) -> Any:
        return self.inner.search_exact(*args, **kw)

    def doc_freqs(self, *args: Any, **kw: Any) -> Any:
        return self.inner.doc_freqs(*args, **kw)


def run_fusion(args: argparse.Namespace) -> dict[str, Any]:
    import retrieval_latency as rl

    from shelfhand.knowledge.retrieval.hybrid import HybridRetriever
    from shelfhand.knowledge.stack import open_embedded_store

    corpus = rl.make_corpus(args.chunks, seed=args.seed, n_queries=args.queries)
    root = Path(args.workspace or tempfile.mkdtemp(prefix="shelfhand-bench-fusion-"))
    embedded, _, emb_build = rl.build_store(root / "embedded", corpus)
    t0 = time.perf_counter()
    kb = open_embedded_store(root / "embedded", None, qdrant_url=str(root / "qdrant"))
    ingest_s = time.perf_counter() - t0
    if args.hnsw:
        kb.keyword.index.optimize()  # type: ignore[attr-defined]

    def variant(base: Any, keyword: Any, fusion: str) -> HybridRetriever:
        return HybridRetriever(
            base.store, keyword, base.vectors, None, fusion=fusion, overlap_workers=0
        )

    variants = {
        "embedded convex": variant(embedded, embedded.keyword, "convex"),
        "embedded rrf": variant(embedded, embedded.keyword, "rrf"),
        "qdrant convex": variant(kb, kb.keyword, "convex"),
        "qdrant rrf, fused by Qdrant": variant(kb, kb.keyword, "rrf"),
        "qdrant rrf, fused here": variant(kb, _ClientSide(kb.keyword), "rrf"),
    }
    out: dict[str, Any] = {
        "chunks": corpus.n,
        "queries": len(corpus.queries),
        "build_s": emb_build,
        "qdrant_ingest_s": ingest_s,
        "load_before": _load(),
    }
    rows = []
    for user_name, user in rl.USERS.items():
        times: dict[str, list[float]] = {name: [] for name in variants}
        hits_at = dict.fromkeys(variants, 0)
        for r in variants.values():  # warm up
            r.search_timed(
                corpus.queries[0], k=args.k, user=user, query_vectors={rl.SPACE: corpus.qvecs[0]}
            )
        items = list(zip(corpus.queries, corpus.qvecs, corpus.q_source, strict=True))
        names = list(variants)
        for i, (q, v, src) in enumerate(items):
            shift = i % len(names)
            for name in names[shift:] + names[:shift]:
                found, timing = variants[name].search_timed(
                    q, k=args.k, user=user, query_vectors={rl.SPACE: v}
                )
                times[name].append(timing.total_ms)
                hits_at[name] += any(
                    rl.chunk_index(h.chunk.chunk_id, corpus.per_doc) == src for h in found
                )
        base = rl.percentiles(times["qdrant convex"])["p50_ms"]
        for name, values in times.items():
            pct = rl.percentiles(values)
            rate = hits_at[name] / len(items)
            out[f"{name}/{user_name}"] = {**pct, "source_hit_rate": rate}
            ratio = f"{pct['p50_ms'] / base:.2f}×"
            rows.append([user_name, name, pct["p50_ms"], pct["p95_ms"], ratio, rate])
    out["load_after"] = _load()
    _table(
        f"hybrid search by fusion, {corpus.n:,} chunks, k={args.k}, no query embedding,"
        f" variants interleaved ({out['load_before']} → {out['load_after']})",
        [
            "caller",
            "store and fusion",
            "p50 ms",
            "p95 ms",
            "p50 vs qdrant convex",
            "source hit rate",
        ],
        rows,
    )
    for r in variants.values():
        r.close()
    kb.close()
    embedded.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["latency", "fusion"])
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hnsw", action="store_true", help="build the HNSW graph (optimize)")
    parser.add_argument("--workspace", default=None, help="folder for the stores (reused)")
    parser.add_argument(
        "--stores",
        nargs="+",
        choices=["embedded", "pg", "none"],
        default=["embedded", "pg"],
        help="latency: the stores measured beside PostgreSQL + Qdrant (without pg, PostgreSQL"
        " is built as a deployment with Qdrant keeps it: records only)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    out = run_latency(args) if args.what == "latency" else run_fusion(args)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"qdrant_store_{args.what}_{args.chunks}.json"
    path.write_text(json.dumps(out, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
