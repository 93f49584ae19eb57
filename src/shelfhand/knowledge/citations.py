"""Numbered evidence: search hits → ``[1] …`` passages and structured citations (DESIGN R9)."""

from __future__ import annotations

from collections.abc import Sequence

from shelfhand.core.messages import Citation
from shelfhand.knowledge.types import SearchHit

NOTHING_FOUND = (
    "No relevant passages were found in the knowledge base. Tell the user the documents do not "
    "cover this instead of guessing."
)


def to_citations(hits: Sequence[SearchHit], *, start: int = 1) -> list[Citation]:
    """One citation per hit, numbered from ``start``."""
    return [
        Citation(
            index=start + i,
            source=h.chunk.source,
            title=h.chunk.title,
            section=h.chunk.section,
            page=h.chunk.page,
            doc_id=h.chunk.doc_id,
            chunk_id=h.chunk.chunk_id,
            text=h.chunk.text,
            score=h.score,
        )
        for i, h in enumerate(hits)
    ]


def label(c: Citation) -> str:
    """``title › section (source, p. 3)`` — how a citation is shown to people and models."""
    where = c.title or c.source
    section = c.section
    if c.title and section.startswith(c.title):
        section = section[len(c.title) :].lstrip(" >")
    if section:
        where += f" › {section}"
    origin = c.source
    if c.page is not None:
        origin += f", p. {c.page}"
    return f"{where} ({origin})"


def format_passages(citations: Sequence[Citation], *, max_chars: int = 1200) -> str:
    """The numbered passages as the model (or a person) reads them."""
    if not citations:
        return NOTHING_FOUND
    blocks = []
    for c in citations:
        text = c.text if len(c.text) <= max_chars else c.text[:max_chars].rstrip() + " …"
        blocks.append(f"[{c.index}] {label(c)}\n{text}")
    return "\n\n".join(blocks)
