"""The embedded store's search paths side by side, interleaved query by query (issue 14).

On a workspace built by ``bench/retrieval.py embedded`` (the same corpus, callers and queries),
each query runs in three variants of the same open store:

* ``tantivy check, serial``: the keyword index checks its unfiltered hits with a second tantivy
  query (what a reading process does, and what the writer did before it kept labels), and a
  hybrid search runs its two sides one after the other;
* ``labels, serial``: the writer's per-rowid access labels check the hits;
* ``labels + overlap``: and a hybrid search runs its keyword side on a worker thread.

::

    python bench/retrieval_ab.py --size 1000000 --ws-dir /tmp/filters1m/ws
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import retrieval_scale as rs

from shelfhand.knowledge.retrieval.sides import Overlap
from shelfhand.knowledge.stack import open_embedded_store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    rs.workspace_arguments(ap)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    corpus = rs.make_mixed_corpus(args.size, seed=args.seed, n_queries=args.queries)
    t = time.perf_counter()
    kb = open_embedded_store(args.ws_dir / f"embedded-{args.size}", None)
    opened = time.perf_counter() - t
    retriever, keyword = kb.retriever, kb.keyword
    labels = keyword._labels
    if labels is None:
        raise SystemExit("the keyword index has no labels (opened by a reading process?)")
    qvecs = {i: {rs.SPACE: v} for i, v in enumerate(corpus.qvecs)}
    serial, overlap = Overlap(0), retriever._overlap
    variants: dict[str, tuple[Any, Overlap]] = {
        "tantivy check, serial": (None, serial),
        "labels, serial": (labels, serial),
        "labels + overlap": (labels, overlap),
    }
    out: dict[str, Any] = {
        "size": args.size,
        "open_s": opened,
        "overlap_workers": overlap.workers,
        "load_before": os.getloadavg(),
    }
    print(
        f"opened in {opened:.1f} s; keyword-side workers {overlap.workers}; load {os.getloadavg()}"
    )
    print(
        "| caller | mode | "
        + " | ".join(f"{v}: wall p50 / p95 / CPU p50 ms" for v in variants)
        + " |"
    )
    print("|---|---|" + "---|" * len(variants))
    for name in args.callers:
        user, filters = rs.CALLERS[name]
        for mode in ("keyword", "hybrid"):
            res: dict[str, tuple[list[float], list[float]]] = {v: ([], []) for v in variants}
            for i, q in enumerate(corpus.queries):
                order = list(variants)
                order = order[i % 3 :] + order[: i % 3]  # no variant always first
                for v in order:
                    keyword._labels, retriever._overlap = variants[v]
                    c = time.process_time()
                    _, timing = retriever.search_timed(
                        q, k=10, user=user, mode=mode, filters=filters, query_vectors=qvecs[i]
                    )
                    res[v][0].append(timing.total_ms)
                    res[v][1].append((time.process_time() - c) * 1000)
            row = {}
            for v, (wall, cpu) in res.items():
                wall.sort()
                row[v] = {
                    "p50": statistics.median(wall),
                    "p95": wall[int(0.95 * (len(wall) - 1))],
                    "cpu_p50": statistics.median(cpu),
                }
            out[f"{name}/{mode}"] = row
            cells = " | ".join(
                f"{r['p50']:.2f} / {r['p95']:.2f} / {r['cpu_p50']:.2f}" for r in row.values()
            )
            print(f"| {name} | {mode} | {cells} |", flush=True)
    keyword._labels, retriever._overlap = labels, overlap
    out["load_after"] = os.getloadavg()
    print(f"load after {os.getloadavg()}")
    if args.out:
        args.out.write_text(json.dumps(out, indent=2), encoding="utf-8")
    kb.close()


if __name__ == "__main__":
    main()
