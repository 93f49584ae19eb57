"""The events of a run's tool steps, built in one place, and where they go (docs/design.md K2, S3).

A tool call shows as ``ToolStarted`` then ``ToolFinished``; a call answered from an earlier
identical one of the same run as a ``ToolFinished`` marked ``replayed``. A subagent's events
reach its supervisor's stream tagged with its id (``agent``): an agent's run builds them tagged
(the ``tag`` of its :class:`EventSink`), another delegable's are copied (:func:`tag_event`).

An :class:`EventSink` says where one run's events go: yielded by its stream, handed to a
callback as they happen (a quiet subagent run inside a supervisor's stream), or nowhere (a run
whose caller reads only the result: no step event is built at all).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from shelfhand.core.events import Event, ToolFinished, ToolStarted

if TYPE_CHECKING:
    from shelfhand.core.messages import ToolCallBlock, ToolResultBlock
    from shelfhand.tools.toolkit import CallReport

__all__ = [
    "SILENT",
    "STEPS",
    "STEPS_AND_TEXT",
    "EventSink",
    "finished",
    "replay_finished",
    "tag_event",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class EventSink:
    """Where the events of one run go.

    Attributes:
        stream: The run's generator yields every event (``Agent.stream``); otherwise it yields
            only the final event.
        text: With ``stream``, the model is asked with streaming and its text is yielded as
            ``TextDelta`` events.
        emit: Without ``stream``: the tool and approval events are handed here as they
            happen (no text, no citations); ``None`` with ``stream`` off: nothing is built.
        tag: Put on the run's tool events as ``agent`` (the subagent's id), whichever way
            they go.
    """

    stream: bool = False
    text: bool = False
    emit: Callable[[Event], None] | None = None
    tag: str | None = None
    listening: bool = field(init=False)
    """Whether anybody takes the step events (else they are not built)."""

    def __post_init__(self) -> None:
        # a field, not a property: it is read at every step of every run
        object.__setattr__(self, "listening", self.stream or self.emit is not None)


SILENT = EventSink()
"""A run whose caller reads only its result."""
STEPS = EventSink(stream=True)
"""A stream of the run's steps and its final event, without its text."""
STEPS_AND_TEXT = EventSink(stream=True, text=True)
"""A stream of every event: the model's text as it comes, the steps, the final event."""


def finished(report: CallReport, res: ToolResultBlock, tag: str | None = None) -> ToolFinished:
    """The end of a call that ran (or failed) through the toolkit; ``tag``: made by that
    subagent."""
    return ToolFinished(
        call_id=res.call_id,
        name=res.name,
        content=res.content,
        is_error=res.is_error,
        duration_ms=report.duration_ms,
        replayed=report.replayed,
        failure=res.failure,
        agent=tag,
    )


def replay_finished(
    call: ToolCallBlock, earlier: ToolResultBlock, tag: str | None = None
) -> ToolFinished:
    """The end of a call answered from the run's earlier identical call."""
    return ToolFinished(
        call_id=call.id,
        name=call.name,
        content=earlier.content,
        is_error=False,
        duration_ms=0.0,
        replayed=True,
        agent=tag,
    )


def tag_event(event: ToolStarted | ToolFinished, agent: str) -> ToolStarted | ToolFinished:
    """``event`` tagged with the subagent that made the call: ``replace(event, agent=agent)``
    without ``dataclasses.replace``'s cost (two of these per subagent tool call)."""
    if isinstance(event, ToolStarted):
        return ToolStarted(
            call_id=event.call_id, name=event.name, arguments=event.arguments, agent=agent
        )
    return ToolFinished(
        call_id=event.call_id,
        name=event.name,
        content=event.content,
        is_error=event.is_error,
        duration_ms=event.duration_ms,
        replayed=event.replayed,
        failure=event.failure,
        agent=agent,
    )
