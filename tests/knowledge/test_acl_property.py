"""Property: whatever the documents and the caller, every hit is one the caller may read (on
both stores)."""

from __future__ import annotations

import hashlib
import itertools
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shelfhand.core.context import UserContext
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.knowledge.stack import EmbeddedKnowledge, open_embedded_store
from shelfhand.knowledge.types import Document, Section

TENANTS = ["default", "acme", "globex"]
ROLES = ["sales", "support", "hr", "admin", "system"]
TAGS = ["sales", "support", "hr", "legal"]
WORDS = ["lamp", "warranty", "price", "保修", "退货", "E-203", "fan", "filter"]


class WordEmbedder:
    @property
    def name(self) -> str:
        return "words"

    @property
    def dim(self) -> int:
        return 16

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.full((len(texts), 16), 0.01, dtype=np.float32)
        for i, text in enumerate(texts):
            for j, word in enumerate(WORDS):
                if word in text:
                    out[i, j] += 1
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]


def reference_may_read(tenant: str, tags: Sequence[str], user: UserContext) -> bool:
    """The rule written out plainly, independent of the implementation."""
    if tenant != user.tenant_id:
        return False
    if "admin" in user.roles or "system" in user.roles:
        return True
    return len(tags) == 0 or any(t in user.roles for t in tags)


doc_specs = st.lists(
    st.tuples(
        st.sampled_from(TENANTS),
        st.lists(st.sampled_from(TAGS), max_size=2, unique=True),
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
    ),
    min_size=1,
    max_size=12,
)
callers = st.builds(
    lambda tenant, roles: UserContext(tenant_id=tenant, user_id="u", roles=roles),
    st.sampled_from(TENANTS),
    st.lists(st.sampled_from(ROLES), max_size=2, unique=True),
)

_counter = itertools.count()


@pytest.fixture(scope="module", params=["embedded", "pg"])
def kb(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EmbeddedKnowledge]:
    """Both stores (the PostgreSQL one on a database of this module)."""
    router = EmbeddingRouter({"default": WordEmbedder()})
    if request.param == "pg":
        from shelfhand.knowledge.stack import open_pg_store

        server = request.getfixturevalue("pg_server")
        name = f"acl_{uuid.uuid4().hex[:12]}"
        kb = open_pg_store(server.create_database(name), router)
        yield kb
        kb.close()
        server.drop_database(name)
        return
    workspace: Path = tmp_path_factory.mktemp("acl")
    kb = open_embedded_store(workspace, router)
    yield kb
    kb.close()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(specs=doc_specs, user=callers, query=st.sampled_from(WORDS))
def test_no_mode_ever_returns_a_chunk_the_caller_may_not_read(
    kb: EmbeddedKnowledge,
    specs: list[tuple[str, list[str], list[str]]],
    user: UserContext,
    query: str,
) -> None:
    # Each example replaces the whole corpus, so the store is reused but never stale.
    for source in kb.store.all_sources():
        kb.store.delete_source(source)
    run = next(_counter)
    docs = []
    truth: dict[str, tuple[str, tuple[str, ...]]] = {}
    for i, (tenant, tags, words) in enumerate(specs):
        text = " ".join(words) + f" doc{run}x{i}"
        doc_id = f"r{run}-d{i}"
        truth[doc_id] = (tenant, tuple(tags))
        docs.append(
            Document(
                doc_id=doc_id,
                source=doc_id,
                title="",
                doc_type="text",
                sections=(Section(text=text),),
                content_hash=hashlib.sha256(text.encode("utf-8")).hexdigest(),
                permission_tags=tuple(tags),
                tenant_id=tenant,
            )
        )
    kb.ingestor.ingest_documents(docs)
    readable = {d for d, (tenant, tags) in truth.items() if reference_may_read(tenant, tags, user)}
    for mode in ("keyword", "vector", "hybrid"):
        hits = kb.retriever.search(query, k=8, user=user, mode=mode)  # type: ignore[arg-type]
        got = {h.chunk.doc_id for h in hits}
        assert got <= readable, (mode, got - readable)
        if mode == "vector":
            # Vectors rank everything: a caller sees all readable docs, up to k.
            assert len(got) == min(8, len(readable))
