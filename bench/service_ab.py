"""Servers with different settings, or from different checkouts, under the same load,
interleaved: where a difference in the service's throughput goes.

Each configuration is ``LABEL=TREE[:NAME=VALUE,...]``: ``bench/service_load.py``'s ``rag``
scenario (50 SSE sessions) run with that tree's own script and sources, its servers given
the settings (``tracing=off``, ``answer_check=off``; a tree whose script takes no settings
runs as it is). Every round runs each configuration once, in alternating order; the report
gives turns/s and the server's CPU per turn (medians over the rounds) and their ratios to
the last configuration::

    git worktree add /tmp/obs-before 7ae59e4
    python bench/service_ab.py --rounds 2 --seconds 8 \\
        off=.:tracing=off off_nocheck=.:tracing=off,answer_check=off \\
        stored=.:tracing=stored before=/tmp/obs-before
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

RUN = r"""
import inspect, json, sys
tree, seconds = sys.argv[1], float(sys.argv[2])
sys.path.insert(0, tree + "/bench")
import service_load as sl
settings = dict(kv.split("=", 1) for kv in sys.argv[3:])
tracing = settings.pop("tracing", "stored")
if "server_env" in inspect.signature(sl.run_scenario).parameters:
    env = {"SHELFHAND_" + k.upper(): v for k, v in settings.items()}
    result = sl.run_scenario("rag", 50, seconds, None, tracing=tracing, server_env=env)
else:  # a checkout from before the settings
    result = sl.run_scenario("rag", 50, seconds, None)
print(json.dumps(result))
"""


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("configs", nargs="+", metavar="LABEL=TREE[:NAME=VALUE,...]")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=8.0)
    a = ap.parse_args()
    configs = []
    for item in a.configs:
        label, _, rest = item.partition("=")
        tree, _, settings = rest.partition(":")
        configs.append((label, Path(tree).resolve(), [s for s in settings.split(",") if s]))
    runs: dict[str, list[dict[str, float]]] = {label: [] for label, _, _ in configs}
    for r in range(a.rounds):
        for label, tree, settings in configs if r % 2 == 0 else configs[::-1]:
            env = {**os.environ, "PYTHONPATH": str(tree / "src"), "PYTHONDONTWRITEBYTECODE": "1"}
            done = subprocess.run(
                [sys.executable, "-c", RUN, str(tree), str(a.seconds), *settings],
                env=env, capture_output=True, text=True, timeout=600, check=False,
            )  # fmt: skip
            if done.returncode != 0:
                raise SystemExit(f"{label} failed:\n{done.stderr[-3000:]}")
            row = json.loads(done.stdout.strip().splitlines()[-1])
            runs[label].append(row)
            print(
                f"round {r + 1} {label:24} {row['turns_per_s']:7.1f} turns/s "
                f"{row['server_cpu_ms_per_turn']:7.2f} ms/turn  load {os.getloadavg()[0]:.1f}",
                file=sys.stderr,
                flush=True,
            )
    base = configs[-1][0]

    def median(label: str, key: str) -> float:
        return statistics.median(float(row[key]) for row in runs[label])

    base_tps, base_cpu = median(base, "turns_per_s"), median(base, "server_cpu_ms_per_turn")
    print(f"| server | turns/s | × {base} | server CPU ms/turn | × {base} |")
    print("|---|---:|---:|---:|---:|")
    for label, _, _ in configs:
        tps, cpu = median(label, "turns_per_s"), median(label, "server_cpu_ms_per_turn")
        print(f"| {label} | {tps:.1f} | {tps / base_tps:.3f} | {cpu:.2f} | {cpu / base_cpu:.3f} |")


if __name__ == "__main__":
    main()
