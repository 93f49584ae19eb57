"""PostgreSQL knowledge store vs the embedded store, in the same run (issue 14).

    python bench/pg_store.py quality --database-url postgresql://...   # SciFact + CMRC 2018
    python bench/pg_store.py latency --chunks 100000                   # p50/p95 per caller
    python bench/pg_store.py import --workspace WS --database-url URL  # pg-import, timed
    python bench/pg_store.py latency-ws --workspace WS --database-url URL --queries 8
    python bench/pg_store.py keyword-prune --chunks 1000000 --database-url URL

``import``, ``latency-ws``, ``keyword-prune``: see their functions (docs/benchmarks/history.md "1M chunks on
PostgreSQL").

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
import contextlib
import itertools
import json
import logging
import os
import resource
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
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
    from shelfhand.dev.services import start_postgres

    folder = Path(tempfile.mkdtemp(prefix="shelfhand-bench-pg-"))
    server = start_postgres(folder / "data")
    return server.create_database("bench"), server


# -- quality ------------------------------------------------------------------------------------


def run_quality(args: argparse.Namespace) -> dict[str, Any]:
    from shelfhand.app import App
    from shelfhand.core.settings import Settings
    from shelfhand.evals.runner import run_beir_eval
    from shelfhand.knowledge.stores.pg import PgDatabase, PgKnowledgeStore
    from shelfhand.knowledge.stores.pg.transfer import import_workspace

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
    from shelfhand.evals.retrieval import load_beir
    from shelfhand.evals.runner import _beir_queries, _score
    from shelfhand.knowledge.retrieval.hybrid import HybridRetriever
    from shelfhand.knowledge.stores.pg import PgDatabase, PgKeywordIndex, PgKnowledgeStore
    from shelfhand.knowledge.stores.pg.db import acl_sql
    from shelfhand.knowledge.stores.pg.store import tsquery_literal
    from shelfhand.knowledge.types import Scope

    class TsRank(PgKeywordIndex):
        def search(self, query_tokens: Any, k: int, *, scope: Any) -> list[tuple[int, float]]:
            terms = list(dict.fromkeys(t for t in query_tokens if t))
            match = tsquery_literal(terms)
            if not match or k <= 0:
                return []
            where, params = acl_sql("c", Scope(tenant_id=scope.tenant_id, roles=scope.roles))
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


# -- import: an existing workspace into PostgreSQL, timed per step --------------------------------


def _server_cpu_s(data: Path | None) -> float:
    """CPU seconds of a local server's processes (postmaster, backends, reaped workers)."""
    if data is None:
        return float("nan")
    tick = os.sysconf("SC_CLK_TCK")

    def cpu(pid: int) -> float:  # utime + stime + cutime + cstime
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return sum(int(x) for x in fields[11:15]) / tick

    postmaster = int((data / "postmaster.pid").read_text().split()[0])
    total = cpu(postmaster)
    for child in Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split():
        with contextlib.suppress(FileNotFoundError):  # exited: its time is the postmaster's
            total += cpu(int(child))
    return total


def _db_size_mb(url: str) -> float:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    return float(row[0]) / 2**20 if row else float("nan")


