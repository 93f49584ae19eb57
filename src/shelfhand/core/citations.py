"""One citation numbering per run (docs/design.md R9).

Every passage shown to the model during one agent run gets a number from the run's
:class:`CitationLedger`: the first passage is ``[1]``, a second ``retrieve`` call goes on from
where the first stopped, and a chunk that comes back again keeps the number it was first given.
The ledger lives on the :class:`~shelfhand.core.context.RunContext`, so two runs (even of the
same agent, at the same time) never share numbers.

:func:`cited_numbers` reads the ``[n]`` markers back out of an answer, so that numbers the model
cited but was never given can be flagged instead of rendered as links.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import replace

from shelfhand.core.messages import Citation

__all__ = [
    "CITATION_MARK",
    "CitationLedger",
    "announces_only",
    "cited_numbers",
    "number_here",
    "only_marks",
    "points_only",
    "renumber_markers",
    "renumber_passages",
    "unknown_citations",
]

CITATION_MARK = re.compile(r"\[(\d{1,3})\]")
"""One ``[n]`` citation mark as an answer writes it (its number captured): what the grounding
check takes out of a sentence before reading its words, and the loop guard before comparing
lines (:mod:`shelfhand.providers.repetition`)."""

# [1], [1][2], [1, 2], [1，2], 【1】, ［1］ — a bracket holding only numbers
_MARKER = re.compile(r"[\[［【]\s*(\d{1,6}(?:\s*[,，、;；]\s*\d{1,6})*)\s*[\]］】]")
_NUMBER = re.compile(r"\d+")
# code is not prose: ``a[0]`` in a snippet is not a citation
_CODE = re.compile(r"```.*?(?:```|\Z)|`[^`\n]*`", re.DOTALL)


def cited_numbers(text: str) -> tuple[int, ...]:
    """The citation numbers ``text`` uses, in order of first use (code spans ignored)."""
    if "[" not in text and "［" not in text and "【" not in text:
        return ()  # most answers of tool runs: no marker at all, no regex work
    seen: dict[int, None] = {}
    for marker in _MARKER.finditer(_CODE.sub(" ", text)):
        for number in _NUMBER.findall(marker.group(1)):
            seen.setdefault(int(number), None)
    return tuple(seen)


_NO_WORDS = re.compile(r"[\s`'\"()（）\[\]［］【】.,，。、;；:：!！?？-]*")


def only_marks(text: str) -> bool:
    """Whether ``text`` holds citation markers and nothing else to read (``[1][2]``, maybe
    fenced or with punctuation around): a reply that answers with no words. Small models
    send it after a search, or before any."""
    if "[" not in text and "［" not in text and "【" not in text:
        return False
    rest = _MARKER.sub("", text)
    return rest != text and _NO_WORDS.fullmatch(rest) is not None


def announces_only(text: str) -> bool:
    """Whether ``text`` is one short line, no sentence ending in it, that ends with a colon,
    announcing an answer that does not follow ("The answer to the user is:", "答案是：", maybe with citation markers):
    Qwen2.5-Coder-0.5B wrote "The answer to the user is: " until its reply was stopped as a
    loop, and one round of it was all the answer held."""
    line = _MARKER.sub("", text).strip()
    return (
        line.endswith((":", "："))
        and len(line) <= ANNOUNCING_CHARS
        and "\n" not in line
        and not _SENTENCE_END.search(line)
    )


def points_only(text: str) -> bool:
    """Whether ``text`` is one short sentence whose citation markers stand where what it
    says should be, after a word that needs it ("The security hotline is located at
    [1][2].", "保修期是 [1]。"): Qwen2.5-Coder-0.5B pointed at the passages instead of saying
    the extension they give. Not when a sentence came before (its answer), nor for a marker
    after something said ("The hotline is 8110 [1].")."""
    if "[" not in text and "［" not in text and "【" not in text:
        return False
    line = text.strip()
    if "\n" in line or len(line) > ANNOUNCING_CHARS:
        return False
    pointed = _POINTED.search(line)
    return pointed is not None and not _SENTENCE_END.search(line[: pointed.start()])


ANNOUNCING_CHARS = 120
"""The longest line :func:`announces_only` reads as an announcement: a long answer cut by
``max_tokens`` after "例如:" has said something before it."""
_SENTENCE_END = re.compile(r"[。！？!?]|\.(?:\s|$)")
_POINTED = re.compile(
    r"(?:\b(?:at|in|on|is|are|was|were|to|of|for|by|with|from|as|be|the|a|an)|是|为|在|于|[:：])"
    rf"\s*(?:{_MARKER.pattern}\s*)+[.。!！]?\s*$",
    re.IGNORECASE,
)
"""A word that needs what follows it, then only citation markers to the end (see
:func:`points_only`)."""


def _key(c: Citation) -> str:
    # the chunk id names a passage; citations from tools without one are told apart by text
    return c.chunk_id or f"{c.source}\x00{c.section}\x00{c.page}\x00{c.text}"


class CitationLedger:
    """The numbers given out in one run: chunk → number, and the citations behind them.

    Safe to share between the concurrent tool calls of one run (they may run in threads).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[str, Citation] = {}

    def number(self, citations: Iterable[Citation]) -> list[Citation]:
        """``citations`` renumbered for this run: a passage seen before keeps its number,
        a new one gets the next free number. Duplicates within ``citations`` are dropped."""
        out: list[Citation] = []
        taken: set[int] = set()
        with self._lock:
            for c in citations:
                key = _key(c)
                known = self._by_key.get(key)
                if known is None:
                    known = replace(c, index=len(self._by_key) + 1)
                    self._by_key[key] = known
                    taken.add(known.index)
                    out.append(known)  # (c numbered: frozen, so shared, not copied again)
                elif known.index not in taken:
                    taken.add(known.index)
                    out.append(replace(c, index=known.index))
        return out

    @property
    def citations(self) -> tuple[Citation, ...]:
        """Every citation given out so far, by number."""
        with self._lock:
            return tuple(self._by_key.values())

    @property
    def numbers(self) -> frozenset[int]:
        with self._lock:
            return frozenset(c.index for c in self._by_key.values())

    def unknown(self, text: str) -> tuple[int, ...]:
        """Numbers ``text`` cites that this run never gave out (in order of first use)."""
        given = self.numbers
        return tuple(n for n in cited_numbers(text) if n not in given)

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_key)


