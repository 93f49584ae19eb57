"""Pipelines: agents composed without changing them (docs/design.md K6).

- :func:`sequential` ``(a, b, c)``: ``a`` gets the prompt, ``b`` gets ``a``'s answer, ``c``
  gets ``b``'s; the answer is ``c``'s ("search, then summarise, then translate").
- :func:`conditional` ``(router, {"x": a, "y": b})``: the router (a function of the prompt
  text, or an agent whose answer names a route) picks one agent, which answers the prompt.
- :func:`fan_out` ``(a, b, c, merge=..., max_concurrency=...)``: every agent answers the same
  prompt, at most ``max_concurrency`` at once; ``merge`` (a function of the results, or an
  agent given the prompt and the answers) makes one answer of them; by default the answers
  are listed under the agents' names, in the order the agents were given.

Contract (every kind):

- A pipeline is itself an agent: ``run``, ``run_sync`` and ``stream`` take the arguments of
  :class:`~shelfhand.agent.agent.Agent`'s, and it can be a subagent or a tool
  (:func:`~shelfhand.agent.supervisor.as_tool`).
- Each step runs for the caller (the same ``UserContext``), as a delegated run one level
  deeper (audit records carry the pipeline run's trace id as their parent).
- Streams carry ``SubagentStarted``/``SubagentFinished`` per step (``subagent`` = the step
  agent's name) and the steps' tool events tagged with it; text deltas only of the step that
  gives the answer.
- Passages keep one numbering per pipeline run: a step's ``[1]`` is renumbered, in its
  answer and its citations, into the pipeline's numbers before the next step reads it.
- A step that ends with ``human_needed`` (or an ``external`` tool call) ends the pipeline
  with that result.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import inspect
import re
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Unpack

from shelfhand.core.citations import unknown_citations
from shelfhand.core.context import RunContext
from shelfhand.core.errors import InvalidArgumentError, RoutingError
from shelfhand.core.events import (
    Event,
    Final,
    SubagentFinished,
    SubagentStarted,
    TextDelta,
    TextWithdrawn,
    ToolFinished,
    ToolStarted,
)
from shelfhand.core.messages import Citation, Message
from shelfhand.core.results import RunResult
from shelfhand.core.tracing import enter, leave, start_span, tracing_on

from .runs import RunOptions, run_closing, run_to_final
from .supervisor import renumber_citations, tag_event

if TYPE_CHECKING:
    from shelfhand.tools.approvals import Approvals

    from .subagents import Delegable

__all__ = [
    "Conditional",
    "FanOut",
    "Pipeline",
    "RoutingError",
    "Sequential",
    "conditional",
    "fan_out",
    "sequential",
]

Router = Callable[[str], "str | Awaitable[str]"]
Merge = Callable[[Sequence[RunResult]], "str | Awaitable[str]"]
_STOPS = ("human_needed", "external_tool")


class _Step:
    """Where one step's result lands (async generators cannot return values)."""

    result: RunResult | None = None


@dataclass(slots=True, kw_only=True)
class _Run:
    """One run of a pipeline: what its steps share, and the results they leave."""

    prompt: str
    root: RunContext
    """The pipeline's run: its steps run one level deeper, for its caller."""
    history: Sequence[Message]
    """For the steps that answer the prompt itself (the first, a route, a fan-out's)."""
    approvals: Approvals | None
    results: list[RunResult] = field(default_factory=list)
    """Every step's result, in order."""
    answer: RunResult | None = None
    """The result that is the pipeline's answer."""


