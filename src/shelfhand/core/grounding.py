"""How well an answer is backed by its passages, as values (the check is in
:mod:`shelfhand.agent.grounding_check`).

A :class:`Grounding` holds one :class:`SentenceSupport` per checked sentence of an answer:
whether the passages support it, by which passage, the numbers or codes of the sentence
that no passage holds, and those a table holds only in another row than the one it names.
It travels with the run's result (``RunResult.grounding``), so each caller reads the check
of its own answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Grounding", "SentenceSupport"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SentenceSupport:
    """One sentence of an answer and whether the passages support it."""

    text: str
    """The sentence as the answer writes it (citation markers kept)."""
    supported: bool
    passage: int | None = None
    """The number (``[n]``) of the passage that supports it best; ``None``: none comes close."""
    score: float = 0.0
    """Share of the sentence's words found in that passage (0 to 1)."""
    cited: tuple[int, ...] = ()
    """The passage numbers the sentence cites."""
    missing: tuple[str, ...] = ()
    """Numbers, codes and dates of the sentence that no passage it is checked against holds."""
    misplaced: tuple[str, ...] = ()
    """Numbers of the sentence that its passages hold only in a table row about something
    else than what the sentence names (the Lumen X1's ``3999`` said of the Lumen X1 Pro), and
    the question's code it names while resting on another code's entry (``e203`` said over
    the E-105 entry's steps)."""
    tool: str | None = None
    """The tool whose result it is about, when one holds more of its words than any passage
    (``order_status``: the answer states what the caller's order system returned, not what
    the documents say); it supports the sentence when ``supported`` (``passage`` is then
    ``None``)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "supported": self.supported,
            "passage": self.passage,
            "score": round(self.score, 3),
            "cited": list(self.cited),
            "missing": list(self.missing),
            "misplaced": list(self.misplaced),
            "tool": self.tool,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Grounding:
    """The grounding check of one answer.

    Attributes:
        sentences: The checked sentences, in answer order (a sentence with no content word,
            such as "Hope this helps!", is not checked).
        method: ``lexical`` (word and number overlap), or the stronger check that decided.
        note: Why the stronger check was not used, when it was asked for and failed.
    """

    sentences: tuple[SentenceSupport, ...]
    method: str = "lexical"
    note: str = ""

    @property
    def grounded(self) -> bool:
        """Every checked sentence is supported (an answer with none checked is not)."""
        return bool(self.sentences) and all(s.supported for s in self.sentences)

    @property
    def unsupported(self) -> tuple[SentenceSupport, ...]:
        """The sentences no passage (nor tool result) supports."""
        return tuple(s for s in self.sentences if not s.supported)

    def to_dict(self) -> dict[str, Any]:
        return {
            "grounded": self.grounded,
            "method": self.method,
            "note": self.note,
            "sentences": [s.to_dict() for s in self.sentences],
        }
