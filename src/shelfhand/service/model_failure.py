"""A turn whose chat model failed after the passages were found still answers with them.

The service's chat turn records the passages of its ``citations`` events as they stream. When
the model then fails (a dead or cut connection, a timeout, a provider error), the caller gets
the passages' best sentences, marked as extractive with the failure's code as
``fallback_reason`` and its message as ``error`` (the same answer ``shelfhand ask`` prints
then), instead of a bare 502 that throws away what retrieval found. With no passage about the
question, the turn fails as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shelfhand.agent.answer_check import failed_model_answer, replaced_by
from shelfhand.core.errors import ModelError
from shelfhand.core.events import Final, event_to_dict
from shelfhand.core.messages import Citation, Message
from shelfhand.core.results import RunResult, Usage
from shelfhand.knowledge.analysis import SynonymTable

__all__ = ["Rescued", "rescue"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Rescued:
    """The answer of a turn whose model failed: its result and its ``final`` event."""

    result: RunResult
    final: dict[str, Any]
    question: str = ""
    """The user's message (the notice of :meth:`replaced` is in its language)."""

    @property
    def messages(self) -> tuple[Message, ...]:
        """The turn's messages to keep: the question and the answer given."""
        return self.result.messages

    def replaced(self, trace_id: str) -> dict[str, Any]:
        """The ``answer_replaced`` event, for a stream that had begun the model's answer."""
        return {**event_to_dict(replaced_by(self.result, self.question)), "trace_id": trace_id}


def rescue(
    exc: BaseException,
    question: str,
    found: Sequence[dict[str, Any]],
    code: str,
    message: str,
    trace_id: str,
    *,
    synonyms: SynonymTable | None = None,
    usage: Usage | None = None,
    history: Sequence[Message] = (),
) -> Rescued | None:
    """The passages' answer to ``question`` when ``exc`` is the chat model's failure and the
    turn found passages (``found``: its citations events' items); else ``None``.

    Args:
        exc: What ended the turn.
        question: The user's message.
        found: The citations the turn streamed, as dicts.
        code: The failure's code (``model_error``, ``model_timeout``): the fallback reason.
        message: What the caller is told about the failure (the final's ``error``).
        trace_id: The turn's trace id.
        synonyms: The word groups the search read ``question`` with.
        usage: What the turn used before the failure (its model calls that answered);
            none when not known.
        history: The session's conversation before the turn (a follow-up pointing back is
            read with the question it follows, as its search was).
    """
    if not isinstance(exc, ModelError) or not found:
        return None
    citations = [Citation.from_dict(c) for c in found]
    result = failed_model_answer(
        question, citations, code, trace_id=trace_id, synonyms=synonyms, history=history
    )
    if result is None:
        return None
    final = event_to_dict(Final(result=result))
    final.update(
        stop_reason=code,
        run_id=trace_id,
        usage=(usage or Usage()).to_dict(),
        error=message,
        trace_id=trace_id,
    )
    return Rescued(result=result, final=final, question=question)
