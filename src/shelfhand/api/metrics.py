"""``GET /metrics``: the service in the Prometheus text format, for admins.

Counted as each step ends (a :class:`ServiceMetrics` is the turns'
:class:`~shelfhand.core.step_counts.StepCounter`, fed with or without spans, so tracing off
builds none): turns by status, model calls and tokens by model, tool calls by tool and
outcome, retrieval latency, answers not the model's as written by why (the answer check
replaced them, or no model answered), model calls budgets refused by budget and call. Read
at each scrape (never on a turn): circuit breaker states (0 closed, 1 half-open, 2 open),
chunks waiting for their embeddings and, with a job queue (``database_url``), ingest jobs
waiting and running. A gauge whose source cannot be read
(PostgreSQL down) is left out of that scrape; the rest is served. Each service has its own
registry (tests run several in one process).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from shelfhand.api.deps import Caller, ServiceDep
from shelfhand.core.errors import DependencyUnavailableError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from prometheus_client.metrics_core import Metric

    from shelfhand.jobs.queue import IngestQueue
    from shelfhand.knowledge.base import KnowledgeBase
    from shelfhand.tools.governance import Governance

__all__ = ["ServiceMetrics", "router"]

router = APIRouter()
logger = logging.getLogger(__name__)
_T = TypeVar("_T")

_BREAKER_STATES = {"closed": 0, "half_open": 1, "half-open": 1, "open": 2}
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class _Gauges:
    """What is read at each scrape."""

    def __init__(self) -> None:
        self.governance: Governance | None = None
        self.kb: KnowledgeBase | None = None
        self.queue: IngestQueue | None = None

    def collect(self) -> Iterator[Metric]:
        breakers = GaugeMetricFamily(
            "shelfhand_breaker_state",
            "Circuit breaker state: 0 closed, 1 half-open, 2 open.",
            labels=["breaker"],
        )
        states = self.governance.breaker_states() if self.governance is not None else {}
        if self.kb is not None:
            states |= self.kb.breaker_states()
        for name, state in states.items():
            breakers.add_metric([name], _BREAKER_STATES.get(state, 0))
        yield breakers
        if self.kb is not None:
            count = _read(self.kb.pending_embeddings)
            if count is not None:
                pending = GaugeMetricFamily(
                    "shelfhand_pending_embeddings", "Chunks stored but not embedded yet."
                )
                pending.add_metric([], count)
                yield pending
        if self.queue is not None:
            depth = _read(self.queue.depth)
            if depth is not None:
                jobs = GaugeMetricFamily(
                    "shelfhand_queue_jobs",
                    "Ingest jobs on the queue: todo (waiting for a worker), doing (running).",
                    labels=["status"],
                )
                for status, n in depth.items():
                    jobs.add_metric([status], n)
                yield jobs


def _read(source: Callable[[], _T]) -> _T | None:
    """``source()``, or ``None`` when its backend cannot be reached (logged)."""
    try:
        return source()
    except DependencyUnavailableError as exc:
        logger.warning("metrics: %s", exc)
        return None


class ServiceMetrics:
    """The service's counters, fed by each turn's finished steps (a
    :class:`~shelfhand.core.step_counts.StepCounter`)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.turns = Counter("shelfhand_turns", "Chat turns, by status.", ["status"], registry=r)
        self.fallbacks = Counter(
            "shelfhand_answer_fallbacks", "Turns not answered with the model's answer as "
            "written (replaced by the answer check, or made without the model), by reason.",
            ["reason"], registry=r,
        )  # fmt: skip
        self.model_calls = Counter(
            "shelfhand_model_calls", "Model calls, by model and status.", ["model", "status"],
            registry=r,
        )  # fmt: skip
        self.tokens = Counter(
            "shelfhand_model_tokens", "Tokens of model calls, by model and direction.",
            ["model", "direction"], registry=r,
        )  # fmt: skip
        self.tool_calls = Counter(
            "shelfhand_tool_calls", "Tool calls, by tool and outcome.", ["tool", "outcome"],
            registry=r,
        )  # fmt: skip
        self.budget_refusals = Counter(
            "shelfhand_budget_refusals", "Model calls a budget refused, by budget and call "
            "(turn: the agent loop's; rerank, query rewrite, answer check, summary: a call "
            "beside it, which the turn goes on without).", ["budget", "call"], registry=r,
        )  # fmt: skip
        self.retrieval = Histogram(
            "shelfhand_retrieval_seconds", "Retrieval latency, by mode.", ["mode"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self._children: dict[tuple[Counter | Histogram, tuple[str, ...]], Any] = {}
        self.gauges = _Gauges()
        r.register(self.gauges)  # type: ignore[arg-type]  # a custom collector

    def watch(
        self, governance: Governance, kb: KnowledgeBase, queue: IngestQueue | None = None
    ) -> None:
        """Report these breakers, this knowledge base's pending embeddings and the depth of
        this job queue (if there is one)."""
        self.gauges.governance = governance
        self.gauges.kb = kb
        self.gauges.queue = queue

    def _child(self, metric: Counter | Histogram, *labels: str) -> Any:
        """``metric.labels(*labels)``, kept: looking a child up costs more than counting."""
        key = (metric, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def count_turn(self, status: str) -> None:
        self._child(self.turns, status).inc()

    def count_fallback(self, reason: str) -> None:
        self._child(self.fallbacks, reason).inc()

    def count_model_call(
        self, model: str, status: str, input_tokens: int, output_tokens: int
    ) -> None:
        self._child(self.model_calls, model, status).inc()
        if input_tokens:
            self._child(self.tokens, model, "input").inc(input_tokens)
        if output_tokens:
            self._child(self.tokens, model, "output").inc(output_tokens)

    def count_tool_call(self, tool: str, outcome: str) -> None:
        self._child(self.tool_calls, tool, outcome).inc()

    def count_budget_refusal(self, budget: str, call: str) -> None:
        """A budget refused a model call (``call``: ``turn`` for the loop's, else what the
        call beside it was for); fed by :class:`~shelfhand.service.turn_budgets.Budgets`."""
        self._child(self.budget_refusals, budget, call).inc()

    def count_retrieval(self, mode: str, seconds: float) -> None:
        self._child(self.retrieval, mode).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)


async def _admin(caller: Caller) -> None:
    if caller.permission_level not in ("admin", "system"):
        raise HTTPException(status_code=403, detail="/metrics is for admins")


@router.get("/metrics", tags=["health"], dependencies=[Depends(_admin)])
async def metrics(service: ServiceDep) -> Response:
    """Prometheus text format (admins only)."""
    found = service.metrics
    if found is None:
        raise HTTPException(status_code=404, detail="metrics need the server extra")
    # in a worker thread: the gauges read stores, whose locks an ingest may hold a while
    body = await asyncio.to_thread(found.render)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
