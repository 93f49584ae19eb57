"""Chunking: split a :class:`Document` into retrievable :class:`Chunk` values (docs/design.md R2).

Structure first: every section is chunked on its own (so a chunk never spans two sections or
two PDF pages), a section is cut into paragraphs (blank lines), paragraphs into sentences
(``. ! ? ;``, Chinese ``。！？；…`` and newlines, punctuation kept), and only a sentence longer
than the budget is cut inside, at token boundaries. Sentences are packed greedily up to
``max_tokens``; a paragraph that would not fit in what is left of a half-full chunk starts a new
one. Each new chunk of a section repeats the trailing sentences of the previous chunk, up to
``overlap_tokens``, so a fact cut at a boundary is still whole in one of them.

Offsets: ``chunk.text == doc.text[chunk.start:chunk.end]`` exactly. A chunk is a slice of its
section's text (from the first character of its first sentence to the last of its last
sentence), and ``Section.start`` places the section in ``Document.text``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator

from shelfhand.core.errors import InvalidArgumentError
from shelfhand.core.tokens import RUN_CHARS_PER_TOKEN, TOKEN_RE, count_tokens
from shelfhand.knowledge.types import Chunk, Document

__all__ = ["chunk_document", "count_tokens", "iter_chunks"]

_PARAGRAPH_BREAK_RE = re.compile(r"\n[ \t]*\n\s*")
_SENTENCE_END_RE = re.compile(
    r"[。！？；…]+[”’」』）)\]\"']*"  # Chinese ends need no space after them
    # "3.5" and "v2.1" are not sentence ends; tried from a run's first mark only, taken whole
    # (from each mark of a run not followed by a space, "….x", it was quadratic: 85 s to
    # ingest a line of 80,000 dots)
    r"|(?<![.!?;])[.!?;]++[\"'”’)\]]*(?=\s|$)"
    r"|\n"
)


def chunk_document(
    doc: Document, *, max_tokens: int = 400, overlap_tokens: int = 40
) -> list[Chunk]:
    """Split ``doc`` into chunks of at most ``max_tokens`` tokens (see :func:`count_tokens`).

    Args:
        doc: The document; its sections are chunked one by one.
        max_tokens: Budget per chunk. Every chunk satisfies
            ``count_tokens(chunk.text) <= max_tokens``.
        overlap_tokens: How many tokens of whole trailing sentences of a chunk may be repeated
            at the start of the next chunk of the same section (``0`` turns overlap off).

    Returns:
        Chunks in document order, ``chunk_id = f"{doc.doc_id}::{index}"``, carrying the
        document's metadata and their section path and page. Deterministic: the same document
        always gives the same ids, texts, offsets and hashes.

    Raises:
        ValueError: ``max_tokens < 1`` or ``overlap_tokens`` is negative or not below
            ``max_tokens``.
    """
    return list(iter_chunks(doc, max_tokens=max_tokens, overlap_tokens=overlap_tokens))


def iter_chunks(
    doc: Document, *, max_tokens: int = 400, overlap_tokens: int = 40
) -> Iterator[Chunk]:
    """The chunks of :func:`chunk_document`, one at a time: a big document is chunked as it is
    stored, section by section, instead of all at once.

    Raises:
        ValueError: As :func:`chunk_document` (on the first ``next``).
    """
    if max_tokens < 1:
        raise InvalidArgumentError(f"max_tokens must be at least 1, got {max_tokens}")
    if not 0 <= overlap_tokens < max_tokens:
        raise InvalidArgumentError(
            f"overlap_tokens must be in [0, max_tokens), got {overlap_tokens}"
        )
    index = 0
    for section in doc.sections:
        for start, end in _section_spans(section.text, max_tokens, overlap_tokens):
            text = section.text[start:end]
            yield (
                Chunk(
                    chunk_id=f"{doc.doc_id}::{index}",
                    doc_id=doc.doc_id,
                    chunk_index=index,
                    text=text,
                    title=doc.title,
                    section_path=section.section_path,
                    page=section.page,
                    source=doc.source,
                    start=section.start + start,
                    end=section.start + end,
                    content_hash=hashlib.sha256(text.encode("utf-8")).hexdigest(),
                    doc_type=doc.doc_type,
                    permission_tags=doc.permission_tags,
                    tenant_id=doc.tenant_id,
                    updated_at=doc.updated_at,
                )
            )
            index += 1


# A unit is one sentence (or one piece of an over-long sentence): start, end, tokens, paragraph.
_Unit = tuple[int, int, int, int]


def _section_spans(text: str, max_tokens: int, overlap_tokens: int) -> list[tuple[int, int]]:
    start, end = _strip(text, 0, len(text))
    if start == end:
        return []
    # The common case, a whole short section. (Counting a huge section at once would hold a
    # tuple per token of it: ~20 bytes per character at peak; the loop below is exact anyway.)
    if len(text) <= 16 * max_tokens and count_tokens(text) <= max_tokens:
        return [(start, end)]
    units, paragraph_tokens = _units(text, max_tokens)
    spans: list[tuple[int, int]] = []
    current: list[int] = []  # indexes into units
    used = 0
    for index, (_s, _e, tokens, paragraph) in enumerate(units):
        if current:
            starts_paragraph = paragraph != units[current[-1]][3]
            full = used + tokens > max_tokens
            # Prefer to start a paragraph that fits whole in a fresh chunk, once this one is
            # at least half full; otherwise keep filling sentence by sentence.
            early = (
                starts_paragraph
                and used * 2 >= max_tokens
                and used + paragraph_tokens[paragraph] > max_tokens
            )
            if full or early:
                spans.append((units[current[0]][0], units[current[-1]][1]))
                current, used = _overlap(units, current, tokens, max_tokens, overlap_tokens)
        current.append(index)
        used += tokens
    spans.append((units[current[0]][0], units[current[-1]][1]))
    return spans


def _overlap(
    units: list[_Unit], previous: list[int], next_tokens: int, max_tokens: int, overlap: int
) -> tuple[list[int], int]:
    """Trailing sentences of ``previous`` to repeat, never all of it, leaving room for the next."""
    kept: list[int] = []
    used = 0
    for index in reversed(previous[1:]):
        tokens = units[index][2]
        if used + tokens > overlap or used + tokens + next_tokens > max_tokens:
            break
        kept.append(index)
        used += tokens
    kept.reverse()
    return kept, used


def _units(text: str, max_tokens: int) -> tuple[list[_Unit], list[int]]:
    units: list[_Unit] = []
    paragraph_tokens: list[int] = []
    paragraph_start = 0
    bounds = [m.span() for m in _PARAGRAPH_BREAK_RE.finditer(text)] + [(len(text), len(text))]
    for paragraph_end, next_start in bounds:
        paragraph = len(paragraph_tokens)
        total = 0
        for s, e in _sentences(text, paragraph_start, paragraph_end):
            tokens = count_tokens(text[s:e])
            pieces = (
                [(s, e, tokens)] if tokens <= max_tokens else _hard_split(text, s, e, max_tokens)
            )
            for ps, pe, pt in pieces:
                units.append((ps, pe, pt, paragraph))
                total += pt
        paragraph_tokens.append(total)
        paragraph_start = next_start
    return units, paragraph_tokens


def _sentences(text: str, start: int, end: int) -> list[tuple[int, int]]:
    spans = []
    cursor = start
    for match in _SENTENCE_END_RE.finditer(text, start, end):
        spans.append(_strip(text, cursor, match.end()))
        cursor = match.end()
    spans.append(_strip(text, cursor, end))
    return [(s, e) for s, e in spans if s < e]


def _hard_split(text: str, start: int, end: int, max_tokens: int) -> list[tuple[int, int, int]]:
    """Cut an over-long sentence at token boundaries; a giant run of letters is cut every
    ``4 * max_tokens`` characters so that no piece exceeds the budget."""
    pieces: list[tuple[int, int, int]] = []
    piece_start = piece_end = start
    used = 0
    for match in TOKEN_RE.finditer(text, start, end):
        run = match.group(2)
        tokens = -(-len(run) // RUN_CHARS_PER_TOKEN) if run else 1
        if used and used + tokens > max_tokens:
            pieces.append((piece_start, piece_end, used))
            used = 0
        if not used:
            piece_start = match.start()
        if tokens > max_tokens:
            step = max_tokens * RUN_CHARS_PER_TOKEN
            cut = match.start()
            while match.end() - cut > step:
                pieces.append((cut, cut + step, max_tokens))
                cut += step
            piece_start, tokens = cut, -(-(match.end() - cut) // RUN_CHARS_PER_TOKEN)
        used += tokens
        piece_end = match.end()
    if used:
        pieces.append((piece_start, piece_end, used))
    return pieces


def _strip(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end
