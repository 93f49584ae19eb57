"""The cost of one span, piece by piece: making and ending it (the instrumentation's share,
on the caller's thread) and writing it to the SQLite trace store (the recorder thread's
share), per span, for a tool-call span and for a retrieval span with three hits. Stored
spans come in traces of eight (a turn's): the tracer hands a trace's spans to the recorder
together when its root ends, which encodes them in one call and queues them (the caller's
share, "hand over"); a batch of 256 holds 32 traces and one of 8 holds one (the store
writes one row per trace and batch).

    python bench/span_cost.py            # a few seconds

CPU µs per span (``time.process_time``), the minimum of five rounds.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shelfhand.core.tracing import Span, SpanList, Tracer, enter, leave, start_span
from shelfhand.traces import SqliteTraceStore, StoreRecorder

N = 5000


TOOL = {
    "gen_ai.operation.name": "execute_tool",
    "gen_ai.tool.name": "order_status",
    "gen_ai.tool.call.id": "call_1",
    "gen_ai.tool.call.arguments": '{"order_id":"A-1"}',
}
RETRIEVAL = {
    "gen_ai.operation.name": "retrieval",
    "gen_ai.retrieval.query.text": "退货政策",
    "gen_ai.retrieval.documents": [
        {
            "id": f"returns-md::{i}",
            "source": "policies/returns.md",
            "title": "退货政策",
            "score": 0.9 - i / 10,
            "keyword_rank": i + 1,
            "vector_rank": i + 2,
            "exact": False,
        }
        for i in range(3)
    ],
    "shelfhand.retrieval.mode": "hybrid",
    "shelfhand.retrieval.total_ms": 2.8,
}


def best(fn: Callable[[], Any], n: int) -> float:
    times = []
    for _ in range(5):
        t = time.process_time()
        fn()
        times.append((time.process_time() - t) / n * 1e6)
    return min(times)


def main() -> None:
    keep = SpanList()
    tracer = Tracer([keep])
    root = tracer.start_root("turn", trace_id="a" * 32, tenant_id="acme", user_id="alice")
    token = enter(root)

    def make(attributes: dict[str, Any]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(N):
                span = start_span("execute_tool order_status", "tool", attributes=attributes)
                assert span is not None
                span.event("governance.permission", decision="allow")
                span.end()

        return run

    print("| what | CPU µs per span |")
    print("|---|---:|")
    print(f"| make and end a tool span | {best(make(TOOL), N):.1f} |")
    print(f"| make and end a retrieval span (3 hits) | {best(make(RETRIEVAL), N):.1f} |")
    with tempfile.TemporaryDirectory() as tmp:
        for label, attributes in (("tool", TOOL), ("retrieval", RETRIEVAL)):
            keep.spans.clear()
            make(attributes)()
            spans = list(keep.spans)
            for i, span in enumerate(spans):  # as turns of eight spans each
                span.trace_id = f"{i // 8:032x}"
            recorder = StoreRecorder(
                SqliteTraceStore(Path(tmp) / f"{label}-queued.db"), interval=3600, batch=10**9
            )

            def hand_over(spans: list[Span] = spans, r: StoreRecorder = recorder) -> None:
                for i in range(0, len(spans), 8):
                    r.on_trace(spans[i : i + 8])
                r._pending.clear()  # (what the writer would take: not timed here)
                r._waiting = 0

            print(f"| hand a {label} span over (encoded with its trace of 8) | "
                  f"{best(hand_over, N):.1f} |")  # fmt: skip
            recorder.close()
            for batch in (256, 8):
                store = SqliteTraceStore(Path(tmp) / f"{label}-{batch}.db")

                def write(spans: list[Span] = spans, b: int = batch, s: Any = store) -> None:
                    for i in range(0, len(spans), b):
                        s.write(spans[i : i + b])

                print(f"| store a {label} span (batches of {batch}) | {best(write, N):.1f} |")
                store.close()
    leave(root, token)


if __name__ == "__main__":
    main()
