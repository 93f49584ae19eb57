"""Counts of a turn's steps (turns, model calls, tool calls, retrievals), made without spans.

A service's ``/metrics`` needs how many steps ran and how they ended, not a span tree: the
service sets a :class:`StepCounter` for each turn (:func:`count_steps`) and the code that does
the work reports each finished step to the counter it finds in a context variable
(:func:`current_counting`), whether or not spans are recorded. Tracing off then costs no span
at all, and tracing on does not count twice. Without a counter (a script's own
``Agent.run``) a step pays one ``ContextVar.get()``.

Model calls that a failure leaves unfinished are counted failed when the turn ends
(:meth:`Counting.fail_open_calls`), as their spans are ended failed.
"""

from __future__ import annotations

import asyncio
import contextlib
from contextvars import ContextVar, Token
from typing import Any, Protocol

__all__ = [
    "Counting",
    "StepCounter",
    "count_steps",
    "current_counting",
    "stop_counting",
]


class StepCounter(Protocol):
    """Counts finished steps (the service's metrics); each call must be cheap and never
    block."""

    def count_turn(self, status: str) -> None:
        """A turn ended: ``ok``, or its failure's code."""
        ...

    def count_fallback(self, reason: str) -> None:
        """A turn answered with something other than the model's answer as written:
        replaced by the answer check, or made without the model (``reason``: the reply's
        ``fallback_reason``, e.g. ``ungrounded``, ``model_timeout``)."""
        ...

    def count_model_call(
        self, model: str, status: str, input_tokens: int, output_tokens: int
    ) -> None:
        """A model call ended (``status``: ``ok``; ``cut``, its caller gone before its reply
        was complete; ``timeout``, past its deadline; ``error``). The tokens of a call that
        did not answer are estimated as its budget charged them: its request when it was cut
        off or timed out, and the text a broken stream wrote; none for one that failed before
        any text."""
        ...

    def count_tool_call(self, tool: str, outcome: str) -> None:
        """A governed tool call ended with ``outcome`` (``ok``, ``denied``, ``timeout``...)."""
        ...

    def count_retrieval(self, mode: str, seconds: float) -> None:
        """A search ended after ``seconds``."""
        ...


class Counting:
    """One turn's counting: its counter and the model calls open now (a failure that leaves
    one open is counted when the turn ends)."""

    __slots__ = ("counter", "open_calls")

    def __init__(self, counter: StepCounter) -> None:
        self.counter = counter
        self.open_calls: list[tuple[str, asyncio.Task[Any] | None]] = []
        """Each open call's model and the task that made it."""

    def model_call_started(self, model: str) -> None:
        self.open_calls.append((model, _current_task()))

    def model_call_ended(
        self, model: str, input_tokens: int, output_tokens: int, *, status: str = "ok"
    ) -> None:
        """A call of ``model`` ended (``status``: as :meth:`StepCounter.count_model_call`
        takes it)."""
        task = _current_task()
        calls = self.open_calls
        found = [call for call in calls if call[0] == model]
        mine = [call for call in found if call[1] is task]
        if found:  # (a generator resumed by another task ends a call it did not start)
            # by value, not index: an LLM reranker's call ends in its own thread meanwhile
            with contextlib.suppress(ValueError):
                calls.remove((mine or found)[0])
        self.counter.count_model_call(model, status, input_tokens, output_tokens)

    def fail_open_calls(self) -> None:
        """Count the model calls still open as failed: a failure ended them (the turn's, or
        a subagent's that the turn survived). A call of a task still running elsewhere (a
        background subagent outliving the turn) is left to end on its own."""
        current = _current_task()
        still: list[tuple[str, asyncio.Task[Any] | None]] = []
        for model, task in self.open_calls:
            if task is not None and task is not current and not task.done():
                still.append((model, task))
            else:
                self.counter.count_model_call(model, "error", 0, 0)
        self.open_calls = still


def _current_task() -> asyncio.Task[Any] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:  # no event loop in this thread
        return None


_counting: ContextVar[Counting | None] = ContextVar("shelfhand_counting", default=None)


def current_counting() -> Counting | None:
    """The running turn's counting, or ``None`` (nothing counts its steps)."""
    return _counting.get()


def count_steps(counter: StepCounter) -> tuple[Counting, Token[Counting | None]]:
    """Count the steps that run from now on in this context with ``counter``; undo with
    :func:`stop_counting`."""
    counting = Counting(counter)
    return counting, _counting.set(counting)


def stop_counting(token: Token[Counting | None]) -> None:
    with contextlib.suppress(ValueError):  # reset from another context: it is gone anyway
        _counting.reset(token)
