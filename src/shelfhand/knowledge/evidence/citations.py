"""Numbered evidence: search hits → ``[1] …`` passages and structured citations (docs/design.md R9)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from shelfhand.core.messages import Citation
from shelfhand.knowledge.analysis import in_chinese
from shelfhand.knowledge.evidence.compress import compress_citation
from shelfhand.knowledge.evidence.conflicts import DISAGREE_ZH, annotate_conflicts, find_conflicts
from shelfhand.knowledge.types import SearchHit

NOTHING_FOUND = (
    "No relevant passages were found in the knowledge base. Tell the user the documents do not "
    "cover this instead of guessing."
)


def to_citations(hits: Sequence[SearchHit], *, start: int = 1) -> list[Citation]:
    """One citation per hit, numbered from ``start``."""
    return [
        Citation(
            index=start + i,
            source=h.chunk.source,
            title=h.chunk.title,
            section=h.chunk.section,
            page=h.chunk.page,
            doc_id=h.chunk.doc_id,
            chunk_id=h.chunk.chunk_id,
            text=h.chunk.text,
            score=h.score,
            relevance=h.relevance,
            cosine=h.cosine,
            start=h.chunk.start,
            end=h.chunk.end,
        )
        for i, h in enumerate(hits)
    ]


def prepare_evidence(
    citations: Sequence[Citation],
    query: str,
    *,
    earlier: Sequence[Citation] = (),
    compress_tokens: int | None = None,
    context: Sequence[Citation] = (),
) -> list[Citation]:
    """Numbered ``citations`` made ready to show: disagreements flagged (the notes in Chinese
    for a ``query`` in Chinese), then (with ``compress_tokens``) each passage cut to the
    sentences that answer ``query``.

    Conflicts are looked for among ``citations`` and between them and ``earlier`` passages
    of the same run (full text, before compression); only ``citations`` are returned. A
    compressed passage keeps the sentences holding the values its conflicts name.
    ``context`` passages of the same documents only tell their versions and effective dates.
    """
    current = {c.index for c in citations}
    pool = [*citations, *(c for c in earlier if c.index not in current)]
    conflicts = [
        x for x in find_conflicts(pool, context=context) if x.a in current or x.b in current
    ]
    out = annotate_conflicts(citations, conflicts, chinese=bool(conflicts) and in_chinese(query))
    if compress_tokens is None:
        return out
    compressed = []
    for c in out:
        pinned = [
            value
            for x in conflicts
            if c.index in (x.a, x.b)
            for pair in x.values
            for side in pair
            for value in side.split(", ")
        ]
        compressed.append(compress_citation(c, query, tokens=compress_tokens, pinned=pinned))
    return compressed


_WORD_RE = re.compile(r"[^\W_]+")
_CJK_RUN_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]{2,}")


def _first_match(text: str, query: str) -> tuple[int, int] | None:
    """Where ``text`` first holds a term of ``query`` (a word of two or more letters, or two
    Chinese characters of a run), as (start, end); ``None`` when it holds none."""
    folded = text.casefold()
    terms = {w for w in _WORD_RE.findall(query.casefold()) if len(w) >= 2}
    for run in _CJK_RUN_RE.findall(query):
        terms.update(run[i : i + 2] for i in range(len(run) - 1))
    found = [(folded.find(t), t) for t in terms]
    hits = [(at, at + len(t)) for at, t in found if at >= 0]
    return min(hits) if hits else None


def excerpt(text: str, max_chars: int, query: str | None = None) -> str:
    """``text`` cut to about ``max_chars``: its start, or (with ``query``) a window centred
    on the first matched term when that lies beyond the start, marked with "…"."""
    if len(text) <= max_chars:
        return text
    match = _first_match(text, query) if query else None
    if match is None or match[1] <= max_chars - 20:
        return text[:max_chars].rstrip() + " …"
    start = max(0, (match[0] + match[1]) // 2 - max_chars // 2)
    space = text.rfind(" ", max(0, start - 20), start + 1)  # begin at a word when one is near
    start = space + 1 if space >= 0 else start
    end = min(len(text), start + max_chars)
    shown = text[start:end].strip()
    return f"{'… ' if start > 0 else ''}{shown}{' …' if end < len(text) else ''}"


def label(c: Citation) -> str:
    """``title › section (source, p. 3)`` — how a citation is shown to people and models."""
    where = c.title or c.source
    section = c.section
    if c.title and section.startswith(c.title):
        section = section[len(c.title) :].lstrip(" >")
    if section:
        where += f" › {section}"
    origin = c.source
    if c.page is not None:
        origin += f", p. {c.page}"
    return f"{where} ({origin})"


def conflict_notes(citations: Sequence[Citation]) -> list[str]:
    """The disagreements flagged on ``citations`` (see :mod:`shelfhand.knowledge.evidence.conflicts`),
    each once, as ``Note: [2] and [4] disagree: …`` lines (``注意：[2] 与 [4] 不一致：…``)."""
    notes: dict[str, None] = {}
    for c in citations:
        for line in c.conflict_note.splitlines():
            if line.strip():
                lead = NOTE_ZH if DISAGREE_ZH in line else NOTE
                notes.setdefault(f"{lead}{line.strip()}", None)
    return list(notes)


NOTE = "Note: "
"""What a disagreement's line opens with (:func:`conflict_notes`)."""
NOTE_ZH = "注意："
""":data:`NOTE` for a note in Chinese."""


def format_passages(
    citations: Sequence[Citation], *, max_chars: int = 1200, query: str | None = None
) -> str:
    """The numbered passages as the model (or a person) reads them, then a ``Note:`` line
    for each disagreement flagged on them.

    Args:
        max_chars: A longer passage is shown in part: from its start, or with ``query``
            around the first place it holds one of the query's terms, so the reader sees why
            it matched.
    """
    if not citations:
        return NOTHING_FOUND
    blocks = []
    for c in citations:
        blocks.append(f"[{c.index}] {label(c)}\n{excerpt(c.text, max_chars, query)}")
    notes = conflict_notes(citations)
    if notes:
        blocks.append("\n".join(notes))
    return "\n\n".join(blocks)
