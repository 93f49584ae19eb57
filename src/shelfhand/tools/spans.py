"""What a tool-call span records (``execute_tool {tool}``): the call, its arguments with
secrets masked, and what governance decided and did.

The governance steps are events of the span, in the order they apply: the permission
decision (``allow``, ``deny`` or ``ask``), the human's approval, the rate limit, the circuit
breaker, the result cache (a replay) and single-flight (a result shared with an identical
concurrent call). The result's text is recorded only when the tracer records contents.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from shelfhand.tools.audit import masked_arguments

if TYPE_CHECKING:
    from shelfhand.core.messages import ToolCallBlock, ToolResultBlock
    from shelfhand.core.tracing import Span

__all__ = ["record_tool_call"]

# outcomes that are governance refusing or stopping the call (the rest: the tool ran)
_GOVERNANCE_OUTCOMES = {
    "denied": "permission",
    "unknown_tool": "permission",
    "needs_approval": "approval",
    "rejected": "approval",
    "rate_limited": "rate_limit",
    "circuit_open": "breaker",
}


class CallReport(Protocol):
    """What a span reads of :class:`~shelfhand.tools.toolkit.CallReport`."""

    @property
    def result(self) -> ToolResultBlock: ...
    @property
    def request_id(self) -> str: ...
    @property
    def decision(self) -> str: ...
    @property
    def outcome(self) -> str: ...
    @property
    def replayed(self) -> bool: ...
    @property
    def shared(self) -> bool: ...
    @property
    def attempts(self) -> int: ...
    @property
    def repairs(self) -> tuple[str, ...]: ...


def tool_span_attributes(call: ToolCallBlock) -> dict[str, str]:
    """What a tool span says before the call runs."""
    return {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.name,
        "gen_ai.tool.call.id": call.id,
        "gen_ai.tool.call.arguments": masked_arguments(call.arguments),
    }


def record_tool_call(span: Span, report: CallReport) -> None:
    """Fill ``span`` with how the governed call went."""
    outcome = report.outcome
    attributes = span.attributes  # (set on the span's own dict: none of these is None)
    attributes["shelfhand.tool.decision"] = report.decision
    attributes["shelfhand.tool.outcome"] = outcome
    attributes["shelfhand.tool.attempts"] = report.attempts
    attributes["shelfhand.tool.cache_hit"] = report.replayed
    attributes["shelfhand.tool.shared"] = report.shared
    attributes["shelfhand.tool.request_id"] = report.request_id
    step = _GOVERNANCE_OUTCOMES.get(outcome)
    if step == "permission":  # refused at the first step
        span.event("governance.permission", decision=report.decision, outcome=outcome)
    else:
        span.event("governance.permission", decision=report.decision)
        if step is not None:
            span.event(f"governance.{step}", outcome=outcome)
    if report.replayed:
        span.event("governance.cache", hit=True)
    if report.shared:
        span.event("governance.single_flight", shared=True)
    if report.repairs:
        span.set("shelfhand.tool.repairs", list(report.repairs))
    if span.tracer.record_content:
        span.set("gen_ai.tool.call.result", report.result.content)
    if report.result.is_error:
        if report.result.failure:  # why, in words made for people: no content, no secret
            attributes["shelfhand.tool.failure"] = report.result.failure
        span.fail(outcome if outcome != "ok" else "error")
