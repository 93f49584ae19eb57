"""What a run produced, as values: the answer, its transcript, citations and usage.

:class:`RunResult` is what :meth:`Agent.run <shelfhand.agent.agent.Agent.run>` returns and what
the stream's :class:`~shelfhand.core.events.Final` event carries; :class:`Usage` is the tokens
of one model call or of a whole run.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from shelfhand.core.grounding import Grounding
from shelfhand.core.messages import Citation, Message, ToolCallBlock
from shelfhand.core.slots import slot_setters, twin

__all__ = ["RunResult", "StopReason", "Usage", "UsageTally"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """What one model call, or a whole run or turn, used.

    A model reply's own usage has only the tokens; a run's adds how many model calls, tool
    calls and retrievals (calls of the ``retrieve`` tool, the up-front ones included) it
    made, its subagents' finished runs included (see :class:`UsageTally`). Tool calls and
    retrievals are those that ran: a call the loop guard answered from an earlier identical
    call's result is not counted, nor one the run stopped before it ran.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    retrievals: int = 0
    cost: float | None = None
    """What the model calls cost at the configured prices (setting ``prices``, see
    :mod:`shelfhand.core.pricing`); ``None`` when a call's model has no price (or its
    provider reported no usage): never a guess."""

    def __init__(
        self,
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
        model_calls: int = 0,
        tool_calls: int = 0,
        retrievals: int = 0,
        cost: float | None = None,
    ) -> None:
        # one per model reply and per run: set through the slots (see shelfhand.core.slots)
        _input_tokens(self, input_tokens)
        _output_tokens(self, output_tokens)
        _model_calls(self, model_calls)
        _tool_calls(self, tool_calls)
        _retrievals(self, retrievals)
        _cost(self, cost)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            model_calls=self.model_calls + other.model_calls,
            tool_calls=self.tool_calls + other.tool_calls,
            retrievals=self.retrievals + other.retrievals,
            cost=_cost_sum(self, other),
        )

    def to_dict(self) -> dict[str, int | float]:
        """The JSON form (replies, the SSE ``final`` event, ``ask --json``); ``cost`` only
        when it is known."""
        out: dict[str, int | float] = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "retrievals": self.retrievals,
        }
        if self.cost is not None:
            out["cost"] = self.cost
        return out


def _cost_sum(a: Usage, b: Usage) -> float | None:
    """The cost of ``a`` and ``b`` together: unknown when either has a model call of unknown
    cost; a part without model calls costs nothing."""
    if (a.cost is None and a.model_calls) or (b.cost is None and b.model_calls):
        return None
    if a.cost is None and b.cost is None:
        return None
    return (a.cost or 0.0) + (b.cost or 0.0)


_input_tokens, _output_tokens, _model_calls, _tool_calls, _retrievals, _cost = slot_setters(
    Usage, "input_tokens", "output_tokens", "model_calls", "tool_calls", "retrievals", "cost"
)
_NOTHING = Usage()
_TALLY_LOCK = threading.Lock()
"""Every tally's: a tally is added to once per finished subagent run, so one lock for all is
never contended, and a run (which starts one) makes no lock of its own."""


class UsageTally:
    """The usage of the runs one run delegated (its subagents'), added as each finishes,
    and of its model calls beside the loop (a follow-up's query rewrite).

    Each run has its own (``RunContext.delegated``); a subagent's run adds its whole usage
    (its own subagents' included) to its parent's when it ends, so the parent's usage is the
    sum of every model call of the turn. Safe to share between the concurrent tool calls of
    one run (they may run in threads).
    """

    __slots__ = ("_total",)

    def __init__(self) -> None:
        self._total = _NOTHING  # immutable: every run's tally may start from the same one

    def add(self, usage: Usage) -> None:
        with _TALLY_LOCK:
            self._total = self._total + usage

    @property
    def total(self) -> Usage:
        return self._total


