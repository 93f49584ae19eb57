"""A chunk whose text is already embedded reuses the stored vector (no second embedding), on
every store: on PostgreSQL the reuse read pgvector's ``Vector`` as a number array, failed
(``float() argument must be ... not 'Vector'``), and left the chunk pending, so every later
upload of every tenant failed on it too."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from shelfhand.core.context import UserContext
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.knowledge.stack import EmbeddedKnowledge

OpenStack = Callable[..., EmbeddedKnowledge]  # the open_stack fixture (conftest.py)


class Counting(HashingEmbedder):
    """Hashing vectors; counts the texts it embeds."""

    def __init__(self) -> None:
        super().__init__()
        self.texts = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.texts += len(texts)
        return super().embed(texts)


def test_the_same_text_in_another_tenant_reuses_the_stored_vector(
    open_stack: OpenStack, tmp_path: Path
) -> None:
    text = "# 手册\n\n错误代码 DUP-42：风扇故障，请联系售后。\n"
    for tenant in ("acme", "beta"):
        folder = tmp_path / f"{tenant}手册"
        folder.mkdir(parents=True)
        (folder / "手册.md").write_text(text, encoding="utf-8")
    embedder = Counting()
    stack = open_stack(EmbeddingRouter({"default": embedder}))
    try:
        first = stack.ingestor.ingest([tmp_path / "acme手册"], tenant_id="acme")
        embedded = embedder.texts
        assert first.embedded_chunks > 0 and embedded > 0
        second = stack.ingestor.ingest([tmp_path / "beta手册"], tenant_id="beta")
        assert second.embedding_error is None and second.pending_chunks == 0
        assert second.embedded_chunks == first.embedded_chunks
        assert embedder.texts == embedded  # reused, not embedded again
        beta = UserContext(tenant_id="beta", user_id="u1")
        hits = stack.retriever.search("风扇故障", k=3, mode="vector", user=beta)
        assert [h.chunk.source for h in hits] == ["beta手册/手册.md"]
    finally:
        stack.close()
