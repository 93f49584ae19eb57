"""The model's lifecycle tools over a supervisor's subagents (docs/design.md S2).

``agent_spawn``, ``agent_send``, ``task_output``, ``wait_async_results``, ``task_cancel`` and
``task_list``; see :mod:`shelfhand.agent.tasks` for the tasks themselves. Every tool reads
the caller from the injected run and the session from the supervisor's turn, never from its
arguments: a model can only see and touch the tasks of the session it answers in.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from shelfhand.core.context import RunContext
from shelfhand.core.messages import Message
from shelfhand.core.results import RunResult
from shelfhand.tools.tool import Tool, ToolOutput

from .delegation import Delegation, Turn, current_turn, refused
from .tasks import BackgroundTask, Owner, TaskNotFound, TaskRegistry, describe

__all__ = ["LIFECYCLE_TOOLS", "MAX_WAIT", "lifecycle_tools"]

LIFECYCLE_TOOLS = (
    "agent_spawn",
    "agent_send",
    "task_output",
    "wait_async_results",
    "task_cancel",
    "task_list",
)
MAX_WAIT = 300.0
"""The longest a lifecycle tool waits for answers, in seconds (longer: ask again)."""


def _owner(run: RunContext) -> tuple[Owner, Turn | None]:
    turn = current_turn.get()
    session = turn.session if turn is not None else run.trace_id
    return (run.user.tenant_id, run.user.user_id, session), turn


def _report(item: BackgroundTask) -> ToolOutput:
    if item.status == "running":
        return ToolOutput(
            content=f"task {item.id} ({item.subagent}) is running in the background; read it "
            "later with task_output or wait_async_results",
            data=item.to_dict(),
        )
    if item.status == "done":
        return ToolOutput(
            content=f"task {item.id} ({item.subagent}) done:\n{item.output}", data=item.to_dict()
        )
    why = f": {item.error}" if item.error else ""
    return ToolOutput(
        content=f"task {item.id} ({item.subagent}) {item.status}{why}",
        is_error=item.status == "failed",
        data=item.to_dict(),
    )


def lifecycle_tools(
    delegations: dict[str, Delegation],
    registry: TaskRegistry,
    *,
    max_calls: int,
    guard: OrderedDict[tuple[str, str], str],
) -> list[Tool[..., Any]]:
    """The six lifecycle tools over a supervisor's subagents (``delegations``), keeping tasks
    in ``registry``; ``max_calls`` and ``guard`` are the supervisor's (a background task's turn
    budget and, outside a turn, its loop guard)."""
    names = ", ".join(delegations)

    def runner(
        delegation: Delegation,
        run: RunContext,
        turn: Turn | None,
        task: str,
        history: Sequence[Message] | None,
    ) -> Any:
        async def go() -> RunResult:
            # a task of its own: no stream to feed, its own budget, the session's loop guard
            if turn is not None:
                background = Turn(
                    session=turn.session,
                    max_calls=max_calls,
                    history=turn.history,
                    approvals=turn.approvals,
                    guard=turn.guard,
                )
            else:  # outside a turn: the calling run's session, the supervisor's guard
                background = Turn(session=run.trace_id, max_calls=max_calls, guard=guard)
            token = current_turn.set(background)
            try:
                out = await delegation.run(run, task, history)
            finally:
                current_turn.reset(token)
            if not isinstance(out.data, RunResult):
                raise RuntimeError(out.content)
            return replace(out.data, output=out.content)

        return go

    async def finished_within(item: BackgroundTask, timeout: float) -> ToolOutput:
        if timeout > 0 and item.runner is not None:
            await asyncio.wait([item.runner], timeout=min(timeout, MAX_WAIT))
        return _report(item)

    async def agent_spawn(
        run: RunContext, subagent: str, task: str, timeout: float = 30
    ) -> ToolOutput:
        """Start a specialist on a task; wait for its answer or let it work in the background.

        Args:
            subagent: The specialist's name.
            task: The complete task, with every detail it needs (it does not see this
                conversation).
            timeout: Seconds to wait for the answer; 0 returns at once and the task runs in
                the background (read it later with task_output or wait_async_results).
        """
        delegation = delegations.get(subagent)
        if delegation is None:
            return refused(f"unknown subagent {subagent!r}; use one of: {names}")
        owner, turn = _owner(run)
        try:
            item = registry.start(owner, subagent, task, runner(delegation, run, turn, task, None))
        except RuntimeError as exc:
            return refused(str(exc))
        return await finished_within(item, timeout)

    async def agent_send(
        run: RunContext, task_id: str, message: str, timeout: float = 30
    ) -> ToolOutput:
        """Send a follow-up to the specialist of a finished task; it sees its earlier exchange.

        Args:
            task_id: The task, e.g. task-1a2b3c4d5e6f.
            message: What to tell or ask it.
            timeout: Seconds to wait for the answer; 0 returns at once.
        """
        owner, turn = _owner(run)
        try:
            item = registry.get(owner, task_id)
            delegation = delegations[item.subagent]
            go = runner(delegation, run, turn, message, item.messages)
            item = registry.resume(owner, task_id, message, go)
        except (TaskNotFound, RuntimeError) as exc:
            return refused(str(exc))
        return await finished_within(item, timeout)

    async def task_output(run: RunContext, task_id: str) -> ToolOutput:
        """The status and answer of a task.

        Args:
            task_id: The task, e.g. task-1a2b3c4d5e6f.
        """
        try:
            return _report(registry.get(_owner(run)[0], task_id))
        except TaskNotFound as exc:
            return refused(str(exc))

    async def wait_async_results(
        run: RunContext, task_ids: list[str] | None = None, timeout: float = 30
    ) -> ToolOutput:
        """Wait for background tasks to finish and read their answers.

        Args:
            task_ids: The tasks to wait for; empty: every running task of this conversation.
            timeout: The most seconds to wait.
        """
        try:
            items = await registry.wait(_owner(run)[0], task_ids, min(max(timeout, 0), MAX_WAIT))
        except TaskNotFound as exc:
            return refused(str(exc))
        if not items:
            return ToolOutput(content="no tasks are running")
        return ToolOutput(content=describe(items), data=[t.to_dict() for t in items])

    async def task_cancel(run: RunContext, task_id: str) -> ToolOutput:
        """Cancel a running task.

        Args:
            task_id: The task, e.g. task-1a2b3c4d5e6f.
        """
        try:
            return _report(await registry.cancel(_owner(run)[0], task_id))
        except TaskNotFound as exc:
            return refused(str(exc))

    async def task_list(run: RunContext) -> ToolOutput:
        """The tasks of this conversation, with their status."""
        items = registry.tasks_of(_owner(run)[0])
        if not items:
            return ToolOutput(content="no tasks")
        return ToolOutput(content=describe(items), data=[t.to_dict() for t in items])

    long = MAX_WAIT + 10  # the governed call outlives the longest wait it may do
    spawn_about = (
        "Start a specialist on a task; wait for its answer or let it work in the background. "
        f"Specialists: {names}."
    )
    return [
        Tool(agent_spawn, description=spawn_about, timeout=long, retries=0),
        Tool(agent_send, timeout=long, retries=0),
        Tool(task_output, read_only=True, retries=0),
        Tool(wait_async_results, timeout=long, retries=0),
        Tool(task_cancel, retries=0),
        Tool(task_list, read_only=True, retries=0),
    ]
