"""Toolkit: the registry the agent hands to the model, and its calls (docs/design.md T4).

A :class:`Toolkit` holds tools, optionally in *groups*. Ungrouped tools are always active;
groups are inactive until switched on — by code (:meth:`Toolkit.activate`) or by the model
through the meta tool ``use_tool_group`` — so a large catalogue does not fill the context.
Before the model sees anything, tools are filtered by the caller's permission level (the
registry: :mod:`shelfhand.tools.registry`).

:meth:`Toolkit.call` runs one tool call through the governance pipeline (permission decision,
rate limits, cache, single-flight, timeout, retries, circuit breaker, confirmation, audit — see
:mod:`shelfhand.tools.governance`) and never raises for a problem the model can fix: unknown
tools, bad arguments, failures, timeouts, open circuits and rate limits all come back as a
``ToolResultBlock`` with ``is_error=True``. Before validation, mechanical slips in the
arguments (JSON-schema keywords echoed into them, JSON sent as a string) are repaired and the
repairs audited (see :mod:`shelfhand.tools.repair`). ``external`` tools are never executed here: the
agent stops when the model calls one and returns the call to its caller, who executes it.

Every tool goes through the same pipeline, whatever it is (a local function, an MCP tool, a
subagent): the pipeline reads only the :class:`Tool` attributes.

Group state belongs to the toolkit; give each conversation its own (see :meth:`Toolkit.copy`)
when the model may switch groups.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from shelfhand.core.citations import number_here, renumber_passages
from shelfhand.core.context import RunContext, UserContext
from shelfhand.core.errors import ToolArgumentError
from shelfhand.core.messages import ToolCallBlock, ToolResultBlock, tool_result
from shelfhand.core.offload import on_state_thread
from shelfhand.core.slots import twin
from shelfhand.core.step_counts import current_counting
from shelfhand.core.tracing import current_span, enter, leave, start_span
from shelfhand.tools.audit import canonical_json, redact
from shelfhand.tools.governance import Decision, Outcome, ToolPlan, told_line
from shelfhand.tools.registry import META_TOOL_NAME, AnyTool, ToolRegistry
from shelfhand.tools.repair import SCHEMA_KEYWORDS, repair_arguments
from shelfhand.tools.spans import record_tool_call, tool_span_attributes

if TYPE_CHECKING:
    from shelfhand.tools.approvals import ApprovalDecision
    from shelfhand.tools.audit import AuditLog
    from shelfhand.tools.tool import ToolOutput

__all__ = ["META_TOOL_NAME", "CallReport", "Toolkit"]

logger = logging.getLogger(__name__)

_PLAIN_USER = UserContext(tenant_id="-", user_id="-")
_SCHEMA_KEYWORDS = SCHEMA_KEYWORDS
_JSON_OPENERS = ("{", "[")  # what a string must start with to be repaired (decoded)


@dataclass(frozen=True, slots=True, kw_only=True)
class CallReport:
    """One governed call: the result the model reads, and what the pipeline did."""

    result: ToolResultBlock
    request_id: str
    decision: Decision
    outcome: Outcome
    replayed: bool = False
    """The result came from the cache (the tool did not run)."""
    shared: bool = False
    """The result was shared from an identical concurrent call (the tool ran once)."""
    attempts: int = 0
    duration_ms: float = 0.0
    repairs: tuple[str, ...] = ()
    """Repairs made to the model's arguments before the call (see :mod:`~.repair`)."""


_ReportFields = twin(CallReport)