def run_import(args: argparse.Namespace) -> dict[str, Any]:
    """``pg-import`` of ``--workspace`` into ``--database-url``: wall, client CPU (this process
    and its analysis workers) and server CPU (``--pg-data``: a local server's data folder) per
    step (rows, each index built), then the database size."""
    from shelfhand.knowledge.stores.pg import PgDatabase, PgKnowledgeStore
    from shelfhand.knowledge.stores.pg.transfer import import_workspace

    data = Path(args.pg_data) if args.pg_data else None
    store = PgKnowledgeStore(PgDatabase(str(args.database_url)))
    steps: list[dict[str, Any]] = []

    def snapshot(name: str) -> None:
        me = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        steps.append(
            {
                "step": name,
                "wall": time.perf_counter(),
                "client_cpu": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
                "server_cpu": _server_cpu_s(data),
                "load": _load(),
            }
        )
        logger.info("step %s (load %s)", name, steps[-1]["load"])

    last = [0.0]

    def progress(done: int, total: int) -> None:
        if time.perf_counter() - last[0] > 60:
            last[0] = time.perf_counter()
            logger.info("%d/%d documents", done, total)

    snapshot("start")
    report = import_workspace(
        Path(args.workspace),
        store,
        batch_documents=args.batch,
        workers=args.workers,
        maintenance_work_mem=args.maintenance_work_mem,
        index_workers=args.index_workers,
        progress=progress,
        on_step=snapshot,
    )
    snapshot("done")
    store.close()
    out: dict[str, Any] = {
        "documents": report.documents,
        "chunks": report.chunks,
        "vectors": report.vectors,
        "skipped": report.skipped,
        "workers": args.workers,
        "database_mb": _db_size_mb(str(args.database_url)),
        "steps": [],
    }
    rows = []
    for a, b in itertools.pairwise(steps):
        step = {
            "step": a["step"],
            "wall_s": b["wall"] - a["wall"],
            "client_cpu_s": b["client_cpu"] - a["client_cpu"],
            "server_cpu_s": b["server_cpu"] - a["server_cpu"],
            "load": f"{a['load']} → {b['load']}",
        }
        out["steps"].append(step)
        rows.append([step["step"], step["wall_s"], step["client_cpu_s"], step["server_cpu_s"]])
    _table(
        f"pg-import of {args.workspace}: {report.documents:,} documents, {report.chunks:,}"
        f" chunks, {report.vectors:,} vectors ({report.skipped:,} skipped), {args.workers}"
        f" analysis workers; database {out['database_mb']:,.0f} MB",
        ["step", "wall s", "client CPU s", "server CPU s"],
        rows,
    )
    return out


# -- latency ------------------------------------------------------------------------------------


def _build_pg(url: str, corpus: Any, *, records_only: bool = False) -> tuple[Any, float]:
    """The corpus in PostgreSQL. ``records_only``: as a deployment with Qdrant serving the
    searches stores it (no keyword fields, no GIN or HNSW index: PostgreSQL keeps the records
    only); its own searches are then not measured."""
    import retrieval_latency as rl

    from shelfhand.knowledge.stack import open_pg_store
    from shelfhand.knowledge.stores.pg import PgDatabase, PgKnowledgeStore
    from shelfhand.knowledge.stores.pg.store import ImportedDocument

    if records_only:
        store = PgKnowledgeStore(PgDatabase(url), keyword_sql=False)
        kb: Any = SimpleNamespace(store=store, close=store.close)
    else:
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
        doc, chunks = rl.document(corpus, d)
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
        for _, ddl in [] if records_only else indexes:
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


