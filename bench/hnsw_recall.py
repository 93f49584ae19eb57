"""HNSW recall and latency at scale (issue 13 point 9), through shelfhand's ``VectorSpace``.

    python bench/hnsw_recall.py --n 1000000 --dist clustered mixture --cache /tmp/hnsw-cache
    python bench/hnsw_recall.py --n 100000 --dist mixture --ef 0 64 128 256   # 0 = adaptive

For each distribution it builds (or loads from ``--cache``) one HNSW index with the given
``--m`` / ``--ef-construction`` (build seconds and index bytes reported), then for every
``--ef`` value (0 = the space's adaptive choice) and every caller selectivity (``--select``:
fraction of the space the caller may read; 1.0 = admin) searches ``--queries`` query vectors
through :meth:`VectorSpace.select` / :meth:`VectorSpace.search` (the product path: the exact
fallback for selective callers and the ``IDSelectorBitmap`` are included) and reports against
exact search over the same readable vectors:

* ``recall`` — strict recall@k: share of the exact top-k ids returned;
* ``tie-aware`` — a returned id counts if its exact score is >= the k-th exact score - ``eps``
  (so an equally good neighbour is not counted as a miss);
* ``zero`` — share of queries with strict recall 0 (the search never reached the right region);
* ``gap`` — median gap between the k-th and (k+1)-th exact score (how tie-like the truth is);
* p50 / p95 latency of one search (single-threaded query, as a request handler runs it) and
  its CPU p50 (process CPU time: on a shared, loaded box the wall time mostly measures waiting).

Distributions (384-d, unit length, seeded):

* ``clustered`` — the recipe of ``bench/retrieval_latency.py``: one random centre per 100
  vectors, vector = centre + 0.5 x N(0, I); a query is a corpus vector + 0.05 x N(0, I).
* ``mixture`` — less degenerate, embedding-like: a power-law spectrum (variance of axis i
  ~ 1/(i+1)), a shared mean direction (mean pairwise cosine ~0.2, as sentence embedders have),
  2,000 topics of Zipf-distributed sizes with per-topic spread 0.6-1.4; queries are fresh draws
  from the same mixture (not perturbed corpus vectors).

JSON goes to ``bench/results/hnsw-recall-*.json``; markdown tables to stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import faiss  # type: ignore[import-untyped]
import numpy as np

from shelfhand.knowledge.stores.faiss import VectorSpace

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
DIM = 384
logger = logging.getLogger("bench.hnsw")


def _out(line: str = "") -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _normalise(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def clustered(n: int, n_queries: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((max(10, n // 100), DIM)).astype(np.float32)
    vectors = np.empty((n, DIM), dtype=np.float32)
    for a in range(0, n, 100_000):
        b = min(n, a + 100_000)
        x = centres[rng.integers(0, len(centres), b - a)]
        vectors[a:b] = _normalise(x + 0.5 * rng.standard_normal((b - a, DIM)).astype(np.float32))
    src = rng.integers(0, n, n_queries)
    q = vectors[src] + 0.05 * rng.standard_normal((n_queries, DIM)).astype(np.float32)
    return vectors, _normalise(q)


def mixture(n: int, n_queries: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    scale = (1.0 / np.sqrt(np.arange(1, DIM + 1))).astype(np.float32)  # power-law spectrum
    basis, _ = np.linalg.qr(rng.standard_normal((DIM, DIM)))
    basis = basis.astype(np.float32)
    topics = 2000
    centres = rng.standard_normal((topics, DIM)).astype(np.float32) * scale
    spread = rng.uniform(0.6, 1.4, topics).astype(np.float32)
    weights = 1.0 / np.arange(1, topics + 1) ** 0.7
    weights /= weights.sum()
    mean = rng.standard_normal(DIM).astype(np.float32)
    mean *= 0.55 * float(np.linalg.norm(scale)) / float(np.linalg.norm(mean))

    def draw(count: int, extra: float) -> np.ndarray:
        t = rng.choice(topics, size=count, p=weights)
        noise = rng.standard_normal((count, DIM)).astype(np.float32) * scale
        x = mean + centres[t] + (extra * spread[t])[:, None] * noise
        return _normalise(x @ basis)

    vectors = np.empty((n, DIM), dtype=np.float32)
    for a in range(0, n, 100_000):
        b = min(n, a + 100_000)
        vectors[a:b] = draw(b - a, 1.0)
    return vectors, draw(n_queries, 1.2)


DISTS = {"clustered": clustered, "mixture": mixture}


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build(
    vectors: np.ndarray, m: int, ef_c: int, cache: Path | None, tag: str
) -> tuple[VectorSpace, dict[str, Any]]:
    """A ``VectorSpace`` in HNSW mode over ``vectors`` (rowid = index + 1)."""
    n = len(vectors)
    space = VectorSpace(DIM, hnsw_threshold=1, m=m, ef_construction=ef_c)
    folder = None if cache is None else cache / f"{tag}-n{n}-m{m}-efc{ef_c}"
    info: dict[str, Any] = {"n": n, "m": m, "ef_construction": ef_c}
    if folder is not None and (folder / "build.json").exists():
        space.load(folder)
        info.update(json.loads((folder / "build.json").read_text()), loaded_from=str(folder))
        return space, info
    ids = np.arange(1, n + 1, dtype=np.int64)
    t, c = time.perf_counter(), time.process_time()
    space.load_all(ids, vectors)
    info["build_s"] = time.perf_counter() - t
    info["build_cpu_s"] = time.process_time() - c
    info["threads"] = faiss.omp_get_max_threads()
    info["load"] = os.getloadavg()
    info["index_mb"] = faiss.serialize_index(space.hnsw).nbytes / 2**20
    if folder is not None:
        space.save(folder)
        (folder / "build.json").write_text(json.dumps(info))
    return space, info


def exact(vectors: np.ndarray, readable: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """Per query the sorted top ``k + 1`` exact scores over the readable vectors."""
    sub = vectors[readable]
    out = np.empty((len(queries), k + 1), dtype=np.float32)
    ids = np.empty((len(queries), k + 1), dtype=np.int64)
    for a in range(0, len(queries), 50):
        s = queries[a : a + 50] @ sub.T
        part = np.argpartition(-s, k, axis=1)[:, : k + 1]
        sc = np.take_along_axis(s, part, axis=1)
        order = np.argsort(-sc, axis=1)
        out[a : a + 50] = np.take_along_axis(sc, order, axis=1)
        ids[a : a + 50] = readable[np.take_along_axis(part, order, axis=1)] + 1
    return np.stack([out, ids.astype(np.float32)])  # scores, rowids (exact in float32 < 2^24)


def measure(
    space: VectorSpace,
    vectors: np.ndarray,
    queries: np.ndarray,
    fraction: float,
    efs: list[int],
    k: int,
    eps: float,
    seed: int,
) -> list[dict[str, Any]]:
    n = len(vectors)
    rng = np.random.default_rng(seed + 1)
    if fraction >= 1.0:
        readable = np.arange(n)
    else:  # readable by whole 10-chunk documents, as ACLs are per document
        docs = rng.random((n + 9) // 10) < fraction
        readable = np.flatnonzero(np.repeat(docs, 10)[:n])
    truth = exact(vectors, readable, queries, k)
    scores, truth_ids = truth[0], truth[1].astype(np.int64)
    t = time.perf_counter()
    sel = space.select(readable.astype(np.int64) + 1)
    select_ms = (time.perf_counter() - t) * 1000
    rows = []
    base = space.ef_search
    for ef in efs:
        space.ef_search = ef if ef > 0 else base
        space.adaptive = ef == 0
        for q in queries[:5]:
            space.search(q, k, sel)  # warm
        lat: list[float] = []
        cpu: list[float] = []
        strict = tie = zero = 0.0
        for i, q in enumerate(queries):
            t, c = time.perf_counter(), time.process_time()
            hits = space.search(q, k, sel)
            lat.append((time.perf_counter() - t) * 1000)
            cpu.append((time.process_time() - c) * 1000)
            got = {r for r, _ in hits}
            good = len(got & set(truth_ids[i, :k].tolist()))
            strict += good / k
            zero += good == 0
            kth = scores[i, k - 1]
            tie += min(k, sum(1 for r in got if float(vectors[r - 1] @ q) >= kth - eps)) / k
        lat.sort()
        rows.append(
            {
                "fraction": fraction,
                "readable": len(readable),
                "path": sel_path(sel),
                "ef": ef if ef > 0 else f"adaptive ({space.effective_ef(k, sel)})",
                "recall": strict / len(queries),
                "tie_aware": tie / len(queries),
                "zero_recall_queries": zero / len(queries),
                "gap_median": float(np.median(scores[:, k - 1] - scores[:, k])),
                "p50_ms": statistics.median(lat),
                "p95_ms": lat[int(0.95 * (len(lat) - 1))],
                "cpu_p50_ms": statistics.median(cpu),
                "select_ms": select_ms,
            }
        )
        logger.info("%s", rows[-1])
    space.ef_search = base
    space.adaptive = True
    return rows


def sel_path(sel: Any) -> str:
    if sel.subset is not None:
        return "exact subset"
    return "hnsw + bitmap" if sel.selector is not None else "hnsw"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--dist", nargs="+", choices=list(DISTS), default=list(DISTS))
    ap.add_argument("--m", type=int, default=32)
    ap.add_argument("--ef-construction", type=int, default=80)
    ap.add_argument("--ef", type=int, nargs="+", default=[0, 128, 256])
    ap.add_argument("--select", type=float, nargs="+", default=[1.0, 0.5, 0.1, 0.02])
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--eps", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache", type=Path, default=None, help="keep built indexes here")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s")
    faiss.omp_set_num_threads(args.threads)
    res: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    for dist in args.dist:
        t = time.perf_counter()
        vectors, queries = DISTS[dist](args.n, args.queries, args.seed)
        logger.info("%s: %d vectors generated in %.0f s", dist, args.n, time.perf_counter() - t)
        tag = f"{dist}-s{args.seed}"
        space, info = build(vectors, args.m, args.ef_construction, args.cache, tag)
        logger.info("%s: built %s", dist, info)
        rows: list[dict[str, Any]] = []
        for fraction in args.select:
            rows += measure(space, vectors, queries, fraction, args.ef, args.k, args.eps, args.seed)
        res[dist] = {"build": info, "rows": rows, "max_rss_mb": _rss_mb()}
        _out(
            f"\n### {dist}, {args.n:,} vectors, M={args.m}, efConstruction="
            f"{args.ef_construction} (build {info['build_s']:.0f} s wall, "
            f"{info['index_mb']:.0f} MB index), k={args.k}, {args.queries} queries\n"
        )
        _out(
            "| readable | path | efSearch | recall | tie-aware | zero | gap | p50 ms | p95 ms "
            "| CPU p50 ms |"
        )
        _out("|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            _out(
                f"| {r['fraction']:g} | {r['path']} | {r['ef']} | {r['recall']:.3f} | "
                f"{r['tie_aware']:.3f} | {r['zero_recall_queries']:.3f} | {r['gap_median']:.4f} | "
                f"{r['p50_ms']:.2f} | {r['p95_ms']:.2f} | {r['cpu_p50_ms']:.2f} |"
            )
        del space, vectors
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"hnsw-recall-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(res, indent=2, default=str), encoding="utf-8")
    _out(f"\n(results: {path})")


if __name__ == "__main__":
    main()
