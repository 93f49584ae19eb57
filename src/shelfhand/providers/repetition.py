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
spacing, case and citation marks (``[3]``) are taken away; a block must hold at least
:data:`MIN_BLOCK` bytes so that short lines repeated on purpose (table rows of one word,
"OK.") do not count. Numbers stay: a table's rows, or steps that differ only in a number,
are different text.
"""

from __future__ import annotations

import re

from shelfhand.core.citations import CITATION_MARK

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

_LONG_LINE = 500
"""An unfinished line longer than this has its whole units kept, not read again."""

_ENDINGS = "。！？!?；;："
"""Characters that end a unit wherever they stand (a full stop or a colon ends one before a
space). A colon ends one so that a lead-in written over and over on one line is a loop:
Qwen2.5-Coder-0.5B answered a CMRC 2018 question with "The answer to the user is: " until
``max_tokens`` (1,940 characters, no sentence's end in them)."""
_LAST_CHARACTERS = (*_ENDINGS, ".", ":")
"""What the last unit of an unfinished line ends with when it is a whole sentence."""
_MARKER = re.compile(r"^\s*(?:\d{1,3}[.)、]|[-*•+])\s+")
_SENTENCE_END = re.compile(rf"(?<=[{_ENDINGS}])|(?<=[.:])(?=\s)")
_NOISE = re.compile(r'[\s*_`#>"]+')
_ENDS_UNIT = re.compile(rf"[\n\\.:{_ENDINGS}]")


def _fences(text: str) -> int:
    """How many code fences (Markdown's ```` ``` ```` or ``~~~``) ``text`` holds: odd, it
    ends inside a block of code. Counted anywhere in a line: a constrained reply's answer
    starts its first line after ``{"answer": "``."""
    return text.count("```") + text.count("~~~") if "``" in text or "~~" in text else 0


Unit = tuple[str, int, bool]
"""A unit's compared form, the offset in the whole reply just after it, and whether it ends
its line."""


def _units(text: str, offset: int, fenced: bool, mid_line: bool = False) -> tuple[list[Unit], bool]:
    """The complete units of ``text`` (sentences within lines; ``offset``: where ``text``
    starts in the reply), and whether ``text`` ends inside a block of code; lines of code
    (between fences, ``fenced``: ``text`` starts inside one) are none. ``mid_line``: ``text``
    starts within a line (its first line has no list marker)."""
    units: list[Unit] = []
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
        marker = None if mid_line and number == 0 else _MARKER.match(line)
        if marker is not None:
            body_start += marker.end()
        start = body_start
        for piece in _SENTENCE_END.split(text[body_start:end_of_line]):
            start += len(piece)
            finished = (
                start < end_of_line or complete_line or piece.rstrip().endswith(_LAST_CHARACTERS)
            )
            # without its citation mark: a line said again citing another passage is the
            # same line ("- E-105 Fan failure / 风扇故障 [3]", then [4], [5] ... to max_tokens)
            compared = _NOISE.sub(" ", CITATION_MARK.sub("", piece)).strip().casefold()
            if compared and finished:
                ends_line = not text[start:end_of_line].strip()
                units.append((compared, offset + start, ends_line))
        position = end_of_line + 1
    return units, fenced


def loop_cut(text: str) -> int | None:
    """Where ``text`` should end if it ends in a loop (its last units one block written
    :data:`TIMES` times): just after the loop's first round; ``None`` when it does not."""
    return Repetition().read(text)


def _loop_in(units: list[Unit]) -> int | None:
    """:func:`loop_cut` of the reply whose last units are ``units``."""
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
    """Watches a streamed reply for a loop (see the module docstring).

    Each complete line is read once: its units are kept (those of the last :data:`_TAIL`
    characters), and only the unfinished line (its last :data:`_TAIL` characters) is read
    again at each check, so a long reply costs time in proportion to its length (the whole
    reply was read again at each sentence's end: a second of the event loop for 64,000
    characters, ``bench/long_replies.py``).
    """

    __slots__ = ("_at", "_fenced", "_mid_line", "_rest", "_seen", "_units", "cut")

    def __init__(self) -> None:
        self.cut: int | None = None
        """Where the reply should end (set once a loop is seen)."""
        self._seen = 0  # parts read
        self._rest = ""  # the reply after its last complete line, as written
        self._at = 0  # where ``_rest`` starts in the reply
        self._fenced = False  # whether ``_rest`` starts inside a block of code
        self._mid_line = False  # whether ``_rest`` starts within a line
        self._units: list[Unit] = []  # the complete lines' units, of the reply's end

    def looping(self, piece: str, parts: list[str]) -> bool:
        """Whether the reply so far (``parts``, ending with the new ``piece``) ends in a
        loop; checked only when ``piece`` ends a unit (a newline, a sentence's end)."""
        if self.cut is not None:
            return True
        if not _ENDS_UNIT.search(piece):
            return False
        new = "".join(parts[self._seen :])
        self._seen = len(parts)
        self.cut = self.read(new)
        return self.cut is not None

    def read(self, new: str) -> int | None:
        """Read ``new`` (the reply's next text): where the reply should end if it now ends
        in a loop, else ``None``."""
        # a constrained reply is JSON: its answer's newlines are "\\n" escapes, read as line
        # ends here (the same length, so offsets stay those of the reply)
        rest = self._rest + new
        text = rest.replace("\\n", " \n")
        end = text.rfind("\n") + 1
        if end:
            units, self._fenced = _units(text[:end], self._at, self._fenced, self._mid_line)
            self._keep(units, self._at + end)
            self._rest, text, self._mid_line = rest[end:], text[end:], False
        else:
            self._rest = rest
        # the unfinished line: its last _TAIL characters
        skipped = max(0, len(text) - _TAIL)
        line, _ = _units(text[skipped:], self._at + skipped, self._fenced, self._mid_line)
        found = _loop_in(self._units + line if line else self._units)
        if len(text) > _LONG_LINE and len(line) > 1:
            # a long line (a paragraph): its units but the last (which may still grow) are
            # whole, kept so as not to be read again
            done = line[-2][1]
            self._rest, self._mid_line = self._rest[done - self._at :], True
            self._keep(line[:-1], done)
        return found

    def _keep(self, units: list[Unit], to: int) -> None:
        """Keep ``units``, read up to ``to`` in the reply, with those kept before that end in
        the last :data:`_TAIL` characters."""
        kept = self._units + units
        oldest = to - _TAIL
        first = 0
        while first < len(kept) and kept[first][1] < oldest:
            first += 1
        self._units = kept[first:]
        self._at = to
