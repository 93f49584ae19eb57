"""Ingest at scale (issue 10): keyword-first phase 1, phase 2 throughput, peak memory.

    python bench/ingest.py keyword [--mb 30]      # 30 MB text + 10 small files, --no-wait
    python bench/ingest.py rss [--kb 256]         # whole ingest (both phases), default embedders
    python bench/ingest.py embed [--kb 300]       # phase 2 vs the bare embedder, same texts
    python bench/ingest.py windows [--docs 400]   # MiniLM truncated at 256 vs windows, SciFact
    python bench/ingest.py all --json out.json

- **keyword**: ``shelfhand ingest --no-wait`` (default embedders configured, phase 2 left for
  later) of one generated ``--mb`` MB English text file among 10 small ones, as a subprocess under
  ``/usr/bin/time -v``: wall time until the command returns (every chunk committed and in the
  keyword index), peak RSS, and a keyword search for a word that only occurs at the very end of
  the big file (it must be found).
- **rss**: ``shelfhand ingest`` (both phases, default embedders) of a ``--kb`` KB text file: wall
  time and peak RSS of the whole process.
- **embed**: a ``--kb`` KB file stored with ``wait=False``, then :meth:`Ingestor.embed_pending`
  timed against ``embedder.embed`` on the same chunk texts in the same batch size, both with the
  model already loaded; throughput ratio = phase 2 chunks/s / bare chunks/s.
- **windows**: dense retrieval with MiniLM on the SciFact documents relevant to some test query
  (first ``--docs``; whole abstracts, title + text), for the queries whose relevant documents
  are all in that sub-corpus: truncated at 256 tokens (``max_windows=1``, the old behaviour)
  against the token-weighted mean of 256-token windows.

Texts are generated (seeded): sentences of technical words in paragraphs, so chunking behaves
as on prose. The machine is shared: note ``uptime`` with the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WORDS = [
    "lamp",
    "projector",
    "filter",
    "warranty",
    "service",
    "fan",
    "heat",
    "light",
    "image",
    "lens",
    "focus",
    "colour",
    "cable",
    "port",
    "power",
    "board",
    "screen",
    "remote",
    "battery",
    "menu",
    "update",
    "firmware",
    "signal",
    "audio",
    "mount",
    "ceiling",
    "brightness",
    "contrast",
    "zoom",
    "keystone",
    "noise",
    "dust",
    "sensor",
    "shutter",
    "driver",
    "module",
    "frame",
    "pixel",
    "panel",
    "mirror",
    "prism",
    "motor",
    "thermal",
    "housing",
    "bracket",
    "socket",
    "circuit",
    "voltage",
    "current",
]
END_MARK = "zebracorn"  # a word that occurs once, at the end of the big file


def make_text(n_bytes: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    while size < n_bytes:
        sentences = [
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 18))).capitalize() + "."
            for _ in range(rng.randint(3, 7))
        ]
        paragraph = " ".join(sentences)
        parts.append(paragraph)
        size += len(paragraph) + 2
    return "\n\n".join(parts)


def _env(workspace: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    env["SHELFHAND_WORKSPACE"] = str(workspace)
    return env


def _timed(args: list[str], workspace: Path) -> dict[str, Any]:
    started = time.perf_counter()
    out = subprocess.run(
        ["/usr/bin/time", "-v", sys.executable, "-m", "shelfhand.cli", *args],
        capture_output=True,
        text=True,
        env=_env(workspace),
        check=False,
    )
    wall = time.perf_counter() - started
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", out.stderr)
    cpu = sum(
        float(m) for m in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", out.stderr)
    )
    if out.returncode != 0:
        raise SystemExit(f"{args} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return {
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),  # user + system: what the run costs on an idle machine
        "peak_rss_mb": round(int(peak.group(1)) / 1024) if peak else None,
        "stdout": out.stdout.strip().splitlines()[-3:],
    }


def bench_keyword(mb: float, tmp: Path) -> dict[str, Any]:
    root = tmp / "corpus"
    root.mkdir()
    (root / "big.txt").write_text(make_text(int(mb * 1024 * 1024)) + f" {END_MARK}.", "utf-8")
    for i in range(10):
        (root / f"small{i}.md").write_text(f"# Note {i}\n\n{make_text(2000, seed=i)}", "utf-8")
    workspace = tmp / "ws-keyword"
    result = _timed(["ingest", str(root), "--no-wait"], workspace)
    found = subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", "search", END_MARK, "--mode", "keyword", "--json"],
        capture_output=True,
        text=True,
        env=_env(workspace),
        check=False,
    )
    hits = json.loads(found.stdout) if found.returncode == 0 else []
    result["end_of_big_file_found"] = bool(hits) and hits[0]["source"] == "corpus/big.txt"
    result["mb"] = mb
    return result


def bench_rss(kb: int, tmp: Path) -> dict[str, Any]:
    root = tmp / "rss"
    root.mkdir()
    (root / "doc.txt").write_text(make_text(kb * 1024), "utf-8")
    result = _timed(["ingest", str(root)], tmp / "ws-rss")
    result["kb"] = kb
    return result


def bench_embed(kb: int, tmp: Path) -> dict[str, Any]:
    from shelfhand.knowledge.base import KnowledgeBase
    from shelfhand.knowledge.embeddings.local import default_router
    from shelfhand.knowledge.ingest.pending import embedding_text

    root = tmp / "embed"
    root.mkdir()
    (root / "doc.txt").write_text(make_text(kb * 1024, seed=11), "utf-8")
    router = default_router()
    embedder = router.embedder("en")
    embedder.embed(["warm up: load the model before timing"])
    base = KnowledgeBase(tmp / "ws-embed", router)
    base.ingest([root], wait=False)
    store = base._stack.store  # the bench reads the pending texts straight from the store
    texts = [embedding_text(s.chunk) for s in store.pending_chunks(limit=1_000_000)]
    batch = base._stack.ingestor.batch_size
    started = time.perf_counter()
    for i in range(0, len(texts), batch):
        embedder.embed(texts[i : i + batch])
    bare_s = time.perf_counter() - started
    started = time.perf_counter()
    report = base.embed_pending()
    phase2_s = time.perf_counter() - started
    base.close()
    return {
        "kb": kb,
        "chunks": len(texts),
        "bare_chunks_per_s": round(len(texts) / bare_s, 2),
        "phase2_chunks_per_s": round(report.embedded_chunks / phase2_s, 2),
        "ratio": round((report.embedded_chunks / phase2_s) / (len(texts) / bare_s), 3),
        "pending_after": report.pending_chunks,
    }


def bench_windows(n_docs: int) -> dict[str, Any]:
    import numpy as np

    from shelfhand.evals.retrieval import evaluate, load_beir
    from shelfhand.knowledge.embeddings.local import MiniLMEmbedder

    ds = load_beir(Path(os.environ.get("SCIFACT_DIR", "/work/shared/data/scifact")))
    relevant = {d for judged in ds.qrels.values() for d in judged}
    ids = [d for d in ds.corpus if d in relevant][:n_docs]
    keep = set(ids)
    queries = {q: t for q, t in ds.queries.items() if set(ds.qrels[q]) <= keep}
    texts = [f"{ds.corpus[d].title}\n{ds.corpus[d].text}" for d in ids]
    out: dict[str, Any] = {"docs": len(ids), "queries": len(queries)}
    for name, embedder in (
        ("truncated_256", MiniLMEmbedder(max_windows=1)),
        ("windows", MiniLMEmbedder()),
    ):
        started = time.perf_counter()
        scores = embedder.embed(list(queries.values())) @ embedder.embed(texts).T
        run = {q: [ids[j] for j in np.argsort(-scores[i])[:10]] for i, q in enumerate(queries)}
        metrics = evaluate(run, {q: ds.qrels[q] for q in queries})
        out[name] = {k: round(v, 4) for k, v in metrics.items()}
        out[name]["seconds"] = round(time.perf_counter() - started, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["keyword", "rss", "embed", "windows", "all"])
    parser.add_argument("--docs", type=int, default=400)
    parser.add_argument("--mb", type=float, default=30.0)
    parser.add_argument("--kb", type=int, default=256)
    parser.add_argument("--embed-kb", type=int, default=300)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, Any] = {"uptime_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="shelfhand-bench-ingest-") as tmp_name:
        tmp = Path(tmp_name)
        if args.part in ("keyword", "all"):
            results["keyword"] = bench_keyword(args.mb, tmp)
            print("keyword:", json.dumps(results["keyword"]), flush=True)
        if args.part in ("rss", "all"):
            results["rss"] = bench_rss(args.kb, tmp)
            print("rss:", json.dumps(results["rss"]), flush=True)
        if args.part in ("embed", "all"):
            results["embed"] = bench_embed(args.embed_kb, tmp)
            print("embed:", json.dumps(results["embed"]), flush=True)
    if args.part in ("windows", "all"):
        results["windows"] = bench_windows(args.docs)
        print("windows:", json.dumps(results["windows"]), flush=True)
    results["uptime_after"] = os.getloadavg()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
