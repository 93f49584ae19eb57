"""The server backend: ``qdrant-client`` against a Qdrant server or cluster (``http(s)://``),
or its local mode (``:memory:``) on small data, where it translates the same query model as
the in-process backend (:mod:`.edge`) and is tested to give the same results.

The collection (``shelfhand_chunks`` by default) is created on first use with the sparse
``keyword`` vector (no IDF modifier: the query weighs) and the payload indexes, ``tenant`` as the tenant index; a
dense named vector is added per vector space when one is first written. Shards and replication
are the collection's: create it beforehand (docs/scale.md) to choose them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from shelfhand.core.errors import ConfigurationError, DependencyUnavailableError
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

__all__ = ["ServerBackend"]

T = TypeVar("T")
_INSTALL = "qdrant-client is not installed: pip install 'shelfhand[qdrant]'"


def _models() -> Any:
    try:
        from qdrant_client import models
    except ImportError as exc:  # pragma: no cover - the extra is installed in the test env
        raise ConfigurationError(_INSTALL) from exc
    return models


_LAYOUT = ("shard_number", "replication_factor", "write_consistency_factor")
"""The collection's settings a rebuild keeps."""


class ServerBackend:
    """One collection of a Qdrant server (or of ``qdrant-client``'s local mode).

    Args:
        url: ``http(s)://host:port`` of the server, or ``:memory:`` for the local mode.
        collection: The collection's name.
        api_key: The server's API key, if it needs one (never logged).
        timeout: Seconds per request.
    """

    shared = True
    """Other processes (replicas) may change the collection."""

    def __init__(
        self,
        url: str,
        *,
        collection: str = "shelfhand_chunks",
        api_key: str | None = None,
        timeout: float = 5.0,
    ) -> None:
        self._m = _models()
        from qdrant_client import QdrantClient

        if url == ":memory:":
            self._client = QdrantClient(location=":memory:")
        else:
            self._client = QdrantClient(url=url, api_key=api_key, timeout=int(max(1, timeout)))
        self.location = url.split("@")[-1]  # never the credentials of a URL
        self._local = url == ":memory:"
        self._has_meta = False
        self.collection = collection
        self._call(self._ensure_collection)

    def _call(self, fn: Callable[[], T]) -> T:
        """Run one request; a server that cannot answer is a 503 with the reason."""
        try:
            return fn()
        except (ConfigurationError, DependencyUnavailableError):
            raise
        except Exception as exc:
            if type(exc).__name__ in {"ValueError", "AssertionError", "KeyError"}:
                raise
            raise DependencyUnavailableError(
                f"Qdrant at {self.location} cannot answer: {type(exc).__name__}: {exc}",
                dependency="qdrant",
            ) from exc

    def _ensure_collection(self, layout: Mapping[str, Any] | None = None) -> None:
        m = self._m
        if self._client.collection_exists(self.collection):
            return
        self._client.create_collection(
            self.collection,
            vectors_config={},
            sparse_vectors_config={KEYWORD: m.SparseVectorParams()},  # (IDF: the query's)
            **(layout or {}),
        )
        if self._local:
            return  # the local mode has no payload indexes (it scans)
        self._client.create_payload_index(
            self.collection,
            "tenant",
            m.KeywordIndexParams(type=m.KeywordIndexType.KEYWORD, is_tenant=True),
        )
        for name in FILTER_FIELDS:
            self._client.create_payload_index(self.collection, name, m.PayloadSchemaType.KEYWORD)
        for name in LOOKUP_FIELDS:  # never a dense search's filter: no HNSW links
            params = m.KeywordIndexParams(type=m.KeywordIndexType.KEYWORD, enable_hnsw=False)
            self._client.create_payload_index(self.collection, name, params)
        text = m.TextIndexParams(
            type=m.TextIndexType.TEXT, tokenizer=m.TokenizerType.WORD, enable_hnsw=False
        )
        self._client.create_payload_index(self.collection, TERMS, text)

    # -- state ----------------------------------------------------------------------------------

    def meta(self) -> dict[str, object] | None:
        found = self._call(
            lambda: self._client.retrieve(self.collection, [META_ID], with_payload=True)
        )
        self._has_meta = bool(found)
        return dict(found[0].payload or {}) if found else None

    def set_meta(self, meta: Mapping[str, object]) -> None:
        point = self._m.PointStruct(id=META_ID, vector={}, payload=dict(meta))
        self._call(lambda: self._client.upsert(self.collection, [point]))
        self._has_meta = True

    def ensure_space(self, name: str, dim: int) -> None:
        m = self._m
        info = self._call(lambda: self._client.get_collection(self.collection))
        vectors = info.config.params.vectors
        if isinstance(vectors, dict) and name in vectors:
            return
        config = m.DenseVectorNameConfig(
            dense=m.DenseVectorConfig(size=dim, distance=m.Distance.DOT)
        )
        self._call(lambda: self._client.create_vector_name(self.collection, name, config))

    # -- writes ---------------------------------------------------------------------------------

    def _sparse(self, vec: SparseVec) -> Any:
        return self._m.SparseVector(indices=list(vec.indices), values=list(vec.values))

    def upsert(self, points: Sequence[ChunkPoint]) -> None:
        if not points:
            return
        m = self._m
        batch = []
        for p in points:
            vector: dict[str, Any] = {KEYWORD: self._sparse(p.sparse)}
            vector.update({space: as_floats(v) for space, v in p.dense.items()})
            batch.append(m.PointStruct(id=p.id, vector=vector, payload=p.payload()))
        self._call(lambda: self._client.upsert(self.collection, batch))

    def set_vectors(self, space: str, ids: Sequence[int], rows: Sequence[Sequence[float]]) -> None:
        if not ids:
            return
        m = self._m
        update = [
            m.PointVectors(id=int(i), vector={space: as_floats(row)})
            for i, row in zip(ids, rows, strict=True)
        ]
        self._call(lambda: self._client.update_vectors(self.collection, update))

    def delete(self, ids: Sequence[int], doc_ids: Sequence[str]) -> None:
        m = self._m
        if ids:
            selector = m.PointIdsList(points=[int(i) for i in ids])
            self._call(lambda: self._client.delete(self.collection, selector))
        if doc_ids:
            flt = self._filter(PointFilter(any_of={"doc_id": tuple(doc_ids)}))
            selector_f = m.FilterSelector(filter=flt)
            self._call(lambda: self._client.delete(self.collection, selector_f))

    def clear(self) -> None:
        """Drop the collection and create it anew, with the shards and replication it had
        (which whoever created it on a cluster chose)."""
        layout = self._call(self._layout)
        self._call(lambda: self._client.delete_collection(self.collection))
        self._call(lambda: self._ensure_collection(layout))
        self._has_meta = False

    def _layout(self) -> dict[str, Any]:
        if not self._client.collection_exists(self.collection):
            return {}
        params = self._client.get_collection(self.collection).config.params
        found = {name: getattr(params, name, None) for name in _LAYOUT}
        return {name: int(value) for name, value in found.items() if value is not None}

    def optimize(self) -> bool:
        """Nothing to do: a server runs its optimizers by itself."""
        return False

    def flush(self) -> None:
        """Nothing to do: the server has acknowledged each write (``wait=True``)."""

    def close(self) -> None:
        self._client.close()

    # -- reads ----------------------------------------------------------------------------------

    def _filter(self, flt: PointFilter) -> Any:
        m = self._m
        must: list[Any] = []
        if flt.tenant is not None:
            must.append(m.FieldCondition(key="tenant", match=m.MatchValue(value=flt.tenant)))
        for name, values in flt.any_of.items():
            match = (
                m.MatchValue(value=values[0]) if len(values) == 1 else m.MatchAny(any=list(values))
            )
            must.append(m.FieldCondition(key=name, match=match))
        if flt.has_vector is not None:
            must.append(m.HasVectorCondition(has_vector=flt.has_vector))
        if flt.term is not None:
            must.append(m.FieldCondition(key=TERMS, match=m.MatchText(text=term_token(flt.term))))
        if not must:
            must.append(m.IsEmptyCondition(is_empty=m.PayloadField(key="doc_id")))
            return m.Filter(must_not=must)
        return m.Filter(must=must)

    def _vector(self, query: SearchQuery) -> Any:
        if isinstance(query.vector, SparseVec):
            return self._sparse(query.vector)
        return as_floats(query.vector)

    def _params(self, query: SearchQuery) -> Any:
        return None if self._local else self._m.SearchParams(exact=query.exact)

    def _request(self, query: SearchQuery) -> Any:
        return self._m.QueryRequest(
            query=self._vector(query),
            using=query.using,
            filter=self._filter(query.filter),
            limit=query.limit,
            params=self._params(query),
            with_payload=False,
            with_vector=False,
        )

    def query(self, query: SearchQuery) -> list[tuple[int, float]]:
        (result,) = self._call(
            lambda: self._client.query_batch_points(self.collection, [self._request(query)])
        )
        return [(int(p.id), float(p.score)) for p in result.points]

    def query_fused(
        self, fused: FusedQuery, also: SearchQuery | None
    ) -> tuple[list[FusedPoint], list[tuple[int, float]]]:
        m = self._m
        stages = [
            m.Prefetch(
                query=self._vector(q),
                using=q.using,
                filter=self._filter(q.filter),
                limit=q.limit,
                params=self._params(q),
            )
            for q in fused.stages
        ]
        request = m.QueryRequest(
            prefetch=stages,
            query=m.RrfQuery(rrf=m.Rrf(k=fused.rrf_k + 1, weights=list(fused.weights))),
            filter=self._filter(fused.filter),
            limit=fused.limit,
            with_payload=False,
            with_vector=list(fused.with_vectors) if fused.with_vectors else False,
        )
        batch = [request] if also is None else [request, self._request(also)]
        found, *hits = self._call(lambda: self._client.query_batch_points(self.collection, batch))
        points = [fused_point(p.id, p.score, p.vector, fused.with_vectors) for p in found.points]
        return points, [(int(p.id), float(p.score)) for p in (hits[0].points if hits else [])]

    def count(self, flt: PointFilter) -> int:
        if flt == PointFilter():  # every chunk: the collection's point count, less the meta
            total = self._call(lambda: self._client.count(self.collection, exact=False))
            return max(0, int(total.count) - self._has_meta)
        result = self._call(
            lambda: self._client.count(self.collection, self._filter(flt), exact=True)
        )
        return int(result.count)

    def ids(self, flt: PointFilter, limit: int) -> list[int]:
        records, _ = self._call(
            lambda: self._client.scroll(
                self.collection, self._filter(flt), limit=limit, with_payload=False
            )
        )
        return sorted(int(r.id) for r in records)

    def vectors(self, space: str, ids: Sequence[int]) -> dict[int, list[float]]:
        if not ids:
            return {}
        found = self._call(
            lambda: self._client.retrieve(
                self.collection, [int(i) for i in ids], with_payload=False, with_vectors=[space]
            )
        )
        out: dict[int, list[float]] = {}
        for record in found:
            vec = record.vector.get(space) if isinstance(record.vector, dict) else None
            if isinstance(vec, list):  # a dense vector (not a sparse or multi-vector)
                out[int(record.id)] = [float(x) for x in vec if isinstance(x, int | float)]
        return out
