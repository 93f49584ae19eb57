"""Who may read each vector of a space, or each chunk of the keyword index: the permission
filter inside the indexes.

A :class:`~shelfhand.knowledge.stores.faiss.VectorSpace` keeps, per position, its chunk's tenant,
doc type and source as codes into small per-space dictionaries, and its permission tags as
bits. A caller's readable positions are then a few numpy comparisons over these columns
(milliseconds at 1M vectors) instead of a query of the SQLite chunk table, which read the whole
table (0.65-0.9 s at 100k chunks here, docs/benchmarks/history.md "The embedded store at 1M chunks") on every
caller's first search after each change of the store.

The keyword index keeps the same labels with the chunk rowid as the position
(:class:`~shelfhand.knowledge.stores.tantivy.TantivyKeywordIndex`): it checks the few hits of its
unfiltered ranking with :meth:`VectorLabels.allows` instead of a second tantivy query.

The rule is :class:`~shelfhand.knowledge.types.Scope`'s: same tenant, and no permission tags
or one among the caller's roles, or a privileged role; then the doc-type and source filters.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from shelfhand.knowledge.types import Scope

logger = logging.getLogger(__name__)

__all__ = ["ChunkMeta", "RowLabels", "VectorLabels"]

ChunkMeta = tuple[str, tuple[str, ...], str, str]
"""``(tenant_id, permission_tags, doc_type, source)`` of a chunk."""

Codes = npt.NDArray[np.int32]
Mask = npt.NDArray[np.bool_]
_FILE = "labels.npz"
_DICTS = "labels.json"
_STATE = "shelfhand-state.json"
"""Next to a :class:`RowLabels`' files: the generation of the index they reflect."""


def _code(table: dict[str, int], value: str) -> int:
    code = table.get(value)
    if code is None:
        code = table[value] = len(table)
    return code


def _resized(column: Codes, capacity: int) -> Codes:
    out = np.full(capacity, -1, dtype=np.int32)
    keep = min(capacity, len(column))
    out[:keep] = column[:keep]
    return out


