"""Two checkouts side by side, interleaved: the agent run, governance, hybrid search and the
service under load, each measured by the checkout's own bench script on its own sources.

For a refactor that must not change speed: each round runs every benchmark once on this tree
and once on the other (``--other``), in alternating order, so a noisy neighbour hits both
alike; the report gives each figure per tree (median over the rounds) and the ratio
this / other::

    git worktree add /tmp/wt-before <commit>
    python bench/before_after.py --other /tmp/wt-before --rounds 3 --out bench/results/ba.json

Benchmarks (each is also usable on its own):

- ``agent``: ``bench/agent_loop_cost.py``'s cell (scripted model, the shared harness's
  adapter, 1,000 runs, CPU µs per run for 1 and 10 tool calls);
- ``governance``: ``bench/governance_overhead.py`` (µs a governed call adds, median block);
- ``hybrid``: the inline script below, run with ``PYTHONPATH=<tree>/src``: a workspace of the
  sample documents plus ``--docs`` synthetic ones with the hashing embedder (built once per
  tree and round, not timed), then ``kb.search(mode="hybrid")`` over 40 queries × passes;
  wall p50 / p95 in ms (``--embed-timeout 2``: with the deadline the CLI and the service
  search with, the query embedded on a thread of its own);
- ``service``: ``bench/service_load.py --scenario rag`` (50 SSE sessions: turns/s, p50 ms,
  the server's CPU ms per turn); ``--tracing stored off`` runs it once per setting on this
  tree (and on the other when its script has the setting; else its one run is compared
  with each).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
ROOT = HERE.parent

HYBRID = r"""
import json, random, statistics, sys, tempfile, time
from pathlib import Path
from shelfhand.knowledge.base import KnowledgeBase, sample_corpus
try:  # this layout
    from shelfhand.knowledge import EmbeddingRouter, HashingEmbedder
except ImportError:  # before the knowledge package was split
    from shelfhand.knowledge.embedders import HashingEmbedder
    from shelfhand.knowledge.embedding import EmbeddingRouter
docs, passes = int(sys.argv[1]), int(sys.argv[2])
embed_timeout = float(sys.argv[3]) if len(sys.argv) > 3 else None
rng = random.Random(7)
words = [f"w{i}" for i in range(3000)] + "保修 退货 投影仪 灯泡 过热 风扇 报价 库存".split()
root = Path(tempfile.mkdtemp())
corpus = root / "corpus"
corpus.mkdir()
for d in range(docs):
    body = "\n\n".join(" ".join(rng.choice(words) for _ in range(60)) for _ in range(4))
    (corpus / f"d{d}.md").write_text(f"# Doc {d}\n\n## E-{d % 500:03d}\n\n{body}\n", encoding="utf-8")
kb = KnowledgeBase(
    root / "ws", EmbeddingRouter({"any": HashingEmbedder()}), embed_timeout=embed_timeout
)
kb.ingest([sample_corpus(), corpus])
queries = ["投影仪的保修期是多久", "E-203 是什么故障", "how long is the warranty",
           "lamp overheating fan", "SKU2024-011 有货吗"]
queries += [" ".join(rng.choice(words) for _ in range(4)) for _ in range(35)]
for q in queries[:5]:
    kb.search(q, k=5, mode="hybrid")
times = []
for _ in range(passes):
    for q in queries:
        t = time.perf_counter()
        kb.search(q, k=5, mode="hybrid")
        times.append((time.perf_counter() - t) * 1000)
