"""A supervisor: a main agent that delegates to subagents (docs/design.md S2–S4).

Each :class:`~shelfhand.agent.subagents.Subagent` becomes a governed tool of the main agent
(name = its id, its description, one ``task`` argument). Calling it runs the subagent:

- with **only its own tools** (a toolkit built from its whitelist; a tool it was not given is
  an "unknown tool" error even when its model names it), its own ``max_iters`` and deadline
  (the tool's timeout), and an **isolated context**: it sees the task, not the conversation,
  unless it declares ``memory: shared``;
- for **the caller**: the ``UserContext`` of the injected ``RunContext`` flows down unchanged
  (nothing in the task text can change who the caller is), and its tool calls go through the
  same governance (permissions, rate limits, audit). Its run records the parent's trace id and
  its depth, and so does every audit record of its calls;
- within **limits**: a depth limit (default 3) and a budget of subagent calls per turn
  (default 8); past either, the call is refused with a message the model can act on.

**Loop guard (S4).** Each subagent result is fingerprinted (SHA-256 of the whitespace-
normalised text) per (session, subagent). The same result twice in a row stops delegation:
the run ends with an honest answer (``stop_reason="human_needed"``) and a
:class:`~shelfhand.core.events.HumanNeeded` event.

**Events.** A supervisor's stream is the main agent's, plus ``SubagentStarted`` /
``SubagentFinished`` (subagent id and depth) and the subagents' own tool events, tagged with
their id (``ToolStarted.agent``), as they happen.

Anything :class:`~shelfhand.agent.subagents.Delegable` (an agent, a pipeline, another
supervisor) can be delegated to: declare ``Subagent(id, description, agent=...)``, or make a
stand-alone tool of it with :func:`as_tool`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Unpack

from shelfhand.core.errors import InvalidArgumentError
from shelfhand.core.events import (
    Event,
    Final,
    HumanNeeded,
    TextDelta,
)
from shelfhand.core.ids import new_id
from shelfhand.core.messages import Message
from shelfhand.core.results import RunResult
from shelfhand.tools.tool import Tool
from shelfhand.tools.toolkit import Toolkit

from .agent import DEFAULT_SYSTEM_PROMPT, Agent
from .delegation import (
    Channel,
    Delegation,
    Turn,
    current_turn,
    fingerprint,
    renumber_citations,
)
from .runs import RunOptions, run_closing, run_to_final
from .step_events import STEPS, STEPS_AND_TEXT, tag_event
from .subagents import (
    DeclarationError,
    Delegable,
    Subagent,
    check_subagent_tools,
    merge_declarations,
)

if TYPE_CHECKING:
    from shelfhand.agent.memory import ConversationMemory
    from shelfhand.core.pricing import ModelPrice
    from shelfhand.core.settings import AnswerRetrieval
    from shelfhand.models.base import ChatModel
    from shelfhand.tools.approvals import Approvals

    from .rewrite import QueryRewriter
    from .tasks import TaskRegistry

__all__ = [
    "DEFAULT_MAX_CALLS",
    "DEFAULT_MAX_DEPTH",
    "Supervisor",
    "as_tool",
    "fingerprint",
    "renumber_citations",
    "tag_event",
]

logger = logging.getLogger(__name__)

DEFAULT_MAX_DEPTH = 3
DEFAULT_MAX_CALLS = 8
SUPERVISOR_PROMPT = (
    DEFAULT_SYSTEM_PROMPT + " Some tools are specialists: give each one a complete, "
    "self-contained task (they do not see this conversation) and use what they hand back."
)


def as_tool(
    agent: Delegable,
    *,
    name: str | None = None,
    description: str,
    timeout: float = 120.0,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_calls: int = DEFAULT_MAX_CALLS,
) -> Tool[..., Any]:
    """A governed tool (one ``task`` argument) that runs ``agent`` (an agent or a pipeline).

    The same adapter a :class:`Supervisor` gives its subagents: the caller's identity flows
    down, the depth limit and call budget hold, the loop guard watches its results. Its
    events reach a stream only inside a supervisor's turn.
    """
    spec = Subagent(name or agent.name, description, agent=agent, timeout=timeout, origin="as_tool")
    return Delegation(spec, lambda: agent, max_depth=max_depth, max_calls=max_calls).tool()


class Supervisor:
    """A main agent that delegates tasks to subagents (specialists).

    Args:
        model: The main agent's chat model (and the default model of subagents).
        toolkit: Where tool names are looked up: the main agent's own tools and those the
            subagents list. Its governance (audit, rate limits, breakers) is shared by all.
        subagents: The specialists (ids must not clash with tool names).
        tools: The main agent's own tools, by name (``None``: every tool of ``toolkit``; the
            subagents' tools are always added).
        models: Chat models by name, for subagents that name their model.
        system_prompt: The main agent's instructions.
        max_iters: The main agent's most model calls per turn.
        max_depth: How deep delegation may nest (a subagent of a subagent is depth 2).
        max_calls: Subagent calls allowed in one turn (all depths together).
        memory: The main agent's conversation memory.
        approvals: Where ``confirm=True`` calls (also the subagents') wait for a human.
        name: Shown in logs, traces and audit records.
        tasks: Where background tasks are kept; with one, the main agent also gets the
            lifecycle tools (``agent_spawn``, ``agent_send``, ``task_output``,
            ``wait_async_results``, ``task_cancel``, ``task_list``; see
            :mod:`shelfhand.agent.lifecycle`). Tasks belong to the caller and the ``session``
            of the turn that started them.
        fingerprints: The loop guard's memory, (session, subagent) → fingerprint of the last
            result; share one between supervisors built per turn (a service does) so that it
            spans a session's turns.
        retrieval: Where the main agent's answers get passages (``tool``, ``context`` or
            ``both``, as :class:`~shelfhand.agent.agent.Agent`'s; not ``tool`` needs a
            ``retrieve`` tool among its own).
        rewriter: Rewrites a follow-up into a self-contained query for the up-front
            retrieval, as the chat agent's (see :mod:`shelfhand.agent.rewrite`).
        prices: Prices by model name, for the main agent and the subagents it builds (see
            :class:`~shelfhand.agent.agent.Agent`).

    Raises:
        DeclarationError: an id declared twice or clashing with a tool, an unknown tool or
            model name in a declaration (the message names where it was declared).
    """

    def __init__(
        self,
        *,
        model: ChatModel,
        toolkit: Toolkit,
        subagents: Sequence[Subagent],
        tools: Sequence[str] | None = None,
        models: Mapping[str, ChatModel] | None = None,
        system_prompt: str = SUPERVISOR_PROMPT,
        max_iters: int = 10,
        max_depth: int = DEFAULT_MAX_DEPTH,
        max_calls: int = DEFAULT_MAX_CALLS,
        memory: ConversationMemory | None = None,
        approvals: Approvals | None = None,
        name: str = "supervisor",
        description: str = "",
        tasks: TaskRegistry | None = None,
        fingerprints: OrderedDict[tuple[str, str], str] | None = None,
        retrieval: AnswerRetrieval = "tool",
        rewriter: QueryRewriter | None = None,
        prices: Mapping[str, ModelPrice] | None = None,
    ) -> None:
        if max_depth < 1:
            raise InvalidArgumentError("max_depth must be at least 1")
        if max_calls < 1:
            raise InvalidArgumentError("max_calls must be at least 1")
        self.name = name
        self.description = description
        self.model = model
        self.max_depth = max_depth
        self.max_calls = max_calls
        self.subagents = merge_declarations(subagents)
        self._models = dict(models or {})
        self.prices = prices
        self._source = toolkit
        self._guard = fingerprints if fingerprints is not None else OrderedDict()
        self._delegations: dict[str, Delegation] = {}
        for spec in self.subagents:
            if toolkit.get(spec.id) is not None:
                raise DeclarationError(
                    f"subagent {spec.id!r} ({spec.origin}) has the name of a tool; rename it"
                )
        for spec in self.subagents:
            self._check(spec)
            self._delegations[spec.id] = Delegation(
                spec,
                lambda spec=spec: self._build(spec),  # type: ignore[misc]
                max_depth=max_depth,
                max_calls=max_calls,
            )
        own = [t.name for t in toolkit.tools] if tools is None else list(tools)
        unknown = [n for n in own if toolkit.get(n) is None]
        if unknown:
            raise DeclarationError(f"supervisor {name!r}: unknown tool {unknown[0]!r}")
        kit = Toolkit(governance=toolkit.governance)
        for tool_name in own:
            found = toolkit.get(tool_name)
            assert found is not None
            kit.add(found)
        for delegation in self._delegations.values():
            kit.add(delegation.tool())
        self.tasks = tasks
        if tasks is not None:
            from .lifecycle import lifecycle_tools

            for lifecycle_tool in lifecycle_tools(
                self._delegations, tasks, max_calls=self.max_calls, guard=self._guard
            ):
                kit.add(lifecycle_tool)
        self.agent = Agent(
            name=name,
            model=model,
            toolkit=kit,
            system_prompt=system_prompt,
            max_iters=max_iters,
            memory=memory,
            approvals=approvals,
            retrieval=retrieval,
            rewriter=rewriter,
            prices=prices,
        )

    @property
    def memory(self) -> ConversationMemory | None:
        return self.agent.memory

    @property
    def toolkit(self) -> Toolkit:
        """The main agent's toolkit: its own tools and one tool per subagent."""
        return self.agent.toolkit

    def subagent(self, subagent_id: str) -> Delegable:
        """The agent behind a subagent (built on first use)."""
        return self._delegations[subagent_id].agent()

    def _check(self, spec: Subagent) -> None:
        if spec.agent is not None:
            return
        if spec.a2a:  # App.subagents() gives it its RemoteA2AAgent
            raise DeclarationError(
                f"subagent {spec.id!r} ({spec.origin}): a remote A2A agent needs its client: "
                "load subagents with App.subagents() (and install shelfhand[a2a])"
            )
        check_subagent_tools(
            [spec, *(s for s in self.subagents if s.id != spec.id)],
            [t.name for t in self._source.tools],
        )
        named = spec.model
        if isinstance(named, str) and named not in self._models and self.model.name != named:
            known = ", ".join(self._models) or "none"
            raise DeclarationError(
                f"subagent {spec.id!r} ({spec.origin}): unknown model {named!r}; "
                f"models given to the supervisor: {known}"
            )

    def _build(self, spec: Subagent) -> Delegable:
        if spec.agent is not None:
            return spec.agent
        kit = Toolkit(governance=self._source.governance)
        for tool_name in spec.tools:
            delegation = self._delegations.get(tool_name)
            found = self._source.get(tool_name)
            kit.add(delegation.tool() if found is None and delegation is not None else found)  # type: ignore[arg-type]
        model = spec.model
        if isinstance(model, str):
            model = self._models.get(model, self.model)
        return Agent(
            name=spec.id,
            model=model or self.model,
            toolkit=kit,
            system_prompt=spec.system_prompt or DEFAULT_SYSTEM_PROMPT,
            max_iters=spec.max_iters,
            prices=self.prices,
        )

    # --- running --------------------------------------------------------------------------
    async def run(
        self, prompt: str | Message, *, session: str | None = None, **options: Unpack[RunOptions]
    ) -> RunResult:
        """Run the turn to its answer (see :meth:`stream` for the arguments)."""
        first, options, trace_id = self._start(prompt, options)
        turn = self._new_turn(first, options, session, trace_id)
        token = current_turn.set(turn)  # no stream to feed: the main agent runs in this task
        try:
            # the loop itself, not ``stream``: no wrapping generator (as ``Agent.run``); its
            # steps' events are built, for the loop guard to be checked after each
            events = self.agent._loop(first, STEPS, options)
            # drained to its end, or closed at once when the loop guard trips (ask nothing
            # more); an exception inside the loop finishes it anyway
            final = await run_to_final(
                events, what="supervisor", stop=lambda: turn.human is not None
            )
        finally:
            current_turn.reset(token)
        if turn.human is None:
            assert final is not None  # not stopped: run_to_final raises without one
            return final
        return await run_to_final(self._stop(first, turn.human, turn, trace_id), what="supervisor")

    @staticmethod
    def _start(prompt: str | Message, options: RunOptions) -> tuple[Message, RunOptions, str]:
        """The turn's first message, and its options with its trace id (a new one if none)."""
        trace_id = options.get("trace_id") or new_id()
        first = Message.user(prompt) if isinstance(prompt, str) else prompt
        return first, {**options, "trace_id": trace_id}, trace_id

    def _new_turn(
        self,
        first: Message,
        options: RunOptions,
        session: str | None,
        trace_id: str,
        sink: Callable[[Event], None] | None = None,
    ) -> Turn:
        memory = self.agent.memory
        past = tuple(memory.messages) if memory is not None else tuple(options.get("history", ()))
        approvals = options.get("approvals")
        return Turn(
            session=session or trace_id,
            max_calls=self.max_calls,
            sink=sink,
            history=(*past, first),
            approvals=approvals if approvals is not None else self.agent.approvals,
            # without a session the fingerprints are this turn's alone (keyed by its trace
            # id, which no later turn has): they live with the turn, not in the memory
            # shared by the supervisor's turns
            guard=self._guard if session is not None else OrderedDict(),
        )

    def run_sync(
        self, prompt: str | Message, *, session: str | None = None, **options: Unpack[RunOptions]
    ) -> RunResult:
        """``run`` for scripts and the CLI (not inside a running event loop); the models'
        connections are closed with its loop (:func:`~shelfhand.agent.runs.run_closing`)."""
        return run_closing(self, lambda: self.run(prompt, session=session, **options))

    def chat_models(self) -> Iterator[object]:
        """The models this supervisor and its subagents ask (see
        :func:`~shelfhand.agent.runs.chat_models`): its agent's, the named ones, those a
        declaration gives itself, and the declared subagent objects'."""
        yield self.agent
        yield from self._models.values()
        for spec in self.subagents:
            if spec.model is not None and not isinstance(spec.model, str):
                yield spec.model
            if spec.agent is not None:
                yield spec.agent

    async def stream(
        self, prompt: str | Message, *, session: str | None = None, **options: Unpack[RunOptions]
    ) -> AsyncGenerator[Event, None]:
        """The main agent's events, with the subagents' interleaved as they happen.

        Args:
            prompt: The user's message.
            session: The conversation the loop guard keys fingerprints by (default: this
                turn only).
            **options: As for :meth:`Agent.run <shelfhand.agent.agent.Agent.run>`
                (:class:`~shelfhand.agent.runs.RunOptions`).
        """
        channel = Channel()
        first, options, trace_id = self._start(prompt, options)
        turn = self._new_turn(first, options, session, trace_id, channel.put)

        async def produce() -> None:
            try:
                # the loop itself, not ``stream``: no wrapping generator
                events = self.agent._loop(first, STEPS_AND_TEXT, options)
                # drained, or closed at once when the loop guard trips (as in ``run``)
                async for event in events:
                    channel.put(event)
                    if turn.human is not None:  # the loop guard tripped: ask nothing more
                        await events.aclose()
                        break
                channel.put(None)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                channel.put(exc)

        items = channel.items
        token = current_turn.set(turn)
        try:
            task = asyncio.create_task(produce())  # runs in a copy of this context
        finally:
            current_turn.reset(token)
        try:
            while True:
                if not items:
                    await channel.wait()
                item = items.popleft()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                if isinstance(item, HumanNeeded):
                    yield item
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                    async for event in self._stop(first, item, turn, trace_id):
                        yield event
                    return
                yield item
                if isinstance(item, Final):
                    return
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _stop(
        self, first: Message, human: HumanNeeded, turn: Turn, trace_id: str
    ) -> AsyncGenerator[Event, None]:
        """End the turn honestly after the loop guard tripped."""
        text = (
            f"I stopped delegating: {human.reason}. A person needs to look at this request. "
            f"The last answer from {human.subagent} was:\n\n{turn.last_output}"
        )
        reply = Message.assistant(text)
        if self.agent.memory is not None:
            self.agent.memory.add([first, reply])
        yield TextDelta(text=text)
        yield Final(
            result=RunResult(
                output=text,
                messages=(first, reply),
                stop_reason="human_needed",
                trace_id=trace_id,
            )
        )
