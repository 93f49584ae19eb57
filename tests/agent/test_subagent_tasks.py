"""Background subagent tasks and the lifecycle tools (docs/design.md S2), with scripted models."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import pytest

from shelfhand import Toolkit, UserContext
from shelfhand.agent.subagents import Subagent
from shelfhand.agent.supervisor import Supervisor
from shelfhand.agent.tasks import TaskNotFound, TaskRegistry
from shelfhand.core.errors import ModelProviderError
from shelfhand.core.messages import Message
from shelfhand.testing import FunctionModel, ScriptedModel, failure, text, tool_call

pytestmark = pytest.mark.anyio

ALICE = UserContext(tenant_id="acme", user_id="alice")
BOB = UserContext(tenant_id="acme", user_id="bob")
OTHER_TENANT_ALICE = UserContext(tenant_id="globex", user_id="alice")


def gated_worker(gate: asyncio.Event, seen: list[list[str]] | None = None) -> FunctionModel:
    """A subagent model that answers only once ``gate`` is set."""

    async def answer(messages: Sequence[Message], tools: list[dict]) -> str:
        if seen is not None:
            seen.append([m.text for m in messages if m.role != "system"])
        await gate.wait()
        return f"report on {messages[-1].text}"

    return FunctionModel(answer)


def supervisor(
    main: ScriptedModel | FunctionModel, worker: FunctionModel, tasks: TaskRegistry
) -> Supervisor:
    return Supervisor(
        model=main,
        toolkit=Toolkit(),
        subagents=[Subagent("researcher", "Researches a question.", model=worker)],
        tasks=tasks,
    )


def result_of(messages: Sequence[Message], n: int) -> str:
    """The content of the n-th tool result of a transcript."""
    return [r.content for m in messages for r in m.tool_results][n]


async def test_the_lifecycle_tools_are_offered_with_the_subagents() -> None:
    sup = supervisor(ScriptedModel([]), gated_worker(asyncio.Event()), TaskRegistry())
    names = [s["function"]["name"] for s in sup.toolkit.schemas()]
    assert names == [
        "researcher",
        "agent_spawn",
        "agent_send",
        "task_output",
        "wait_async_results",
        "task_cancel",
        "task_list",
    ]
    spawn = next(s for s in sup.toolkit.schemas() if s["function"]["name"] == "agent_spawn")
    assert "researcher" in spawn["function"]["description"]


async def test_a_background_task_is_spawned_listed_and_awaited() -> None:
    gate = asyncio.Event()
    step = 0

    def main_turn(messages: Sequence[Message], tools: list[dict]) -> object:
        nonlocal step
        step += 1
        if step == 1:
            return tool_call(
                "agent_spawn", {"subagent": "researcher", "task": "保修政策", "timeout": 0}
            )
        if step == 2:
            return tool_call("task_list", {})
        if step == 3:
            gate.set()  # the researcher may finish now
            return tool_call("wait_async_results", {"timeout": 5})
        return text("汇总完毕")

    tasks = TaskRegistry()
    sup = supervisor(FunctionModel(main_turn), gated_worker(gate), tasks)
    result = await asyncio.wait_for(sup.run("研究保修政策", context=ALICE, session="s1"), 10)
    assert result.output == "汇总完毕"
    spawned = result_of(result.messages, 0)
    assert "is running in the background" in spawned
    listed = json.loads(result_of(result.messages, 1))
    assert [(t["subagent"], t["status"], t["task"]) for t in listed] == [
        ("researcher", "running", "保修政策")
    ]
    waited = json.loads(result_of(result.messages, 2))
    assert [(t["status"], t["output"]) for t in waited] == [("done", "report on 保修政策")]
    (task,) = tasks.tasks_of(("acme", "alice", "s1"))
    assert task.status == "done" and task.id == listed[0]["id"]


async def test_spawn_with_a_timeout_returns_the_answer_when_it_comes_in_time() -> None:
    gate = asyncio.Event()
    gate.set()
    main = ScriptedModel(
        [
            tool_call("agent_spawn", {"subagent": "researcher", "task": "E-203", "timeout": 5}),
            text("ok"),
        ]
    )
    result = await supervisor(main, gated_worker(gate), TaskRegistry()).run("x", context=ALICE)
    assert "done:\nreport on E-203" in result_of(result.messages, 0)


async def test_tasks_are_invisible_to_other_users_tenants_and_sessions() -> None:
    gate = asyncio.Event()
    tasks = TaskRegistry()
    spawn = tool_call("agent_spawn", {"subagent": "researcher", "task": "secret", "timeout": 0})
    sup = supervisor(ScriptedModel([spawn, text("started")]), gated_worker(gate), tasks)
    await sup.run("x", context=ALICE, session="s1")
    (task,) = tasks.tasks_of(("acme", "alice", "s1"))

    for caller, session in ((BOB, "s1"), (OTHER_TENANT_ALICE, "s1"), (ALICE, "s2")):
        probe = ScriptedModel(
            [
                [
                    tool_call("task_output", {"task_id": task.id}),
                    tool_call("task_cancel", {"task_id": task.id}),
                    tool_call("task_list", {}),
                    tool_call("wait_async_results", {"task_ids": [task.id], "timeout": 0}),
                    tool_call("agent_send", {"task_id": task.id, "message": "more"}),
                ],
                text("nothing"),
            ]
        )
        sup.agent.model = probe
        result = await sup.run("peek", context=caller, session=session)
        replies = [result_of(result.messages, i) for i in range(5)]
        assert replies[2] == "no tasks"
        for reply in replies[:2] + replies[3:]:
            assert f"no task '{task.id}' in this session" in reply
        assert "secret" not in " ".join(replies)
    assert task.status == "running"  # nobody else could cancel it
    with pytest.raises(TaskNotFound):
        tasks.get(("acme", "bob", "s1"), task.id)
    gate.set()
    await tasks.wait(("acme", "alice", "s1"), [task.id], 5)
    assert task.status == "done"


async def test_a_task_is_cancelled_by_its_owner() -> None:
    gate = asyncio.Event()
    tasks = TaskRegistry()
    spawn = tool_call("agent_spawn", {"subagent": "researcher", "task": "slow", "timeout": 0})
    sup = supervisor(ScriptedModel([spawn, text("started")]), gated_worker(gate), tasks)
    await sup.run("x", context=ALICE, session="s1")
    (task,) = tasks.tasks_of(("acme", "alice", "s1"))
    sup.agent.model = ScriptedModel([tool_call("task_cancel", {"task_id": task.id}), text("ok")])
    result = await sup.run("stop it", context=ALICE, session="s1")
    assert f"task {task.id} (researcher) cancelled" == result_of(result.messages, 0)
    assert task.status == "cancelled" and task.runner is not None and task.runner.done()


async def test_a_background_task_survives_a_model_error_of_the_main_agent() -> None:
    gate = asyncio.Event()
    tasks = TaskRegistry()
    spawn = tool_call("agent_spawn", {"subagent": "researcher", "task": "long job", "timeout": 0})
    sup = supervisor(ScriptedModel([spawn, failure("provider", "boom")]), gated_worker(gate), tasks)
    with pytest.raises(ModelProviderError):
        await sup.run("x", context=ALICE, session="s1")
    (task,) = tasks.tasks_of(("acme", "alice", "s1"))
    assert task.status == "running"
    gate.set()
    (done,) = await tasks.wait(("acme", "alice", "s1"), None, 5)
    assert (done.status, done.output) == ("done", "report on long job")


async def test_deleting_a_session_cancels_its_tasks() -> None:
    gate = asyncio.Event()
    tasks = TaskRegistry()
    spawn = tool_call("agent_spawn", {"subagent": "researcher", "task": "a", "timeout": 0})
    sup = supervisor(
        ScriptedModel([spawn, text("s1"), spawn, text("s2")]), gated_worker(gate), tasks
    )
    await sup.run("x", context=ALICE, session="s1")
    await sup.run("x", context=ALICE, session="s2")
    (first,) = tasks.tasks_of(("acme", "alice", "s1"))
    assert await tasks.cancel_session("acme", "s1") == 1
    assert first.status == "cancelled" and tasks.tasks_of(("acme", "alice", "s1")) == []
    (second,) = tasks.tasks_of(("acme", "alice", "s2"))
    assert second.status == "running"
    await tasks.close()
    assert second.status == "cancelled"


async def test_agent_send_continues_a_finished_task_with_its_exchange() -> None:
    gate = asyncio.Event()
    gate.set()
    seen: list[list[str]] = []
    tasks = TaskRegistry()
    main = ScriptedModel(
        [
            tool_call("agent_spawn", {"subagent": "researcher", "task": "第一问", "timeout": 5}),
            text("1"),
        ]
    )
    sup = supervisor(main, gated_worker(gate, seen), tasks)
    await sup.run("x", context=ALICE, session="s1")
    (task,) = tasks.tasks_of(("acme", "alice", "s1"))
    sup.agent.model = ScriptedModel(
        [tool_call("agent_send", {"task_id": task.id, "message": "追问", "timeout": 5}), text("2")]
    )
    result = await sup.run("y", context=ALICE, session="s1")
    assert "done:\nreport on 追问" in result_of(result.messages, 0)
    assert seen[-1] == ["第一问", "report on 第一问", "追问"]
    assert task.status == "done" and len(tasks.tasks_of(("acme", "alice", "s1"))) == 1


async def test_an_unknown_subagent_and_too_many_running_tasks_are_refused() -> None:
    gate = asyncio.Event()
    tasks = TaskRegistry(max_running=1)
    spawn = tool_call("agent_spawn", {"subagent": "researcher", "task": "a", "timeout": 0})
    main = ScriptedModel(
        [[tool_call("agent_spawn", {"subagent": "nobody", "task": "a"}), spawn, spawn], text("ok")]
    )
    result = await supervisor(main, gated_worker(gate), tasks).run("x", context=ALICE, session="s")
    assert "unknown subagent 'nobody'; use one of: researcher" in result_of(result.messages, 0)
    assert "running in the background" in result_of(result.messages, 1)
    assert "already running" in result_of(result.messages, 2)
    await tasks.close()
