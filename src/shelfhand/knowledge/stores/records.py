"""What the two systems of record share: how a stored chunk row becomes a value, and that a
document is upserted as a source of one.

Both stores select a chunk's columns in one order, its rowid first (``CHUNK_COLUMNS`` of
:mod:`~shelfhand.knowledge.stores.sqlite_reads` and :mod:`~shelfhand.knowledge.stores.pg.reads`),
and differ only in how a list column is kept: JSON text in SQLite, an array in PostgreSQL
(:func:`chunk_from_row`). Each implements :meth:`~ReplacesSources.replace_source` in one
transaction of its own; :meth:`~ReplacesSources.upsert_document` is that with one document,
the others of its source kept.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from shelfhand.knowledge.protocols import DocVectors, SourceItem
from shelfhand.knowledge.types import Chunk, Document

__all__ = ["CHUNK_FIELDS", "ReplacesSources", "chunk_from_row"]

CHUNK_FIELDS = (
    "chunk_id",
    "doc_id",
    "chunk_index",
    "text",
    "title",
    "section_path",
    "page",
    "source",
    "start",
    "end",
    "content_hash",
    "doc_type",
    "permission_tags",
    "tenant_id",
    "updated_at",
)
"""The :class:`Chunk` fields, in the order the stores select their columns (after the rowid)."""
_LISTS = ("section_path", "permission_tags")


def chunk_from_row(row: Sequence[Any], as_tuple: Callable[[Any], tuple[Any, ...]]) -> Chunk:
    """The chunk of ``row`` (``rowid`` then the columns of :data:`CHUNK_FIELDS`);
    ``as_tuple`` reads a stored list column (section path, permission tags)."""
    values = dict(zip(CHUNK_FIELDS, row[1:], strict=True))
    for name in _LISTS:
        values[name] = as_tuple(values[name])
    return Chunk(**values)


class ReplacesSources(ABC):
    """A store whose writes of a source's documents are one transaction."""

    @abstractmethod
    def replace_source(
        self,
        source: str,
        source_hash: str | None,
        items: Sequence[SourceItem],
        *,
        embed_state: str | None = None,
        embed_error: str | None = None,
        remove_others: bool = True,
        space_models: Mapping[str, tuple[str, int]] | None = None,
    ) -> list[list[int]]:
        """Replace everything stored for a source (a file: one document, or CSV records) at
        once, in one transaction.

        Args:
            source: The source.
            source_hash: The file hash, recorded for incremental ingest when given.
            items: Each document with its chunks and their vectors (or ``None``).
            embed_state: ``"embedded"``, ``"embedding_failed"`` or ``"none"``; inferred from
                each item's vectors when omitted.
            embed_error: Why embedding failed, for reports.
            remove_others: Remove the documents of ``source`` that are not in ``items``.
            space_models: Per vector space, ``(model, dim)`` it must hold (checked, or
                recorded for a new space).

        Returns:
            Per item, the rowids given to its chunks, in order.
        """

    def upsert_document(
        self,
        doc: Document,
        chunks: Sequence[Chunk],
        vectors: DocVectors | None = None,
        *,
        embed_state: str | None = None,
        embed_error: str | None = None,
    ) -> list[int]:
        """Replace a document and its chunks (and vectors) in one transaction.

        Args:
            doc: The document; an existing one with the same ``doc_id`` is replaced.
            chunks: Its chunks, in order.
            vectors: Per vector space, ``(positions, matrix)``: row ``j`` of ``matrix`` is the
                vector of ``chunks[positions[j]]``.
            embed_state: ``"embedded"``, ``"embedding_failed"`` or ``"none"``; inferred from
                ``vectors`` when omitted.
            embed_error: Why embedding failed, for reports.

        Returns:
            The rowids given to the chunks, in order.
        """
        return self.replace_source(
            doc.source,
            None,
            [(doc, chunks, vectors)],
            embed_state=embed_state,
            embed_error=embed_error,
            remove_others=False,
        )[0]
