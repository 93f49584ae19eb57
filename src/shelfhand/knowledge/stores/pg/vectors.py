"""Vector search with pgvector: one table and one HNSW index per vector space.

A table per space, not one table with a partial index per space: every space has its own
dimension (MiniLM 384, USE 512, an API model 1536), and pgvector indexes a ``vector(n)`` column
of one declared dimension; a table per space also keeps the planner's statistics and the HNSW
graph to that space's rows, and forgetting a space is dropping a table. Each table carries the
chunk's tenant, permission tags, doc type and source, so the caller's filter is a condition on
the same rows the index scan returns.

Filtered queries run with ``hnsw.iterative_scan = relaxed_order`` (pgvector 0.8): without it
an HNSW scan stops after ``ef_search`` candidates and a filter that hides most of them returns
fewer than ``k`` hits. ``ef_search`` is sized to ``k`` (at least 40, at most 1000); results are
re-sorted by score (relaxed order may swap neighbours). If the scan still returns fewer than
``k`` (the iterative scan gives up after ``hnsw.max_scan_tuples``), the caller's rows are
searched exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from shelfhand.knowledge.embeddings.router import Vectors
from shelfhand.knowledge.stores.pg.db import PgDatabase, acl_sql
from shelfhand.knowledge.stores.pg.store import PgKnowledgeStore
from shelfhand.knowledge.types import Scope

__all__ = ["PgVectorIndexes"]

EF_MIN = 40
EF_MAX = 1000


class PgVectorIndexes:
    """The vector spaces of a :class:`~shelfhand.knowledge.stores.pg.store.PgKnowledgeStore`."""

    name = "vectors"

    def __init__(self, db: PgDatabase, store: PgKnowledgeStore) -> None:
        self.db = db
        self._store = store

    def spaces(self) -> list[str]:
        return self._store.vector_spaces()

    def count(self, space: str | None = None) -> int:
        return self._store.count_vectors(space)

    def search(
        self, space: str, query: Vectors, k: int, *, scope: Scope
    ) -> list[tuple[int, float]]:
        """Top ``k`` chunks of ``space`` by inner product that ``scope`` may read."""
        table = self._store.space_table(space)
        if table is None or k <= 0:
            return []
        vec = np.ascontiguousarray(query, dtype=np.float32).reshape(-1)
        where, params = acl_sql("v", scope)
        sql = (
            f"SELECT v.rowid, -(v.embedding <#> %s) AS score FROM {table.table} v"
            f" WHERE {where} ORDER BY v.embedding <#> %s LIMIT %s"
        )
        args: list[Any] = [vec, *params, vec, k]
        ef = max(EF_MIN, min(EF_MAX, 2 * k))
        with self.db.transaction(read=True) as conn:
            conn.execute(f"SET LOCAL hnsw.ef_search = {int(ef)}")
            conn.execute("SET LOCAL hnsw.iterative_scan = 'relaxed_order'")
            rows = conn.execute(sql, args).fetchall()
            if len(rows) < k:  # the graph walk gave up: search the readable rows exactly
                conn.execute("SET LOCAL enable_indexscan = off")
                rows = conn.execute(sql, args).fetchall()
        hits = [(int(r[0]), float(r[1])) for r in rows]
        hits.sort(key=lambda h: -h[1])
        return hits

    def similarities(self, space: str, query: Vectors, rowids: Sequence[int]) -> dict[int, float]:
        """Inner products of ``query`` with the stored vectors of ``rowids`` (those that have
        one). No permission check: pass rowids the caller may read."""
        table = self._store.space_table(space)
        if table is None or not rowids:
            return {}
        vec = np.ascontiguousarray(query, dtype=np.float32).reshape(-1)
        with self.db.connection(read=True) as conn:
            rows = conn.execute(
                f"SELECT rowid, -(embedding <#> %s) FROM {table.table}"
                " WHERE rowid = ANY(%s::bigint[])",
                (vec, [int(r) for r in rowids]),
            ).fetchall()
        return {int(r[0]): float(r[1]) for r in rows}
