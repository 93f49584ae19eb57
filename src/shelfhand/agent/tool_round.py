"""One round of tool calls of an agent run: the calls of one model reply (docs/design.md K2, K3, S3).

:func:`tool_round` runs the calls of a reply through the toolkit (and so through its
governance pipeline) and fills the results in the order of the calls: a call that already
succeeded in this run is answered from that result (:class:`~.guard.CallGuard`); calls of
tools marked ``confirm=True`` are put to the approvals registry first, all at once, before any
call of the reply runs (:func:`ask_approvals`); the calls run concurrently, at most
``max_concurrency`` at a time, when every one of them is ``concurrency_safe``, else one after
another. :func:`retrieve_upfront` is the step a ``context``/``both`` run takes before the model
is asked (see :mod:`.grounding`).

Both are async generators of the step's events for every kind of run: they build and yield
events only when the run's :class:`~.step_events.EventSink` has a listener (its stream or its
callback, which the run forwards them to), tagged with the sink's ``tag``. A run nobody
watches builds none, and its rounds yield nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING

from shelfhand.core.events import ApprovalDecided, ApprovalRequired, Event, ToolStarted
from shelfhand.core.messages import Message

from .step_events import finished, replay_finished

if TYPE_CHECKING:
    from shelfhand.core.context import RunContext
    from shelfhand.core.messages import ToolCallBlock, ToolResultBlock
    from shelfhand.tools.approvals import ApprovalDecision, ApprovalRequest, Approvals
    from shelfhand.tools.toolkit import CallReport, Toolkit

    from .grounding import UpfrontRetrieval
    from .guard import CallGuard
    from .step_events import EventSink

__all__ = ["ask_approvals", "retrieve_upfront", "tool_round"]


async def tool_round(
    calls: Sequence[ToolCallBlock],
    run: RunContext,
    results: list[ToolResultBlock],
    *,
    toolkit: Toolkit,
    max_concurrency: int,
    approvals: Approvals | None,
    guard: CallGuard,
    sink: EventSink,
) -> AsyncGenerator[Event, None]:
    """Run the calls; fill ``results`` in their order (see the module docstring).

    Yields the round's events when ``sink`` has a listener: ``ToolStarted`` for every call,
    ``ToolFinished`` for replayed ones, the approvals, then ``ToolFinished`` as calls end.
    """
    events = sink.listening
    tag = sink.tag
    if events:
        for call in calls:
            yield ToolStarted(call_id=call.id, name=call.name, arguments=call.arguments, agent=tag)
    done: dict[str, ToolResultBlock] = {}
    for call in calls:
        earlier = guard.replay(call)
        if earlier is not None:
            done[call.id] = earlier
            if events:
                yield replay_finished(call, earlier, tag)
    todo = [c for c in calls if c.id not in done]
    decisions: dict[str, ApprovalDecision] = {}
    if approvals is not None and todo:
        async with aclosing(ask_approvals(todo, run, toolkit, approvals, decisions)) as asking:
            async for event in asking:
                if events:
                    yield event
    if len(todo) > 1 and toolkit.is_concurrency_safe([c.name for c in todo]):
        gate = asyncio.Semaphore(max_concurrency)

        async def one(call: ToolCallBlock) -> tuple[ToolCallBlock, CallReport]:
            async with gate:
                return call, await toolkit.execute(call, run, approval=decisions.get(call.id))

        tasks = [asyncio.ensure_future(one(c)) for c in todo]
        try:
            for next_done in asyncio.as_completed(tasks):
                call, report = await next_done
                done[call.id] = guard.record(call, report.result)
                if events:
                    yield finished(report, done[call.id], tag)
        finally:
            for t in tasks:
                t.cancel()
    else:
        for call in todo:
            report = await toolkit.execute(call, run, approval=decisions.get(call.id))
            done[call.id] = guard.record(call, report.result)
            if events:
                yield finished(report, done[call.id], tag)
    results.extend(done[c.id] for c in calls)


async def ask_approvals(
    calls: Sequence[ToolCallBlock],
    run: RunContext,
    toolkit: Toolkit,
    approvals: Approvals,
    decisions: dict[str, ApprovalDecision],
) -> AsyncGenerator[Event, None]:
    """Open an approval for each call that needs one, then wait for every decision (into
    ``decisions``, by call id). A run closed or cancelled meanwhile withdraws what it opened."""
    opened: list[ApprovalRequest] = []
    try:
        for call in calls:
            arguments = toolkit.approval_arguments(call, run)
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


async def retrieve_upfront(
    upfront: UpfrontRetrieval,
    first: Message,
    history: Sequence[Message],
    run: RunContext,
    new: list[Message],
    results: list[ToolResultBlock],
    sink: EventSink,
) -> AsyncGenerator[Event, None]:
    """The ``context``/``both`` step: retrieve for the prompt ``first`` before the model is
    asked. The calls and their results join the transcript ``new`` as if the model had called
    (nothing joins when the prompt has no text to search for), and the results are added to
    ``results``. Yields the calls' events when ``sink`` has a listener."""
    plan = await upfront.plan(first, history)
    calls = plan.calls
    if not calls:
        return
    events = sink.listening
    tag = sink.tag
    for call in calls:
        if events:
            yield ToolStarted(call_id=call.id, name=call.name, arguments=call.arguments, agent=tag)
        report = await upfront.execute(call, run)
        results.append(report.result)
        if events:
            yield finished(report, report.result, tag)
    new.append(Message.assistant(tool_calls=calls, metadata=plan.metadata()))
    new.append(Message.tool(results))
