"""The embedded store (SQLite) with its searches on Qdrant, while Qdrant is down: writes and
ingests succeed into the record and the outbox, searches fail with Qdrant's reason (the
service's 503), and once Qdrant is back the pending changes are applied before the next search
answers, never stale hits. Qdrant here is Qdrant Edge behind a switch that makes every call
fail as an unreachable server does, and qdrant-client against a server that has gone away."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from test_qdrant import ACME, CORPUS, GLOBEX, _Qdrant

from shelfhand.core.context import UserContext
from shelfhand.core.errors import DependencyUnavailableError
from shelfhand.knowledge import KnowledgeBase
from shelfhand.knowledge.stores.qdrant import QdrantKeywordSearch, open_backend
from shelfhand.knowledge.stores.qdrant.index import QdrantIndex

pytest.importorskip("qdrant_edge")


class Switch:
    """A backend that fails every call while ``down``, as an unreachable server does (but
    ``close``, which a client does locally)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.down = False
        self.location = inner.location

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr) or name == "close":
            return attr

        def call(*args: Any, **kw: Any) -> Any:
            if self.down:
                raise DependencyUnavailableError(
                    f"Qdrant at {self.location} cannot answer: connection refused",
                    dependency="qdrant",
                )
            return attr(*args, **kw)

        return call


def index_of(kb: KnowledgeBase) -> QdrantIndex:
    keyword = kb._stack.keyword
    assert isinstance(keyword, QdrantKeywordSearch)
    return keyword.index


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[tuple[KnowledgeBase, Switch]]:
    base = KnowledgeBase(tmp_path / "ws", None, qdrant_url=str(tmp_path / "q"))
    index = index_of(base)
    switch = Switch(index.backend)
    index.backend = switch  # type: ignore[assignment]
    yield base, switch
    switch.down = False
    base.close()


def pending(kb: KnowledgeBase) -> int:
    return len(kb._stack.store.pending_changes())  # type: ignore[attr-defined]


def test_writes_while_qdrant_is_down_are_kept_and_searched_once_it_is_back(
    kb: tuple[KnowledgeBase, Switch],
) -> None:
    base, qdrant = kb
    base.ingest_documents(CORPUS[:2])
    qdrant.down = True
    report = base.ingest_documents(CORPUS[2:])  # the record and the outbox take it
    assert len(report.added) == 3 and pending(base) > 0
    base.forget("fan.md")
    with pytest.raises(DependencyUnavailableError, match=r"Qdrant at .* cannot answer"):
        base.search("长江大桥", k=3, user=ACME)
    with pytest.raises(DependencyUnavailableError):
        base.search("E-204 fan", k=3, user=ACME)  # never the stale fan.md
    qdrant.down = False
    assert base.search("长江大桥", k=3, user=ACME)[0].chunk.doc_id == "bridge.md"
    assert all(h.chunk.doc_id != "fan.md" for h in base.search("E-204 fan", k=5, user=ACME))
    assert [h.chunk.doc_id for h in base.search("E-203", k=5, user=GLOBEX)] == ["other.md"]


def test_two_tenants_searching_as_qdrant_returns_each_get_only_their_own_fresh_hits(
    kb: tuple[KnowledgeBase, Switch],
) -> None:
    base, qdrant = kb
    qdrant.down = True
    base.ingest_documents(CORPUS)
    qdrant.down = False
    found: dict[str, list[str]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def search(user: UserContext) -> None:
        try:
            start.wait(timeout=10)
            found[user.tenant_id] = [h.chunk.doc_id for h in base.search("E-203", k=5, user=user)]
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)

    threads = [threading.Thread(target=search, args=(u,)) for u in (ACME, GLOBEX)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors
    assert found == {"acme": ["faults.md"], "globex": ["other.md"]}
    assert pending(base) == 0


def test_a_store_closed_while_qdrant_is_down_replays_the_outbox_on_the_next_open(
    tmp_path: Path,
) -> None:
    base = KnowledgeBase(tmp_path / "ws", None, qdrant_url=str(tmp_path / "q"))
    switch = Switch(index_of(base).backend)
    index_of(base).backend = switch  # type: ignore[assignment]
    switch.down = True
    base.ingest_documents(CORPUS)
    base.close()  # does not raise: the outbox keeps the changes
    again = KnowledgeBase(tmp_path / "ws", None, qdrant_url=str(tmp_path / "q"))
    try:
        assert again.search("长江大桥", k=3, user=ACME)[0].chunk.doc_id == "bridge.md"
        assert pending(again) == 0
    finally:
        again.close()


def test_a_qdrant_server_gone_away_keeps_writes_and_fails_searches_with_its_address(
    kb: tuple[KnowledgeBase, Switch],
) -> None:
    base, _ = kb
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Qdrant)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    gone = open_backend(url, timeout=1)
    server.shutdown()
    server.server_close()
    index = index_of(base)
    edge, index.backend = index.backend, gone
    try:
        base.ingest_documents(CORPUS)  # qdrant-client cannot connect: the outbox keeps it
        assert pending(base) > 0
        with pytest.raises(DependencyUnavailableError, match=r"Qdrant at http://127\.0\.0\.1"):
            base.search("长江大桥", k=3, user=ACME)
    finally:
        index.backend = edge
        gone.close()
    assert base.search("长江大桥", k=3, user=ACME)[0].chunk.doc_id == "bridge.md"
