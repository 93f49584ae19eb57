"""The ReAct agent (DESIGN K2, K3).

One loop serves ``run`` (returns a :class:`RunResult`) and ``stream`` (yields events): the model
is asked for a reply; tool calls in it are executed through the :class:`Toolkit` (and its
governance pipeline) and their results fed back; the first reply without tool calls is the
answer. Model-facing problems (unknown tool, bad arguments, a raising tool, a timeout, an open
circuit) come back to the model as error results and the loop goes on; caller-facing ones (the
model provider failing) propagate.

Calls of tools marked ``confirm=True`` pause the run: with an :class:`Approvals` registry the
stream yields ``ApprovalRequired`` and waits for ``approve``/``reject``; without one, such calls
are not run and the model is told they need confirmation (a run never hangs on a human that
nobody asked).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from shelfhand.core.citations import unknown_citations
from shelfhand.core.context import RunContext, UserContext
from shelfhand.core.events import (
    ApprovalDecided,
    ApprovalRequired,
    CitationsFound,
    Event,
    Final,
    TextDelta,
    ToolFinished,
    ToolStarted,
)
from shelfhand.core.messages import Citation, Message, ToolCallBlock, ToolResultBlock
from shelfhand.core.settings import AnswerRetrieval, check_answer_retrieval
from shelfhand.models.base import ChatModel, ModelResponse, StreamDone, StreamText, Usage
from shelfhand.tools.toolkit import CallReport, Toolkit

from .grounding import RETRIEVE_TOOL, UPFRONT, UpfrontRetrieval, as_model_sees
from .memory import ConversationMemory, build_system_prompt

if TYPE_CHECKING:
    from shelfhand.tools.approvals import ApprovalDecision, ApprovalRequest, Approvals

logger = logging.getLogger(__name__)

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant. Use the tools when they help answer; answer in the user's "
    "language. When you use passages returned by a tool, cite them by number like [1][2]. "
    "If the documents do not contain the answer, say so instead of guessing."
)

StopReason = Literal["final", "max_iters", "external_tool"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    """What one agent run produced."""

    output: str
    """The final answer text."""
    messages: tuple[Message, ...]
    """This run's transcript: the prompt, every model reply and every tool result."""
    citations: tuple[Citation, ...] = ()
    """Evidence returned by tools during the run, in the order it arrived."""
    usage: Usage = field(default_factory=Usage)
    iterations: int = 0
    stop_reason: StopReason = "final"
    external_calls: tuple[ToolCallBlock, ...] = ()
    """Calls of ``external`` tools, for the caller to execute (when stop_reason says so)."""
    trace_id: str = ""
    unknown_citations: tuple[int, ...] = ()
    """Numbers the answer cites (``[9]``) that no passage of this run carries: show them as
    plain text, never as links."""


