"""Knowledge bases over the bundled sample documents, as the agent and service tests use them,
and ready-made documents."""

from __future__ import annotations

import hashlib
from pathlib import Path

from shelfhand.knowledge import KnowledgeBase, sample_corpus
from shelfhand.knowledge.types import Document, Section
from shelfhand.testing import hashing_router


def text_document(
    doc_id: str, text: str, *, title: str = "", tenant_id: str = "default"
) -> Document:
    """A ready-made Markdown document of one section, ``doc_id`` also its source, hashed
    from ``text`` (for ``ingest_documents``)."""
    return Document(
        doc_id=doc_id,
        source=doc_id,
        title=title,
        doc_type="markdown",
        sections=(Section(text=text),),
        content_hash=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        tenant_id=tenant_id,
    )


def sample_kb(
    folder: Path,
    *,
    vectors: bool = True,
    tenant_id: str = "acme",
    hr_text: str | None = None,
) -> KnowledgeBase:
    """A knowledge base in ``folder / "ws"`` holding the sample documents for ``tenant_id``
    (with hashing vectors, or keyword-only when ``vectors`` is false); with ``hr_text`` also
    ``hr/salaries.md`` (``# Salaries`` + that text) readable only by the ``hr`` role.
    Close it (or use it as a context manager) when done."""
    base = KnowledgeBase(folder / "ws", hashing_router() if vectors else None)
    try:
        base.ingest([sample_corpus()], tenant_id=tenant_id)
        if hr_text is not None:
            hr = folder / "hr"
            hr.mkdir()
            (hr / "salaries.md").write_text(f"# Salaries\n\n{hr_text}", encoding="utf-8")
            base.ingest([hr], tenant_id=tenant_id, permission_tags=["hr"])
    except BaseException:
        base.close()
        raise
    return base
