"""The Qdrant index as a user meets it: a knowledge base with ``qdrant_url`` (Qdrant Edge in
process; qdrant-client for a server), its start-up checks and outage errors, a rebuild from the
store, and two tenants searching at once. The shared store behaviour is tested on it through
``open_stack`` (conftest.py), filtered search by test_qdrant_property.py."""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from shelfhand.app import App
from shelfhand.core.context import UserContext
from shelfhand.core.errors import ConfigurationError, DependencyUnavailableError
from shelfhand.core.settings import Settings
from shelfhand.knowledge import KnowledgeBase
from shelfhand.knowledge.stores.qdrant import QdrantKeywordSearch, open_backend
from shelfhand.knowledge.stores.qdrant.model import (
    FILTER_FIELDS,
    KEYWORD,
    LOOKUP_FIELDS,
    TERMS,
    PointFilter,
)
from shelfhand.knowledge.stores.qdrant.server import ServerBackend
from shelfhand.knowledge.types import Document, Section
from shelfhand.testing import hashing_router

pytest.importorskip("qdrant_edge")


def doc(doc_id: str, title: str, *texts: str, tenant: str = "acme") -> Document:
    sections = tuple(Section(text=t, section_path=(title,)) for t in texts)
    body = "".join(texts)
    return Document(
        doc_id=doc_id,
        source=doc_id,
        title=title,
        doc_type="markdown",
        sections=sections,
        content_hash=hashlib.sha256(body.encode()).hexdigest(),
        tenant_id=tenant,
    )


CORPUS = [
    doc("faults.md", "Fault codes", "E-203 means the lamp is overheating; clean the filter."),
    doc("fan.md", "Fan", "The fan runs faster when the lamp is hot; E-204 is a fan fault."),
    doc("bridge.md", "桥梁", "长江大桥是一座公路铁路两用桥。", "南京的长江大桥建成于 1968 年。"),
    doc("river.md", "河流", "长江是中国最长的河流，大桥很多。"),
    doc("other.md", "Fault codes", "E-203 at globex means something else.", tenant="globex"),
]
ACME = UserContext(tenant_id="acme", user_id="u1")
GLOBEX = UserContext(tenant_id="globex", user_id="u2")


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    base = KnowledgeBase(tmp_path / "ws", hashing_router(), qdrant_url=str(tmp_path / "qdrant"))
    base.ingest_documents(CORPUS)
    yield base
    base.close()


def test_an_identifier_and_a_chinese_phrase_are_found_first(kb: KnowledgeBase) -> None:
    assert kb.search("What does E-203 mean?", k=3, user=ACME)[0].chunk.doc_id == "faults.md"
    assert kb.search("长江大桥", k=3, user=ACME)[0].chunk.doc_id == "bridge.md"


def test_a_tenant_never_sees_another_tenants_chunks(kb: KnowledgeBase) -> None:
    hits = kb.search("E-203", k=10, user=GLOBEX)
    assert [h.chunk.doc_id for h in hits] == ["other.md"]


def test_two_tenants_searching_at_once_each_get_only_their_own(kb: KnowledgeBase) -> None:
    found: dict[str, set[str]] = {"acme": set(), "globex": set()}
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def search(user: UserContext) -> None:
        try:
            start.wait(timeout=10)
            for _ in range(20):
                for hit in kb.search("E-203 lamp filter", k=5, user=user):
                    found[user.tenant_id].add(hit.chunk.tenant_id)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=search, args=(u,)) for u in (ACME, GLOBEX, ACME, GLOBEX)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert found == {"acme": {"acme"}, "globex": {"globex"}}


def test_a_deleted_document_leaves_the_index(kb: KnowledgeBase) -> None:
    kb._stack.store.delete_document("faults.md")
    assert all(h.chunk.doc_id != "faults.md" for h in kb.search("E-203", k=5, user=ACME))


def test_a_lost_qdrant_folder_is_rebuilt_from_the_store(tmp_path: Path) -> None:
    base = KnowledgeBase(tmp_path / "ws", hashing_router(), qdrant_url=str(tmp_path / "q"))
    base.ingest_documents(CORPUS)
    base.close()
    shutil.rmtree(tmp_path / "q")
    again = KnowledgeBase(tmp_path / "ws", hashing_router(), qdrant_url=str(tmp_path / "q"))
    try:
        assert again.search("长江大桥", k=1, user=ACME)[0].chunk.doc_id == "bridge.md"
        assert again._stack.vectors.count() == again.count_chunks() == 6
    finally:
        again.close()


def test_the_setting_puts_the_app_s_search_on_qdrant(tmp_path: Path) -> None:
    settings = Settings(workspace=tmp_path / "ws", qdrant_url=str(tmp_path / "q"))
    app = App(settings)
    assert "search on qdrant" in app.knowledge_store()
    kb = app.open_knowledge(embed=False)
    try:
        assert isinstance(kb._stack.keyword, QdrantKeywordSearch)
    finally:
        kb.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_qdrant_server_fails_at_start_up_with_the_fix() -> None:
    with pytest.raises(ConfigurationError, match="SHELFHAND_QDRANT_URL"):
        open_backend(f"http://127.0.0.1:{_free_port()}", timeout=1)


def test_a_url_of_another_scheme_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="http"):
        open_backend("ftp://example.com/q")