class Agent:
    """A tool-using agent.

    Args:
        name: shown in logs and traces.
        model: the chat model.
        toolkit: the tools the model may call (filtered per caller's permission).
        system_prompt: the base instructions.
        max_iters: the most model calls in one run; when reached, the run stops with an
            honest answer saying so.
        max_concurrency: the most tool calls of one reply executing at the same time (the
            fan-out cap; calls run in parallel only when every call in the reply is
            ``concurrency_safe``, otherwise one after another).
        memory: a conversation memory to read history from and write the run back to.
        approvals: where ``confirm=True`` tool calls wait for a human decision (see
            :class:`~shelfhand.tools.approvals.Approvals`); ``None``: such calls are not run
            and the model reads that they need confirmation. ``run``/``stream`` may override it.
        retrieval: Where answers get their passages (see :mod:`shelfhand.agent.grounding`):
            ``tool`` (default: the model calls ``retrieve`` if it wants), ``context`` (the
            toolkit's ``retrieve`` is called with the user's message before the model is asked;
            the agent keeps a copy of the toolkit without ``retrieve``, so the model is not
            offered it) or ``both`` (up front, and by tool for more).
    """

    def __init__(
        self,
        *,
        model: ChatModel,
        name: str = "agent",
        toolkit: Toolkit | None = None,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        max_iters: int = 10,
        max_concurrency: int = 8,
        memory: ConversationMemory | None = None,
        description: str = "",
        approvals: Approvals | None = None,
        retrieval: AnswerRetrieval = "tool",
    ) -> None:
        if max_iters < 1:
            raise ValueError("max_iters must be at least 1")
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        self.name = name
        self.description = description
        self.model = model
        self.toolkit = toolkit if toolkit is not None else Toolkit()
        self.system_prompt = system_prompt
        self.max_iters = max_iters
        self.max_concurrency = max_concurrency
        self.memory = memory
        self.approvals = approvals
        self.retrieval = check_answer_retrieval(retrieval)
        self._upfront: UpfrontRetrieval | None = None
        if self.retrieval != "tool":
            self._upfront = UpfrontRetrieval(self.toolkit)  # ValueError: no retrieve tool
            if self.retrieval == "context":  # the model is not offered retrieve
                self.toolkit = self.toolkit.copy()
                self.toolkit.remove(RETRIEVE_TOOL)

    # --- public API ------------------------------------------------------------------------
    async def run(
        self,
        prompt: str | Message,
        *,
        context: UserContext | None = None,
        history: Sequence[Message] = (),
        deps: Any = None,
        approvals: Approvals | None = None,
        trace_id: str | None = None,
    ) -> RunResult:
        """Run to the final answer and return it with the transcript and citations.

        ``approvals`` overrides the agent's registry for this run; with a registry but no
        handler, ``run`` waits until someone else approves or rejects (use ``stream`` to see
        the ``ApprovalRequired`` events).
        """
        async for event in self._loop(
            prompt, context, history, deps, streaming=False, approvals=approvals, trace_id=trace_id
        ):
            if isinstance(event, Final):
                return event.result
        raise RuntimeError("agent loop ended without a final event")  # pragma: no cover

    def run_sync(
        self,
        prompt: str | Message,
        *,
        context: UserContext | None = None,
        history: Sequence[Message] = (),
        deps: Any = None,
        approvals: Approvals | None = None,
        trace_id: str | None = None,
    ) -> RunResult:
        """``run`` for scripts and the CLI (not inside a running event loop)."""
        return asyncio.run(
            self.run(
                prompt,
                context=context,
                history=history,
                deps=deps,
                approvals=approvals,
                trace_id=trace_id,
            )
        )

    async def stream(
        self,
        prompt: str | Message,
        *,
        context: UserContext | None = None,
        history: Sequence[Message] = (),
        deps: Any = None,
        approvals: Approvals | None = None,
        trace_id: str | None = None,
    ) -> AsyncGenerator[Event, None]:
        """Yield text deltas, tool started/finished, approvals, citations, and one final event.

        ``trace_id`` names the run in logs, audit records and the result (default: a new id).
        """
        # aclosing: a consumer that stops early closes the inner generators now, so pending
        # approvals are withdrawn at once rather than whenever the generator is collected
        events = self._loop(
            prompt, context, history, deps, streaming=True, approvals=approvals, trace_id=trace_id
        )
        async with aclosing(events):
            async for event in events:
                yield event

    # --- the loop --------------------------------------------------------------------------
    async def _loop(
        self,
        prompt: str | Message,
        context: UserContext | None,
        history: Sequence[Message],
        deps: Any,
        *,
        streaming: bool,
        approvals: Approvals | None = None,
        trace_id: str | None = None,
    ) -> AsyncGenerator[Event, None]:
        approvals = approvals if approvals is not None else self.approvals
        run = RunContext.start(agent_name=self.name, user=context, deps=deps, trace_id=trace_id)
        user = run.user
        first = Message.user(prompt) if isinstance(prompt, str) else prompt
        memory = self.memory
        past = list(memory.messages) if memory is not None else list(history)
        system = Message.system(
            build_system_prompt(self.system_prompt, summary=memory.summary if memory else "")
        )
        new: list[Message] = [first]
        citations: list[Citation] = []
        input_tokens = output_tokens = 0
        logger.debug("run %s start agent=%s user=%s", run.trace_id, self.name, user.scope)
        if self._upfront is not None:
            async with aclosing(self._retrieve_upfront(first, run, new, citations)) as upfront:
                async for event in upfront:
                    yield event

        for iteration in range(1, self.max_iters + 1):
            schemas = self.toolkit.schemas(user)
            conversation = [system, *as_model_sees([*past, *new])]
            if streaming:
                response: ModelResponse | None = None
                async for chunk in self.model.stream(conversation, tools=schemas):
                    if isinstance(chunk, StreamText):
                        if chunk.text:
                            yield TextDelta(text=chunk.text)
                    elif isinstance(chunk, StreamDone):
                        response = chunk.response
                if response is None:
                    raise RuntimeError(f"model {self.model.name} stream ended without a reply")
            else:
                response = await self.model.request(conversation, tools=schemas)
            if response.usage is not None:
                input_tokens += response.usage.input_tokens
                output_tokens += response.usage.output_tokens
            reply = response.message
            new.append(reply)
            calls = reply.tool_calls
            if not calls:
                # remember before yielding: a consumer may stop at the final event
                await self._remember(new)
                yield self._final(
                    reply.text, new, citations, run, iteration, input_tokens, output_tokens
                )
                return

            external = tuple(c for c in calls if self._is_external(c.name))
            if external:
                result = RunResult(
                    output=reply.text,
                    messages=tuple(new),
                    citations=tuple(citations),
                    usage=Usage(input_tokens=input_tokens, output_tokens=output_tokens),
                    iterations=iteration,
                    stop_reason="external_tool",
                    external_calls=external,
                    trace_id=run.trace_id,
                )
                yield Final(result=result)
                return

            step = replace(run, iteration=iteration) if iteration > 1 else run
            results: list[ToolResultBlock] = []
            async with aclosing(self._execute(calls, step, results, approvals)) as steps:
                async for event in steps:
                    yield event
            found = _new_citations(results, citations)
            if found:
                citations.extend(found)
                yield CitationsFound(citations=tuple(found))
            new.append(Message.tool(results))

        text = self._fallback(new)
        new.append(Message.assistant(text))
        await self._remember(new)
        yield self._final(
            text, new, citations, run, self.max_iters, input_tokens, output_tokens, "max_iters"
        )

    def _final(
        self,
        text: str,
        new: list[Message],
        citations: list[Citation],
        run: RunContext,
        iterations: int,
        input_tokens: int,
        output_tokens: int,
        reason: StopReason = "final",
    ) -> Final:
        return Final(
            result=RunResult(
                output=text,
                messages=tuple(new),
                citations=tuple(citations),
                usage=Usage(input_tokens=input_tokens, output_tokens=output_tokens),
                iterations=iterations,
                stop_reason=reason,
                trace_id=run.trace_id,
                unknown_citations=unknown_citations(text, citations),
            )
        )

    async def _retrieve_upfront(
        self, first: Message, run: RunContext, new: list[Message], citations: list[Citation]
    ) -> AsyncGenerator[Event, None]:
        """The ``context``/``both`` step: retrieve for the prompt before the model is asked;
        the call and its numbered passages join the transcript as if the model had called."""
        assert self._upfront is not None
        calls = self._upfront.calls(first)
        if not calls:
            return
        results: list[ToolResultBlock] = []
        for call in calls:
            yield ToolStarted(call_id=call.id, name=call.name, arguments=call.arguments)
            report = await self._upfront.execute(call, run)
            results.append(report.result)
            yield _finished(report)
        new.append(Message.assistant(tool_calls=calls, metadata={UPFRONT: True}))
        new.append(Message.tool(results))
        found = _new_citations(results, citations)
        if found:
            citations.extend(found)
            yield CitationsFound(citations=tuple(found))

    async def _remember(self, new: list[Message]) -> None:
        if self.memory is None:
            return
        self.memory.add(new)
        await self.memory.compact(self.model)

    def _is_external(self, name: str) -> bool:
        t = self.toolkit.get(name)
        return t is not None and t.external

    async def _execute(
        self,
        calls: Sequence[ToolCallBlock],
        run: RunContext,
        results: list[ToolResultBlock],
        approvals: Approvals | None,
    ) -> AsyncGenerator[Event, None]:
        """Run the calls (concurrently when all are concurrency-safe); fill ``results`` in order.

        Calls needing confirmation are put to ``approvals`` first, all at once, before any call
        of the reply runs; at most ``max_concurrency`` calls execute at the same time.
        """
        for call in calls:
            yield ToolStarted(call_id=call.id, name=call.name, arguments=call.arguments)
        decisions: dict[str, ApprovalDecision] = {}
        if approvals is not None:
            async with aclosing(self._ask(calls, run, approvals, decisions)) as asking:
                async for event in asking:
                    yield event
        kit = self.toolkit
        if len(calls) > 1 and kit.is_concurrency_safe([c.name for c in calls]):
            gate = asyncio.Semaphore(self.max_concurrency)

            async def one(call: ToolCallBlock) -> CallReport:
                async with gate:
                    return await kit.execute(call, run, approval=decisions.get(call.id))

            tasks = [asyncio.ensure_future(one(c)) for c in calls]
            try:
                for done in asyncio.as_completed(tasks):
                    yield _finished(await done)
            finally:
                for t in tasks:
                    t.cancel()
            results.extend(t.result().result for t in tasks)
        else:
            for call in calls:
                report = await kit.execute(call, run, approval=decisions.get(call.id))
                results.append(report.result)
                yield _finished(report)

    async def _ask(
        self,
        calls: Sequence[ToolCallBlock],
        run: RunContext,
        approvals: Approvals,
        decisions: dict[str, ApprovalDecision],
    ) -> AsyncGenerator[Event, None]:
        """Open an approval for each call that needs one, then wait for every decision."""
        opened: list[ApprovalRequest] = []
        try:
            for call in calls:
                arguments = self.toolkit.approval_arguments(call, run)
                if arguments is None:
                    continue
                request = approvals.open(
                    call_id=call.id,
                    tool=call.name,
                    arguments=arguments,
                    user=run.user,
                    trace_id=run.trace_id,
                )
                opened.append(request)
                yield ApprovalRequired(
                    approval_id=request.id, call_id=call.id, tool=call.name, arguments=arguments
                )
            for request in opened:
                decision = await approvals.wait(request.id)
                decisions[request.call_id] = decision
                yield ApprovalDecided(
                    approval_id=request.id,
                    call_id=request.call_id,
                    tool=request.tool,
                    approved=decision.approved,
                    reason=decision.reason,
                )
        finally:  # a cancelled run leaves nothing pending behind
            for request in opened:
                if request.call_id not in decisions:
                    approvals.discard(request.id)

    def _fallback(self, new: list[Message]) -> str:
        last = next((m for m in reversed(new) if m.role == "tool"), None)
        lines = [
            f"I could not finish within {self.max_iters} steps, so this is not a complete answer."
        ]
        if last is not None:
            lines.append("The last tool results were:")
            lines.extend(f"- {r.name}: {r.content[:300]}" for r in last.tool_results)
        return "\n".join(lines)


def _new_citations(results: Sequence[ToolResultBlock], seen: Sequence[Citation]) -> list[Citation]:
    """The citations of ``results`` not already in ``seen`` (a passage retrieved again keeps
    its number, and is listed once)."""
    keys = {(c.index, c.chunk_id) for c in seen}
    out: list[Citation] = []
    for c in (c for r in results for c in r.citations):
        if (c.index, c.chunk_id) not in keys:
            keys.add((c.index, c.chunk_id))
            out.append(c)
    return out


def _finished(report: CallReport) -> ToolFinished:
    res = report.result
    return ToolFinished(
        call_id=res.call_id,
        name=res.name,
        content=res.content,
        is_error=res.is_error,
        duration_ms=report.duration_ms,
        replayed=report.replayed,
    )
