"""What one ``/metrics`` scrape costs: ``ServiceMetrics.render()`` with the scrape-time gauges
(breaker states, pending embeddings) over a knowledge base of the sample documents plus
``--docs`` synthetic ones (SQLite, hashing embedder; built once, not timed).

Run it on two checkouts side by side, interleaved, to compare (each with its own sources)::

    python bench/metrics_scrape.py --other /tmp/base --rounds 3

Prints, per checkout, the median ms per scrape over the rounds (each round the best of
``--scrapes`` scrapes' mean, in blocks of 50) and the ratio this / other.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

sys.path.insert(0, str(Path(__file__).resolve().parent))
from before_after import HYBRID  # noqa: E402  (after the path)

# before_after's search workspace: the sample documents plus ``argv[1]`` synthetic ones
ONE = (
    HYBRID[: HYBRID.index("queries = ")].replace("passes", "scrapes")
    + r"""
from shelfhand.api.metrics import ServiceMetrics
from shelfhand.tools.governance import Governance
metrics = ServiceMetrics()
metrics.watch(Governance(), kb)
metrics.render()
best = None
for _ in range(max(1, scrapes // 50)):
    t = time.perf_counter()
    for _ in range(50):
        metrics.render()
    ms = (time.perf_counter() - t) * 1000 / 50
    best = ms if best is None else min(best, ms)
kb.close()
print(json.dumps({"ms_per_scrape": best}))
"""
)


def one(tree: Path, docs: int, scrapes: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", ONE, str(docs), str(scrapes)],
        env=env, capture_output=True, text=True, timeout=900, check=True,
    )  # fmt: skip
    return float(json.loads(done.stdout.strip().splitlines()[-1])["ms_per_scrape"])


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--other", type=Path, required=True, help="the other checkout")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--scrapes", type=int, default=500)
    args = ap.parse_args()
    figures: dict[str, list[float]] = {"this": [], "other": []}
    for r in range(args.rounds):
        order = [("this", ROOT), ("other", args.other)]
        for name, tree in order if r % 2 == 0 else order[::-1]:
            figures[name].append(one(tree, args.docs, args.scrapes))
    this, other = statistics.median(figures["this"]), statistics.median(figures["other"])
    print(f"ms per scrape: this {this:.3f}, other {other:.3f}, this/other {this / other:.3f}")


if __name__ == "__main__":
    main()
