"""The ReAct loop of :class:`~shelfhand.agent.agent.Agent`, one for every kind of run.

The model is asked for a reply; tool calls in it run as one round (:mod:`.tool_round`) and
their results are fed back; the first reply without tool calls is the answer. Where the run's
events go is its :class:`~.step_events.EventSink`: ``Agent.stream`` yields them all,
``Agent.run`` builds none, a subagent run inside a supervisor's stream hands its tool and
approval events to the supervisor as they happen. The loop is the same for each: same model
requests, same calls, same result.

What the user sees is kept clean (issue 9): streamed text that may be a text-encoded tool
call is held back until the reply is decided (:mod:`.streaming`), and the text of successive
steps is separated; a blank answer gets one nudge, then an honest fallback
(:mod:`.fallbacks`); a call that keeps failing the same way ends the run and a repeated
successful call is answered from the run's own result (:mod:`.guard`); every request is fitted
to the model's context window (:mod:`.budget`).

An answer that states numbers or codes that neither the question nor the conversation holds,
cites passages, says the information is not there (:func:`~.answer_check.guessed`) or states
no amount where the question asks how long or how much (:func:`~.answer_check.needs_search`), when
no tool has run, the caller is offered ``retrieve`` and answers are checked (``answer_check``),
is not taken: the documents were one search away and the model guessed (a small model in
``tool`` mode answers "the warranty is 10 years" without searching). The loop searches for
the user's message itself, as the up-front retrieval does (governed, audited, its call and
result in the transcript; the passages shown to the model as text before the question), and
asks again, once; the answer check then reads the answer against what was found.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from shelfhand.core import metering
from shelfhand.core.citations import only_marks
from shelfhand.core.context import RunContext, UserContext
from shelfhand.core.errors import BudgetExceededError, InvalidArgumentError
from shelfhand.core.events import CitationsFound, Event, TextDelta, TextWithdrawn
from shelfhand.core.messages import Citation, Message, ToolCallBlock, ToolResultBlock
from shelfhand.core.metering import current_meter
from shelfhand.core.results import StopReason, Usage, run_usage
from shelfhand.core.step_counts import current_counting
from shelfhand.core.tracing import current_span, new_trace_id, tracing_on
from shelfhand.models.base import (
    FINISH_REPETITION,
    ChatModel,
    ModelResponse,
    StreamDone,
    StreamText,
    ToolSchema,
)
from shelfhand.tools.toolkit import Toolkit

from .answer_check import needs_search, withdrawal_notice
from .budget import (
    CUT_OFF,
    DEFAULT_CONTEXT_TOKENS,
    GrowingBound,
    TokenCounter,
    cut_call,
    cut_off_usage,
    fit_messages,
    positive_int,
    request_budget,
    schema_tokens,
    size_bound,
)
from .budget_stop import budget_final, budget_stop
from .fallbacks import (
    ECHO_NUDGE,
    MARKS_NUDGE,
    NUDGE,
    echo_answer,
    empty_answer,
    max_iters_answer,
)
from .fallbacks import repeated_call_answer as repeated_answer
from .grounding import RETRIEVE_TOOL, UpfrontRetrieval, as_model_sees
from .guard import CallGuard, Repeated
from .memory import ConversationMemory, build_system_prompt
from .replies import cleaned, external_final, final, new_citations, not_run
from .runs import RunOptions
from .spans import chat_span, cut_chat, end_chat, invoke_agent
from .step_events import EventSink
from .streaming import STEP_SEPARATOR, CallTextGate, step_deltas, withdrawn_rounds
from .tool_round import retrieve_upfront, tool_round

if TYPE_CHECKING:
    from shelfhand.core.pricing import ModelPrice
    from shelfhand.tools.approvals import Approvals

    from .answer_check import AnswerCheck
    from .rewrite import QueryRewriter

__all__ = ["AgentLoop"]

logger = logging.getLogger(__name__)


def _fields_but_iteration(run: RunContext) -> dict[str, Any]:
    """What builds ``run`` again, but its iteration: every step after the first runs its tools
    with the run's context at that iteration (``dataclasses.replace`` would read the fields
    again at each step, twice the cost of building it from these)."""
    return {f.name: getattr(run, f.name) for f in fields(run) if f.init and f.name != "iteration"}


def _own_usage(
    guard: CallGuard,
    input_tokens: int,
    output_tokens: int,
    model_calls: int,
    tool_calls: int,
    retrievals: int,
    cost: float | None,
) -> Usage:
    """What a run used itself, from its counts: the calls its guard replayed (answered from
    an earlier identical call) not counted again."""
    return run_usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        model_calls=model_calls,
        tool_calls=tool_calls - guard.replayed,
        retrievals=retrievals - guard.replayed_searches,
        cost=cost,
    )


def _ended(run: RunContext, options: RunOptions, own: Usage) -> Usage:
    """The usage of the run that ends: its own and its subagents' finished runs'; handed to
    the run that delegated it, if one did (so the turn's usage sums every model call)."""
    delegated = run.delegated.total
    # a run that delegated nothing (most runs) ends with its own usage: adding the empty
    # tally would build an equal one
    usage = own + delegated if delegated.model_calls or delegated.tool_calls else own
    parent = options.get("parent")
    if parent is not None:
        parent.delegated.add(usage)
    return usage


def _failed(
    run: RunContext,
    parent: RunContext,
    own: Usage,
    cut: Usage | None,
    price: ModelPrice | None,
) -> None:
    """Hand what a subagent's run used before its model call failed (``own``, and the call
    ``cut`` off at what its budget charged) to the run that delegated it, as :func:`_ended`
    hands a finished run's: the caller's budget was charged these calls, so the turn's usage
    (its reply, the usage ledger) counts them. Before, a subagent that failed handed over
    nothing, though its parent went on and answered."""
    if cut is not None:
        own = own + cut_call(cut, price)
    parent.delegated.add(own + run.delegated.total)


def _refused(guard: CallGuard, calls: Sequence[ToolCallBlock]) -> Repeated | None:
    """The first of ``calls`` that the guard refuses to run again (see :mod:`.guard`)."""
    for call in calls:
        repeated = guard.refused(call)
        if repeated is not None:
            return repeated
    return None


def _ignore(event: Event) -> None:
    """Where a step's events would go in a run nobody watches (none are built)."""


class AgentLoop:
    """The loop and its per-run machinery; :class:`~shelfhand.agent.agent.Agent` is the
    public face (its constructor sets these attributes, see its docstring)."""

    name: str
    model: ChatModel
    toolkit: Toolkit
    system_prompt: str
    max_iters: int
    max_concurrency: int
    memory: ConversationMemory | None
    approvals: Approvals | None
    context_tokens: int | None
    replay_repeated_calls: bool
    prices: Mapping[str, ModelPrice] | None
    answer_check: AnswerCheck | None
    rewriter: QueryRewriter | None
    _schema_cost: tuple[object, int] | None
    _system: tuple[str, str, Message, int] | None
    _upfront: UpfrontRetrieval | None

    def _loop(
        self, prompt: str | Message, sink: EventSink, options: RunOptions
    ) -> AsyncGenerator[Event, None]:
        """The run's events as ``sink`` asks for them, always ending with one ``Final``
        (right after it, the generator ends); inside an ``invoke_agent`` span when tracing
        is on (see :mod:`.spans`), else the bare steps at no extra cost.

        Raises:
            InvalidArgumentError: ``prompt`` holds half of a surrogate pair alone (text no
                store or reply could carry; the command line and the service refuse it at
                their edges).
        """
        text = prompt if isinstance(prompt, str) else prompt.text
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidArgumentError(
                    "the prompt is not valid Unicode text: it holds half of a surrogate pair "
                    f"alone at character {exc.start}; decode the input as UTF-8"
                ) from None
        if not tracing_on():
            return self._steps(prompt, sink, options)
        if not options.get("trace_id") and current_span() is None:
            # a run that starts a trace: its result names the trace its spans are in
            options = {**options, "trace_id": new_trace_id()}
        steps = self._steps(prompt, sink, options)
        return invoke_agent(
            steps, self.name, options.get("trace_id") or "", prompt, options.get("context")
        )

    async def _steps(
        self, prompt: str | Message, sink: EventSink, options: RunOptions
    ) -> AsyncGenerator[Event, None]:
        """The run's steps (see :meth:`_loop`)."""
        approvals = options.get("approvals")
        if approvals is None:
            approvals = self.approvals
        # where the steps' events go: the stream, or a callback (then a step runs here to its
        # end without waiting at a yield, so it never needs closing)
        stream, emit = sink.stream, sink.emit or _ignore
        run = RunContext.start(
            agent_name=self.name,
            user=options.get("context"),
            deps=options.get("deps"),
            trace_id=options.get("trace_id"),
            parent=options.get("parent"),
        )
        user = run.user
        first = Message.user(prompt) if isinstance(prompt, str) else prompt
        memory = self.memory
        past = list(memory.messages) if memory is not None else list(options.get("history", ()))
        system, system_bound = self._system_message(memory.summary if memory is not None else "")
        new: list[Message] = [first]
        citations: list[Citation] = []
        input_tokens = output_tokens = model_calls = tool_calls = retrievals = 0
        observed = current_span() is not None or current_counting() is not None
        meter = current_meter()
        # the model's price (setting ``prices``): no price, no cost (None), never a guess
        price = self.prices.get(self.model.name) if self.prices else None
        cost: float | None = 0.0 if price is not None else None
        guard = CallGuard(replay=self.replay_repeated_calls)
        nudge: Message | None = None
        nudged = False
        shown = False  # any text streamed in an earlier step of this run
        window, max_tokens = self._window()
        count = TokenCounter()
        model_past = as_model_sees(past)  # earlier turns' up-front passages as text
        sent = GrowingBound(model_past, base=system_bound)
        if logger.isEnabledFor(logging.DEBUG):  # the caller's scope is built for it
            logger.debug("run %s start agent=%s user=%s", run.trace_id, self.name, user.scope)
        # a search made for the model: up front (``context``, ``both``), or once after an
        # answer stating facts that nothing in the run gave (see the module docstring)
        search = self._upfront
        # a search made for the model is shown to it as text before the question, not as a
        # tool exchange it never made (a small model shown one imitates it)
        passages_as_text = search is not None
        reply: Message | None = None
        reason: StopReason
        spent: BudgetExceededError | None = None
        step_fields: dict[str, Any] | None = None
        for iteration in range(1, self.max_iters + 1):
            if search is not None:
                retrieved: list[ToolResultBlock] = []
                searching = retrieve_upfront(search, first, past, run, new, retrieved, sink)
                search = None
                if stream:
                    async with aclosing(searching):
                        async for event in searching:
                            yield event
                else:
                    async for event in searching:
                        emit(event)
                tool_calls += len(retrieved)
                retrievals += len(retrieved)
                found = new_citations(retrieved, citations)
                if found:
                    citations.extend(found)
                    if stream:
                        yield CitationsFound(citations=tuple(found))
            schemas = self.toolkit.schemas(user)
            conversation = [
                system,
                *model_past,
                *(as_model_sees(new) if passages_as_text else new),
                *([nudge] if nudge is not None else []),
            ]
            # up-front passages are shown as text in the question: count, don't bound
            bound = (
                None
                if passages_as_text
                else sent.total(new) + (size_bound(nudge) if nudge is not None else 0)
            )
            nudge = None
            budget = request_budget(window, max_tokens, tools_tokens=self._tools_tokens(schemas))
            request = fit_messages(
                conversation, budget, keep_from=1 + len(model_past), count=count, bound=bound
            )
            # the most a call can use is the model's context window (request and reply): a
            # token estimate of the request could fall short of the provider's count
            try:
                reserved = await metering.reserve(meter, window) if meter is not None else 0
            except BudgetExceededError as exc:
                # nothing done yet, the budget spent before the run: the turn is refused (429);
                # a model call of its own beside the loop (an up-front search's LLM ranking)
                # spent it: the run answers from what that found, as after a call of the loop
                if model_calls == 0 and not run.delegated.total.model_calls:
                    raise
                # the budget ran out mid-run: answer from what the run already found
                reason, text, spent = "budget_exceeded", "", exc
                reply = None
                break
            chat = chat_span(self.model) if observed else None
            first_token: int | None = None
            cut: list[str] = []  # the text streamed: charged and counted if cut off
            try:
                if sink.text:
                    gate = CallTextGate(active=bool(schemas))
                    streamed: ModelResponse | None = None
                    step_text: list[str] = []  # what this step showed (withdrawn if it guessed)
                    async for chunk in self.model.stream(request, tools=schemas):
                        if isinstance(chunk, StreamText):
                            if chat is not None and first_token is None:
                                first_token = time.time_ns()
                            cut.append(chunk.text)
                            piece = gate.feed(chunk.text) if chunk.text else ""
                            if piece:
                                for delta in step_deltas(piece, step_text, shown):
                                    yield delta
                        elif isinstance(chunk, StreamDone):
                            streamed = chunk.response
                    if streamed is None:
                        raise RuntimeError(f"model {self.model.name} stream ended without a reply")
                    response = streamed
                else:
                    response = await self.model.request(request, tools=schemas)
            except BaseException as exc:
                # cut off (the caller went away, a timeout, a stream broken after text) or
                # failed: what it may have cost, charged now without waiting (the run may be
                # closing), and counted (so booked) as charged; a call that failed before any
                # text stays a failed call, charged nothing
                cut_off = bool(cut) or isinstance(exc, CUT_OFF)
                parent = options.get("parent")
                charged = None
                if meter is not None or (cut_off and (chat is not None or parent is not None)):
                    asked = sum(map(count, request)) + self._tools_tokens(schemas)
                    charged = cut_off_usage(exc, asked, cut)
                    if meter is not None:
                        meter.settle_soon(reserved, charged)
                    if chat is not None and cut_off:
                        cut_chat(chat, charged, exc)
                if parent is not None:  # a subagent's run: what it used still counts
                    own = _own_usage(
                        guard, input_tokens, output_tokens, model_calls, tool_calls, retrievals,
                        cost,
                    )  # fmt: skip
                    _failed(run, parent, own, charged if cut_off else None, price)
                raise
            if meter is not None:
                await metering.settle(meter, reserved, response.usage)
            if sink.text:
                # an echo of a tool's JSON result was held back whole: it is not shown
                reply, calls, echo = cleaned(response.message, schemas, new, shown=bool(gate.sent))
                rest = gate.finish("" if echo is not None else reply.text)
                if rest:
                    for delta in step_deltas(rest, step_text, shown):
                        yield delta
                if response.finish_reason == FINISH_REPETITION and step_text and not calls:
                    # stopped in a loop: the rounds streamed after the first go, as the
                    # answer keeps them
                    for event in withdrawn_rounds(step_text, gate.sent, reply.text, first.text):
                        yield event
                shown_before, shown = shown, shown or bool(step_text)
            else:
                reply, calls, echo = cleaned(response.message, schemas, new)
            if chat is not None:
                end_chat(chat, response, first_token)
            model_calls += 1
            if response.usage is not None:
                input_tokens += response.usage.input_tokens
                output_tokens += response.usage.output_tokens
            if cost is not None:  # a call whose usage is unknown makes the run's unknown
                cost = cost + price.cost(response.usage) if price and response.usage else None
            if not calls:
                reason, text = "final", reply.text
                blank = not text.strip()
                # a blank reply, a tool's result repeated, or citation marks alone ("[1][2]")
                # with nothing found to cite: no answer in words (marks of passages found
                # are the answer check's: their best sentences answer, no model call more)
                if echo is not None or blank or (not citations and only_marks(text)):
                    if not nudged and iteration < self.max_iters:
                        nudged = True
                        if echo is not None:
                            nudge = Message.user(ECHO_NUDGE.format(tool=echo.name))
                        else:
                            nudge = Message.user(NUDGE if blank else MARKS_NUDGE)
                        continue
                    reason = "empty"
                    text = empty_answer(citations, new) if echo is None else echo_answer(echo)
                    reply = None  # the fallback answers instead
                elif (
                    self.answer_check is not None
                    and not tool_calls
                    and not passages_as_text  # (no search made for the model yet)
                    and iteration < self.max_iters
                    and self._offers_search(user)
                    and needs_search(text, first.text, past)
                ):
                    # numbers, codes or citation marks that nothing in the conversation gave,
                    # "not provided", or no amount for "how long?", with the documents one
                    # search away and not searched:
                    # the reply is dropped, the documents are searched for the question as if
                    # the model had called, and the model asked again
                    passages_as_text = True
                    # (a follow-up rewritten with the conversation, as up front)
                    search = UpfrontRetrieval(self.toolkit, rewriter=self.rewriter)
                    if sink.text and step_text:  # streamed already: withdrawn, in words too
                        shown = shown_before
                        yield TextWithdrawn(
                            text="".join(step_text),
                            reason="guessed",
                            notice=withdrawal_notice(first.text),
                        )
                    continue
                break
            new.append(reply)

            external = [c for c in calls if self._is_external(c.name)]
            if external:
                usage = _ended(run, options, _own_usage(
                    guard, input_tokens, output_tokens, model_calls, tool_calls, retrievals, cost,
                ))  # fmt: skip
                yield external_final(reply, tuple(external), new, citations, run, iteration, usage)
                return

            repeated = _refused(guard, calls)
            if repeated is not None:
                reason = "repeated_call"
                text = repeated_answer(repeated, citations)
                new.append(not_run(calls, repeated))
                reply = None
                break

            if not self._see_the_step(calls):
                step_run = run
            else:  # the run's context at this iteration, for the tools that read it
                if step_fields is None:
                    step_fields = _fields_but_iteration(run)
                step_run = RunContext(**step_fields, iteration=iteration)
            results: list[ToolResultBlock] = []
            if not sink.listening and approvals is None and len(calls) == 1:
                # the round has no events and nothing to ask: the same result as tool_round's,
                # without an async generator (asyncio registers every one it starts) or a
                # coroutine of its own
                call = calls[0]
                answered = guard.replay(call)
                if answered is None:
                    answered = guard.record(call, await self.toolkit.call(call, step_run))
                results.append(answered)
            elif stream:
                steps = self._round(calls, step_run, results, approvals, guard, sink)
                # closed with the stream: a consumer that stops early withdraws the
                # round's pending approvals at once
                async with aclosing(steps):
                    async for event in steps:
                        yield event
            else:
                async for event in self._round(calls, step_run, results, approvals, guard, sink):
                    emit(event)
            tool_calls += len(calls)
            for call in calls:
                if call.name == RETRIEVE_TOOL:
                    retrievals += 1
            found = new_citations(results, citations)
            if found:
                citations.extend(found)
                if stream:
                    yield CitationsFound(citations=tuple(found))
            new.append(Message.tool(results))
        else:
            reason, text = "max_iters", max_iters_answer(self.max_iters, new)
            reply = None

        stopped = None
        if spent is not None:
            check = self.answer_check
            synonyms = check.synonyms if check is not None else None
            stopped = budget_stop(spent, first.text, new, citations, synonyms=synonyms)
            text = stopped.output
        if reply is None:  # the run's own answer: shown as the last step's text
            reply = Message.assistant(text)
            if sink.text:
                yield TextDelta(text=STEP_SEPARATOR + text if shown else text)
        new.append(reply)
        # remember before yielding: a consumer may stop at the final event
        summary = await self._remember(new)
        # the calls that ran: one answered from an earlier identical call's result did not
        own = _own_usage(
            guard, input_tokens, output_tokens, model_calls, tool_calls, retrievals, cost
        )
        usage = _ended(run, options, own if summary is None else own + summary)
        done = final(text, new, citations, run, iteration, usage, reason)
        yield done if stopped is None else budget_final(done, stopped)

    def _round(
        self,
        calls: Sequence[ToolCallBlock],
        run: RunContext,
        results: list[ToolResultBlock],
        approvals: Approvals | None,
        guard: CallGuard,
        sink: EventSink,
    ) -> AsyncGenerator[Event, None]:
        """The tool round of one step (see :func:`.tool_round.tool_round`)."""
        return tool_round(
            calls, run, results, toolkit=self.toolkit, max_concurrency=self.max_concurrency,
            approvals=approvals, guard=guard, sink=sink,
        )  # fmt: skip

    def _tools_tokens(self, schemas: Sequence[ToolSchema]) -> int:
        """The schemas' token estimate, kept while the toolkit hands out the same list."""
        cost = self._schema_cost
        if cost is None or cost[0] is not schemas:
            cost = (schemas, schema_tokens(schemas))
            self._schema_cost = cost
        return cost[1]

    def _system_message(self, summary: str) -> tuple[Message, int]:
        """The system message for this prompt and conversation summary, and its token bound
        (:func:`.budget.size_bound`), kept while neither changes (immutable, so every run may
        send the same one)."""
        kept = self._system
        if kept is None or kept[0] is not self.system_prompt or kept[1] != summary:
            message = Message.system(build_system_prompt(self.system_prompt, summary=summary))
            kept = self._system = (self.system_prompt, summary, message, size_bound(message))
        return kept[2], kept[3]

    def _window(self) -> tuple[int, int | None]:
        """The context window and the tokens to reserve for the answer (when known)."""
        context = (
            self.context_tokens
            or positive_int(getattr(self.model, "context_tokens", None))
            or DEFAULT_CONTEXT_TOKENS
        )
        return context, positive_int(getattr(self.model, "max_tokens", None))

    async def _remember(self, new: list[Message]) -> Usage | None:
        """Add the run's messages to the memory; the usage of its summary call, if any."""
        if self.memory is None:
            return None
        self.memory.add(new)
        price = self.prices.get(self.model.name) if self.prices else None
        return await self.memory.compact(self.model, price=price)

    def _see_the_step(self, calls: Sequence[ToolCallBlock]) -> bool:
        """Whether a tool of ``calls`` may read the run's context at this step: it takes the
        :class:`RunContext` (any tool that does not say it does not is taken to). Only such
        tools need one built per step; the others are given the run's."""
        for call in calls:
            found = self.toolkit.get(call.name)
            if found is not None and getattr(found, "injects_run", True):
                return True
        return False

    def _offers_search(self, user: UserContext) -> bool:
        """Whether ``user`` is offered ``retrieve`` (to search for an answer's facts)."""
        return any(t.name == RETRIEVE_TOOL for t in self.toolkit.visible_tools(user))

    def _is_external(self, name: str) -> bool:
        t = self.toolkit.get(name)
        return t is not None and t.external
