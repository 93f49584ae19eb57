"""The cost of one delegation (issue 12, acceptance 2), in one process, scripted models.

Four ways of answering the same question, each ``--runs`` times per repeat, interleaved over
``--repeats`` repeats; per run: CPU microseconds of this process (minimum over the repeats)
and wall microseconds (median), with the ratios to the single-agent run:

- ``single``: one agent, one tool call (``add``), then the answer (2 model calls, 1 tool call);
- ``as_tool``: a plain agent calls a subagent made a tool with ``as_tool`` (the subagent makes
  the tool call): 4 model calls, 2 tool calls;
- ``supervisor``: the same delegation through a :class:`Supervisor` (events of the subagent
  interleaved into the main stream, per-turn budget, loop guard);
- ``supervisor_stream``: the same, consumed as a stream (what the service does); compare it
  with ``single_stream``, the single agent consumed as a stream.

The tool is ``inline=True`` and the toolkits are not audited, so the figures are the
framework's own cost. Every case gives the same answer, ``result 5`` (the subagent hands back
the bare sum, which the main agent words as the single agent does), and the same transcript
shape; both are checked before timing. Goal: a delegation at most 2x a single-agent run with
one tool call.

The scripted models keep only their latest request, like the peers' scripted models in
``delegation_langgraph.py`` and ``delegation_agentscope.py`` (which keep none) and like a real
model client. ``--keep-every-request`` makes them keep every request they are sent (the
``requests`` list tests read), as this bench did before: the heap then grows over a run of
the command with each model call, the garbage collector's passes cost more as it does, and a
delegation, which makes twice the model calls, pays that test double's cost twice.

    python bench/delegation.py [--runs 300] [--repeats 15] [--only CASE] [--keep-every-request]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from interleaved import interleaved

from shelfhand import Agent, Toolkit, UserContext, tool
from shelfhand.agent.subagents import Subagent
from shelfhand.agent.supervisor import Supervisor, as_tool
from shelfhand.core.events import Final
from shelfhand.core.messages import Message
from shelfhand.testing import FunctionModel, text, tool_call

USER = UserContext(tenant_id="bench", user_id="u1")


@tool(read_only=True, inline=True)
def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: The first.
        b: The second.
    """
    return a + b


class _LatestOnly(FunctionModel):
    """A :class:`FunctionModel` that keeps only the latest request (the default)."""

    def _record(self, messages: Sequence[Message], tools: Sequence[Any]) -> None:
        self.requests[:] = [list(messages)]


KEEP_EVERY_REQUEST = False  # True: --keep-every-request


def calls(name: str, arguments: dict[str, Any], answer: str = "result {}") -> FunctionModel:
    """A model that calls ``name`` once, then answers ``answer`` with the tool's result in it."""

    def turn(messages: Sequence[Message], tools: list[dict[str, Any]]) -> Any:
        last = messages[-1]
        if last.role == "tool":
            return text(answer.format(last.tool_results[0].content))
        return tool_call(name, arguments)

    return FunctionModel(turn) if KEEP_EVERY_REQUEST else _LatestOnly(turn)


ANSWER = "result 5"  # what every case answers: the subagent hands back the bare sum
CASES = ("single", "single_stream", "as_tool", "supervisor", "supervisor_stream")


def build() -> dict[str, Callable[[], Awaitable[Any]]]:
    single = Agent(name="single", model=calls("add", {"a": 2, "b": 3}), toolkit=Toolkit([add]))
    worker = Agent(
        name="worker", model=calls("add", {"a": 2, "b": 3}, answer="{}"), toolkit=Toolkit([add])
    )
    plain = Agent(
        name="main",
        model=calls("worker", {"task": "add 2 and 3"}),
        toolkit=Toolkit([as_tool(worker, description="Adds numbers.")]),
    )
    sup = Supervisor(
        model=calls("worker", {"task": "add 2 and 3"}),
        toolkit=Toolkit([add]),
        tools=[],
        subagents=[
            Subagent(
                "worker",
                "Adds numbers.",
                model=calls("add", {"a": 2, "b": 3}, answer="{}"),
                tools=["add"],
                max_iters=4,
            )
        ],
    )

    async def stream() -> Any:
        async for event in sup.stream("what is 2 + 3?", context=USER):
            last = event
        return last

    async def single_stream() -> Any:
        async for event in single.stream("what is 2 + 3?", context=USER):
            last = event
        return last

    return {
        "single": lambda: single.run("what is 2 + 3?", context=USER),
        "single_stream": single_stream,
        "as_tool": lambda: plain.run("what is 2 + 3?", context=USER),
        "supervisor": lambda: sup.run("what is 2 + 3?", context=USER),
        "supervisor_stream": stream,
    }


async def measure(
    runs: int, repeats: int, only: Sequence[str] = ()
) -> dict[str, tuple[float, float]]:
    """Per case: (CPU microseconds per run, minimum over repeats; wall microseconds per run,
    median over repeats). CPU time of this process is what the framework costs; wall time on
    a loaded machine also counts other processes. ``only``: measure just these cases."""
    cases = build()
    for name, make in cases.items():  # every case gives the same answer, the same way
        out = await make()
        result = out.result if isinstance(out, Final) else out
        assert result.output == ANSWER and result.stop_reason == "final", (name, result)
        assert len(result.messages) == 4, (name, result.messages)  # prompt, call, result, answer
    if only:
        cases = {name: cases[name] for name in only}
    return await interleaved(cases, runs, repeats, warmup=50)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument(
        "--only",
        choices=CASES,
        action="append",
        default=[],
        help="measure only this case (repeatable); for an outside profiler, e.g. "
        "bench/delegation_instructions.sh",
    )
    ap.add_argument(
        "--keep-every-request",
        action="store_true",
        help="scripted models keep every request, as before (see the module doc)",
    )
    ap.add_argument("--last-request-only", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    global KEEP_EVERY_REQUEST
    KEEP_EVERY_REQUEST = a.keep_every_request
    figures = asyncio.run(measure(a.runs, a.repeats, a.only))
    if a.only:
        for name, (c, w) in figures.items():
            print(f"{name:<20} {c:>10.1f} {w:>12.1f}")
        return
    base_cpu, base_wall = figures["single"]
    base_cpu_stream, base_wall_stream = figures["single_stream"]
    if a.json:
        print(
            json.dumps(
                {
                    k: {"cpu_us": round(c, 1), "wall_us": round(w, 1)}
                    for k, (c, w) in figures.items()
                }
            )
        )
        return
    print(f"{'case':<20} {'cpu us/run':>10} {'ratio':>10} {'wall us/run':>12} {'ratio':>10}")
    # ratios: to ``single``, and for the streamed cases to ``single_stream``
    for name, (c, w) in figures.items():
        bc, bw = (base_cpu_stream, base_wall_stream) if "stream" in name else (base_cpu, base_wall)
        print(f"{name:<20} {c:>10.1f} {c / bc:>9.2f}x {w:>12.1f} {w / bw:>9.2f}x")


if __name__ == "__main__":
    main()
