"""What watching a long streamed reply costs the event loop, per tree: the loop guard
(``shelfhand.providers.repetition``, every reply of the OpenAI-compatible adapter), the
call-text gate holding a reply that may be a tool call (``agent.streaming.CallTextGate``,
a reply with a brace when tools are offered) and the append-only answer of the
OpenAI-compatible, Responses and A2A streams (``service.completions.AppendedAnswer``).

Replies of 4,000 to 256,000 characters with no loop, in pieces of 4 characters (about a
token); each tree runs in its own process (``PYTHONPATH`` at its ``src``), trees interleaved
round by round, best of the rounds kept.

    python bench/long_replies.py                                  # this tree, ~20 s
    python bench/long_replies.py --trees /tmp/before .            # a worktree beside it
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

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
SIZES = (4000, 16000, 64000, 256000)


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


def pieces_of(text: str) -> list[str]:
    return [text[i : i + 4] for i in range(0, len(text), 4)]


def child() -> None:
    """One round in this process's tree: seconds per case and size, as JSON."""
    from shelfhand.agent.streaming import CallTextGate
    from shelfhand.providers.repetition import Repetition
    from shelfhand.service.completions import AppendedAnswer

    def guard(pieces: list[str]) -> None:
        watch, parts = Repetition(), []
        for piece in pieces:
            parts.append(piece)
            if watch.looping(piece, parts):
                raise AssertionError("a loop found in a reply with none")

    def gate(pieces: list[str]) -> None:
        held = CallTextGate(active=True)
        for piece in pieces:
            held.feed(piece)

    def appended(pieces: list[str]) -> None:
        answer = AppendedAnswer()
        for piece in pieces:
            answer.add({"type": "text_delta", "text": piece})
        answer.add({"type": "final", "output": "", "citations": []})
        assert len(answer.sent) == sum(map(len, pieces))

    cases = {
        "loop guard, lines": (guard, "\n", ""),
        "loop guard, one paragraph": (guard, " ", ""),
        "call gate, a held reply": (gate, "\n", 'Config: {"a": 1}\n'),
        "append-only answer": (appended, "\n", ""),
    }
    out: dict[str, dict[int, float]] = {}
    for name, (watch, line_end, head) in cases.items():
        out[name] = {}
        for chars in SIZES:
            pieces = pieces_of(head + reply(chars, line_end))
            started = time.perf_counter()
            watch(pieces)
            out[name][chars] = time.perf_counter() - started
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trees", nargs="+", type=Path, default=[Path(".")])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child()
        return
    best: dict[Path, dict[str, dict[str, float]]] = {}
    for r in range(a.rounds):
        for tree in a.trees if r % 2 == 0 else list(reversed(a.trees)):
            env = {**os.environ, "PYTHONPATH": str((tree / "src").resolve())}
            run = subprocess.run(
                [sys.executable, __file__, "--child"],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            )
            for case, times in json.loads(run.stdout).items():
                kept = best.setdefault(tree, {}).setdefault(case, {})
                for size, seconds in times.items():
                    kept[size] = min(kept.get(size, seconds), seconds)
    names = [str(t) for t in a.trees]
    print("| case | characters | " + " | ".join(f"{n} (ms)" for n in names) + " |")
    print("|---" * (2 + len(names)) + "|")
    for case in best[a.trees[0]]:
        for size in best[a.trees[0]][case]:
            cells = " | ".join(f"{best[t][case][size] * 1e3:,.1f}" for t in a.trees)
            print(f"| {case} | {int(size):,} | {cells} |")


if __name__ == "__main__":
    main()
