"""What the keyword analysis costs per tree: ``tokenize_for_index`` over a BEIR corpus's
passages (title and text, as ingest reads them) and ``tokenize_query`` over its queries, each
tree in a child process with its ``src`` first on the path, the trees alternated round after
round on the same machine::

    python bench/analysis_cost.py --beir DATA/cmrc2018 --trees <before worktree> . --rounds 3

Prints, per tree, the best round's characters per second for passages and microseconds per
query, and how many index tokens the corpus gives (what the keyword index stores).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

_CHILD = r"""
import json, sys, time
from shelfhand.knowledge.analysis import tokenize_for_index, tokenize_query
data = sys.argv[1]
docs = [json.loads(l) for l in open(data + "/corpus.jsonl", encoding="utf-8")]
texts = [d.get("title", "") + "\n" + d["text"] for d in docs]
queries = [json.loads(l)["text"] for l in open(data + "/queries.jsonl", encoding="utf-8")]
tokenize_for_index(texts[0]); tokenize_query(queries[0])  # jieba's dictionary loaded
t0 = time.perf_counter()
tokens = sum(len(tokenize_for_index(t)) for t in texts)
t1 = time.perf_counter()
for q in queries:
    tokenize_query(q)
t2 = time.perf_counter()
print(json.dumps({"chars_per_s": sum(map(len, texts)) / (t1 - t0),
                  "query_us": (t2 - t1) / len(queries) * 1e6, "tokens": tokens}))
"""


def _round(tree: Path, data: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(data)], env=env, capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    result: dict[str, float] = json.loads(out.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--beir", type=Path, required=True)
    parser.add_argument("--trees", nargs="+", type=Path, default=[Path(".")])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    trees = [t.resolve() for t in args.trees]
    rounds: dict[Path, list[dict[str, float]]] = {t: [] for t in trees}
    for _ in range(args.rounds):
        for tree in trees:
            rounds[tree].append(_round(tree, args.beir))
    for tree, runs in rounds.items():
        best = max(runs, key=lambda r: r["chars_per_s"])
        query = min(r["query_us"] for r in runs)
        each = ", ".join(f"{r['chars_per_s']:,.0f}" for r in runs)
        print(
            f"{tree!s:40} passages {best['chars_per_s']:,.0f} chars/s (rounds: {each}), "
            f"query {query:.0f} µs, index tokens {best['tokens']:,.0f}"
        )


if __name__ == "__main__":
    main()
