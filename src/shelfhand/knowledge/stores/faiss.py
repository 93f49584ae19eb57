"""Vector search per embedding space: exact numpy when small, faiss HNSW when large (docs/design.md R6).

Every space is keyed by chunk rowid. Deleted chunks become tombstones (masked at search) and the
space is compacted when they pass ``rebuild_ratio`` of it. The permission filter is part of the
search: each space labels its vectors with their chunk's tenant, permission tags, doc type and
source (:mod:`shelfhand.knowledge.stores.vector_labels`), so the positions a caller may read are a mask
over those columns; it becomes a faiss ``IDSelectorBitmap`` (or an exact subset), cached per
caller :class:`~shelfhand.knowledge.types.Scope` until the space changes — never recomputed per
query. All the spaces of a workspace, their persistence and that cache are
:class:`~shelfhand.knowledge.stores.vector_indexes.VectorIndexes`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faiss  # type: ignore[import-untyped]
import numpy as np
import numpy.typing as npt

from shelfhand.core.errors import InvalidArgumentError, KnowledgeError
from shelfhand.knowledge.embeddings.router import Vectors
from shelfhand.knowledge.stores.vector_labels import ChunkMeta, VectorLabels
from shelfhand.knowledge.types import Scope

logger = logging.getLogger(__name__)

__all__ = ["Ids", "Selection", "VectorSpace", "adaptive_ef", "inner_products"]

Ids = npt.NDArray[np.int64]
_FAISS: Any = faiss  # parts of the SWIG API have no stubs
_STATE_FILE = "state.json"
# Adaptive efSearch (issue 13; measured in bench/hnsw_recall.py, docs/benchmarks/history.md "HNSW recall at
# 1M"): ``ef_search`` holds up to EF_REFERENCE_SIZE vectors, a full selection and k <= ef/2;
# beyond that the breadth grows with the graph size (log), with k, and with the share of the
# graph a caller's ACL filter hides (filtered graph search skips unreadable nodes but still has
# to walk them), up to EF_MAX.
EF_REFERENCE_SIZE = 100_000
EF_PER_K = 2
EF_MAX = 2048


def adaptive_ef(ef_search: int, k: int, size: int, selected: int) -> int:
    """The HNSW search breadth for ``k`` results among ``selected`` of ``size`` graph nodes."""
    ef = float(max(ef_search, EF_PER_K * k))
    if size > EF_REFERENCE_SIZE:
        ef *= 1.0 + math.log10(size / EF_REFERENCE_SIZE)
    if 0 < selected < size:
        ef /= math.sqrt(selected / size)
    return max(k, min(math.ceil(ef), EF_MAX))


@dataclass(slots=True)
class Selection:
    """A caller's readable positions in one space, ready for either search path."""

    mask: npt.NDArray[np.bool_]
    count: int
    positions: Ids
    bitmap: npt.NDArray[np.uint8] | None = None
    selector: Any = None
    subset: Vectors | None = None


