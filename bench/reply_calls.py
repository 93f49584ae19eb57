"""One agent run whose model asks for ten calls in one reply: ten identical ``add(2, 3)``
(``same``) or ten with different arguments (``distinct``), the tool inline, then answers.
What a round of several calls costs the loop (the harness's ten-call run makes ten steps
of one call each, which never reach a round).

Prints the minimum CPU µs per run of five blocks; ``--bytecodes`` the Python bytecodes one run
executes (counted with ``sys.settrace`` over 20 runs: the same count on every machine, the
measure for a change of a few hundred bytecodes); ``--runs N --once`` runs N runs after the
warm-up and prints nothing, for valgrind's callgrind. Compare two trees with ``PYTHONPATH``:

    python bench/reply_calls.py same
    PYTHONPATH=/tmp/before/src python bench/reply_calls.py same --bytecodes
    PYTHONHASHSEED=0 PYTHONPATH=/tmp/before/src valgrind --tool=callgrind \\
        python bench/reply_calls.py distinct --runs 300 --once
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from types import FrameType
from typing import Any

from shelfhand import Agent, Toolkit, UserContext, tool
from shelfhand.testing import CyclingScriptModel, text, tool_call


@tool(read_only=True, cache_ttl=0, inline=True)
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("calls", choices=["same", "distinct"])
    ap.add_argument("--runs", type=int, default=500, help="runs per block")
    ap.add_argument("--once", action="store_true", help="one block, nothing printed")
    ap.add_argument("--bytecodes", action="store_true", help="count bytecodes per run")
    a = ap.parse_args()
    same = a.calls == "same"
    calls = [tool_call("add", {"a": 2, "b": 3 if same else i}, id=f"c{i}") for i in range(10)]
    model = CyclingScriptModel([calls, text("5")])
    agent = Agent(name="a", model=model, toolkit=Toolkit([add]))
    ctx = UserContext(tenant_id="t", user_id="u")

    async def many(n: int) -> None:
        for _ in range(n):
            await agent.run("2+3?", context=ctx)

    asyncio.run(many(50))
    if a.bytecodes:
        executed = [0]

        def counted(frame: FrameType, event: str, arg: Any) -> Any:
            frame.f_trace_opcodes = True
            if event == "opcode":
                executed[0] += 1
            return counted

        async def traced(n: int) -> None:
            sys.settrace(counted)
            try:
                await many(n)
            finally:
                sys.settrace(None)

        asyncio.run(traced(20))
        print(f"{a.calls}: {executed[0] / 20:.0f} bytecodes per run")
        return
    if a.once:
        asyncio.run(many(a.runs))
        return
    best = float("inf")
    for _ in range(5):
        t = time.process_time()
        asyncio.run(many(a.runs))
        best = min(best, (time.process_time() - t) / a.runs * 1e6)
    print(f"{a.calls}: {best:.1f} µs CPU per run (min of 5 blocks of {a.runs})")


if __name__ == "__main__":
    main()
