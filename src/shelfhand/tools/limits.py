"""Rate limits, circuit breakers and deadlines: the stateful guards of the pipeline (T5).

Rate limiters and breakers are plain objects driven by an explicit ``now`` (monotonic seconds),
so tests move time by hand instead of sleeping. None of them is thread-safe: the pipeline uses
them from one event loop.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "Breaker",
    "CircuitBreaker",
    "Deadline",
    "Deadlines",
    "Limiter",
    "Rate",
    "RateLimiter",
    "TargetBreakers",
    "parse_rate",
]

logger = logging.getLogger(__name__)


# --- rate limits ---------------------------------------------------------------------------
_UNITS = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0}
_UNITS |= {"h": 3600.0, "hour": 3600.0, "d": 86400.0, "day": 86400.0}
_RATE_RE = re.compile(r"^\s*(\d+)\s*/\s*([a-z]+?)s?\s*$")


@dataclass(frozen=True, slots=True, kw_only=True)
class Rate:
    """``calls`` per ``period`` seconds."""

    calls: int
    period: float
    text: str


def parse_rate(text: str) -> Rate:
    """Parse ``"<n>/<unit>"`` (unit: second, minute, hour, day, or s, m, h, d).

    Raises:
        ValueError: the text is not of that form or ``n`` is 0.
    """
    match = _RATE_RE.match(text.lower())
    period = _UNITS.get(match.group(2)) if match else None
    if match is None or period is None or int(match.group(1)) < 1:
        raise ValueError(
            f"rate limit {text!r} is not understood: use '<n>/<second|minute|hour|day>', "
            "e.g. '30/minute'"
        )
    return Rate(calls=int(match.group(1)), period=period, text=text.strip())


class Limiter(Protocol):
    """What the pipeline needs of a rate limiter (:class:`RateLimiter` in the process, or
    :class:`~shelfhand.tools.redis_state.RedisRateLimiter` shared by replicas)."""

    @property
    def rate(self) -> Rate: ...

    def acquire(self, key: str, now: float) -> float: ...


class Breaker(Protocol):
    """What the pipeline needs of a circuit breaker (:class:`CircuitBreaker` in the process,
    or :class:`~shelfhand.tools.redis_state.RedisCircuitBreaker` shared by replicas)."""

    @property
    def name(self) -> str: ...

    @property
    def state(self) -> str: ...

    def before(self, now: float) -> float | None: ...

    def success(self, now: float) -> None: ...

    def failure(self, now: float) -> None: ...

    def neutral(self) -> None: ...


class RateLimiter:
    """Token buckets, one per key: ``calls`` tokens, refilled evenly over ``period``."""

    __slots__ = ("_buckets", "_capacity", "_max_keys", "_per_second", "rate")

    def __init__(self, rate: Rate, *, max_keys: int = 10_000) -> None:
        self.rate = rate
        self._capacity = float(rate.calls)
        self._per_second = rate.calls / rate.period
        self._buckets: dict[str, list[float]] = {}
        self._max_keys = max_keys

    def acquire(self, key: str, now: float) -> float:
        """Take one token for ``key``: 0.0 when allowed, else seconds until one is free."""
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self._max_keys:
                self._sweep(now)
            self._buckets[key] = [self._capacity - 1.0, now]
            return 0.0
        tokens = min(self._capacity, bucket[0] + (now - bucket[1]) * self._per_second)
        bucket[1] = now
        if tokens >= 1.0:
            bucket[0] = tokens - 1.0
            return 0.0
        bucket[0] = tokens
        return (1.0 - tokens) / self._per_second

    def _sweep(self, now: float) -> None:
        # Full buckets carry no information: dropping them bounds memory without changing limits.
        full = [
            k
            for k, (tokens, last) in self._buckets.items()
            if tokens + (now - last) * self._per_second >= self._capacity
        ]
        for k in full:
            del self._buckets[k]
        if len(self._buckets) >= self._max_keys:  # still full: forget the oldest half
            for k in list(self._buckets)[: self._max_keys // 2]:
                del self._buckets[k]


# --- circuit breaker -----------------------------------------------------------------------
_CLOSED, _OPEN, _HALF_OPEN = "closed", "open", "half_open"


class CircuitBreaker:
    """Opens when the failure share in a counting window crosses a threshold.

    Closed: calls pass and are counted per tumbling window of ``window`` seconds. When a window
    holds at least ``min_calls`` calls and ``failure_rate`` of them failed, the breaker opens:
    calls fail fast. After ``reset_after`` seconds it half-opens: one trial call passes; its
    success closes the breaker, its failure opens it again.
    """

    __slots__ = (
        "_calls",
        "_failures",
        "_min_calls",
        "_opened_at",
        "_rate",
        "_reset_after",
        "_trial",
        "_window",
        "_window_start",
        "name",
        "state",
    )

    def __init__(
        self,
        name: str,
        *,
        min_calls: int = 5,
        failure_rate: float = 0.5,
        window: float = 60.0,
        reset_after: float = 30.0,
    ) -> None:
        self.name = name
        self.state = _CLOSED
        self._min_calls = min_calls
        self._rate = failure_rate
        self._window = window
        self._reset_after = reset_after
        self._window_start = float("-inf")
        self._calls = 0
        self._failures = 0
        self._opened_at = 0.0
        self._trial = False

    def before(self, now: float) -> float | None:
        """``None`` when a call may pass, else seconds until the breaker lets one through."""
        if self.state is _CLOSED:
            return None
        if self.state is _OPEN:
            waited = now - self._opened_at
            if waited < self._reset_after:
                return self._reset_after - waited
            self.state = _HALF_OPEN
            self._trial = False
        if self._trial:
            return 0.0  # a trial call is in flight; others still fail fast
        self._trial = True
        return None

    def success(self, now: float) -> None:
        if self.state is not _CLOSED:
            logger.info("circuit %s closed after a successful trial call", self.name)
            self.state = _CLOSED
            self._trial = False
            self._calls = self._failures = 0
            self._window_start = now
            return
        if now - self._window_start >= self._window:
            self._window_start = now
            self._calls = self._failures = 0
        self._calls += 1

    def failure(self, now: float) -> None:
        if self.state is not _CLOSED:
            self._open(now)
            return
        if now - self._window_start >= self._window:
            self._window_start = now
            self._calls = self._failures = 0
        self._calls += 1
        self._failures += 1
        if self._calls >= self._min_calls and self._failures >= self._rate * self._calls:
            self._open(now)

    def neutral(self) -> None:
        """The call neither proved nor disproved health (bad arguments, cancellation)."""
        if self.state is _HALF_OPEN:
            self._trial = False

    def _open(self, now: float) -> None:
        logger.warning(
            "circuit %s opened (%d of %d calls failed)", self.name, self._failures, self._calls
        )
        self.state = _OPEN
        self._opened_at = now
        self._trial = False


class TargetBreakers:
    """Circuit breakers made on demand, one per ``(tool, target)`` key, at most ``max_keys``.

    Targets come from call arguments (a host, a path), so their number is the callers' choice:
    when the set is full, closed breakers are forgotten first (they only hold counts of a
    window), then the oldest half. An open breaker is kept as long as there is room.
    """

    __slots__ = ("_breakers", "_make", "_max_keys")

    def __init__(self, make: Callable[[str], Breaker], *, max_keys: int = 10_000) -> None:
        self._make = make
        self._max_keys = max_keys
        self._breakers: dict[tuple[str, str], Breaker] = {}

    def __len__(self) -> int:
        return len(self._breakers)

    def get(self, key: tuple[str, str]) -> Breaker | None:
        """The breaker for ``key`` if one exists (nothing is made)."""
        return self._breakers.get(key)

    def of(self, key: tuple[str, str]) -> Breaker:
        """The breaker for ``key``, made (closed) on first use."""
        breaker = self._breakers.get(key)
        if breaker is None:
            if len(self._breakers) >= self._max_keys:
                self._sweep()
            breaker = self._breakers[key] = self._make(f"{key[0]} for {key[1]}")
        return breaker

    def _sweep(self) -> None:
        closed = [k for k, b in self._breakers.items() if b.state is _CLOSED]
        for k in closed:
            del self._breakers[k]
        if len(self._breakers) >= self._max_keys:
            for k in list(self._breakers)[: self._max_keys // 2]:
                del self._breakers[k]


# --- deadlines -----------------------------------------------------------------------------
_EARLY = 0.001  # asyncio may run a timer up to its clock resolution early


class Deadline:
    """One call's deadline: the task to cancel, and whether it was."""

    __slots__ = ("at", "cancelling", "fired", "task")

    def __init__(self, at: float, task: asyncio.Task[Any]) -> None:
        self.at = at
        self.task = task
        self.cancelling = task.cancelling()
        self.fired = False


