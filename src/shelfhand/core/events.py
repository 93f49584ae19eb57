"""Events streamed by an agent run (docs/design.md K2)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field, fields
from typing import Any, Literal, TypeAlias

from shelfhand.core.messages import Citation
from shelfhand.core.results import RunResult
from shelfhand.core.slots import slot_setters, twin

__all__ = [
    "AnswerReplaced",
    "ApprovalDecided",
    "ApprovalRequired",
    "CitationsFound",
    "Event",
    "Final",
    "HumanNeeded",
    "SubagentFinished",
    "SubagentStarted",
    "TextDelta",
    "TextWithdrawn",
    "ToolFinished",
    "ToolProgress",
    "ToolStarted",
    "event_to_dict",
    "progress_sink",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta:
    text: str
    type: Literal["text_delta"] = "text_delta"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolStarted:
    call_id: str
    name: str
    arguments: str
    agent: str | None = None
    """The subagent that made the call (``None``: the agent whose stream this is)."""
    type: Literal["tool_started"] = "tool_started"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolFinished:
    call_id: str
    name: str
    content: str
    is_error: bool
    duration_ms: float
    replayed: bool = False
    """The result was replayed from the tool cache (the tool did not run again)."""
    failure: str = ""
    """Why the tool did not answer, for people (``failed: timed out after 5 s``; see
    :attr:`~shelfhand.core.messages.ToolResultBlock.failure`): "" when it answered, and when
    the model got the call wrong (``content`` says how)."""
    agent: str | None = None
    """The subagent that made the call (``None``: the agent whose stream this is)."""
    type: Literal["tool_finished"] = "tool_finished"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolProgress:
    """A running tool reported progress (e.g. an MCP server's ``notifications/progress``).

    ``progress`` only grows; ``total`` is ``None`` when the tool does not know it.
    ``call_id`` is empty when the reporter does not know which call it is.
    """

    name: str
    progress: float
    total: float | None = None
    message: str = ""
    call_id: str = ""
    type: Literal["tool_progress"] = "tool_progress"


progress_sink: ContextVar[Callable[[ToolProgress], None] | None] = ContextVar(
    "shelfhand_progress_sink", default=None
)
"""Where tools called in this context report :class:`ToolProgress` (MCP tools do); a caller
that wants progress in its event stream sets it around its tool calls."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRequired:
    """A ``confirm=True`` tool call waits for a human: approve or reject ``approval_id``.

    The run is paused until ``Approvals.approve(approval_id)`` or
    ``Approvals.reject(approval_id, reason)`` is called (from any task or thread).
    """

    approval_id: str
    call_id: str
    tool: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    """The call's arguments with secrets redacted."""
    type: Literal["approval_required"] = "approval_required"


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalDecided:
    """The human's decision on an ``ApprovalRequired``; the run resumes."""

    approval_id: str
    call_id: str
    tool: str
    approved: bool
    reason: str = ""
    type: Literal["approval_decided"] = "approval_decided"


@dataclass(frozen=True, slots=True, kw_only=True)
class CitationsFound:
    citations: tuple[Citation, ...]
    type: Literal["citations"] = "citations"


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerReplaced:
    """The answer check replaced the model's answer (comes just before :class:`Final`).

    A client that shows the text deltas as they come shows ``output`` instead from here on
    (the deltas were the model's unchecked answer); ``notice`` says so in words, for clients
    that can only append (the OpenAI-compatible streams do).
    """

    reason: str
    """Why (``RunResult.fallback_reason``: ``ungrounded``, ``refusal``, ``prompt_echo``...)."""
    output: str
    """The answer that counts: the checked one, as ``Final`` carries it."""
    notice: str
    """One line for people: the answer above was replaced after checking it, and why."""
    type: Literal["answer_replaced"] = "answer_replaced"


@dataclass(frozen=True, slots=True, kw_only=True)
class TextWithdrawn:
    """The end of the text just streamed was dropped by the run: a draft (another answer
    follows) or the rounds of a loop.

    The agent loop drops a reply that states what only the documents could tell when the
    documents were one search away and not searched (``reason`` ``guessed``; see
    :func:`~shelfhand.agent.answer_check.guessed`): it searches and asks the model again.
    A reply its adapter stopped in a loop (``reason`` ``repetition``) withdraws the rounds
    streamed after the first; the answer keeps the first. A client that shows the text
    deltas as they come removes ``text`` (the end of what it shows); ``notice`` says so in
    words, for clients that can only append (they get the answer that counts with
    ``Final``).
    """

    text: str
    """The withdrawn text, exactly as its deltas streamed it."""
    reason: str
    notice: str
    type: Literal["text_withdrawn"] = "text_withdrawn"


@dataclass(frozen=True, slots=True, kw_only=True)
class Final:
    result: RunResult
    type: Literal["final"] = "final"

    def __init__(self, *, result: RunResult, type: Literal["final"] = "final") -> None:
        # every run ends with one, watched or not (see shelfhand.core.slots)
        _final_result(self, result)
        _final_type(self, type)


_final_result, _final_type = slot_setters(Final, "result", "type")
_FinalFields = twin(Final)


def final_event(result: RunResult) -> Final:
    """``Final(result=result)``, built as a twin: every run ends with one (see
    :mod:`shelfhand.core.slots`)."""
    event = _FinalFields()
    event.result = result
    event.type = "final"
    event.__class__ = Final
    built: Final = event
    return built


@dataclass(frozen=True, slots=True, kw_only=True)
class SubagentStarted:
    """A subagent (or pipeline) was handed a task by the agent one level up (docs/design.md S3)."""

    subagent: str
    depth: int
    """1 for a subagent of the main agent, 2 for one of its subagents, ..."""
    task: str = ""
    call_id: str = ""
    type: Literal["subagent_started"] = "subagent_started"


@dataclass(frozen=True, slots=True, kw_only=True)
class SubagentFinished:
    """A subagent handed its result back (``is_error``: it could not do the task)."""

    subagent: str
    depth: int
    is_error: bool = False
    stop_reason: str = "final"
    duration_ms: float = 0.0
    call_id: str = ""
    type: Literal["subagent_finished"] = "subagent_finished"


@dataclass(frozen=True, slots=True, kw_only=True)
class HumanNeeded:
    """Delegation stopped and a person should look (docs/design.md S4): e.g. a subagent handed back
    the same result twice in a row, so asking it again would go round in circles."""

    subagent: str
    reason: str
    depth: int = 1
    type: Literal["human_needed"] = "human_needed"


Event: TypeAlias = (
    TextDelta
    | TextWithdrawn
    | ToolStarted
    | ToolFinished
    | ToolProgress
    | ApprovalRequired
    | ApprovalDecided
    | CitationsFound
    | AnswerReplaced
    | Final
    | SubagentStarted
    | SubagentFinished
    | HumanNeeded
)


def event_to_dict(event: Event) -> dict[str, Any]:
    """A JSON-ready view of an event (for SSE and logs): its fields, ``type`` first."""
    if isinstance(event, CitationsFound):
        return {"type": event.type, "citations": [c.to_dict() for c in event.citations]}
    if isinstance(event, Final):
        out: dict[str, Any] = {
            "type": event.type,
            "output": event.result.output,
            "citations": [c.to_dict() for c in event.result.citations],
            "unknown_citations": list(event.result.unknown_citations),
            "grounding": grounding.to_dict() if (grounding := event.result.grounding) else None,
            "extractive": event.result.extractive,
            "fallback_reason": event.result.fallback_reason,
        }
        if event.result.budget is not None:  # the budget that ended the run
            out["budget"] = dict(event.result.budget)
        return out
    data: dict[str, Any] = {"type": event.type}
    for f in fields(event):
        value = getattr(event, f.name)
        if f.name == "agent" and value is None:
            continue  # the main agent's own tool events look as they always did
        data[f.name] = dict(value) if isinstance(value, Mapping) else value
    return data
