"""The sync tool's hop to a worker thread, alone: ``run_in_executor`` on a ``ThreadPoolExecutor``
(what shelfhand used before) against ``shelfhand.tools.workers.run_sync``, and the same call
on the loop (``inline=True``), interleaved in one process; medians in µs per call, wall
clock and CPU time of the process (both threads). Two other hand-offs are tried beside them
(``bench/agent_hop_ways.py``: the loop waiting briefly for the result, a worker that spins
before it parks)::

    PYTHONPATH=src python bench/agent_hop.py --rounds 9 --calls 2000
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import functools
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from agent_hop_ways import loop_waits, worker_spins  # type: ignore[import-not-found]

from shelfhand.tools.workers import run_sync


def add(a: int, b: int) -> int:
    return a + b


_executor = ThreadPoolExecutor(32)


async def executor_hop(n: int) -> None:
    loop = asyncio.get_running_loop()
    for _ in range(n):
        ctx = contextvars.copy_context()
        await loop.run_in_executor(_executor, ctx.run, functools.partial(add, 2, 3))


async def worker_hop(n: int) -> None:
    for _ in range(n):
        await run_sync(add, 2, 3)


async def waiting_hop(n: int) -> None:
    for _ in range(n):
        await loop_waits(add, 2, 3)


async def spinning_hop(n: int) -> None:
    for _ in range(n):
        await worker_spins(add, 2, 3)


async def on_the_loop(n: int) -> None:
    for _ in range(n):
        add(2, 3)
        await asyncio.sleep(0)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=2000)
    a = ap.parse_args()
    ways: dict[str, Callable[[int], Awaitable[None]]] = {
        "run_in_executor": executor_hop,
        "workers.run_sync": worker_hop,
        "loop waits": waiting_hop,
        "worker spins": spinning_hop,
        "on the loop": on_the_loop,
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    cpu: dict[str, list[float]] = {name: [] for name in ways}
    print(f"load before: {os.getloadavg()}")
    for _ in range(a.rounds):
        for name, way in ways.items():
            t0, c0 = time.perf_counter(), time.process_time()
            asyncio.run(way(a.calls))
            times[name].append((time.perf_counter() - t0) / a.calls * 1e6)
            cpu[name].append((time.process_time() - c0) / a.calls * 1e6)
    print(f"load after: {os.getloadavg()}")
    base = statistics.median(times["run_in_executor"])
    for name, values in times.items():
        us = statistics.median(values)
        print(
            f"{name:>18}: {us:6.1f} us per call ({us / base:.2f} x run_in_executor), "
            f"CPU {statistics.median(cpu[name]):6.1f} us"
        )


if __name__ == "__main__":
    main()
