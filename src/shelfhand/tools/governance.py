"""Governance: the one reliability and safety layer around every tool call (docs/design.md T5).

Tools declare *what* they are (``read_only``, ``idempotent``, ``confirm``, ``timeout``,
``retries``, ``rate_limit``, ``cache_ttl`` on :func:`~shelfhand.tools.tool.tool`); a
:class:`GovernancePolicy` gives toolkit-wide defaults; :class:`Governance` turns both into one
precomputed :class:`ToolPlan` per tool and runs every call through the same pipeline, whatever
the tool is (local function, MCP tool, subagent):

1. a request id (and the run's trace id) for logs and the audit record;
2. a permission decision as data — ``allow`` / ``deny`` / ``ask`` (:meth:`Governance.decide`);
3. rate limits per (caller, tool) and per tool (token buckets);
4. single-flight: identical concurrent calls of a read-only tool (same name, same canonical
   arguments, same caller) execute once and share the outcome;
5. a TTL result cache, only for read-only tools that declare ``cache_ttl`` (opt-in: nothing
   is cached by default, MCP tools included), keyed by caller too (hits are "replayed");
6. a timeout per attempt (sync tools are abandoned in their worker thread, async ones cancelled);
7. retries with exponential backoff and jitter, only for transient errors and only for
   ``read_only`` or ``idempotent`` tools — writes are never retried automatically;
8. circuit breakers keyed by tool *and target*: a tool may derive its target from the call
   (``breaker_key``, e.g. ``http_get`` uses the caller's tenant and the URL's host and port),
   so one caller's failing target never blocks another target or caller; tools may also
   share a ``circuit`` (e.g. one MCP server's) that only "unavailable" failures open
   (:class:`~shelfhand.core.errors.ToolUnavailableError`, ``ConnectionError``). Only
   dependency-health failures count (timeouts, transient errors); bad input, a tool's
   ``ValueError`` or other model-facing errors never open a breaker;
9. human confirmation for ``confirm=True`` tools (see :mod:`shelfhand.tools.approvals`);
10. one audit record per call (see :mod:`shelfhand.tools.audit`).

Every failure becomes a model-readable message ("tool X failed: timed out after 5 s",
"tool X unavailable: circuit open ..."), never an exception, and the run goes on.

Transient errors (worth retrying): ``ConnectionError``, ``TimeoutError`` raised by the tool,
httpx transport errors and HTTP 429/5xx, and :class:`~shelfhand.core.errors.TransientToolError`.
A call that runs past its *own* timeout is not retried (that would multiply the wait).

State (buckets, cache, breakers, in-flight calls) lives in the :class:`Governance` object and is
shared by copies of a toolkit; it is meant to be used from one event loop. With a ``shared``
state (:class:`~shelfhand.tools.redis_state.RedisGovernanceState`, for several replicas), rate
limits, breakers and the result cache live in Redis instead, keyed the same way, and the
single-flight of cached tools spans replicas. Time comes from an
injectable ``clock`` and ``sleep``, so tests of TTLs, backoff and half-open breakers need no
real waiting.

The pipeline's vocabulary (policy, plans, decisions, outcomes, which failures are transient)
is :mod:`shelfhand.tools.policy`; the cache and single-flight (points 4–5) are
:mod:`shelfhand.tools.single_flight`; this module resolves plans and decides, and makes the
attempts (points 6–8).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import anyio

from shelfhand.backends.urls import first_line
from shelfhand.core.breaker import Breaker, CircuitBreaker
from shelfhand.core.errors import ToolArgumentError, ToolError, ToolTimeoutError
from shelfhand.core.offload import on_state_thread, soon_if, undone_if_left
from shelfhand.core.secrets import redact_text, redacted_traceback
from shelfhand.tools.limits import Deadlines, Limiter, Rate, RateLimiter, TargetBreakers, parse_rate
from shelfhand.tools.policy import (
    CallOutcome,
    Decision,
    Executor,
    GovernancePolicy,
    Outcome,
    SharedGovernanceState,
    ToolPlan,
    counts_against_breaker,
    is_transient,
    unavailable,
)
from shelfhand.tools.single_flight import CallSharing

if TYPE_CHECKING:
    from shelfhand.core.context import RunContext, UserContext
    from shelfhand.tools.audit import AuditLog
    from shelfhand.tools.tool import BreakerKey, Tool, ToolOutput

__all__ = [
    "CallOutcome",
    "CircuitBreaker",
    "Decision",
    "Governance",
    "GovernancePolicy",
    "Outcome",
    "Rate",
    "RateLimiter",
    "SharedGovernanceState",
    "ToolPlan",
    "is_transient",
    "parse_rate",
]

logger = logging.getLogger(__name__)


class Governance(CallSharing):
    """Runs tool calls through the governance pipeline; one per toolkit (shared by copies).

    Args:
        policy: Toolkit-wide defaults.
        audit: Where one record per call goes (``None``: no audit log).
        clock: Monotonic seconds (injectable for tests).
        sleep: Async sleep used between retries (injectable for tests).
        jitter: Returns a float in [0, 1) (injectable for tests).
        shared: Rate limits, breakers and the result cache outside the process, shared by
            several replicas (``None``: in this object).
    """

    def __init__(
        self,
        policy: GovernancePolicy | None = None,
        *,
        audit: AuditLog | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        jitter: Callable[[], float] = random.random,
        shared: SharedGovernanceState | None = None,
    ) -> None:
        self.policy = policy or GovernancePolicy()
        self.shared = shared
        self.audit = audit
        self.clock = clock
        self._sleep = sleep
        self._jitter = jitter
        self._share_nothing()
        self._breakers: dict[str, Breaker] = {}
        self._circuits: dict[str, Breaker] = {}
        self._targets = TargetBreakers(self._new_breaker)
        self._limiters: dict[tuple[str, str, str], Limiter] = {}
        self._deadlines: Deadlines | None = None
        self._id_prefix = os.urandom(4).hex()
        self._ids = itertools.count(1)

    # --- plans and decisions -------------------------------------------------------------
    def plan(self, item: Tool[..., Any]) -> ToolPlan:
        """Resolve ``item``'s attributes against the policy (done once per registration)."""
        p = self.policy
        read_only = bool(getattr(item, "read_only", False))
        retryable = read_only or bool(getattr(item, "idempotent", False))
        retries = _attr(item, "retries", p.retries)
        ttl = (getattr(item, "cache_ttl", None) or 0.0) if read_only else 0.0
        per_caller = _attr(item, "rate_limit", p.rate_limit)
        total = _attr(item, "total_rate_limit", p.total_rate_limit)
        breaker_key: BreakerKey | None = getattr(item, "breaker_key", None)
        breaker: Breaker | None = None
        if breaker_key is None:
            breaker = self._breakers.get(item.name)
            if breaker is None:
                breaker = self._breakers[item.name] = self._new_breaker(item.name)
        circuit_name: str | None = getattr(item, "circuit", None)
        circuit: Breaker | None = None
        if circuit_name:
            circuit = self._circuits.get(circuit_name)
            if circuit is None:
                circuit = self._circuits[circuit_name] = self._new_breaker(circuit_name)
        return ToolPlan(
            name=item.name,
            timeout=_attr(item, "timeout", p.timeout),
            attempts=1 + retries if retryable else 1,
            cache_ttl=float(ttl),
            dedup=read_only and p.dedup and bool(getattr(item, "dedup", True)),
            confirm=bool(getattr(item, "confirm", False)),
            per_caller=self._limiter(item.name, "caller", per_caller),
            total=self._limiter(item.name, "total", total),
            breaker=breaker,
            breaker_key=breaker_key,
            circuit=circuit,
            on_loop=bool(getattr(item, "inline", False)) and not getattr(item, "is_async", True),
            max_result_chars=_attr(item, "max_result_chars", p.max_result_chars),
        )

    def _new_breaker(self, name: str) -> Breaker:
        p = self.policy
        if self.shared is not None:
            return self.shared.breaker(
                name,
                min_calls=p.breaker_min_calls,
                failure_rate=p.breaker_failure_rate,
                window=p.breaker_window,
                reset_after=p.breaker_reset_after,
            )
        return CircuitBreaker(
            name,
            min_calls=p.breaker_min_calls,
            failure_rate=p.breaker_failure_rate,
            window=p.breaker_window,
            reset_after=p.breaker_reset_after,
        )

    def _limiter(self, tool: str, kind: str, text: str | None) -> Limiter | None:
        # Shared by every plan of this tool name (toolkit copies, re-registration), so a
        # limit cannot be side-stepped by rebuilding a toolkit around the same governance.
        if not text:
            return None
        key = (tool, kind, text)
        limiter = self._limiters.get(key)
        if limiter is None:
            rate = parse_rate(text)
            limiter = self._limiters[key] = (
                RateLimiter(rate)
                if self.shared is None
                else self.shared.rate_limiter(f"{tool}:{kind}:{text}", rate)
            )
        return limiter

    @staticmethod
    def decide(item: Tool[..., Any], user: UserContext) -> Decision:
        """The permission decision for ``user`` calling ``item``, as data.

        ``deny`` when the caller's level (from its roles) is below the tool's ``permission``
        (such tools are also hidden from the model); ``ask`` when the tool needs confirmation;
        otherwise ``allow``.
        """
        if not user.may_use(item.permission):
            return "deny"
        return "ask" if getattr(item, "confirm", False) else "allow"

    def breaker_states(self) -> dict[str, str]:
        """The breaker of each tool and each shared ``circuit`` by name, and its state
        (``closed``, ``half_open``, ``open``), for metrics (breakers per target are not
        listed: there may be thousands)."""
        states = {name: b.state for name, b in self._breakers.items()}
        states.update({name: b.state for name, b in self._circuits.items()})
        return states

    def breaker(self, name: str, target: str | None = None) -> Breaker | None:
        """A circuit breaker, if it exists yet.

        ``breaker("tool")``: the tool's own breaker (tools without ``breaker_key``), else the
        shared ``circuit`` of that name; ``breaker("tool", target)``: the breaker of one target
        of a tool keyed by ``breaker_key``.
        """
        if target is not None:
            return self._targets.get((name, target))
        return self._breakers.get(name) or self._circuits.get(name)

    def breaker_for(
        self, plan: ToolPlan, arguments: Mapping[str, Any], user: UserContext
    ) -> Breaker:
        """The breaker one call of ``plan`` goes through (its target's, for keyed tools)."""
        if plan.breaker is not None:
            return plan.breaker
        assert plan.breaker_key is not None
        try:
            target = str(plan.breaker_key(arguments, user))
        except Exception:  # arguments the key cannot read are rejected by validation anyway
            logger.debug("breaker key of tool %s failed", plan.name, exc_info=True)
            target = "(unreadable arguments)"
        return self._targets.of((plan.name, target[:300]))

    def new_request_id(self) -> str:
        return f"{self._id_prefix}-{next(self._ids):x}"

    def check_rate(self, plan: ToolPlan, scope: str) -> tuple[str, str] | None:
        """When a rate limit is exceeded, what it means for the call (``rate limited: at most
        2/minute for each caller``, as people read it) and the advice to the model (``try
        again in 30.0 s``); else ``None``."""
        now = self.clock()
        if plan.per_caller is not None:
            wait = plan.per_caller.acquire(scope, now)
            if wait:
                limit = f"rate limited: at most {plan.per_caller.rate.text} for each caller"
                return limit, f"try again in {wait:.1f} s"
        if plan.total is not None:
            wait = plan.total.acquire("", now)
            if wait:
                limit = f"rate limited: at most {plan.total.rate.text} for all callers"
                return limit, f"try again in {wait:.1f} s"
        return None

    # --- execution -----------------------------------------------------------------------
    async def _with_timeout(
        self,
        timeout: float,
        execute: Executor,
        item: Any,
        arguments: dict[str, Any],
        run: RunContext,
    ) -> ToolOutput:
        """Cancel the call after ``timeout`` s (a sync tool's worker thread is abandoned)."""
        loop = asyncio.get_running_loop()
        deadlines = self._deadlines
        if deadlines is None or deadlines.loop is not loop:
            # Another loop (a new asyncio.run): calls in flight keep their own reference, so
            # replacing it is safe; only loops used at the same time would share less.
            deadlines = self._deadlines = Deadlines(loop)
        task = asyncio.current_task()
        assert task is not None
        deadline = deadlines.add(task, timeout)
        try:
            output = await execute(item, arguments, run)
        except asyncio.CancelledError:
            if deadline.fired and task.uncancel() <= deadline.cancelling:
                raise ToolTimeoutError(f"timed out after {timeout:g} s") from None
            raise
        finally:
            deadlines.discard(deadline)
        if deadline.fired and task.uncancel() <= deadline.cancelling:
            # the tool swallowed the cancellation and returned late: still a timeout
            raise ToolTimeoutError(f"timed out after {timeout:g} s")
        return output

    async def _attempts(
        self,
        plan: ToolPlan,
        item: Any,
        arguments: dict[str, Any],
        run: RunContext,
        execute: Executor,
    ) -> CallOutcome:
        breaker = plan.breaker or self.breaker_for(plan, arguments, run.user)
        circuit = plan.circuit
        # breakers in Redis are asked from a state thread: one that stopped answering holds
        # up this call, not the event loop (and every other request of the service with it)
        remote = self.shared is not None
        attempt = 0
        while True:
            attempt += 1
            if remote:  # (a trial slot taken for a call cancelled meanwhile is given back)
                admitted = functools.partial(_neutral_if_admitted, breaker, circuit)
                wait, closed_by = await undone_if_left(
                    _admit, breaker, circuit, self.clock(), undo=admitted
                )
            elif circuit is None:  # (the common call, without a function call in between)
                wait, closed_by = breaker.before(self.clock()), breaker
            else:
                wait, closed_by = _admit(breaker, circuit, self.clock())
            if wait is not None:
                unavailable_now, advice = _circuit_message(plan.name, closed_by, wait, attempt - 1)
                return CallOutcome(
                    output=None,
                    outcome="circuit_open",
                    message=f"tool {plan.name} {unavailable_now}; {advice}",
                    error_class="CircuitOpen",
                    attempts=attempt - 1,
                    failure=unavailable_now,
                )
            settled = shared_settled = False
            try:
                if plan.timeout is None or plan.on_loop:
                    output = await execute(item, arguments, run)
                else:
                    output = await self._with_timeout(plan.timeout, execute, item, arguments, run)
                settled = shared_settled = True
                if remote:
                    await on_state_thread(_succeeded, breaker, circuit, self.clock())
                elif circuit is None:
                    breaker.success(self.clock())
                else:
                    _succeeded(breaker, circuit, self.clock())
                content = _capped(output.content, plan.max_result_chars)
                if content is not output.content:
                    output = replace(output, content=content)
                return CallOutcome(output=output, outcome="ok", attempts=attempt)
            except Exception as exc:
                counted = breaker if counts_against_breaker(exc) else None
                down = circuit if circuit is not None and unavailable(exc) else None
                settled, shared_settled = counted is not None, down is not None
                if remote:
                    await on_state_thread(_failed, counted, down, self.clock())
                else:
                    _failed(counted, down, self.clock())
                if attempt < plan.attempts and is_transient(exc):
                    delay = min(
                        self.policy.backoff_max, self.policy.backoff_base * 2 ** (attempt - 1)
                    )
                    delay *= 0.5 + 0.5 * self._jitter()  # "equal jitter": spread, never zero
                    logger.info(
                        "tool %s attempt %d failed (%s); retrying in %.2f s (trace %s)",
                        plan.name,
                        attempt,
                        type(exc).__name__,
                        delay,
                        run.trace_id,
                    )
                    await self._sleep(delay)
                    continue
                failed = _failure(plan.name, exc, attempt, run.trace_id)
                message = _capped(failed.message, plan.max_result_chars)
                return failed if message is failed.message else failed._replace(message=message)
            finally:
                if not settled or (circuit is not None and not shared_settled):
                    unused = None if settled else breaker
                    unused_circuit = None if shared_settled else circuit
                    # (not waited for: this may run as the call is cancelled)
                    soon_if(remote, _neutral, unused, unused_circuit)


