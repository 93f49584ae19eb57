"""Retrieval benchmark (docs/design.md R6): latency at 100k, indexes at 1M, ingest overhead, peers.

    python bench/retrieval.py latency   # 100k chunks through the real store; p50/p95 per mode
    python bench/retrieval.py scale     # 1M chunks: our tantivy index and HNSW vector indexes
    python bench/retrieval.py embedded --sizes 100000 1000000   # the real store at 100k and 1M
    python bench/retrieval.py ingest    # 1,000 SciFact abstracts, real embedders: overhead
    python bench/retrieval.py peers --li-python /tmp/peers/venv-llamaindex/bin/python
    python bench/retrieval.py all --li-python ...   # latency + peers share one 100k build

Targets: hybrid p50 <= 5 ms at 100k excluding query embedding; keyword and vector at 1M;
ingest overhead over raw embedder time <= 15%. ``peers`` runs LlamaIndex's
``QueryFusionRetriever(mode="reciprocal_rerank")`` over ``BM25Retriever`` + the default
in-memory ``VectorStoreIndex`` on the same corpus and vectors, in a subprocess of the
LlamaIndex venv, pass by pass interleaved with ours. Markdown tables go to stdout, JSON to
``bench/results/``. The synthetic corpus is described in ``bench/retrieval_latency.py``.

This file only imports the standard library and numpy at the top: it is also the LlamaIndex
worker (``_li-worker``), run by the other venv's Python, where shelfhand is not installed.
"""

from __future__ import annotations

import argparse
import atexit
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
SCIFACT = Path(os.environ.get("SCIFACT_DIR", "/work/shared/data/scifact"))
logger = logging.getLogger("bench.retrieval")


def _load() -> str:
    return "load {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def _out(line: str = "") -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _table(title: str, header: list[str], rows: list[list[Any]], *, digits: int = 2) -> None:
    def cell(v: Any) -> str:
        return f"{v:.{digits}f}" if isinstance(v, float) else str(v)

    _out(f"\n### {title}\n")
    _out("| " + " | ".join(header) + " |")
    _out("|" + "---|" * len(header))
    for row in rows:
        _out("| " + " | ".join(cell(v) for v in row) + " |")


# -- latency -------------------------------------------------------------------------------------


def _store(args: argparse.Namespace, n: int) -> tuple[Any, Any, Any, float]:
    import retrieval_latency as rl

    corpus = rl.make_corpus(n, seed=args.seed, n_queries=args.queries)
    workspace = args.workspace
    if workspace is None:
        workspace = Path(tempfile.mkdtemp(prefix="shelfhand-bench-"))
        atexit.register(shutil.rmtree, workspace, ignore_errors=True)
    kb, rowids, build_s = rl.build_store(Path(workspace), corpus)
    return corpus, kb, rowids, build_s


def run_latency(
    args: argparse.Namespace, built: tuple[Any, Any, Any, float] | None
) -> dict[str, Any]:
    import retrieval_latency as rl

    corpus, kb, rowids, build_s = built or _store(args, args.chunks)
    # the synthetic words (w123) look like identifiers: every query pays the exact lookup, a
    # worst case for it; --no-exact-boost measures without that step
    kb.retriever.options = replace(kb.retriever.options, exact_boost=not args.no_exact_boost)
    res: dict[str, Any] = {"chunks": corpus.n, "build_s": build_s, "queries": len(corpus.queries)}
    res["load_before"] = _load()
    res["no_embedding"] = rl.measure_latency(kb, corpus, rowids, k=args.k)
    res["with_embedding"] = rl.measure_with_embedding(kb, corpus, k=args.k)
    res["load_after"] = _load()
    lat = res["no_embedding"]
    rows = [
        [
            key,
            v["p50_ms"],
            v["p95_ms"],
            v["cpu_p50_ms"],
            v["keyword_ms_p50"],
            v["vector_ms_p50"],
            v["fuse_ms_p50"],
            v.get("exact_ms_p50", 0.0),
            f"{v['source_hit_rate']:.2f}/{v['source_visible_rate']:.2f}",
        ]
        for key, v in lat.items()
        if isinstance(v, dict) and "p50_ms" in v
    ]
    _table(
        f"latency, {corpus.n:,} chunks, k={args.k}, no query embedding ("
        f"{'reused store' if build_s != build_s else f'build {build_s:.0f} s'}, "
        f"{lat['vector_mode']}; recall@10 vs exact {lat['recall@10_vs_exact']})",
        [
            "caller/mode",
            "p50 ms",
            "p95 ms",
            "CPU p50 ms",
            "keyword p50",
            "vector p50",
            "fuse p50",
            "exact p50",
            "source hit / visible",
        ],
        rows,
    )
    emb = res["with_embedding"]
    _table(
        "hybrid with real query embedding (MiniLM int8), anonymous caller",
        ["what", "p50 ms", "p95 ms"],
        [[k, v["p50_ms"], v["p95_ms"]] for k, v in emb.items() if isinstance(v, dict)],
    )
    return res


