"""Hybrid retrieval latency at scale, excluding query embedding (DESIGN R6 target: p50 ≤ 5 ms).

Builds a throwaway workspace of N synthetic chunks (random words, 384-d normalised vectors) and
times keyword, vector and hybrid search through the public retriever.

    python bench/retrieval_latency.py --chunks 100000 --vectors random
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from shelfhand.core.context import UserContext
from shelfhand.knowledge.retrieval import open_embedded_store
from shelfhand.knowledge.types import Chunk, Document, Section

logger = logging.getLogger("bench")


def make_vectors(
    rng: np.random.Generator, n: int, dim: int, kind: str, centres: np.ndarray
) -> np.ndarray:
    if kind == "random":
        x = rng.standard_normal((n, dim)).astype(np.float32)
    else:
        x = (
            centres[rng.integers(0, len(centres), n)] + 0.5 * rng.standard_normal((n, dim))
        ).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--per-doc", type=int, default=10)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--vectors", choices=["random", "clustered"], default="random")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--workspace", type=Path, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")

    rng = np.random.default_rng(0)
    vocab = np.array(
        [f"w{i}" for i in range(20_000)] + ["warranty", "lamp", "projector", "保修期", "E-203"]
    )
    centres = rng.standard_normal((1000, args.dim))
    workspace = args.workspace or Path(tempfile.mkdtemp(prefix="shelfhand-bench-"))
    kb = open_embedded_store(workspace, None)
    tags_cycle = [(), (), ("sales",), ("hr",)]
    t0 = time.perf_counter()
    with kb.store.deferred_sync():
        for d in range(args.chunks // args.per_doc):
            doc_id = f"doc{d}"
            texts = [" ".join(rng.choice(vocab, size=60).tolist()) for _ in range(args.per_doc)]
            tags = tags_cycle[d % len(tags_cycle)]
            doc = Document(
                doc_id=doc_id,
                source=doc_id,
                title=f"Doc {d}",
                doc_type="text",
                sections=(Section(text="\n".join(texts)),),
                content_hash=doc_id,
                permission_tags=tags,
            )
            chunks = [
                Chunk(
                    chunk_id=f"{doc_id}::{i}",
                    doc_id=doc_id,
                    chunk_index=i,
                    text=t,
                    title=doc.title,
                    section_path=(),
                    page=None,
                    source=doc_id,
                    start=0,
                    end=len(t),
                    content_hash=hashlib.sha256(t.encode()).hexdigest(),
                    doc_type="text",
                    permission_tags=tags,
                )
                for i, t in enumerate(texts)
            ]
            vectors = make_vectors(rng, len(chunks), args.dim, args.vectors, centres)
            kb.store.upsert_document(doc, chunks, {"default": (list(range(len(chunks))), vectors)})
            if (d + 1) % 1000 == 0:
                kb.store.sync()
                logger.info(
                    "%d chunks stored (%.0f s)", (d + 1) * args.per_doc, time.perf_counter() - t0
                )
    build_s = time.perf_counter() - t0
    space = kb.vectors.space("default")
    logger.info(
        "built %d chunks in %.1f s; vector mode %s",
        kb.store.count_chunks(),
        build_s,
        space.mode if space else None,
    )

    users = [None, UserContext(tenant_id="default", user_id="u", roles=["sales"])]
    queries = [" ".join(rng.choice(vocab, size=4).tolist()) for _ in range(args.queries)]
    qvecs = make_vectors(rng, args.queries, args.dim, args.vectors, centres)
    for user in users:
        label = "anonymous" if user is None else "role sales"
        # Warm the ACL selection cache once (it is computed once per store generation).
        kb.retriever.search_timed(queries[0], k=5, user=user, query_vectors={"default": qvecs[0]})
        for mode in ("keyword", "vector", "hybrid"):
            times = []
            for q, v in zip(queries, qvecs, strict=True):
                _, timing = kb.retriever.search_timed(
                    q, k=5, user=user, mode=mode, query_vectors={"default": v}
                )
                times.append(timing.total_ms)
            print(
                f"{label:10s} {mode:8s} p50 {statistics.median(times):6.2f} ms"
                f"  p95 {percentile(times, 95):6.2f} ms"
            )
    kb.close()


if __name__ == "__main__":
    main()
