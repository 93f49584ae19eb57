"""Human confirmation of tool calls: a registry of pending approvals (docs/design.md T5).

A tool marked ``confirm=True`` never runs on the model's word alone. When the model calls one,
the agent opens an :class:`ApprovalRequest` in an :class:`Approvals` registry, streams an
``ApprovalRequired`` event (with the arguments redacted) and waits; whoever holds the registry —
a UI, an HTTP handler serving a *separate* request, a script — calls :meth:`Approvals.approve`
or :meth:`Approvals.reject` with the request's id, and the run resumes. A rejection (with its
reason) reaches the model as the tool's error result.

No blocking ``input()`` anywhere: the library only waits on an asyncio future. Decisions may
come from another task or another thread.

Without a registry (``Agent(approvals=None)``, the default) confirmation tools are not run: the
model reads "tool X needs human confirmation ...", so a run can never hang waiting for a human
that nobody asked. For scripts, ``Approvals(handler=...)`` decides automatically.

Example (an HTTP service)::

    approvals = Approvals(timeout=300)
    agent = Agent(model=model, toolkit=kit, approvals=approvals)
    # SSE endpoint: relay ApprovalRequired(approval_id=...) events from agent.stream(...)
    # POST /approvals/{id}: check request.user matches the caller, then
    approvals.approve(approval_id)            # or approvals.reject(approval_id, "wrong order")
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from shelfhand.core.context import UserContext
from shelfhand.core.errors import InvalidArgumentError
from shelfhand.core.offload import off_loop_if, soon_if, undone_if_left
from shelfhand.core.secrets import redact_text, redacted_traceback

__all__ = ["ApprovalDecision", "ApprovalHandler", "ApprovalRequest", "Approvals"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRequest:
    """One tool call waiting for a human's decision."""

    id: str
    call_id: str
    tool: str
    arguments: Mapping[str, Any]
    """The call's arguments with secrets redacted (safe to show and to log)."""
    user: UserContext
    """The caller of the run: check it before accepting a decision from someone else."""
    trace_id: str = ""
    created_at: float = field(default_factory=time.time)


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalDecision:
    """A human's (or a handler's) answer to an :class:`ApprovalRequest`."""

    approved: bool
    reason: str = ""
    by: str = ""
    """Who decided (free text, for the audit trail)."""


ApprovalHandler: TypeAlias = Callable[
    [ApprovalRequest],
    ApprovalDecision | bool | Awaitable[ApprovalDecision | bool | None] | None,
]
"""Decides a request automatically; ``None`` leaves it to ``approve``/``reject``."""


@dataclass(slots=True)
class _Pending:
    request: ApprovalRequest
    future: asyncio.Future[ApprovalDecision]
    decided: bool = False