class Pipeline(abc.ABC):
    """What every pipeline shares: the agent interface and running one step; a pipeline says
    how its steps run in :meth:`_steps`."""

    def __init__(self, name: str, description: str = "") -> None:
        self.name = name
        self.description = description

    async def run(self, prompt: str | Message, **options: Unpack[RunOptions]) -> RunResult:
        """Run to the answer (arguments as :meth:`stream`)."""
        return await run_to_final(self.stream(prompt, **options), what=f"pipeline {self.name}")

    def run_sync(self, prompt: str | Message, **options: Unpack[RunOptions]) -> RunResult:
        """``run`` for scripts (not inside a running event loop); the steps' models'
        connections are closed with its loop (:func:`~shelfhand.agent.runs.run_closing`)."""
        return run_closing(self, lambda: self.run(prompt, **options))

    @abc.abstractmethod
    def chat_models(self) -> Iterator[object]:
        """The agents (and agent routers and merges) of its steps: their models are what
        it asks (see :func:`~shelfhand.agent.runs.chat_models`)."""

    async def stream(
        self, prompt: str | Message, **options: Unpack[RunOptions]
    ) -> AsyncGenerator[Event, None]:
        """The steps' events and one ``Final``.

        Args:
            prompt: The message the first step (or the router) gets.
            **options: As for :meth:`Agent.run <shelfhand.agent.agent.Agent.run>`
                (:class:`~shelfhand.agent.runs.RunOptions`); ``parent``: the run delegating
                to this one.
        """
        parent = options.get("parent")
        root = RunContext.start(
            agent_name=self.name,
            user=None if parent else options.get("context"),
            deps=options.get("deps"),
            trace_id=options.get("trace_id"),
            parent=parent,
        )
        first = Message.user(prompt) if isinstance(prompt, str) else prompt
        run = _Run(
            prompt=first.text,
            root=root,
            history=options.get("history", ()),
            approvals=options.get("approvals"),
        )
        # a traced pipeline is one span, its steps' runs nest under it
        span = (
            start_span(
                f"invoke_agent {self.name}",
                "pipeline",
                trace_id=root.trace_id,
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": self.name,
                    "shelfhand.pipeline": type(self).__name__,
                },
            )
            if tracing_on()
            else None
        )
        token = enter(span)
        try:
            async with aclosing(self._steps(run)) as events:
                async for event in events:
                    yield event
            result = self._combine(first, run)
        except BaseException as exc:
            if parent is not None:  # the steps that ran, a failed one too, still count
                parent.delegated.add(run.root.delegated.total)
            if span is not None:
                span.fail(type(exc).__name__)
            raise
        else:
            if parent is not None:  # a delegated pipeline: its parent's usage counts its steps
                parent.delegated.add(result.usage)
        finally:
            leave(span, token)
        yield Final(result=result)

    @abc.abstractmethod
    def _steps(self, run: _Run) -> AsyncGenerator[Event, None]:
        """The steps' events, in order; each step's result is appended to ``run.results``
        and the answer's result lands in ``run.answer``."""

    async def _step(
        self,
        agent: Delegable,
        prompt: str,
        run: _Run,
        out: _Step,
        *,
        history: Sequence[Message] = (),
        show_text: bool = False,
    ) -> AsyncGenerator[Event, None]:
        """Run one step for the pipeline's caller; its result (renumbered) lands in ``out``."""
        root = run.root
        depth = root.depth + 1
        yield SubagentStarted(subagent=agent.name, depth=depth, task=prompt)
        started = time.perf_counter()
        result: RunResult | None = None
        try:
            events = agent.stream(prompt, history=history, approvals=run.approvals, parent=root)
            async with aclosing(events) as stream:  # type: ignore[type-var]
                async for event in stream:
                    if isinstance(event, Final):
                        result = event.result
                    elif isinstance(event, ToolStarted | ToolFinished) and event.agent is None:
                        yield tag_event(event, agent.name)
                    elif not isinstance(event, TextDelta | TextWithdrawn) or show_text:
                        yield event
        finally:
            ms = (time.perf_counter() - started) * 1000
            reason = result.stop_reason if result is not None else ""
            yield SubagentFinished(
                subagent=agent.name, depth=depth, is_error=result is None, stop_reason=reason,
                duration_ms=ms,
            )  # fmt: skip
        if result is None:
            raise RuntimeError(f"pipeline step {agent.name} ended without a final event")
        text, citations = renumber_citations(result.output, result.citations, root)
        out.result = replace(result, output=text, citations=citations)

    async def _record(
        self,
        agent: Delegable,
        prompt: str,
        run: _Run,
        *,
        answers: bool,
        history: Sequence[Message] = (),
        show_text: bool = False,
    ) -> AsyncGenerator[Event, None]:
        """:meth:`_step`, its result appended to ``run.results`` (and, when it ``answers``,
        the pipeline's answer)."""
        out = _Step()
        async with aclosing(
            self._step(agent, prompt, run, out, history=history, show_text=show_text)
        ) as events:
            async for event in events:
                yield event
        assert out.result is not None
        run.results.append(out.result)
        if answers:
            run.answer = out.result

    def _combine(self, first: Message, run: _Run) -> RunResult:
        results, answer = run.results, run.answer
        output = answer.output if answer is not None else ""
        citations = _unique(c for r in results for c in r.citations)
        return RunResult(
            output=output,
            messages=(first, Message.assistant(output)),
            citations=citations,
            # every step is a run delegated by the pipeline's: it added its usage there
            usage=run.root.delegated.total,
            iterations=sum(r.iterations for r in results),
            stop_reason=answer.stop_reason if answer is not None else "final",
            external_calls=answer.external_calls if answer is not None else (),
            trace_id=run.root.trace_id,
            unknown_citations=unknown_citations(output, citations),
        )


