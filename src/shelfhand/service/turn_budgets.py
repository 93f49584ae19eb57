"""Budgets of service turns: each turn of a caller with budgets runs metered.

A turn first counts against ``turns_per_minute``; then every model call of it (its
subagents' included) reserves its largest possible size and settles with what it used
(:class:`~shelfhand.usage.budgets.TurnMeter`). A turn over budget ends cleanly, and no model
call is made past the budget:

- refused before any model call of its own, the API answers 429 with the budget, its reset time
  and ``Retry-After`` (or, once the answer has begun streaming, an ``error`` event with the
  same) and the session records the failure;
- refused later (after a model call of the turn's: the loop's, or one beside it such as a
  search's LLM ranking), the turn is answered without the model:
  the extractive answer of the passages it found (:mod:`shelfhand.agent.budget_stop`), with
  ``fallback_reason`` ``budget_exceeded``, the ``budget`` and the usage until then.

Either way the audit log gets a ``budget_exceeded`` record and the turn's trace a
``budget.exceeded`` event. So does a model call beside the loop that the budget refuses (a
search's LLM rerank, a follow-up's rewrite, the answer check), though the turn goes on
without it: its record's arguments name the ``call``, and the event is on the span it was to
be made in.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shelfhand.core.errors import BudgetExceededError, TurnFailed
from shelfhand.core.metering import metered, unmetered
from shelfhand.core.offload import off_loop_if
from shelfhand.core.tracing import current_span
from shelfhand.usage.budgets import LEASE_S, BudgetBook, BudgetPolicy, TurnMeter

if TYPE_CHECKING:
    from shelfhand.core.context import UserContext
    from shelfhand.tools.audit import AuditLog

__all__ = ["MODEL_CALL", "Budgets", "budget_failure"]

MODEL_CALL = "(model)"
"""The ``tool`` of an audit record of a model call a budget refused (outcome
``budget_exceeded``; its arguments hold the budget, and a side call's ``call``)."""

logger = logging.getLogger(__name__)


def budget_failure(exc: BudgetExceededError) -> TurnFailed:
    """The turn's failure for a spent budget: 429, the budget, ``Retry-After``."""
    retry_after = max(1, int(exc.reset_at - time.time() + 0.999))
    return TurnFailed(
        str(exc), status=429, code=exc.code, budget=exc.to_dict(), retry_after=retry_after
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Budgets:
    """The service's budgets, their counters, and where refusals are audited."""

    policy: BudgetPolicy
    book: BudgetBook
    audit: AuditLog | None = None
    count: Callable[[str, str], None] | None = None
    """Counts each refusal by budget and call (``turn``, or a side call's purpose): the
    service's ``/metrics``."""
    lease: float = LEASE_S
    """Seconds a model call's reservation is held (setting ``budget_lease``)."""

    async def metered_turn(
        self, events: AsyncGenerator[dict[str, Any], None], user: UserContext, trace_id: str
    ) -> AsyncGenerator[dict[str, Any], None]:
        """``events`` (one turn's) with the caller's meter set for every model call."""
        meter = self.meter(user, trace_id)
        try:
            await off_loop_if(meter.blocking, meter.start_turn)  # (see shelfhand.core.metering)
        except BudgetExceededError as exc:
            await events.aclose()  # frees the session's claim
            self.refused(exc.to_dict(), user, trace_id)
            raise budget_failure(exc) from exc
        token = metered(meter)
        try:
            async with aclosing(events):
                async for event in events:
                    if event.get("type") == "final" and event.get("budget") is not None:
                        # answered without the model; the turn's span records it as it ends
                        self.refused(event["budget"], user, trace_id, traced=False)
                    yield event
        except TurnFailed as exc:
            if exc.budget is not None:
                self.refused(exc.budget, user, trace_id)
            raise
        finally:
            unmetered(token)
            meter.close()

    def meter(self, user: UserContext, trace_id: str) -> TurnMeter:
        """The meter of one turn (or API search) of ``user``: a side call it refuses (a
        search's rerank, a follow-up's rewrite; the turn goes on without it) is audited, as
        ``budget_exceeded`` with ``call`` naming it (its span has the event already)."""

        def side_refused(exc: BudgetExceededError, purpose: str) -> None:
            budget = {**exc.to_dict(), "call": purpose}
            self.refused(budget, user, trace_id, traced=False)

        return TurnMeter(self.book, self.policy, user, on_refused=side_refused, lease=self.lease)

    def refused(
        self, budget: Mapping[str, object], user: UserContext, trace_id: str, *, traced: bool = True
    ) -> None:
        """Log, audit and (``traced``) add to the current span that ``budget`` refused a model
        call of ``user``'s turn (``budget["call"]``: a side call's purpose, if it was one)."""
        logger.warning(
            "budget exceeded user=%s: %s of %s%s",
            user.scope,
            budget.get("budget"),
            budget.get("scope"),
            f" ({budget['call']} not made)" if "call" in budget else "",
        )
        span = current_span() if traced else None
        if span is not None:
            span.event("budget.exceeded", **budget)
        if self.count is not None:
            self.count(str(budget.get("budget")), str(budget.get("call", "turn")))
        if self.audit is not None:
            self.audit.record(
                tool=MODEL_CALL,
                tenant=user.tenant_id,
                user=user.user_id,
                trace_id=trace_id,
                request_id="",
                call_id="",
                arguments=dict(budget),
                canonical=None,
                decision="deny",
                outcome="budget_exceeded",
                error_class="BudgetExceededError",
                duration_ms=0.0,
                attempts=0,
            )
