"""Context compression: the sentences of a passage that answer the query (issue 13, point 7).

A passage longer than the budget keeps the sentences that share the most terms with the
query, each with its neighbours (the sentence before and after) while the budget allows, in
document order; what is left out is marked "…". Sentences end at ``。！？；`` and
``. ! ? ;`` and at line breaks, so Chinese and English (and mixed) text split alike. Query
terms are lower-cased words, identifiers (``E-203``) and, for Chinese, character pairs.

Offsets stay right: every kept piece is an exact substring of the passage, and the citation's
:attr:`~shelfhand.core.messages.Citation.spans` gives each piece's offsets in the document
text (``document_text[start:end] == piece``). A passage within the budget is left whole.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from shelfhand.core.errors import InvalidArgumentError
from shelfhand.core.messages import Citation
from shelfhand.core.tokens import count_tokens

__all__ = ["DEFAULT_COMPRESS_TOKENS", "GAP", "compress_citation", "keep_spans", "sentence_spans"]

DEFAULT_COMPRESS_TOKENS = 200
"""Tokens kept per passage when compression is on: half a default chunk (400), room for the
answering sentence and its neighbours in both languages."""
GAP = "…"
"""What stands for left-out text."""

_SENTENCE_END = re.compile(r"[。！？；!?;]+[\"'”’)\]）」』]*|\.(?=\s|$)[\"'”’)\]]*|\n")
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'_-]*")
_CJK_RUN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]+")
_STOP = frozenset((
    "the", "a", "an", "of", "to", "in", "on", "for", "and", "or", "is", "are", "be", "by",
    "at", "as", "it", "its", "this", "that", "with", "from", "your", "our", "we", "you", "can",
    "may", "will", "do", "does", "how", "what", "when", "why", "which", "who", "long",
))  # fmt: skip


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each sentence of ``text``, surrounding whitespace left out."""
    spans: list[tuple[int, int]] = []
    ends = [m.end() for m in _SENTENCE_END.finditer(text)]
    pos = 0
    for end in [*ends, len(text)]:
        start, stop = pos, end
        while start < stop and text[start].isspace():
            start += 1
        while stop > start and text[stop - 1].isspace():
            stop -= 1
        if stop > start:
            spans.append((start, stop))
        pos = end
    return spans


def _query_terms(query: str) -> set[str]:
    terms = {w.lower() for w in _WORD.findall(query) if w.lower() not in _STOP}
    for run in _CJK_RUN.findall(query):
        if len(run) == 1:
            terms.add(run)
        terms.update(run[i : i + 2] for i in range(len(run) - 1))
    return terms


def _score(sentence: str, terms: set[str]) -> int:
    lowered = sentence.lower()
    words = {w.lower() for w in _WORD.findall(sentence)}
    return sum(1 for t in terms if (t in words if t.isascii() else t in lowered))


def _prefix_within(text: str, start: int, end: int, budget: int) -> int:
    """The end of the longest prefix of ``text[start:end]`` within ``budget`` tokens."""
    low, high = start, end
    while low < high:
        mid = (low + high + 1) // 2
        if count_tokens(text[start:mid]) <= budget:
            low = mid
        else:
            high = mid - 1
    return low


def keep_spans(
    text: str, query: str, *, tokens: int, pinned: Sequence[str] = ()
) -> list[tuple[int, int]]:
    """The pieces of ``text`` to keep (offsets into ``text``, in order, not touching).

    ``pinned`` strings (e.g. the values a conflict note names) make their sentences rank
    first. Returns ``[(0, len(text))]`` when ``text`` is within ``tokens``.
    """
    if tokens < 1:
        raise InvalidArgumentError(f"the compression budget must be at least 1 token, not {tokens}")
    if count_tokens(text) <= tokens:
        return [(0, len(text))] if text else []
    sentences = sentence_spans(text)
    terms = _query_terms(query)
    scores = [_score(text[s:e], terms) for s, e in sentences]
    for i, (s, e) in enumerate(sentences):
        if any(p and p in text[s:e] for p in pinned):
            scores[i] += 1000
    order = sorted(range(len(sentences)), key=lambda i: (-scores[i], i))
    hits = [i for i in order if scores[i] > 0] or list(range(len(sentences)))
    kept: set[int] = set()
    used = 0

    def take(i: int) -> bool:
        nonlocal used
        if i in kept or not 0 <= i < len(sentences):
            return True
        cost = count_tokens(text[slice(*sentences[i])])
        if used + cost > tokens:
            return False
        kept.add(i)
        used += cost
        return True

    cut: tuple[int, int] | None = None
    for i in hits:
        if not take(i):
            if not kept:  # the best sentence alone is over budget: keep its head
                s, e = sentences[i]
                cut = (s, _prefix_within(text, s, e, tokens))
                break
            continue  # a shorter, weaker hit may still fit
        take(i - 1)
        take(i + 1)
    if cut is not None:
        return [cut] if cut[1] > cut[0] else []
    pieces: list[tuple[int, int]] = []
    for i in sorted(kept):
        s, e = sentences[i]
        if pieces and i - 1 in kept:
            pieces[-1] = (pieces[-1][0], e)  # neighbours: one piece, the text between included
        else:
            pieces.append((s, e))
    return pieces


def compress_citation(
    citation: Citation, query: str, *, tokens: int, pinned: Sequence[str] = ()
) -> Citation:
    """``citation`` with only the sentences that answer ``query`` (see :func:`keep_spans`).

    The new ``text`` is the kept pieces joined with :data:`GAP` where text was left out;
    ``spans`` holds each piece's offsets in the document. A passage within the budget, or
    one whose place in its document is not known (``start`` is ``None``: e.g. from another
    tool), comes back unchanged, so a non-empty ``spans`` always means "compressed".
    """
    if citation.start is None:
        return citation
    text = citation.text
    pieces = keep_spans(text, query, tokens=tokens, pinned=pinned)
    if pieces == [(0, len(text))] or not pieces:
        return citation
    parts: list[str] = []
    if text[: pieces[0][0]].strip():
        parts.append(GAP)
    for n, (s, e) in enumerate(pieces):
        if n:
            parts.append(GAP)
        parts.append(text[s:e])
    if text[pieces[-1][1] :].strip():
        parts.append(GAP)
    spans = tuple((citation.start + s, citation.start + e) for s, e in pieces)
    return replace(citation, text=" ".join(parts), spans=spans)