class Sequential(Pipeline):
    """Each agent answers the previous one's answer (see :func:`sequential`)."""

    def __init__(self, agents: Sequence[Delegable], *, name: str, description: str = "") -> None:
        if not agents:
            raise InvalidArgumentError("sequential needs at least one agent")
        super().__init__(name, description)
        self.agents = tuple(agents)

    def chat_models(self) -> Iterator[object]:
        yield from self.agents

    async def _steps(self, run: _Run) -> AsyncGenerator[Event, None]:
        current = run.prompt
        last = len(self.agents) - 1
        for i, agent in enumerate(self.agents):
            step = self._record(
                agent, current, run, answers=True, history=run.history if i == 0 else (),
                show_text=i == last,
            )  # fmt: skip
            async with aclosing(step) as events:
                async for event in events:
                    yield event
            if run.results[-1].stop_reason in _STOPS:
                return
            current = run.results[-1].output


class Conditional(Pipeline):
    """One agent, chosen by a router, answers (see :func:`conditional`)."""

    def __init__(
        self,
        router: Router | Delegable,
        routes: Mapping[str, Delegable],
        *,
        default: Delegable | None = None,
        name: str,
        description: str = "",
    ) -> None:
        if not routes:
            raise InvalidArgumentError("conditional needs at least one route")
        super().__init__(name, description)
        self.router = router
        self.routes = dict(routes)
        self.default = default

    def chat_models(self) -> Iterator[object]:
        if hasattr(self.router, "stream"):  # an agent (a function asks no model)
            yield self.router
        yield from self.routes.values()
        if self.default is not None:
            yield self.default

    async def _steps(self, run: _Run) -> AsyncGenerator[Event, None]:
        router, prompt = self.router, run.prompt
        if hasattr(router, "stream"):
            step = self._record(router, prompt, run, answers=False)  # type: ignore[arg-type]
            async with aclosing(step) as events:
                async for event in events:
                    yield event
            said = run.results[-1].output
        else:
            chosen = router(prompt)  # type: ignore[operator]
            said = str(await chosen if inspect.isawaitable(chosen) else chosen)
        key = _route_key(said, self.routes)
        agent = self.routes[key] if key is not None else self.default
        if agent is None:
            known = ", ".join(self.routes)
            raise RoutingError(
                f"pipeline {self.name}: the router chose {said.strip()[:80]!r}, which is not a "
                f"route ({known}), and there is no default"
            )
        step = self._record(agent, prompt, run, answers=True, history=run.history, show_text=True)
        async with aclosing(step) as events:
            async for event in events:
                yield event


