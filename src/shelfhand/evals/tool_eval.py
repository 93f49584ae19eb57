"""The tool-call regression suite (docs/design.md P6): does the configured model call the right tool?

Each case is one request with the tool the model should call first and a subset of the
arguments it should pass (or ``"tool": null``: answer without tools). The cases run through a
real :class:`~shelfhand.agent.agent.Agent` over the reference scenario's tools
(:mod:`shelfhand.tools.demo` plus ``retrieve`` over the bundled samples), so what is measured is what
a user gets: routing, arguments, and whether the final answer is usable.

Case file (JSONL, one object a line)::

    {"id": "stock-zh", "request": "SKU2024-012 还有货吗？", "tool": "query_stock",
     "arguments": {"sku": "SKU2024-012"}}
    {"id": "chat-en", "request": "Hello!", "tool": null}

An expected string argument matches when it occurs in the model's value (case-insensitive),
so ``{"query": "E-203"}`` accepts any retrieve query mentioning E-203; other values must be
equal. Routing and arguments judge the first call; the whole run is judged too:

- every call of the run must be the expected tool (none for ``"tool": null``); a call of
  another tool is an extra call;
- a write (a tool needing confirmation) that the case did not ask for is never run: the
  eval's approvals approve the expected tool only and deny everything else, and each such
  call is counted as an unasked write;
- with ``"facts": [...]`` the final answer must state each fact (alternatives joined by
  ``|``, case-insensitive, thousands separators ignored).

A case is right **as a whole run** when its calls are right, it made no unasked write and
its answer states its facts.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from shelfhand.core.context import UserContext
from shelfhand.core.errors import ConfigurationError, ModelError, ModelProviderError
from shelfhand.core.messages import ToolCallBlock
from shelfhand.models.base import ChatModel
from shelfhand.tools.approvals import ApprovalRequest

from .case_files import case_objects, states

__all__ = [
    "CaseResult",
    "ToolCase",
    "load_tool_cases",
    "run_tool_eval",
    "sample_tool_cases",
    "summarise",
]

_RAW_JSON = re.compile(r"^\s*(?:[{\[]|```\s*json|<tool_call>|\[TOOL_CALLS\])", re.IGNORECASE)
_OVERFLOW = re.compile(
    r"context (?:size|length|window)|too (?:long|many tokens)|exceeds? the", re.IGNORECASE
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCase:
    id: str
    request: str
    tool: str | None
    """The tool the model should call first; ``None``: it should call none."""
    arguments: Mapping[str, Any] = field(default_factory=dict)
    facts: tuple[str, ...] = ()
    """What the final answer must state (alternatives joined by ``|``)."""


@dataclass(slots=True, kw_only=True)
class CaseResult:
    id: str
    request: str
    expected_tool: str | None
    calls: list[dict[str, Any]] = field(default_factory=list)
    routed: bool = False
    arguments_ok: bool = False
    answer: str = ""
    raw_json: bool = False
    empty: bool = False
    overflow: bool = False
    error: str | None = None
    steps: int = 0
    latency_ms: float = 0.0
    stop_reason: str = ""
    """The run's stop reason; anything but ``final`` means the answer is an honest fallback
    (blank or echoed reply, a repeated failing call, ``max_iters``), not the model's."""
    extra_calls: list[str] = field(default_factory=list)
    """Calls of tools the case did not expect, in order."""
    unasked_writes: list[str] = field(default_factory=list)
    """Writes the case did not ask for (denied, never run)."""
    facts_ok: bool | None = None
    """The answer states every fact of the case (``None``: the case names none)."""
    run_ok: bool = False
    """Right as a whole run: right calls, no unasked write, the facts stated."""


def sample_tool_cases() -> Path:
    """The bundled 20 cases (English and Chinese) of the reference scenario."""
    from importlib.resources import files

    return Path(str(files("shelfhand") / "samples" / "tool-cases.jsonl"))


