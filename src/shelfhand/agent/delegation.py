"""Delegating to a subagent: the per-turn state, the governed call and its loop guard.

A :class:`Delegation` is one subagent as a tool of its supervisor; the :class:`Turn` in
:data:`current_turn` is the supervisor's turn it runs in (its session, budget of calls, the
channel its events reach the supervisor's stream by, and the loop guard's fingerprints).
:mod:`shelfhand.agent.supervisor` and :mod:`shelfhand.agent.lifecycle` share them.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shelfhand.core.citations import number_here, renumber_markers
from shelfhand.core.context import RunContext
from shelfhand.core.events import (
    ApprovalDecided,
    ApprovalRequired,
    Event,
    HumanNeeded,
    SubagentFinished,
    SubagentStarted,
    ToolFinished,
    ToolProgress,
    ToolStarted,
)
from shelfhand.core.messages import Citation, Message
from shelfhand.core.results import RunResult
from shelfhand.tools.tool import Tool, ToolOutput

from .agent import Agent
from .runs import run_to_final
from .step_events import tag_event
from .subagents import Delegable, Subagent

if TYPE_CHECKING:
    from shelfhand.tools.approvals import Approvals


logger = logging.getLogger(__name__)

__all__ = [
    "Channel",
    "Delegation",
    "Turn",
    "current_turn",
    "fingerprint",
    "refused",
    "renumber_citations",
]

_GUARD_KEYS = 4096  # (session, subagent) fingerprints remembered per supervisor


def fingerprint(text: str) -> str:
    """SHA-256 of ``text`` with whitespace normalised (runs of it → one space, ends trimmed)."""
    return hashlib.sha256(" ".join(text.split()).encode("utf-8")).hexdigest()


@dataclass(slots=True, kw_only=True)
class Turn:
    """Delegation state of one supervisor turn, shared by every delegation in it (nested
    ones too: tools run in copies of the turn's context, which hold this same object)."""

    session: str
    max_calls: int
    sink: Callable[[Event], None] | None = None
    history: tuple[Message, ...] = ()
    approvals: Approvals | None = None
    calls: int = 0
    human: HumanNeeded | None = None
    last_output: str = ""
    guard: OrderedDict[tuple[str, str], str] = field(default_factory=OrderedDict)

    def emit(self, event: Event) -> None:
        if self.sink is not None:
            self.sink(event)


current_turn: ContextVar[Turn | None] = ContextVar("shelfhand_delegation_turn", default=None)


class Delegation:
    """Runs one subagent for a delegate tool: limits, events, identity, loop guard."""

    def __init__(
        self,
        spec: Subagent,
        build: Callable[[], Delegable],
        *,
        max_depth: int,
        max_calls: int,
    ) -> None:
        self.spec = spec
        self._build = build
        self._agent: Delegable | None = None
        self.max_depth = max_depth
        self.max_calls = max_calls
        self._standalone: OrderedDict[str, Turn] = OrderedDict()  # calling run → its turn

    def agent(self) -> Delegable:
        if self._agent is None:
            self._agent = self._build()
        return self._agent

    def tool(self) -> Tool[..., Any]:
        spec = self.spec

        async def delegate(run: RunContext, task: str) -> ToolOutput:
            """Hand a task to this specialist and get its answer back.

            Args:
                task: The complete task, with every detail the specialist needs: it does not
                    see the conversation.
            """
            return await self.run(run, task)

        return Tool(
            delegate, name=spec.id, description=spec.description, timeout=spec.timeout, retries=0
        )

    async def run(
        self, run: RunContext, task: str, history: Sequence[Message] | None = None
    ) -> ToolOutput:
        """Delegate ``task`` for ``run``'s caller (``history``: an earlier exchange with this
        subagent to continue, instead of what its memory setting gives it)."""
        spec = self.spec
        turn = current_turn.get()
        if turn is None:  # called outside a supervisor's turn (a plain Agent): limits and
            # fingerprints per calling run
            turn = self._standalone.get(run.trace_id)
            if turn is None:
                turn = Turn(session=run.trace_id, max_calls=self.max_calls)
                self._standalone[run.trace_id] = turn
                while len(self._standalone) > _GUARD_KEYS:
                    self._standalone.popitem(last=False)
        depth = run.depth + 1
        if turn.human is not None:
            return refused(f"not delegated: {turn.human.reason}")
        if depth > self.max_depth:
            return refused(
                f"not delegated: {spec.id} would run {depth} levels deep, past the limit of "
                f"{self.max_depth}. Do the task yourself or answer with what you have."
            )
        if turn.calls >= turn.max_calls:
            return refused(
                f"not delegated: this turn's budget of {turn.max_calls} subagent calls is "
                "spent. Answer with what you have."
            )
        turn.calls += 1
        sink = turn.sink
        if sink is None:  # nobody watches the events: just run it
            agent = self.agent()
            if isinstance(agent, Agent):  # without building events nobody reads
                result = await agent._run_quiet(
                    task, history=self._history(turn, history), approvals=turn.approvals,
                    parent=run,
                )  # fmt: skip
            else:
                result = await agent.run(
                    task, history=self._history(turn, history), approvals=turn.approvals,
                    parent=run,
                )  # fmt: skip
        else:
            sink(SubagentStarted(subagent=spec.id, depth=depth, task=task))
            started = time.perf_counter()
            stop_reason = ""  # stays empty if the subagent fails
            try:
                result = await self._stream(run, task, turn, history, sink)
                stop_reason = result.stop_reason
            finally:
                sink(
                    SubagentFinished(
                        subagent=spec.id,
                        depth=depth,
                        is_error=not stop_reason,
                        stop_reason=stop_reason,
                        duration_ms=(time.perf_counter() - started) * 1000,
                    )
                )
        output, citations = renumber_citations(result.output, result.citations, run)
        key = (turn.session, spec.id)
        mark = fingerprint(result.output)
        if turn.guard.get(key) == mark:
            turn.human = HumanNeeded(
                subagent=spec.id,
                depth=depth,
                reason=(
                    f"{spec.id} handed back the same result twice in a row; asking it again "
                    "would go round in circles"
                ),
            )
            turn.last_output = output
            turn.emit(turn.human)
            return refused(f"delegation stopped: {turn.human.reason}. A person should look.")
        turn.guard[key] = mark
        turn.guard.move_to_end(key)
        while len(turn.guard) > _GUARD_KEYS:
            turn.guard.popitem(last=False)
        return ToolOutput(content=output, citations=citations, data=result)

    def _history(self, turn: Turn, given: Sequence[Message] | None) -> Sequence[Message]:
        if given is not None:
            return given
        return turn.history if self.spec.memory == "shared" else ()

    async def _stream(
        self,
        run: RunContext,
        task: str,
        turn: Turn,
        given: Sequence[Message] | None,
        sink: Callable[[Event], None],
    ) -> RunResult:
        spec = self.spec
        history = self._history(turn, given)
        agent = self.agent()
        if isinstance(agent, Agent):
            # its text is the tool result: not streamed; its tool and approval events go
            # straight to the sink as they happen, tool events tagged with its id (what the
            # loop below forwards of another delegable's stream), and nothing else is built
            return await agent._run_quiet(
                task, history=history, approvals=turn.approvals, parent=run, emit=sink,
                tag=spec.id,
            )  # fmt: skip
        events = agent.stream(task, history=history, approvals=turn.approvals, parent=run)

        def forward(event: Event) -> None:
            if isinstance(event, ToolStarted | ToolFinished):
                sink(event if event.agent is not None else tag_event(event, spec.id))
            elif isinstance(
                event,
                ToolProgress
                | ApprovalRequired
                | ApprovalDecided
                | SubagentStarted  # a pipeline's own steps
                | SubagentFinished
                | HumanNeeded,
            ):
                sink(event)

        # drained to its end (a run ends right after its final event): nothing is left to
        # close; an error or a cancellation raised inside it finishes it
        return await run_to_final(events, what=f"subagent {spec.id}", forward=forward)


class Channel:
    """What a streamed turn's producer task hands its consumer, in order: events, then
    ``None`` (done) or the exception it failed with. ``asyncio.Queue`` without what a turn
    does not need (bounds, ``task_done``): the consumer waits only when nothing is queued,
    so a burst of events costs one wake-up. One producer and one consumer, on one loop."""

    __slots__ = ("_waiter", "items")

    def __init__(self) -> None:
        self.items: deque[Event | BaseException | None] = deque()
        """What is queued; the consumer pops from the left (after :meth:`wait`)."""
        self._waiter: asyncio.Future[None] | None = None

    def put(self, item: Event | BaseException | None) -> None:
        self.items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self) -> None:
        """Until something is queued."""
        while not self.items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None


def refused(message: str) -> ToolOutput:
    return ToolOutput(content=message, is_error=True)


def renumber_citations(
    text: str, citations: Sequence[Citation], run: RunContext
) -> tuple[str, tuple[Citation, ...]]:
    """Another run's passages numbered in ``run``, and ``text``'s markers with them (a
    subagent's ``[1]`` may be the caller's ``[4]``), their disagreements too."""
    if not citations:
        return text, ()
    numbers, out = number_here(citations, run.citations)
    return renumber_markers(text, numbers), out
