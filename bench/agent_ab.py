"""The agent loop of two checkouts side by side, interleaved (a change's before and after).

Each round runs, for every adapter and scenario, the shared harness's cell once per tree (in
alternating order, so a noisy neighbour hits both alike) and once for the hand-written loop;
the report gives the medians per tree and the ratio this / other::

    git worktree add /tmp/loop-before <commit>
    python bench/agent_ab.py --other /tmp/loop-before --rounds 5 --runs 1000

``shelfhand`` runs the sync tool on a worker thread (the default), ``shelfhand_inline`` with
``@tool(inline=True)``; ``basic`` is one tool call per run, ``seq10`` ten.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ADAPTERS = ("shelfhand", "shelfhand_inline")
SCENARIOS = ("basic", "seq10")


def cell(tree: Path, harness: Path, fw: str, scenario: str, runs: int) -> float:
    """Microseconds per run of one harness cell, on ``tree``'s sources (the adapters are this
    checkout's, for both trees: the instrument stays the same, only the library changes)."""
    paths = [str(HERE), str(harness), str(tree / "src")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    cmd = [sys.executable, str(harness / "bench.py"), fw, scenario, "--runs", str(runs)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, check=False)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return float(json.loads(line[7:])["us_per_run"])
    raise RuntimeError(f"{tree} {fw} {scenario} failed:\n{out.stderr[-2000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--other", type=Path, required=True, help="the checkout to compare with")
    ap.add_argument(
        "--harness", type=Path, default=HERE.parent.parent / "shared" / "bench" / "agent"
    )
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=1000)
    a = ap.parse_args()
    this = HERE.parent
    trees = {"this": this, "other": a.other.resolve()}
    times: dict[tuple[str, str, str], list[float]] = {}
    print(f"load before: {os.getloadavg()}", flush=True)
    for r in range(a.rounds):
        order = list(trees.items()) if r % 2 == 0 else list(trees.items())[::-1]
        for scenario in SCENARIOS:
            times.setdefault(("hand", "baseline", scenario), []).append(
                cell(this, a.harness, "baseline", scenario, a.runs)
            )
            for fw in ADAPTERS:
                for label, tree in order:
                    us = cell(tree, a.harness, fw, scenario, a.runs)
                    times.setdefault((label, fw, scenario), []).append(us)
        print(f"round {r + 1} done", flush=True)
    print(f"load after: {os.getloadavg()}", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    print("\n| adapter | scenario | other (us) | this (us) | this / other | this / hand loop |")
    print("|---|---|---|---|---|---|")
    for fw in ADAPTERS:
        for scenario in SCENARIOS:
            o, t = med[("other", fw, scenario)], med[("this", fw, scenario)]
            hand = med[("hand", "baseline", scenario)]
            print(f"| {fw} | {scenario} | {o:.0f} | {t:.0f} | {t / o:.2f} | {t / hand:.1f}x |")
    for fw in ADAPTERS:
        for label in trees:
            step = (med[(label, fw, "seq10")] - med[(label, fw, "basic")]) / 9
            print(f"{fw} {label}: each extra step {step:.0f} us")
    hand = med[("hand", "baseline", "basic")]
    print(f"hand loop: {hand:.1f} us per run")


if __name__ == "__main__":
    main()
