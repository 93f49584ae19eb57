"""Versions of one document side by side: a hit from "保修政策（第 1 版）" brings the same section of
"保修政策（第 2 版）" along (docs/design.md R8: disagreeing versions are flagged, never silently resolved).

Two documents are versions of each other when their titles (else their file names) are equal
once the version marker is taken off (``第 2 版``, ``v2``, ``version 1.1``, ``rev 3``). When a
search hit comes from such a document, the chunks of the other versions with the same section
headings below the title are put right after it, so the model and the user see every version of
that passage and :mod:`shelfhand.knowledge.evidence.conflicts` can flag what differs. A sibling
replaces the lowest-ranked hit that is neither an exact identifier match nor a sibling, so a
search still returns at most ``k`` hits. Siblings are those the search's
:class:`~shelfhand.knowledge.types.Scope` may read (tenant, roles, doc type and source filters)
and identical passages are skipped; a passage that a newer version holds word for word is
cited from the newest one (a section the new version kept as it was is still in force: it
is not shown as the superseded version's).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import PurePosixPath

from shelfhand.knowledge.analysis import split_version
from shelfhand.knowledge.protocols import KnowledgeStore
from shelfhand.knowledge.types import Chunk, Scope, SearchHit

__all__ = ["add_version_siblings", "version_key"]


@functools.lru_cache(maxsize=4096)
def _named_version(title: str, source: str) -> tuple[tuple[int, ...], str] | None:
    """The version ``title`` (else the file name of ``source``) names and the name without
    its marker (:func:`~shelfhand.knowledge.analysis.split_version`), or ``None``."""
    for text in (title, PurePosixPath(source).stem if source else ""):
        found = split_version(text)
        if found:
            return found
    return None


def version_key(title: str, source: str = "") -> str | None:
    """``title`` (else the file name of ``source``) without its version marker, or ``None``
    when neither names a version: ``"保修政策（第 2 版）"`` → ``"保修政策"``."""
    found = _named_version(title, source)
    return found[1].lower() if found else None


def _version(chunk: Chunk) -> tuple[int, ...]:
    """The version its title (else its file name) names: ``(2,)`` for "保修政策（第 2 版）"."""
    found = _named_version(chunk.title, chunk.source)
    return found[0] if found else ()


def _below_title(chunk: Chunk) -> tuple[str, ...]:
    """The section path without its first heading when that heading is the title."""
    path = chunk.section_path
    return path[1:] if path and path[0] == chunk.title else path


def _siblings(store: KnowledgeStore, chunk: Chunk, scope: Scope) -> Iterable[Chunk]:
    below = _below_title(chunk)
    if not below:  # no section below the title: nothing to match (and no regex to run)
        return ()
    key = version_key(chunk.title, chunk.source)
    if key is None:
        return ()
    found = store.chunks_in_section(scope, below[-1]).values()
    return sorted(
        (
            other
            for other in found
            if other.doc_id != chunk.doc_id
            and _below_title(other) == below
            and version_key(other.title, other.source) == key
        ),
        key=lambda c: (c.source, c.chunk_index),
    )


def add_version_siblings(
    hits: Sequence[SearchHit], store: KnowledgeStore, scope: Scope, k: int
) -> list[SearchHit]:
    """``hits`` with the same section of every other version of a hit's document right after
    it (see the module docstring); at most ``k`` hits."""
    out = list(hits)
    seen = {h.chunk.content_hash for h in out}
    protected = {h.chunk.chunk_id for h in out if h.exact}
    i = 0
    while i < len(out):
        hit = out[i]
        for sibling in _siblings(store, hit.chunk, scope):
            if sibling.content_hash in seen:
                kept = out[i].chunk
                if sibling.content_hash == kept.content_hash and _version(sibling) > _version(kept):
                    # the same words in a newer version: cited from the newest
                    if kept.chunk_id in protected:
                        protected.add(sibling.chunk_id)
                    out[i] = replace(out[i], chunk=sibling)
                continue
            # the lowest hit that is neither exact nor a sibling (nor this one) makes room
            if len(out) >= k:
                drop = next(
                    (
                        j
                        for j in range(len(out) - 1, -1, -1)
                        if j != i and out[j].chunk.chunk_id not in protected
                    ),
                    None,
                )
                if drop is None:
                    break
                seen.discard(out[drop].chunk.content_hash)
                del out[drop]
                if drop < i:
                    i -= 1
            seen.add(sibling.content_hash)
            protected.add(sibling.chunk_id)
            protected.add(hit.chunk.chunk_id)
            out.insert(
                i + 1,
                replace(
                    hit,
                    chunk=sibling,
                    keyword_rank=None,
                    vector_rank=None,
                    exact=False,
                    rerank_score=None,
                ),
            )
            i += 1
        i += 1
    return out[:k]
