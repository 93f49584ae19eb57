"""The knowledge store under test: every test that takes ``open_stack`` runs on each of
``STORE_KINDS``: the embedded store (SQLite + tantivy + faiss in a tmp workspace), the
PostgreSQL store (a fresh database on the session's server, see ``pg_url`` in
tests/conftest.py), and each of them with the Qdrant index (Qdrant Edge in the workspace)
serving the searches instead (``qdrant-edge``: SQLite records; ``pg-qdrant``: PostgreSQL)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.knowledge.stack import EmbeddedKnowledge, open_embedded_store

OpenStack = Callable[..., EmbeddedKnowledge]
STORE_KINDS = ["embedded", "pg", "qdrant-edge", "pg-qdrant"]


@pytest.fixture(params=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def open_stack(
    store_kind: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OpenStack]:
    """``open_stack(router, **options)``: the store of this test (opening it again reopens the
    same workspace or database); ``open_stack(router, apart=True)`` opens a second, empty
    store of the same kind (another workspace, another database)."""
    opened: list[EmbeddedKnowledge] = []
    workspace = tmp_path_factory.mktemp("ws")
    databases: list[str] = []

    def open_(
        router: EmbeddingRouter | None, *, apart: bool = False, **options: Any
    ) -> EmbeddedKnowledge:
        where = tmp_path_factory.mktemp("ws") if apart else workspace
        if store_kind in ("pg", "pg-qdrant"):
            from shelfhand.knowledge.stack import open_pg_store

            url = request.getfixturevalue("pg_url")
            if apart:
                name = f"t_{uuid.uuid4().hex[:12]}"
                url = request.getfixturevalue("pg_server").create_database(name)
                databases.append(name)
            if store_kind == "pg-qdrant":
                options["qdrant_url"] = str(where / "qdrant")
            stack = open_pg_store(url, router, **options)
        elif store_kind == "qdrant-edge":
            options.pop("hnsw_threshold", None)  # (the faiss index's)
            qdrant = str(where / "qdrant")
            stack = open_embedded_store(where, router, qdrant_url=qdrant, **options)
        else:
            stack = open_embedded_store(where, router, **options)
        opened.append(stack)
        return stack

    yield open_
    for stack in opened:
        with contextlib.suppress(Exception):  # already closed by the test
            stack.close()
    for name in databases:
        with contextlib.suppress(Exception):
            request.getfixturevalue("pg_server").drop_database(name)