# -- scale ---------------------------------------------------------------------------------------


def run_scale(args: argparse.Namespace) -> dict[str, Any]:
    import retrieval_latency as rl

    corpus = rl.make_corpus(args.scale_chunks, seed=args.seed, n_queries=args.queries)
    with tempfile.TemporaryDirectory(prefix="shelfhand-scale-") as tmp:
        res: dict[str, Any] = {"load_before": _load()}
        res.update(
            rl.measure_scale(
                Path(tmp), corpus, n=args.scale_chunks, budget_s=args.scale_budget_s, k=args.k
            )
        )
        res["load_after"] = _load()
    rows = [
        [key, v["p50_ms"], v["p95_ms"], v["cpu_p50_ms"]]
        for key, v in res.items()
        if isinstance(v, dict) and "p50_ms" in v
    ]
    _table(
        f"scale: keyword {res['keyword_build']['chunks']:,} chunks (built in "
        f"{res['keyword_build']['seconds']:.0f} s), vectors {res['vector_build']['chunks']:,} "
        f"({res['vector_build']['mode']}, {res['vector_build']['seconds']:.0f} s); top-{res['fetch']};"
        f" recall@10 vs exact {res['recall@10_vs_exact']}",
        ["index/caller", "p50 ms", "p95 ms", "CPU p50 ms"],
        rows,
    )
    return res


# -- embedded: the real store at 100k and 1M (issue 14, point 7) ------------------------------


def run_embedded(args: argparse.Namespace) -> dict[str, Any]:
    import retrieval_scale as rs

    res: dict[str, Any] = {}
    if args.faiss_threads:
        import faiss  # type: ignore[import-untyped]

        faiss.omp_set_num_threads(args.faiss_threads)
    previous: Path | None = None
    for n in sorted(args.sizes):
        corpus = rs.make_mixed_corpus(n, seed=args.seed, n_queries=args.queries)
        workspace = args.ws_dir / f"embedded-{n}"
        kb, build = rs.build_workspace(workspace, corpus, seed_from=previous)
        previous = workspace
        if args.overlap_workers is not None:
            from shelfhand.knowledge.retrieval.sides import Overlap

            kb.retriever._overlap.close()
            kb.retriever._overlap = Overlap(args.overlap_workers)
        if args.keyword_common_share is not None:
            kb.keyword.common_share = args.keyword_common_share
        if args.build_only:
            kb.close()
            continue
        out = rs.measure(kb, corpus, k=args.k)
        out["build"] = build
        out["faiss_threads"] = args.faiss_threads or "default"
        out["overlap_workers"] = kb.retriever._overlap.workers
        out["keyword_common_share"] = kb.keyword.common_share
        kb.close()
        res[str(n)] = out
        _save(f"embedded-{n}", out)
        how = "reused" if build.get("reused") else "built"
        _table(
            f"embedded store, {build['chunks']:,} chunks ({how}: {build['build_s']:.0f} s wall,"
            f" {build['build_cpu_s']:.0f} s CPU, RSS peak {build['rss_peak_mb']:.0f} MB,"
            f" {build['disk_mb']:.0f} MB on disk), k={args.k}, {out['fetch_per_side']} per side,"
            f" {out['queries']} queries, query vectors given, faiss threads"
            f" {out['faiss_threads']}, keyword-side workers {out['overlap_workers']},"
            f" keyword common share {out['keyword_common_share']};"
            f" load {out['load_before']} -> {out['load_after']}",
            [
                "caller (reads)",
                "keyword p50 / p95 ms",
                "vector p50 / p95 ms",
                "hybrid p50 / p95 ms",
                "CPU p50 kw / vec / hybrid",
                "hybrid stages p50: kw index / vec index / fuse+exact",
                "vector recall@10",
                "first vector query ms",
            ],
            list(rs.iter_rows(out)),
        )
    return res