def interleaved_latency(
    stores: dict[str, Any], corpus: Any, k: int, out: dict[str, Any]
) -> list[list[Any]]:
    """Keyword, vector and hybrid searches per caller kind on every store, interleaved query
    by query (query vectors given); percentiles and source hit rates into ``out``, table rows
    returned (caller, mode, store, p50, p95, hit rate)."""
    import retrieval_latency as rl

    from shelfhand.knowledge.retrieval.hybrid import SearchMode

    modes: tuple[SearchMode, ...] = ("keyword", "vector", "hybrid")
    rows = []
    for user_name, user in rl.USERS.items():
        times: dict[tuple[str, str], list[float]] = {(s, m): [] for s in stores for m in modes}
        hits_at: dict[tuple[str, str], int] = dict.fromkeys(times, 0)
        for kb in stores.values():  # warm caches and connections
            kb.retriever.search_timed(
                corpus.queries[0], k=k, user=user, query_vectors={rl.SPACE: corpus.qvecs[0]}
            )
        items = zip(corpus.queries, corpus.qvecs, corpus.q_source, strict=True)
        for i, (q, v, src) in enumerate(items):
            order = [(s, m) for m in modes for s in stores]
            shift = i % len(order)
            for s, m in order[shift:] + order[:shift]:
                found, timing = stores[s].retriever.search_timed(
                    q, k=k, user=user, mode=m, query_vectors={rl.SPACE: v}
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
    return rows


def run_latency(args: argparse.Namespace) -> dict[str, Any]:
    import retrieval_latency as rl

    corpus = rl.make_corpus(args.chunks, seed=args.seed, n_queries=args.queries)
    url, server = _server(args)
    try:
        workspace = Path(args.workspace or tempfile.mkdtemp(prefix="shelfhand-bench-emb-"))
        embedded, _, emb_build = rl.build_store(workspace, corpus)
        logger.info("embedded store built in %.0f s", emb_build)
        pg, pg_build = _build_pg(url, corpus)
        logger.info("PostgreSQL store built in %.0f s", pg_build)
        stores = {"embedded": embedded, "pg": pg}
        for kb in stores.values():  # the configured switches of this run
            kb.retriever.options = replace(
                kb.retriever.options, exact_boost=not args.no_exact_boost
            )
        out: dict[str, Any] = {
            "exact_boost": not args.no_exact_boost,
            "chunks": corpus.n,
            "queries": len(corpus.queries),
            "build_s": {"embedded": emb_build, "pg": pg_build},
            "load_before": _load(),
        }
        rows = interleaved_latency(stores, corpus, args.k, out)
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


# -- latency-ws: the queries and callers of `bench/retrieval.py embedded` on both stores -----------


def run_latency_ws(args: argparse.Namespace) -> dict[str, Any]:
    """The embedded workspace of ``bench/retrieval.py embedded`` (``--workspace``, reused, never
    built) and the same content in PostgreSQL (``--database-url``, filled by ``import``): the
    same queries, query vectors and callers, k = ``--k`` (``candidates_factor`` × k per side),
    the two stores interleaved query by query, modes rotated. Wall ms per search
    (``search_timed``, no query embedding) and this process's CPU ms (the embedded store's
    whole work; for PostgreSQL only the client's share)."""
    import statistics

    import numpy as np
    import retrieval_scale as rs

    from shelfhand.knowledge.retrieval.hybrid import SearchMode
    from shelfhand.knowledge.stack import open_pg_store

    workspace = Path(args.workspace)
    meta = json.loads((workspace / "bench-corpus.json").read_text(encoding="utf-8"))
    n = int(meta["docs"]) * rs.PER_DOC
    corpus = rs.make_mixed_corpus(n, seed=args.seed, n_queries=args.corpus_queries)
    if meta.get("corpus") != corpus.fingerprint():
        raise SystemExit(f"{workspace} does not hold the corpus of {n:,} chunks (seed {args.seed})")
    embedded, _ = rs.build_workspace(workspace, corpus)  # reused: the corpus is complete
    pg = open_pg_store(str(args.database_url), None)
    if pg.store.count_chunks() != embedded.store.count_chunks():
        raise SystemExit("the database does not hold the workspace: run `import` first")
    pg.keyword.rare_share = args.rare_share  # type: ignore[attr-defined]
    if args.keyword_common_share is not None:  # both stores: e.g. 1 for every term ranking
        pg.keyword.common_share = embedded.keyword.common_share = args.keyword_common_share
    pg.keyword.bitmap_scan = not args.no_bitmap_scan  # type: ignore[attr-defined]
    stores = {"embedded": embedded, "pg": pg}
    for kb in stores.values():  # the configured switches of this run
        kb.retriever.options = replace(kb.retriever.options, exact_boost=not args.no_exact_boost)
    modes: tuple[SearchMode, ...] = tuple(args.modes)
    callers = [c for c in rs.CALLERS if args.callers is None or c in args.callers]
    picked = np.random.default_rng(args.seed).permutation(len(corpus.queries))[: args.queries]
    out: dict[str, Any] = {
        "chunks": n,
        "k": args.k,
        "per_side": args.k * embedded.retriever.options.candidates_factor,
        "queries": len(picked),
        "exact_boost": not args.no_exact_boost,
        "rare_share": args.rare_share,
        "bitmap_scan": not args.no_bitmap_scan,
        "keyword_common_share": pg.keyword.common_share,
        "load_before": _load(),
    }
    rows = []
    for name in callers:
        user, filters = rs.CALLERS[name]
        wall: dict[tuple[str, str], list[float]] = {(s, m): [] for s in stores for m in modes}
        cpu: dict[tuple[str, str], list[float]] = {key: [] for key in wall}
        stages: dict[tuple[str, str], list[tuple[float, float]]] = {key: [] for key in wall}
        overlap: dict[str, list[float]] = {m: [] for m in modes}
        for kb in stores.values():  # connections, caches, the caller's vector selection
            kb.retriever.search_timed(
                corpus.queries[0],
                k=args.k,
                user=user,
                filters=filters,
                query_vectors={rs.SPACE: corpus.qvecs[0]},
            )
        t_caller = time.perf_counter()
        for i, q in enumerate(int(x) for x in picked):
            order = [(s, m) for m in modes for s in stores]
            shift = i % len(order)
            found: dict[tuple[str, str], set[str]] = {}
            for s, m in order[shift:] + order[:shift]:
                c0 = time.process_time()
                hits, timing = stores[s].retriever.search_timed(
                    corpus.queries[q],
                    k=args.k,
                    user=user,
                    mode=m,
                    filters=filters,
                    query_vectors={rs.SPACE: corpus.qvecs[q]},
                )
                cpu[(s, m)].append((time.process_time() - c0) * 1000)
                wall[(s, m)].append(timing.total_ms)
                stages[(s, m)].append((timing.keyword_ms, timing.vector_ms))
                found[(s, m)] = {h.chunk.chunk_id for h in hits}
            for m in modes:
                want = found[("embedded", m)]
                overlap[m].append(len(want & found[("pg", m)]) / max(1, len(want)))
        logger.info("%s: %d queries in %.0f s", name, len(picked), time.perf_counter() - t_caller)
        share = float(corpus.visible(name).mean())
        for m in modes:
            cell: dict[str, Any] = {"overlap@k": statistics.mean(overlap[m])}
            for s in stores:
                pct = rs._pcts(wall[(s, m)])
                cell[s] = {
                    **pct,
                    "cpu_p50_ms": statistics.median(cpu[(s, m)]),
                    "keyword_ms_p50": statistics.median(k for k, _ in stages[(s, m)]),
                    "vector_ms_p50": statistics.median(v for _, v in stages[(s, m)]),
                }
            out[f"{name}/{m}"] = cell
            rows.append(
                [
                    f"{name} ({100 * share:.0f}%)",
                    m,
                    f"{cell['embedded']['p50_ms']:.1f} / {cell['embedded']['p95_ms']:.1f}",
                    f"{cell['embedded']['cpu_p50_ms']:.1f}",
                    f"{cell['pg']['p50_ms']:,.1f} / {cell['pg']['p95_ms']:,.1f}",
                    f"{cell['pg']['keyword_ms_p50']:,.1f} / {cell['pg']['vector_ms_p50']:,.1f}",
                    f"{cell['overlap@k']:.2f}",
                ]
            )
    out["load_after"] = _load()
    out["pg_keyword_paths"] = dict(pg.keyword.paths)  # type: ignore[attr-defined]
    _table(
        f"embedded vs PostgreSQL, {n:,} chunks, k={args.k} ({out['per_side']} per side),"
        f" {len(picked)} queries per caller, query vectors given, stores interleaved,"
        f" exact-identifier step {'on' if out['exact_boost'] else 'off'},"
        f" keyword common share {out['keyword_common_share']},"
        f" PostgreSQL rare-terms-first {args.rare_share or 'off'}, bitmap scan"
        f" {'on' if out['bitmap_scan'] else 'off'};"
        f" load {out['load_before']} → {out['load_after']}",
        [
            "caller (reads)",
            "mode",
            "embedded p50 / p95 ms",
            "embedded CPU p50 ms",
            "PostgreSQL p50 / p95 ms",
            "PostgreSQL p50 kw / vec stage ms",
            "same top-k",
        ],
        rows,
    )
    for kb in stores.values():
        kb.close()
    return out


def run_keyword_prune(args: argparse.Namespace) -> dict[str, Any]:
    """PostgreSQL keyword search with and without rare-terms-first pruning (``--rare-share``),
    on the queries of ``latency-ws``, interleaved; counts the searches whose results differ."""
    import numpy as np
    import retrieval_scale as rs

    from shelfhand.knowledge.analysis import tokenize_query
    from shelfhand.knowledge.stores.pg import PgDatabase, PgKeywordIndex
    from shelfhand.knowledge.types import Scope

    corpus = rs.make_mixed_corpus(args.chunks, seed=args.seed, n_queries=args.corpus_queries)
    picked = np.random.default_rng(args.seed).permutation(len(corpus.queries))[: args.queries]
    db = PgDatabase(str(args.database_url))
    index = {  # the planner's plan, every match scored / the variant asked for
        "full": PgKeywordIndex(db, bitmap_scan=False),
        "pruned": PgKeywordIndex(
            db, rare_share=args.rare_share, bitmap_scan=not args.no_bitmap_scan
        ),
    }
    fetch = args.k * 3
    out: dict[str, Any] = {"rare_share": args.rare_share, "fetch": fetch, "load_before": _load()}
    rows = []
    for name, (user, filters) in rs.CALLERS.items():
        if args.callers is not None and name not in args.callers:
            continue
        scope = Scope(
            tenant_id=user.tenant_id,
            roles=user.roles,
            doc_types=[filters["doc_type"]] if filters else None,
        )
        times: dict[str, list[float]] = {"full": [], "pruned": []}
        differ = 0
        for i, q in enumerate(int(x) for x in picked):
            tokens = tokenize_query(corpus.queries[q])
            got = {}
            for which in ("full", "pruned")[i % 2 :] + ("full", "pruned")[: i % 2]:
                t0 = time.perf_counter()
                got[which] = index[which].search(tokens, fetch, scope=scope)
                times[which].append((time.perf_counter() - t0) * 1000)
            differ += got["full"] != got["pruned"]
        pf, pp = rs._pcts(times["full"]), rs._pcts(times["pruned"])
        out[name] = {"full": pf, "pruned": pp, "differ": differ}
        rows.append(
            [
                name,
                f"{pf['p50_ms']:,.0f} / {pf['p95_ms']:,.0f}",
                f"{pp['p50_ms']:,.0f} / {pp['p95_ms']:,.0f}",
                differ,
            ]
        )
        logger.info("%s: %s", name, out[name])
    out["paths"] = dict(index["pruned"].paths)
    out["load_after"] = _load()
    _table(
        f"PostgreSQL keyword search, {args.chunks:,} chunks, {fetch} hits, {len(picked)} queries"
        f" per caller: the planner's plan, every match scored vs bitmap scan"
        f" {'on' if not args.no_bitmap_scan else 'off'}, rare terms first"
        f" {f'(rare: in at most {args.rare_share:.0%} of the chunks)' if args.rare_share else 'off'};"
        f" paths {out['paths']};"
        f" load {out['load_before']} → {out['load_after']}",
        ["caller", "planner's plan p50 / p95 ms", "variant p50 / p95 ms", "results differ"],
        rows,
    )
    db.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "what",
        choices=["quality", "latency", "tsrank", "import", "latency-ws", "keyword-prune"],
    )
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
    parser.add_argument(
        "--modes",
        nargs="+",
        default=["keyword", "vector", "hybrid"],
        choices=["keyword", "vector", "hybrid"],
    )
    parser.add_argument("--callers", nargs="+", default=None, help="latency-ws: caller names")
    parser.add_argument(
        "--corpus-queries", type=int, default=300, help="latency-ws: as retrieval.py --queries"
    )
    parser.add_argument("--no-bitmap-scan", action="store_true", help="let the planner choose")
    parser.add_argument(
        "--keyword-common-share", type=float, default=None, help="latency-ws: both stores'"
    )
    parser.add_argument(
        "--rare-share", type=float, default=0.0, help="PostgreSQL rare-terms-first pruning"
    )
    parser.add_argument("--pg-data", default=None, help="import: local server data (its CPU)")
    parser.add_argument("--workers", type=int, default=2, help="import: analysis processes")
    parser.add_argument("--batch", type=int, default=500, help="import: documents per batch")
    parser.add_argument("--maintenance-work-mem", default="1GB")
    parser.add_argument("--index-workers", type=int, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    run = {
        "quality": run_quality,
        "latency": run_latency,
        "tsrank": run_tsrank,
        "import": run_import,
        "latency-ws": run_latency_ws,
        "keyword-prune": run_keyword_prune,
    }[args.what]
    res = run(args)
    RESULTS.mkdir(exist_ok=True)
    name = args.what + ("_" + "_".join(args.datasets) if args.what == "quality" else "")
    if args.what == "latency-ws":
        name += "_" + "_".join(args.modes) + ("_noexact" if args.no_exact_boost else "")
        name += f"_q{args.queries}" + ("_seqscan" if args.no_bitmap_scan else "")
    (RESULTS / f"pg_store_{name}.json").write_text(
        json.dumps(res, indent=1, default=str), encoding="utf-8"
    )


if __name__ == "__main__":
    main()
