"""What every agent-like object shares: the options of a run, and running it to its result.

An agent, a pipeline or a supervisor takes the same keyword options for ``run``, ``run_sync``
and ``stream`` (:class:`RunOptions`), and streams events ending with one ``Final``; its
``run`` (and whoever delegates to it without showing its steps) only wants the ``RunResult``
that the ``Final`` carries (:func:`run_to_final`). Its ``run_sync`` is an ``asyncio.run`` of
its own, which closes the connections of every chat model it asks before that loop ends
(:func:`run_closing`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, overload

from shelfhand.core.events import Event, Final
from shelfhand.core.results import RunResult

if TYPE_CHECKING:
    from shelfhand.core.context import RunContext, UserContext
    from shelfhand.core.messages import Message
    from shelfhand.tools.approvals import Approvals

__all__ = ["RunOptions", "chat_models", "close_models", "run_closing", "run_to_final"]

T = TypeVar("T")


class RunOptions(TypedDict, total=False):
    """The keyword options of one run (all optional), as ``run``, ``run_sync`` and ``stream``
    of an agent, a pipeline or a supervisor take them.

    Keys:
        context: The caller: whose permissions and documents the run uses (``None``: an
            anonymous user; ignored with ``parent``, whose caller it is).
        history: Earlier messages of the conversation (an agent with a memory reads its
            memory instead).
        deps: Anything the tools need, handed to them as ``RunContext.deps``.
        approvals: Where ``confirm=True`` calls wait for a human, instead of the agent's own
            registry; with a registry but no handler, ``run`` waits until someone else
            approves or rejects (``stream`` shows the ``ApprovalRequired`` events).
        trace_id: Names the run in logs, audit records and the result (default: a new id).
        parent: The run delegating this one (a subagent's run: its caller is the parent's,
            its depth one more, see :mod:`shelfhand.agent.supervisor`).
    """

    context: UserContext | None
    history: Sequence[Message]
    deps: Any
    approvals: Approvals | None
    trace_id: str | None
    parent: RunContext | None


@overload
async def run_to_final(
    events: AsyncIterator[Event],
    *,
    what: str,
    forward: Callable[[Event], None] | None = None,
) -> RunResult: ...


@overload
async def run_to_final(
    events: AsyncGenerator[Event, None],
    *,
    what: str,
    forward: Callable[[Event], None] | None = None,
    stop: Callable[[], bool],
) -> RunResult | None: ...


async def run_to_final(
    events: AsyncIterator[Event],
    *,
    what: str,
    forward: Callable[[Event], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> RunResult | None:
    """Drain ``events`` to their end and return the result of their ``Final``.

    Drained rather than left at the ``Final``: a stream ends right after it, and a suspended
    async generator would be closed later by a task the event loop schedules (about a tenth
    of a short run).

    Args:
        events: The stream (an agent's, a pipeline's, a supervisor's).
        what: Names the stream in the error when it ends without a ``Final``.
        forward: Called with every other event, as it comes (e.g. to show a subagent's steps).
        stop: Asked before each event; when it says so, the stream is closed at once and
            ``None`` returned (a supervisor whose loop guard tripped).

    Raises:
        RuntimeError: the stream ended without a ``Final``.
    """
    final: RunResult | None = None
    async for event in events:
        if stop is not None and stop():
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()
            return None
        if isinstance(event, Final):
            final = event.result
        elif forward is not None:
            forward(event)
    if final is None:
        raise RuntimeError(f"{what} ended without a final event")
    return final


def chat_models(owner: object) -> Iterator[object]:
    """The chat models ``owner`` (an agent, a pipeline, a supervisor, a router function)
    asks, its steps' and subagents' included, each once. An owner names its own through a
    ``chat_models()`` method; one without it (a function) asks none."""
    seen: set[int] = set()
    pending = [owner]
    while pending:
        found = getattr(pending.pop(), "chat_models", None)
        if found is None:
            continue
        for model in found():
            if id(model) in seen:
                continue
            seen.add(id(model))
            if hasattr(model, "chat_models"):  # a nested agent or pipeline
                pending.append(model)
            else:
                yield model


async def close_models(owner: object) -> None:
    """Close the connections of every chat model ``owner`` asks (:func:`chat_models`;
    ``aclose``, for the models that have one: the models can be used again afterwards)."""
    for model in chat_models(owner):
        close = getattr(model, "aclose", None)
        if close is not None:
            await close()


def run_closing(owner: object, run: Callable[[], Awaitable[T]]) -> T:
    """``asyncio.run(run())`` for a ``run_sync``: the models' connections belong to that
    loop, so they are closed before it ends (:func:`close_models`), whatever the run did."""

    async def main() -> T:
        try:
            return await run()
        finally:
            await close_models(owner)

    return asyncio.run(main())
