"""Search on Qdrant (Qdrant Edge in process) beside the embedded and PostgreSQL stores, in one
run, interleaved query by query.

    python bench/qdrant_store.py latency --chunks 20000
    python bench/qdrant_store.py latency --chunks 100000 --hnsw --database-url postgresql://...

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
        embedded, _, emb_build = rl.build_store(root / "embedded", corpus)
        pg, pg_build = _build_pg(url, corpus)
        qdrant, build = _qdrant_stack(url, root / f"qdrant-{corpus.n}")
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
        stores = {"embedded": embedded, "pg": pg, "pg+qdrant": qdrant}
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
        if build["ingest_s"] < 1:  # the index of an earlier run, reused
            graph += ", index reused"
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
    finally:
        if server is not None:
            server.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["latency"])
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hnsw", action="store_true", help="build the HNSW graph (optimize)")
    parser.add_argument("--workspace", default=None, help="folder for the stores (reused)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    out = run_latency(args)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"qdrant_store_{args.what}_{args.chunks}.json"
    path.write_text(json.dumps(out, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