class Toolkit(ToolRegistry):
    """A registry of tools and tool groups, filtered per caller, governed on every call.

    Args:
        tools: Tools or plain functions (wrapped with ``tool()``) to add, ungrouped unless the
            tool names a ``group``.
        policy: Toolkit-wide governance defaults (timeout 5 s, 2 retries, ...); a tool's own
            attributes override them. Results are cached only for tools that declare
            ``cache_ttl``.
        audit: Where one record per call goes (``None``: not audited). The toolkit does not
            close it.
        governance: A ready :class:`Governance` (to share state between toolkits or to inject
            a clock in tests); instead of ``policy`` and ``audit``.
    """

    @property
    def audit_log(self) -> AuditLog | None:
        """Where this toolkit's calls are audited (``None``: not audited); a caller that
        answers without a tool call (the service's model-free turn) records there too."""
        return self._gov.audit

    def copy(self) -> Toolkit:
        """A toolkit with the same tools and its own group state (one per conversation)."""
        other = Toolkit(governance=self._gov)  # governance state (cache, breakers) is shared
        self._copy_registry(other)
        return other

    # --- calling ------------------------------------------------------------------------------
    async def call(
        self, call: ToolCallBlock, run: RunContext, *, approval: ApprovalDecision | None = None
    ) -> ToolResultBlock:
        """Run one tool call for ``run.user``; model-facing problems become error results.

        Args:
            call: The model's call.
            run: The run (caller, trace id) it belongs to.
            approval: A human's decision, for tools marked ``confirm=True``; without one such
                tools are not run and the model is told they need confirmation.
        """
        if current_span() is None and current_counting() is None:
            # nothing reads the report (no span, no step count): none is built for it
            done = await self._governed(call, run, approval, False)
            return done.result if isinstance(done, CallReport) else done
        return (await self.execute(call, run, approval=approval)).result

    async def execute(
        self, call: ToolCallBlock, run: RunContext, *, approval: ApprovalDecision | None = None
    ) -> CallReport:
        """:meth:`call`, also reporting what the pipeline did (cache hit, attempts, outcome).

        Inside a traced run the call is an ``execute_tool {name}`` span (see
        :mod:`shelfhand.tools.spans`); inside a turn that counts its steps it is counted
        (:mod:`shelfhand.core.step_counts`)."""
        parent = current_span()
        counting = current_counting()
        if parent is None and counting is None:
            report = await self._governed(call, run, approval, True)
            assert isinstance(report, CallReport)  # a reported call always has one
            return report
        span = (
            None
            if parent is None
            else start_span(
                f"execute_tool {call.name}",
                "tool",
                parent=parent,
                attributes=tool_span_attributes(call),
            )
        )
        token = enter(span)
        try:
            report = await self._governed(call, run, approval, True)
            assert isinstance(report, CallReport)
        except BaseException as exc:
            if span is not None:
                span.fail(type(exc).__name__)
            leave(span, token)
            if counting is not None:
                counting.counter.count_tool_call(call.name, "error")
            raise
        if span is not None:
            record_tool_call(span, report)
        leave(span, token)
        if counting is not None:
            counting.counter.count_tool_call(call.name, report.outcome)
        return report

    async def _governed(
        self,
        call: ToolCallBlock,
        run: RunContext,
        approval: ApprovalDecision | None,
        reported: bool,
    ) -> CallReport | ToolResultBlock:
        """The governed call; its report, or only its result when not ``reported`` and
        neither the audit log nor debug logging needs the report."""
        started = time.perf_counter()
        gov = self._gov
        name = call.name
        visible, by_name = self._view(run.user)
        found = by_name.get(name)
        if found is None:
            registered = self._tools.get(name)
            denied = registered is not None and not run.user.may_use(registered.permission)
            return self._refuse(
                call, run, started, self._unknown_message(name, run.user, visible),
                "denied" if denied else "unknown_tool", "deny", call.arguments, None,
            )  # fmt: skip
        if found.external:
            message = (
                f"tool {name} is external: its calls are executed by the application, "
                "not by the toolkit"
            )
            return self._refuse(
                call, run, started, message, "external", "allow", call.arguments, None
            )
        try:
            arguments = call.parsed_arguments()
        except json.JSONDecodeError as exc:
            message = (
                f"arguments for tool {name} are not valid JSON ({exc.msg} at position "
                f"{exc.pos}); send one JSON object"
            )
            return self._refuse(
                call, run, started, message, "invalid_arguments", "allow",
                call.arguments, None,
            )  # fmt: skip
        arguments, fixes = self._repair(found, arguments)
        repairs = tuple(fixes)
        if not isinstance(arguments, dict):
            message = (
                f"arguments for tool {name} must be a JSON object of named arguments, "
                f"not {_json_kind(arguments)}"
            )
            return self._refuse(
                call, run, started, message, "invalid_arguments", "allow",
                call.arguments, None, repairs,
            )  # fmt: skip
        plan = self._plans.get(name) or self._plan_for(found)
        decision: Decision = "allow"
        if plan.confirm:
            decision = "ask"
            refusal = self._confirmation_refusal(found, arguments, run, approval)
            if refusal is not None:
                return self._refuse(
                    call, run, started, refusal[0], refusal[1], decision,
                    arguments, None, repairs,
                )  # fmt: skip
        if plan.per_caller is not None or plan.total is not None:
            limited = (
                gov.check_rate(plan, run.user.scope)
                if gov.shared is None
                else await on_state_thread(gov.check_rate, plan, run.user.scope)  # (Redis)
            )
            if limited is not None:  # the tool's to say (the model got nothing wrong)
                failure, advice = limited
                return self._refuse(
                    call, run, started, f"tool {name} {failure}; {advice}", "rate_limited",
                    decision, arguments, None, repairs, failure=failure,
                )  # fmt: skip
        canonical: str | None = None
        key: tuple[str, str, str] | None = None
        if plan.dedup or plan.cache_ttl:
            canonical = canonical_json(arguments)
            key = (name, run.user.scope, canonical)
        outcome, replayed, shared = await gov.run(plan, found, arguments, run, key, self._execute)
        output = outcome.output
        if output is None:
            result = tool_result(
                call_id=call.id,
                name=name,
                content=outcome.message,
                is_error=True,
                failure=outcome.failure,
            )
            kind: Outcome = outcome.outcome
        else:
            if output.citations and found.numbered_elsewhere:
                output = _numbered_here(output, run)
            result = tool_result(
                call_id=call.id,
                name=name,
                content=output.content,
                is_error=output.is_error,
                citations=output.citations,
                failure=returned_error(output.content) if output.is_error else "",
            )
            kind = "error" if output.is_error else "ok"
        if not reported and gov.audit is None and not logger.isEnabledFor(logging.DEBUG):
            return result
        # built as a twin (shelfhand.core.slots): a frozen dataclass's own __init__ sets each
        # of the nine fields through object.__setattr__, and every traced or audited call
        # makes one
        fields = _ReportFields()
        fields.result = result
        fields.request_id = gov.new_request_id()  # made only for a report: nothing else reads it
        fields.decision = decision
        fields.outcome = kind
        fields.replayed = replayed
        fields.shared = shared
        fields.attempts = outcome.attempts
        fields.duration_ms = (time.perf_counter() - started) * 1000
        fields.repairs = repairs
        fields.__class__ = CallReport
        report: CallReport = fields
        if gov.audit is not None:
            self._audit(call, run, report, arguments, canonical, outcome.error_class)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "tool %s %s request=%s trace=%s %.2f ms",
                name,
                kind,
                report.request_id,
                run.trace_id,
                report.duration_ms,
            )
        return report

    def shares_identical_calls(self, name: str) -> bool:
        """Whether identical concurrent calls of ``name`` share one execution (read-only tools
        with single-flight on); False for an unknown name."""
        found = self.get(name)
        if found is None:
            return False
        return (self._plans.get(name) or self._plan_for(found)).dedup

    def decide(self, name: str, user: UserContext | None = None) -> Decision:
        """The permission decision, as data, for ``user`` calling the tool ``name``.

        ``deny`` for a tool that does not exist or is hidden from this caller (its level is
        too low, or its group is inactive); ``ask`` for ``confirm=True`` tools; else ``allow``.
        """
        found = self._view(user)[1].get(name)
        if found is None:
            return "deny"
        return self._gov.decide(found, user or _PLAIN_USER)

    def approval_arguments(self, call: ToolCallBlock, run: RunContext) -> dict[str, Any] | None:
        """The redacted arguments to show a human when ``call`` needs confirmation, else None.

        ``None`` too when the call would fail anyway (unknown or hidden tool, bad arguments):
        the model should read that error rather than a human approve a doomed call.
        """
        found = self._view(run.user)[1].get(call.name)
        if found is None or found.external or not getattr(found, "confirm", False):
            return None
        try:
            arguments = self._repair(found, call.parsed_arguments())[0]
        except ValueError:
            return None
        if not isinstance(arguments, dict):
            return None
        try:
            found.bind(arguments, run)
        except ToolArgumentError:
            return None
        redacted: dict[str, Any] = redact(arguments)
        return redacted

    def _execute(
        self, item: AnyTool, arguments: dict[str, Any], run: RunContext
    ) -> Awaitable[ToolOutput]:
        """The one place a tool's function is invoked (the governance pipeline wraps it):
        the tool's own coroutine, awaited by governance (no coroutine of its own around it).

        Raises (when awaited):
            ToolArgumentError: invalid arguments.
            Exception: whatever the tool raises.
        """
        return item.invoke(arguments, run=run)

    @staticmethod
    def _repair(item: AnyTool, arguments: Any) -> tuple[Any, list[str]]:
        """Undo mechanical slips in the arguments (see :mod:`shelfhand.tools.repair`)."""
        if isinstance(arguments, dict) and not _may_need_repair(arguments):
            # the common case: no echoed schema keyword, no string that could hold JSON
            return arguments, []
        parameters = item.schema().get("function", {}).get("parameters") or {}
        return repair_arguments(arguments, parameters)

    def _plan_for(self, item: AnyTool) -> ToolPlan:
        plan = self._gov.plan(item)
        self._plans[item.name] = plan
        return plan

    @staticmethod
    def _confirmation_refusal(
        item: AnyTool,
        arguments: dict[str, Any],
        run: RunContext,
        approval: ApprovalDecision | None,
    ) -> tuple[str, Outcome] | None:
        try:  # bad arguments are reported as such, before anyone is asked to approve them
            item.bind(arguments, run)
        except ToolArgumentError as exc:
            return str(exc), "invalid_arguments"
        name = item.name
        if approval is None:
            return (
                f"tool {name} needs human confirmation and was not run: no approver is "
                "available for this run. Tell the user what you would do and ask them to "
                "confirm.",
                "needs_approval",
            )
        if not approval.approved:
            why = f": {approval.reason}" if approval.reason else ""
            return (
                f"tool {name} was not run: the user rejected the call{why}. Do not retry it "
                "unless the user asks.",
                "rejected",
            )
        return None

    def _refuse(
        self,
        call: ToolCallBlock,
        run: RunContext,
        started: float,
        message: str,
        outcome: Outcome,
        decision: Decision,
        arguments: Any,
        canonical: str | None,
        repairs: tuple[str, ...] = (),
        failure: str = "",
    ) -> CallReport:
        request_id = self._gov.new_request_id()
        report = CallReport(
            result=ToolResultBlock(
                call_id=call.id, name=call.name, content=message, is_error=True, failure=failure
            ),
            request_id=request_id,
            decision=decision,
            outcome=outcome,
            duration_ms=(time.perf_counter() - started) * 1000,
            repairs=repairs,
        )
        if self._gov.audit is not None:
            self._audit(call, run, report, arguments, canonical, "")
        logger.debug("tool %s %s request=%s trace=%s", call.name, outcome, request_id, run.trace_id)
        return report

    def _audit(
        self,
        call: ToolCallBlock,
        run: RunContext,
        report: CallReport,
        arguments: Any,
        canonical: str | None,
        error_class: str,
    ) -> None:
        assert self._gov.audit is not None
        user = run.user
        self._gov.audit.append(
            (
                time.time() - report.duration_ms / 1000,
                call.name,
                user.tenant_id,
                user.user_id,
                run.trace_id,
                report.request_id,
                call.id,
                arguments,
                canonical,
                report.decision,
                report.outcome,
                error_class,
                report.duration_ms,
                report.replayed,
                report.shared,
                report.attempts,
                report.repairs,
                run.parent_trace_id,
                run.depth,
                run.agent_name,
            )
        )

    def _unknown_message(self, name: str, user: UserContext, visible: list[AnyTool]) -> str:
        registered = self._tools.get(name)
        group = self._membership.get(name)
        if registered is not None and group is not None and user.may_use(registered.permission):
            return (
                f"tool {name} is in the tool group {group!r}, which is not active; "
                f"call {META_TOOL_NAME} with group={group!r} first"
            )
        names = ", ".join(t.name for t in visible)
        available = f"Available tools: {names}." if names else "No tools are available."
        return f"unknown tool {name!r}. {available}"


