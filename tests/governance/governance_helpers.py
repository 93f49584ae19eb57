"""Helpers for the governance tests: a hand-driven clock and a pipeline built on it."""

from __future__ import annotations

import anyio.lowlevel

from shelfhand.tools.governance import Governance, GovernancePolicy


class FakeClock:
    """Monotonic time moved by hand; ``sleep`` advances it instead of waiting."""

    def __init__(self) -> None:
        self.now = 1_000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    async def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))
        self.now += seconds
        await anyio.lowlevel.checkpoint()


def governance(clock: FakeClock, **policy: object) -> Governance:
    """A governance pipeline on the fake clock, with jitter pinned to its maximum."""
    return Governance(
        GovernancePolicy(**policy),  # type: ignore[arg-type]
        clock=clock,
        sleep=clock.sleep,
        jitter=lambda: 1.0,
    )