# -- ingest --------------------------------------------------------------------------------------


class _CpuMeter:
    seconds = 0.0


class _MeteredEmbedder:
    """Delegates to an embedder, adding the process CPU time of its calls to a meter (wall
    time on this shared machine swings with other users' load; CPU time much less)."""

    def __init__(self, inner: Any, meter: _CpuMeter) -> None:
        self.inner = inner
        self.meter = meter
        self.name = inner.name
        self.dim = inner.dim

    def embed(self, texts: Any) -> Any:
        c = time.process_time()
        try:
            return self.inner.embed(texts)
        finally:
            self.meter.seconds += time.process_time() - c

    def embed_query(self, text: str) -> Any:
        return self.inner.embed_query(text)


def _ingest_batches(
    docs: list[Any], ing: Any, chunk_document: Any, embedding_text: Any
) -> list[list[str]]:
    batches: list[list[str]] = []
    group: list[str] = []
    for doc in docs:
        chunks = chunk_document(doc, max_tokens=ing.max_tokens, overlap_tokens=ing.overlap_tokens)
        group.extend(embedding_text(c) for c in chunks)
        if len(group) >= ing.group_chunks:
            batches += [group[i : i + ing.batch_size] for i in range(0, len(group), ing.batch_size)]
            group = []
    batches += [group[i : i + ing.batch_size] for i in range(0, len(group), ing.batch_size)]
    return batches


