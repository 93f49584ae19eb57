"""Analysing the chunks a PostgreSQL store kept without keyword fields (written while a Qdrant
index served the searches, :mod:`shelfhand.knowledge.stores.pg.store`), so that the SQL
keyword search can serve again once ``qdrant_url`` is removed: ``shelfhand knowledge reindex``.

Batches of such chunks are analysed, each batch one transaction that writes their tsvectors
and lengths and moves them from the ``u`` statistics row into the BM25 statistics; rows are
locked with ``SKIP LOCKED``, so two backfills (or a backfill and the writers) never wait on
each other for long. Chunks written by a process still running with ``qdrant_url`` meanwhile
are not analysed: stop those first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shelfhand.knowledge.stores.pg.reads import CHUNK_COLUMNS, row_to_chunk
from shelfhand.knowledge.stores.pg.store import UNANALYSED, _Delta, keyword_fields

if TYPE_CHECKING:
    from shelfhand.knowledge.stores.pg.store import PgKnowledgeStore

__all__ = ["analyse_keywords", "unanalysed_chunks"]


def unanalysed_chunks(store: PgKnowledgeStore) -> int:
    """How many chunks have no keyword fields (the ``u`` statistics row)."""
    with store.db.connection() as conn:
        row = conn.execute(
            "SELECT docs FROM knowledge_pg_field_stats WHERE field = %s", (UNANALYSED,)
        ).fetchone()
    return int(row[0]) if row else 0


def analyse_keywords(store: PgKnowledgeStore, *, batch: int = 500) -> int:
    """Write the keyword fields of every chunk stored without them; returns how many."""
    done = 0
    while True:
        with store.db.connection() as conn, conn.transaction():
            rows = conn.execute(
                f"SELECT {CHUNK_COLUMNS} FROM knowledge_pg_chunks WHERE body_len < 0"
                " ORDER BY rowid LIMIT %s FOR UPDATE SKIP LOCKED",
                (batch,),
            ).fetchall()
            if not rows:
                return done
            delta = _Delta()
            updates = []
            for row in rows:
                fields = keyword_fields(row_to_chunk(row), delta)
                updates.append((*fields, int(row[0])))
            delta.docs[UNANALYSED] -= len(rows)
            with conn.cursor() as cur:
                cur.executemany(
                    "UPDATE knowledge_pg_chunks SET body = %s::tsvector, head = %s::tsvector,"
                    " codes = %s::tsvector, body_len = %s, head_len = %s, codes_len = %s"
                    " WHERE rowid = %s",
                    updates,
                )
            store._finish(conn, delta)
        done += len(rows)
