"""Calls that share one execution: the result cache and single-flight (docs/design.md T5, points 4–5).

Identical concurrent calls of a read-only tool (same name, same canonical arguments, same
caller) execute once and share the outcome; results of read-only tools that declare
``cache_ttl`` are kept for that long, per caller, and later identical calls are "replayed"
from them. With a ``shared`` state the cache lives outside the process and one replica
computes a cached call while the others wait for its result.

:class:`CallSharing` is the part of :class:`~shelfhand.tools.governance.Governance` that
does this, around the attempts (retries, breakers, timeouts) that the pipeline makes.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from shelfhand.core.offload import in_background, on_state_thread, undone_if_left
from shelfhand.tools.audit import canonical_json
from shelfhand.tools.policy import CallOutcome, Executor, GovernancePolicy, ToolPlan

if TYPE_CHECKING:
    from shelfhand.core.context import RunContext, UserContext
    from shelfhand.tools.policy import SharedGovernanceState
    from shelfhand.tools.tool import ToolOutput

__all__ = ["CallSharing"]


class CallSharing:
    """The cache and single-flight state of a :class:`~shelfhand.tools.governance.Governance`
    (which sets these attributes and makes the attempts)."""

    policy: GovernancePolicy
    shared: SharedGovernanceState | None
    clock: Callable[[], float]
    _cache: dict[tuple[str, str, str], tuple[float, ToolOutput]]
    _inflight: dict[tuple[str, str, str], _Flight]
    _waiting: dict[tuple[str, str, str], int]
    _attempts: Callable[
        [ToolPlan, Any, dict[str, Any], RunContext, Executor], Coroutine[Any, Any, CallOutcome]
    ]
    """Run the call: the pipeline's attempts (retries, breakers, timeouts; ``Governance``)."""

    def _share_nothing(self) -> None:
        """Start with nothing cached or in flight."""
        self._cache = {}
        self._inflight = {}
        self._waiting = {}

    def waiting(self, tool: str, user: UserContext, arguments: Mapping[str, Any]) -> int:
        """How many calls are waiting to share the in-flight execution of this exact call."""
        return self._waiting.get((tool, user.scope, canonical_json(arguments)), 0)

    def clear_cache(self) -> None:
        """Forget every cached result."""
        self._cache.clear()

    async def run(
        self,
        plan: ToolPlan,
        item: Any,
        arguments: dict[str, Any],
        run: RunContext,
        key: tuple[str, str, str] | None,
        execute: Executor,
    ) -> tuple[CallOutcome, bool, bool]:
        """Cache, single-flight, breaker, retries and timeout around ``execute``.

        ``key`` is ``(tool, caller scope, canonical arguments)`` for read-only tools, else
        ``None``. Returns the outcome, whether it was replayed from the cache, and whether it
        was shared with an identical concurrent call.
        """
        if key is None:
            return await self._attempts(plan, item, arguments, run, execute), False, False
        if plan.cache_ttl:
            if self.shared is not None:
                output = await on_state_thread(self.shared.cache_get, key)
                if output is not None:
                    return CallOutcome(output=output, outcome="ok", attempts=0), True, False
            else:
                hit = self._cache.get(key)
                if hit is not None:
                    if hit[0] > self.clock():
                        return CallOutcome(output=hit[1], outcome="ok", attempts=0), True, False
                    del self._cache[key]
        if not plan.dedup:
            alone = await self._compute(plan, item, arguments, run, key, execute)
            self._remember(plan, key, alone)
            return alone, False, False
        loop = asyncio.get_running_loop()
        flight = self._inflight.get(key)
        if flight is not None and flight.loop is loop:
            if flight.future is None:  # the first follower makes the future to wait on
                flight.future = loop.create_future()
            waiting = self._waiting
            waiting[key] = waiting.get(key, 0) + 1
            try:
                return await _follow(plan.name, flight.future), False, True
            finally:
                waiting[key] -= 1
                if not waiting[key]:
                    del waiting[key]
        flight = self._inflight[key] = _Flight(loop)
        outcome: CallOutcome | None = None
        shared = False
        try:
            outcome = await self._compute(plan, item, arguments, run, key, execute)
            if outcome.attempts == 0:  # computed by another replica: it cached it
                outcome, shared = outcome._replace(attempts=1), True
            else:
                self._remember(plan, key, outcome)
        finally:
            if self._inflight.get(key) is flight:
                del self._inflight[key]
            future = flight.future
            if future is not None and not future.done():
                if outcome is None:
                    future.cancel()  # the leader was cancelled: followers get an error result
                else:
                    future.set_result(outcome)
        return outcome, False, shared

    def _compute(
        self,
        plan: ToolPlan,
        item: Any,
        arguments: dict[str, Any],
        run: RunContext,
        key: tuple[str, str, str],
        execute: Executor,
    ) -> Awaitable[CallOutcome]:
        """Run the call; for a cached tool with shared state, only one replica runs it: the
        others wait (at most the tool's timeout) for its cached result (``attempts=0``).

        Not a coroutine itself: the common call (no shared state) awaits the attempts
        directly, without a frame in between."""
        attempts = self._attempts(plan, item, arguments, run, execute)
        if self.shared is None or not plan.cache_ttl:
            return attempts
        bound = (plan.timeout or 30.0) * plan.attempts + 1.0
        return _led(self.shared, key, bound, plan.cache_ttl, attempts)

    def _remember(self, plan: ToolPlan, key: tuple[str, str, str], outcome: CallOutcome) -> None:
        if not plan.cache_ttl or outcome.output is None or outcome.output.is_error:
            return
        if self.shared is not None:  # (cached by ``_led`` before it ended its lead)
            return
        cache = self._cache
        if len(cache) >= self.policy.cache_size:
            if not self.policy.cache_size:
                return
            del cache[next(iter(cache))]  # oldest insertion first
        cache[key] = (self.clock() + plan.cache_ttl, outcome.output)


