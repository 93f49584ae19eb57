"""``GET /v1/knowledge/search`` reports the search's own fallback: two callers at once, one
whose query embedding runs out of quota, never see each other's ``degraded``."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from service_helpers import ALICE, CAROL, ThreadServer, start_thread_server, user_contexts

from shelfhand.api import ServiceConfig, create_app
from shelfhand.app import App
from shelfhand.core.errors import EmbeddingUnavailableError
from shelfhand.core.settings import Settings
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.knowledge.types import Document, Section

WAIT = 10.0
FAILING = "warranty overdrawn"  # the embedder is out of quota for this query
WORKING = "lamp warranty"


class GatedEmbedder:
    """Hashing vectors. Once ``armed``, the working query waits (after telling the test it is
    embedding) until the failing one has been answered, and the failing query fails with a
    quota error once the working one is in flight."""

    def __init__(self) -> None:
        self._inner = HashingEmbedder()
        self.armed = False
        self.working_embeds = threading.Event()
        self.failing_answered = threading.Event()

    @property
    def name(self) -> str:
        return "gated"

    @property
    def dim(self) -> int:
        return self._inner.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._inner.embed(texts)

    def embed_query(self, text: str) -> np.ndarray:
        if self.armed and text == WORKING:
            self.working_embeds.set()
            assert self.failing_answered.wait(WAIT)
        if self.armed and text == FAILING:
            assert self.working_embeds.wait(WAIT)
            raise EmbeddingUnavailableError("quota exceeded")
        return self._inner.embed_query(text)


def test_two_callers_searching_at_once_each_get_their_own_degraded_reason(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    embedder = GatedEmbedder()
    settings = Settings.load(tmp_path / "ws", env={"SHELFHAND_EMBEDDER": "hashing"})
    app = App(settings=settings, router=EmbeddingRouter({"default": embedder}))
    server = start_thread_server(create_app(app, config=ServiceConfig(), api_keys=user_contexts()))
    thread_servers.append(server)
    texts = {"warranty.md": "The warranty is twelve months.", "lamp.md": "Lamp warranty: six."}
    server.service.kb.ingest_documents(
        Document(
            doc_id=name,
            source=name,
            title="",
            doc_type="markdown",
            sections=(Section(text=text),),
            content_hash=name,
            tenant_id="t1",  # alice's and carol's
        )
        for name, text in texts.items()
    )
    embedder.armed = True
    answers: dict[str, Any] = {}

    def ask(headers: dict[str, str], query: str) -> None:
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
            response = client.get("/v1/knowledge/search", params={"q": query, "mode": "hybrid"})
            answers[query] = response

    working = threading.Thread(target=ask, args=(CAROL, WORKING))
    working.start()  # searching: its embedding waits until the failing search is answered
    assert embedder.working_embeds.wait(WAIT)
    ask(ALICE, FAILING)  # fails while the working search is in flight
    embedder.failing_answered.set()
    working.join(WAIT)
    assert not working.is_alive()

    failed, worked = answers[FAILING], answers[WORKING]
    assert failed.status_code == worked.status_code == 200
    assert "quota exceeded" in (failed.json()["degraded"] or "")
    assert worked.json()["degraded"] is None
    assert worked.json()["results"]
