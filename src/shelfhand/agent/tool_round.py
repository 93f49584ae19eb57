"""One round of tool calls of an agent run: the calls of one model reply (docs/design.md K2, K3, S3).

:func:`tool_round` runs the calls of a reply through the toolkit (and so through its
governance pipeline) and fills the results in the order of the calls: a call that already
succeeded in this run is answered from that result (:class:`~.guard.CallGuard`), and so is
a repeat within the reply of a read-only tool governance does not share (``retrieve``) once
the first has succeeded; calls of
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
from collections.abc import AsyncGenerator, Iterator, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING

from shelfhand.core.events import (
    ApprovalDecided,
    ApprovalRequired,
    Event,
    ToolFinished,
    ToolStarted,
)
from shelfhand.core.messages import Message

from .guard import canonical_arguments
from .side_calls import side_usage
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
    for replayed in _from_earlier(calls, guard, done, events, tag):
        yield replayed
    todo = [c for c in calls if c.id not in done]
    decisions: dict[str, ApprovalDecision] = {}
    if approvals is not None and todo:
        async with aclosing(ask_approvals(todo, run, toolkit, approvals, decisions)) as asking:
            async for event in asking:
                if events:
                    yield event
    # identical calls of this reply that the run would replay once the first has succeeded:
    # they wait for it (governance's single-flight shares the others' executions)
    todo, again = _repeats_within(todo, toolkit, guard)
    if len(todo) > 1 and toolkit.is_concurrency_safe([c.name for c in todo]):
        gate = asyncio.Semaphore(max_concurrency)
        leaders, followers = _identical_groups(todo, toolkit)
        # a leader's flight is open once it has started (see _identical_groups)
        started = {leader: asyncio.Event() for leader in followers}

        async def lead(call: ToolCallBlock) -> tuple[ToolCallBlock, CallReport]:
            async with gate:
                flight = started.get(call.id)
                if flight is not None:
                    # its followers resume at this call's first wait, when governance has
                    # registered the execution they join
                    flight.set()
                return call, await toolkit.execute(call, run, approval=decisions.get(call.id))

        async def follow(call: ToolCallBlock, leader: str) -> tuple[ToolCallBlock, CallReport]:
            await started[leader].wait()  # no slot of the gate: it runs nothing itself
            return call, await toolkit.execute(call, run, approval=decisions.get(call.id))

        tasks = [asyncio.ensure_future(lead(c)) for c in leaders]
        tasks += [
            asyncio.ensure_future(follow(c, leader))
            for leader, calls in followers.items()
            for c in calls
        ]
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
    for replayed in _from_earlier(again, guard, done, events, tag):
        yield replayed
    for call in again:
        if call.id in done:
            continue
        # the first of them failed: this one runs (and counts as a repeated failure)
        report = await toolkit.execute(call, run, approval=decisions.get(call.id))
        done[call.id] = guard.record(call, report.result)
        if events:
            yield finished(report, done[call.id], tag)
    results.extend([done[c.id] for c in calls])


def _from_earlier(
    calls: Sequence[ToolCallBlock],
    guard: CallGuard,
    done: dict[str, ToolResultBlock],
    events: bool,
    tag: str | None,
) -> Iterator[ToolFinished]:
    """Answer those of ``calls`` that the run's earlier identical calls answer
    (:meth:`CallGuard.replay`) into ``done``; their ``ToolFinished`` events when ``events``.
    (A plain generator: iterate it to the end even when no events are wanted.)"""
    for call in calls:
        earlier = guard.replay(call)
        if earlier is not None:
            done[call.id] = earlier
            if events:
                yield replay_finished(call, earlier, tag)


def _repeats_within(
    calls: Sequence[ToolCallBlock], toolkit: Toolkit, guard: CallGuard
) -> tuple[list[ToolCallBlock], list[ToolCallBlock]]:
    """``calls`` split into those to run now and the repeats among them (same tool, same
    canonical arguments as an earlier call of the list) that the run answers from the
    first one's result once it has succeeded (:meth:`CallGuard.replay`). Only for read-only
    tools whose identical concurrent calls governance does not share (``dedup=False``, such
    as ``retrieve``, whose passage numbers belong to one run) and that the guard replays: a
    tool with effects runs once per call."""
    names = {c.name for c in calls}
    if len(names) == len(calls):
        return list(calls), []  # (no tool called twice: the usual reply)
    answered_once = {
        name
        for name in names
        if not toolkit.shares_identical_calls(name)
        and toolkit.is_read_only(name)
        and guard.replays(name)
    }
    if not answered_once:
        return list(calls), []
    first: set[tuple[str, str]] = set()
    now: list[ToolCallBlock] = []
    again: list[ToolCallBlock] = []
    for call in calls:
        if call.name not in answered_once:
            now.append(call)
            continue
        key = (call.name, canonical_arguments(call.arguments))
        if key in first:
            again.append(call)
        else:
            first.add(key)
            now.append(call)
    return now, again


def _identical_groups(
    calls: Sequence[ToolCallBlock], toolkit: Toolkit
) -> tuple[list[ToolCallBlock], dict[str, list[ToolCallBlock]]]:
    """The calls that take a slot of the round's concurrency, and for each of them the
    identical calls of the same reply (by leader id) that join its execution.

    Identical calls (same tool, same canonical arguments) of a tool that shares identical
    concurrent calls (read-only, ``dedup``) execute once through governance's single-flight
    (each is still governed and audited). The followers must not wait for a slot: in a
    round wider than ``max_concurrency`` they would start after the first execution ended,
    and run again.
    """
    leaders: list[ToolCallBlock] = []
    followers: dict[str, list[ToolCallBlock]] = {}
    first: dict[tuple[str, str], str] = {}
    for call in calls:
        if not toolkit.shares_identical_calls(call.name):
            leaders.append(call)
            continue
        key = (call.name, canonical_arguments(call.arguments))
        leader = first.get(key)
        if leader is None:
            first[key] = call.id
            leaders.append(call)
        else:
            followers.setdefault(leader, []).append(call)
    return leaders, followers


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
            request = await approvals.open_off_loop(
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
    with side_usage(run.delegated):  # (the query rewrite's model call: the run's usage)
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