class VectorLabels:
    """Per-position tenant, doc type, source and tag bits of one vector space."""

    def __init__(self) -> None:
        self.tenants: dict[str, int] = {}
        self.doc_types: dict[str, int] = {}
        self.sources: dict[str, int] = {}
        self.tags: dict[str, int] = {}
        self.tenant: Codes = np.zeros(0, dtype=np.int32)
        self.doc_type: Codes = np.zeros(0, dtype=np.int32)
        self.source: Codes = np.zeros(0, dtype=np.int32)
        self.tagbits: npt.NDArray[np.uint64] = np.zeros((0, 1), dtype=np.uint64)

    @classmethod
    def of(cls, metas: Sequence[ChunkMeta]) -> VectorLabels:
        """Labels of exactly ``metas``, position by position."""
        labels = cls()
        labels.resize(len(metas))
        labels.set(0, metas)
        return labels

    def resize(self, capacity: int) -> None:
        """Room for ``capacity`` positions; new positions are unlabelled (tenant code -1)."""
        self.tenant = _resized(self.tenant, capacity)
        self.doc_type = _resized(self.doc_type, capacity)
        self.source = _resized(self.source, capacity)
        bits = np.zeros((capacity, self.tagbits.shape[1]), dtype=np.uint64)
        keep = min(capacity, len(self.tagbits))
        bits[:keep] = self.tagbits[:keep]
        self.tagbits = bits

    def set(self, start: int, metas: Sequence[ChunkMeta]) -> None:
        """Label positions ``start`` … ``start + len(metas) - 1`` (within capacity)."""
        self._label(slice(start, start + len(metas)), range(start, start + len(metas)), metas)

    def put(self, positions: Sequence[int], metas: Sequence[ChunkMeta]) -> None:
        """Label ``positions`` (any order), growing the arrays (doubling) to hold them."""
        if not positions:
            return
        top = max(positions) + 1
        if top > len(self.tenant):
            self.resize(max(top, 2 * len(self.tenant), 1024))
        self._label(np.asarray(positions, dtype=np.int64), positions, metas)

    def _label(
        self,
        rows: slice | npt.NDArray[np.int64],
        positions: Sequence[int],
        metas: Sequence[ChunkMeta],
    ) -> None:
        self.tenant[rows] = [_code(self.tenants, m[0]) for m in metas]
        self.doc_type[rows] = [_code(self.doc_types, m[2]) for m in metas]
        self.source[rows] = [_code(self.sources, m[3]) for m in metas]
        self.tagbits[rows] = 0
        for i, meta in zip(positions, metas, strict=True):
            for tag in meta[1]:
                bit = _code(self.tags, tag)
                word = bit // 64
                if word >= self.tagbits.shape[1]:
                    grown = np.zeros((len(self.tagbits), word + 1), dtype=np.uint64)
                    grown[:, : self.tagbits.shape[1]] = self.tagbits
                    self.tagbits = grown
                self.tagbits[i, word] |= np.uint64(1 << (bit % 64))

    def take(self, positions: npt.NDArray[np.int64]) -> VectorLabels:
        """The labels of ``positions``, in that order, as a new object (compaction)."""
        out = VectorLabels()
        out.tenants, out.doc_types = dict(self.tenants), dict(self.doc_types)
        out.sources, out.tags = dict(self.sources), dict(self.tags)
        out.tenant = self.tenant[positions].copy()
        out.doc_type = self.doc_type[positions].copy()
        out.source = self.source[positions].copy()
        out.tagbits = self.tagbits[positions].copy()
        return out

    def mask(self, n: int, scope: Scope) -> Mask:
        """Which of the first ``n`` positions ``scope`` may read (liveness not included)."""
        return self._match(slice(0, n), n, scope)

    def allows(self, positions: Sequence[int], scope: Scope) -> list[bool] | None:
        """Whether ``scope`` may read each of ``positions``; None when one of them is not
        labelled (beyond the arrays, or never :meth:`put`): the caller must ask elsewhere."""
        rows = np.asarray(positions, dtype=np.int64)
        if len(rows) and (rows.min() < 0 or rows.max() >= len(self.tenant)):
            return None
        if len(rows) and bool((self.tenant[rows] < 0).any()):
            return None
        allowed = self._match(rows, len(rows), scope)
        return [bool(a) for a in allowed]

    def _match(self, rows: slice | npt.NDArray[np.int64], n: int, scope: Scope) -> Mask:
        tenant = self.tenants.get(scope.tenant_id)
        if tenant is None:
            return np.zeros(n, dtype=bool)
        mask: Mask = self.tenant[rows] == tenant
        if not scope.privileged:
            bits = self.tagbits[rows]
            readable: Mask = np.logical_not(bits.any(axis=1))  # untagged: public within the tenant
            want = np.zeros(bits.shape[1], dtype=np.uint64)
            for role in scope.roles:
                bit = self.tags.get(role)
                if bit is not None:
                    want[bit // 64] |= np.uint64(1 << (bit % 64))
            if want.any():
                readable |= (bits & want).any(axis=1)
            mask &= readable
        for column, table, values in (
            (self.doc_type, self.doc_types, scope.doc_types),
            (self.source, self.sources, scope.sources),
        ):
            if values is not None:
                codes = [table[v] for v in set(values) if v in table]
                mask &= np.isin(column[rows], np.asarray(codes, dtype=np.int32))
        return mask

    # -- persistence (next to an HNSW graph) ---------------------------------------------------

    def save(self, folder: Path, n: int) -> None:
        np.savez(
            folder / _FILE,
            tenant=self.tenant[:n],
            doc_type=self.doc_type[:n],
            source=self.source[:n],
            tagbits=self.tagbits[:n],
        )
        dicts = {
            "tenants": self.tenants,
            "doc_types": self.doc_types,
            "sources": self.sources,
            "tags": self.tags,
        }
        (folder / _DICTS).write_text(json.dumps(dicts, ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path, n: int | None) -> VectorLabels | None:
        """The labels saved in ``folder`` for ``n`` positions (any number when None); None
        when there are none (a graph saved before labels existed) or they do not fit."""
        if not (folder / _FILE).exists() or not (folder / _DICTS).exists():
            return None
        out = cls()
        dicts: dict[str, Any] = json.loads((folder / _DICTS).read_text(encoding="utf-8"))
        out.tenants, out.doc_types = dict(dicts["tenants"]), dict(dicts["doc_types"])
        out.sources, out.tags = dict(dicts["sources"]), dict(dicts["tags"])
        with np.load(folder / _FILE) as data:
            out.tenant = data["tenant"].astype(np.int32)
            out.doc_type = data["doc_type"].astype(np.int32)
            out.source = data["source"].astype(np.int32)
            out.tagbits = data["tagbits"].astype(np.uint64)
        size = len(out.tenant) if n is None else n
        if not len(out.tenant) == len(out.doc_type) == len(out.source) == len(out.tagbits) == size:
            return None
        return out


class RowLabels:
    """The keyword index's labels, the chunk rowid as the position, as its writing process
    keeps them: saved in ``folder`` with the index generation they reflect, and behind a lock
    (short: never held while text is analysed) since searches read them while ingest adds.

    Args:
        folder: Where they are saved (the index's ``labels`` folder).
        labels: What they hold already (loaded), else none.
    """

    def __init__(self, folder: Path, labels: VectorLabels | None = None) -> None:
        self.folder = folder
        self._labels = VectorLabels() if labels is None else labels
        self._lock = threading.Lock()
        self._dirty = False

    @classmethod
    def load(cls, folder: Path, generation: int) -> RowLabels | None:
        """The labels :meth:`save` left in ``folder`` for ``generation``; None when there are
        none, or they reflect another generation (the index changed after they were saved)."""
        try:
            state = json.loads((folder / _STATE).read_text(encoding="utf-8"))
            if int(state["generation"]) != generation:
                return None
            labels = VectorLabels.load(folder, None)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return None if labels is None else cls(folder, labels)

    @classmethod
    def of_rows(
        cls, folder: Path, batches: Iterable[Sequence[tuple[int, *ChunkMeta]]]
    ) -> RowLabels:
        """Labels from batches of ``(rowid, *meta)`` rows (the store's ``iter_chunk_acl``),
        not saved yet."""
        out = cls(folder)
        n = 0
        for rows in batches:
            out._labels.put([r[0] for r in rows], [(r[1], r[2], r[3], r[4]) for r in rows])
            n += len(rows)
        out._dirty = True
        logger.info("keyword index: labelled %d chunks for the access check", n)
        return out

    def put(self, rowid: int, meta: ChunkMeta) -> None:
        """Label ``rowid`` (a chunk just indexed)."""
        with self._lock:
            self._labels.put([rowid], [meta])
            self._dirty = True

    def allows(self, rowids: Sequence[int], scope: Scope) -> list[bool] | None:
        """:meth:`VectorLabels.allows` of ``rowids``."""
        with self._lock:
            return self._labels.allows(rowids, scope)

    def save(self, generation: int) -> None:
        """Save them, if they changed, as those of ``generation`` (after the index's commit).
        The generation is written last: labels saved halfway are never read."""
        if not self._dirty:
            return
        self.folder.mkdir(exist_ok=True)
        with self._lock:
            (self.folder / _STATE).unlink(missing_ok=True)
            self._labels.save(self.folder, len(self._labels.tenant))
            self._dirty = False
        tmp = self.folder / (_STATE + ".tmp")
        tmp.write_text(json.dumps({"generation": generation}), encoding="utf-8")
        os.replace(tmp, self.folder / _STATE)
