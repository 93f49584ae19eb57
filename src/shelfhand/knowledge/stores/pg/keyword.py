"""BM25 in PostgreSQL over our own analysed tokens (the embedded index's analysis).

Each chunk holds three ``tsvector`` columns built from :mod:`shelfhand.knowledge.analysis`
(the ``simple`` configuration's role: tokens are stored as given, so Chinese is segmented by
jieba, English stemmed, identifiers kept whole exactly as in tantivy): ``body``, ``head`` and
``codes``, each GIN-indexed. A term's positions are ``1..tf``, so the term frequency is read back
from the vector. A query matches with ``@@`` on the GIN indexes; the matching rows are scored
with BM25 (k1 = 1.2, b = 0.75, tantivy's idf) from the statistics the store keeps (chunks and
tokens per field, document frequency per term), ``head`` weighted by ``head_boost`` like the
embedded index. ``ts_rank`` is not used: it is not BM25 (docs/benchmarks/history.md "PostgreSQL store").
Tenant, roles, doc type and source are conditions of the same SQL.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from shelfhand.core.errors import ConfigurationError
from shelfhand.knowledge.scoring import (
    COMMON_SHARE,
    bm25_idf,
    check_keyword_weights,
    ranking_terms,
)
from shelfhand.knowledge.stores.pg.db import PgDatabase, acl_sql
from shelfhand.knowledge.stores.pg.store import FIELDS, UNANALYSED, tsquery_literal
from shelfhand.knowledge.types import KeywordHits, Scope

__all__ = ["PgKeywordIndex"]

K1 = 1.2
B = 0.75
_HEAD_BOOST = 1.0


def _field_score(column: str, length: str, weights: str, avg: str) -> str:
    """SQL for one field's BM25 of row ``c``: the weights array is idf * (k1 + 1) per term.

    The row's tsvector is first cut to the query's terms in C (``setweight`` marks them,
    ``ts_filter`` keeps them), so only those few lexemes are unnested: unnesting the whole
    vector of each matching row was 3-4 times slower on SciFact."""
    return (
        f"CASE WHEN c.{length} = 0 THEN 0 ELSE COALESCE((SELECT sum(q.{weights} * x.tf / (x.tf + {K1} * (1 - {B} + {B} * c.{length}"
        f" / %({avg})s))) FROM (SELECT u.lexeme, cardinality(u.positions)::float8 AS tf"
        f" FROM unnest(ts_filter(setweight(c.{column}, 'A', %(terms)s::text[]), '{{a}}')) u) x"
        " JOIN q ON q.term = x.lexeme), 0) END"
    )


class PgKeywordIndex:
    """Keyword search of a :class:`~shelfhand.knowledge.stores.pg.store.PgKnowledgeStore`.

    Args:
        db: The store's connection pool.
        head_boost: Weight of a query term's match in the chunk's own heading (0: off).
        bitmap_scan: Read the matching chunks through the GIN indexes (a bitmap scan) even
            where the planner would scan the whole table: it cannot tell that testing every
            row's ``tsvector`` costs far more than its estimate (at 1M chunks a query matching
            15% of them took 9.5 s by a full scan, 3.1 s through the index). Same rows, so the
            same results.
        rare_share: MaxScore pruning (exact): when some query terms are rare (in at most this
            share of the chunks) and others common, the chunks matching a rare term are scored
            first (on every term); if the k-th of them scores more than any chunk holding only
            common terms could (the sum of those terms' BM25 upper bounds), that is the top k,
            and the chunks holding only common terms are never scored. Otherwise every match
            is scored. 0 turns it off.
        common_share: Query terms in more than this share of the chunks do not rank when
            rarer ones do, as in the embedded index (:func:`~shelfhand.knowledge.retrieval.fusion.
            ranking_terms`); 1 keeps every term.
    """

    name = "keyword"

    def __init__(
        self,
        db: PgDatabase,
        *,
        head_boost: float = _HEAD_BOOST,
        rare_share: float = 0.0,
        bitmap_scan: bool = True,
        common_share: float = COMMON_SHARE,
    ) -> None:
        check_keyword_weights(head_boost, common_share)
        self.common_share = common_share
        self.db = db
        self.head_boost = head_boost
        self.rare_share = rare_share
        self.bitmap_scan = bitmap_scan
        self.paths: Counter[str] = Counter()
        """How searches were answered: ``pruned`` (rare terms first), ``full``; ``common
        terms``: the ranking terms found fewer than k chunks, every term ranked them."""

    def num_docs(self) -> int:
        with self.db.connection(read=True) as conn:
            row = conn.execute(
                "SELECT docs FROM knowledge_pg_field_stats WHERE field = 'b'"
            ).fetchone()
        return int(row[0]) if row else 0

    def _stats(
        self, conn: Any, terms: Sequence[str], tenant: str | None = None
    ) -> tuple[dict[str, tuple[int, int]], dict[tuple[str, str], int]]:
        """Per field (docs, tokens), and df per (field, term): of ``tenant``'s chunks (its
        searches rank by them, :func:`~shelfhand.knowledge.scoring.tenant_boost` says why),
        or of every tenant's together. Both kept by each write's transaction; the row of
        chunks stored without keyword fields (``u``) is every tenant's."""
        fields = {
            str(f): (int(d), int(t))
            for f, d, t in conn.execute("SELECT field, docs, tokens FROM knowledge_pg_field_stats")
        }
        if tenant is None:
            found = conn.execute(
                "SELECT field, term, sum(df) FROM knowledge_pg_tenant_terms"
                " WHERE term = ANY(%s::text[]) GROUP BY field, term",
                (list(terms),),
            )
        else:
            for name in FIELDS:
                fields[name] = (0, 0)
            for f, d, t in conn.execute(
                "SELECT field, docs, tokens FROM knowledge_pg_tenant_stats WHERE tenant_id = %s",
                (tenant,),
            ):
                fields[str(f)] = (int(d), int(t))
            found = conn.execute(
                "SELECT field, term, df FROM knowledge_pg_tenant_terms"
                " WHERE tenant_id = %s AND term = ANY(%s::text[])",
                (tenant, list(terms)),
            )
        dfs = {(str(f), str(t)): int(df) for f, t, df in found if df}
        return fields, dfs

    def search(
        self, query_tokens: Sequence[str], k: int, *, scope: Scope
    ) -> list[tuple[int, float]]:
        """Top ``k`` chunks by BM25 that ``scope`` may read, as ``(rowid, score)``."""
        terms = list(dict.fromkeys(t for t in query_tokens if t))
        if not terms or k <= 0:
            return []
        return self._run(terms, None, k, scope)

    def search_exact(
        self, identifiers: Sequence[str], k: int, *, rank_by: Sequence[str] = (), scope: Scope
    ) -> list[tuple[int, float]]:
        """Top ``k`` chunks whose text holds one of ``identifiers``, ranked by BM25 of
        ``rank_by`` (or of the identifiers in the ``codes`` field when it is empty)."""
        ids = list(dict.fromkeys(t for t in identifiers if t))
        if not ids or k <= 0:
            return []
        ranking = list(dict.fromkeys(t for t in rank_by if t))
        return self._run(ranking, ids, k, scope)

    def _run(
        self, terms: Sequence[str], identifiers: Sequence[str] | None, k: int, scope: Scope
    ) -> list[tuple[int, float]]:
        """Rows matching ``terms`` (body or head) — or holding one of ``identifiers`` (codes),
        when given — scored by BM25 of ``terms`` (of the identifiers in codes if none)."""
        where, acl_params = acl_sql("c", scope)
        scored = list(terms) if terms else list(identifiers or ())
        with self.db.transaction(read=True) as conn:
            if self.bitmap_scan:
                conn.execute("SET LOCAL enable_seqscan = off")
            fields, dfs = self._stats(conn, scored, scope.tenant_id)
            check_analysed(fields.get(UNANALYSED, (0, 0))[0])
            n = fields.get("b", (0, 0))[0]
            if n == 0:
                return []
            if identifiers is not None:
                return self._scored(conn, terms, identifiers, k, fields, dfs, where, acl_params)
            ranked = self._ranking_terms(terms, dfs, n)
            hits: list[tuple[int, float]] = []
            if len(ranked) < len(terms):
                hits = self._scored(conn, ranked, None, k, fields, dfs, where, acl_params)
                if len(hits) < k:
                    self.paths["common terms"] += 1  # the common terms rank the rest
            if len(hits) < k:
                hits = self._scored(conn, terms, None, k, fields, dfs, where, acl_params)
        return KeywordHits(hits, num_docs=n, doc_freqs=[dfs.get(("b", t), 0) for t in terms])

    def _ranking_terms(
        self, terms: Sequence[str], dfs: dict[tuple[str, str], int], n: int
    ) -> list[str]:
        body = [dfs.get(("b", t), 0) for t in terms]
        return ranking_terms(terms, body, n, self.common_share)

    def _scored(
        self,
        conn: Any,
        terms: Sequence[str],
        identifiers: Sequence[str] | None,
        k: int,
        fields: dict[str, tuple[int, int]],
        dfs: dict[tuple[str, str], int],
        where: str,
        acl_params: Sequence[Any],
    ) -> list[tuple[int, float]]:
        """One ranked query (see :meth:`_run`) with the statistics already read."""
        scored = list(terms) if terms else list(identifiers or ())
        n = fields["b"][0]
        params: dict[str, Any] = {"terms": scored}
        if terms:
            params["wb"] = [bm25_idf(dfs.get(("b", t), 0), n) * (K1 + 1) for t in scored]
            params["wh"] = [
                self.head_boost * bm25_idf(dfs.get(("h", t), 0), n) * (K1 + 1) for t in scored
            ]
            params["avg_b"] = max(fields["b"][1] / n, 1e-9)
            params["avg_h"] = max(fields["h"][1] / n, 1e-9)
            score = _field_score("body", "body_len", "wb", "avg_b")
            if self.head_boost > 0:
                score += " + " + _field_score("head", "head_len", "wh", "avg_h")
            q_cols = "term, wb, wh"
            q_from = "unnest(%(terms)s::text[], %(wb)s::float8[], %(wh)s::float8[])"
        else:
            params["wc"] = [bm25_idf(dfs.get(("c", t), 0), n) * (K1 + 1) for t in scored]
            params["avg_c"] = max(fields["c"][1] / n, 1e-9)
            score = _field_score("codes", "codes_len", "wc", "avg_c")
            q_cols = "term, wc"
            q_from = "unnest(%(terms)s::text[], %(wc)s::float8[])"
        if identifiers is not None:
            params["match"] = tsquery_literal(identifiers)
            match = "c.codes @@ %(match)s::tsquery"
        else:
            params["match"] = tsquery_literal(terms)
            match = "(c.body @@ %(match)s::tsquery OR c.head @@ %(match)s::tsquery)"
        if not params["match"]:
            return []
        for i, value in enumerate(acl_params):
            params[f"acl{i}"] = value
        where = _named(where, len(acl_params))
        params["k"] = k
        sql = (
            f"WITH q({q_cols}) AS (SELECT * FROM {q_from})"
            f" SELECT c.rowid, {score} AS score FROM knowledge_pg_chunks c"
            f" WHERE {match} AND {where} ORDER BY score DESC, c.rowid LIMIT %(k)s"
        )
        if identifiers is None and self.rare_share > 0:
            rare = [
                t
                for t in terms
                if dfs.get(("b", t), 0) + dfs.get(("h", t), 0) <= n * self.rare_share
            ]
            common = [t for t in terms if t not in rare]
            if rare and common:
                # a chunk holding no rare term scores below the common terms' bounds
                # (a term's BM25 < idf * (k1 + 1) in each field that holds it at all)
                bound = sum(
                    params["wb"][i] * (dfs.get(("b", t), 0) > 0)
                    + params["wh"][i] * (self.head_boost > 0 and dfs.get(("h", t), 0) > 0)
                    for i, t in enumerate(terms)
                    if t in common
                )
                first = conn.execute(
                    sql.replace("%(match)s", "%(rare)s"),
                    {**params, "rare": tsquery_literal(rare)},
                ).fetchall()
                if len(first) == k and float(first[-1][1]) > bound:
                    self.paths["pruned"] += 1
                    return [(int(r[0]), float(r[1])) for r in first]
        self.paths["full"] += 1
        rows = conn.execute(sql, params).fetchall()
        return [(int(r[0]), float(r[1])) for r in rows]

    def doc_freqs(
        self, query_tokens: Sequence[str], scope: Scope | None = None
    ) -> tuple[int, list[int]]:
        """Chunks in the store and, per distinct token (first-seen order), how many contain it
        in their body; with ``scope``, of its tenant's chunks only (as its searches rank)."""
        terms = list(dict.fromkeys(t for t in query_tokens if t))
        with self.db.connection(read=True) as conn:
            fields, dfs = self._stats(conn, terms, None if scope is None else scope.tenant_id)
        return fields.get("b", (0, 0))[0], [dfs.get(("b", t), 0) for t in terms]


def check_analysed(unanalysed: int) -> None:
    """Refuse to search while ``unanalysed`` chunks have no keyword fields (it would miss them).

    Raises:
        ConfigurationError: Some chunks were stored while Qdrant served the searches.
    """
    if unanalysed > 0:
        raise ConfigurationError(
            f"{unanalysed} chunks were stored while Qdrant served the searches (qdrant_url) and"
            " are not in PostgreSQL's keyword index: set SHELFHAND_QDRANT_URL again, or run"
            " `shelfhand knowledge reindex` to index them in PostgreSQL"
        )


def _named(sql: str, count: int) -> str:
    """``acl_sql``'s positional ``%s`` placeholders as ``%(acl<i>)s``."""
    parts = sql.split("%s")
    assert len(parts) == count + 1
    out = parts[0]
    for i, rest in enumerate(parts[1:]):
        out += f"%(acl{i})s" + rest
    return out