class Approvals:
    """A registry of pending approvals, shared by the agent and whoever decides.

    Args:
        handler: Optional automatic decider, called with each request (sync or async); it
            returns an :class:`ApprovalDecision`, a bool, or ``None`` to wait for
            :meth:`approve` / :meth:`reject`. A handler that raises rejects the call.
        timeout: Seconds to wait for a decision before rejecting (``None``: wait until decided
            or the run is cancelled).
    """

    blocking = False
    """Its copies are on a server (Redis): the agent writes and reads them from a state thread
    (:mod:`shelfhand.core.offload`), never on the event loop."""

    def __init__(
        self, *, handler: ApprovalHandler | None = None, timeout: float | None = 600.0
    ) -> None:
        if timeout is not None and timeout <= 0:
            raise InvalidArgumentError("timeout must be positive or None")
        self.handler = handler
        self.timeout = timeout
        self._pending: dict[str, _Pending] = {}
        self._sessions: dict[str, str] = {}
        self._lock = threading.Lock()

    def open(
        self,
        *,
        call_id: str,
        tool: str,
        arguments: Mapping[str, Any],
        user: UserContext,
        trace_id: str = "",
    ) -> ApprovalRequest:
        """Register a pending request (called by the agent, inside its event loop)."""
        request = self._register(
            call_id=call_id, tool=tool, arguments=arguments, user=user, trace_id=trace_id
        )
        try:
            self._opened(request)
        except BaseException:  # nothing half-open is left behind
            self._unregister(request)
            raise
        return request

    async def open_off_loop(self, **fields: Any) -> ApprovalRequest:
        """:meth:`open` (the same arguments), whose shared copy a ``blocking`` registry
        writes from a state thread."""
        if not self.blocking:
            return self.open(**fields)
        request = self._register(**fields)
        try:  # (a copy written as the run was cancelled is removed once written)
            await undone_if_left(self._opened, request, undo=lambda _: self._forgotten(request))
        except BaseException:
            self._unregister(request)
            raise
        return request

    def _register(self, **fields: Any) -> ApprovalRequest:
        request = ApprovalRequest(id=uuid.uuid4().hex, **fields)
        future: asyncio.Future[ApprovalDecision] = asyncio.get_running_loop().create_future()
        with self._lock:
            self._pending[request.id] = _Pending(request=request, future=future)
        return request

    def _unregister(self, request: ApprovalRequest) -> None:
        with self._lock:
            self._pending.pop(request.id, None)

    async def wait(self, approval_id: str) -> ApprovalDecision:
        """Wait for the decision on ``approval_id``; a timeout becomes a rejection.

        The handler, if any, is asked first; then the decision arrives through
        :meth:`_arrival` (in this process: :meth:`decide` resolves a future), bounded by
        ``timeout``, after which :meth:`_time_out` says what stands. The request is forgotten
        afterwards, whatever happened.

        Raises:
            KeyError: no pending request has this id.
        """
        with self._lock:
            pending = self._pending.get(approval_id)
        if pending is None:
            raise KeyError(f"no pending approval {approval_id!r}")
        try:
            if self.handler is not None and not pending.decided:
                decided = await self._ask_handler(pending.request)
                if decided is not None:
                    return decided
            arrived = await self._arrival(approval_id, pending.future, self.timeout)
            if arrived is not None:
                return arrived
            return await off_loop_if(self.blocking, self._time_out, approval_id)
        finally:
            self._drop(approval_id)

    async def _arrival(
        self,
        approval_id: str,
        decided_here: asyncio.Future[ApprovalDecision],
        timeout: float | None,
    ) -> ApprovalDecision | None:
        """How a decision arrives: the hook a shared registry overrides.

        Args:
            approval_id: The request waited for.
            decided_here: Resolved by :meth:`decide` in this process; never cancelled here.
            timeout: Seconds to wait at most (``None``: no limit).

        Returns:
            The decision, or ``None`` when ``timeout`` passed without one.
        """
        await asyncio.wait({decided_here}, timeout=timeout)
        return decided_here.result() if decided_here.done() else None

    def _time_out(self, approval_id: str) -> ApprovalDecision:
        """What stands when no decision arrived in time: a rejection saying so (a shared
        registry first checks that nobody decided in the last instant)."""
        return ApprovalDecision(approved=False, reason=f"no decision within {self.timeout:g} s")

    def _opened(self, request: ApprovalRequest) -> None:
        """Called when ``request`` was registered, for a shared registry to keep a copy; if
        it raises, the request is not opened."""

    def _forgotten(self, request: ApprovalRequest) -> None:
        """Called once ``request`` has left the registry (read, timed out or discarded), for
        a shared registry to remove its copy."""

    def _drop(self, approval_id: str) -> None:
        with self._lock:
            pending = self._pending.pop(approval_id, None)
            self._sessions.pop(approval_id, None)
        if pending is not None:
            if not pending.future.done():
                pending.future.cancel()
            # (not waited for: this may run as the run is cancelled)
            soon_if(self.blocking, self._forgotten, pending.request)

    def bind_session(self, approval_id: str, session_id: str) -> None:
        """Note which conversation a pending request belongs to (a service checks it when
        a decision comes for a session); forgotten with the request."""
        with self._lock:
            if approval_id in self._pending:
                self._sessions[approval_id] = session_id

    def session_of(self, approval_id: str) -> str | None:
        """The session a pending request was bound to, if any."""
        with self._lock:
            return self._sessions.get(approval_id)

    def approve(self, approval_id: str, *, by: str = "") -> ApprovalRequest:
        """Approve a pending request; the waiting run resumes and executes the call.

        Raises:
            KeyError: no pending request has this id (unknown, already decided or timed out).
        """
        return self.decide(approval_id, ApprovalDecision(approved=True, by=by))

    def reject(self, approval_id: str, reason: str = "", *, by: str = "") -> ApprovalRequest:
        """Reject a pending request; the model reads the rejection and ``reason``.

        Raises:
            KeyError: no pending request has this id.
        """
        return self.decide(approval_id, ApprovalDecision(approved=False, reason=reason, by=by))

    def decide(self, approval_id: str, decision: ApprovalDecision) -> ApprovalRequest:
        """Resolve a pending request with ``decision`` (from any thread).

        Raises:
            KeyError: no pending request has this id.
        """
        with self._lock:
            pending = self._pending.get(approval_id)
            if pending is None or pending.decided:
                raise KeyError(f"no pending approval {approval_id!r} (unknown or already decided)")
            pending.decided = True  # the entry stays until the waiting run has read it
        loop = pending.future.get_loop()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            pending.future.set_result(decision)
        else:
            loop.call_soon_threadsafe(_resolve, pending.future, decision)
        logger.info(
            "approval %s for tool %s: %s",
            approval_id,
            pending.request.tool,
            "approved" if decision.approved else "rejected",
        )
        return pending.request

    def discard(self, approval_id: str) -> None:
        """Forget a request without deciding it (its run was cancelled); unknown ids are ignored."""
        self._drop(approval_id)

    def get(self, approval_id: str) -> ApprovalRequest | None:
        """The pending request with this id, or ``None``."""
        with self._lock:
            pending = self._pending.get(approval_id)
        return None if pending is None or pending.decided else pending.request

    def pending(self, user: UserContext | None = None) -> list[ApprovalRequest]:
        """Pending requests, oldest first; only ``user``'s (same tenant and user) if given."""
        with self._lock:
            requests = [p.request for p in self._pending.values() if not p.decided]
        if user is not None:
            requests = [r for r in requests if r.user.scope == user.scope]
        return requests

    async def _ask_handler(self, request: ApprovalRequest) -> ApprovalDecision | None:
        assert self.handler is not None
        try:
            answer = self.handler(request)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception as exc:
            logger.warning(
                "approval handler failed for tool %s\n%s", request.tool, redacted_traceback(exc)
            )
            reason = f"approval handler failed: {type(exc).__name__}: {redact_text(str(exc))}"
            return ApprovalDecision(approved=False, reason=reason)
        if answer is None:
            return None
        if isinstance(answer, ApprovalDecision):
            return answer
        return ApprovalDecision(approved=bool(answer), by="handler")


def _resolve(future: asyncio.Future[ApprovalDecision], decision: ApprovalDecision) -> None:
    if not future.done():
        future.set_result(decision)
