"""Honest answers for runs that end without one from the model (issue 9, points 4 and 6).

A run never ends with a blank answer: a blank reply gets one nudge (:data:`NUDGE`); a second
blank reply ends the run with :func:`empty_answer` (the passages the run found, or "no
answer"). A run that stops because the model kept repeating a failing call ends with
:func:`repeated_call_answer`; one that reaches ``max_iters`` with :func:`max_iters_answer`.
"""

from __future__ import annotations

from collections.abc import Sequence

from shelfhand.core.messages import Citation, Message

from .guard import Repeated

__all__ = ["NUDGE", "empty_answer", "max_iters_answer", "repeated_call_answer"]

NUDGE = (
    "Your last reply was empty. Answer the question now, in plain text, using the tool results "
    "above; if they do not contain the answer, say so."
)
_PASSAGE_CHARS = 300


def _passages(citations: Sequence[Citation]) -> list[str]:
    lines = []
    for c in citations:
        where = c.title or c.source
        text = " ".join(c.text.split())
        if len(text) > _PASSAGE_CHARS:
            text = text[:_PASSAGE_CHARS] + "…"
        lines.append(f"[{c.index}] {where}: {text}" if text else f"[{c.index}] {where}")
    return lines


def empty_answer(citations: Sequence[Citation]) -> str:
    """What the user reads when the model answered with nothing, twice."""
    if not citations:
        return "No answer: the model returned an empty reply. Try asking again or rephrasing."
    return "\n".join(
        [
            "The model returned an empty reply, so there is no written answer. These passages "
            "were found and may help:",
            *_passages(citations),
        ]
    )


def repeated_call_answer(repeated: Repeated, citations: Sequence[Citation]) -> str:
    """What the user reads when the model kept sending a call that keeps failing."""
    error = repeated.error.splitlines()[0] if repeated.error else "an error"
    lines = [
        f"I stopped: the tool call {repeated.call.name} failed {repeated.failures} times with "
        f"the same error ({error[:300]}) and the model kept repeating it, so there is no "
        "complete answer."
    ]
    if citations:
        lines.append("Passages found before that:")
        lines.extend(_passages(citations))
    return "\n".join(lines)


def max_iters_answer(max_iters: int, new: Sequence[Message]) -> str:
    """What the user reads when the run used up its steps."""
    last = next((m for m in reversed(new) if m.role == "tool"), None)
    lines = [f"I could not finish within {max_iters} steps, so this is not a complete answer."]
    if last is not None:
        lines.append("The last tool results were:")
        lines.extend(f"- {r.name}: {r.content[:300]}" for r in last.tool_results)
    return "\n".join(lines)
