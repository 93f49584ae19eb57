"""Chat turns of the service: one session, one turn at a time (docs/design.md P1, P2).

:class:`ChatService` runs a user message through the chat agent (or, with no chat model
configured, through the knowledge agent) with the session's short-term memory and the user's
long-term memory, yields the run's events as JSON-ready dicts, and records the finished turn
in the session store.

Concurrency: a session runs one turn at a time. A second request for a session whose turn is
still running is refused at once with :class:`SessionBusyError` (HTTP 409, ``Retry-After``)
instead of waiting: a client that double-submits learns it immediately, and no request can
sit on a connection to run later against a conversation that has moved on. Different
sessions run concurrently. The claim is a :class:`~shelfhand.service.turn_lock.TurnLock`: a set in
the process by default, or a renewed lock in Redis shared by every replica (``redis_url``), so
a busy session is 409 whichever replica the second message reaches.

A failed turn (model timeout or provider error) keeps nothing of the turn; the session
records the failure and its trace id and stays usable.

Deadline: a turn that produces no event for ``turn_timeout`` seconds (a model that hangs before
or during its answer) fails as a model timeout (HTTP 504); time spent waiting for the caller's
approval of a tool call does not count. Closing the turn's iterator (a client that went away)
cancels the model request and frees the session at once.

The memory windows of recently used sessions are cached in the process (the store stays the
system of record and is written on every turn), so a turn does not re-read and re-parse its
history. Not with a session store shared by replicas (``cache_windows=False``): another
replica may have answered the session's last turn, so each turn reads its window.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar

import anyio

from shelfhand.agent.agent import DEFAULT_SYSTEM_PROMPT
from shelfhand.agent.memory import ConversationMemory, build_system_prompt
from shelfhand.agent.rewrite import CARRY_BACK
from shelfhand.agent.supervisor import SUPERVISOR_PROMPT
from shelfhand.agent.tasks import TaskRegistry
from shelfhand.core.context import UserContext
from shelfhand.core.errors import (
    BudgetExceededError,
    DependencyUnavailableError,
    ModelError,
    ModelProviderError,
    ModelTimeoutError,
    NotFoundError,
    ScriptExhaustedError,
    SessionBusyError,
    TurnFailed,
    storage_full,
    storage_full_message,
)
from shelfhand.core.events import Event, Final, event_to_dict
from shelfhand.core.messages import Message
from shelfhand.core.offload import in_background, off_loop_if, soon_if, undone_if_left
from shelfhand.core.results import Usage
from shelfhand.core.step_counts import current_counting
from shelfhand.service.model_failure import rescue
from shelfhand.service.turn_budgets import Budgets, budget_failure
from shelfhand.service.turn_lock import LocalTurnLock, TurnClaim, TurnLock
from shelfhand.service.turn_spans import traced_turn
from shelfhand.sessions.store import MemoryWindow
from shelfhand.sessions.user_memory import format_memories
from shelfhand.usage.by_model import ModelTally

if TYPE_CHECKING:
    from shelfhand.agent.agent import Agent
    from shelfhand.agent.retrieve import KnowledgeAgent
    from shelfhand.agent.subagents import Subagent
    from shelfhand.agent.supervisor import Supervisor
    from shelfhand.core.pricing import ModelPrice
    from shelfhand.core.step_counts import StepCounter
    from shelfhand.core.tracing import Tracer
    from shelfhand.knowledge.analysis import SynonymTable
    from shelfhand.knowledge.base import KnowledgeBase
    from shelfhand.models.base import ChatModel
    from shelfhand.sessions.store import SessionStore
    from shelfhand.sessions.user_memory import UserMemoryStore
    from shelfhand.tools.approvals import Approvals
    from shelfhand.tools.toolkit import Toolkit
    from shelfhand.usage.ledger import SqlUsageLedger

logger = logging.getLogger(__name__)

__all__ = ["ChatService", "SessionBusyError", "TurnFailed", "error_status"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


def error_status(exc: BaseException) -> tuple[int, str]:
    """HTTP status and code for a failure during a turn."""
    if isinstance(exc, BudgetExceededError):
        return 429, exc.code
    if isinstance(exc, ModelTimeoutError):
        return 504, exc.code
    if isinstance(exc, DependencyUnavailableError):
        return 503, f"{exc.dependency}_unavailable"  # which one: postgresql or redis
    if isinstance(exc, (ModelError, ScriptExhaustedError)):
        return 502, ModelError.code  # one code for every way the model failed
    if storage_full(exc):
        return 507, "storage_full"
    return 500, "internal_error"


def failure_message(exc: BaseException, *, answering: bool) -> str:
    """What the caller is told about a failed turn (``answering``: text had streamed)."""
    if answering and isinstance(exc, ModelProviderError) and exc.connection_lost:
        return "the model's stream was cut off before the answer was complete; try again"
    return storage_full_message(exc) or str(exc) or type(exc).__name__


class AgentFactory(Protocol):
    """What the service needs to build agents per turn: :class:`~shelfhand.app.App` fits."""

    def subagents(self) -> list[Subagent]: ...

    def supervisor(
        self,
        model: ChatModel,
        kb: KnowledgeBase | None,
        *,
        memory: ConversationMemory | None = None,
        toolkit: Toolkit | None = None,
        system_prompt: str | None = None,
        tasks: TaskRegistry | None = None,
        fingerprints: OrderedDict[tuple[str, str], str] | None = None,
    ) -> Supervisor: ...

    def chat_agent(
        self,
        model: ChatModel,
        kb: KnowledgeBase | None,
        *,
        memory: ConversationMemory | None = None,
        toolkit: Toolkit | None = None,
        system_prompt: str | None = None,
    ) -> Agent: ...

    def knowledge_agent(self, kb: KnowledgeBase) -> KnowledgeAgent: ...

    def synonym_table(self) -> SynonymTable | None: ...


class ChatService:
    """Runs chat turns for the service.

    Args:
        app: Builds the agents (the composition root, :class:`~shelfhand.app.App`).
        kb: The workspace's knowledge base.
        sessions: Where sessions and their memory windows are kept.
        memories: Long-term memory per user.
        toolkit: The shared toolkit (governance state lives there).
        model: The chat model, or ``None`` to answer with cited passages only.
        approvals: Where ``confirm=True`` tool calls wait for the caller's decision
            (:meth:`decide`); ``None``: such calls are not run.
        memory_token_budget: Short-term memory budget per session (tokens).
        turn_timeout: Seconds a turn may go without an event (waiting for an approval
            excepted) before it fails as a model timeout; ``None``: no limit.
        turn_lock: Where a session's running turn is claimed (default: in this process;
            :class:`~shelfhand.service.turn_lock.RedisTurnLock` for several replicas).
        cache_windows: Keep memory windows in the process; ``False`` when other replicas
            write the same sessions.
        offload_stores: Call the session and memory stores in a worker thread, not on the
            event loop (for stores across a network, such as PostgreSQL, whose round trips
            would stall every other turn of the process).
        tracer: Records each turn's span tree (``None``: no tracing).
        counter: Counts each turn's steps for the service's metrics, with or without spans
            (``None``: not counted).
        budgets: Budgets per tenant and user, reserved before each model call of a turn
            (``None``: no budgets; see :mod:`shelfhand.service.turn_budgets`).
        ledger: Where each turn's usage is added up per tenant, user, session, day and
            model (``None``: not kept).
        prices: Prices by model, for the ledger's cost of each model's share of a turn
            (the agents' own prices: the ``prices`` setting).
    """

    def __init__(
        self,
        *,
        app: AgentFactory,
        kb: KnowledgeBase,
        sessions: SessionStore,
        memories: UserMemoryStore,
        toolkit: Toolkit,
        model: ChatModel | None,
        approvals: Approvals | None = None,
        memory_token_budget: int = 4000,
        turn_timeout: float | None = None,
        turn_lock: TurnLock | None = None,
        cache_windows: bool = True,
        offload_stores: bool = False,
        tracer: Tracer | None = None,
        budgets: Budgets | None = None,
        ledger: SqlUsageLedger | None = None,
        counter: StepCounter | None = None,
        prices: Mapping[str, ModelPrice] | None = None,
    ) -> None:
        self.app = app
        self.prices = prices
        self.kb = kb
        self.sessions = sessions
        self.memories = memories
        self.toolkit = toolkit
        self.model = model
        self.approvals = approvals
        self.memory_token_budget = memory_token_budget
        self.turn_timeout = turn_timeout
        self._knowledge_agent: KnowledgeAgent | None = None
        self.turn_lock: TurnLock = turn_lock if turn_lock is not None else LocalTurnLock()
        self.cache_windows = cache_windows
        self.offload_stores = offload_stores
        self.tracer = tracer
        self.counter = counter
        self.budgets = budgets
        self.ledger = ledger
        self._windows: OrderedDict[str, tuple[str, MemoryWindow]] = OrderedDict()
        # subagents of the workspace (agents/*.md): the chat agent becomes a supervisor
        self.subagents = app.subagents()
        self.tasks = TaskRegistry()
        """Background subagent tasks, by (tenant, user, session)."""
        self._fingerprints: OrderedDict[tuple[str, str], str] = OrderedDict()
        if self.subagents and model is not None:  # an unknown tool name fails at start-up
            app.supervisor(model, kb, toolkit=toolkit, tasks=self.tasks)
        elif self.subagents:  # ... without a model too: the declarations are checked alike
            from shelfhand.agent.subagents import check_subagent_tools

            check_subagent_tools(self.subagents, [t.name for t in toolkit.tools])

    WINDOW_CACHE = 2048
    """Sessions whose memory window is kept in the process."""

    def forget(self, session_id: str) -> None:
        """Drop the cached window of a deleted session."""
        self._windows.pop(session_id, None)

    def _window(self, session_id: str, user: UserContext) -> MemoryWindow | None:
        cached = self._windows.get(session_id)
        if cached is not None and cached[0] == user.scope:
            self._windows.move_to_end(session_id)
            return cached[1]
        return self.sessions.window(session_id, user)

    def _keep_window(
        self, session_id: str, user: UserContext, messages: Sequence[Message], summary: str
    ) -> None:
        if not self.cache_windows:
            return
        window = MemoryWindow(messages=tuple(messages), summary=summary)
        self._windows[session_id] = (user.scope, window)
        self._windows.move_to_end(session_id)
        while len(self._windows) > self.WINDOW_CACHE:
            self._windows.popitem(last=False)

    async def store(self, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """``fn(*args, **kwargs)``: a store call, in a worker thread with ``offload_stores``."""
        if self.offload_stores:
            return await asyncio.to_thread(fn, *args, **kwargs)
        return fn(*args, **kwargs)

    def is_busy(self, session_id: str) -> bool:
        return self.turn_lock.is_busy(session_id)

    def decide(
        self, session_id: str, approval_id: str, user: UserContext, *, approved: bool, reason: str
    ) -> bool:
        """Approve or reject a pending tool call of ``session_id``; ``False`` if there is no
        such pending call for this caller (unknown, decided, or someone else's)."""
        if self.approvals is None or self.approvals.session_of(approval_id) != session_id:
            return False
        request = self.approvals.get(approval_id)
        if request is None or request.user.scope != user.scope:
            return False
        try:
            if approved:
                self.approvals.approve(approval_id, by=user.scope)
            else:
                self.approvals.reject(approval_id, reason, by=user.scope)
        except KeyError:  # decided or timed out in the meantime
            return False
        return True

    async def turn(
        self,
        session_id: str,
        user: UserContext,
        content: str,
        *,
        trace_id: str,
        parent_span_id: str = "",
        history: Sequence[Message] | None = None,
        agent: str = "",
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Claim the session and return the turn's events (the claim ends with the iterator).

        The session is claimed before this returns, so two requests can never both start a
        turn. Consume the iterator to the end or ``aclose()`` it. ``history``: the
        conversation so far as the client sent it (OpenAI-style clients send it with every
        request); it replaces the session's stored window for this turn. ``agent``: the id
        of a subagent to answer instead of the chat agent (its tools, under the same
        governance and caller).

        ``parent_span_id``: the caller's span (from its ``traceparent``), the parent of the
        turn's root span.

        Raises:
            SessionBusyError: A turn of this session is running (on any replica).
            DependencyUnavailableError: The shared turn lock (Redis) cannot be reached.
        """
        lock = self.turn_lock
        # (in Redis: on a state thread, so that a Redis that stopped answering holds up this
        # request alone, not the event loop and every other request with it)
        claim = (
            await undone_if_left(lock.claim, session_id, undo=_release)
            if lock.blocking
            else lock.claim(session_id)
        )
        if claim is None:
            raise SessionBusyError(f"session {session_id} is answering another message")
        events = self._turn(session_id, user, content, trace_id, claim, history, agent)
        if self.budgets is not None:
            events = self.budgets.metered_turn(events, user, trace_id)
        # with a ledger, the turn's model calls are tallied by model (and passed on to the
        # metrics): the ledger books each model's share on its own row
        counter = (
            self.counter if self.ledger is None else ModelTally(self.counter, prices=self.prices)
        )
        if self.tracer is None and counter is None:
            return events
        return traced_turn(events, self.tracer, counter, session_id, user, trace_id, parent_span_id)

    async def _turn(
        self,
        session_id: str,
        user: UserContext,
        content: str,
        trace_id: str,
        claim: TurnClaim,
        history: Sequence[Message] | None = None,
        agent: str = "",
    ) -> AsyncGenerator[dict[str, Any], None]:
        started = time.perf_counter()
        answering = recorded = False
        found: list[dict[str, Any]] = []  # the turn's passages, as its citations events
        memory: ConversationMemory | None = None
        keeper = asyncio.create_task(claim.keep()) if claim.renews else None
        try:
            window = await self.store(self._window, session_id, user)
            if window is None:
                raise TurnFailed("session not found", status=404, code=NotFoundError.code)
            if history is not None:
                window = MemoryWindow(messages=tuple(history), summary="")
            memory = ConversationMemory(
                token_budget=self.memory_token_budget,
                messages=list(window.messages),
                summary=window.summary,
            )
            events = (
                self._chat_events(user, content, memory, trace_id, session_id, agent)
                if self.model is not None
                else self._knowledge_events(user, content, memory, trace_id)
            )
            async for event, final in self._bounded(events):
                kind = event.get("type")
                if kind == "text_delta":
                    answering = True
                elif kind == "text_withdrawn":
                    answering = False  # the client removed what it had been shown
                elif kind == "citations":
                    found.extend(event.get("citations", ()))
                event["trace_id"] = trace_id
                if kind == "approval_required" and self.approvals is not None:
                    approvals, approval = self.approvals, str(event.get("approval_id"))
                    await off_loop_if(
                        approvals.blocking, approvals.bind_session, approval, session_id
                    )
                if final is not None:
                    recorded = True
                    await self._record(session_id, user, event, final, memory, trace_id, started)
                yield event
        except Exception as exc:
            if isinstance(exc, TurnFailed):
                raise
            status, code = error_status(exc)
            message = failure_message(exc, answering=answering)
            # the model calls that answered before the failure: the rescued answer's usage,
            # else booked on their own (the budget has settled them already)
            tally = _turn_tally()
            spent = tally.total() if tally is not None else None
            if isinstance(exc, BudgetExceededError):
                await self._book_failed(user, session_id, spent)
                await self._record_failure(session_id, user, trace_id, message)
                raise budget_failure(exc) from exc
            synonyms = self.app.synonym_table()
            past = memory.messages if memory is not None else ()
            rescued = rescue(
                exc,
                content,
                found,
                code,
                message,
                trace_id,
                synonyms=synonyms,
                usage=spent,
                history=past,
            )
            if rescued is not None and memory is not None:
                # the passages were found before the model failed: their best sentences are
                # the answer (marked, with the failure), not a bare error
                logger.warning("turn's model failed session=%s: %s: %s", session_id, code, message)
                memory.add(rescued.messages)
                await self._record(
                    session_id, user, rescued.final, rescued.messages, memory, trace_id, started
                )
                if answering:  # the deltas were the model's cut answer
                    yield rescued.replaced(trace_id)
                yield rescued.final
                return
            if status == 500:
                logger.exception("turn failed session=%s", session_id)
            else:
                logger.warning("turn failed session=%s: %s: %s", session_id, code, message)
            await self._book_failed(user, session_id, spent)
            await self._record_failure(session_id, user, trace_id, message)
            raise TurnFailed(message, status=status, code=code) from exc
        except BaseException:
            # cancelled (the caller went away, the server stops): the model calls it made,
            # a cut one at what the budget charged, are booked without waiting
            tally = _turn_tally()
            if not recorded and tally is not None and self.ledger is not None:
                self._book_soon(user, session_id, tally)
            raise
        finally:
            if keeper is not None:
                keeper.cancel()
            # (in Redis: on a state thread, shielded: it goes on if this is cancelled again)
            released = soon_if(self.turn_lock.blocking, claim.release)
            if released is not None:
                await asyncio.shield(released)

    async def _record(
        self,
        session_id: str,
        user: UserContext,
        event: dict[str, Any],
        final: tuple[Message, ...],
        memory: ConversationMemory,
        trace_id: str,
        started: float,
    ) -> None:
        """Keep the finished turn (its messages ``final``, the memory after it) and add the
        session's message count and the usage to its ``final`` ``event``."""
        info = await self.store(
            self.sessions.record_turn,
            session_id,
            user,
            final,
            window=memory.messages,
            summary=memory.summary,
            trace_id=trace_id,
        )
        if info is None:  # deleted while the turn ran
            self.forget(session_id)
        else:
            self._keep_window(session_id, user, memory.messages, memory.summary)
        event["session_id"] = session_id
        event["message_count"] = info.message_count if info else 0
        if self.ledger is not None:
            usage = Usage(**event.get("usage", {}))
            await self._book(user, session_id, usage)
        logger.info(
            "turn session=%s user=%s ms=%.1f",
            session_id,
            user.scope,
            (time.perf_counter() - started) * 1000,
        )

    async def _record_failure(
        self, session_id: str, user: UserContext, trace_id: str, message: str
    ) -> None:
        """Mark the session's turn as failed, with ``message``; a store that cannot take it
        (the same PostgreSQL that failed the turn, now refusing writes) is logged, and the
        caller hears of the turn's own failure, not of this one's (a 500)."""
        try:
            await self.store(
                self.sessions.record_failure, session_id, user, trace_id=trace_id, error=message
            )
        except Exception:
            logger.exception("could not record a failed turn session=%s", session_id)

    async def _book_failed(self, user: UserContext, session_id: str, spent: Usage | None) -> None:
        """Book in the ledger what a turn that failed without an answer used (its model calls
        that answered), so that a tenant's usage counts it as its budget does."""
        if self.ledger is None or spent is None or not spent.model_calls:
            return
        try:
            await self._book(user, session_id, spent)
        except Exception:  # the turn's own failure is what the caller must hear about
            logger.exception("could not book a failed turn's usage session=%s", session_id)

    def _book_soon(self, user: UserContext, session_id: str, tally: ModelTally) -> None:
        """Book a cancelled turn's model calls from a worker thread, not waiting (a cancelled
        turn cannot)."""
        spent = tally.total()
        if not spent.model_calls:
            return
        assert self.ledger is not None
        others = tally.others(self._model_name)
        book = functools.partial(
            self.ledger.add, user, session_id, self._model_name, spent, others=others
        )
        in_background(book)

    @property
    def _model_name(self) -> str:
        return self.model.name if self.model is not None else "(none)"

    async def _book(self, user: UserContext, session_id: str, usage: Usage) -> None:
        """Add the running turn's ``usage`` (the whole turn's) to the ledger, other models'
        calls on their own rows (see :class:`ModelTally`)."""
        assert self.ledger is not None
        tally = _turn_tally()
        others = tally.others(self._model_name) if tally is not None else {}
        await self.store(self.ledger.add, user, session_id, self._model_name, usage, others=others)

    async def _bounded(
        self, events: AsyncGenerator[tuple[dict[str, Any], tuple[Message, ...] | None], None]
    ) -> AsyncIterator[tuple[dict[str, Any], tuple[Message, ...] | None]]:
        """``events``, failing with :class:`ModelTimeoutError` when none comes for
        ``turn_timeout`` seconds (not counted: waiting for an approval)."""
        waiting_for_approval = False
        try:
            while True:
                limit = None if waiting_for_approval else self.turn_timeout
                with anyio.move_on_after(math.inf if limit is None else limit) as scope:
                    try:
                        item = await anext(events)
                    except StopAsyncIteration:
                        return
                if scope.cancelled_caught:
                    raise ModelTimeoutError(
                        f"the model produced nothing for {limit:g}s (turn_timeout); check "
                        "that the model server is up and not overloaded"
                    )
                waiting_for_approval = item[0].get("type") == "approval_required"
                yield item
        finally:
            await events.aclose()  # ends the model request if the turn stops early

    async def _chat_events(
        self,
        user: UserContext,
        content: str,
        memory: ConversationMemory,
        trace_id: str,
        session_id: str = "",
        agent_id: str = "",
    ) -> AsyncGenerator[tuple[dict[str, Any], tuple[Message, ...] | None], None]:
        assert self.model is not None
        facts = format_memories(await self.store(self.memories.recall, user))
        # group state is per conversation; a toolkit without groups can be shared as is
        toolkit = self.toolkit.copy() if self.toolkit.groups else self.toolkit
        events: AsyncIterator[Event]
        if agent_id:  # one subagent answers: the conversation is its history
            specialist = self.app.supervisor(self.model, self.kb, toolkit=toolkit, tasks=self.tasks)
            events = specialist.subagent(agent_id).stream(
                content, context=user, approvals=self.approvals, trace_id=trace_id,
                history=list(memory.messages),
            )  # fmt: skip
        elif self.subagents:
            supervisor = self.app.supervisor(
                self.model, self.kb, memory=memory, toolkit=toolkit,
                system_prompt=build_system_prompt(SUPERVISOR_PROMPT, memory=facts),
                tasks=self.tasks, fingerprints=self._fingerprints,
            )  # fmt: skip
            events = supervisor.stream(
                content, context=user, approvals=self.approvals, trace_id=trace_id,
                session=session_id,
            )  # fmt: skip
        else:
            system = build_system_prompt(DEFAULT_SYSTEM_PROMPT, memory=facts)
            agent = self.app.chat_agent(
                self.model, self.kb, memory=memory, toolkit=toolkit, system_prompt=system
            )
            # the turn's trace id names the agent run too: logs, audit records and events agree
            events = agent.stream(
                content, context=user, approvals=self.approvals, trace_id=trace_id
            )
        async for event in events:
            data = event_to_dict(event)
            if isinstance(event, Final):
                data["stop_reason"] = event.result.stop_reason
                data["run_id"] = event.result.trace_id
                data["usage"] = event.result.usage.to_dict()
                if agent_id:  # (an agent with a memory keeps it itself)
                    memory.add(event.result.messages)
                yield data, event.result.messages
            else:
                yield data, None

    def _audit_knowledge_turn(
        self,
        user: UserContext,
        content: str,
        trace_id: str,
        started: float,
        outcome: str,
        exc: Exception | None,
    ) -> None:
        """One audit record for a model-free turn: its retrieval, as the model's ``retrieve``
        call would have left (the caller, the question, the outcome, the turn's trace id)."""
        audit = self.toolkit.audit_log
        if audit is None:
            return
        audit.record(
            tool="retrieve",
            tenant=user.tenant_id,
            user=user.user_id,
            trace_id=trace_id,
            request_id=uuid.uuid4().hex,
            call_id="",
            arguments={"query": content},
            canonical=None,
            decision="allow",
            outcome=outcome,
            error_class=type(exc).__name__ if exc is not None else "",
            duration_ms=(time.perf_counter() - started) * 1000,
            agent="knowledge",
        )

    async def _knowledge_events(
        self, user: UserContext, content: str, memory: ConversationMemory, trace_id: str
    ) -> AsyncGenerator[tuple[dict[str, Any], tuple[Message, ...] | None], None]:
        from shelfhand.core.events import CitationsFound, TextDelta

        if self._knowledge_agent is None:
            self._knowledge_agent = self.app.knowledge_agent(self.kb)
        started = time.perf_counter()
        try:
            result = await self._knowledge_agent.run(
                content, context=user, trace_id=trace_id, history=memory.messages
            )
        except Exception as exc:
            self._audit_knowledge_turn(user, content, trace_id, started, "error", exc)
            raise
        self._audit_knowledge_turn(user, content, trace_id, started, "ok", None)
        if result.citations:
            yield event_to_dict(CitationsFound(citations=result.citations)), None
        yield event_to_dict(TextDelta(text=result.output)), None
        # no model, so no summary: keep the latest turns a follow-up is carried with
        memory.messages = [*memory.messages, *result.messages][-2 * CARRY_BACK :]
        final = event_to_dict(Final(result=result))
        final["stop_reason"] = result.stop_reason
        final["run_id"] = result.trace_id
        final["usage"] = result.usage.to_dict()
        yield final, result.messages


def _turn_tally() -> ModelTally | None:
    """The running turn's model calls by model (``None`` when the turn is not tallied by
    model: a service without a usage ledger)."""
    counting = current_counting()
    tally = counting.counter if counting is not None else None
    return tally if isinstance(tally, ModelTally) else None


def _release(claim: TurnClaim | None) -> None:
    """Release a claim made for a request whose client went away meanwhile."""
    if claim is not None:
        claim.release()
