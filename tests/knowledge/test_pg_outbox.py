"""The PostgreSQL store's outbox (shelfhand.knowledge.stores.pg.outbox): a write commits even
when its derived index cannot be reached, and the change reaches the index later."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from shelfhand.core.errors import DependencyUnavailableError
from shelfhand.knowledge.stores.outbox import IndexChange
from shelfhand.knowledge.stores.pg import PgDatabase, PgKnowledgeStore
from shelfhand.knowledge.types import Chunk, Document, Section


class FlakyIndex:
    """A derived index that records the documents it was given, and is down while ``down``."""

    name = "flaky"

    def __init__(self) -> None:
        self.down = False
        self.seen: list[str] = []
        self.generation: int | None = None

    def durable_generation(self) -> int | None:
        return self.generation

    def apply(self, store: Any, changes: Sequence[IndexChange]) -> None:
        if self.down:
            raise DependencyUnavailableError("Qdrant at test cannot answer", dependency="qdrant")
        self.seen += [c.doc_id for c in changes]

    def flush(self, generation: int, *, durable: bool) -> None:
        self.generation = generation

    def rebuild(self, store: Any, generation: int) -> None:
        self.generation = generation

    def attached(self, store: Any) -> None:
        pass

    def close(self) -> None:
        pass


def _doc(doc_id: str) -> tuple[Document, list[Chunk]]:
    text = f"退货期限 {doc_id}"
    digest = hashlib.sha256(text.encode()).hexdigest()
    doc = Document(
        doc_id=doc_id,
        source=doc_id,
        title="",
        doc_type="text",
        sections=(Section(text=text),),
        content_hash=digest,
    )
    chunk = Chunk(
        chunk_id=f"{doc_id}::0",
        doc_id=doc_id,
        chunk_index=0,
        text=text,
        title="",
        section_path=(),
        page=None,
        source=doc_id,
        start=0,
        end=len(text),
        content_hash=digest,
        doc_type="text",
    )
    return doc, [chunk]


def test_a_write_commits_while_the_index_is_down_and_reaches_it_afterwards(pg_url: str) -> None:
    store = PgKnowledgeStore(PgDatabase(pg_url))
    index = FlakyIndex()
    store.attach(index)
    try:
        index.down = True
        store.upsert_document(*_doc("a.md"))  # no error: the change waits in the outbox
        assert store.count_documents() == 1 and index.seen == []
        index.down = False
        store.sync_pending()  # what a search does first
        assert index.seen == ["a.md"]
        store.sync_pending()  # applied rows are gone
        assert index.seen == ["a.md"]
    finally:
        store.close()


def test_without_an_index_attached_nothing_is_queued(pg_url: str) -> None:
    store = PgKnowledgeStore(PgDatabase(pg_url))
    try:
        store.upsert_document(*_doc("b.md"))
        with store.db.connection() as conn:
            row = conn.execute("SELECT count(*) FROM knowledge_pg_outbox").fetchone()
        assert row is not None and row[0] == 0
    finally:
        store.close()