def _may_need_repair(arguments: dict[str, Any]) -> bool:
    """Whether an argument is an echoed schema keyword or a string that could hold JSON (a
    loop, not ``any`` over a generator: it runs for every call)."""
    for key, value in arguments.items():
        if key in _SCHEMA_KEYWORDS:
            return True
        if isinstance(value, str) and value.lstrip()[:1] in _JSON_OPENERS:
            return True
    return False


def _numbered_here(output: ToolOutput, run: RunContext) -> ToolOutput:
    """``output``'s citations numbered in ``run`` (a server's ``[1]`` may be this run's
    ``[4]``: two servers, or a server and ``retrieve``, each start at 1), its passage lines
    with them. After governance: a cached or shared result is numbered in each run."""
    numbers, citations = number_here(output.citations, run.citations)
    content = renumber_passages(output.content, numbers)
    return replace(output, content=content, citations=citations)


def returned_error(content: str) -> str:
    """A tool's own error result (an MCP server's ``isError``, a ``ToolOutput`` with
    ``is_error=True``) as people read it (:func:`~shelfhand.tools.governance.told_line`)."""
    line = told_line(content)
    return f"returned an error: {line}" if line else "returned an error"


def _error(call: ToolCallBlock, message: str) -> ToolResultBlock:
    return ToolResultBlock(call_id=call.id, name=call.name, content=message, is_error=True)


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"
