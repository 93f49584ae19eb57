"""Real worker processes on a real PostgreSQL queue: kill -9 mid-job, graceful stop.

Waits are bounded polls of the job record (no sleeps standing in for synchronisation); the
worker under test holds its job through a hook in tests/jobs/worker_process.py.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from job_helpers import ALICE, FAQ_EN, FAQ_ZH, Workers, make_app, wait_for

from shelfhand.jobs.queue import IngestQueue, JobFile, JobRecord

FILES = [
    JobFile(name="a-returns.md", data=FAQ_EN.encode()),
    JobFile(name="b-退货.md", data=FAQ_ZH.encode()),
    JobFile(name="c-warranty.md", data=b"# Warranty\n\nThe warranty covers the lamp for a year.\n"),
]
SOURCES = [f"acme/{f.name}" for f in FILES]


@pytest.fixture
def queue(pg_url: str) -> Iterator[IngestQueue]:
    q = IngestQueue.open(pg_url)
    yield q
    q.close()


@pytest.fixture
def workers(tmp_path: Path, pg_url: str) -> Iterator[Workers]:
    w = Workers(tmp_path / "ws", pg_url)
    yield w
    w.close()


def _status(queue: IngestQueue, job_id: str) -> JobRecord:
    record = queue.get(job_id)
    assert record is not None
    return record


def test_a_job_whose_worker_is_killed_mid_way_completes_exactly_once_on_another(
    tmp_path: Path, pg_url: str, pg_server: Any, queue: IngestQueue, workers: Workers
) -> None:
    # what a clean ingest of these files stores (in a database and workspace of its own)
    other = f"r_{uuid.uuid4().hex[:12]}"
    reference = make_app(tmp_path / "reference", pg_server.create_database(other))
    ref_kb = reference.open_knowledge()
    ref_dir = tmp_path / "ref" / "acme"
    ref_dir.mkdir(parents=True)
    for f in FILES:
        (ref_dir / f.name).write_bytes(f.data)
    ref_kb.ingest([ref_dir])
    expected = {s.source: (s.documents, s.chunks) for s in ref_kb.sources()}
    ref_kb.close()
    reference.close()
    pg_server.drop_database(other)
    assert sorted(expected) == sorted(SOURCES)

    job = queue.enqueue(kind="upload", user=ALICE, files=FILES, sources=SOURCES)
    marker = tmp_path / "held"
    first = workers.start(marker)
    wait_for(marker.exists, "the first worker to store a file and hold", first)
    assert _status(queue, job.id).status == "running"
    first.send_signal(signal.SIGKILL)
    first.wait(30)

    # the killed attempt left part of the upload behind (one file stored, pending rows)
    app = make_app(workers.workspace, pg_url)
    kb = app.open_knowledge()
    assert 1 <= len(kb.sources()) < len(FILES)
    kb.close()

    second = workers.start()
    wait_for(lambda: _status(queue, job.id).final, "the job to finish on the second worker", second)
    done = _status(queue, job.id)
    assert done.status == "done", done.error
    assert done.attempts == 2  # the killed attempt and the one that completed
    kb = app.open_knowledge()
    try:
        stored = {s.source: (s.documents, s.chunks) for s in kb.sources()}
        assert stored == expected  # one version of each document, no duplicate chunks
        hits = kb.search("无理由退货", k=5, user=ALICE, mode="keyword")
        assert [h.chunk.source for h in hits] == ["acme/b-退货.md"]
    finally:
        kb.close()
    registry = app.upload_registry()  # PostgreSQL: what every replica reads
    try:
        assert sorted(r.source for r in registry.for_tenant("acme")) == sorted(SOURCES)
        assert registry.pending() == []
    finally:
        registry.close()


def test_sigterm_lets_the_running_job_finish_then_stops_the_worker(
    tmp_path: Path, queue: IngestQueue, workers: Workers
) -> None:
    job = queue.enqueue(kind="upload", user=ALICE, files=FILES[:2], sources=SOURCES[:2])
    marker, release = tmp_path / "held", tmp_path / "release"
    proc = workers.start(marker, release)
    wait_for(marker.exists, "the worker to hold its job", proc)
    proc.send_signal(signal.SIGTERM)
    later = queue.enqueue(kind="upload", user=ALICE, files=FILES[2:], sources=SOURCES[2:])
    assert proc.poll() is None  # still running its job
    release.write_text("go", encoding="utf-8")
    assert proc.wait(90) == 0
    assert _status(queue, job.id).status == "done"
    assert _status(queue, later.id).status == "queued"  # a stopping worker takes no new job


def test_a_worker_runs_jobs_in_parallel_on_a_shared_store(
    tmp_path: Path, pg_url: str, queue: IngestQueue, workers: Workers
) -> None:
    kb = make_app(workers.workspace, pg_url).open_knowledge(writer="ingest")
    embedded = kb.lock is not None
    kb.close()
    if embedded:
        pytest.skip("the embedded store writes one job at a time (workspace writer lock)")
    jobs = [
        queue.enqueue(kind="upload", user=ALICE, files=[f], sources=[s])
        for f, s in zip(FILES[:2], SOURCES[:2], strict=True)
    ]
    marker, release = tmp_path / "held", tmp_path / "release"
    proc = workers.start(marker, release, each=True, concurrency=2)
    markers = [marker.with_name(f"held-{j.id}") for j in jobs]
    # both jobs are mid-way at the same time: they run in parallel
    wait_for(lambda: all(m.exists() for m in markers), "both jobs to be running at once", proc)
    release.write_text("go", encoding="utf-8")
    wait_for(lambda: all(_status(queue, j.id).final for j in jobs), "both jobs to finish", proc)
    assert [_status(queue, j.id).status for j in jobs] == ["done", "done"]
