"""A turn's model calls by model, for the usage ledger's rows by model.

A turn's :class:`~shelfhand.core.results.Usage` is one sum over every model call it made:
the chat agent's, and those of subagents or judges that run their own model. The ledger
books usage by model (``GET /v1/usage`` reports it so), so the service also tallies each
turn's calls by model: :class:`ModelTally` is the turn's
:class:`~shelfhand.core.step_counts.StepCounter` (every model call reports to it, whoever
makes it) and passes every count on to the service's metrics when it has them.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from shelfhand.core.results import Usage

if TYPE_CHECKING:
    from shelfhand.core.pricing import ModelPrice
    from shelfhand.core.step_counts import StepCounter

__all__ = ["ModelTally"]


class ModelTally:
    """One turn's finished model calls, their tokens by model, and how many tool calls and
    searches ran (a ``StepCounter``).

    Args:
        metrics: The service's counter, told every step as well (``None``: none).
        prices: Prices by model, for each model's share of the cost.
    """

    __slots__ = ("_calls", "_lock", "_retrievals", "_tool_calls", "metrics", "prices")

    def __init__(
        self,
        metrics: StepCounter | None = None,
        *,
        prices: Mapping[str, ModelPrice] | None = None,
    ) -> None:
        self.metrics = metrics
        self.prices = prices
        self._lock = threading.Lock()  # subagents' calls may end in worker threads
        self._calls: dict[str, Usage] = {}
        self._tool_calls = 0
        self._retrievals = 0

    def count_turn(self, status: str) -> None:
        if self.metrics is not None:
            self.metrics.count_turn(status)

    def count_fallback(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.count_fallback(reason)

    def count_model_call(
        self, model: str, status: str, input_tokens: int, output_tokens: int
    ) -> None:
        # as a run's usage counts them: calls that answered; and one ended before its reply
        # was complete (its caller went away, its deadline passed, its stream broke after
        # text) at its estimate, as its budget was charged
        if status != "error" or input_tokens or output_tokens:
            call = Usage(input_tokens=input_tokens, output_tokens=output_tokens, model_calls=1)
            with self._lock:
                had = self._calls.get(model)
                self._calls[model] = call if had is None else had + call
        if self.metrics is not None:
            self.metrics.count_model_call(model, status, input_tokens, output_tokens)

    def count_tool_call(self, tool: str, outcome: str) -> None:
        with self._lock:
            self._tool_calls += 1
        if self.metrics is not None:
            self.metrics.count_tool_call(tool, outcome)

    def count_retrieval(self, mode: str, seconds: float) -> None:
        with self._lock:
            self._retrievals += 1
        if self.metrics is not None:
            self.metrics.count_retrieval(mode, seconds)

    def total(self) -> Usage:
        """Every model call of the turn that answered so far, all models together, with the
        cost at their prices (``None`` when a model that answered has none), and the tool
        calls and searches that ran (as a run's own usage counts them): what a turn that
        failed after some calls used, when no run result carries it."""
        with self._lock:
            ran = Usage(tool_calls=self._tool_calls, retrievals=self._retrievals)
        return sum(self.by_model().values(), ran)

    def others(self, model: str) -> dict[str, Usage]:
        """The calls of models other than ``model`` (the turn's own), each with its cost at
        its price (``None`` without one)."""
        return {m: u for m, u in self.by_model().items() if m != model}

    def by_model(self) -> dict[str, Usage]:
        """The calls so far by model, each with its cost at its price (``None`` without
        one)."""
        with self._lock:
            calls = dict(self._calls)
        prices = self.prices or {}
        return {
            m: Usage(
                input_tokens=u.input_tokens,
                output_tokens=u.output_tokens,
                model_calls=u.model_calls,
                cost=prices[m].cost(u) if m in prices else None,
            )
            for m, u in calls.items()
        }
