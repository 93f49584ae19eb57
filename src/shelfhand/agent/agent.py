"""The ReAct agent (DESIGN K2, K3).

One loop serves ``run`` (returns a :class:`RunResult`) and ``stream`` (yields events): the model
is asked for a reply; tool calls in it are executed through the :class:`Toolkit` (and its
governance pipeline) and their results fed back; the first reply without tool calls is the
answer. Model-facing problems (unknown tool, bad arguments, a raising tool, a timeout, an open
circuit) come back to the model as error results and the loop goes on; caller-facing ones (the
model provider failing) propagate.

What the user sees is kept clean (issue 9): streamed text that may be a text-encoded tool
call is held back until the reply is decided (:mod:`.streaming`), and the text of successive
steps is separated; a blank answer gets one nudge, then an honest fallback
(:mod:`.fallbacks`); a call that keeps failing the same way ends the run and a repeated
successful call is answered from the run's own result (:mod:`.guard`); every request is fitted
to the model's context window (:mod:`.budget`).

Calls of tools marked ``confirm=True`` pause the run: with an :class:`Approvals` registry the
stream yields ``ApprovalRequired`` and waits for ``approve``/``reject``; without one, such calls
are not run and the model is told they need confirmation (a run never hangs on a human that
nobody asked).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from dataclasses import replace
from typing import TYPE_CHECKING, Any

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
from shelfhand.core.results import RunResult, StopReason, Usage
from shelfhand.core.settings import AnswerRetrieval, check_answer_retrieval
from shelfhand.models.base import (
    ChatModel,
    ModelResponse,
    StreamDone,
    StreamText,
    ToolSchema,
)
from shelfhand.models.textcalls import recover_tool_calls
from shelfhand.tools.toolkit import CallReport, Toolkit

from .budget import (
    DEFAULT_CONTEXT_TOKENS,
    GrowingBound,
    TokenCounter,
    fit_messages,
    request_budget,
    schema_tokens,
    size_bound,
)
from .fallbacks import (
    ECHO_NUDGE,
    NUDGE,
    echo_answer,
    echoed_result,
    empty_answer,
    max_iters_answer,
    repeated_call_answer,
    without_copied_note,
)
from .grounding import RETRIEVE_TOOL, UpfrontRetrieval, as_model_sees
from .guard import CallGuard, Repeated
from .memory import ConversationMemory, build_system_prompt
from .rewrite import QueryRewriter
from .step_events import finished, replay_finished, tag_event
from .streaming import STEP_SEPARATOR, CallTextGate

if TYPE_CHECKING:
    from shelfhand.tools.approvals import ApprovalDecision, ApprovalRequest, Approvals

logger = logging.getLogger(__name__)

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant. Use the tools when they help answer; answer in the user's "
    "language. When you use passages returned by a tool, cite them by number like [1][2]. "
    "If the documents do not contain the answer, say so instead of guessing."
)


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
        context_tokens: the model's context window in tokens; ``None``: what the model
            object reports as ``context_tokens``, else 8192. Every request is fitted to it,
            leaving the model's ``max_tokens`` (when it reports one) for the answer.
        replay_repeated_calls: answer a call that already succeeded in this run (same name
            and canonical arguments) from that result instead of running the tool again
            (default). ``False`` runs every call; identical failing calls are still stopped.
        retrieval: Where answers get their passages (see :mod:`shelfhand.agent.grounding`):
            ``tool`` (default: the model calls ``retrieve`` if it wants), ``context`` (the
            toolkit's ``retrieve`` is called with the user's message before the model is asked;
            the agent keeps a copy of the toolkit without ``retrieve``, so the model is not
            offered it) or ``both`` (up front, and by tool for more).
        rewriter: With ``context``/``both``, rewrites a follow-up message into a
            self-contained query for the up-front retrieval (see
            :mod:`shelfhand.agent.rewrite`); ``None``: the message is the query.
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
        context_tokens: int | None = None,
        replay_repeated_calls: bool = True,
        retrieval: AnswerRetrieval = "tool",
        rewriter: QueryRewriter | None = None,
    ) -> None:
        if context_tokens is not None and context_tokens < 1:
            raise ValueError("context_tokens must be positive")
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
        self.context_tokens = context_tokens
        self.replay_repeated_calls = replay_repeated_calls
        self._schema_cost: tuple[object, int] | None = None
        self.retrieval = check_answer_retrieval(retrieval)
        self._upfront: UpfrontRetrieval | None = None
        if self.retrieval != "tool":
            # ValueError: no retrieve tool
            self._upfront = UpfrontRetrieval(self.toolkit, rewriter=rewriter)
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
        parent: RunContext | None = None,
    ) -> RunResult:
        """Run to the final answer and return it with the transcript and citations.

        ``approvals`` overrides the agent's registry for this run; with a registry but no
        handler, ``run`` waits until someone else approves or rejects (use ``stream`` to see
        the ``ApprovalRequired`` events). ``parent``: the run delegating this one (a
        subagent's run: its caller is the parent's, its depth one more, see
        :mod:`shelfhand.agent.supervisor`).
        """
        final: RunResult | None = None
        # the loop returns right after its final event: drain it rather than leave it
        # suspended (an unfinished async generator is closed by a task the event loop
        # schedules through its self-pipe, which cost about a tenth of a run)
        async for event in self._loop(
            prompt, context, history, deps, streaming=False, approvals=approvals,
            trace_id=trace_id, parent=parent,
        ):  # fmt: skip
            if isinstance(event, Final):
                final = event.result
        if final is None:  # pragma: no cover
            raise RuntimeError("agent loop ended without a final event")
        return final

    async def _run_quiet(
        self,
        prompt: str | Message,
        *,
        history: Sequence[Message],
        approvals: Approvals | None,
        parent: RunContext,
        emit: Callable[[Event], None] | None = None,
        tag: str | None = None,
    ) -> RunResult:
        """A delegated run (see :mod:`shelfhand.agent.supervisor`): ``run`` without building
        the events of its steps, which its caller does not read; with ``emit``, its tool and
        approval events go there as they happen, tool events tagged with ``tag`` (the
        subagent's id), instead of through this run's generators. Citations come back in the
        result only (no ``CitationsFound``)."""
        final: RunResult | None = None
        async for event in self._loop(
            prompt, None, history, None, streaming=False, approvals=approvals, parent=parent,
            quiet=True, emit=emit, tag=tag,
        ):  # fmt: skip
            if isinstance(event, Final):
                final = event.result
        if final is None:  # pragma: no cover
            raise RuntimeError("agent loop ended without a final event")
        return final

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
        parent: RunContext | None = None,
        text_deltas: bool = True,
    ) -> AsyncGenerator[Event, None]:
        """Yield text deltas, tool started/finished, approvals, citations, and one final event.

        ``trace_id`` names the run in logs, audit records and the result (default: a new id);
        ``parent`` as in :meth:`run`. ``text_deltas=False``: the model is asked without
        streaming and no ``TextDelta`` is yielded, only the steps and the final event (for
        callers that show the steps but not the text, e.g. a supervisor running a subagent).
        """
        # aclosing: a consumer that stops early closes the inner generators now, so pending
        # approvals are withdrawn at once rather than whenever the generator is collected
        events = self._loop(
            prompt, context, history, deps, streaming=text_deltas, approvals=approvals,
            trace_id=trace_id, parent=parent,
        )  # fmt: skip
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
        parent: RunContext | None = None,
        quiet: bool = False,
        emit: Callable[[Event], None] | None = None,
        tag: str | None = None,
    ) -> AsyncGenerator[Event, None]:
        """The run's events (see :meth:`stream`); ``quiet``: only the final event, for a
        caller that reads nothing else (:meth:`_run_quiet`): the steps' events are not built,
        or handed to ``emit`` as they happen (tool events tagged with ``tag``)."""
        approvals = approvals if approvals is not None else self.approvals
        run = RunContext.start(
            agent_name=self.name, user=context, deps=deps, trace_id=trace_id, parent=parent
        )
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
        guard = CallGuard(replay=self.replay_repeated_calls)
        nudge: Message | None = None
        nudged = False
        shown = False  # any text streamed in an earlier step of this run
        window, max_tokens = self._window()
        count = TokenCounter()
        model_past = as_model_sees(past)  # earlier turns' up-front passages as text
        sent = GrowingBound([system, *model_past])
        logger.debug("run %s start agent=%s user=%s", run.trace_id, self.name, user.scope)
        if self._upfront is not None:
            async with aclosing(
                self._retrieve_upfront(first, run, new, citations, past)
            ) as upfront:
                async for event in upfront:
                    if not quiet:
                        yield event
                    elif emit is not None and isinstance(event, ToolStarted | ToolFinished):
                        emit(event if tag is None else tag_event(event, tag))

        for iteration in range(1, self.max_iters + 1):
            schemas = self.toolkit.schemas(user)
            conversation = [
                system,
                *model_past,
                *(as_model_sees(new) if self._upfront is not None else new),
                *([nudge] if nudge is not None else []),
            ]
            # up-front passages are shown as text in the question: count, don't bound
            bound = (
                None
                if self._upfront is not None
                else sent.total(new) + (size_bound(nudge) if nudge is not None else 0)
            )
            nudge = None
            budget = request_budget(window, max_tokens, tools_tokens=self._tools_tokens(schemas))
            request = fit_messages(
                conversation, budget, keep_from=1 + len(model_past), count=count, bound=bound
            )
            step_shown = False
            if streaming:
                gate = CallTextGate(active=bool(schemas))
                response: ModelResponse | None = None
                async for chunk in self.model.stream(request, tools=schemas):
                    if isinstance(chunk, StreamText):
                        out = gate.feed(chunk.text) if chunk.text else ""
                        if out:
                            if shown and not step_shown:
                                yield TextDelta(text=STEP_SEPARATOR)
                            step_shown = True
                            yield TextDelta(text=out)
                    elif isinstance(chunk, StreamDone):
                        response = chunk.response
                if response is None:
                    raise RuntimeError(f"model {self.model.name} stream ended without a reply")
                reply = _recovered(response.message, schemas)
                # an echo of a tool's JSON result was held back whole: it is not shown
                echoed = None if gate.sent else _echoed(reply, new)
                if echoed is None:
                    reply = _without_copied_note(reply)
                rest = gate.finish("" if echoed is not None else reply.text)
                if rest:
                    if shown and not step_shown:
                        yield TextDelta(text=STEP_SEPARATOR)
                    step_shown = True
                    yield TextDelta(text=rest)
                shown = shown or step_shown
            else:
                response = await self.model.request(request, tools=schemas)
                reply = _recovered(response.message, schemas)
                echoed = _echoed(reply, new)
                if echoed is None:
                    reply = _without_copied_note(reply)
            if response.usage is not None:
                input_tokens += response.usage.input_tokens
                output_tokens += response.usage.output_tokens
            calls = reply.tool_calls
            if not calls:
                reason: StopReason = "final"
                text = reply.text
                if echoed is not None or not text.strip():
                    if not nudged and iteration < self.max_iters:
                        nudged = True
                        nudge = Message.user(
                            NUDGE if echoed is None else ECHO_NUDGE.format(tool=echoed.name)
                        )
                        continue
                    text = empty_answer(citations, new) if echoed is None else echo_answer(echoed)
                    reason = "empty"
                    reply = Message.assistant(text)
                    if streaming:
                        yield TextDelta(text=STEP_SEPARATOR + text if shown else text)
                new.append(reply)
                # remember before yielding: a consumer may stop at the final event
                await self._remember(new)
                yield self._final(
                    text, new, citations, run, iteration, input_tokens, output_tokens, reason
                )
                return
            new.append(reply)

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

            repeated = next((r for c in calls if (r := guard.refused(c)) is not None), None)
            if repeated is not None:
                text = repeated_call_answer(repeated, citations)
                new.append(_not_run(calls, repeated))
                new.append(Message.assistant(text))
                if streaming:
                    yield TextDelta(text=STEP_SEPARATOR + text if shown else text)
                await self._remember(new)
                yield self._final(
                    text, new, citations, run, iteration, input_tokens, output_tokens,
                    "repeated_call",
                )  # fmt: skip
                return

            step = replace(run, iteration=iteration) if iteration > 1 else run
            results: list[ToolResultBlock] = []
            if quiet:
                await self._execute_quiet(calls, step, results, approvals, guard, emit, tag)
            else:
                async with aclosing(self._execute(calls, step, results, approvals, guard)) as steps:
                    async for event in steps:
                        yield event
            found = _new_citations(results, citations)
            if found:
                citations.extend(found)
                if not quiet:
                    yield CitationsFound(citations=tuple(found))
            new.append(Message.tool(results))

        text = max_iters_answer(self.max_iters, new)
        new.append(Message.assistant(text))
        if streaming:
            yield TextDelta(text=STEP_SEPARATOR + text if shown else text)
        await self._remember(new)
        yield self._final(
            text, new, citations, run, self.max_iters, input_tokens, output_tokens, "max_iters"
        )

    def _tools_tokens(self, schemas: Sequence[ToolSchema]) -> int:
        """The schemas' token estimate, kept while the toolkit hands out the same list."""
        cost = self._schema_cost
        if cost is None or cost[0] is not schemas:
            cost = (schemas, schema_tokens(schemas))
            self._schema_cost = cost
        return cost[1]

    def _window(self) -> tuple[int, int | None]:
        """The context window and the tokens to reserve for the answer (when known)."""
        context = (
            self.context_tokens
            or _positive_int(getattr(self.model, "context_tokens", None))
            or DEFAULT_CONTEXT_TOKENS
        )
        return context, _positive_int(getattr(self.model, "max_tokens", None))

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
        self,
        first: Message,
        run: RunContext,
        new: list[Message],
        citations: list[Citation],
        history: Sequence[Message] = (),
    ) -> AsyncGenerator[Event, None]:
        """The ``context``/``both`` step: retrieve for the prompt before the model is asked;
        the call and its numbered passages join the transcript as if the model had called."""
        assert self._upfront is not None
        plan = await self._upfront.plan(first, history)
        calls = plan.calls
        if not calls:
            return
        results: list[ToolResultBlock] = []
        for call in calls:
            yield ToolStarted(call_id=call.id, name=call.name, arguments=call.arguments)
            report = await self._upfront.execute(call, run)
            results.append(report.result)
            yield finished(report, report.result)
        new.append(Message.assistant(tool_calls=calls, metadata=plan.metadata()))
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
        guard: CallGuard,
    ) -> AsyncGenerator[Event, None]:
        """Run the calls (concurrently when all are concurrency-safe); fill ``results`` in order.

        A call that already succeeded in this run is answered from that result (see
        :class:`CallGuard`). Calls needing confirmation are put to ``approvals`` first, all at
        once, before any call of the reply runs; at most ``max_concurrency`` calls execute at
        the same time.
        """
        for call in calls:
            yield ToolStarted(call_id=call.id, name=call.name, arguments=call.arguments)
        done: dict[str, ToolResultBlock] = {}
        for call in calls:
            earlier = guard.replay(call)
            if earlier is not None:
                done[call.id] = earlier
                yield replay_finished(call, earlier)
        todo = [c for c in calls if c.id not in done]
        decisions: dict[str, ApprovalDecision] = {}
        if approvals is not None and todo:
            async with aclosing(self._ask(todo, run, approvals, decisions)) as asking:
                async for event in asking:
                    yield event
        kit = self.toolkit
        if len(todo) > 1 and kit.is_concurrency_safe([c.name for c in todo]):
            gate = asyncio.Semaphore(self.max_concurrency)

            async def one(call: ToolCallBlock) -> tuple[ToolCallBlock, CallReport]:
                async with gate:
                    return call, await kit.execute(call, run, approval=decisions.get(call.id))

            tasks = [asyncio.ensure_future(one(c)) for c in todo]
            try:
                for next_done in asyncio.as_completed(tasks):
                    call, report = await next_done
                    done[call.id] = guard.record(call, report.result)
                    yield finished(report, done[call.id])
            finally:
                for t in tasks:
                    t.cancel()
        else:
            for call in todo:
                report = await kit.execute(call, run, approval=decisions.get(call.id))
                done[call.id] = guard.record(call, report.result)
                yield finished(report, done[call.id])
        results.extend(done[c.id] for c in calls)

    async def _execute_quiet(
        self,
        calls: Sequence[ToolCallBlock],
        run: RunContext,
        results: list[ToolResultBlock],
        approvals: Approvals | None,
        guard: CallGuard,
        emit: Callable[[Event], None] | None,
        tag: str | None,
    ) -> None:
        """:meth:`_execute` for a quiet run: the same calls in the same order, with the
        same replays, approvals and concurrency; its events are built only for ``emit``
        (tool events tagged with ``tag``), which gets them at the points ``_execute`` yields
        them."""
        if emit is not None:
            for call in calls:
                emit(
                    ToolStarted(
                        call_id=call.id, name=call.name, arguments=call.arguments, agent=tag
                    )
                )
        done: dict[str, ToolResultBlock] = {}
        for call in calls:
            earlier = guard.replay(call)
            if earlier is not None:
                done[call.id] = earlier
                if emit is not None:
                    emit(replay_finished(call, earlier, tag))
        todo = [c for c in calls if c.id not in done]
        decisions: dict[str, ApprovalDecision] = {}
        if approvals is not None and todo:
            async with aclosing(self._ask(todo, run, approvals, decisions)) as asking:
                async for event in asking:
                    if emit is not None:
                        emit(event)
        kit = self.toolkit
        if len(todo) > 1 and kit.is_concurrency_safe([c.name for c in todo]):
            gate = asyncio.Semaphore(self.max_concurrency)

            async def one(call: ToolCallBlock) -> tuple[ToolCallBlock, CallReport]:
                async with gate:
                    return call, await kit.execute(call, run, approval=decisions.get(call.id))

            tasks = [asyncio.ensure_future(one(c)) for c in todo]
            try:
                for next_done in asyncio.as_completed(tasks):
                    call, report = await next_done
                    done[call.id] = guard.record(call, report.result)
                    if emit is not None:
                        emit(finished(report, done[call.id], tag))
            finally:
                for t in tasks:
                    t.cancel()
        else:
            for call in todo:
                report = await kit.execute(call, run, approval=decisions.get(call.id))
                done[call.id] = guard.record(call, report.result)
                if emit is not None:
                    emit(finished(report, done[call.id], tag))
        results.extend(done[c.id] for c in calls)

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