StopReason = Literal[
    "final",
    "max_iters",
    "external_tool",
    "empty",
    "repeated_call",
    "human_needed",
    "budget_exceeded",
]
"""Why a run ended: the model answered (``final``); it ran out of steps (``max_iters``); it
called an ``external`` tool (``external_tool``); it answered blank, or only repeated a tool's
raw JSON result, even after a nudge (``empty``: the output is an honest fallback); it kept
repeating a failing call (``repeated_call``); delegation went round in circles and a person should look
(``human_needed``, see :mod:`shelfhand.agent.supervisor`); a budget ran out after a model
call of the run's own, the loop's or one beside it such as a search's ranking
(``budget_exceeded``: the output is the model-free answer of what it had
found, see :mod:`shelfhand.agent.budget_stop`)."""


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
    """Why the model's answer was replaced: ``ungrounded``, ``refusal``, ``declined``,
    ``tool_failed``, ``prompt_echo``, ``posed_as_quoted``, ``heading_echo``, ``off_topic``,
    ``unanswered``, ``partial``, ``other_language``, ``repeated_call``, ``max_iters``,
    ``empty``, ``no_model`` or ``budget_exceeded``; in the service also ``model_error`` or
    ``model_timeout`` (the model failed after the passages were found)."""
    budget: Mapping[str, object] | None = None
    """The budget that ended the run (``stop_reason`` ``budget_exceeded``): ``budget``,
    ``scope``, ``limit``, ``used`` and ``reset_at`` (epoch seconds); ``None`` otherwise."""

    def __init__(
        self,
        *,
        output: str,
        messages: tuple[Message, ...],
        citations: tuple[Citation, ...] = (),
        usage: Usage | None = None,
        iterations: int = 0,
        stop_reason: StopReason = "final",
        external_calls: tuple[ToolCallBlock, ...] = (),
        trace_id: str = "",
        unknown_citations: tuple[int, ...] = (),
        grounding: Grounding | None = None,
        extractive: bool = False,
        fallback_reason: str = "",
        budget: Mapping[str, object] | None = None,
    ) -> None:
        # one per run: set through the slots (see shelfhand.core.slots)
        _output(self, output)
        _messages(self, messages)
        _citations(self, citations)
        _usage(self, _NOTHING if usage is None else usage)
        _iterations(self, iterations)
        _stop_reason(self, stop_reason)
        _external_calls(self, external_calls)
        _trace_id(self, trace_id)
        _unknown_citations(self, unknown_citations)
        _grounding(self, grounding)
        _extractive(self, extractive)
        _fallback_reason(self, fallback_reason)
        _budget(self, budget)


(
    _output,
    _messages,
    _citations,
    _usage,
    _iterations,
    _stop_reason,
    _external_calls,
    _trace_id,
    _unknown_citations,
    _grounding,
    _extractive,
    _fallback_reason,
    _budget,
) = slot_setters(
    RunResult,
    "output",
    "messages",
    "citations",
    "usage",
    "iterations",
    "stop_reason",
    "external_calls",
    "trace_id",
    "unknown_citations",
    "grounding",
    "extractive",
    "fallback_reason",
    "budget",
)


_UsageFields = twin(Usage)
_ResultFields = twin(RunResult)


def run_usage(
    *,
    input_tokens: int,
    output_tokens: int,
    model_calls: int,
    tool_calls: int,
    retrievals: int,
    cost: float | None,
) -> Usage:
    """``Usage(...)`` of a run's counts, built as a twin (see :mod:`shelfhand.core.slots`)."""
    usage = _UsageFields()
    usage.input_tokens = input_tokens
    usage.output_tokens = output_tokens
    usage.model_calls = model_calls
    usage.tool_calls = tool_calls
    usage.retrievals = retrievals
    usage.cost = cost
    usage.__class__ = Usage
    built: Usage = usage
    return built


def run_result(
    *,
    output: str,
    messages: tuple[Message, ...],
    citations: tuple[Citation, ...],
    usage: Usage,
    iterations: int,
    stop_reason: StopReason,
    trace_id: str,
    external_calls: tuple[ToolCallBlock, ...] = (),
    unknown_citations: tuple[int, ...] = (),
) -> RunResult:
    """The result of a run that ended by itself (no check has looked at it yet: not
    grounded, not replaced, no budget), built as a twin (see :mod:`shelfhand.core.slots`)."""
    result = _ResultFields()
    result.output = output
    result.messages = messages
    result.citations = citations
    result.usage = usage
    result.iterations = iterations
    result.stop_reason = stop_reason
    result.external_calls = external_calls
    result.trace_id = trace_id
    result.unknown_citations = unknown_citations
    result.grounding = None
    result.extractive = False
    result.fallback_reason = ""
    result.budget = None
    result.__class__ = RunResult
    built: RunResult = result
    return built
