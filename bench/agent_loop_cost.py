"""CPU cost of the agent loop's safeguards (issue 9): this tree beside another, interleaved.

Each cell runs the shared harness's shelfhand adapter (``fw_shelfhand_inline``: a scripted
model, the sync ``add`` tool inline, replay off so the tool really runs every step) for 1,000
runs in its own process and reports CPU microseconds per run (process time: steadier than
wall time on a shared machine). The two trees alternate ``--repeats`` times; the minimum per
tree is printed for 1 and 10 tool calls per run.

    python bench/agent_loop_cost.py --other /work/main     # compare with another checkout
    python bench/agent_loop_cost.py --adapters fw_shelfhand_inline fw_shelfhand fw_baseline

``--adapters``: the harness adapters to time (default: the inline one); ``fw_shelfhand`` runs
the sync tool on a worker thread (its CPU time counts both threads, not the time they wait
for each other), ``fw_baseline`` is the hand-written loop.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
HARNESS = ROOT.parent / "shared" / "bench" / "agent"

CELL = """
import asyncio, sys, time
sys.path[:0] = [{bench!r}, {harness!r}]
import importlib
fw = importlib.import_module({adapter!r})
run = fw.make_runner({calls}, 1)
async def many(n):
    for _ in range(n):
        await run()
asyncio.run(many(200))
t = time.process_time()
asyncio.run(many(1000))
print((time.process_time() - t) * 1000)
"""


def cell(tree: Path, calls: int, harness: Path, adapter: str = "fw_shelfhand_inline") -> float:
    code = CELL.format(
        bench=str(tree / "bench"), harness=str(harness), calls=calls, adapter=adapter
    )
    env = {"PYTHONPATH": str(tree / "src")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    return float(out.stdout.strip())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--other", type=Path, help="another checkout to compare with")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--harness", type=Path, default=HARNESS)
    ap.add_argument("--adapters", nargs="+", default=["fw_shelfhand_inline"])
    a = ap.parse_args()
    trees = [ROOT, *([a.other.resolve()] if a.other else [])]
    print(f"load before: {os.getloadavg()}")
    for calls in (1, 10):
        best: dict[tuple[str, Path], float] = {}
        for _ in range(a.repeats):
            for adapter in a.adapters:
                # the hand-written loop does not use the library: one tree is enough
                for tree in trees[:1] if adapter == "fw_baseline" else trees:
                    us = cell(tree, calls, a.harness, adapter)
                    best[adapter, tree] = min(us, best.get((adapter, tree), us))
        for (adapter, tree), us in best.items():
            print(
                f"{calls:>2} tool call(s)/run  {adapter:<20} {tree!s:<30} "
                f"{us:8.1f} us CPU per run (min)"
            )
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