async def _led(
    shared: SharedGovernanceState,
    key: tuple[str, str, str],
    bound: float,
    ttl: float,
    attempts: Coroutine[Any, Any, CallOutcome],
) -> CallOutcome:
    """``attempts`` once this replica leads the computation of ``key``; the cached result
    of another replica's (``attempts=0``) when that comes first. A result is cached before
    the lead ends, so a replica that finds the lead gone finds the result."""
    # (each a Redis command: from a state thread, so that a Redis that stopped answering holds
    # up this call, not the event loop)
    try:
        # (a lead taken for a call cancelled meanwhile is ended, not left for ``bound`` s)
        lead = functools.partial(_end_lead, shared, key)
        if not await undone_if_left(shared.lead, key, bound, undo=lead):
            give_up = time.monotonic() + bound  # real time: other replicas work in it
            while time.monotonic() < give_up:
                await asyncio.sleep(shared.poll_interval)
                # (the lead first: a result is cached before its lead ends, so a lead gone
                # here means a result below, unless the other replica failed, errors are not
                # cached, or gave up)
                leading = await on_state_thread(shared.computing, key)
                output = await on_state_thread(shared.cache_get, key)
                if output is not None:
                    return CallOutcome(output=output, outcome="ok", attempts=0)
                if not leading:
                    break
            if not await undone_if_left(shared.lead, key, bound, undo=lead):  # pragma: no cover
                return await attempts  # (a new leader in between)
        outcome: CallOutcome | None = None
        try:
            outcome = await attempts
            return outcome
        finally:
            # (not waited for: the call may be cancelled; one job, so the result is put
            # before the lead is deleted)
            output = None if outcome is None else outcome.output
            in_background(_publish, shared, key, output, ttl)
    finally:
        # unrun when another replica's result came first or the wait was cancelled: closed
        # here, not reported as never awaited (a no-op once it has run)
        attempts.close()


def _publish(
    shared: SharedGovernanceState,
    key: tuple[str, str, str],
    output: ToolOutput | None,
    ttl: float,
) -> None:
    """Cache a good result, then end the lead: a replica waiting on it that sees the lead
    gone must find the result, not compute the call again."""
    try:
        if output is not None and not output.is_error:
            shared.cache_put(key, output, ttl)
    finally:
        shared.done(key)


def _end_lead(shared: SharedGovernanceState, key: tuple[str, str, str], led: bool) -> None:
    if led:
        shared.done(key)


class _Flight:
    """An execution in progress that identical calls may join (its future made on demand:
    most calls are never joined, and a future per call would cost more than the bookkeeping)."""

    __slots__ = ("future", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future[CallOutcome] | None = None


async def _follow(name: str, leader: asyncio.Future[CallOutcome]) -> CallOutcome:
    try:
        return await asyncio.shield(leader)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if leader.cancelled() and (task is None or not task.cancelling()):
            return CallOutcome(
                output=None,
                outcome="error",
                message=f"tool {name} failed: the identical call it was waiting for was cancelled",
                error_class="CancelledError",
                failure="failed: the identical call it was waiting for was cancelled",
            )
        raise
