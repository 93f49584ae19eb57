"""Rows of the stores as values: a stored chunk row as a :class:`~shelfhand.knowledge.types.Chunk`.

Both stores select a chunk's columns in one order, its rowid first (``CHUNK_COLUMNS`` of
:mod:`~shelfhand.knowledge.stores.sqlite_reads` and :mod:`~shelfhand.knowledge.stores.pg.reads`);
they differ only in how a list column is kept: JSON text in SQLite, an array in PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from shelfhand.knowledge.types import Chunk

__all__ = ["CHUNK_FIELDS", "chunk_from_row"]

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