def run_ingest(args: argparse.Namespace) -> dict[str, Any]:
    import hashlib

    from shelfhand.knowledge.embeddings.local import default_router
    from shelfhand.knowledge.ingest.chunking import chunk_document
    from shelfhand.knowledge.ingest.pending import embedding_text
    from shelfhand.knowledge.stack import open_embedded_store
    from shelfhand.knowledge.types import Document, Section

    docs: list[Document] = []
    with (SCIFACT / "corpus.jsonl").open(encoding="utf-8") as f:
        for line in f:
            if len(docs) == args.ingest_docs:
                break
            d = json.loads(line)
            body = d["text"].strip()
            docs.append(
                Document(
                    doc_id=d["_id"],
                    source=d["_id"],
                    title=d["title"],
                    doc_type="beir",
                    sections=(Section(text=body or d["title"]),),
                    content_hash=hashlib.sha256(f"{d['title']}\x00{body}".encode()).hexdigest(),
                )
            )
    from shelfhand.knowledge.embeddings.router import EmbeddingRouter, detect_language

    default = default_router()
    cpu = _CpuMeter()
    router = EmbeddingRouter(
        {s: _MeteredEmbedder(default.embedder(s), cpu) for s in default.spaces},
        route=detect_language,
    )
    with tempfile.TemporaryDirectory(prefix="shelfhand-ingest-") as tmp:
        kb = open_embedded_store(Path(tmp), router)
        ing = kb.ingestor
        embedder = router.embedder("en")
        embedder.embed(["warm up: load the model"])  # model load is not ingest cost
        # The embedder alone on the same texts in the same batches as the ingest (groups of
        # >= group_chunks chunks per ingest call, batch_size texts per embed call). Slices
        # alternate the order (alone, ingest / ingest, alone) so load drift hits both sides.
        n_slices = max(1, min(args.ingest_slices, len(docs)))
        size = -(-len(docs) // n_slices)
        res: dict[str, Any] = {"docs": len(docs), "slices": n_slices, "load_before": _load()}
        alone = total = embed = 0.0
        alone_cpu = ingest_cpu = embed_cpu = 0.0
        chunks = embedded = n_texts = 0
        for s in range(n_slices):
            part = docs[s * size : (s + 1) * size]
            batches = _ingest_batches(part, ing, chunk_document, embedding_text)
            n_texts += sum(len(b) for b in batches)
            for step in ("alone", "ingest") if s % 2 == 0 else ("ingest", "alone"):
                if step == "alone":
                    t, c = time.perf_counter(), time.process_time()
                    for b in batches:
                        embedder.embed(b)
                    alone += time.perf_counter() - t
                    alone_cpu += time.process_time() - c
                else:
                    c, inside = time.process_time(), cpu.seconds
                    report = ing.ingest_documents(part)
                    ingest_cpu += time.process_time() - c
                    embed_cpu += cpu.seconds - inside
                    total += report.total_seconds
                    embed += report.embed_seconds
                    chunks += report.chunks
                    embedded += report.embedded_chunks
        res["load_after"] = _load()
        kb.close()
    res.update(
        {
            "chunks": chunks,
            "embedded_chunks": embedded,
            "texts_alone": n_texts,
            "total_s": total,
            "embed_s_in_ingest": embed,
            "embed_alone_s": alone,
            "overhead_vs_ingest_embed": (total - embed) / embed,
            "overhead_vs_embed_alone": (total - alone) / alone,
            "cpu_ingest_s": ingest_cpu,
            "cpu_embed_in_ingest_s": embed_cpu,
            "cpu_embed_alone_s": alone_cpu,
            "cpu_overhead_vs_ingest_embed": (ingest_cpu - embed_cpu) / embed_cpu,
            "cpu_overhead_vs_embed_alone": (ingest_cpu - alone_cpu) / alone_cpu,
            "docs_per_s": len(docs) / total,
            "chunks_per_s": chunks / total,
        }
    )
    _table(
        f"ingest: {len(docs)} SciFact abstracts, default embedders (MiniLM int8 for English)",
        ["metric", "value"],
        [
            ["chunks (embedded; texts embedded alone)", f"{chunks} ({embedded}; {n_texts})"],
            ["ingest total s", total],
            ["embed s inside ingest (IngestReport.embed_seconds)", embed],
            ["embedder alone s, same texts and batches", alone],
            ["overhead (total-embed)/embed", f"{100 * res['overhead_vs_ingest_embed']:.1f}%"],
            ["overhead vs embedder alone", f"{100 * res['overhead_vs_embed_alone']:.1f}%"],
            [
                "CPU s: ingest / embed inside it / embedder alone",
                f"{ingest_cpu:.1f} / {embed_cpu:.1f} / {alone_cpu:.1f}",
            ],
            [
                "CPU overhead vs embed inside / vs embedder alone",
                f"{100 * res['cpu_overhead_vs_ingest_embed']:.1f}%"
                f" / {100 * res['cpu_overhead_vs_embed_alone']:.1f}%",
            ],
            ["docs/s", res["docs_per_s"]],
            ["chunks/s", res["chunks_per_s"]],
        ],
    )
    return res


# -- peers ---------------------------------------------------------------------------------------


def run_peers(
    args: argparse.Namespace, built: tuple[Any, Any, Any, float] | None
) -> dict[str, Any]:
    import retrieval_latency as rl

    if not args.li_python:
        raise SystemExit("peers needs --li-python PATH (the LlamaIndex venv's python)")
    own = built is None or built[0].n != args.peer_chunks
    if own:
        built = _store(args, args.peer_chunks)
    assert built is not None
    corpus, kb, _, _ = built
    queries = corpus.queries[: args.peer_queries]
    qvecs = corpus.qvecs[: args.peer_queries]
    top = args.k * kb.retriever.options.candidates_factor
    res: dict[str, Any] = {
        "chunks": corpus.n,
        "queries": len(queries),
        "passes": args.peer_passes,
        "k": args.k,
        "per_side": top,
        "load_before": _load(),
    }
    with tempfile.TemporaryDirectory(prefix="shelfhand-peers-") as tmp:
        data = Path(tmp)
        (data / "texts.txt").write_text("\n".join(corpus.texts), encoding="utf-8")
        (data / "queries.txt").write_text("\n".join(queries), encoding="utf-8")
        np.save(data / "vectors.npy", corpus.vectors)
        np.save(data / "qvecs.npy", qvecs)
        err = (data / "worker.log").open("w", encoding="utf-8")
        cmd = [
            args.li_python,
            str(Path(__file__).resolve()),
            "_li-worker",
            "--data",
            str(data),
            "--k",
            str(args.k),
            "--top",
            str(top),
        ]
        child = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            encoding="utf-8",
        )

        def reply() -> dict[str, Any]:
            assert child.stdout is not None
            for line in child.stdout:
                if line.startswith("@@"):
                    return json.loads(line[2:])  # type: ignore[no-any-return]
            err.flush()
            raise RuntimeError(
                "LlamaIndex worker died: "
                + (data / "worker.log").read_text(encoding="utf-8")[-2000:]
            )

        res["llamaindex_build"] = reply()
        admin = rl.USERS["admin"]  # sees every chunk, as LlamaIndex does (it has no ACL)
        for q, v in zip(queries[:3], qvecs[:3], strict=True):
            kb.retriever.search_timed(q, k=args.k, user=admin, query_vectors={rl.SPACE: v})
        ours: list[float] = []
        ours_cpu: list[float] = []
        theirs_cpu: list[float] = []
        theirs: list[float] = []
        ours_hits = theirs_hits = 0
        for p in range(args.peer_passes):
            for q, v, src in zip(queries, qvecs, corpus.q_source, strict=False):
                t, c = time.perf_counter(), time.process_time()
                hits, _ = kb.retriever.search_timed(
                    q, k=args.k, user=admin, query_vectors={rl.SPACE: v}
                )
                ours.append((time.perf_counter() - t) * 1000)
                ours_cpu.append((time.process_time() - c) * 1000)
                if p == 0:
                    ours_hits += any(
                        rl.chunk_index(h.chunk.chunk_id, corpus.per_doc) == src for h in hits
                    )
            assert child.stdin is not None
            child.stdin.write("pass\n")
            child.stdin.flush()
            got = reply()
            theirs += got["lat_ms"]
            theirs_cpu += got["cpu_ms"]
            if p == 0:
                theirs_hits = sum(
                    src in ids for src, ids in zip(corpus.q_source, got["ids"], strict=False)
                )
            logger.info(
                "pass %d: ours p50 %.2f ms, LlamaIndex p50 %.2f ms",
                p + 1,
                statistics.median(ours[-len(queries) :]),
                statistics.median(got["lat_ms"]),
            )
        assert child.stdin is not None
        child.stdin.write("quit\n")
        child.stdin.flush()
        child.wait(timeout=60)
        err.close()
    res["load_after"] = _load()
    if own:
        kb.close()
    res["shelfhand"] = {
        **rl.percentiles(ours),
        "cpu_p50_ms": statistics.median(ours_cpu),
        "source_hit_rate": ours_hits / len(queries),
    }
    res["llamaindex"] = {
        **rl.percentiles(theirs),
        "cpu_p50_ms": statistics.median(theirs_cpu),
        "source_hit_rate": theirs_hits / len(queries),
    }
    res["ratio_p50_llamaindex_over_shelfhand"] = (
        res["llamaindex"]["p50_ms"] / res["shelfhand"]["p50_ms"]
    )
    res["ratio_cpu_p50_llamaindex_over_shelfhand"] = (
        res["llamaindex"]["cpu_p50_ms"] / res["shelfhand"]["cpu_p50_ms"]
    )
    b = res["llamaindex_build"]
    _table(
        f"peers: hybrid top-{args.k} of {top}+{top}, {corpus.n:,} chunks, {len(queries)} queries x "
        f"{args.peer_passes} interleaved passes, same vectors (LlamaIndex {b['version']}, build "
        f"{b['total_s']:.0f} s)",
        ["retriever", "p50 ms", "p95 ms", "CPU p50 ms", "source chunk in top-k"],
        [
            [
                "shelfhand HybridRetriever (admin caller, ACL on)",
                res["shelfhand"]["p50_ms"],
                res["shelfhand"]["p95_ms"],
                res["shelfhand"]["cpu_p50_ms"],
                res["shelfhand"]["source_hit_rate"],
            ],
            [
                "LlamaIndex QueryFusionRetriever (BM25Retriever + VectorStoreIndex)",
                res["llamaindex"]["p50_ms"],
                res["llamaindex"]["p95_ms"],
                res["llamaindex"]["cpu_p50_ms"],
                res["llamaindex"]["source_hit_rate"],
            ],
            [
                "ratio LlamaIndex / shelfhand (p50)",
                res["ratio_p50_llamaindex_over_shelfhand"],
                "",
                res["ratio_cpu_p50_llamaindex_over_shelfhand"],
                "",
            ],
        ],
    )
    return res


