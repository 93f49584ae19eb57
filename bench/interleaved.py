"""Interleaved timing of async cases, for bench/delegation*.py (standard library only, so the
peers' scripts can use it from their own virtual environments).

Each case runs ``runs`` times per repeat, the cases taking turns, for ``repeats`` repeats;
per run: CPU microseconds of this process (minimum over the repeats: the least disturbed by
other processes) and wall microseconds (median).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any


async def interleaved(
    cases: Mapping[str, Callable[[], Awaitable[Any]]], runs: int, repeats: int, warmup: int
) -> dict[str, tuple[float, float]]:
    """Case name → (CPU µs per run, minimum over repeats; wall µs per run, median)."""
    for make in cases.values():
        for _ in range(warmup):
            await make()
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    wall: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, make in cases.items():
            c0, w0 = time.process_time(), time.perf_counter()
            for _ in range(runs):
                await make()
            cpu[name].append((time.process_time() - c0) / runs * 1e6)
            wall[name].append((time.perf_counter() - w0) / runs * 1e6)
    return {name: (min(cpu[name]), statistics.median(wall[name])) for name in cases}


def print_ratios(figures: Mapping[str, tuple[float, float]], base: str = "single") -> None:
    """One line per case: CPU and wall µs per run, each with its ratio to ``base``."""
    base_cpu, base_wall = figures[base]
    for name, (c, w) in figures.items():
        print(
            f"{name:<12} cpu {c:>9.1f} us {c / base_cpu:>5.2f}x   "
            f"wall {w:>9.1f} us {w / base_wall:>5.2f}x"
        )