def unknown_citations(text: str, given: Sequence[Citation]) -> tuple[int, ...]:
    """Numbers ``text`` cites that none of ``given`` carries."""
    cited = cited_numbers(text)
    if not cited:  # most answers: nothing to look up
        return ()
    numbers = {c.index for c in given}
    return tuple(n for n in cited if n not in numbers)


def number_here(
    citations: Sequence[Citation], ledger: CitationLedger
) -> tuple[dict[int, int], tuple[Citation, ...]]:
    """Passages numbered elsewhere (a subagent's run, an MCP server's reply) numbered in
    ``ledger``: their numbers there mapped to their numbers here, and the passages with
    theirs. The disagreements they report follow: ``conflicts_with`` and the markers of
    ``conflict_note`` are renumbered, and a note line naming a passage not among them is
    dropped (kept, its number would name another passage of this run)."""
    numbers: dict[int, int] = {}
    out: list[tuple[Citation, Citation]] = []
    for c in citations:
        # numbered without the disagreements: the ledger keeps passages, not their notes
        reports = bool(c.conflicts_with or c.conflict_note)
        plain = replace(c, conflicts_with=(), conflict_note="") if reports else c
        numbered = ledger.number([plain])
        if numbered:
            numbers[c.index] = numbered[0].index
            out.append((c, numbered[0]))
    return numbers, tuple(
        _renumbered(c, numbers) if c.conflicts_with or c.conflict_note else here for c, here in out
    )


def _renumbered(c: Citation, numbers: dict[int, int]) -> Citation:
    lines = []
    for line in c.conflict_note.splitlines():
        named = [int(n) for m in _MARKER.finditer(line) for n in _NUMBER.findall(m.group(1))]
        if named and all(n in numbers for n in named):
            lines.append(renumber_markers(line, numbers))
    return replace(
        c,
        index=numbers[c.index],
        conflicts_with=tuple(numbers[n] for n in c.conflicts_with if n in numbers),
        conflict_note="\n".join(lines),
    )


def renumber_markers(text: str, numbers: dict[int, int]) -> str:
    """``text`` with the numbers of its citation markers mapped through ``numbers`` (all in
    one pass: ``[1]`` to ``[2]`` and ``[2]`` to ``[3]`` do not chain; a number not in
    ``numbers`` stays)."""

    def swap(match: re.Match[str]) -> str:
        whole = match.group()
        start = match.start(1) - match.start()
        inner = _NUMBER.sub(lambda m: str(numbers.get(int(m.group()), m.group())), match[1])
        return whole[:start] + inner + whole[start + len(match[1]) :]

    return _MARKER.sub(swap, text)


_PASSAGE_LINE = re.compile(r"\n(?:([\[［【]\s*)(\d{1,6})(?=\s*[\]］】] )|(?:Note: |注意：)[^\n]*)")
# (each line found from its "\n": a literal the regex engine looks for fast, where "^" with
# re.M is tried at every character, four times slower)


def renumber_passages(text: str, numbers: dict[int, int]) -> str:
    """Numbered passages as a search tool shows them (``[2] title (source)`` opening each,
    then ``Note: [2] and [4] disagree …`` lines; shelfhand's ``retrieve`` over MCP) with
    their numbers mapped through ``numbers``. Only those lines: a ``[3]`` inside a passage's
    text is the document's own, and stays."""

    def swap(match: re.Match[str]) -> str:
        if match[2] is None:  # a note line
            return renumber_markers(match.group(), numbers)
        number = int(match[2])
        return f"\n{match[1]}{numbers.get(number, number)}"

    return _PASSAGE_LINE.sub(swap, "\n" + text)[1:]
