"""Background subagent tasks and the model's lifecycle tools (docs/design.md S2).

A :class:`TaskRegistry` keeps the subagent runs a supervisor started in the background. Each
task belongs to the (tenant, user, session) that started it: every look-up names its owner,
and a task of another owner is "not found" (whether it exists is not revealed). Tasks run in
tasks of their own, so they outlive the turn that started them, also when that turn fails;
:meth:`TaskRegistry.cancel_session` cancels a session's tasks when it is deleted.

The lifecycle tools (:func:`lifecycle_tools`, given to a supervisor with ``tasks=``):

- ``agent_spawn(subagent, task, timeout)``: start a subagent on a task; wait up to
  ``timeout`` seconds for its answer (``0``: return at once, it runs in the background);
- ``agent_send(task_id, message, timeout)``: a follow-up for a finished task's subagent, which
  sees its earlier exchange (the same task id, running again);
- ``task_output(task_id)``, ``wait_async_results(task_ids, timeout)``, ``task_cancel(task_id)``
  and ``task_list()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from shelfhand.core.errors import InvalidArgumentError, TaskNotFound

if TYPE_CHECKING:
    from shelfhand.core.messages import Message
    from shelfhand.core.results import RunResult

__all__ = ["BackgroundTask", "Owner", "TaskNotFound", "TaskRegistry", "TaskStatus"]

TaskStatus = Literal["running", "done", "failed", "cancelled"]
Owner = tuple[str, str, str]
"""(tenant id, user id, session): who may see a task."""
Runner = Callable[[], Awaitable["RunResult"]]


@dataclass(slots=True, kw_only=True)
class BackgroundTask:
    """One subagent run in the background, and what came of it."""

    id: str
    subagent: str
    task: str
    owner: Owner
    status: TaskStatus = "running"
    output: str = ""
    error: str = ""
    created: float = field(default_factory=time.time)
    finished: float | None = None
    messages: tuple[Message, ...] = ()
    """The subagent's exchange so far (what ``agent_send`` continues)."""
    runner: asyncio.Task[None] | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view (no owner, no transcript)."""
        return {
            "id": self.id,
            "subagent": self.subagent,
            "task": self.task,
            "status": self.status,
            "output": self.output,
            "error": self.error,
            "created": self.created,
            "finished": self.finished,
        }


class TaskRegistry:
    """Background tasks by owner.

    Args:
        max_running: Tasks one owner may have running at once.
        max_kept: Tasks kept in all (the oldest finished ones are forgotten first).
    """

    def __init__(self, *, max_running: int = 8, max_kept: int = 1000) -> None:
        if max_running < 1 or max_kept < 1:
            raise InvalidArgumentError("max_running and max_kept must be at least 1")
        self.max_running = max_running
        self.max_kept = max_kept
        self._tasks: OrderedDict[str, BackgroundTask] = OrderedDict()

    # --- starting -------------------------------------------------------------------------
    def start(self, owner: Owner, subagent: str, task: str, runner: Runner) -> BackgroundTask:
        """Run ``runner`` in the background as a new task of ``owner``.

        Raises:
            RuntimeError: the owner already has ``max_running`` tasks running.
        """
        running = sum(1 for t in self._tasks.values() if t.owner == owner and t.status == "running")
        if running >= self.max_running:
            raise RuntimeError(
                f"{running} tasks are already running (the most at once); wait for them or "
                "cancel one"
            )
        task_id = f"task-{secrets.token_hex(8)}"  # random: an id tells nothing about others
        while task_id in self._tasks:  # pragma: no cover - 64 random bits
            task_id = f"task-{secrets.token_hex(8)}"
        item = BackgroundTask(id=task_id, subagent=subagent, task=task, owner=owner)
        self._tasks[item.id] = item
        self._forget_old()
        self._launch(item, runner)
        return item

    def resume(self, owner: Owner, task_id: str, message: str, runner: Runner) -> BackgroundTask:
        """Run the task's subagent again (``runner`` continues its exchange with ``message``).

        Raises:
            TaskNotFound: not the owner's task.
            RuntimeError: the task is still running.
        """
        item = self.get(owner, task_id)
        if item.status == "running":
            raise RuntimeError(f"task {task_id} is still running; wait for it first")
        item.status, item.output, item.error, item.finished = "running", "", "", None
        item.task = message
        self._tasks.move_to_end(task_id)
        self._launch(item, runner)
        return item

    def _launch(self, item: BackgroundTask, runner: Runner) -> None:
        async def work() -> None:
            try:
                result = await runner()
            except asyncio.CancelledError:
                item.status = "cancelled"
                raise
            except Exception as exc:  # the task failed; whoever asks reads why
                item.status, item.error = "failed", f"{type(exc).__name__}: {exc}"
            else:
                item.status, item.output = "done", result.output
                item.messages = result.messages
            finally:
                item.finished = time.time()

        item.runner = asyncio.create_task(work(), name=f"shelfhand-{item.id}")

    # --- reading --------------------------------------------------------------------------
    def get(self, owner: Owner, task_id: str) -> BackgroundTask:
        """The owner's task ``task_id``.

        Raises:
            TaskNotFound: no such task of this owner.
        """
        item = self._tasks.get(task_id)
        if item is None or item.owner != owner:
            raise TaskNotFound(f"no task {task_id!r} in this session")
        return item

    def tasks_of(self, owner: Owner) -> list[BackgroundTask]:
        """The owner's tasks, oldest first."""
        return [t for t in self._tasks.values() if t.owner == owner]

    async def wait(
        self, owner: Owner, task_ids: Sequence[str] | None, timeout: float
    ) -> list[BackgroundTask]:
        """Wait up to ``timeout`` seconds for the tasks (default: all the owner's running
        ones) to finish; returns them, finished or not.

        Raises:
            TaskNotFound: one of ``task_ids`` is not the owner's.
        """
        items = (
            [self.get(owner, t) for t in task_ids]
            if task_ids
            else [t for t in self.tasks_of(owner) if t.status == "running"]
        )
        pending = [t.runner for t in items if t.runner is not None and not t.runner.done()]
        if pending and timeout > 0:
            await asyncio.wait(pending, timeout=timeout)
        return items

    # --- stopping -------------------------------------------------------------------------
    async def cancel(self, owner: Owner, task_id: str) -> BackgroundTask:
        """Cancel the owner's task (a finished one stays as it is).

        Raises:
            TaskNotFound: no such task of this owner.
        """
        item = self.get(owner, task_id)
        await _stop(item)
        return item

    async def cancel_session(self, tenant_id: str, session: str) -> int:
        """Cancel every running task of a session (it is being deleted) and forget them all;
        returns how many were running."""
        mine = [
            t for t in self._tasks.values() if t.owner[0] == tenant_id and t.owner[2] == session
        ]
        running = [t for t in mine if t.status == "running"]
        for item in running:
            await _stop(item)
        for item in mine:
            self._tasks.pop(item.id, None)
        return len(running)

    async def close(self) -> None:
        """Cancel every running task (at shutdown)."""
        for item in list(self._tasks.values()):
            await _stop(item)

    def _forget_old(self) -> None:
        while len(self._tasks) > self.max_kept:
            oldest = next((k for k, t in self._tasks.items() if t.status != "running"), None)
            if oldest is None:
                return
            del self._tasks[oldest]


async def _stop(item: BackgroundTask) -> None:
    runner = item.runner
    if runner is None or runner.done():
        return
    runner.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await runner
    if item.status == "running":  # cancelled before it started
        item.status, item.finished = "cancelled", time.time()


def describe(items: Sequence[BackgroundTask]) -> str:
    """The tasks as the model reads them (JSON)."""
    return json.dumps([t.to_dict() for t in items], ensure_ascii=False)
