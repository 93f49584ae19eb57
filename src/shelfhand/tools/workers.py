"""The worker threads sync tools run in, so that a slow sync function never stalls the loop
(the hop itself: :mod:`shelfhand.core.workers`).

Up to :data:`SYNC_TOOL_THREADS` sync tools run at the same time; more wait in the queue.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from shelfhand.core.workers import SyncWorkers

__all__ = ["SYNC_TOOL_THREADS", "SyncWorkers", "run_sync"]

SYNC_TOOL_THREADS = 32
"""Worker threads for sync tools. More than the loop's default executor (cores + 4), because a
timed-out sync tool cannot be stopped and keeps its thread until it returns."""

_workers = SyncWorkers(SYNC_TOOL_THREADS, name="shelfhand-tool")


def run_sync(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
    """``fn(*args, **kwargs)`` on the shared sync-tool threads (a future to await; see
    :meth:`SyncWorkers.call`)."""
    return _workers.call(fn, *args, **kwargs)
