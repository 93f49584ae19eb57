"""Governance's vocabulary: the policy, a tool's plan, decisions and call outcomes (docs/design.md T5).

What :class:`~shelfhand.tools.governance.Governance` decides and records, without the
machinery that runs calls: the toolkit-wide :class:`GovernancePolicy`; the :class:`ToolPlan`
it resolves once per tool; the permission :data:`Decision`; the :class:`CallOutcome` of a
governed call and its :data:`Outcome` (what the audit record says); which failures are
transient (retried), count against a circuit breaker, or say a service is unreachable.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol, TypeAlias

from shelfhand.core.breaker import Breaker
from shelfhand.core.errors import (
    InvalidArgumentError,
    ToolTimeoutError,
    ToolUnavailableError,
    TransientToolError,
)
from shelfhand.tools.limits import Limiter, Rate, parse_rate

if TYPE_CHECKING:
    from shelfhand.core.context import RunContext
    from shelfhand.tools.tool import BreakerKey, ToolOutput

__all__ = [
    "CallOutcome",
    "Decision",
    "Executor",
    "GovernancePolicy",
    "Outcome",
    "SharedGovernanceState",
    "ToolPlan",
    "counts_against_breaker",
    "is_transient",
    "unavailable",
]

Decision: TypeAlias = Literal["allow", "deny", "ask"]
"""A permission decision: run it, refuse it, or ask a human first."""

Outcome: TypeAlias = Literal[
    "ok",
    "error",
    "timeout",
    "denied",
    "unknown_tool",
    "invalid_arguments",
    "rate_limited",
    "circuit_open",
    "needs_approval",
    "rejected",
    "external",
]

Executor: TypeAlias = Callable[[Any, dict[str, Any], "RunContext"], Awaitable["ToolOutput"]]


@dataclass(frozen=True, slots=True, kw_only=True)
class GovernancePolicy:
    """Toolkit-wide defaults; a tool's own attributes override them.

    Attributes:
        timeout: Seconds per attempt (``None``: no limit).
        retries: Extra attempts after a transient failure (read-only/idempotent tools only).
        backoff_base: First backoff delay in seconds; doubles per retry, with jitter.
        backoff_max: Ceiling of one backoff delay.
        cache_size: Most cached results kept (oldest dropped first). There is no toolkit-wide
            TTL: only tools that declare ``cache_ttl`` are cached.
        dedup: Share one execution among identical concurrent read-only calls.
        rate_limit: Default calls per caller and tool, e.g. ``"30/minute"`` (``None``: none).
        total_rate_limit: Default calls per tool for all callers together.
        breaker_min_calls: Calls in a window before a breaker may open.
        breaker_failure_rate: Failure share (0–1] in a window that opens the breaker.
        breaker_window: Seconds of one counting window.
        breaker_reset_after: Seconds an open breaker waits before letting one trial through.
        max_result_chars: Longest result (or error) the model reads, in characters; a longer
            one is cut there, with a line saying how long it was, before it is cached,
            shared or kept in the conversation (``None``: no limit).
    """

    timeout: float | None = 5.0
    retries: int = 2
    backoff_base: float = 0.2
    backoff_max: float = 5.0
    cache_size: int = 2048
    dedup: bool = True
    rate_limit: str | None = None
    total_rate_limit: str | None = None
    breaker_min_calls: int = 5
    breaker_failure_rate: float = 0.5
    breaker_window: float = 60.0
    breaker_reset_after: float = 30.0
    max_result_chars: int | None = 100_000

    def __post_init__(self) -> None:
        if self.max_result_chars is not None and self.max_result_chars < 1:
            raise InvalidArgumentError("max_result_chars must be 1 or more, or None")
        if self.timeout is not None and self.timeout <= 0:
            raise InvalidArgumentError("timeout must be positive or None")
        if self.retries < 0 or self.cache_size < 0:
            raise InvalidArgumentError("retries and cache_size must be 0 or more")
        if not 0 < self.breaker_failure_rate <= 1:
            raise InvalidArgumentError("breaker_failure_rate must be in (0, 1]")
        if self.breaker_min_calls < 1 or self.breaker_window <= 0:
            raise InvalidArgumentError("breaker_min_calls must be >= 1 and breaker_window positive")
        for limit in (self.rate_limit, self.total_rate_limit):
            if limit is not None:
                parse_rate(limit)


# --- per-tool plan -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class ToolPlan:
    """Everything the pipeline needs about one tool, resolved once at registration."""

    name: str
    timeout: float | None
    attempts: int
    """1 + retries for read-only/idempotent tools; always 1 for writes."""
    cache_ttl: float
    """0 unless the tool is read-only and declares a ``cache_ttl`` (caching is opt-in)."""
    dedup: bool
    confirm: bool
    per_caller: Limiter | None
    total: Limiter | None
    breaker: Breaker | None
    """The tool's own breaker; ``None`` when it is keyed by target (``breaker_key``)."""
    breaker_key: BreakerKey | None
    circuit: Breaker | None
    """A breaker shared with other tools (e.g. one MCP server's), opened only by failures that
    say the shared service is unreachable."""
    max_result_chars: int | None = None
    """Longest result the model reads (``None``: no limit); see :func:`cut_result`."""
    on_loop: bool = False
    """The call runs to its end on the event loop without ever waiting (a sync tool declared
    ``inline=True``): no deadline can fire during it, so none is registered."""