def li_worker(args: argparse.Namespace) -> None:
    """Runs in the LlamaIndex venv: build, then one timed pass per ``pass`` line on stdin."""
    from llama_index.core import Settings, StorageContext, VectorStoreIndex, __version__
    from llama_index.core.embeddings import BaseEmbedding
    from llama_index.core.llms import MockLLM
    from llama_index.core.retrievers import QueryFusionRetriever
    from llama_index.core.schema import TextNode
    from llama_index.retrievers.bm25 import BM25Retriever

    data = Path(args.data)
    texts = (data / "texts.txt").read_text(encoding="utf-8").split("\n")
    queries = (data / "queries.txt").read_text(encoding="utf-8").split("\n")
    vectors = np.load(data / "vectors.npy")
    qvec: dict[str, list[float]] = {
        q: v.tolist() for q, v in zip(queries, np.load(data / "qvecs.npy"), strict=True)
    }

    class LookupEmbedding(BaseEmbedding):  # type: ignore[misc]  # the precomputed query vectors; no model runs
        def _get_text_embedding(self, text: str) -> list[float]:
            raise RuntimeError("nodes carry their embeddings")

        def _get_query_embedding(self, query: str) -> list[float]:
            return qvec[query]

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return qvec[query]

    Settings.embed_model = LookupEmbedding(model_name="lookup")
    Settings.llm = MockLLM()
    t0 = time.perf_counter()
    nodes = [
        TextNode(text=t, id_=str(i), embedding=vectors[i].tolist()) for i, t in enumerate(texts)
    ]
    t1 = time.perf_counter()
    index = VectorStoreIndex(
        nodes, storage_context=StorageContext.from_defaults(), show_progress=False
    )
    t2 = time.perf_counter()
    bm25 = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=args.top)
    t3 = time.perf_counter()
    fusion = QueryFusionRetriever(
        [index.as_retriever(similarity_top_k=args.top), bm25],
        similarity_top_k=args.k,
        num_queries=1,
        mode="reciprocal_rerank",
        use_async=False,
        llm=MockLLM(),
    )
    for q in queries[:3]:
        fusion.retrieve(q)
    build = {
        "nodes_s": t1 - t0,
        "vector_index_s": t2 - t1,
        "bm25_s": t3 - t2,
        "total_s": t3 - t0,
        "version": __version__,
    }
    sys.stdout.write("@@" + json.dumps(build) + "\n")
    sys.stdout.flush()
    for line in sys.stdin:
        if line.strip() != "pass":
            break
        lat, cpu, ids = [], [], []
        for q in queries:
            t, c = time.perf_counter(), time.process_time()
            found = fusion.retrieve(q)
            lat.append((time.perf_counter() - t) * 1000)
            cpu.append((time.process_time() - c) * 1000)
            ids.append([int(n.node.node_id) for n in found])
        sys.stdout.write("@@" + json.dumps({"lat_ms": lat, "cpu_ms": cpu, "ids": ids}) + "\n")
        sys.stdout.flush()