class VectorSpace:
    """The vectors of one space; exact or HNSW. Not thread-safe: :class:`VectorIndexes` locks.

    ``labelled`` spaces (those of :class:`VectorIndexes`) keep each vector's
    :class:`~shelfhand.knowledge.stores.vector_labels.VectorLabels` and need ``metas`` with every add.
    """

    def __init__(
        self,
        dim: int,
        *,
        hnsw_threshold: int,
        m: int = 32,
        ef_construction: int = 80,
        ef_search: int = 128,
        adaptive_ef: bool = True,
        exact_below: int = 2000,
        exact_fraction: float = 0.05,
        rebuild_ratio: float = 0.2,
        labelled: bool = False,
    ) -> None:
        self.dim = dim
        self.labels: VectorLabels | None = VectorLabels() if labelled else None
        self.hnsw_threshold = hnsw_threshold
        self.m = m
        self.ef_construction = ef_construction
        self.ef_search = ef_search
        self.adaptive = adaptive_ef
        self.exact_below = exact_below
        self.exact_fraction = exact_fraction
        self.rebuild_ratio = rebuild_ratio
        self.ids: Ids = np.zeros(0, dtype=np.int64)
        self.live = np.zeros(0, dtype=bool)
        self.pos: dict[int, int] = {}
        self.matrix: Vectors = np.zeros((0, dim), dtype=np.float32)
        self.n = 0
        self.hnsw: Any = None
        self.version = 0
        self.dirty = False

    @property
    def mode(self) -> str:
        return "exact" if self.hnsw is None else "hnsw"

    @property
    def live_count(self) -> int:
        return len(self.pos)

    def _grow(self, extra: int) -> None:
        need = self.n + extra
        if need <= len(self.ids):
            return
        cap = max(need, 2 * len(self.ids), 1024)
        self.ids = np.resize(self.ids, cap)
        self.live = np.resize(self.live, cap)
        self.live[self.n :] = False
        if self.labels is not None:
            self.labels.resize(cap)
        if self.hnsw is None:
            grown = np.zeros((cap, self.dim), dtype=np.float32)
            grown[: self.n] = self.matrix[: self.n]
            self.matrix = grown

    def add(self, rowids: Ids, vectors: Vectors, metas: Sequence[ChunkMeta] | None = None) -> None:
        if len(rowids) == 0:
            return
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.shape[1] != self.dim:
            raise InvalidArgumentError(f"vector dim {vectors.shape[1]} != space dim {self.dim}")
        if self.labels is not None and (metas is None or len(metas) != len(rowids)):
            raise InvalidArgumentError("a labelled space needs one ChunkMeta per added vector")
        self.remove(rowids)
        self._grow(len(rowids))
        start, end = self.n, self.n + len(rowids)
        self.ids[start:end] = rowids
        self.live[start:end] = True
        if self.labels is not None and metas is not None:
            self.labels.set(start, metas)
        if self.hnsw is None:
            self.matrix[start:end] = vectors
        else:
            self.hnsw.add(vectors)
        for i, r in enumerate(rowids.tolist()):
            self.pos[r] = start + i
        self.n = end
        self._changed()
        if self.hnsw is None and self.live_count >= self.hnsw_threshold:
            self._to_hnsw()

    def remove(self, rowids: Iterable[int]) -> None:
        removed = False
        for r in rowids:
            p = self.pos.pop(int(r), None)
            if p is not None:
                self.live[p] = False
                removed = True
        if removed:
            self._changed()
            if self.n and (self.n - self.live_count) > self.rebuild_ratio * self.n:
                self._compact()

    def _changed(self) -> None:
        self.version += 1
        self.dirty = True

    def live_vectors(self) -> tuple[Ids, Vectors]:
        keep = np.flatnonzero(self.live[: self.n])
        if self.hnsw is None:
            return self.ids[keep].copy(), self.matrix[keep].copy()
        if len(keep) == 0:
            return self.ids[keep].copy(), np.zeros((0, self.dim), dtype=np.float32)
        return self.ids[keep].copy(), self.hnsw.reconstruct_batch(keep.astype(np.int64))

    def _reset(
        self, ids: Ids, vectors: Vectors, hnsw: bool, labels: VectorLabels | None = None
    ) -> None:
        if self.labels is not None:
            if labels is None:
                raise InvalidArgumentError(
                    "a labelled space needs the labels of the vectors it resets to"
                )
            self.labels = VectorLabels()  # replaced by ``labels`` once the arrays are sized
        self.ids = np.zeros(0, dtype=np.int64)
        self.live = np.zeros(0, dtype=bool)
        self.pos = {}
        self.matrix = np.zeros((0, self.dim), dtype=np.float32)
        self.n = 0
        self.hnsw = self._new_hnsw() if hnsw else None
        if len(ids):
            self._grow(len(ids))
            self.ids[: len(ids)] = ids
            self.live[: len(ids)] = True
            if self.hnsw is None:
                self.matrix[: len(ids)] = vectors
            else:
                self.hnsw.add(np.ascontiguousarray(vectors, dtype=np.float32))
            self.pos = {r: i for i, r in enumerate(ids.tolist())}
            self.n = len(ids)
        if self.labels is not None and labels is not None:
            labels.resize(len(self.ids))
            self.labels = labels
        self._changed()

    def _new_hnsw(self) -> Any:
        index = faiss.IndexHNSWFlat(self.dim, self.m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = self.ef_construction
        index.hnsw.efSearch = self.ef_search
        return index

    def _live_labels(self) -> VectorLabels | None:
        if self.labels is None:
            return None
        return self.labels.take(np.flatnonzero(self.live[: self.n]).astype(np.int64))

    def _to_hnsw(self) -> None:
        logger.info("vector space grew to %d vectors: building HNSW", self.live_count)
        labels = self._live_labels()
        ids, vectors = self.live_vectors()
        self._reset(ids, vectors, hnsw=True, labels=labels)

    def _compact(self) -> None:
        labels = self._live_labels()
        ids, vectors = self.live_vectors()
        self._reset(ids, vectors, hnsw=len(ids) >= self.hnsw_threshold, labels=labels)

    def load_all(
        self, ids: Ids, vectors: Vectors, metas: Sequence[ChunkMeta] | None = None
    ) -> None:
        labels = None
        if self.labels is not None:
            if metas is None or len(metas) != len(ids):
                raise InvalidArgumentError("a labelled space needs one ChunkMeta per vector")
            labels = VectorLabels.of(metas)
        self._reset(ids, vectors, hnsw=len(ids) >= self.hnsw_threshold, labels=labels)

    # -- persistence (HNSW only) --------------------------------------------------------------

    def built_params(self) -> dict[str, int]:
        """M and efConstruction the current graph was built with (a loaded graph keeps its own
        until the space is compacted or rebuilt with the configured ones)."""
        if self.hnsw is None:
            return {}
        graph = self.hnsw.hnsw
        return {"m": int(graph.nb_neighbors(1)), "ef_construction": int(graph.efConstruction)}

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        faiss.write_index(self.hnsw, str(folder / "hnsw.faiss"))
        np.savez(folder / "ids.npz", ids=self.ids[: self.n], live=self.live[: self.n])
        if self.labels is not None:
            self.labels.save(folder, self.n)
        self.dirty = False

    def load(self, folder: Path) -> None:
        index: Any = faiss.read_index(str(folder / "hnsw.faiss"))
        with np.load(folder / "ids.npz") as data:
            ids = data["ids"].astype(np.int64)
            live = data["live"].astype(bool)
        if index.ntotal != len(ids) or index.d != self.dim:
            raise KnowledgeError("HNSW file and id list disagree")
        index.hnsw.efSearch = self.ef_search
        self.hnsw = index
        self.ids, self.live, self.n = ids, live, len(ids)
        self.pos = {int(r): int(p) for p, r in enumerate(ids.tolist()) if live[p]}
        self.dirty = False
        if self.labels is not None:
            # None for a graph saved before labels existed: VectorIndexes fills them in
            self.labels = VectorLabels.load(folder, self.n)
        built = self.built_params()
        if built != {"m": self.m, "ef_construction": self.ef_construction}:
            logger.info(
                "HNSW space in %s was built with %s (configured M=%d, efConstruction=%d): "
                "kept until the next rebuild",
                folder.name,
                built,
                self.m,
                self.ef_construction,
            )

    # -- search ---------------------------------------------------------------------------------

    def select(self, allowed: Ids) -> Selection:
        """The selection of the live vectors whose rowid is in ``allowed``."""
        return self.select_mask(np.isin(self.ids[: self.n], allowed, assume_unique=True))

    def select_labels(self, scope: Scope) -> Selection:
        """The selection of the live vectors ``scope`` may read (a labelled space)."""
        if self.labels is None:
            raise InvalidArgumentError("this space keeps no labels: select by rowids")
        return self.select_mask(self.labels.mask(self.n, scope))

    def select_mask(self, readable: npt.NDArray[np.bool_]) -> Selection:
        """The selection of the live positions among ``readable`` (one flag per position)."""
        mask = readable & self.live[: self.n]
        positions = np.flatnonzero(mask).astype(np.int64)
        sel = Selection(mask=mask, count=len(positions), positions=positions)
        if self.hnsw is not None and sel.count:
            if sel.count < max(self.exact_below, int(self.n * self.exact_fraction)):
                # Too selective for graph search: brute-force the readable vectors. Exact, and
                # at 1M no dearer than the wide filtered walk, which lost recall below ~10%.
                sel.subset = self.hnsw.reconstruct_batch(positions)
            elif sel.count < self.n:
                sel.bitmap = np.packbits(mask, bitorder="little")
                sel.selector = faiss.IDSelectorBitmap(self.n, faiss.swig_ptr(sel.bitmap))
        return sel

    def effective_ef(self, k: int, sel: Selection) -> int:
        """The efSearch a graph search of ``k`` results under ``sel`` runs with."""
        if not self.adaptive:
            return max(self.ef_search, k)
        return adaptive_ef(self.ef_search, k, self.n, sel.count)

    def search(self, query: Vectors, k: int, sel: Selection) -> list[tuple[int, float]]:
        if sel.count == 0 or k <= 0:
            return []
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(1, -1)
        if self.hnsw is None:
            scores = self.matrix[: self.n] @ q[0]
            scores = np.where(sel.mask, scores, -np.inf)
            return _top(scores, np.arange(self.n), self.ids, min(k, sel.count))
        if sel.subset is not None:
            scores = inner_products(sel.subset, q[0])
            return _top(scores, sel.positions, self.ids, min(k, sel.count))
        params: Any = _FAISS.SearchParametersHNSW(efSearch=self.effective_ef(k, sel))
        if sel.selector is not None:
            params.sel = sel.selector
        distances, labels = self.hnsw.search(q, k, params=params)
        hits = [
            (int(self.ids[p]), float(d))
            for p, d in zip(labels[0].tolist(), distances[0].tolist(), strict=True)
            if p >= 0
        ]
        if len(hits) < min(k, sel.count):
            # The graph could not reach enough readable nodes: fall back to exact.
            subset = self.hnsw.reconstruct_batch(sel.positions)
            return _top(subset @ q[0], sel.positions, self.ids, min(k, sel.count))
        return hits

    def stored_vectors(self, rowids: Sequence[int]) -> tuple[list[int], Vectors]:
        """The live ones of ``rowids`` and their vectors (a copy), in that order."""
        found = [(r, p) for r in rowids if (p := self.pos.get(int(r))) is not None]
        positions = np.fromiter((p for _, p in found), dtype=np.int64, count=len(found))
        if self.hnsw is None:
            matrix = self.matrix[positions]
        else:
            matrix = self.hnsw.reconstruct_batch(positions) if found else self.matrix[:0]
        return [r for r, _ in found], matrix


def inner_products(matrix: Vectors, query: Vectors) -> npt.NDArray[np.float32]:
    """``matrix @ query`` on this thread (faiss' SIMD kernel). numpy hands a matrix-vector
    product of this size to OpenBLAS's threads, and that hand-off cost ~8 ms per query where a
    single thread needs ~2 ms (30k x 384, docs/benchmarks/history.md "HNSW recall at 1M")."""
    out = np.empty(len(matrix), dtype=np.float32)
    if len(matrix):
        rows = np.ascontiguousarray(matrix, dtype=np.float32)
        vec = np.ascontiguousarray(query, dtype=np.float32)
        _FAISS.fvec_inner_products_ny(
            faiss.swig_ptr(out), faiss.swig_ptr(vec), faiss.swig_ptr(rows), rows.shape[1], len(rows)
        )
    return out


def _top(scores: Any, positions: Ids, ids: Ids, k: int) -> list[tuple[int, float]]:
    part = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    order = part[np.argsort(-scores[part], kind="stable")]
    return [(int(ids[positions[i]]), float(scores[i])) for i in order.tolist()]