class Deadlines:
    """Timeouts for many concurrent calls of one event loop, with a single timer.

    A timer per call (``asyncio.timeout``, an anyio cancel scope) costs more than a fast tool
    call itself; here a call only adds and removes itself from a set. The one timer is set for
    the earliest deadline; when it fires it cancels the tasks that are past theirs and re-arms
    for the next one.
    """

    __slots__ = ("_at", "_handle", "_live", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._live: set[Deadline] = set()
        self._handle: asyncio.TimerHandle | None = None
        self._at = math.inf

    def add(self, task: asyncio.Task[Any], timeout: float) -> Deadline:
        deadline = Deadline(self.loop.time() + timeout, task)
        self._live.add(deadline)
        if deadline.at < self._at:
            self._arm(deadline.at)
        return deadline

    def discard(self, deadline: Deadline) -> None:
        # The timer stays armed: one spurious wake-up per period is cheaper than re-arming.
        self._live.discard(deadline)

    def _arm(self, at: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self.loop.call_at(at, self._fire)
        self._at = at

    def _fire(self) -> None:
        self._handle = None
        self._at = math.inf
        now = self.loop.time() + _EARLY
        following = math.inf
        for deadline in list(self._live):
            if deadline.at <= now:
                self._live.discard(deadline)
                deadline.fired = True
                deadline.task.cancel()
            elif deadline.at < following:
                following = deadline.at
        if following < math.inf:
            self._arm(following)