class FanOut(Pipeline):
    """Every agent answers the same prompt; one answer is merged (see :func:`fan_out`)."""

    def __init__(
        self,
        agents: Sequence[Delegable],
        *,
        merge: Merge | Delegable | None = None,
        max_concurrency: int = 4,
        name: str,
        description: str = "",
    ) -> None:
        if not agents:
            raise InvalidArgumentError("fan_out needs at least one agent")
        if max_concurrency < 1:
            raise InvalidArgumentError("max_concurrency must be at least 1")
        super().__init__(name, description)
        self.agents = tuple(agents)
        self.merge = merge
        self.max_concurrency = max_concurrency

    def chat_models(self) -> Iterator[object]:
        yield from self.agents
        if hasattr(self.merge, "stream"):  # an agent (a function asks no model)
            yield self.merge

    async def _steps(self, run: _Run) -> AsyncGenerator[Event, None]:
        queue: asyncio.Queue[Event | BaseException | None] = asyncio.Queue()
        gate = asyncio.Semaphore(self.max_concurrency)
        outs = [_Step() for _ in self.agents]

        async def one(agent: Delegable, out: _Step) -> None:
            try:
                async with gate:
                    step = self._step(agent, run.prompt, run, out, history=run.history)
                    async with aclosing(step) as events:
                        async for event in events:
                            queue.put_nowait(event)
                queue.put_nowait(None)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                queue.put_nowait(exc)

        tasks = [asyncio.create_task(one(a, o)) for a, o in zip(self.agents, outs, strict=True)]
        try:
            pending = len(tasks)
            while pending:
                item = await queue.get()
                if item is None:
                    pending -= 1
                elif isinstance(item, BaseException):
                    raise item
                else:
                    yield item
        finally:
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await t
        done = [o.result for o in outs if o.result is not None]
        run.results.extend(done)
        merge = self.merge
        if merge is not None and hasattr(merge, "stream"):
            task = f"{run.prompt}\n\n{_sections(self.agents, done)}"
            step = self._record(merge, task, run, answers=True, show_text=True)  # type: ignore[arg-type]
            async with aclosing(step) as events:
                async for event in events:
                    yield event
            return
        if merge is None:
            text = _sections(self.agents, done)
        else:
            merged = merge(done)  # type: ignore[operator]
            text = str(await merged if inspect.isawaitable(merged) else merged)
        yield TextDelta(text=text)
        run.answer = RunResult(output=text, messages=(), trace_id=run.root.trace_id)


def _sections(agents: Sequence[Delegable], results: Sequence[RunResult]) -> str:
    return "\n\n".join(f"## {a.name}\n\n{r.output}" for a, r in zip(agents, results, strict=True))


def _route_key(said: str, routes: Mapping[str, Delegable]) -> str | None:
    """The route a router's answer names: the whole answer (trimmed, any case, quotes and
    final punctuation ignored), else the one route named as a word in it."""
    clean = said.strip().strip("\"'`“”‘’。.!！ ").lower()
    for key in routes:
        if key.lower() == clean:
            return key
    named = [k for k in routes if re.search(rf"(?<![\w-]){re.escape(k.lower())}(?![\w-])", clean)]
    return named[0] if len(named) == 1 else None


def _unique(citations: Any) -> tuple[Citation, ...]:
    seen: dict[tuple[int, str], Citation] = {}
    for c in citations:
        seen.setdefault((c.index, c.chunk_id), c)
    return tuple(seen.values())


def sequential(*agents: Delegable, name: str = "sequential", description: str = "") -> Sequential:
    """``a`` answers the prompt, ``b`` answers ``a``'s answer, ...; the last one's answer is
    the pipeline's."""
    return Sequential(agents, name=name, description=description)


def conditional(
    router: Router | Delegable,
    routes: Mapping[str, Delegable],
    *,
    default: Delegable | None = None,
    name: str = "conditional",
    description: str = "",
) -> Conditional:
    """The route ``router`` names answers the prompt.

    Args:
        router: A function of the prompt text returning a route key (sync or async), or an
            agent whose answer names one.
        routes: Route key → agent.
        default: The agent for an answer that names no route; without one, such a run
            raises :class:`RoutingError`.
    """
    return Conditional(router, routes, default=default, name=name, description=description)


def fan_out(
    *agents: Delegable,
    merge: Merge | Delegable | None = None,
    max_concurrency: int = 4,
    name: str = "fan_out",
    description: str = "",
) -> FanOut:
    """Every agent answers the prompt (at most ``max_concurrency`` at once); ``merge`` makes
    one answer: a function of the results (in the order the agents were given), an agent
    given the prompt and the answers, or ``None`` (the answers under the agents' names)."""
    return FanOut(
        agents, merge=merge, max_concurrency=max_concurrency, name=name, description=description
    )
