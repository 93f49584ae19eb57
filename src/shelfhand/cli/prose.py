"""Text for a terminal, wrapped the way Chinese is written.

rich wraps at spaces only: a Chinese sentence is one "word" to it, so a list item
``- 锣鼓经是大陆传统器乐……`` was printed as ``-`` alone on a line with the sentence folded
under it, and a line could start with ``，`` or ``。``. :class:`Prose` breaks between any two
Chinese characters, at spaces in other text, never before closing punctuation (the character
before it moves down with it), and indents a list item's or a citation's continuation lines
under its text."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.segment import Segment

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions

__all__ = ["Prose", "wrap"]

_WIDE = (
    "\u1100-\u115f\u2e80-\u303f\u3040-\ua4cf\uac00-\ud7a3\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef"
)
_TOKEN = re.compile(rf"\s+|[{_WIDE}]|[^\s{_WIDE}]+")
"""A run of spaces, one wide (Chinese, Japanese, Korean, full-width) character, or a word."""
NO_START = frozenset("，。、；：？！）」』】》〉〕…—”’,.;:?!)]}%")
"""Characters a line does not start with: they close what comes before them."""
_ITEM = re.compile(r"[ \t]*(?:[-*•]|\d{1,3}[.)、]|\[\d{1,4}\])[ \t]+(?=\S)")
"""A list item's or a citation's mark: the lines it wraps to are indented under its text."""
LEAST_WIDTH = 8


def wrap(line: str, width: int) -> list[str]:
    """``line`` (no line break in it) as lines of at most ``width`` terminal cells."""
    width = max(width, LEAST_WIDTH)
    if cell_len(line) <= width:
        return [line]
    item = _ITEM.match(line)
    mark = item.group() if item else ""
    indent = " " * cell_len(mark) if cell_len(mark) <= width // 2 else ""
    lines: list[str] = []
    current: list[str] = [mark] if mark else []
    used = cell_len(mark)
    start = len(current)  # tokens before this are the line's mark or indent

    def close() -> None:
        nonlocal current, used, start
        lines.append("".join(current).rstrip())
        current, used = ([indent] if indent else []), len(indent)
        start = len(current)

    for token in _TOKEN.findall(line[len(mark) :]):
        size = cell_len(token)
        if token.isspace():
            if len(current) > start and used + size <= width:
                current.append(token)
                used += size
            elif len(current) > start:
                close()  # a space at the end of a line is dropped with the break
            continue
        if used + size <= width:
            current.append(token)
            used += size
            continue
        if size > width - len(indent):  # a word longer than a line: cut where the line ends
            for ch in token:
                if used + cell_len(ch) > width and len(current) > start:
                    close()
                current.append(ch)
                used += cell_len(ch)
            continue
        carried: list[str] = []
        if (
            token[0] in NO_START
            and len(current) > start + 1
            and not current[-1].isspace()
            and len(indent) + cell_len(current[-1]) + size <= width
        ):
            carried.append(current.pop())  # "，" does not start a line: "声，" moves down
        close()
        for piece in (*carried, token):
            current.append(piece)
            used += cell_len(piece)
    if len(current) > start or not lines:
        lines.append("".join(current).rstrip())
    return lines


class Prose:
    """``text`` printed with :func:`wrap` to the console's width (``style``: a rich style)."""

    def __init__(self, text: str, style: str = "") -> None:
        self.text = text
        self.style = style

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        style = console.get_style(self.style) if self.style else None
        for raw in self.text.split("\n"):
            for line in wrap(raw, options.max_width):
                yield Segment(line, style)
                yield Segment.line()
