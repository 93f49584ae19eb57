"""The end of a run whose budget ran out mid-run: a model-free answer from what it found.

A turn refused before any model call of its own fails (the service answers 429). One whose
budget runs out later (the next model call refused after one of the loop's, or after one
beside it: an up-front search's LLM ranking, a follow-up's rewrite) ends cleanly instead:
the answer is the extractive answer of the passages the run already has
(:func:`~.extractive.extractive_answer`), or, when none is about the question, an honest
note naming the spent budget with the passages and tool results found. The result says
so: ``stop_reason`` and ``fallback_reason`` are ``budget_exceeded``, ``budget`` names the
budget, its scope, limit and reset time, and ``usage`` is what the run used until then. The
run's span gets a ``budget.exceeded`` event.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from shelfhand.core.citations import unknown_citations
from shelfhand.core.errors import BudgetExceededError
from shelfhand.core.events import Final
from shelfhand.core.grounding import Grounding
from shelfhand.core.messages import Citation, Message
from shelfhand.core.tracing import current_span
from shelfhand.knowledge.analysis import SynonymTable

from .extractive import extractive_answer
from .fallbacks import passage_lines, tool_result_lines
from .grounding_check import check_grounding

__all__ = ["BUDGET_EXCEEDED", "BudgetStop", "budget_final", "budget_note", "budget_stop"]

BUDGET_EXCEEDED = "budget_exceeded"
"""The ``stop_reason`` and ``fallback_reason`` of a run its budget ended."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetStop:
    """The model-free answer of a run its budget ended."""

    output: str
    extractive: bool
    grounding: Grounding | None
    budget: dict[str, object]


def budget_note(exc: BudgetExceededError, now: float | None = None) -> str:
    """One sentence naming the spent budget and when it resets."""
    wait = max(1, int(exc.reset_at - (time.time() if now is None else now) + 0.999))
    name = exc.budget.replace("_", " ")
    return (
        f"The {name} budget of {exc.scope} is spent ({exc.used} of {exc.limit}), so the model "
        f"could not finish this answer; the budget resets in {wait} s."
    )


def budget_stop(
    exc: BudgetExceededError,
    question: str,
    messages: Sequence[Message],
    citations: Sequence[Citation],
    *,
    synonyms: SynonymTable | None = None,
) -> BudgetStop:
    """The answer of a run whose next model call ``exc`` refused: the extractive answer of
    ``citations`` for ``question``, else a note with what the run found (``messages``)."""
    span = current_span()
    if span is not None:
        span.event("budget.exceeded", **exc.to_dict())
    extract = extractive_answer(question, citations, synonyms=synonyms)
    if extract is not None:
        return BudgetStop(
            output=extract.text,
            extractive=True,
            grounding=check_grounding(extract.text, citations, question=question),
            budget=exc.to_dict(),
        )
    lines = [budget_note(exc)]
    if citations:
        lines.append("These passages were found and may help:")
        lines.extend(passage_lines(citations))
    elif results := tool_result_lines(messages):
        lines.append("The tools returned:")
        lines.extend(results)
    return BudgetStop(
        output="\n".join(lines), extractive=False, grounding=None, budget=exc.to_dict()
    )


def budget_final(done: Final, stopped: BudgetStop) -> Final:
    """``done`` (the run's final event, its output ``stopped.output``) saying why it ended."""
    result = done.result
    return Final(
        result=replace(
            result,
            extractive=stopped.extractive,
            grounding=stopped.grounding,
            fallback_reason=BUDGET_EXCEEDED,
            budget=stopped.budget,
            unknown_citations=unknown_citations(result.output, result.citations),
        )
    )
