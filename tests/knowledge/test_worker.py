"""The background embedder: pending chunks get vectors while the service runs, an outage backs
off and recovers, and the service starts it in its lifespan."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from fastapi.testclient import TestClient

from shelfhand.knowledge.base import KnowledgeBase
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.knowledge.ingest.ingestor import EmbedReport
from shelfhand.knowledge.ingest.worker import EmbeddingWorker


class Flaky:
    """A small bag-of-characters embedder that can be told to fail."""

    name = "flaky"
    dim = 16

    def __init__(self) -> None:
        self.fail = False

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.fail:
            raise ConnectionError("embedding service unavailable")
        out = np.zeros((len(texts), 16), dtype=np.float32)
        for i, text in enumerate(texts):
            for ch in text:
                out[i, ord(ch) % 16] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]


class Watched:
    """Passes calls to the knowledge base and hands each report to the test."""

    def __init__(self, kb: KnowledgeBase) -> None:
        self.kb = kb
        self.reports: list[EmbedReport] = []
        self.ran = threading.Semaphore(0)

    def embed_pending(self, *, should_stop: Callable[[], bool] | None = None) -> EmbedReport:
        report = self.kb.embed_pending(should_stop=should_stop)
        self.reports.append(report)
        self.ran.release()
        return report


def _docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("# Lamp\n\nThe lamp lasts 5000 hours.", encoding="utf-8")
    (root / "退货.md").write_text("# 退货\n\n拆封后7天内可退。", encoding="utf-8")
    return root


def test_the_worker_embeds_pending_chunks_and_recovers_from_an_outage(tmp_path: Path) -> None:
    embedder = Flaky()
    embedder.fail = True
    kb = KnowledgeBase(tmp_path / "ws", EmbeddingRouter({"any": embedder}))
    kb.ingest([_docs(tmp_path)], wait=False)
    assert kb.status().pending_chunks == 2
    watched = Watched(kb)
    worker = EmbeddingWorker(watched, poll_s=0.01, max_backoff_s=0.05)
    worker.start()
    try:
        assert watched.ran.acquire(timeout=10)
        assert watched.reports[0].error is not None and "unavailable" in watched.reports[0].error
        assert kb.status().pending_chunks == 2  # still there, still keyword-searchable
        embedder.fail = False
        worker.wake()
        while watched.reports[-1].error is not None or watched.reports[-1].pending_chunks:
            assert watched.ran.acquire(timeout=10)
    finally:
        worker.stop()
    status = kb.status()
    assert status.pending_chunks == 0 and status.vectors == status.chunks == 2
    assert worker.last_error is None
    kb.close()


def test_the_service_embeds_what_was_stored_without_waiting(tmp_path: Path) -> None:
    from shelfhand.api import create_app
    from shelfhand.app import App
    from shelfhand.core.settings import Settings

    workspace = tmp_path / "ws"
    embedder = Flaky()
    router = EmbeddingRouter({"any": embedder})
    kb = KnowledgeBase(workspace, router)
    kb.ingest([_docs(tmp_path)], wait=False)
    kb.close()
    app = App(settings=Settings.load(workspace, env={}), router=router)
    api = create_app(app, api_keys={})
    with TestClient(api):  # runs the lifespan: the worker starts, then stops on exit
        kb = api.state.service.kb
        done = threading.Event()
        for _ in range(500):  # bounded: polls the database, not a clock
            if kb.status().pending_chunks == 0:
                done.set()
                break
            done.wait(0.02)
        assert done.is_set(), "the background worker never embedded the pending chunks"
        hits = kb.search("lamp hours", mode="vector")
        assert hits and hits[0].chunk.source == "docs/a.md"