# -- main ----------------------------------------------------------------------------------------


def _save(name: str, res: dict[str, Any]) -> None:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"retrieval-{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(res, indent=2, default=str), encoding="utf-8")
    _out(f"\n(results: {path})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "part", choices=["latency", "scale", "embedded", "ingest", "peers", "all", "_li-worker"]
    )
    ap.add_argument("--chunks", type=int, default=100_000, help="latency corpus size")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument(
        "--no-exact-boost", action="store_true", help="latency: without the exact-identifier step"
    )
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--workspace", type=Path, default=None, help="keep/reuse the latency store here"
    )
    ap.add_argument("--scale-chunks", type=int, default=1_000_000)
    ap.add_argument("--scale-budget-s", type=float, default=600.0, help="per index build")
    ap.add_argument(
        "--sizes", type=int, nargs="+", default=[100_000, 1_000_000], help="embedded: chunks"
    )
    ap.add_argument(
        "--ws-dir",
        type=Path,
        default=Path("/tmp/shelfhand-bench-embedded"),
        help="embedded: workspaces are kept (and reused) here",
    )
    ap.add_argument("--build-only", action="store_true", help="embedded: build, do not measure")
    ap.add_argument(
        "--faiss-threads", type=int, default=0, help="embedded: faiss OpenMP threads (0: default)"
    )
    ap.add_argument(
        "--overlap-workers",
        type=int,
        default=None,
        help="embedded: threads running hybrid searches' keyword side (default: the retriever's)",
    )
    ap.add_argument(
        "--keyword-common-share",
        type=float,
        default=None,
        help="embedded: the keyword index's common_share (default: the setting's default)",
    )
    ap.add_argument("--ingest-docs", type=int, default=1000)
    ap.add_argument("--ingest-slices", type=int, default=4)
    ap.add_argument("--li-python", default=None)
    ap.add_argument("--peer-chunks", type=int, default=100_000)
    ap.add_argument("--peer-queries", type=int, default=30)
    ap.add_argument("--peer-passes", type=int, default=3)
    ap.add_argument("--data", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--top", type=int, default=30, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.part == "_li-worker":
        li_worker(args)
        return
    sys.path.insert(0, str(HERE))
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s")
    logging.getLogger("shelfhand").setLevel(logging.WARNING)
    started = time.perf_counter()
    res: dict[str, Any] = {"cpus": os.cpu_count()}
    built = None
    if args.part in ("latency", "all"):
        built = _store(args, args.chunks)
        res["latency"] = run_latency(args, built)
        _save("latency", res["latency"])
    if args.part in ("peers", "all"):
        res["peers"] = run_peers(args, built if built and built[0].n == args.peer_chunks else None)
        _save("peers", res["peers"])
    if built is not None:
        built[1].close()
    if args.part in ("ingest", "all"):
        res["ingest"] = run_ingest(args)
        _save("ingest", res["ingest"])
    if args.part == "embedded":
        res["embedded"] = run_embedded(args)
    if args.part in ("scale", "all"):
        res["scale"] = run_scale(args)
        _save("scale", res["scale"])
    res["wall_s"] = time.perf_counter() - started
    if args.part == "all":
        _save("all", res)


if __name__ == "__main__":
    main()
