"""The knowledge store under test: every test that takes ``open_stack`` runs on each of
``STORE_KINDS``: the embedded store (SQLite + tantivy + faiss in a tmp workspace), the
PostgreSQL store (a fresh database on the session's server, see ``pg_url`` in
tests/conftest.py), and each of them with the Qdrant index (Qdrant Edge in the workspace)
serving the searches instead (``qdrant-edge``: SQLite records; ``pg-qdrant``: PostgreSQL)."""

from __future__ import annotations

import contextlib
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
    same workspace or database)."""
    opened: list[EmbeddedKnowledge] = []
    workspace = tmp_path_factory.mktemp("ws")

    def open_(router: EmbeddingRouter | None, **options: Any) -> EmbeddedKnowledge:
        if store_kind in ("pg", "pg-qdrant"):
            from shelfhand.knowledge.stack import open_pg_store

            url = request.getfixturevalue("pg_url")
            if store_kind == "pg-qdrant":
                options["qdrant_url"] = str(workspace / "qdrant")
            stack = open_pg_store(url, router, **options)
        elif store_kind == "qdrant-edge":
            options.pop("hnsw_threshold", None)  # (the faiss index's)
            qdrant = str(workspace / "qdrant")
            stack = open_embedded_store(workspace, router, qdrant_url=qdrant, **options)
        else:
            stack = open_embedded_store(workspace, router, **options)
        opened.append(stack)
        return stack

    yield open_
    for stack in opened:
        with contextlib.suppress(Exception):  # already closed by the test
            stack.close()
