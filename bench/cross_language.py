"""Search across languages: questions in Chinese whose answer is in an English passage
(``c*``), and the reverse (``r*``), over all six handbooks of ``bench/handbooks`` in one
workspace (16 documents, 4 of them English), with the default embedders.

Each tree ingests its own workspace and searches it in a child process with its ``src``
first on the path. A case is found at rank n when the n-th hit (``k`` = 5, at or over the
workspace's relevance floor, as an answer's search is) holds the ``expect`` text::

    python bench/cross_language.py --trees <before worktree> . [--show]

Besides the cross-language cases, every question of the handbooks' case sets
(``bench/handbooks/*-cases.jsonl``) is searched too, and the trees' first hits compared:
``changed`` counts those whose first hit differs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent / "handbooks"


def _child(workspace: Path) -> None:
    """In the tree under test: search every case; print one JSON object."""
    from shelfhand.app import App

    app = App.from_settings(workspace=workspace)
    kb = app.open_knowledge()
    cases = [json.loads(x) for x in (HERE / "cross-search.jsonl").read_text().splitlines() if x]
    found = {}
    for case in cases:
        hits = kb.search(case["question"], k=5)
        ranks = [i + 1 for i, h in enumerate(hits) if case["expect"] in h.chunk.text]
        found[case["id"]] = ranks[0] if ranks else None
    firsts = {}
    for path in sorted(HERE.glob("*-cases.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                q = json.loads(line)["question"]
                hits = kb.search(q, k=1)
                firsts[q] = hits[0].chunk.chunk_id if hits else None
    print(json.dumps({"found": found, "firsts": firsts}, ensure_ascii=False))


def _run(tree: Path, workspace: Path) -> dict[str, dict[str, object]]:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    for folder in sorted(p for p in HERE.iterdir() if p.is_dir()):
        subprocess.run(
            [sys.executable, "-m", "shelfhand.cli", "ingest", str(folder), "-w", str(workspace)],
            env=env, check=True, capture_output=True,
        )  # fmt: skip
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(workspace)],
        env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    result: dict[str, dict[str, object]] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _summary(found: dict[str, object], prefix: str) -> str:
    ranks = [r for key, r in found.items() if key.startswith(prefix)]
    at = {n: sum(1 for r in ranks if isinstance(r, int) and r <= n) for n in (1, 3, 5)}
    return f"{prefix}: top-1 {at[1]}/{len(ranks)}, top-3 {at[3]}, top-5 {at[5]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", nargs="+", default=["."])
    parser.add_argument("--show", action="store_true", help="each case's rank per tree")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(Path(args.child))
        return
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, tree in enumerate(args.trees):
            results[tree] = _run(Path(tree).resolve(), Path(tmp) / f"ws{i}")
    for tree, result in results.items():
        found = result["found"]
        print(f"{tree:40} {_summary(found, 'c')}; {_summary(found, 'r')}")
    if len(args.trees) > 1:
        a, b = (results[t] for t in args.trees[:2])
        changed = [q for q in a["firsts"] if a["firsts"][q] != b["firsts"].get(q)]
        print(f"first hits of {len(a['firsts'])} handbook questions: {len(changed)} changed")
        if args.show:
            for q in changed:
                print(f"  {q}: {a['firsts'][q]} -> {b['firsts'].get(q)}")
    if args.show:
        for key in results[args.trees[0]]["found"]:
            print(key, *(results[t]["found"].get(key) for t in args.trees))


if __name__ == "__main__":
    main()
