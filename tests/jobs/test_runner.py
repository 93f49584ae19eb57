"""Ingest jobs run by :class:`JobRunner` against a real PostgreSQL queue and a real workspace."""

from __future__ import annotations

from pathlib import Path

import pytest
from job_helpers import ALICE, FAQ_EN, FAQ_ZH, make_app

from shelfhand.jobs.queue import IngestQueue, JobFile
from shelfhand.jobs.worker import build_runner, close_runner
from shelfhand.service.jobs import EMBED_LOCK


@pytest.fixture
def queue(pg_url: str) -> IngestQueue:
    q = IngestQueue.open(pg_url)
    yield q  # type: ignore[misc]
    q.close()


def _search(app, query: str, user=ALICE) -> list[str]:  # type: ignore[no-untyped-def]
    kb = app.open_knowledge()
    try:
        return [h.chunk.source for h in kb.search(query, k=5, user=user, mode="keyword")]
    finally:
        kb.close()


def test_an_enqueued_upload_is_searchable_once_its_job_ran(
    tmp_path: Path, pg_url: str, queue: IngestQueue
) -> None:
    app = make_app(tmp_path / "ws", pg_url)
    job = queue.enqueue(
        kind="upload",
        user=ALICE,
        files=[
            JobFile(name="returns.md", data=FAQ_EN.encode()),
            JobFile(name="退货.md", data=FAQ_ZH.encode()),
        ],
        sources=["acme/returns.md", "acme/退货.md"],
    )
    assert job.status == "queued" and job.files == 2
    assert job.progress.files_total == 2 and job.progress.files_done == 0

    runner = build_runner(app, queue)
    try:
        done = runner.run(job.id)
        assert done is not None
        assert done.status == "done", done.error
        assert done.attempts == 1
        assert done.progress.phase == "done" and done.progress.files_done == 2
        assert done.report is not None
        assert sorted(done.report["added"]) == ["acme/returns.md", "acme/退货.md"]
        assert _search(app, "lamp hours returned") == ["acme/returns.md"]
        assert _search(app, "无理由退货") == ["acme/退货.md"]
        # the registry knows the tenant owns them (listing, deleting through the API)
        assert runner.uploads.registry.owner_of("acme/returns.md") == "acme"
        # the bytes are gone from the database once the job is final
        assert queue.files(job.id) == []
        # running it again changes nothing: a finished job completes once
        again = runner.run(job.id)
        assert again is not None and again.attempts == 1 and again.status == "done"
    finally:
        close_runner(runner)


def test_a_malformed_file_fails_its_job_with_the_reason_and_keeps_what_was_stored(
    tmp_path: Path, pg_url: str, queue: IngestQueue
) -> None:
    app = make_app(tmp_path / "ws", pg_url)
    runner = build_runner(app, queue)
    try:
        first = queue.enqueue(
            kind="upload",
            user=ALICE,
            files=[JobFile(name="returns.md", data=FAQ_EN.encode())],
            sources=["acme/returns.md"],
        )
        assert runner.run(first.id).status == "done"  # type: ignore[union-attr]
        broken = queue.enqueue(
            kind="upload",
            user=ALICE,
            files=[
                JobFile(name="manual.pdf", data=b"%PDF-1.7 this is not a PDF at all"),
                JobFile(name="退货.md", data=FAQ_ZH.encode()),
            ],
            sources=["acme/manual.pdf", "acme/退货.md"],
        )
        failed = runner.run(broken.id)
        assert failed is not None and failed.status == "failed"
        assert failed.error_code == "unreadable_document"
        assert "manual.pdf" in (failed.error or "")
        # all or nothing: the readable file of the failed upload is not stored either ...
        assert _search(app, "无理由退货") == []
        # ... and what an earlier job stored is untouched
        assert _search(app, "lamp hours returned") == ["acme/returns.md"]
        assert runner.uploads.registry.owner_of("acme/退货.md") is None
        assert runner.uploads.registry.pending() == []
    finally:
        close_runner(runner)


def test_an_ingest_job_keeps_folder_sources_and_prunes_what_vanished(
    tmp_path: Path, pg_url: str, queue: IngestQueue
) -> None:
    app = make_app(tmp_path / "ws", pg_url)
    runner = build_runner(app, queue)
    try:
        files = [
            JobFile(name="docs/returns.md", data=FAQ_EN.encode(), folder=True),
            JobFile(name="docs/zh/退货.md", data=FAQ_ZH.encode(), folder=True),
        ]
        job = queue.enqueue(kind="ingest", user=ALICE, files=files, sources=[f.name for f in files])
        done = runner.run(job.id)
        assert done is not None and done.status == "done", done and done.error
        assert _search(app, "无理由退货") == ["docs/zh/退货.md"]
        # the folder again without the Chinese file: its document is removed
        again = queue.enqueue(
            kind="ingest", user=ALICE, files=files[:1], sources=["docs/returns.md"]
        )
        report = runner.run(again.id)
        assert report is not None and report.status == "done"
        assert report.report is not None and report.report["removed"] == ["docs/zh/退货.md"]
        assert report.report["unchanged"] == ["docs/returns.md"]
        assert _search(app, "无理由退货") == []
    finally:
        close_runner(runner)


def test_jobs_embed_what_they_store_and_leave_it_to_the_job_already_embedding(
    tmp_path: Path, pg_url: str, queue: IngestQueue
) -> None:
    app = make_app(tmp_path / "ws", pg_url, mode="simple")  # hashing embedder
    runner = build_runner(app, queue)
    try:
        first = queue.enqueue(
            kind="upload",
            user=ALICE,
            files=[JobFile(name="returns.md", data=FAQ_EN.encode())],
            sources=["acme/returns.md"],
        )
        done = runner.run(first.id)
        assert done is not None and done.status == "done" and done.report is not None
        assert done.report["chunks"] >= 1
        assert done.report["embedded_chunks"] == done.report["chunks"]
        assert done.report["pending_chunks"] == 0
        assert done.progress.chunks_embedded == done.report["chunks"]

        # another job holds phase 2: this one stores its text (searchable) and moves on
        second = queue.enqueue(
            kind="upload",
            user=ALICE,
            files=[JobFile(name="退货.md", data=FAQ_ZH.encode())],
            sources=["acme/退货.md"],
        )
        with queue.try_exclusive(EMBED_LOCK) as held:
            assert held
            waited = runner.run(second.id)
        assert waited is not None and waited.status == "done" and waited.report is not None
        assert waited.report["embedded_chunks"] == 0 and waited.report["pending_chunks"] >= 1
        assert _search(app, "无理由退货") == ["acme/退货.md"]  # keyword-searchable already

        # the next job that gets phase 2 embeds what was left pending
        third = queue.enqueue(
            kind="upload",
            user=ALICE,
            files=[JobFile(name="warranty.md", data=b"# Warranty\n\nOne year on the lamp.\n")],
            sources=["acme/warranty.md"],
        )
        last = runner.run(third.id)
        assert last is not None and last.report is not None
        assert last.report["embedded_chunks"] == last.report["chunks"] + waited.report["chunks"]
        kb = app.open_knowledge()
        try:
            assert kb.status().pending_chunks == 0
        finally:
            kb.close()
    finally:
        close_runner(runner)