class _Qdrant(BaseHTTPRequestHandler):
    """Answers what qdrant-client asks when it connects: the version and that the collection
    exists (the searches of this test run only after the server is gone)."""

    def do_GET(self) -> None:
        if self.path.endswith("/exists"):
            body = {"result": {"exists": True}, "status": "ok", "time": 0.0}
        else:
            body = {"title": "qdrant", "version": "1.16.0"}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def test_a_qdrant_outage_is_a_dependency_error_with_the_reason_never_stale_hits() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Qdrant)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    backend = open_backend(f"http://127.0.0.1:{server.server_address[1]}", timeout=1)
    server.shutdown()
    server.server_close()
    with pytest.raises(DependencyUnavailableError, match=r"Qdrant at http://127\.0\.0\.1") as info:
        backend.count(PointFilter())
    assert info.value.dependency == "qdrant"


def test_a_write_by_a_process_without_qdrant_is_searchable_through_one_with_it(
    tmp_path: Path, pg_url: str
) -> None:
    # a replica with the Qdrant index, and a process writing PostgreSQL only (an ingest worker)
    replica = KnowledgeBase(
        tmp_path / "a", None, database_url=pg_url, qdrant_url=str(tmp_path / "q")
    )
    worker = KnowledgeBase(tmp_path / "b", None, database_url=pg_url)
    try:
        worker.ingest_documents(CORPUS)
        assert replica.search("长江大桥", k=1, user=ACME)[0].chunk.doc_id == "bridge.md"
        worker._stack.store.delete_document("bridge.md")
        assert all(h.chunk.doc_id != "bridge.md" for h in replica.search("长江大桥", user=ACME))
    finally:
        worker.close()
        replica.close()


def test_searches_find_the_same_after_the_engine_optimizes(kb: KnowledgeBase) -> None:
    before = [h.chunk.chunk_id for h in kb.search("长江大桥 E-203", k=4, user=ACME)]
    keyword = kb._stack.keyword
    assert isinstance(keyword, QdrantKeywordSearch)
    keyword.index.optimize()
    assert [h.chunk.chunk_id for h in kb.search("长江大桥 E-203", k=4, user=ACME)] == before


def test_a_qdrant_index_built_from_another_store_is_rebuilt_not_searched(tmp_path: Path) -> None:
    shared = str(tmp_path / "q")  # the setting left pointing at the first store's index
    first = KnowledgeBase(tmp_path / "one", None, qdrant_url=shared)
    first.ingest_documents(CORPUS)
    first.close()
    other = KnowledgeBase(tmp_path / "two", None, qdrant_url=shared)
    try:
        assert other.search("长江大桥", k=3, user=ACME) == []
        keyword = other._stack.keyword
        assert isinstance(keyword, QdrantKeywordSearch) and keyword.num_docs() == 0
    finally:
        other.close()


def test_only_the_fields_that_filter_a_dense_search_are_linked_into_the_hnsw_graph(
    tmp_path: Path,
) -> None:
    backend = open_backend(str(tmp_path / "shard"))
    schema = backend._shard.info().payload_schema  # type: ignore[attr-defined]
    for name in (*LOOKUP_FIELDS, TERMS):  # identifiers, document ids, BM25 terms: lookups only
        assert schema[name].params.enable_hnsw is False
    for name in (*FILTER_FIELDS, "tenant"):  # a scope's filter keeps the graph's shortcuts
        assert schema[name].params is None or schema[name].params.enable_hnsw is not False
    assert schema["tenant"].params.is_tenant is True


@pytest.mark.parametrize("schema", [1, 2])
def test_an_index_of_an_older_layout_is_rebuilt(tmp_path: Path, schema: int) -> None:
    """1: the terms as a text field each; 2: Qdrant's IDF modifier (every tenant's counts)."""
    base = KnowledgeBase(tmp_path / "ws", hashing_router(), qdrant_url=str(tmp_path / "q"))
    base.ingest_documents(CORPUS)
    base.close()
    old = open_backend(str(tmp_path / "q"))  # as an older layout left it: its schema number
    meta = old.meta() or {}
    old.set_meta({**meta, "schema": schema})
    old.close()
    again = KnowledgeBase(tmp_path / "ws", hashing_router(), qdrant_url=str(tmp_path / "q"))
    try:
        keyword = again._stack.keyword
        assert isinstance(keyword, QdrantKeywordSearch)
        assert (keyword.index.backend.meta() or {})["schema"] == 3
        assert again.search("长江大桥", k=1, user=ACME)[0].chunk.doc_id == "bridge.md"
        # document frequencies are counts over the text field: 长江 is in both chunks of
        # bridge.md and in river.md; a token no chunk holds counts 0
        n, dfs = keyword.doc_freqs(["长江", "e-203", "nothing-like-this"])
        assert n == 6 and dfs[0] == 3 and dfs[2] == 0
    finally:
        again.close()


def test_a_rebuild_keeps_the_collections_shards_and_replication(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a cluster the collection is created by its operator (shards, replication); a rebuild
    (an older layout, another store) creates it anew with the same settings. qdrant-client's
    local mode keeps no shard settings, so the server's answer is given here."""
    backend = ServerBackend(":memory:", collection="layout")
    client = backend._client
    real_get, real_create = client.get_collection, client.create_collection
    created: list[dict[str, Any]] = []

    def get(name: str) -> Any:
        info = real_get(name)
        info.config.params.shard_number = 6
        info.config.params.replication_factor = 2
        return info

    def create(name: str, **kw: Any) -> Any:
        created.append(kw)
        return real_create(name, **kw)

    monkeypatch.setattr(client, "get_collection", get)
    monkeypatch.setattr(client, "create_collection", create)
    backend.clear()
    assert created[-1]["shard_number"] == 6 and created[-1]["replication_factor"] == 2
    assert "write_consistency_factor" not in created[-1]  # (not set: the server's default)
    assert created[-1]["sparse_vectors_config"][KEYWORD].modifier is None  # the query's IDF
    backend.close()
