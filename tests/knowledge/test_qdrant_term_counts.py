"""The Qdrant index keeps its terms' chunk counts (BM25's document frequencies): each is a count
over the whole index, reused until the index applies a change, and on a shared server for at
most ``TERM_COUNTS_TTL_S``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_qdrant import ACME, CORPUS, doc

from shelfhand.knowledge import KnowledgeBase
from shelfhand.knowledge.stores.qdrant import index as index_module
from shelfhand.knowledge.stores.qdrant.index import QdrantIndex

pytest.importorskip("qdrant_edge")


def test_counts_are_reused_until_a_change_and_then_count_the_change(tmp_path: Path) -> None:
    kb = KnowledgeBase(tmp_path / "ws", None, qdrant_url=str(tmp_path / "q"))
    try:
        kb.ingest_documents(CORPUS)
        keyword = kb._stack.keyword  # type: ignore[attr-defined]
        backend = keyword.index.backend
        term_counts: list[Any] = []
        count = backend.count

        def counted(flt: Any) -> int:
            if flt.term is not None:
                term_counts.append(flt.term)
            return int(count(flt))

        backend.count = counted
        first = [h.chunk.doc_id for h in kb.search("lamp filter", k=3, user=ACME, mode="keyword")]
        after_first = len(term_counts)
        assert after_first > 0
        again = [h.chunk.doc_id for h in kb.search("lamp filter", k=3, user=ACME, mode="keyword")]
        assert again == first and len(term_counts) == after_first  # reused, same answer
        _, before = keyword.doc_freqs(["lamp"])
        kb.ingest_documents([doc("lamp.md", "Lamp", "Replace the lamp after 3000 hours.")])
        _, after = keyword.doc_freqs(["lamp"])
        assert after == [before[0] + 1]  # the change cleared the kept counts
        assert kb.search("lamp hours", k=1, user=ACME, mode="keyword")[0].chunk.doc_id == "lamp.md"
    finally:
        kb.close()


class SharedBackend:
    """A backend other processes also write (a server): counts how often it is asked."""

    shared = True
    location = "test"

    def __init__(self) -> None:
        self.asked = 0
        self.held = 2

    def meta(self) -> None:
        return None

    def count(self, flt: Any) -> int:
        self.asked += 1
        return self.held


def test_on_a_shared_server_a_count_lives_at_most_the_ttl(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr(index_module.time, "monotonic", lambda: now[0])
    backend = SharedBackend()
    index = QdrantIndex(backend)  # type: ignore[arg-type]
    assert index.term_counts(["lamp", "fan"]) == [2, 2]
    assert index.term_counts(["lamp"]) == [2] and backend.asked == 2
    backend.held = 3  # another replica wrote
    now[0] += index_module.TERM_COUNTS_TTL_S / 2
    assert index.term_counts(["lamp"]) == [2]  # still kept
    now[0] += index_module.TERM_COUNTS_TTL_S
    assert index.term_counts(["lamp"]) == [3] and backend.asked == 3
