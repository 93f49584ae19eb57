"""Events streamed by an agent run (DESIGN K2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from shelfhand.core.messages import Citation

if TYPE_CHECKING:
    from shelfhand.agent.agent import RunResult


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta:
    text: str
    type: Literal["text_delta"] = "text_delta"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolStarted:
    call_id: str
    name: str
    arguments: str
    type: Literal["tool_started"] = "tool_started"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolFinished:
    call_id: str
    name: str
    content: str
    is_error: bool
    duration_ms: float
    type: Literal["tool_finished"] = "tool_finished"


@dataclass(frozen=True, slots=True, kw_only=True)
class CitationsFound:
    citations: tuple[Citation, ...]
    type: Literal["citations"] = "citations"


@dataclass(frozen=True, slots=True, kw_only=True)
class Final:
    result: RunResult
    type: Literal["final"] = "final"


Event: TypeAlias = TextDelta | ToolStarted | ToolFinished | CitationsFound | Final


def event_to_dict(event: Event) -> dict[str, Any]:
    """A JSON-ready view of an event (for SSE and logs)."""
    if isinstance(event, TextDelta):
        return {"type": event.type, "text": event.text}
    if isinstance(event, ToolStarted):
        return {
            "type": event.type,
            "call_id": event.call_id,
            "name": event.name,
            "arguments": event.arguments,
        }
    if isinstance(event, ToolFinished):
        return {
            "type": event.type,
            "call_id": event.call_id,
            "name": event.name,
            "content": event.content,
            "is_error": event.is_error,
            "duration_ms": event.duration_ms,
        }
    if isinstance(event, CitationsFound):
        return {"type": event.type, "citations": [c.to_dict() for c in event.citations]}
    return {
        "type": event.type,
        "output": event.result.output,
        "citations": [c.to_dict() for c in event.result.citations],
    }
