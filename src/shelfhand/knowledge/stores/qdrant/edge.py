"""The in-process backend: Qdrant Edge (``qdrant-edge-py``), Qdrant's Rust engine as a shard
in a local folder. For one machine, tests and ``shelfhand dev-cluster --qdrant``.

The shard has the sparse ``keyword`` vector (no IDF modifier: the query weighs its terms) from
its creation; a dense named vector is added per vector space the first time one is written
(``create_dense_vector``).
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from shelfhand.core.errors import ConfigurationError
from shelfhand.knowledge.stores.qdrant.model import (
    FILTER_FIELDS,
    KEYWORD,
    LOOKUP_FIELDS,
    META_ID,
    TERMS,
    ChunkPoint,
    FusedPoint,
    FusedQuery,
    PointFilter,
    SearchQuery,
    SparseVec,
    as_floats,
    fused_point,
    term_token,
)

__all__ = ["EdgeBackend"]

_INSTALL = "Qdrant Edge is not installed: pip install 'shelfhand[qdrant]'"


def _qe() -> Any:
    try:
        import qdrant_edge
    except ImportError as exc:  # pragma: no cover - the extra is installed in the test env
        raise ConfigurationError(_INSTALL) from exc
    return qdrant_edge


class EdgeBackend:
    """A Qdrant Edge shard in ``path`` (created when missing).

    Args:
        path: The shard's folder.
        search_threads: Threads of the shard's search pool (None: one per CPU).
    """

    shared = False
    """One process has the shard open: every change to it goes through this process."""

    def __init__(self, path: Path, *, search_threads: int | None = None) -> None:
        qe = _qe()
        self._qe = qe
        self.path = Path(path)
        self.location = str(self.path)
        self._threads = search_threads
        self._lock = threading.Lock()
        self._has_meta = False
        self._shard = self._open()

    def _config(self) -> Any:
        qe = self._qe
        return qe.EdgeConfig(
            sparse_vectors={KEYWORD: qe.EdgeSparseVectorParams()},  # (IDF: the query's)
            max_search_threads=self._threads,
        )

    def _open(self) -> Any:
        qe = self._qe
        if self.path.exists() and any(self.path.iterdir()):
            return qe.EdgeShard.load(str(self.path))
        shard = qe.EdgeShard.create(str(self.path), self._config())
        shard.update(
            qe.UpdateOperation.create_field_index("tenant", qe.KeywordIndexParams(is_tenant=True))
        )
        for name in FILTER_FIELDS:
            shard.update(qe.UpdateOperation.create_field_index(name, qe.PayloadSchemaType.Keyword))
        for name in LOOKUP_FIELDS:
            params = qe.KeywordIndexParams(enable_hnsw=False)
            shard.update(qe.UpdateOperation.create_field_index(name, params))
        text = qe.TextIndexParams(tokenizer=qe.TokenizerType.Word, enable_hnsw=False)
        shard.update(qe.UpdateOperation.create_field_index(TERMS, text))
        return shard

    # -- state ----------------------------------------------------------------------------------

    def meta(self) -> dict[str, object] | None:
        found = self._shard.retrieve([META_ID], True, False)
        self._has_meta = bool(found)
        return dict(found[0].payload or {}) if found else None

    def set_meta(self, meta: Mapping[str, object]) -> None:
        qe = self._qe
        self._shard.update(qe.UpdateOperation.upsert_points([qe.Point(META_ID, {}, dict(meta))]))
        self._has_meta = True

    def ensure_space(self, name: str, dim: int) -> None:
        qe = self._qe
        with self._lock:
            self._shard.update(qe.UpdateOperation.create_dense_vector(name, dim, qe.Distance.Dot))

    # -- writes ---------------------------------------------------------------------------------

    def _sparse(self, vec: SparseVec) -> Any:
        return self._qe.SparseVector(list(vec.indices), list(vec.values))

    def upsert(self, points: Sequence[ChunkPoint]) -> None:
        if not points:
            return
        qe = self._qe
        batch = []
        for p in points:
            vector: dict[str, Any] = {KEYWORD: self._sparse(p.sparse)}
            vector.update({space: as_floats(v) for space, v in p.dense.items()})
            batch.append(qe.Point(p.id, vector, p.payload()))
        self._shard.update(qe.UpdateOperation.upsert_points(batch))

    def set_vectors(self, space: str, ids: Sequence[int], rows: Sequence[Sequence[float]]) -> None:
        if not ids:
            return
        qe = self._qe
        update = [
            qe.PointVectors(int(i), {space: as_floats(row)})
            for i, row in zip(ids, rows, strict=True)
        ]
        self._shard.update(qe.UpdateOperation.update_vectors(update))

    def delete(self, ids: Sequence[int], doc_ids: Sequence[str]) -> None:
        qe = self._qe
        if ids:
            self._shard.update(qe.UpdateOperation.delete_points([int(i) for i in ids]))
        if doc_ids:
            flt = self._filter(PointFilter(any_of={"doc_id": tuple(doc_ids)}))
            self._shard.update(qe.UpdateOperation.delete_points_by_filter(flt))

    def clear(self) -> None:
        with self._lock:
            self._shard.close()
            shutil.rmtree(self.path, ignore_errors=True)
            self._shard = self._open()
            self._has_meta = False

    def optimize(self) -> bool:
        """Run the shard's optimizers now (merge segments, build the HNSW graphs), blocking;
        whether anything changed."""
        return bool(self._shard.optimize())

    def flush(self) -> None:
        self._shard.flush()

    def close(self) -> None:
        with self._lock:
            self._shard.flush()
            self._shard.close()

    # -- reads ----------------------------------------------------------------------------------

    def _filter(self, flt: PointFilter) -> Any:
        qe = self._qe
        must: list[Any] = []
        if flt.tenant is not None:
            must.append(qe.FieldCondition("tenant", match=qe.MatchValue(flt.tenant)))
        for name, values in flt.any_of.items():
            match = qe.MatchValue(values[0]) if len(values) == 1 else qe.MatchAny(list(values))
            must.append(qe.FieldCondition(name, match=match))
        if flt.has_vector is not None:
            must.append(qe.HasVectorCondition(flt.has_vector))
        if flt.term is not None:
            must.append(qe.FieldCondition(TERMS, match=qe.MatchText(term_token(flt.term))))
        if not must:  # every chunk point: those with a document
            must.append(qe.FieldCondition("doc_id", is_empty=False))
        return qe.Filter(must=must)

    def _nearest(self, query: SearchQuery) -> Any:
        qe = self._qe
        vector = (
            self._sparse(query.vector)
            if isinstance(query.vector, SparseVec)
            else as_floats(query.vector)
        )
        return qe.Query.Nearest(vector, using=query.using)

    def _request(self, query: SearchQuery) -> Any:
        qe = self._qe
        return qe.QueryRequest(
            limit=query.limit,
            query=self._nearest(query),
            filter=self._filter(query.filter),
            params=qe.SearchParams(exact=query.exact),
            with_payload=False,
            with_vector=False,
        )

    def query(self, query: SearchQuery) -> list[tuple[int, float]]:
        return [(int(p.id), float(p.score)) for p in self._shard.query(self._request(query))]

    def query_fused(
        self, fused: FusedQuery, also: SearchQuery | None
    ) -> tuple[list[FusedPoint], list[tuple[int, float]]]:
        qe = self._qe
        stages = [
            qe.Prefetch(
                limit=q.limit,
                query=self._nearest(q),
                filter=self._filter(q.filter),
                params=qe.SearchParams(exact=q.exact),
            )
            for q in fused.stages
        ]
        request = qe.QueryRequest(
            limit=fused.limit,
            prefetches=stages,
            query=qe.Fusion.Rrf(k=fused.rrf_k + 1, weights=list(fused.weights)),
            filter=self._filter(fused.filter),
            with_payload=False,
            with_vector=list(fused.with_vectors) if fused.with_vectors else False,
        )
        batch = [request] if also is None else [request, self._request(also)]
        found, *hits = self._shard.query_batch(qe.QueryBatchRequest(batch))
        points = [fused_point(p.id, p.score, p.vector, fused.with_vectors) for p in found]
        return points, [(int(p.id), float(p.score)) for p in (hits[0] if hits else [])]

    def count(self, flt: PointFilter) -> int:
        if flt == PointFilter():  # every chunk: the shard's point count (no scan), less the meta
            total = int(self._shard.count(self._qe.CountRequest(exact=False)))
            return max(0, total - self._has_meta)
        return int(self._shard.count(self._qe.CountRequest(exact=True, filter=self._filter(flt))))

    def ids(self, flt: PointFilter, limit: int) -> list[int]:
        qe = self._qe
        records, _ = self._shard.scroll(
            qe.ScrollRequest(limit=limit, filter=self._filter(flt), with_payload=False)
        )
        return sorted(int(r.id) for r in records)

    def vectors(self, space: str, ids: Sequence[int]) -> dict[int, list[float]]:
        if not ids:
            return {}
        found = self._shard.retrieve([int(i) for i in ids], False, [space])
        out: dict[int, list[float]] = {}
        for record in found:
            vec = (record.vector or {}).get(space) if isinstance(record.vector, dict) else None
            if vec is not None:
                out[int(record.id)] = list(vec)
        return out