def _recovered(reply: Message, schemas: Sequence[ToolSchema]) -> Message:
    """``reply`` with tool calls written as text turned into calls (whatever the provider did)."""
    if reply.tool_calls or not schemas:
        return reply
    content = reply.text
    if "{" not in content and "[" not in content:
        return reply  # the common case: no JSON, so no call
    names = {str(s.get("function", {}).get("name", "")) for s in schemas}
    text, calls = recover_tool_calls(content, names)
    if not calls:
        return reply
    return replace(reply, content=Message.assistant(text, tool_calls=calls).content)


def _echoed(reply: Message, new: Sequence[Message]) -> ToolResultBlock | None:
    """The tool result of the run that a final ``reply`` only repeats (see ``echoed_result``)."""
    return None if reply.tool_calls else echoed_result(reply.text, new)


def _without_copied_note(reply: Message) -> Message:
    """A final ``reply`` without a replay note the model copied into its answer."""
    if reply.tool_calls:
        return reply
    text = without_copied_note(reply.text)
    return reply if text == reply.text else replace(reply, content=Message.assistant(text).content)


def _not_run(calls: Sequence[ToolCallBlock], repeated: Repeated) -> Message:
    """Results for the calls of a reply the run stopped at (keeps the transcript valid)."""
    return Message.tool(
        ToolResultBlock(
            call_id=c.id,
            name=c.name,
            content=f"not run: the run stopped because {repeated.call.name} kept failing",
            is_error=True,
        )
        for c in calls
    )


def _positive_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


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
