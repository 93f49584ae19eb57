"""What a run produced, as values: the answer, its transcript, citations and usage.

:class:`RunResult` is what :meth:`Agent.run <shelfhand.agent.agent.Agent.run>` returns and what
the stream's :class:`~shelfhand.core.events.Final` event carries; :class:`Usage` is the tokens
of one model call or of a whole run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from shelfhand.core.grounding import Grounding
from shelfhand.core.messages import Citation, Message, ToolCallBlock

__all__ = ["RunResult", "StopReason", "Usage"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """What one model call, or a whole run or turn, used.

    A model reply's own usage has only the tokens; a run's adds how many model calls, tool
    calls and retrievals (calls of the ``retrieve`` tool, the up-front ones included) it
    made itself (a subagent's run reports its own).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    retrievals: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            model_calls=self.model_calls + other.model_calls,
            tool_calls=self.tool_calls + other.tool_calls,
            retrievals=self.retrievals + other.retrievals,
        )

    def to_dict(self) -> dict[str, int]:
        """The JSON form (replies, the SSE ``final`` event, ``ask --json``)."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "retrievals": self.retrievals,
        }


StopReason = Literal[
    "final", "max_iters", "external_tool", "empty", "repeated_call", "human_needed"
]
"""Why a run ended: the model answered (``final``); it ran out of steps (``max_iters``); it
called an ``external`` tool (``external_tool``); it answered blank, or only repeated a tool's
raw JSON result, even after a nudge (``empty``: the output is an honest fallback); it kept
repeating a failing call (``repeated_call``); delegation went round in circles and a person should look
(``human_needed``, see :mod:`shelfhand.agent.supervisor`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    """What one agent run produced."""

    output: str
    """The final answer text."""
    messages: tuple[Message, ...]
    """This run's transcript: the prompt, every model reply and every tool result."""
    citations: tuple[Citation, ...] = ()
    """Evidence returned by tools during the run, in the order it arrived."""
    usage: Usage = field(default_factory=Usage)
    iterations: int = 0
    stop_reason: StopReason = "final"
    external_calls: tuple[ToolCallBlock, ...] = ()
    """Calls of ``external`` tools, for the caller to execute (when stop_reason says so)."""
    trace_id: str = ""
    unknown_citations: tuple[int, ...] = ()
    """Numbers the answer cites (``[9]``) that no passage of this run carries: show them as
    plain text, never as links."""
    grounding: Grounding | None = None
    """The grounding check of ``output`` against the run's passages (``None``: not checked,
    e.g. no passages or the check is off); see :mod:`shelfhand.agent.grounding_check`."""
    extractive: bool = False
    """``output`` is the extractive fallback (sentences of the passages, not the model's
    words); ``fallback_reason`` says why."""
    fallback_reason: str = ""
    """Why the model's answer was replaced: ``ungrounded``, ``refusal``, ``prompt_echo``,
    ``heading_echo``, ``repeated_call``, ``max_iters``, ``empty`` or ``no_model``; in the service also
    ``model_error`` or ``model_timeout`` (the model failed after the passages were found)."""
