"""A long query is searched whole by keyword and embedded only up to
:data:`~shelfhand.knowledge.retrieval.hybrid.MAX_QUERY_CHARS` characters: embedding costs
more than the query's length (USE-multilingual: 0.2 s for 2,000 Chinese characters, 7.8 s
and 600 MB for 20,000), and three 200 KB queries over MCP grew a server to 5 GB."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from shelfhand.core.context import UserContext
from shelfhand.knowledge import KnowledgeBase
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.knowledge.retrieval.hybrid import MAX_QUERY_CHARS

ACME = UserContext(tenant_id="acme", user_id="u1", roles=["user"])


class Recording(HashingEmbedder):
    """Hashing vectors; remembers the length of each query it embeds."""

    def __init__(self) -> None:
        super().__init__()
        self.queries: list[int] = []

    def embed_query(self, text: str) -> np.ndarray:
        self.queries.append(len(text))
        return super().embed_query(text)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return super().embed(texts)


def test_a_long_query_is_embedded_up_to_the_limit_and_searched_whole_by_keyword(
    tmp_path: Path,
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "lamp.md").write_text("# 灯泡\n\n灯泡保修 6 个月，或 2000 小时。\n", encoding="utf-8")
    (docs / "filter.md").write_text("# 滤网\n\n滤网每月清洁一次。\n", encoding="utf-8")
    embedder = Recording()
    with KnowledgeBase(tmp_path / "ws", EmbeddingRouter({"default": embedder})) as kb:
        kb.ingest([docs], tenant_id="acme")
        query = "请问" * 25_000 + " 灯泡保修多久"  # 50,000 characters, the words at the end

        found = kb.search_result(query, k=3, user=ACME)

    assert embedder.queries and max(embedder.queries) <= MAX_QUERY_CHARS
    assert found.hits and found.hits[0].chunk.source.endswith("lamp.md")
