"""PostgreSQL knowledge store vs the embedded store, in the same run (issue 14).

    python bench/pg_store.py quality --database-url postgresql://...   # SciFact + CMRC 2018
    python bench/pg_store.py latency --chunks 100000                   # p50/p95 per caller

``quality``: nDCG@10 / Recall@10 of ``shelfhand eval --beir`` (hybrid and keyword) on an
embedded workspace and on the same content moved into PostgreSQL with ``pg-import`` (same
vectors, no re-embedding), one after the other in one process. The workspaces are copies
(``--scifact-ws``, ``--cmrc-ws``); the database named in ``--database-url`` is filled by the
import when empty.

``latency``: the synthetic corpus of ``bench/retrieval_latency.py`` (Zipf words, clustered
384-d vectors, tags public/public/sales/hr), stored through each store's own write path (on
PostgreSQL the GIN and HNSW indexes are dropped after the first 1,000 chunks and built at the
end, as one bulk-loads a table),
then keyword / vector / hybrid searches per caller kind (admin, anonymous, role ``sales``)
with the query vectors given (no query embedding), the two stores interleaved query by query.
Without ``--database-url`` a local PostgreSQL 18 + pgvector is started (devservices) in a
temporary folder and stopped at the end. Markdown tables go to stdout, JSON to
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
DATA = Path("/work/shared/data")
logger = logging.getLogger("bench.pg_store")

from retrieval import _load, _out  # noqa: E402  # the shared bench helpers (bench/ is on sys.path)
from retrieval import _table as _retrieval_table  # noqa: E402


def _table(title: str, header: list[str], rows: list[list[Any]]) -> None:
    _retrieval_table(title, header, rows, digits=3)


def _server(args: argparse.Namespace) -> tuple[str, Any]:
    if args.database_url:
        return str(args.database_url), None
    from shelfhand.devservices import start_postgres

    folder = Path(tempfile.mkdtemp(prefix="shelfhand-bench-pg-"))
    server = start_postgres(folder / "data")
    return server.create_database("bench"), server


# -- quality ------------------------------------------------------------------------------------


def run_quality(args: argparse.Namespace) -> dict[str, Any]:
    from shelfhand.app import App
    from shelfhand.core.settings import Settings
    from shelfhand.eval_runner import run_beir_eval
    from shelfhand.knowledge.pg import PgDatabase, PgKnowledgeStore
    from shelfhand.knowledge.pg.transfer import import_workspace

    url, server = _server(args)
    base = url.rsplit("/", 1)[0]
    out: dict[str, Any] = {"load_before": _load()}
    rows = []
    try:
        workspaces = {"scifact": args.scifact_ws, "cmrc2018": args.cmrc_ws}
        for name in args.datasets:
            ws = workspaces[name]
            db_url = f"{base}/{args.db_prefix}{name.replace('2018', '')}"
            store = PgKnowledgeStore(PgDatabase(db_url))
            if store.count_documents() == 0:
                t0 = time.perf_counter()
                report = import_workspace(Path(ws), store)
                out[f"{name}/import_s"] = time.perf_counter() - t0
                out[f"{name}/imported"] = report.documents
            store.close()
            for mode in ("hybrid", "keyword"):
                for kind in ("embedded", "pg"):
                    env = {"SHELFHAND_EMBEDDER": "default"}
                    if kind == "pg":
                        env["SHELFHAND_DATABASE_URL"] = db_url
                    app = App(settings=Settings.load(Path(ws), env=env))
                    res = run_beir_eval(app, DATA / name, mode=mode, limit=args.limit)
                    app.close()
                    out[f"{name}/{kind}/{mode}"] = res
                    rows.append(
                        [
                            name,
                            mode,
                            kind,
                            res["ndcg@10"],
                            res["recall@10"],
                            res["p50_ms"],
                            res["p95_ms"],
                        ]
                    )
                    _out(f"{name} {mode} {kind}: nDCG@10 {res['ndcg@10']:.4f}")
    finally:
        if server is not None:
            server.stop()
    out["load_after"] = _load()
    _table(
        f"quality, embedded vs PostgreSQL, same vectors ({out['load_before']} → "
        f"{out['load_after']})",
        ["dataset", "mode", "store", "nDCG@10", "Recall@10", "p50 ms", "p95 ms"],
        rows,
    )
    return out


# -- ts_rank: PostgreSQL's own ranking over the same tsvectors, for the record ----------------------


def run_tsrank(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword nDCG@10 when the same GIN match is ranked by ``ts_rank`` instead of BM25 (the
    issue's rule: BM25 in SQL unless ts_rank is within 0.02 of the embedded store)."""
    from shelfhand.eval_runner import _beir_queries, _score
    from shelfhand.knowledge.evaluation import load_beir
    from shelfhand.knowledge.pg import PgDatabase, PgKeywordIndex, PgKnowledgeStore
    from shelfhand.knowledge.pg.db import acl_sql
    from shelfhand.knowledge.pg.store import tsquery_literal
    from shelfhand.knowledge.retrieval import HybridRetriever

    class TsRank(PgKeywordIndex):
        def search(self, query_tokens: Any, k: int, **acl: Any) -> list[tuple[int, float]]:
            terms = list(dict.fromkeys(t for t in query_tokens if t))
            match = tsquery_literal(terms)
            if not match or k <= 0:
                return []
            where, params = acl_sql("c", acl["tenant_id"], acl["roles"], None, None)
            with self.db.connection() as conn:
                rows = conn.execute(
                    "SELECT c.rowid, ts_rank(c.body, %s::tsquery) + ts_rank(c.head, %s::tsquery)"
                    f" AS s FROM knowledge_pg_chunks c WHERE (c.body @@ %s::tsquery OR"
                    f" c.head @@ %s::tsquery) AND {where} ORDER BY s DESC LIMIT %s",
                    (match, match, match, match, *params, k),
                ).fetchall()
            return [(int(r[0]), float(r[1])) for r in rows]

    out: dict[str, Any] = {"load_before": _load()}
    base = str(args.database_url).rsplit("/", 1)[0]
    rows = []
    for name in ("scifact", "cmrc2018"):
        db = PgDatabase(f"{base}/{args.db_prefix}{name.replace('2018', '')}")
        store = PgKnowledgeStore(db)
        ds = load_beir(DATA / name)
        queries, qrels = _beir_queries(ds, args.limit)
        for label, index in (("bm25", PgKeywordIndex(db)), ("ts_rank", TsRank(db))):
            retriever = HybridRetriever(store, index, None, None)
            res = _score(retriever, queries, qrels, mode="keyword", key=lambda h: h.chunk.doc_id)  # type: ignore[arg-type]
            out[f"{name}/{label}"] = res
            rows.append([name, label, res["ndcg@10"], res["recall@10"]])
            _out(f"{name} {label}: nDCG@10 {res['ndcg@10']:.4f}")
        db.close()
    out["load_after"] = _load()
    _table(
        "keyword ranking inside PostgreSQL: BM25 in SQL vs ts_rank (same GIN match)",
        ["dataset", "ranking", "nDCG@10", "Recall@10"],
        rows,
    )
    return out