kb.close()
times.sort()
print(json.dumps({"p50_ms": statistics.median(times), "p95_ms": times[int(0.95 * len(times)) - 1]}))
"""


def _run(cmd: list[str], cwd: Path, tree: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} in {tree} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def governance(tree: Path, calls: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "g.json"
        _run(
            [sys.executable, "bench/governance_overhead.py", "--calls", str(calls), "--repeats",
             "5", "--json", str(out)], tree, tree,
        )  # fmt: skip
        data = json.loads(out.read_text(encoding="utf-8"))
    return _flatten(data, "governance")


def hybrid(tree: Path, docs: int, passes: int, embed_timeout: float | None) -> dict[str, float]:
    deadline = [] if embed_timeout is None else [str(embed_timeout)]
    line = _run([sys.executable, "-c", HYBRID, str(docs), str(passes), *deadline], tree, tree)
    return {f"hybrid {k}": v for k, v in json.loads(line.strip().splitlines()[-1]).items()}


def service(tree: Path, seconds: float, tracing: str = "") -> dict[str, float]:
    """``tracing``: the servers' setting, for a tree whose script takes ``--tracing`` (a
    tree from before tracing has none to turn off)."""
    script = tree / "bench" / "service_load.py"
    takes = "--tracing" in script.read_text(encoding="utf-8")
    extra = ["--tracing", tracing] if tracing and takes else []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "s.json"
        _run(
            [sys.executable, "bench/service_load.py", "--scenario", "rag", "--seconds",
             str(seconds), "--out", str(out), *extra], tree, tree,
        )  # fmt: skip
        data = json.loads(out.read_text(encoding="utf-8"))
    rows = data if isinstance(data, list) else data.get("results", [data])
    first = rows[0]
    return {
        "service rag turns/s": float(first["turns_per_s"]),
        "service rag p50 ms": float(first["p50_ms"]),
        "service rag server CPU ms/turn": float(first["server_cpu_ms_per_turn"]),
    }


def agent(tree: Path) -> dict[str, float]:
    """CPU µs per run of the shared harness's shelfhand adapter (``agent_loop_cost.cell``)."""
    from agent_loop_cost import HARNESS, cell

    return {f"agent {n} call(s) CPU µs": cell(tree, n, HARNESS) for n in (1, 10)}


def _flatten(data: Any, prefix: str) -> dict[str, float]:
    out: dict[str, float] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            out.update(_flatten(value, f"{prefix} {key}"))
    elif isinstance(data, (int, float)) and not isinstance(data, bool):
        out[prefix] = float(data)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--other", type=Path, required=True, help="the other checkout")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", nargs="*", default=["agent", "governance", "hybrid", "service"])
    ap.add_argument("--calls", type=int, default=5000, help="governance calls per block")
    ap.add_argument("--docs", type=int, default=400, help="synthetic documents (hybrid)")
    ap.add_argument("--passes", type=int, default=5, help="query passes (hybrid)")
    ap.add_argument(
        "--embed-timeout",
        type=float,
        help="the query embedding's deadline in seconds (hybrid; the App's, so the CLI's and "
        "the service's, is 2: its embedding then runs on a thread of its own); none by default",
    )
    ap.add_argument("--seconds", type=float, default=8.0, help="per service run")
    ap.add_argument(
        "--tracing",
        nargs="*",
        default=[""],
        help="service: run once per tracing setting (stored, off) on the trees that have one",
    )
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    trees = {"this": ROOT, "other": a.other.resolve()}
    samples: dict[str, dict[str, list[float]]] = {"this": {}, "other": {}}

    def keep(label: str, figures: dict[str, float]) -> None:
        for key, value in figures.items():
            samples[label].setdefault(key, []).append(value)

    for r in range(a.rounds):
        order = ["this", "other"] if r % 2 == 0 else ["other", "this"]
        for label in order:
            tree = trees[label]
            if "agent" in a.only:
                keep(label, agent(tree))
            if "governance" in a.only:
                keep(label, governance(tree, a.calls))
            if "hybrid" in a.only:
                keep(label, hybrid(tree, a.docs, a.passes, a.embed_timeout))
            if "service" in a.only:
                for tracing in a.tracing:
                    figures = service(tree, a.seconds, tracing)
                    suffix = f" (tracing {tracing})" if tracing else ""
                    keep(label, {k + suffix: v for k, v in figures.items()})
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr, flush=True)
    rows = []
    for key in sorted(samples["this"].keys() & samples["other"].keys()):
        this, other = (
            statistics.median(samples["this"][key]),
            statistics.median(samples["other"][key]),
        )
        rows.append(
            {"figure": key, "this": this, "other": other, "ratio": this / other if other else None}
        )
    print(f"{'figure':55} {'this':>10} {'other':>10} {'this/other':>10}")
    for row in rows:
        ratio = f"{row['ratio']:.3f}" if row["ratio"] is not None else "-"
        print(f"{row['figure']:55} {row['this']:>10.2f} {row['other']:>10.2f} {ratio:>10}")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps({"rows": rows, "samples": samples}, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
