"""All vector spaces of a workspace (:class:`VectorIndexes`), a derived index of the embedded
store: each a :class:`~shelfhand.knowledge.stores.faiss.VectorSpace`, searched within the
caller's :class:`~shelfhand.knowledge.types.Scope`.

Persistence: exact spaces are loaded from SQLite (their vectors are the system of record) on
open; HNSW spaces are written under ``directory`` on durable flushes, in a fresh folder that a
small JSON state file then points to (an atomic switch). Changes since the last durable flush are
replayed from the store's outbox after a crash. A caller's selection of readable vectors is
cached per space and scope until the space changes.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shelfhand.core.errors import KnowledgeError
from shelfhand.knowledge.embeddings.router import Vectors
from shelfhand.knowledge.stores.faiss import Ids, Selection, VectorSpace, inner_products
from shelfhand.knowledge.stores.outbox import split_changes
from shelfhand.knowledge.stores.sqlite import IndexChange, SqliteKnowledgeStore
from shelfhand.knowledge.stores.vector_labels import ChunkMeta, VectorLabels
from shelfhand.knowledge.types import Scope

logger = logging.getLogger(__name__)

__all__ = ["VectorIndexes"]

_STATE_FILE = "state.json"


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
        self._selections: OrderedDict[tuple[Any, ...], Selection] = OrderedDict()
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
        # Replaced documents are re-read whole; vectors added to pending chunks by rowid (in
        # their own space), and those added in bridge spaces (in those only: each vector is
        # added once, never again as a tombstone and a copy).
        doc_ids, old, embedded = split_changes(changes, "vectors")
        _, _, bridged = split_changes(changes, "bridge")
        with self._lock:
            current: dict[str, list[tuple[Ids, Vectors]]] = {}
            if doc_ids:
                for space in store.vector_spaces():
                    current[space] = list(store.iter_vectors(space, doc_ids))
            for rowids, own in ((embedded, True), (bridged, False)):
                if rowids:
                    for space, batch in store.vectors_by_rowids(rowids, own=own).items():
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
            found, matrix = vs.stored_vectors(rowids)
        if not found:
            return {}
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(-1)
        sims = inner_products(matrix, q).tolist()  # on this thread, not OpenBLAS's
        return {r: float(x) for r, x in zip(found, sims, strict=True)}


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in name) or "space"