# -- latency ------------------------------------------------------------------------------------


def _build_pg(url: str, corpus: Any) -> tuple[Any, float]:
    import retrieval_latency as rl

    from shelfhand.knowledge.pg import open_pg_store
    from shelfhand.knowledge.pg.store import ImportedDocument
    from shelfhand.knowledge.types import Document, Section

    kb = open_pg_store(url, None)
    if kb.store.count_chunks() == corpus.n:  # built by an earlier run of this corpus
        logger.info("reusing the %d-chunk PostgreSQL store", corpus.n)
        return kb, float("nan")
    t0 = time.perf_counter()
    batch: list[Any] = []
    n_docs = corpus.n // corpus.per_doc

    def flush() -> None:
        kb.store.import_documents(batch)  # type: ignore[attr-defined]
        batch.clear()

    indexes: list[tuple[str, str]] = []
    for d in range(n_docs):
        if d == 100:  # the tables exist: bulk-load without indexes, build them at the end
            indexes = _drop_indexes(kb.store.db)  # type: ignore[attr-defined]
        a, b = d * corpus.per_doc, (d + 1) * corpus.per_doc
        chunks = [rl._chunk(corpus, i) for i in range(a, b)]
        doc = Document(
            doc_id=f"doc{d}",
            source=f"doc{d}",
            title="",
            doc_type="text",
            sections=(Section(text=""),),
            content_hash=f"doc{d}",
            permission_tags=rl.TAGS[d % 4],
        )
        batch.append(
            ImportedDocument(
                doc=doc,
                chunks=chunks,
                vectors={rl.SPACE: (list(range(len(chunks))), corpus.vectors[a:b])},
                embed_state="embedded",
            )
        )
        if len(batch) == 100:
            flush()
        if (d + 1) % 1000 == 0:
            logger.info("pg: %d chunks stored (%.0f s)", b, time.perf_counter() - t0)
    if batch:
        flush()
    logger.info("pg: rows stored in %.0f s; building indexes", time.perf_counter() - t0)
    with kb.store.db.connection() as conn:  # type: ignore[attr-defined]
        conn.execute("SET maintenance_work_mem = '1GB'")
        for _, ddl in indexes:
            conn.execute(ddl)
    build_s = time.perf_counter() - t0
    with kb.store.db.connection() as conn:  # type: ignore[attr-defined]
        conn.execute("VACUUM ANALYZE")
    return kb, build_s