class SharedGovernanceState(Protocol):
    """Governance state kept outside the process, shared by replicas (see
    :class:`~shelfhand.tools.redis_state.RedisGovernanceState`)."""

    poll_interval: float

    def rate_limiter(self, name: str, rate: Rate) -> Limiter: ...

    def breaker(
        self,
        name: str,
        *,
        min_calls: int,
        failure_rate: float,
        window: float,
        reset_after: float,
    ) -> Breaker: ...

    def cache_get(self, key: tuple[str, str, str]) -> ToolOutput | None: ...

    def cache_put(self, key: tuple[str, str, str], output: ToolOutput, ttl: float) -> None: ...

    def lead(self, key: tuple[str, str, str], seconds: float) -> bool: ...

    def done(self, key: tuple[str, str, str]) -> None: ...

    def computing(self, key: tuple[str, str, str]) -> bool: ...


class CallOutcome(NamedTuple):
    """What the pipeline made of one call (after retries).

    A NamedTuple rather than a frozen dataclass: one is built per call, and a tuple is built
    several times faster.
    """

    output: ToolOutput | None
    """The tool's output on success."""
    outcome: Outcome
    message: str = ""
    """The model-facing error message when ``output`` is None."""
    error_class: str = ""
    attempts: int = 1
    failure: str = ""
    """Why the tool did not answer, for people (``ToolResultBlock.failure``): "" on success
    and for invalid arguments."""


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is worth retrying (see the module docstring for the list)."""
    if isinstance(exc, TransientToolError | ConnectionError | TimeoutError):
        return True
    if type(exc).__module__.startswith("httpx"):
        import httpx  # only on this error path: importing httpx costs start-up time

        if isinstance(exc, httpx.HTTPStatusError):
            code = exc.response.status_code
            return code == 429 or code >= 500
        return isinstance(exc, httpx.TransportError)
    return False


def counts_against_breaker(exc: BaseException) -> bool:
    # Only dependency health counts: timeouts and transient errors (connection failures, HTTP
    # 429/5xx). Bad arguments, a tool's own ValueError, "not found" and other model-facing
    # errors are the caller's input, and must never let one caller block others.
    return isinstance(exc, ToolTimeoutError) or is_transient(exc)


def unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says the service behind the tool is unreachable (not one bad call)."""
    if isinstance(exc, ToolUnavailableError | ConnectionError):
        return True
    if type(exc).__module__.startswith("httpx"):
        import httpx

        return isinstance(exc, httpx.ConnectError)
    return False
