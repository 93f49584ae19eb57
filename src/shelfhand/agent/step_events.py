"""The events of a run's tool steps, built in one place (DESIGN K2, S3).

A tool call shows as ``ToolStarted`` then ``ToolFinished``; a call answered from an earlier
identical one of the same run as a ``ToolFinished`` marked ``replayed``. A subagent's events
reach its supervisor's stream tagged with its id (``agent``): a quiet subagent run builds them
tagged (:func:`finished` with its id), another delegable's are copied (:func:`tag_event`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shelfhand.core.events import ToolFinished, ToolStarted

if TYPE_CHECKING:
    from shelfhand.core.messages import ToolCallBlock, ToolResultBlock
    from shelfhand.tools.toolkit import CallReport

__all__ = ["finished", "replay_finished", "tag_event"]


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
        agent=agent,
    )
