"""Cost of the governance pipeline per tool call, beside calling the tool directly, in one run.

Rows (async tools, so no worker-thread hop blurs the numbers; medians of ``--repeats`` blocks
of ``--calls`` calls each, interleaved):

- ``function``: ``await fn(**kwargs)``, the bare function.
- ``invoke``: ``await tool.invoke(args, run=run)`` — validation, context injection, result
  serialisation (what every toolkit did before governance).
- ``toolkit (pre-governance path)``: the old ``Toolkit.call`` steps — permission view, JSON
  parse, ``invoke``, result block — rebuilt here without the pipeline.
- ``governed ...``: ``Toolkit.call`` with the full pipeline: request id, decision, rate
  limit, single-flight, cache, timeout, retry loop, breaker, audit record. The audit log is
  a real SQLite file; each timed block ends with ``flush()`` so write cost is included.
  "breaker per target" derives its breaker from the arguments (64 targets, as ``http_get``
  does per host); "cache hit" declares ``cache_ttl`` (caching is opt-in).

"added" = governed − pre-governance path, for the median block and for the best block (the
best block is the least disturbed by other processes). Goal (issue): <= 30 us per call.

    python bench/governance_overhead.py [--calls 20000] [--repeats 7] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from shelfhand import Agent, AuditLog, Toolkit, UserContext, tool
from shelfhand.core.context import RunContext
from shelfhand.core.messages import ToolCallBlock, ToolResultBlock
from shelfhand.testing import FunctionModel, text, tool_call
from shelfhand.tools.governance import GovernancePolicy

BASE = "toolkit (pre-governance path)"
USER = UserContext(tenant_id="acme", user_id="alice")
RUN = RunContext(user=USER)


async def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first addend.
        b: The second addend.
    """
    return a + b


Step = Callable[[int], Awaitable[Any]]


async def timed(step: Step, calls: int) -> float:
    """Microseconds per call of ``step`` over ``calls`` calls."""
    start = time.perf_counter()
    for i in range(calls):
        await step(i)
    return (time.perf_counter() - start) / calls * 1e6


def build(tmp: Path) -> dict[str, tuple[Step, Callable[[], None]]]:
    ro = tool(name="add", read_only=True, cache_ttl=0)(add)
    ro_cached = tool(name="add", read_only=True, cache_ttl=300)(add)  # caching is opt-in
    keyed = tool(name="add", read_only=True, breaker_key=lambda args, user: str(args.get("a")))(add)
    write = tool(name="add", idempotent=False)(add)
    limited = tool(name="add", read_only=True, cache_ttl=0, rate_limit="100000000/second")(add)
    audit = AuditLog(tmp / "audit.db")
    kits = {
        "governed read-only, no audit": Toolkit([ro]),
        "governed read-only + audit": Toolkit([ro], audit=audit),
        "governed write + audit": Toolkit([write], audit=audit),
        "governed read-only + rate limit + audit": Toolkit([limited], audit=audit),
        "governed cache hit + audit": Toolkit([ro_cached], audit=audit),
        "governed read-only, breaker per target + audit": Toolkit([keyed], audit=audit),
        "governed, no timeout + audit": Toolkit(
            [ro], policy=GovernancePolicy(timeout=None), audit=audit
        ),
    }
    legacy_kit = Toolkit([ro])
    block = ToolCallBlock(id="c1", name="add", arguments='{"a": 2, "b": 3}')
    blocks = [
        ToolCallBlock(id=f"c{i}", name="add", arguments=f'{{"a": {i}, "b": 3}}') for i in range(64)
    ]

    def noop() -> None:
        return None

    async def direct(i: int) -> Any:
        return await add(a=2, b=3)

    async def invoke(i: int) -> Any:
        return await ro.invoke({"a": 2, "b": 3}, run=RUN)

    async def legacy(i: int) -> Any:
        # the pre-governance Toolkit.call path, step by step
        call = block
        found = legacy_kit._view(RUN.user)[1].get(call.name)
        assert found is not None
        arguments = call.parsed_arguments()
        output = await found.invoke(arguments, run=RUN)
        return ToolResultBlock(
            call_id=call.id,
            name=call.name,
            content=output.content,
            is_error=output.is_error,
            citations=output.citations,
        )

    rows: dict[str, tuple[Step, Callable[[], None]]] = {
        "function": (direct, noop),
        "invoke": (invoke, noop),
        "toolkit (pre-governance path)": (legacy, noop),
    }
    for label, kit in kits.items():
        # cache hits need identical arguments; the others vary them a little (no cache anyway)
        same = "cache hit" in label

        def make(kit: Toolkit = kit, same: bool = same) -> Step:
            async def governed(i: int) -> Any:
                return await kit.call(block if same else blocks[i & 63], RUN)

            return governed

        rows[label] = (make(), audit.flush)
    return rows


async def agent_run_us(runs: int) -> float:
    """One agent run with one governed tool call (scripted model), microseconds."""

    def decide(messages: list[Any], tools: list[dict[str, Any]]) -> Any:
        done = any(m.role == "tool" for m in messages)
        return text("5") if done else tool_call("add", {"a": 2, "b": 3})

    agent = Agent(
        model=FunctionModel(decide),
        toolkit=Toolkit([tool(name="add", read_only=True, cache_ttl=0)(add)]),
    )
    for _ in range(200):
        await agent.run("2+3?")
    start = time.perf_counter()
    for _ in range(runs):
        await agent.run("2+3?")
    return (time.perf_counter() - start) / runs * 1e6


async def main_async(calls: int, repeats: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        rows = build(Path(tmp))
        samples: dict[str, list[float]] = {k: [] for k in rows}
        for step, flush in rows.values():  # warm up
            await timed(step, 2000)
            flush()
        for _ in range(repeats):
            for label, (step, flush) in rows.items():  # interleaved: drift hits all rows
                start = time.perf_counter()
                await timed(step, calls)
                flush()
                samples[label].append((time.perf_counter() - start) / calls * 1e6)
        agent_us = statistics.median([await agent_run_us(2000) for _ in range(3)])
    medians = {k: statistics.median(v) for k, v in samples.items()}
    best = {k: min(v) for k, v in samples.items()}
    base, base_best = medians[BASE], best[BASE]
    return {
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load": os.getloadavg(),
        "calls": calls,
        "repeats": repeats,
        "us_per_call": medians,
        "us_per_call_best": best,
        "added_us_vs_pre_governance": {
            k: v - base for k, v in medians.items() if k.startswith("governed")
        },
        "added_us_vs_pre_governance_best": {
            k: v - base_best for k, v in best.items() if k.startswith("governed")
        },
        "agent_run_one_tool_call_us": agent_us,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", type=Path, help="also write the results here")
    a = ap.parse_args()
    result = asyncio.run(main_async(a.calls, a.repeats))
    width = max(len(k) for k in result["us_per_call"])
    out = [
        f"python {result['python']}, {result['cpus']} cpus, load {result['load']}, "
        f"{a.calls} calls x {a.repeats} blocks; us per call: median (best block)"
    ]
    for label, us in result["us_per_call"].items():
        fastest = result["us_per_call_best"][label]
        added = result["added_us_vs_pre_governance"].get(label)
        extra = ""
        if added is not None:
            added_best = result["added_us_vs_pre_governance_best"][label]
            extra = f"   added {added:+6.2f} ({added_best:+6.2f})"
        out.append(f"{label:<{width}}  {us:7.2f} ({fastest:6.2f}){extra}")
    out.append(f"agent run, one governed tool call: {result['agent_run_one_tool_call_us']:.1f} us")
    sys.stdout.write("\n".join(out) + "\n")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(result, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
