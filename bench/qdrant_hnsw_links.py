"""What HNSW links for lookup-only payload fields cost Qdrant Edge's graph build.

    python bench/qdrant_hnsw_links.py --points 100000

Two shards of the same synthetic points (384-d clustered vectors, 30 Zipf words a point as a
keyword list, a tenant, a tag, ids): ``linked`` indexes every keyword field with HNSW links
(Qdrant's default), ``lookup`` turns them off (``enable_hnsw=False``) for the fields a dense
search is never filtered by (terms, codes, document id, source), as the shelfhand index does
for its lookup fields. Prints the ingest and ``optimize()`` (HNSW build) seconds of each.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

LOOKUP = ("doc_id", "terms", "codes", "source")


def build(folder: Path, n: int, *, links: bool) -> tuple[float, float]:
    import qdrant_edge as qe

    rng = np.random.default_rng(0)
    centers = rng.normal(size=(64, 384)).astype(np.float32)
    vocab = 5000
    zipf = 1.0 / np.arange(1, vocab + 1)
    zipf /= zipf.sum()
    sparse = {"keyword": qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)}
    shard = qe.EdgeShard.create(str(folder), qe.EdgeConfig(sparse_vectors=sparse))
    tenant = qe.KeywordIndexParams(is_tenant=True)
    shard.update(qe.UpdateOperation.create_field_index("tenant", tenant))
    for name in ("tags", "doc_type", *LOOKUP):
        params = (
            qe.KeywordIndexParams(enable_hnsw=False)
            if not links and name in LOOKUP
            else qe.PayloadSchemaType.Keyword
        )
        shard.update(qe.UpdateOperation.create_field_index(name, params))
    shard.update(qe.UpdateOperation.create_dense_vector("d", 384, qe.Distance.Dot))
    t0 = time.perf_counter()
    for start in range(0, n, 1000):
        points = []
        for i in range(start, min(n, start + 1000)):
            v = centers[i % 64] + 0.5 * rng.normal(size=384).astype(np.float32)
            v /= np.linalg.norm(v)
            words = sorted(set(rng.choice(vocab, size=30, p=zipf).tolist()))
            payload = {
                "doc_id": f"d{i // 10}",
                "tenant": "t1",
                "tags": [["public", "public", "sales", "hr"][i % 4]],
                "doc_type": "md",
                "source": f"s{i // 10}",
                "terms": [f"w{w}" for w in words],
                "codes": [f"C-{i % 997}"],
            }
            vectors = {"keyword": qe.SparseVector(words, [1.0] * len(words)), "d": v.tolist()}
            points.append(qe.Point(i + 1, vectors, payload))
        shard.update(qe.UpdateOperation.upsert_points(points))
    ingest = time.perf_counter() - t0
    t0 = time.perf_counter()
    shard.optimize()
    hnsw = time.perf_counter() - t0
    shard.close()
    return ingest, hnsw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--points", type=int, default=100_000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="shelfhand-bench-hnsw-"))
    try:
        for links in (True, False):
            ingest, hnsw = build(root / str(links), args.points, links=links)
            name = "linked" if links else "lookup"
            print(f"{name}: {args.points} points, ingest {ingest:.1f} s, HNSW build {hnsw:.1f} s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