def _admit(breaker: Breaker, circuit: Breaker | None, now: float) -> tuple[float | None, Breaker]:
    """Whether the call may go: ``(None, breaker)``, or the seconds until it may and the
    breaker (the tool's or its shared circuit's) that is open."""
    wait = breaker.before(now)
    if wait is None and circuit is not None:
        wait = circuit.before(now)
        if wait is not None:
            breaker.neutral()  # give back a trial slot this call took and cannot use
            return wait, circuit
    return wait, breaker


def _neutral_if_admitted(
    breaker: Breaker, circuit: Breaker | None, admission: tuple[float | None, Breaker]
) -> None:
    """Give back what :func:`_admit` took for a call that will not run."""
    if admission[0] is None:
        _neutral(breaker, circuit)


def _succeeded(breaker: Breaker, circuit: Breaker | None, now: float) -> None:
    breaker.success(now)
    if circuit is not None:
        circuit.success(now)


def _failed(breaker: Breaker | None, circuit: Breaker | None, now: float) -> None:
    """Count a failure against ``breaker`` and ``circuit``, those that are not ``None``."""
    if breaker is not None:
        breaker.failure(now)
    if circuit is not None:
        circuit.failure(now)


def _neutral(breaker: Breaker | None, circuit: Breaker | None) -> None:
    """Give back the trial slots that a call took and did not settle."""
    if breaker is not None:
        breaker.neutral()
    if circuit is not None:
        circuit.neutral()


