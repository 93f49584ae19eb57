"""Circuit breakers: stop calling what keeps failing, try it again after a while.

One implementation for everything that guards a dependency: tool calls (per tool and target,
see :mod:`shelfhand.tools.governance`) and the query embedder of retrieval. A breaker is a plain
object driven by an explicit ``now`` (monotonic seconds), so tests move time by hand; it is not
thread-safe (callers on several threads hold a lock around it).
"""

from __future__ import annotations

import logging
from typing import Protocol

__all__ = ["CLOSED", "HALF_OPEN", "OPEN", "Breaker", "CircuitBreaker"]

logger = logging.getLogger(__name__)


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


CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"


class CircuitBreaker:
    """Opens when the failure share in a counting window crosses a threshold, or after a
    number of failures in a row.

    Closed: calls pass and are counted per tumbling window of ``window`` seconds. When a window
    holds at least ``min_calls`` calls and ``failure_rate`` of them failed, the breaker opens:
    calls fail fast. With ``trip_after`` it opens instead after that many failures in a row (a
    success starts the count again). After ``reset_after`` seconds it half-opens: one trial
    call passes; its success closes the breaker, its failure opens it again.
    """

    __slots__ = (
        "_calls",
        "_failures",
        "_min_calls",
        "_opened_at",
        "_rate",
        "_reset_after",
        "_streak",
        "_trial",
        "_trip_after",
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
        trip_after: int | None = None,
    ) -> None:
        if trip_after is not None and trip_after < 1:
            raise ValueError(f"circuit {name}: trip_after must be at least 1, not {trip_after}")
        self.name = name
        self.state = CLOSED
        self._min_calls = min_calls
        self._rate = failure_rate
        self._window = window
        self._reset_after = reset_after
        self._window_start = float("-inf")
        self._calls = 0
        self._failures = 0
        self._opened_at = 0.0
        self._trial = False
        self._trip_after = trip_after
        self._streak = 0

    def before(self, now: float) -> float | None:
        """``None`` when a call may pass, else seconds until the breaker lets one through."""
        if self.state is CLOSED:
            return None
        if self.state is OPEN:
            waited = now - self._opened_at
            if waited < self._reset_after:
                return self._reset_after - waited
            self.state = HALF_OPEN
            self._trial = False
        if self._trial:
            return 0.0  # a trial call is in flight; others still fail fast
        self._trial = True
        return None

    def success(self, now: float) -> None:
        if self.state is not CLOSED:
            logger.info("circuit %s closed after a successful trial call", self.name)
            self.state = CLOSED
            self._trial = False
            self._calls = self._failures = self._streak = 0
            self._window_start = now
            return
        self._streak = 0
        if now - self._window_start >= self._window:
            self._window_start = now
            self._calls = self._failures = 0
        self._calls += 1

    def failure(self, now: float) -> None:
        if self.state is not CLOSED:
            self._open(now)
            return
        if now - self._window_start >= self._window:
            self._window_start = now
            self._calls = self._failures = 0
        self._calls += 1
        self._failures += 1
        self._streak += 1
        if self._trip_after is not None:
            if self._streak >= self._trip_after:
                self._open(now)
        elif self._calls >= self._min_calls and self._failures >= self._rate * self._calls:
            self._open(now)

    def neutral(self) -> None:
        """The call neither proved nor disproved health (bad arguments, cancellation)."""
        if self.state is HALF_OPEN:
            self._trial = False

    def _open(self, now: float) -> None:
        logger.warning(
            "circuit %s opened (%d of %d calls failed)", self.name, self._failures, self._calls
        )
        self.state = OPEN
        self._opened_at = now
        self._trial = False
        self._streak = 0
