"""Cleaning text extracted from PDF pages: repeated headers and footers, page numbers, and
lines broken mid-sentence (English and Chinese)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

__all__ = ["clean_pdf_pages"]

_CJK_CHARS = "\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
_CJK_RE = re.compile(f"[{_CJK_CHARS}]")
_PAGE_NUMBER_RE = re.compile(
    r"^(?:[-–—]?\s*\d+\s*[-–—]?"
    r"|\d+\s*/\s*\d+"
    r"|(?:page|p\.|pg\.?)\s*\d+(?:\s*(?:of|/)\s*\d+)?"
    r"|第\s*\d+\s*页(?:\s*[,，/／]?\s*共\s*\d+\s*页)?"
    r"|\d+\s*页)$",
    re.IGNORECASE,
)
_LIST_START_RE = re.compile(
    r"^(?:[-*•·▪●◦]\s|\d{1,2}[.)、]\s?|[（(]\d{1,2}[)）]|step\s+\d|步骤)", re.I
)
_SENTENCE_END = tuple(".!?:;。！？：；")
_EDGE_LINES = 2  # how many lines at the top and bottom of a page may be header or footer


def _shape(line: str) -> str:
    """A line with its numbers blanked, so "Manual · 2" and "Manual · 3" compare equal."""
    return re.sub(r"\d+", "#", " ".join(line.lower().split()))


def clean_pdf_pages(pages: Sequence[str]) -> list[str]:
    """Clean text extracted from PDF pages (one string per page, same length out).

    Removes header and footer lines repeated at the top or bottom of most pages and bare page
    numbers ("3", "- 3 -", "Page 3 of 9", "第 3 页"), then rejoins lines broken mid-sentence:
    English line-end hyphens are removed, CJK lines are joined without a space, other lines
    with one space. Lines that start a list item or follow a sentence end stay separate.
    """
    page_lines = [[ln.strip() for ln in page.split("\n") if ln.strip()] for page in pages]
    repeated_top: set[str] = set()
    repeated_bottom: set[str] = set()
    if len(page_lines) >= 2:
        threshold = max(2, len(page_lines) // 2 + 1)
        top = Counter(s for lines in page_lines for s in {_shape(x) for x in lines[:_EDGE_LINES]})
        bottom = Counter(
            s for lines in page_lines for s in {_shape(x) for x in lines[-_EDGE_LINES:]}
        )
        repeated_top = {s for s, n in top.items() if n >= threshold}
        repeated_bottom = {s for s, n in bottom.items() if n >= threshold}
    cleaned: list[str] = []
    for lines in page_lines:
        body = list(lines)
        for _ in range(_EDGE_LINES + 1):
            if body and (_PAGE_NUMBER_RE.match(body[0]) or _shape(body[0]) in repeated_top):
                body.pop(0)
            if body and (_PAGE_NUMBER_RE.match(body[-1]) or _shape(body[-1]) in repeated_bottom):
                body.pop()
        cleaned.append(_join_lines(body))
    return cleaned


def _width(line: str) -> int:
    return len(line) + len(_CJK_RE.findall(line))  # CJK glyphs are about twice as wide


def _join_lines(lines: list[str]) -> str:
    if not lines:
        return ""
    full = max(_width(line) for line in lines)
    out: list[str] = []
    wrapped = False  # whether the previous physical line ran (nearly) to the right margin
    for line in lines:
        prev = out[-1] if out else ""
        if not prev or _LIST_START_RE.match(line) or prev.endswith(_SENTENCE_END):
            out.append(line)
        elif prev.endswith("-") and len(prev) > 1 and prev[-2].isalpha() and line[0].isalnum():
            # "replace-" + "ment" is one word; "E-" + "203" keeps its hyphen.
            out[-1] = (prev[:-1] if line[0].islower() else prev) + line
        elif line[0].islower() or prev.endswith((",", "，", "、", "(", "（")) or wrapped:
            cjk_join = _CJK_RE.match(prev[-1]) and _CJK_RE.match(line[0])
            out[-1] = prev + ("" if cjk_join else " ") + line
        else:
            out.append(line)
        wrapped = _width(line) >= 0.75 * full
    return "\n".join(out)
