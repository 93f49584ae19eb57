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

from shelfhand.core.breaker import CLOSED, Breaker, CircuitBreaker
from shelfhand.core.errors import InvalidArgumentError

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
        raise InvalidArgumentError(
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
        closed = [k for k, b in self._breakers.items() if b.state == CLOSED]
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
