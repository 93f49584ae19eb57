"""CPU cost of the agent loop's safeguards (issue 9): this tree beside another, interleaved.

Each cell runs the shared harness's shelfhand adapter (``fw_shelfhand_inline``: a scripted
model, the sync ``add`` tool inline, replay off so the tool really runs every step) for 1,000
runs in its own process and reports CPU microseconds per run (process time: steadier than
wall time on a shared machine). The two trees alternate ``--repeats`` times; the minimum per
tree is printed for 1 and 10 tool calls per run.

    python bench/agent_loop_cost.py --other /work/main     # compare with another checkout
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
HARNESS = ROOT.parent / "shared" / "bench" / "agent"

CELL = """
import asyncio, sys, time
sys.path[:0] = [{bench!r}, {harness!r}]
import fw_shelfhand_inline as fw
run = fw.make_runner({calls}, 1)
async def many(n):
    for _ in range(n):
        await run()
asyncio.run(many(200))
t = time.process_time()
asyncio.run(many(1000))
print((time.process_time() - t) * 1000)
"""


def cell(tree: Path, calls: int, harness: Path) -> float:
    code = CELL.format(bench=str(tree / "bench"), harness=str(harness), calls=calls)
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
    a = ap.parse_args()
    trees = [ROOT, *([a.other.resolve()] if a.other else [])]
    for calls in (1, 10):
        best: dict[Path, float] = {}
        for _ in range(a.repeats):
            for tree in trees:
                us = cell(tree, calls, a.harness)
                best[tree] = min(us, best.get(tree, us))
        for tree, us in best.items():
            print(f"{calls:>2} tool call(s)/run  {tree!s:<30} {us:8.1f} us CPU per run (min)")


if __name__ == "__main__":
    main()
