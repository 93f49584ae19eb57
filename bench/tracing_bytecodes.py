"""Python bytecodes per turn with tracing off, spans only and stored, counted exactly (every
thread's, by ``sys.settrace`` opcode events), by function: a deterministic instrument that
runs in seconds where ``bench/tracing_instructions.py`` (callgrind) takes minutes. It counts
what the Python code does, not what it costs in C (SQLite, orjson, jieba, the allocator):
two trees whose counts agree run the same Python per turn, and a difference in callgrind's
count between them is then C-level (memory layout) noise or a C call's cost.

The turn is ``bench/tracing_cost.py``'s (a scripted model, one tool call, one retrieval).

    python bench/tracing_bytecodes.py                                  # this tree
    python bench/tracing_bytecodes.py --trees /tmp/before . --top 15   # what changed, by function
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
_STDLIB = re.compile(r".*/lib/python3\.\d+/")
CASES = ("off", "spans", "stored")


def cell(case: str, turns: int) -> dict[str, float]:
    """Bytecodes per turn of ``case`` in this process, by ``file:function``."""
    sys.path.insert(0, str(HERE))
    from tracing_cost import case_turn, run_turns

    with tempfile.TemporaryDirectory() as tmp:
        kb, tracer, turn = case_turn(case, Path(tmp))

        asyncio.run(run_turns(turn, tracer, 20))  # warm-up: the segmenter, the indexes, caches
        counts: collections.Counter[str] = collections.Counter()

        def trace(frame: Any, event: str, arg: Any) -> Any:
            frame.f_trace_opcodes = True
            code = frame.f_code
            where = _STDLIB.sub("", code.co_filename.split("/src/")[-1])
            key = f"{where}:{code.co_name}"

            def local(frame: Any, event: str, arg: Any) -> Any:
                if event == "opcode":
                    counts[key] += 1
                return local

            return local

        sys.settrace(trace)
        threading.settrace(trace)
        try:
            asyncio.run(run_turns(turn, tracer, turns))
        finally:
            sys.settrace(None)
            threading.settrace(None)  # type: ignore[arg-type]
        if tracer is not None:
            tracer.close()
        kb.close()
    return {k: v / turns for k, v in counts.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trees", nargs="+", default=["."])
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--top", type=int, default=10, help="functions shown per difference")
    ap.add_argument("--cell", nargs=2, metavar=("CASE", "TURNS"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.cell:
        print(json.dumps(cell(a.cell[0], int(a.cell[1]))))
        return
    found: dict[tuple[str, str], dict[str, float]] = {}
    for tree in a.trees:
        env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve() / "src")}
        for case in a.cases:
            out = subprocess.run(
                [sys.executable, __file__, "--cell", case, str(a.turns)],
                env=env, capture_output=True, text=True, check=True,
            )  # fmt: skip
            found[tree, case] = json.loads(out.stdout.strip().splitlines()[-1])
    print("| tree | tracing | bytecodes/turn | × off |")
    print("|---|---|---:|---:|")
    for tree in a.trees:
        off = sum(found[tree, "off"].values()) if "off" in a.cases else None
        for case in a.cases:
            total = sum(found[tree, case].values())
            ratio = f"{total / off:.3f}" if off else ""
            print(f"| {tree} | {case} | {total:,.0f} | {ratio} |")
    first, *others = a.trees
    for other in others:
        for case in a.cases:
            before, after = found[first, case], found[other, case]
            diff = {k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after)}
            print(f"\n{case}, {other} - {first}: {sum(diff.values()):+,.1f} a turn")
            for key, n in sorted(diff.items(), key=lambda kv: -abs(kv[1]))[: a.top]:
                if abs(n) >= 0.5:
                    print(f"  {n:+9.1f}  {key}")


if __name__ == "__main__":
    main()
