"""Running a stream of events to its result: what every ``run`` of an agent-like object does.

An agent, a pipeline or a supervisor streams events ending with one ``Final``; its ``run``
(and whoever delegates to it without showing its steps) only wants the ``RunResult`` that the
``Final`` carries: :func:`run_to_final`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import overload

from shelfhand.core.events import Event, Final
from shelfhand.core.results import RunResult

__all__ = ["run_to_final"]


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
