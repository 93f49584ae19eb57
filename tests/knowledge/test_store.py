"""The system of record (both stores: ``open_stack``), and the SQLite store's migrations and
the outbox that keeps its indexes in step (embedded only)."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from shelfhand.core.db import (
    Migration,
    applied_migrations,
    apply_migrations,
    connect,
    transaction,
)
from shelfhand.core.errors import DependencyUnavailableError
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.knowledge.stack import EmbeddedKnowledge, open_embedded_store
from shelfhand.knowledge.stores.sqlite import SqliteKnowledgeStore
from shelfhand.knowledge.stores.tantivy import TantivyKeywordIndex
from shelfhand.knowledge.stores.vector_indexes import VectorIndexes
from shelfhand.knowledge.types import Chunk, Document, Scope, Section

OpenStack = Callable[..., EmbeddedKnowledge]  # the open_stack fixture (conftest.py)


class HashEmbedder:
    """Bag of character trigrams hashed into a small normalised vector."""

    def __init__(self, dim: int = 32) -> None:
        self._dim = dim

    @property
    def name(self) -> str:
        return f"hash-{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for j in range(max(1, len(text) - 2)):
                h = int(hashlib.md5(text[j : j + 3].encode("utf-8")).hexdigest(), 16)
                out[i, h % self._dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return out / norms

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]


def make_doc(
    doc_id: str,
    texts: list[str],
    *,
    tenant: str = "default",
    tags: tuple[str, ...] = (),
    source: str | None = None,
    doc_type: str = "markdown",
) -> tuple[Document, list[Chunk]]:
    src = source or doc_id
    doc = Document(
        doc_id=doc_id,
        source=src,
        title=doc_id.title(),
        doc_type=doc_type,
        sections=tuple(Section(text=t) for t in texts),
        content_hash=hashlib.sha256("|".join(texts).encode("utf-8")).hexdigest(),
        permission_tags=tags,
        tenant_id=tenant,
        updated_at=1.0,
    )
    chunks = [
        Chunk(
            chunk_id=f"{doc_id}::{i}",
            doc_id=doc_id,
            chunk_index=i,
            text=t,
            title=doc.title,
            section_path=("Intro", "Part"),
            page=None,
            source=src,
            start=0,
            end=len(t),
            content_hash=hashlib.sha256(t.encode("utf-8")).hexdigest(),
            doc_type=doc_type,
            permission_tags=tags,
            tenant_id=tenant,
            updated_at=1.0,
        )
        for i, t in enumerate(texts)
    ]
    return doc, chunks


def vectors_for(chunks: list[Chunk]) -> dict[str, tuple[list[int], np.ndarray]]:
    return {"default": (list(range(len(chunks))), HashEmbedder().embed([c.text for c in chunks]))}


def open_kb(workspace: Path) -> EmbeddedKnowledge:
    return open_embedded_store(workspace, EmbeddingRouter({"default": HashEmbedder()}))


def assert_indexes_agree(kb: EmbeddedKnowledge) -> None:
    assert kb.keyword.num_docs() == kb.store.count_chunks()
    assert kb.vectors.count() == kb.store.count_vectors()


def test_migrations_run_once_and_are_recorded_by_name(tmp_path: Path) -> None:
    conn = connect(tmp_path / "x.db")
    migrations = [
        Migration(name="t_001", sql="CREATE TABLE a (x INTEGER);\nINSERT INTO a VALUES (1);"),
        Migration(name="t_002", run=lambda c: c.execute("ALTER TABLE a ADD COLUMN y TEXT")),
    ]
    assert apply_migrations(conn, migrations) == ["t_001", "t_002"]
    assert apply_migrations(conn, migrations) == []
    assert applied_migrations(conn) == ["t_001", "t_002"]
    assert conn.execute("SELECT COUNT(*) FROM a").fetchone()[0] == 1
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1


def test_a_write_lock_held_elsewhere_is_a_clear_error_not_a_crash(tmp_path: Path) -> None:
    holder = connect(tmp_path / "k.db")
    holder.execute("CREATE TABLE t (x INTEGER)")
    waiting = connect(tmp_path / "k.db", busy_timeout_ms=50)
    holder.execute("BEGIN IMMEDIATE")  # another process writing, for longer than the timeout
    with (
        pytest.raises(DependencyUnavailableError, match=r"k\.db is locked .*waited 50 ms"),
        transaction(waiting) as conn,
    ):
        conn.execute("INSERT INTO t VALUES (1)")
    holder.execute("COMMIT")
    with transaction(waiting) as conn:  # once it lets go, writing works again
        conn.execute("INSERT INTO t VALUES (2)")
    assert [r[0] for r in holder.execute("SELECT x FROM t")] == [2]


def test_the_knowledge_store_keeps_a_larger_page_cache(tmp_path: Path) -> None:
    store = SqliteKnowledgeStore(tmp_path / "knowledge.db")
    assert store._conn.execute("PRAGMA cache_size").fetchone()[0] == -65_536  # KiB
    assert connect(tmp_path / "other.db").execute("PRAGMA cache_size").fetchone()[0] == -2000
    store.close()


def test_a_failing_migration_leaves_nothing_half_applied(tmp_path: Path) -> None:
    conn = connect(tmp_path / "x.db")
    bad = Migration(name="t_bad", sql="CREATE TABLE b (x INTEGER);\nINSERT INTO nope VALUES (1);")
    with pytest.raises(Exception, match="nope"):
        apply_migrations(conn, [bad])
    assert applied_migrations(conn) == []
    assert conn.execute("SELECT name FROM sqlite_master WHERE name='b'").fetchone() is None


def test_documents_round_trip_with_chunks_and_sources(open_stack: OpenStack) -> None:
    store = open_stack(None).store
    doc, chunks = make_doc("guide.md", ["投影仪保修期为12个月。", "Warranty is one year."])
    rowids = store.upsert_document(doc, chunks, vectors_for(chunks))
    assert store.get_document_state("guide.md") == (doc.content_hash, doc.tenant_id)
    assert store.chunks_by_rowids(list(reversed(rowids))) == list(reversed(chunks))
    assert [s.chunk for s in store.iter_chunks()] == chunks
    assert store.count_documents() == 1
    assert store.count_chunks() == 2
    assert store.count_vectors("default") == 2
    [info] = store.sources()
    assert (info.source, info.chunks, info.documents, info.doc_type) == (
        "guide.md",
        2,
        1,
        "markdown",
    )
    store.close()


def test_upsert_replaces_the_chunks_of_a_document(open_stack: OpenStack) -> None:
    store = open_stack(None).store
    doc, chunks = make_doc("a", ["one", "two", "three"])
    old = store.upsert_document(doc, chunks, vectors_for(chunks))
    doc2, chunks2 = make_doc("a", ["uno"])
    new = store.upsert_document(doc2, chunks2, vectors_for(chunks2))
    assert not set(old) & set(new)
    assert store.chunks_by_rowids(old) == []
    assert [c.text for c in store.chunks_by_rowids(new)] == ["uno"]
    assert store.count_vectors() == 1
    store.close()


def test_deleting_a_document_cascades_to_chunks_and_vectors(open_stack: OpenStack) -> None:
    store = open_stack(None).store
    for name in ("a", "b"):
        doc, chunks = make_doc(name, [f"{name} text", f"{name} more"])
        store.upsert_document(doc, chunks, vectors_for(chunks))
    assert store.delete_document("a") is True
    assert store.delete_document("a") is False
    assert store.count_chunks() == 2
    assert store.count_vectors() == 2
    assert {c.chunk.doc_id for c in store.iter_chunks()} == {"b"}
    store.close()


def test_deleting_a_source_removes_all_its_records(open_stack: OpenStack) -> None:
    store = open_stack(None).store
    for key in ("1", "2", "3"):
        doc, chunks = make_doc(f"products.csv#{key}", [f"row {key}"], source="products.csv")
        store.upsert_document(doc, chunks)
    doc, chunks = make_doc("other.md", ["other"])
    store.upsert_document(doc, chunks)
    assert store.delete_source("products.csv") == 3
    assert [s.source for s in store.sources()] == ["other.md"]
    store.close()


def test_allowed_rowids_follow_tenant_and_tags(open_stack: OpenStack) -> None:
    store = open_stack(None).store
    [public] = store.upsert_document(*make_doc("pub", ["p"]))
    [sales] = store.upsert_document(*make_doc("sales", ["s"], tags=("sales", "exec")))
    [other] = store.upsert_document(*make_doc("other", ["o"], tenant="acme"))
    assert store.allowed_rowids(Scope(tenant_id="default")).tolist() == [public]
    assert store.allowed_rowids(Scope(roles=["exec"])).tolist() == [public, sales]
    assert store.allowed_rowids(Scope(roles=["admin"])).tolist() == [public, sales]
    assert store.allowed_rowids(Scope(tenant_id="acme", roles=["system"])).tolist() == [other]
    assert store.allowed_rowids(Scope(roles=["exec"], doc_types=["pdf"])).tolist() == []
    assert store.allowed_rowids(Scope(roles=["exec"], sources=["sales"])).tolist() == [sales]
    store.close()


def test_a_crash_after_commit_is_replayed_from_the_outbox_on_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kb = open_kb(tmp_path)
    doc, chunks = make_doc("first", ["the lamp overheats with error E-203"])
    kb.store.upsert_document(doc, chunks, vectors_for(chunks))

    def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError("power cut")

    monkeypatch.setattr(TantivyKeywordIndex, "apply", crash)
    monkeypatch.setattr(VectorIndexes, "apply", crash)
    doc, chunks = make_doc("second", ["保修期为12个月", "退货需在7天内"])
    with pytest.raises(RuntimeError, match="power cut"):
        kb.store.upsert_document(doc, chunks, vectors_for(chunks))
    assert kb.store.pending_changes()  # committed in SQLite, not yet in the indexes
    monkeypatch.undo()
    kb.keyword.close()  # the process dies: nothing else is flushed
    kb.store._conn.close()

    kb = open_kb(tmp_path)
    assert kb.store.pending_changes() == []
    assert_indexes_agree(kb)
    assert kb.keyword.num_docs() == 3
    assert [h.chunk.doc_id for h in kb.retriever.search("保修期", mode="keyword")] == ["second"]
    kb.close()


def test_a_deleted_keyword_index_is_rebuilt_from_sqlite(tmp_path: Path) -> None:
    kb = open_kb(tmp_path)
    for name in ("a", "b"):
        doc, chunks = make_doc(name, [f"{name} warranty text", "shared words"])
        kb.store.upsert_document(doc, chunks, vectors_for(chunks))
    kb.close()
    shutil.rmtree(tmp_path / "index" / "keyword")
    kb = open_kb(tmp_path)
    assert_indexes_agree(kb)
    assert kb.keyword.num_docs() == 4
    kb.close()


def test_an_index_with_a_stale_generation_is_rebuilt(tmp_path: Path) -> None:
    kb = open_kb(tmp_path)
    doc, chunks = make_doc("a", ["alpha"])
    kb.store.upsert_document(doc, chunks, vectors_for(chunks))
    kb.close()
    # An old copy of the index comes back: it claims a generation the outbox cannot bridge.
    state = tmp_path / "index" / "keyword" / "shelfhand-state.json"
    schema = json.loads(state.read_text(encoding="utf-8"))["schema"]
    state.write_text(json.dumps({"generation": 99, "schema": schema}), encoding="utf-8")
    kb = open_kb(tmp_path)
    assert kb.keyword.durable_generation() == kb.store.generation
    assert_indexes_agree(kb)
    kb.close()
