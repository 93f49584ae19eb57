"""What tracing costs a turn: off, stored (the trace store's recorder over SQLite) and
exported (OpenTelemetry SDK spans through a batch processor), interleaved in one run.

A turn is a scripted model asking for one tool call and one retrieval (over the bundled
sample documents, hashing vectors), then answering; it runs as a service turn does (under
its root span with a tracer; its steps counted for ``/metrics`` in the ``metrics`` rows).
Reported per turn: CPU µs of the whole process (the recorder's and the batch exporter's
threads included: each block of turns ends by writing what it queued) and wall µs, medians
over the blocks (each round starts with the next case), with the ratio to tracing off, and
the extra µs per span. The exporter hands spans to an in-memory exporter: the OTLP network
send is not measured (it runs on the SDK's thread).

    python bench/tracing_cost.py                 # ~2 min on 2 shared cores
    python bench/tracing_cost.py --runs 30 --repeats 60
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


from shelfhand import Agent, Toolkit, UserContext, retrieve_tool, tool  # noqa: E402
from shelfhand.core.tracing import SpanProcessor, Tracer  # noqa: E402
from shelfhand.knowledge import KnowledgeBase, sample_corpus  # noqa: E402
from shelfhand.service.turn_spans import traced_turn  # noqa: E402
from shelfhand.testing import CyclingScriptModel, hashing_router, text, tool_call  # noqa: E402
from shelfhand.traces import SqliteTraceStore, StoreRecorder  # noqa: E402

ALICE = UserContext(tenant_id="acme", user_id="alice")


class Counting:
    """Counts spans (to report the cost per span)."""

    def __init__(self) -> None:
        self.spans = 0

    def on_end(self, span: Any) -> None:
        self.spans += 1

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


@tool(read_only=True, cache_ttl=0, inline=True)
def order_status(order_id: str) -> str:
    """The status of an order."""
    return f"{order_id}: shipped"


async def rotated(
    cases: dict[str, tuple[Any, Tracer | None]], runs: int, repeats: int, warmup: int
) -> dict[str, tuple[float, float]]:
    """Like ``interleaved.interleaved``, but each repeat starts with the next case, so no
    case always runs first (the first of a round was measurably slower on a loaded
    machine), and each block ends by writing what its tracer queued (inside the timing: the
    recorder's and exporter's threads would otherwise do it during another case's block).
    CPU and wall: the medians over the repeats."""
    for make, tracer in cases.values():
        for _ in range(warmup):
            await make()
        if tracer is not None:
            tracer.flush()
    names = list(cases)
    cpu: dict[str, list[float]] = {n: [] for n in names}
    wall: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            make, tracer = cases[name]
            c0, w0 = time.process_time(), time.perf_counter()
            for _ in range(runs):
                await make()
            if tracer is not None:
                tracer.flush()
            cpu[name].append((time.process_time() - c0) / runs * 1e6)
            wall[name].append((time.perf_counter() - w0) / runs * 1e6)
    return {n: (statistics.median(cpu[n]), statistics.median(wall[n])) for n in names}


def make_turn(
    kb: KnowledgeBase, tracer: Tracer | None, counter: Any = None
) -> tuple[Any, Tracer | None]:
    model = CyclingScriptModel(
        [
            tool_call("order_status", {"order_id": "A-1"}),
            tool_call("retrieve", {"query": "退货政策"}),
            text("七天内可退 [1]。"),
        ]
    )
    agent = Agent(
        name="support",
        model=model,
        toolkit=Toolkit([order_status, retrieve_tool(kb)]),
        replay_repeated_calls=False,
    )
    turns = [0]

    async def events() -> AsyncGenerator[dict[str, Any], None]:
        turns[0] += 1
        await agent.run("退货政策是什么？", context=ALICE, trace_id=f"{turns[0]:032x}")
        yield {"type": "final"}

    async def turn() -> None:
        if tracer is None and counter is None:
            async for _ in events():
                pass
            return
        # as the service runs a turn: its root span (tracer), its steps counted (counter)
        observed = traced_turn(
            events(), tracer, counter, "s1", ALICE, f"{turns[0] + 1:032x}", parent_span_id=""
        )
        async for _ in observed:
            pass

    return turn, tracer


def case_turn(case: str, folder: Path) -> tuple[KnowledgeBase, Tracer | None, Any]:
    """A knowledge base in ``folder`` and the turn of the instruction counts' ``case``:
    tracing ``off``, ``spans`` (counted, kept nowhere) or ``stored`` (a trace store in
    ``folder``, written by the batch: no timed writes, so that a slow run under valgrind
    writes as often as a fast one)."""
    from shelfhand.traces import SqliteTraceStore, StoreRecorder

    kb = KnowledgeBase(folder / "ws", hashing_router())
    kb.ingest([sample_corpus()], tenant_id="acme")
    tracer = None
    if case == "spans":
        tracer = Tracer([Counting()])
    elif case == "stored":
        store = SqliteTraceStore(folder / "traces.db")
        tracer = Tracer([StoreRecorder(store, interval=3600)])
    turn, _ = make_turn(kb, tracer)
    return kb, tracer, turn


async def run_turns(turn: Any, tracer: Tracer | None, k: int) -> None:
    """``k`` turns, then what the tracer queued handed to its processors and written."""
    for _ in range(k):
        await turn()
    if tracer is not None:
        tracer.flush()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=30, help="turns per block")
    ap.add_argument("--repeats", type=int, default=30, help="blocks per case")
    ap.add_argument("--cases", nargs="*", help="only these rows (off is always measured)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        kb = KnowledgeBase(Path(tmp) / "ws", hashing_router())
        kb.ingest([sample_corpus()], tenant_id="acme")
        store = SqliteTraceStore(Path(tmp) / "traces.db")
        stored: list[SpanProcessor] = [StoreRecorder(store)]
        cases = {
            "off": make_turn(kb, None),
            "spans only (kept nowhere)": make_turn(kb, Tracer([Counting()])),
            "stored": make_turn(kb, Tracer(stored)),
        }
        try:
            from shelfhand.api.metrics import ServiceMetrics

            # the service with tracing off: its /metrics counters, no span
            cases["metrics only"] = make_turn(kb, None, ServiceMetrics())
            cases["stored+metrics"] = make_turn(kb, Tracer(stored), ServiceMetrics())
        except ImportError:
            print("(no prometheus-client: pip install 'shelfhand[server]' for the metrics rows)")
        exported = None
        try:
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
                InMemorySpanExporter,
            )

            from shelfhand.providers.otel import OtelProcessor

            exported = OtelProcessor(BatchSpanProcessor(InMemorySpanExporter()))
            cases["exported"] = make_turn(kb, Tracer([exported]))
            cases["stored+exported"] = make_turn(kb, Tracer([*stored, exported]))
        except ImportError:
            print("(no opentelemetry-sdk: pip install 'shelfhand[otel]' for the exported rows)")
        if a.cases:
            cases = {n: c for n, c in cases.items() if n == "off" or n in a.cases}
        figures = await rotated(cases, runs=a.runs, repeats=a.repeats, warmup=20)
        one = Counting()
        await make_turn(kb, Tracer([one]))[0]()
        spans_per_turn = one.spans
        base_cpu, base_wall = figures["off"]
        print(f"spans per turn: {spans_per_turn}")
        print("| tracing | CPU µs/turn | × off | wall µs/turn | × off | extra CPU µs/span |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, (cpu, wall) in figures.items():
            per_span = (
                (cpu - base_cpu) / spans_per_turn if name not in ("off", "metrics only") else 0.0
            )
            print(
                f"| {name} | {cpu:.0f} | {cpu / base_cpu:.3f} | {wall:.0f} | "
                f"{wall / base_wall:.3f} | {per_span:.1f} |"
            )
        for p in stored:
            p.close()
        if exported is not None:
            exported.close()
        kb.close()


if __name__ == "__main__":
    asyncio.run(main())
