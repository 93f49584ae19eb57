"""What the loop guard (``shelfhand.providers.repetition``) costs a streamed reply with no
loop in it: the event loop's time to watch the reply's pieces (4 characters each, about a
token), for replies of 4,000 to 256,000 characters written as list items (one per line) and
as one paragraph (no line end). With ``--other TREE`` the same replies are also watched by
that tree's guard, interleaved, and the ratio is printed.

    python bench/repetition.py                          # ~10 s
    python bench/repetition.py --other /tmp/before      # a worktree of an older commit
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import time
from pathlib import Path
from types import ModuleType

from shelfhand.providers import repetition

WORDS = [
    "lens",
    "cleaning",
    "cloth",
    "alcohol",
    "dust",
    "brush",
    "projector",
    "screen",
    "filter",
    "fan",
    "light",
    "bulb",
    "gently",
    "wipe",
    "soft",
    "check",
    "power",
    "cable",
    "镜头",
    "风扇",
    "滤网",
    "电源",
]


def reply(chars: int, line_end: str) -> str:
    """Numbered items of 6–14 random words each, none repeated: no loop to find."""
    rng = random.Random(chars)
    out: list[str] = []
    n = size = 0
    while size < chars:
        n += 1
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14)))
        item = f"{n}. {words.capitalize()}.{line_end}"
        out.append(item)
        size += len(item)
    return "".join(out)


def watch(module: ModuleType, pieces: list[str]) -> float:
    """Seconds to watch ``pieces`` as the adapter does (a check at each unit's end)."""
    guard = module.Repetition()
    parts: list[str] = []
    started = time.perf_counter()
    for piece in pieces:
        parts.append(piece)
        if guard.looping(piece, parts):
            raise AssertionError("a loop found in a reply with none")
    return time.perf_counter() - started


def load(tree: Path) -> ModuleType:
    path = tree / "src/shelfhand/providers/repetition.py"
    spec = importlib.util.spec_from_file_location("other_repetition", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--other", type=Path, help="another tree (a worktree) to compare with")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="4000,16000,64000,256000")
    a = ap.parse_args()
    guards = {"this tree": repetition}
    if a.other is not None:
        guards["other"] = load(a.other)
    print("| reply | characters | pieces | " + " | ".join(f"{g} (ms)" for g in guards), end="")
    print(" | other / this |" if a.other else " | µs per piece |")
    print("|---" * (4 + len(guards)) + "|")
    for kind, line_end in (("lines", "\n"), ("one paragraph", " ")):
        for chars in (int(s) for s in a.sizes.split(",")):
            text = reply(chars, line_end)
            pieces = [text[i : i + 4] for i in range(0, len(text), 4)]
            times: dict[str, list[float]] = {g: [] for g in guards}
            for r in range(a.rounds):
                order = list(guards) if r % 2 == 0 else list(reversed(guards))
                for g in order:
                    times[g].append(watch(guards[g], pieces))
            best = {g: min(t) for g, t in times.items()}
            cells = " | ".join(f"{best[g] * 1e3:.1f}" for g in guards)
            last = (
                f"{best['other'] / best['this tree']:.1f} ×"
                if a.other
                else f"{statistics.median(times['this tree']) / len(pieces) * 1e6:.2f}"
            )
            print(f"| {kind} | {len(text):,} | {len(pieces):,} | {cells} | {last} |")


if __name__ == "__main__":
    main()