def _failure(name: str, exc: Exception, attempts: int, trace_id: str) -> CallOutcome:
    kind = type(exc).__name__
    if isinstance(exc, ToolArgumentError):
        return CallOutcome(
            output=None, outcome="invalid_arguments", message=str(exc), error_class=kind
        )
    after = f" after {attempts} attempts" if attempts > 1 else ""
    if isinstance(exc, ToolTimeoutError):
        message, outcome = f"tool {name} failed{after}: {exc}", "timeout"
        failure = f"failed{after}: {exc}"
    else:
        _log_failure(name, exc, trace_id)
        message, outcome = f"tool {name} failed{after}: {kind}: {redact_text(str(exc))}", "error"
        # a ToolError's message is written for whoever reads the result; any other
        # exception's may hold an internal address or a query: people read its class
        told = told_line(str(exc)) if isinstance(exc, ToolError) else ""
        failure = f"failed{after}: {told or kind}"
    return CallOutcome(
        output=None,
        outcome=outcome,  # type: ignore[arg-type]
        message=message,
        error_class=kind,
        attempts=attempts,
        failure=failure,
    )


CUT_RESULT = "\n[… the result was {total:,} characters long; the first {shown:,} are shown.]"
"""The line under a result cut at the tool's ``max_result_chars``."""


