"""Random documents and callers for the property tests of filtered search (tantivy + faiss
in tests/knowledge/test_filter_property.py, Qdrant in tests/knowledge/test_qdrant_property.py),
the permission rule written out plainly, and how two rankings are compared."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
from hypothesis import strategies as st

from shelfhand.knowledge.protocols import KnowledgeStore
from shelfhand.knowledge.types import Chunk, Document, Scope, Section

TENANTS = ["default", "acme", "globex"]
ROLES = ["sales", "support", "hr", "admin", "system"]
TAGS = ["sales", "support", "hr", "legal"]
DOC_TYPES = ["text", "pdf", "md"]
SOURCES = ["a.md", "b.pdf", "c.txt", "d.html"]
WORDS = ["lamp", "warranty", "price", "filter", "fan", "保修", "退货", "价格", "E-203"]
DIM = 8
SPACE = "default"


def may_read(spec: dict[str, Any], caller: dict[str, Any]) -> bool:
    """The rule written out plainly, independent of the implementation."""
    if spec["tenant"] != caller["tenant"]:
        return False
    if caller["doc_types"] is not None and spec["doc_type"] not in caller["doc_types"]:
        return False
    if caller["sources"] is not None and spec["source"] not in caller["sources"]:
        return False
    if {"admin", "system"} & set(caller["roles"]):
        return True
    return not spec["tags"] or bool(set(spec["tags"]) & set(caller["roles"]))


def scope_of(caller: dict[str, Any]) -> Scope:
    return Scope(
        tenant_id=caller["tenant"],
        roles=caller["roles"],
        doc_types=caller["doc_types"],
        sources=caller["sources"],
    )


doc_specs = st.lists(
    st.fixed_dictionaries(
        {
            "tenant": st.sampled_from(TENANTS),
            "tags": st.lists(st.sampled_from(TAGS), max_size=2, unique=True),
            "doc_type": st.sampled_from(DOC_TYPES),
            "source": st.sampled_from(SOURCES),
            "chunks": st.lists(
                st.lists(st.sampled_from(WORDS), min_size=1, max_size=5), min_size=1, max_size=3
            ),
        }
    ),
    min_size=1,
    max_size=14,
)
callers = st.fixed_dictionaries(
    {
        "tenant": st.sampled_from(TENANTS),
        "roles": st.lists(st.sampled_from(ROLES), max_size=2, unique=True),
        "doc_types": st.none() | st.lists(st.sampled_from(DOC_TYPES), max_size=2, unique=True),
        "sources": st.none() | st.lists(st.sampled_from(SOURCES), min_size=1, max_size=3),
    }
)


def load_specs(
    store: KnowledgeStore, specs: list[dict[str, Any]], seed: int, run: int
) -> dict[int, dict[str, Any]]:
    """Replace the store's content with ``specs`` (documents ``r<run>-d<i>``, a random unit
    vector per chunk); per rowid its spec and vector."""
    rng = np.random.default_rng(seed)
    rows: dict[int, dict[str, Any]] = {}
    with store.deferred_sync():  # one commit of the indexes per example
        for source in store.all_sources():
            store.delete_source(source)
        for i, spec in enumerate(specs):
            doc_id = f"r{run}-d{i}"
            texts = [" ".join(words) for words in spec["chunks"]]
            chunks = [
                Chunk(
                    chunk_id=f"{doc_id}::{j}",
                    doc_id=doc_id,
                    chunk_index=j,
                    text=text,
                    title="",
                    section_path=(),
                    page=None,
                    source=spec["source"],
                    start=0,
                    end=len(text),
                    content_hash=hashlib.sha256(text.encode()).hexdigest(),
                    doc_type=spec["doc_type"],
                    permission_tags=tuple(spec["tags"]),
                    tenant_id=spec["tenant"],
                )
                for j, text in enumerate(texts)
            ]
            doc = Document(
                doc_id=doc_id,
                source=spec["source"],
                title="",
                doc_type=spec["doc_type"],
                sections=(Section(text="\n".join(texts)),),
                content_hash=hashlib.sha256("\n".join(texts).encode()).hexdigest(),
                permission_tags=tuple(spec["tags"]),
                tenant_id=spec["tenant"],
            )
            vectors = rng.standard_normal((len(chunks), DIM)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            rowids = store.upsert_document(
                doc, chunks, {SPACE: (list(range(len(chunks))), vectors)}
            )
            for rowid, vector in zip(rowids, vectors, strict=True):
                rows[rowid] = {**spec, "vector": vector}
    return rows


def same_ranking(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> None:
    """Equal up to the order of equal scores: the same scores, and the same chunks above the
    last score (a tie at the cut may be broken either way, but only among tied chunks)."""
    assert [round(s, 4) for _, s in got] == [round(s, 4) for _, s in want], (got, want)
    if want:
        cut = round(want[-1][1], 4)
        assert {r for r, s in got if round(s, 4) > cut} == {r for r, s in want if round(s, 4) > cut}
        tied = {r for r, s in want if round(s, 4) == cut}
        tied |= {r for r, s in got if round(s, 4) == cut}
        assert len(got) == len({r for r, _ in got})
        assert all(r in tied for r, s in got if round(s, 4) == cut)
