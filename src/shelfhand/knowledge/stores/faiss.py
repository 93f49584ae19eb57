"""Vector search per embedding space: exact numpy when small, faiss HNSW when large (DESIGN R6).

Every space is keyed by chunk rowid. Deleted chunks become tombstones (masked at search) and the
space is compacted when they pass ``rebuild_ratio`` of it. The permission filter is part of the
search: each space labels its vectors with their chunk's tenant, permission tags, doc type and
source (:mod:`shelfhand.knowledge.stores.vector_labels`), so the positions a caller may read are a mask
over those columns; it becomes a faiss ``IDSelectorBitmap`` (or an exact subset), cached per
(tenant, roles, filters) until the space changes — never recomputed per query.

Persistence: exact spaces are loaded from SQLite (their vectors are the system of record) on
open; HNSW spaces are written under ``directory`` on durable flushes, in a fresh folder that a
small JSON state file then points to (an atomic switch). Changes since the last durable flush are
replayed from the store's outbox after a crash.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faiss  # type: ignore[import-untyped]
import numpy as np
import numpy.typing as npt

from shelfhand.core.errors import InvalidArgumentError, KnowledgeError
from shelfhand.knowledge.embeddings.router import Vectors
from shelfhand.knowledge.stores.outbox import split_changes
from shelfhand.knowledge.stores.sqlite import IndexChange, SqliteKnowledgeStore
from shelfhand.knowledge.stores.vector_labels import ChunkMeta, VectorLabels
from shelfhand.knowledge.types import Scope

logger = logging.getLogger(__name__)

__all__ = ["VectorIndexes", "VectorSpace", "adaptive_ef"]

Ids = npt.NDArray[np.int64]
_FAISS: Any = faiss  # parts of the SWIG API have no stubs
_STATE_FILE = "state.json"
# Adaptive efSearch (issue 13; measured in bench/hnsw_recall.py, BENCHMARKS.md "HNSW recall at
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
class _Selection:
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

    def select(self, allowed: Ids) -> _Selection:
        """The selection of the live vectors whose rowid is in ``allowed``."""
        return self.select_mask(np.isin(self.ids[: self.n], allowed, assume_unique=True))

    def select_labels(self, scope: Scope) -> _Selection:
        """The selection of the live vectors ``scope`` may read (a labelled space)."""
        if self.labels is None:
            raise InvalidArgumentError("this space keeps no labels: select by rowids")
        return self.select_mask(self.labels.mask(self.n, scope))

    def select_mask(self, readable: npt.NDArray[np.bool_]) -> _Selection:
        """The selection of the live positions among ``readable`` (one flag per position)."""
        mask = readable & self.live[: self.n]
        positions = np.flatnonzero(mask).astype(np.int64)
        sel = _Selection(mask=mask, count=len(positions), positions=positions)
        if self.hnsw is not None and sel.count:
            if sel.count < max(self.exact_below, int(self.n * self.exact_fraction)):
                # Too selective for graph search: brute-force the readable vectors. Exact, and
                # at 1M no dearer than the wide filtered walk, which lost recall below ~10%.
                sel.subset = self.hnsw.reconstruct_batch(positions)
            elif sel.count < self.n:
                sel.bitmap = np.packbits(mask, bitorder="little")
                sel.selector = faiss.IDSelectorBitmap(self.n, faiss.swig_ptr(sel.bitmap))
        return sel

    def effective_ef(self, k: int, sel: _Selection) -> int:
        """The efSearch a graph search of ``k`` results under ``sel`` runs with."""
        if not self.adaptive:
            return max(self.ef_search, k)
        return adaptive_ef(self.ef_search, k, self.n, sel.count)

    def search(self, query: Vectors, k: int, sel: _Selection) -> list[tuple[int, float]]:
        if sel.count == 0 or k <= 0:
            return []
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(1, -1)
        if self.hnsw is None:
            scores = self.matrix[: self.n] @ q[0]
            scores = np.where(sel.mask, scores, -np.inf)
            return _top(scores, np.arange(self.n), self.ids, min(k, sel.count))
        if sel.subset is not None:
            scores = _inner_products(sel.subset, q[0])
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


def _inner_products(matrix: Vectors, query: Vectors) -> npt.NDArray[np.float32]:
    """``matrix @ query`` on this thread (faiss' SIMD kernel). numpy hands a matrix-vector
    product of this size to OpenBLAS's threads, and that hand-off cost ~8 ms per query where a
    single thread needs ~2 ms (30k x 384, BENCHMARKS.md "HNSW recall at 1M")."""
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


class VectorIndexes:
    """All vector spaces of a workspace; a :class:`~shelfhand.knowledge.stores.sqlite.DerivedIndex`.

    Args:
        directory: Where HNSW spaces are persisted, e.g. ``<workspace>/vectors``.
        store: The system of record the spaces are loaded from and filtered against.
        hnsw_threshold: Spaces with at least this many vectors use HNSW, smaller ones exact.
        m, ef_construction: HNSW graph degree and build breadth for graphs built from now on
            (a persisted graph keeps the ones it was built with, recorded in the state file).
        ef_search: HNSW search breadth (recall vs. latency) at up to 100k vectors, a full
            selection and small k.
        adaptive_ef: Widen the search with the graph size, ``k`` and the selectivity of the
            caller's ACL filter (:func:`adaptive_ef`); False uses ``max(ef_search, k)``.
        exact_below, exact_fraction: A caller who may read fewer than
            ``max(exact_below, exact_fraction * size)`` vectors of an HNSW space gets exact
            search over just those.
        persist_every: Persist HNSW spaces after this many non-durable flushes (bounds replay).
    """

    name = "vectors"

    def __init__(
        self,
        directory: Path,
        store: SqliteKnowledgeStore,
        *,
        hnsw_threshold: int = 20_000,
        m: int = 32,
        ef_construction: int = 80,
        ef_search: int = 128,
        adaptive_ef: bool = True,
        exact_below: int = 2000,
        exact_fraction: float = 0.05,
        persist_every: int = 50,
        acl_cache_size: int = 64,
    ) -> None:
        self.directory = Path(directory)
        self._store = store
        self._opts: dict[str, Any] = {
            "hnsw_threshold": hnsw_threshold,
            "m": m,
            "ef_construction": ef_construction,
            "ef_search": ef_search,
            "adaptive_ef": adaptive_ef,
            "exact_below": exact_below,
            "exact_fraction": exact_fraction,
            "labelled": True,
        }
        self._persist_every = persist_every
        self._unpersisted_flushes = 0
        self._lock = threading.RLock()
        self._spaces: dict[str, VectorSpace] = {}
        self._selections: OrderedDict[tuple[Any, ...], _Selection] = OrderedDict()
        self._cache_size = acl_cache_size
        self._durable: int | None = None
        self._load()

    # -- loading and persistence -------------------------------------------------------------

    def _read_state(self) -> dict[str, Any] | None:
        try:
            state: dict[str, Any] = json.loads(
                (self.directory / _STATE_FILE).read_text(encoding="utf-8")
            )
            return state
        except (OSError, ValueError):
            return None

    def _load(self) -> None:
        state = self._read_state() or {}
        saved: dict[str, Any] = state.get("spaces", {})
        generation = self._store.generation
        hnsw_generation: int | None = None
        for space in self._store.vector_spaces():
            entry = saved.get(space)
            if entry and entry.get("mode") == "hnsw":
                vs = VectorSpace(int(entry["dim"]), **self._opts)
                try:
                    vs.load(self.directory / entry["folder"])
                    if vs.labels is None:
                        self._label_from_store(vs)
                    self._spaces[space] = vs
                    hnsw_generation = int(state["generation"])
                    continue
                except (OSError, ValueError, RuntimeError, KeyError, KnowledgeError) as exc:
                    logger.warning(
                        "vector space %s unreadable (%s); reloading from SQLite", space, exc
                    )
            self._load_from_store(space)
        # Exact spaces mirror SQLite as of now; HNSW files as of their last durable flush.
        self._durable = hnsw_generation if hnsw_generation is not None else generation

    def _load_from_store(self, space: str) -> None:
        batches = list(self._store.iter_vectors(space))
        if not batches:
            self._spaces.pop(space, None)
            return
        ids = np.concatenate([b[0] for b in batches])
        vectors = np.concatenate([b[1] for b in batches])
        vs = VectorSpace(vectors.shape[1], **self._opts)
        vs.load_all(ids, vectors, self._metas(self._store, ids))
        self._spaces[space] = vs

    @staticmethod
    def _metas(store: SqliteKnowledgeStore, rowids: Ids) -> list[ChunkMeta]:
        """Tenant, tags, doc type and source of each rowid's chunk, from the store."""
        metas: list[ChunkMeta] = []
        ids = rowids.tolist()
        for a in range(0, len(ids), 20_000):
            part = ids[a : a + 20_000]
            chunks = store.chunk_map(part)
            for r in part:
                c = chunks.get(r)
                # A vector's chunk is deleted with it; if one were missing, nobody reads it.
                metas.append(
                    ("\x00gone", (), "", "")
                    if c is None
                    else (c.tenant_id, tuple(c.permission_tags), c.doc_type, c.source)
                )
        return metas

    def _label_from_store(self, vs: VectorSpace) -> None:
        """Label a graph saved before labels existed (once: persisted at the next flush)."""
        logger.info("labelling %d vectors of a graph saved without labels", vs.n)
        vs.labels = VectorLabels.of(self._metas(self._store, vs.ids[: vs.n]))
        vs.dirty = True

    def _persist(self, generation: int) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        entries: dict[str, Any] = {}
        old = self._read_state() or {}
        for name, vs in self._spaces.items():
            if vs.mode == "exact":
                entries[name] = {"mode": "exact", "dim": vs.dim}
                continue
            prev = old.get("spaces", {}).get(name, {})
            if not vs.dirty and prev.get("mode") == "hnsw":
                entries[name] = prev
                continue
            folder = f"{_safe(name)}-{generation}-{os.getpid()}-{vs.version}"
            vs.save(self.directory / folder)
            entries[name] = {"mode": "hnsw", "dim": vs.dim, "folder": folder, **vs.built_params()}
        tmp = self.directory / (_STATE_FILE + ".tmp")
        tmp.write_text(json.dumps({"generation": generation, "spaces": entries}), encoding="utf-8")
        os.replace(tmp, self.directory / _STATE_FILE)
        keep = {e.get("folder") for e in entries.values()}
        for child in self.directory.iterdir():
            if child.is_dir() and child.name not in keep:
                shutil.rmtree(child, ignore_errors=True)
        self._unpersisted_flushes = 0

    # -- DerivedIndex ---------------------------------------------------------------------------

    def durable_generation(self) -> int | None:
        return self._durable

    def apply(self, store: SqliteKnowledgeStore, changes: Sequence[IndexChange]) -> None:
        # Replaced documents are re-read whole; vectors added to pending chunks by rowid.
        doc_ids, old, embedded = split_changes(changes, "vectors")
        with self._lock:
            current: dict[str, list[tuple[Ids, Vectors]]] = {}
            if doc_ids:
                for space in store.vector_spaces():
                    current[space] = list(store.iter_vectors(space, doc_ids))
            for space, batch in store.vectors_by_rowids(embedded).items():
                current.setdefault(space, []).append(batch)
            for vs in self._spaces.values():
                vs.remove(old)
            for space, batches in current.items():
                for ids, vectors in batches:
                    target = self._spaces.get(space)
                    if target is None:
                        target = VectorSpace(vectors.shape[1], **self._opts)
                        self._spaces[space] = target
                    target.add(ids, vectors, self._metas(store, ids))
            self._selections.clear()

    def flush(self, generation: int, *, durable: bool) -> None:
        with self._lock:
            self._unpersisted_flushes += 1
            dirty = any(s.dirty for s in self._spaces.values() if s.mode == "hnsw")
            if durable or (dirty and self._unpersisted_flushes >= self._persist_every):
                # Durable flushes also record mode changes (an HNSW space compacted to exact).
                self._persist(generation)
                dirty = False
            if not dirty:
                self._durable = generation

    def rebuild(self, store: SqliteKnowledgeStore, generation: int) -> None:
        with self._lock:
            self._spaces.clear()
            for space in store.vector_spaces():
                self._load_from_store(space)
            self._selections.clear()
            self._persist(generation)
            self._durable = generation

    def attached(self, store: SqliteKnowledgeStore) -> None:
        """Nothing to do: each space labels its vectors when it is loaded."""

    def close(self) -> None:
        with self._lock:
            self._spaces.clear()
            self._selections.clear()

    # -- search ---------------------------------------------------------------------------------

    def spaces(self) -> list[str]:
        with self._lock:
            return [name for name, vs in self._spaces.items() if vs.live_count]

    def space(self, name: str) -> VectorSpace | None:
        return self._spaces.get(name)

    def count(self, space: str | None = None) -> int:
        with self._lock:
            if space is not None:
                vs = self._spaces.get(space)
                return 0 if vs is None else vs.live_count
            return sum(vs.live_count for vs in self._spaces.values())

    def search(
        self, space: str, query: Vectors, k: int, *, scope: Scope
    ) -> list[tuple[int, float]]:
        """Top ``k`` chunks of ``space`` by inner product that ``scope`` may read."""
        with self._lock:
            vs = self._spaces.get(space)
            if vs is None:
                return []
            # keyed by what decides the readable set: privileged callers share one entry
            sel_key = (space, vs.version, *scope.key)
            sel = self._selections.get(sel_key)
            if sel is None:
                sel = vs.select_labels(scope)
                self._selections[sel_key] = sel
                while len(self._selections) > self._cache_size:
                    self._selections.popitem(last=False)
            return vs.search(query, k, sel)

    def similarities(self, space: str, query: Vectors, rowids: Sequence[int]) -> dict[int, float]:
        """Inner products of ``query`` with the stored vectors of ``rowids`` in ``space`` (those
        that have one), from memory. No permission check: pass rowids the caller may read
        (hybrid search scores keyword candidates that the vector top list missed)."""
        with self._lock:
            vs = self._spaces.get(space)
            if vs is None:
                return {}
            found = [(r, p) for r in rowids if (p := vs.pos.get(int(r))) is not None]
            if not found:
                return {}
            positions = np.fromiter((p for _, p in found), dtype=np.int64, count=len(found))
            if vs.hnsw is None:
                matrix = vs.matrix[positions]
            else:
                matrix = vs.hnsw.reconstruct_batch(positions)
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(-1)
        sims = _inner_products(matrix, q).tolist()  # on this thread, not OpenBLAS's
        return {r: float(x) for (r, _), x in zip(found, sims, strict=True)}


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in name) or "space"