def load_tool_cases(path: Path) -> list[ToolCase]:
    """Read a case file; a bad line is a :class:`ConfigurationError` naming file and line."""
    cases: list[ToolCase] = []
    for where, data in case_objects(path):
        request, tool, arguments = data.get("request"), data.get("tool"), data.get("arguments")
        facts = data.get("facts") or []
        if not isinstance(facts, list) or not all(isinstance(f, str) and f for f in facts):
            raise ConfigurationError(f'{where}: "facts" must be a list of non-empty strings')
        if not isinstance(request, str) or not request.strip():
            raise ConfigurationError(f'{where}: "request" must be a non-empty string')
        if tool is not None and (not isinstance(tool, str) or not tool):
            raise ConfigurationError(f'{where}: "tool" must be a tool name or null')
        if arguments is not None and not isinstance(arguments, dict):
            raise ConfigurationError(f'{where}: "arguments" must be an object')
        if arguments and tool is None:
            raise ConfigurationError(f'{where}: "arguments" given but "tool" is null')
        cases.append(
            ToolCase(
                id=str(data.get("id") or f"case-{len(cases) + 1}"),
                request=request,
                tool=tool,
                arguments=arguments or {},
                facts=tuple(facts),
            )
        )
    if not cases:
        raise ConfigurationError(f"{path} holds no cases")
    return cases


def _matches(expected: Any, actual: Any) -> bool:
    if isinstance(expected, str):
        return isinstance(actual, str) and expected.strip().lower() in actual.lower()
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    if isinstance(expected, int | float):
        if isinstance(actual, str):  # "3" for 3: the toolkit coerces it
            try:
                actual = float(actual.strip())
            except ValueError:
                return False
        return isinstance(actual, int | float) and float(expected) == float(actual)
    return bool(expected == actual)


def _arguments(call: ToolCallBlock) -> Any:
    try:
        return call.parsed_arguments()
    except json.JSONDecodeError:
        return call.arguments  # kept as text: it cannot match an expected object


def _judge(case: ToolCase, result: CaseResult) -> None:
    first = result.calls[0] if result.calls else None
    if case.tool is None:
        result.routed = first is None
        result.arguments_ok = result.routed
        return
    result.routed = first is not None and first["name"] == case.tool
    args = first["arguments"] if first is not None else None
    result.arguments_ok = (
        result.routed
        and isinstance(args, dict)
        and all(k in args and _matches(v, args[k]) for k, v in case.arguments.items())
    )


def _only(tool: str | None) -> Callable[[ApprovalRequest], bool]:
    """An approval handler approving calls of ``tool`` only."""

    def decide(request: ApprovalRequest) -> bool:
        return request.tool == tool

    return decide


def _judge_run(case: ToolCase, result: CaseResult, writes: set[str]) -> None:
    """The whole run: every call expected, no unasked write, the facts stated."""
    for call in result.calls:
        if call["name"] != case.tool:
            result.extra_calls.append(call["name"])
            if call["name"] in writes:
                result.unasked_writes.append(call["name"])
    if case.facts:
        result.facts_ok = all(states(result.answer, fact) for fact in case.facts)
    calls_ok = not result.extra_calls and (result.arguments_ok or case.tool is None)
    result.run_ok = calls_ok and result.facts_ok is not False and result.error is None


def summarise(results: Sequence[CaseResult]) -> dict[str, Any]:
    """The suite's numbers: accuracies, answer problems, steps and latency."""
    n = len(results)
    lat = sorted(r.latency_ms for r in results)

    def pct(q: float) -> float:
        if not lat:
            return 0.0
        pos = (len(lat) - 1) * q
        low, high = int(pos), min(int(pos) + 1, len(lat) - 1)
        return lat[low] + (lat[high] - lat[low]) * (pos - low)

    return {
        "cases": n,
        "routing_accuracy": sum(r.routed for r in results) / n if n else 0.0,
        "argument_accuracy": sum(r.arguments_ok for r in results) / n if n else 0.0,
        "right_calls": sum(r.arguments_ok for r in results),
        "raw_json_answers": sum(r.raw_json for r in results),
        "empty_answers": sum(r.empty for r in results),
        "context_overflows": sum(r.overflow for r in results),
        "errors": sum(r.error is not None for r in results),
        "fallback_answers": sum(r.stop_reason not in ("", "final") for r in results),
        "whole_run_accuracy": sum(r.run_ok for r in results) / n if n else 0.0,
        "right_runs": sum(r.run_ok for r in results),
        "extra_calls": sum(len(r.extra_calls) for r in results),
        "unasked_writes": sum(len(r.unasked_writes) for r in results),
        "facts_stated": sum(bool(r.facts_ok) for r in results),
        "cases_with_facts": sum(r.facts_ok is not None for r in results),
        "mean_steps": sum(r.steps for r in results) / n if n else 0.0,
        "mean_latency_ms": sum(lat) / n if n else 0.0,
        "p50_latency_ms": pct(0.5),
        "p95_latency_ms": pct(0.95),
    }


