"""Instructions per turn with tracing off, spans only and stored, counted by valgrind's
callgrind (load-independent, unlike CPU time on a shared machine).

Each case runs in its own process twice, with ``--low`` and ``--high`` turns after the same
warm-up (the turn of ``bench/tracing_cost.py``: a scripted model, one tool call, one
retrieval); the difference over ``high - low`` turns is what one turn executes, the
recorder's writer thread included (each process ends by writing what it queued).
``PYTHONHASHSEED`` is fixed because the count depends on the string-hash seed.

    python bench/tracing_instructions.py                      # ~3 min per case
    python bench/tracing_instructions.py --cases off stored --trees . /tmp/wt-before

With ``--no-gc`` the automatic garbage collector is off in each process: over few turns a
collection of the older generations landing in one count and not the other moves a cell by
a lot; without it the counts hold only the work itself (and fresh memory for every turn).
With ``--young-gc`` only the full collections are off: the young ones, which follow what a
turn allocates, are counted; a full collection walks the whole heap, so one more or less in
a count moves a cell by a few percent, either way (seen: stored 1.126 x to 1.187 x off for
the same code on two machines; spans only 1.041 x to 1.089 x in one afternoon).

Needs valgrind (``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASES = ("off", "spans", "stored")


def cell(case: str, turns: int, *, collect: bool = True, full: bool = True) -> None:
    """Run ``turns`` turns of ``case`` in this process (the part callgrind counts)."""
    if not collect:
        gc.disable()
    elif not full:  # young collections only (see the module docstring)
        gc.set_threshold(700, 10, 2**30)
    sys.path.insert(0, str(HERE))
    from tracing_cost import case_turn, run_turns

    with tempfile.TemporaryDirectory() as tmp:
        # (stored: no timed writes; under valgrind a turn takes 50 times as long, so a writer
        # waking every 0.5 s would write a few turns at a time, and the count would follow
        # the machine's speed; a write per 512 spans, the batch, is the same every run)
        kb, tracer, turn = case_turn(case, Path(tmp))

        asyncio.run(run_turns(turn, tracer, 20))
        gc.collect()
        gc.freeze()
        asyncio.run(run_turns(turn, tracer, turns))
        if tracer is not None:
            tracer.close()
        kb.close()


def count(tree: str, case: str, turns: int, *, collect: bool = True, full: bool = True) -> int:
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(Path(tree).resolve() / "src")}
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            __file__,
            "--cell",
            case,
            str(turns),
            *([] if collect else ["--no-gc"]),
            *([] if full else ["--young-gc"]),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(done.stderr[-2000:])
    return int(found.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cases", nargs="*", default=list(CASES), choices=CASES)
    ap.add_argument("--trees", nargs="*", default=["."], help="checkouts to compare")
    ap.add_argument("--low", type=int, default=50)
    ap.add_argument("--high", type=int, default=250)
    ap.add_argument("--no-gc", action="store_true", help="the garbage collector off")
    ap.add_argument("--young-gc", action="store_true", help="full collections off")
    ap.add_argument("--cell", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.cell:
        cell(a.cell[0], int(a.cell[1]), collect=not a.no_gc, full=not a.young_gc)
        return
    print("| tree | tracing | instructions/turn | × off |")
    print("|---|---|---:|---:|")
    for tree in a.trees:
        off = 0
        for case in a.cases:
            gc_kind = {"collect": not a.no_gc, "full": not a.young_gc}
            high = count(tree, case, a.high, **gc_kind)
            per_turn = (high - count(tree, case, a.low, **gc_kind)) // (a.high - a.low)
            off = per_turn if case == "off" else off
            ratio = f"{per_turn / off:.3f}" if off else ""
            print(f"| {tree} | {case} | {per_turn} | {ratio} |", flush=True)


if __name__ == "__main__":
    main()
