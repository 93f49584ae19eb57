"""Helpers for the governance tests: a hand-driven clock and a pipeline built on it."""

from __future__ import annotations

import anyio.lowlevel

from shelfhand import tool
from shelfhand.testing import ScriptedModel, text, tool_call
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


# a write tool that needs confirmation, and a model script calling it (approval tests)
created: list[str] = []


@tool(confirm=True)
def create_return(order_id: str, reason: str, api_key: str = "") -> str:
    """Create a return for one of the caller's orders (a write).

    Args:
        order_id: The order number.
        reason: Why the customer returns it.
        api_key: Key of the returns service.
    """
    created.append(order_id)
    return f"退货单 RMA-{order_id} 已创建"


def script() -> ScriptedModel:
    return ScriptedModel(
        [
            tool_call(
                "create_return",
                {"order_id": "SO-1001", "reason": "屏幕坏点", "api_key": "sk-live-123"},
            ),
            text("好的。"),
        ]
    )


class LoopTicks:
    """A task that counts its 10 ms sleeps: whether the event loop went on running other
    tasks (while a call waited on a stopped Redis, say)."""

    def __init__(self) -> None:
        self.count = 0

    async def run(self) -> None:
        while True:
            await anyio.sleep(0.01)
            self.count += 1
