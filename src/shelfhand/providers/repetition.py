"""A reply caught in a loop: the same sentence, or the same few sentences, over and over.

Small local models fall into it, mostly in lists. Qwen2.5-Coder-0.5B, asked for twenty
tips, wrote items 5 to 10 as one item with a new number ("5. **Check for Overtemperature**:
If the lens is overtemperature, ...") until ``max_tokens`` cut it, a minute of one CPU
thread for text no one reads. :class:`Repetition` reads the reply as it streams and says when
its last units (sentences, and lines) are one block written three times over; the adapter
then stops the request and keeps one copy of the block. A constrained reply (JSON, see
:mod:`.tool_modes`) is read with its ``\\n`` escapes as line ends.

Lines of code (between Markdown fences) are not read: code repeats lines on purpose
(three calls alike), and a loop inside code only runs to ``max_tokens``, as before.

Units are compared after their list marker (``5.``, ``-``, ``*``), Markdown emphasis,
spacing and case are taken away; a block must hold at least :data:`MIN_BLOCK` bytes so
that short lines repeated on purpose (table rows of one word, "OK.") do not count. Numbers
stay: a table's rows, or steps that differ only in a number, are different text.
"""

from __future__ import annotations

import re

__all__ = ["MIN_BLOCK", "Repetition", "loop_cut"]

MIN_BLOCK = 24
"""The fewest UTF-8 bytes (compared form) a repeated block must hold: 24 letters, or 8
Chinese characters."""

TIMES = 3
"""A block written this many times in a row is a loop."""

MAX_UNITS = 4
"""The most units (sentences) a repeated block may hold."""

_TAIL = 4000
"""How much of the reply's end a check reads (three blocks of the longest kind fit)."""

_ENDINGS = "。！？!?；;"
"""Characters that end a sentence wherever they stand (a full stop ends one before a space)."""
_LAST_CHARACTERS = (*_ENDINGS, ".")
"""What the last unit of an unfinished line ends with when it is a whole sentence."""
_MARKER = re.compile(r"^\s*(?:\d{1,3}[.)、]|[-*•+])\s+")
_SENTENCE_END = re.compile(rf"(?<=[{_ENDINGS}])|(?<=[.])(?=\s)")
_NOISE = re.compile(r"[\s*_`#>]+")
_ENDS_UNIT = re.compile(rf"[\n\\.{_ENDINGS}]")


def _fences(text: str) -> int:
    """How many code fences (Markdown's ```` ``` ```` or ``~~~``) ``text`` holds: odd, it
    ends inside a block of code. Counted anywhere in a line: a constrained reply's answer
    starts its first line after ``{"answer": "``."""
    return text.count("```") + text.count("~~~") if "``" in text or "~~" in text else 0


def _units(text: str, offset: int, fenced: bool) -> list[tuple[str, int, bool]]:
    """The complete units of ``text`` (sentences within lines), each as its compared form,
    the offset in the whole reply just after it (``offset``: where ``text`` starts) and
    whether it ends its line; lines of code (between fences, ``fenced``: ``text`` starts
    inside one) are none."""
    units: list[tuple[str, int, bool]] = []
    position = 0
    lines = text.split("\n")
    for number, line in enumerate(lines):
        end_of_line = position + len(line)
        fences = _fences(line)
        if fenced or fences:
            fenced ^= fences % 2 == 1
            position = end_of_line + 1
            continue
        complete_line = number < len(lines) - 1
        body_start = position
        marker = _MARKER.match(line)
        if marker is not None:
            body_start += marker.end()
        start = body_start
        for piece in _SENTENCE_END.split(text[body_start:end_of_line]):
            start += len(piece)
            finished = (
                start < end_of_line or complete_line or piece.rstrip().endswith(_LAST_CHARACTERS)
            )
            compared = _NOISE.sub(" ", piece).strip().casefold()
            if compared and finished:
                ends_line = not text[start:end_of_line].strip()
                units.append((compared, offset + start, ends_line))
        position = end_of_line + 1
    return units


def loop_cut(text: str) -> int | None:
    """Where ``text`` should end if it ends in a loop (its last units one block written
    :data:`TIMES` times): just after the loop's first round; ``None`` when it does not."""
    offset = max(0, len(text) - _TAIL)
    # a constrained reply is JSON: its answer's newlines are "\\n" escapes, read as line
    # ends here (the same length, so offsets stay those of ``text``)
    window = text[offset:].replace("\\n", " \n")
    # code is not read: lines repeated on purpose (three calls alike) are not a loop
    fenced = _fences(text[:offset]) % 2 == 1
    units = _units(window, offset, fenced)
    for size in range(1, MAX_UNITS + 1):
        if len(units) < TIMES * size:
            break
        block = [unit[0] for unit in units[-size:]]
        if sum(len(u.encode()) for u in block) < MIN_BLOCK:
            continue
        copies = [
            [unit[0] for unit in units[len(units) - (i + 1) * size : len(units) - i * size]]
            for i in range(TIMES)
        ]
        if all(copy == block for copy in copies):
            # the loop may have begun earlier, or mid-block (an item's second sentence):
            # walk back to where it began and keep its first round whole, to the end of a
            # line when one ends within the next round (a list item kept whole)
            start = len(units) - TIMES * size
            while start > 0 and units[start - 1][0] == units[start - 1 + size][0]:
                start -= 1
            last = start + size - 1
            for index in range(last, last + size):
                if units[index][2]:
                    return units[index][1]
            return units[last][1]
    return None


class Repetition:
    """Watches a streamed reply for a loop (see the module docstring)."""

    __slots__ = ("cut",)

    def __init__(self) -> None:
        self.cut: int | None = None
        """Where the reply should end (set once a loop is seen)."""

    def looping(self, piece: str, parts: list[str]) -> bool:
        """Whether the reply so far (``parts``, ending with the new ``piece``) ends in a
        loop; checked only when ``piece`` ends a unit (a newline, a sentence's end)."""
        if self.cut is not None:
            return True
        if not _ENDS_UNIT.search(piece):
            return False
        self.cut = loop_cut("".join(parts))
        return self.cut is not None