async def run_tool_eval(
    model: ChatModel,
    cases: Sequence[ToolCase],
    *,
    workspace: Path,
    knowledge: Any = None,
    max_iters: int = 4,
    on_case: Callable[[CaseResult], Any] | None = None,
    examples: bool = True,
) -> dict[str, Any]:
    """Run every case against ``model`` and return :func:`summarise` plus ``results``.

    Args:
        model: The chat model under test.
        cases: From :func:`load_tool_cases`.
        workspace: A folder for the demo shop database (created; a fresh copy per run).
        knowledge: The knowledge base behind ``retrieve`` (``None``: it answers "not
            configured", which is enough to judge routing).
        max_iters: The most model calls per case.
        on_case: Called with each result as it completes (progress output).
        examples: Give the tools the deployer's routing examples of the reference scenario
            (:data:`~shelfhand.tools.demo.TOOL_EXAMPLES`, and
            :data:`~shelfhand.tools.demo.RETRIEVE_EXAMPLES` for ``retrieve`` over the samples);
            ``False`` measures the tools without them.
    """
    from shelfhand.agent.agent import DEFAULT_SYSTEM_PROMPT, Agent
    from shelfhand.agent.retrieve import make_retrieve_tool
    from shelfhand.tools.approvals import Approvals
    from shelfhand.tools.demo import DEMO_USER, RETRIEVE_EXAMPLES, demo_database, make_tools
    from shelfhand.tools.toolkit import Toolkit

    workspace.mkdir(parents=True, exist_ok=True)
    shop = workspace / "tool-eval-shop.db"
    shop.unlink(missing_ok=True)  # every run starts from the same demo data
    db: sqlite3.Connection = demo_database(shop)
    retrieve = make_retrieve_tool(knowledge, examples=RETRIEVE_EXAMPLES if examples else ())
    toolkit = Toolkit([retrieve, *make_tools(db, examples=examples)])
    agent = Agent(
        name="tool-eval",
        model=model,
        toolkit=toolkit,
        system_prompt=DEFAULT_SYSTEM_PROMPT,
        max_iters=max_iters,
    )
    customer = UserContext(tenant_id="default", user_id=DEMO_USER, roles=["user"])
    writes = {t.name for t in toolkit.tools if t.confirm}
    results: list[CaseResult] = []
    try:
        for case in cases:
            # only the write the case asks for is approved (in a throw-away database): any
            # other is denied, never run, and counted
            approvals = Approvals(handler=_only(case.tool))
            result = CaseResult(id=case.id, request=case.request, expected_tool=case.tool)
            started = time.perf_counter()
            try:
                run = await agent.run(case.request, context=customer, approvals=approvals)
            except ModelError as exc:
                result.error = f"{type(exc).__name__}: {exc}"
                status = exc.status_code if isinstance(exc, ModelProviderError) else None
                result.overflow = status in (400, 413, None) and bool(_OVERFLOW.search(str(exc)))
            else:
                result.answer = run.output
                result.steps = run.iterations
                result.stop_reason = run.stop_reason
                result.calls = [
                    {"name": c.name, "arguments": _arguments(c)}
                    for m in run.messages
                    for c in m.tool_calls
                ]
                result.empty = not run.output.strip()
                result.raw_json = bool(_RAW_JSON.match(run.output))
            result.latency_ms = (time.perf_counter() - started) * 1000.0
            _judge(case, result)
            _judge_run(case, result, writes)
            results.append(result)
            if on_case is not None:
                on_case(result)
    finally:
        db.close()
    return {**summarise(results), "results": [asdict(r) for r in results]}
