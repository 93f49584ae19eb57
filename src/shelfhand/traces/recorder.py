"""The trace store's processor: finished traces are queued and written in batches.

A turn's spans never wait for the database. The tracer hands the recorder a trace's
finished spans together, when its root ends (:class:`~shelfhand.core.tracing.TraceProcessor`):
:meth:`StoreRecorder.on_trace` encodes them in one call into a tuple of strings and numbers
(:func:`~shelfhand.traces.store.encode_trace`: the spans' objects are freed at once, not kept
for the garbage collector to walk until the write) and appends it to a queue (no lock, no
I/O): one encoding and one queue entry per turn. A daemon thread writes what has gathered in
one transaction when ``batch`` spans wait, or every ``interval`` seconds (a reader that needs
a trace at once, such as ``GET /v1/traces/{id}``, flushes the tracer first). A failed write
is logged and its spans dropped (tracing never fails a turn, nor grows without bound).
Retention runs after every ``prune_every`` writes.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import TYPE_CHECKING

from shelfhand.traces.store import EncodedTrace, encode_trace

if TYPE_CHECKING:
    from collections.abc import Sequence

    from shelfhand.core.tracing import Span
    from shelfhand.traces.store import SqlTraceStore

__all__ = ["StoreRecorder"]

logger = logging.getLogger(__name__)


class StoreRecorder:
    """Writes finished spans to a trace store (see the module docstring).

    Args:
        store: Where the spans go (closed with the recorder).
        interval: The longest a span waits, in seconds.
        batch: Write as soon as this many spans wait.
        max_pending: Spans kept while the store is slow; beyond it new spans are dropped
            (and counted in :attr:`dropped`).
        max_traces: Keep the newest this many traces (``None``: no limit by count).
        max_age_days: Keep traces this many days (``None``: no limit by age).
        prune_every: Apply the retention after this many writes.
    """

    def __init__(
        self,
        store: SqlTraceStore,
        *,
        interval: float = 0.5,
        batch: int = 512,
        max_pending: int = 100_000,
        max_traces: int | None = None,
        max_age_days: float | None = None,
        prune_every: int = 200,
    ) -> None:
        self.store = store
        self.interval = interval
        self.batch = batch
        self.max_pending = max_pending
        self.max_traces = max_traces
        self.max_age_days = max_age_days
        self.prune_every = prune_every
        self.dropped = 0
        self._pending: deque[EncodedTrace] = deque()  # append and popleft are atomic
        self._waiting = 0  # spans in _pending (about: counted anew at each write)
        self._wake = threading.Event()
        self._write_lock = threading.Lock()
        self._stopped = False
        self._writes = 0
        self._thread = threading.Thread(target=self._run, name="shelfhand-traces", daemon=True)
        self._thread.start()

    def on_trace(self, spans: Sequence[Span]) -> None:
        """Queue finished spans of one trace (see the module docstring)."""
        waiting = self._waiting + len(spans)
        if waiting > self.max_pending:
            self.dropped += len(spans)
            return
        self._pending.append(encode_trace(spans))
        self._waiting = waiting
        if waiting >= self.batch:
            self._wake.set()

    def on_end(self, span: Span) -> None:
        """Queue one finished span (a trace of its own, for callers without a tracer)."""
        self.on_trace((span,))

    def flush(self) -> None:
        """Write every queued trace now (in the caller's thread)."""
        with self._write_lock:
            pending = self._pending
            traces = [pending.popleft() for _ in range(len(pending))]
            if not traces:
                return
            # counted anew from what is left (a count racing on_trace is corrected here)
            self._waiting = sum(t[4] for t in tuple(pending))
            try:
                self.store.write_encoded(traces)
            except Exception:
                count = sum(t[4] for t in traces)
                logger.exception("could not store %d spans; they are dropped", count)
                return
            self._writes += 1
            if self._writes % self.prune_every == 0 and (
                self.max_traces is not None or self.max_age_days is not None
            ):
                self._prune()

    def _prune(self) -> None:
        try:
            gone = self.store.prune(max_traces=self.max_traces, max_age_days=self.max_age_days)
        except Exception:
            logger.exception("could not apply the trace retention")
            return
        if gone:
            logger.debug("trace retention removed %d traces", gone)

    def close(self) -> None:
        """Write what is queued, stop the thread and close the store."""
        self._stopped = True
        self._wake.set()
        self._thread.join(timeout=10)
        self.flush()
        self.store.close()

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait(self.interval)
            self._wake.clear()
            self.flush()
