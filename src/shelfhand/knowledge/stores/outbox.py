"""The index outbox: how document changes reach the derived indexes (docs/design.md R3, R5).

Every write to the store adds outbox rows in the same transaction; after the commit the store
applies them to each attached :class:`DerivedIndex` and deletes them once every index has made
them durable (see :mod:`shelfhand.knowledge.stores.sqlite`). A row has a kind:

- ``doc``: the document was replaced or deleted; ``old_rowids`` were its chunks. An index
  drops the old rowids and re-reads the document's current chunks (and vectors).
- ``chunks``: ``rowids`` were appended to a document that is ingested in batches (a big file
  is committed a few hundred chunks at a time, so its first pages are searchable at once).
- ``vectors``: ``rowids`` got their vectors (phase 2 of ingest embeds pending chunks).

Applying any row is idempotent: indexes always read the current state from the store.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar

__all__ = [
    "ChangeKind",
    "DerivedIndex",
    "IndexChange",
    "OncePerSearch",
    "read_changes",
    "search_start",
    "split_changes",
    "write_change",
]

ChangeKind = Literal["doc", "chunks", "vectors", "bridge"]
"""``vectors``: chunks got their own vectors; ``bridge``: vectors in a bridge space (see
:mod:`~shelfhand.knowledge.embeddings.router`) for chunks that have their own."""
StoreT = TypeVar("StoreT", contravariant=True)
"""The store an index is derived from (:class:`~shelfhand.knowledge.stores.sqlite.SqliteKnowledgeStore`)."""


search_start: ContextVar[float | None] = ContextVar("shelfhand_search_start", default=None)
"""When the running search began (``time.monotonic()``), set by the retriever for the search
(its keyword thread included); ``None`` outside a search (see :class:`OncePerSearch`)."""


class OncePerSearch:
    """A derived index's check for changes other processes committed (``check``: one query to
    the store), run once per search instead of once per side of it.

    A hybrid search asks its index three times (the keyword side, the vector side, the
    exact-identifier step). A check that *began* after the search began saw every write
    committed before the search, so a later call within the same search (:data:`search_start`)
    skips it; concurrent callers of one search wait for the check in flight rather than run
    their own. Outside a search every call checks. A check that fails (the store is down)
    counts for nothing."""

    def __init__(self, check: Callable[[], None]) -> None:
        self._check = check
        self._lock = threading.Lock()
        self._fresh_from = float("-inf")
        """When the last finished check began."""

    def __call__(self) -> None:
        started = search_start.get()
        if started is not None and self._fresh_from >= started:
            return
        with self._lock:
            if started is not None and self._fresh_from >= started:
                return  # a check of this search (or a later one) finished meanwhile
            began = time.monotonic()
            self._check()
            self._fresh_from = max(self._fresh_from, began)


@dataclass(frozen=True, slots=True, kw_only=True)
class IndexChange:
    """One pending outbox row: document ``doc_id`` changed; see the module docstring."""

    outbox_id: int
    generation: int
    doc_id: str
    old_rowids: tuple[int, ...]
    kind: ChangeKind = "doc"
    rowids: tuple[int, ...] = ()


class DerivedIndex(Protocol[StoreT]):
    """A search index rebuilt from, and kept in step with, the store via the outbox."""

    name: str

    def durable_generation(self) -> int | None:
        """Store generation the persisted index reflects; ``None`` when missing or unreadable."""
        ...

    def apply(self, store: StoreT, changes: Sequence[IndexChange]) -> None:
        """Idempotently make the index match the store for the changed documents."""
        ...

    def flush(self, generation: int, *, durable: bool) -> None:
        """Make applied changes searchable; with ``durable`` also persist them."""
        ...

    def rebuild(self, store: StoreT, generation: int) -> None:
        """Recreate the index from the store's current contents and persist it."""
        ...

    def attached(self, store: StoreT) -> None:
        """Called once the store has brought the index up to date on attach."""
        ...

    def close(self) -> None: ...


def split_changes(
    changes: Sequence[IndexChange], kind: ChangeKind
) -> tuple[list[str], set[int], list[int]]:
    """``(replaced doc ids, their old rowids, rowids of kind)``, the last without rowids of
    replaced documents (re-reading those documents covers them)."""
    doc_ids = list(dict.fromkeys(c.doc_id for c in changes if c.kind == "doc"))
    replaced = set(doc_ids)
    old = {r for c in changes if c.kind == "doc" for r in c.old_rowids}
    rowids = [r for c in changes if c.kind == kind and c.doc_id not in replaced for r in c.rowids]
    return doc_ids, old, list(dict.fromkeys(rowids))


def write_change(
    conn: sqlite3.Connection,
    generation: int,
    doc_id: str,
    *,
    old_rowids: Sequence[int] = (),
    kind: ChangeKind = "doc",
    rowids: Sequence[int] = (),
) -> None:
    """Add an outbox row (inside the caller's transaction)."""
    conn.execute(
        "INSERT INTO index_outbox (generation, doc_id, old_rowids, created_at, kind, rowids)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (
            generation,
            doc_id,
            json.dumps(list(old_rowids)),
            time.time(),
            kind,
            json.dumps(list(rowids)),
        ),
    )


def read_changes(conn: sqlite3.Connection, after_id: int = 0) -> list[IndexChange]:
    """Outbox rows after ``after_id``, oldest first."""
    rows = conn.execute(
        "SELECT id, generation, doc_id, old_rowids, kind, rowids FROM index_outbox WHERE id > ?"
        " ORDER BY id",
        (after_id,),
    ).fetchall()
    return [
        IndexChange(
            outbox_id=r[0],
            generation=r[1],
            doc_id=r[2],
            old_rowids=tuple(json.loads(r[3])),
            kind=r[4],
            rowids=tuple(json.loads(r[5])),
        )
        for r in rows
    ]