def cut_result(content: str, limit: int) -> str:
    """``content`` cut at ``limit`` characters, with a line saying how long it was: a tool
    that returned 50 MB (a log, a table dump) gives the model, the conversation's store and
    the answer check ``limit`` characters of it, not 50 MB each."""
    return content[:limit] + CUT_RESULT.format(total=len(content), shown=limit)


def _capped(text: str, limit: int | None) -> str:
    """``text`` itself when it is within ``limit`` (or there is none), else
    :func:`cut_result`."""
    return text if limit is None or len(text) <= limit else cut_result(text, limit)


TOLD_CHARS = 200
"""Characters of a tool's own words (a ``ToolError``'s message, an error result) that people
read as its failure."""


def told_line(text: str) -> str:
    """What a tool said of its failure, as people read it: the first line of ``text``,
    secrets redacted, at most :data:`TOLD_CHARS` characters ("" for none)."""
    line = redact_text(text.strip().split("\n", 1)[0].rstrip())
    return line[:TOLD_CHARS] + "…" if len(line) > TOLD_CHARS else line


def _log_failure(name: str, exc: Exception, trace_id: str) -> None:
    """Log a tool's exception with the secrets its message and traceback show redacted: a
    team's HTTP client names the URL it called, a token in its query string included."""
    if not logger.isEnabledFor(logging.INFO):
        return
    text = redact_text(first_line(exc))
    logger.info("tool %s raised %s: %s (trace %s)", name, type(exc).__name__, text, trace_id)
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("tool %s: traceback (trace %s)\n%s", name, trace_id, redacted_traceback(exc))


def _circuit_message(name: str, breaker: Breaker, wait: float, attempts: int) -> tuple[str, str]:
    """What an open circuit means for a call of tool ``name`` (``unavailable: circuit open
    after repeated failures``), and the advice to the model."""
    circuit = breaker.name
    if circuit == name:
        which = "circuit"
    elif circuit.startswith(f"{name} for "):
        which = f"circuit for {circuit.removeprefix(f'{name} for ')}"
    else:
        which = f"circuit {circuit!r}"
    after = f" after {attempts} failed attempts" if attempts > 1 else ""
    when = f"retry in about {wait:.0f} s" if wait >= 1 else "retry shortly"
    return (
        f"unavailable{after}: {which} open after repeated failures",
        f"{when} or answer without it",
    )


def _attr(item: Any, name: str, default: Any) -> Any:
    value = getattr(item, name, None)
    return default if value is None else value
