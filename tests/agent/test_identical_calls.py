"""Identical calls of one model reply: a read-only tool runs once and every call gets the
result (through governance's single-flight, or, for a tool whose results belong to one run
such as ``retrieve``, answered from the first call's result); a tool with effects runs once per
call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from shelfhand import Agent, Toolkit, UserContext, retrieve_tool, tool
from shelfhand.core.events import Final, ToolFinished
from shelfhand.core.messages import ToolResultBlock
from shelfhand.testing import ScriptedModel, text, tool_call
from support.knowledge import sample_kb

pytestmark = pytest.mark.anyio

ALICE = UserContext(tenant_id="t1", user_id="alice")


def lookup_kit(runs: list[str], *, read_only: bool) -> Toolkit:
    @tool(read_only=read_only, concurrency_safe=True)
    async def lookup(sku: str) -> str:
        """Find a product's warranty."""
        runs.append(sku)
        await anyio.sleep(0)  # let the other calls of the round start meanwhile
        return f"{sku} 保修两年。"

    return Toolkit([lookup])


def ten_identical_calls() -> ScriptedModel:
    return ScriptedModel(
        [[tool_call("lookup", {"sku": "E-203"}, id=f"c{i}") for i in range(10)], text("两年。")]
    )


async def streamed(agent: Agent) -> tuple[list[ToolFinished], tuple[ToolResultBlock, ...]]:
    """The ``ToolFinished`` events of a streamed run and the results of its one tool round."""
    finished: list[ToolFinished] = []
    final = None
    async for event in agent.stream("E-203 保修多久？", context=ALICE):
        if isinstance(event, ToolFinished):
            finished.append(event)
        elif isinstance(event, Final):
            final = event
    assert final is not None
    return finished, next(m for m in final.result.messages if m.role == "tool").tool_results


@pytest.mark.parametrize("width", [1, 3, 8, 16])
async def test_ten_identical_read_only_calls_in_one_reply_execute_once(width: int) -> None:
    runs: list[str] = []
    agent = Agent(
        name="a", model=ten_identical_calls(), toolkit=lookup_kit(runs, read_only=True),
        max_concurrency=width,
    )  # fmt: skip
    finished, results = await streamed(agent)
    assert runs == ["E-203"]
    assert [r.call_id for r in results] == [f"c{i}" for i in range(10)]
    assert all(r.content == "E-203 保修两年。" and not r.is_error for r in results)
    assert sorted(e.call_id for e in finished) == sorted(f"c{i}" for i in range(10))


async def test_identical_calls_of_a_tool_with_effects_each_execute() -> None:
    runs: list[str] = []
    agent = Agent(name="a", model=ten_identical_calls(), toolkit=lookup_kit(runs, read_only=False))
    result = await agent.run("E-203 保修多久？", context=ALICE)
    assert runs == ["E-203"] * 10
    assert result.output == "两年。"


def unshared_kit(runs: list[str], *, fail: bool = False) -> Toolkit:
    @tool(read_only=True, concurrency_safe=True, cache_ttl=0, retries=0)
    async def lookup(sku: str) -> str:
        """Find a product's warranty."""
        runs.append(sku)
        await anyio.sleep(0)
        if fail:
            raise ValueError(f"{sku}: no such product")
        return f"{sku} 保修两年。"

    lookup.dedup = False  # results that belong to one run, as retrieve's
    return Toolkit([lookup])


@pytest.mark.parametrize("width", [1, 8])
async def test_identical_calls_of_a_tool_governance_does_not_share_execute_once(width: int) -> None:
    runs: list[str] = []
    agent = Agent(
        name="a", model=ten_identical_calls(), toolkit=unshared_kit(runs), max_concurrency=width
    )
    finished, results = await streamed(agent)
    assert runs == ["E-203"]
    assert [r.call_id for r in results] == [f"c{i}" for i in range(10)]
    assert all(r.content.endswith("E-203 保修两年。") and not r.is_error for r in results)
    assert sorted(e.call_id for e in finished) == sorted(f"c{i}" for i in range(10))
    assert [e.call_id for e in finished if e.replayed] == [f"c{i}" for i in range(1, 10)]


async def test_identical_calls_run_each_when_the_run_does_not_replay_or_the_first_fails() -> None:
    runs: list[str] = []
    agent = Agent(
        name="a", model=ten_identical_calls(), toolkit=unshared_kit(runs),
        replay_repeated_calls=False,
    )  # fmt: skip
    await agent.run("E-203 保修多久？", context=ALICE)
    assert runs == ["E-203"] * 10

    failed: list[str] = []
    model = ScriptedModel(
        [[tool_call("lookup", {"sku": "X"}, id=f"c{i}") for i in range(2)], text("没有这个产品。")]
    )
    result = await Agent(name="a", model=model, toolkit=unshared_kit(failed, fail=True)).run(
        "X 保修多久？", context=ALICE
    )
    assert failed == ["X", "X"]  # nothing succeeded to answer the second from
    results = next(m for m in result.messages if m.role == "tool").tool_results
    assert [r.is_error for r in results] == [True, True]


async def test_identical_retrieve_calls_in_one_reply_search_once(tmp_path: Path) -> None:
    with sample_kb(tmp_path, vectors=False) as kb:
        searches: list[str] = []
        search = kb.search

        def counted(query: str, **options: Any) -> Any:
            searches.append(query)
            return search(query, **options)

        kb.search = counted  # type: ignore[method-assign]
        model = ScriptedModel(
            [
                [
                    tool_call("retrieve", {"query": "保修期", "top_k": 3}, id=f"r{i}")
                    for i in range(3)
                ],
                text("十二个月 [1]。"),
            ]
        )
        agent = Agent(name="a", model=model, toolkit=Toolkit([retrieve_tool(kb)]))
        result = await agent.run("保修期多久？", context=UserContext(tenant_id="acme", user_id="a"))
    assert searches == ["保修期"]
    results = next(m for m in result.messages if m.role == "tool").tool_results
    assert [r.call_id for r in results] == ["r0", "r1", "r2"]
    assert {tuple(c.index for c in r.citations) for r in results} == {(1, 2, 3)}