def _drop_indexes(db: Any) -> list[tuple[str, str]]:
    """Drop the GIN and HNSW indexes of the knowledge tables; returns their definitions."""
    with db.connection() as conn:
        found = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename LIKE 'knowledge_pg_%'"
            " AND (indexdef LIKE '%USING gin%' OR indexdef LIKE '%USING hnsw%')"
        ).fetchall()
        for name, _ in found:
            conn.execute(f"DROP INDEX {name}")
    return [(str(n), str(d)) for n, d in found]


def run_latency(args: argparse.Namespace) -> dict[str, Any]:
    import retrieval_latency as rl

    from shelfhand.knowledge.retrieval import SearchMode

    corpus = rl.make_corpus(args.chunks, seed=args.seed, n_queries=args.queries)
    url, server = _server(args)
    try:
        workspace = Path(args.workspace or tempfile.mkdtemp(prefix="shelfhand-bench-emb-"))
        embedded, _, emb_build = rl.build_store(workspace, corpus)
        logger.info("embedded store built in %.0f s", emb_build)
        pg, pg_build = _build_pg(url, corpus)
        logger.info("PostgreSQL store built in %.0f s", pg_build)
        stores = {"embedded": embedded, "pg": pg}
        for kb in stores.values():
            kb.retriever.exact_boost = not args.no_exact_boost
        out: dict[str, Any] = {
            "exact_boost": not args.no_exact_boost,
            "chunks": corpus.n,
            "queries": len(corpus.queries),
            "build_s": {"embedded": emb_build, "pg": pg_build},
            "load_before": _load(),
        }
        modes: tuple[SearchMode, ...] = ("keyword", "vector", "hybrid")
        rows = []
        for user_name, user in rl.USERS.items():
            times: dict[tuple[str, str], list[float]] = {(s, m): [] for s in stores for m in modes}
            hits_at: dict[tuple[str, str], int] = dict.fromkeys(times, 0)
            for kb in stores.values():  # warm caches and connections
                kb.retriever.search_timed(
                    corpus.queries[0],
                    k=args.k,
                    user=user,
                    query_vectors={rl.SPACE: corpus.qvecs[0]},
                )
            items = zip(corpus.queries, corpus.qvecs, corpus.q_source, strict=True)
            for i, (q, v, src) in enumerate(items):
                order = [(s, m) for m in modes for s in stores]
                shift = i % len(order)
                for s, m in order[shift:] + order[:shift]:
                    found, timing = stores[s].retriever.search_timed(
                        q, k=args.k, user=user, mode=m, query_vectors={rl.SPACE: v}
                    )
                    times[(s, m)].append(timing.total_ms)
                    hits_at[(s, m)] += any(
                        rl.chunk_index(h.chunk.chunk_id, corpus.per_doc) == src for h in found
                    )
            for (s, m), values in times.items():
                pct = rl.percentiles(values)
                rate = hits_at[(s, m)] / len(corpus.queries)
                out[f"{s}/{user_name}/{m}"] = {**pct, "source_hit_rate": rate}
                rows.append([user_name, m, s, pct["p50_ms"], pct["p95_ms"], rate])
        out["load_after"] = _load()
        rows.sort(key=lambda r: (r[0], r[1], r[2]))
        _table(
            f"latency, {corpus.n:,} chunks, k={args.k}, no query embedding, stores interleaved,"
            f" exact-identifier step {'off' if args.no_exact_boost else 'on'}"
            f" (build: embedded {emb_build:.0f} s, PostgreSQL {pg_build:.0f} s;"
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
    parser.add_argument("what", choices=["quality", "latency", "tsrank"])
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--scifact-ws", default="/tmp/pgstore-scifact")
    parser.add_argument("--cmrc-ws", default="/tmp/pgstore-cmrc")
    parser.add_argument("--db-prefix", default="", help="database names: <prefix>scifact/cmrc")
    parser.add_argument("--limit", type=int, default=None, help="queries per dataset")
    parser.add_argument(
        "--datasets", nargs="+", default=["scifact", "cmrc2018"], choices=["scifact", "cmrc2018"]
    )
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workspace", default=None, help="embedded store folder (reused)")
    parser.add_argument("--no-exact-boost", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    run = {"quality": run_quality, "latency": run_latency, "tsrank": run_tsrank}[args.what]
    res = run(args)
    RESULTS.mkdir(exist_ok=True)
    name = args.what + ("_" + "_".join(args.datasets) if args.what == "quality" else "")
    (RESULTS / f"pg_store_{name}.json").write_text(
        json.dumps(res, indent=1, default=str), encoding="utf-8"
    )


if __name__ == "__main__":
    main()
