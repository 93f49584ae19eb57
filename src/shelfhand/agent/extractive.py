"""The extractive answer: the passages' own best sentences, when the model's answer cannot be
shown (ungrounded, a refusal while the passages hold the answer, an echo of the prompt, a run
stopped by the loop guard or ``max_iters``) or when no model is configured.

The passages are ranked by how much of the question they hold (identifiers such as ``E-203``
must match when the question has one); from the best passage, its sentence closest to the
question and the ones after it (a manual's heading is followed by what it means and what to
do); from a passage that disagrees with it (an older policy version), its closest sentence
too, so the disagreement is never hidden. Each sentence keeps its ``[n]``. Nothing is
extracted when no passage is about the question: then the documents do not cover it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from shelfhand.core.messages import Citation
from shelfhand.knowledge.analysis import query_identifiers

from .grounding_check import split_sentences, words

__all__ = ["LEAD", "MIN_RELEVANCE", "Extract", "extractive_answer"]

LEAD = "From the documents:"
"""The first line of every extractive answer."""
MIN_RELEVANCE = 0.34
"""Share of the question's content words a passage must hold to be about the question."""
SENTENCES = 3
"""The most sentences taken from the best passage."""
MAX_CHARS = 600
RANK_STEP = 0.15
"""How much each place further down the search's order costs a passage."""
"""The most characters of passage text in one extractive answer."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Extract:
    """An extractive answer: its text and the passage numbers it quotes."""

    text: str
    sentences: tuple[tuple[str, int], ...]
    """``(sentence, passage number)`` in the order shown."""

    @property
    def passages(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(n for _, n in self.sentences))


def _about(question_words: set[str], ids: list[str], text: str) -> float:
    """How much of the question ``text`` holds (0 to 1); 0 when the question names an
    identifier that ``text`` lacks."""
    lowered = text.lower()
    plain = question_words.difference(ids)
    share = len(plain & words(text)) / len(plain) if plain else 0.0
    if not ids:
        return share
    # a named identifier is half the question: it must be there, the words add the rest
    if not any(i in lowered or i in lowered.replace("-", "") for i in ids):
        return 0.0
    return 0.5 + 0.5 * share


def _best_run(passage: Citation, question_words: set[str], count: int) -> list[str]:
    """The sentence of ``passage`` closest to the question and the ones after it."""
    sentences = split_sentences(passage.text)
    if not sentences:
        return []
    scores = [len(question_words & words(s)) for s in sentences]
    start = max(range(len(sentences)), key=lambda i: (scores[i], -i))
    taken = sentences[start : start + count]
    # a heading alone ("## 保修期限") says nothing: take one more sentence after it
    if len(taken) < count and start > 0:
        taken = sentences[max(0, start - (count - len(taken))) : start] + taken
    return taken


def extractive_answer(
    question: str, citations: Sequence[Citation], *, sentences: int = SENTENCES
) -> Extract | None:
    """The best-supported sentences of ``citations`` for ``question``, with their ``[n]``,
    under the lead line :data:`LEAD`; ``None`` when no passage is about the question."""
    question_words = words(question)
    ids = query_identifiers(question)
    passages = {c.index: c for c in citations if c.text.strip()}
    about = [(_about(question_words, ids, c.text), c.index) for c in passages.values()]
    # the search's own order counts too: its first passage is usually the one to quote
    ranked = sorted(
        (pair for pair in about if pair[0] >= MIN_RELEVANCE),
        key=lambda pair: -(pair[0] - RANK_STEP * about.index(pair)),
    )
    if not ranked:
        return None
    best = passages[ranked[0][1]]
    chosen = [(s, best.index) for s in _best_run(best, question_words, sentences)]
    disagree = [
        c
        for c in passages.values()
        if best.index in c.conflicts_with or c.index in best.conflicts_with
    ]
    for other in disagree:  # a passage that disagrees is shown too: never hidden
        chosen.extend((s, other.index) for s in _best_run(other, question_words, 1))
    lines, used = [LEAD], 0
    kept: list[tuple[str, int]] = []
    for sentence, index in chosen:
        if used and used + len(sentence) > MAX_CHARS:
            break
        used += len(sentence)
        kept.append((sentence, index))
        lines.append(f"- {sentence} [{index}]")
    return Extract(text="\n".join(lines), sentences=tuple(kept))
