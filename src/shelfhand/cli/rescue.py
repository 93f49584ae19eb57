"""What ``ask`` and ``chat`` show when the chat model fails mid-run: the passages' answer.

The run's ``citations`` events are collected as they come (:class:`Found`). When the model
then fails (a dead or cut connection, a timeout, a provider error), the answer is the best
sentences of the passages the run itself had found, as the service answers such a turn
(:mod:`shelfhand.service.model_failure`): the same passages the model was reading, with no
second search. Only when the run found none about the question (it failed before searching,
or searched for something else) is the question searched, so that the passages are printed
either way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from shelfhand.agent.answer_check import failed_model_answer
from shelfhand.core.events import CitationsFound, Event, Final
from shelfhand.core.messages import Citation, Message

if TYPE_CHECKING:
    from shelfhand.app import App
    from shelfhand.core.context import UserContext
    from shelfhand.core.results import RunResult
    from shelfhand.knowledge.base import KnowledgeBase

__all__ = ["Found", "answer_of_failed_run"]


class Found:
    """The passages a run has found so far (from its ``citations`` events)."""

    def __init__(self) -> None:
        self.citations: list[Citation] = []

    def see(self, event: Event) -> None:
        """Keep the passages of ``event`` when it is a ``citations`` event."""
        if isinstance(event, CitationsFound):
            self.citations.extend(event.citations)

    async def final(self, events: AsyncIterator[Event]) -> RunResult:
        """The result of the run whose events are ``events``, keeping its passages on the way
        (what they are when the run raises)."""
        result: RunResult | None = None
        async for event in events:
            if isinstance(event, Final):
                result = event.result
            else:
                self.see(event)
        if result is None:  # pragma: no cover - every run ends with a final event
            raise RuntimeError("the run ended without a final event")
        return result


def answer_of_failed_run(
    a: App,
    kb: KnowledgeBase | None,
    question: str,
    user: UserContext,
    found: Found,
    exc: BaseException,
    history: Sequence[Message] = (),
) -> RunResult | None:
    """The passages' answer to ``question`` after the chat model failed with ``exc`` (see the
    module docstring), marked with the failure's code as ``fallback_reason``; ``None`` with no
    knowledge base and nothing found. ``history``: the conversation before the turn (a
    follow-up is read with the question it points back to)."""
    from shelfhand.service.chat import error_status

    why = error_status(exc)[1]  # model_error or model_timeout
    synonyms = a.synonym_table()
    if found.citations:
        answer = failed_model_answer(
            question, found.citations, why, synonyms=synonyms, history=history
        )
        if answer is not None:
            return answer
    if kb is None:
        return None
    searched = a.knowledge_agent(kb).run_sync(question, context=user)
    # nothing about the question: "not covered", marked with the failure, not "no_model"
    # (a model is configured; it failed)
    answered = failed_model_answer(question, searched.citations, why, synonyms=synonyms)
    return answered or replace(searched, fallback_reason=why)
