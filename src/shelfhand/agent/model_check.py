"""The stronger grounding check, optional: the chat model judges each sentence of an answer
against its passages (setting ``answer_judge = "model"``; off by default).

The lexical check (:mod:`.grounding_check`) runs first and always: it finds the sentences,
their passages and the numbers and codes no passage holds. The model then says, per sentence,
whether the passages support it; its verdict replaces the lexical one, except that a sentence
stating a number or code no passage holds stays unsupported whatever the model says (a small
model agrees too readily). ``Grounding.method`` is ``model`` then.

When the model fails, times out or answers in a form that cannot be read, the lexical check
stands and ``Grounding.note`` says why: the answer is never held up or lost by its judge.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from shelfhand.agent.side_calls import side_request
from shelfhand.core.grounding import Grounding, SentenceSupport
from shelfhand.core.messages import Citation, Message
from shelfhand.core.pricing import ModelPrice
from shelfhand.models.base import ChatModel

__all__ = ["JUDGE_INSTRUCTIONS", "ModelJudge", "lexical_stands"]

logger = logging.getLogger(__name__)

JUDGE_INSTRUCTIONS = (
    "You check an answer against the passages it was written from. For each numbered "
    "sentence, decide whether the passages state it (the same facts, in any language or "
    "wording). Reply with one line per sentence and nothing else: the sentence's number, a "
    "colon and yes or no, e.g.\n1: yes\n2: no"
)
"""The judge's system prompt (shelfhand's own prompt text: never part of an answer)."""
_PASSAGE_CHARS = 1200
_VERDICT = re.compile(
    r"^[^\S\n]*\[?(\d{1,3})\]?\s*[:：.)、-]\s*(yes|no|是|否)\b", re.IGNORECASE | re.M
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelJudge:
    """Judges an answer's sentences with a chat model, the lexical check as its fallback.

    Args:
        model: The judge (the configured chat model).
        timeout: Seconds the judge may take for one answer; past it the lexical check stands.
        price: The model's price, for the call's cost in the run's usage.

    Its call is reserved against the caller's budget, traced and counted, and added to the
    run's usage (:mod:`~.side_calls`); no budget left: the lexical check stands.
    """

    model: ChatModel
    timeout: float = 20.0
    price: ModelPrice | None = None
    """The model's price, for the call's cost in the run's usage (``None``: unknown)."""

    async def review(self, grounding: Grounding, citations: Sequence[Citation]) -> Grounding:
        """``grounding`` (the lexical check) with each sentence judged by the model; as it
        is, with a ``note``, when the model cannot give a verdict for every sentence."""
        if not grounding.sentences or not citations:
            return grounding
        request = [
            Message.system(JUDGE_INSTRUCTIONS),
            Message.user(_judge_request(grounding.sentences, citations)),
        ]
        try:
            response = await side_request(
                self.model,
                request,
                reply_tokens=8 * len(grounding.sentences) + 16,
                price=self.price,
                timeout=self.timeout,
                purpose="answer check",
            )
        except TimeoutError:
            return lexical_stands(grounding, f"the model's check took over {self.timeout:g}s")
        except Exception as exc:  # any failure of the judge: the lexical check stands
            logger.warning("the model's grounding check failed: %s", type(exc).__name__)
            return lexical_stands(grounding, f"the model's check failed ({type(exc).__name__})")
        verdicts = parse_verdicts(response.message.text, len(grounding.sentences))
        if verdicts is None:
            return lexical_stands(grounding, "the model's check gave no verdict for every sentence")
        sentences = tuple(
            replace(s, supported=verdict and not s.missing and not s.misplaced)
            for s, verdict in zip(grounding.sentences, verdicts, strict=True)
        )
        return Grounding(sentences=sentences, method="model")


def parse_verdicts(text: str, count: int) -> list[bool] | None:
    """The yes/no verdicts of sentences ``1..count`` in ``text`` (``N: yes`` lines; the
    first verdict of a number counts); ``None`` when one is missing."""
    found: dict[int, bool] = {}
    for number, word in _VERDICT.findall(text):
        found.setdefault(int(number), word.lower() in ("yes", "是"))
    if any(n not in found for n in range(1, count + 1)):
        return None
    return [found[n] for n in range(1, count + 1)]


def _judge_request(sentences: Sequence[SentenceSupport], citations: Sequence[Citation]) -> str:
    passages = []
    for c in citations:
        text = " ".join(c.text.split())[:_PASSAGE_CHARS]
        passages.append(f"[{c.index}] {text}")
    numbered = [f"{i}. {s.text}" for i, s in enumerate(sentences, start=1)]
    return "Passages:\n" + "\n".join(passages) + "\n\nSentences:\n" + "\n".join(numbered)


def lexical_stands(grounding: Grounding, note: str) -> Grounding:
    """``grounding``, the lexical check's, with ``note`` saying why no judge decided."""
    return replace(grounding, method="lexical", note=note)
