"""Routes for sessions, chat turns and long-term memories (``/v1/sessions``, ``/v1/memories``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Annotated, Any

import anyio
import anyio.from_thread
from fastapi import APIRouter, Body, HTTPException, Path, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, Field

from shelfhand.api.deps import Caller, ServiceDep, hide_paths, sse_event
from shelfhand.api.schemas import (
    ChatReply,
    CitationOut,
    CreateSession,
    Decision,
    DecisionOut,
    ErrorBody,
    MemoryList,
    MemoryOut,
    PostMessage,
    SessionDetail,
    SessionList,
    SessionOut,
    ToolStep,
)
from shelfhand.api.tracing import current_parent_span_id, current_trace_id
from shelfhand.core.errors import SessionBusyError, TurnFailed
from shelfhand.core.messages import Citation

router = APIRouter(prefix="/v1")

SessionId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "Missing or unknown API key."},
    404: {"model": ErrorBody, "description": "No such session for this caller."},
}
_TURN_ERRORS: dict[int | str, dict[str, Any]] = {
    **_ERRORS,
    409: {"model": ErrorBody, "description": "A turn of this session is still running."},
    502: {"model": ErrorBody, "description": "The model provider failed."},
    504: {"model": ErrorBody, "description": "The model provider timed out."},
}


DEPENDENCY_RETRY_AFTER = "2"
"""``Retry-After`` (seconds) of a 503 for PostgreSQL or Redis away, turns and requests alike."""


def error_response(
    status: int,
    detail: str,
    code: str,
    headers: dict[str, str] | None = None,
    budget: dict[str, Any] | None = None,
) -> JSONResponse:
    body = ErrorBody(detail=hide_paths(detail), code=code, trace_id=current_trace_id())
    data = body.model_dump()
    if budget is not None:  # 429: which budget, its limit and when it resets
        data["budget"] = budget
    return JSONResponse(data, status_code=status, headers=headers)


def _failure_response(exc: BaseException) -> JSONResponse:
    status, code = failure_of(exc)
    detail = str(exc) if status != 500 else "internal error"
    if isinstance(exc, TurnFailed) and exc.budget is not None:
        headers = {"Retry-After": str(exc.retry_after or 1)}
        return error_response(status, detail, code, headers=headers, budget=exc.budget)
    if status == 503:  # a dependency away: as the service's other 503 answers
        return error_response(status, detail, code, headers={"Retry-After": DEPENDENCY_RETRY_AFTER})
    return error_response(status, detail, code)


def _not_found() -> HTTPException:
    return HTTPException(status_code=404, detail="session not found")


@router.post("/sessions", status_code=201, tags=["sessions"], responses=_ERRORS)
def create_session(
    service: ServiceDep, caller: Caller, body: Annotated[CreateSession | None, Body()] = None
) -> SessionOut:
    """Start a new conversation owned by the caller."""
    info = service.sessions.create(caller, title=body.title if body else "")
    return SessionOut.of(info)


@router.get("/sessions", tags=["sessions"], responses=_ERRORS)
def list_sessions(service: ServiceDep, caller: Caller) -> SessionList:
    """The caller's sessions, most recently used first."""
    return SessionList(sessions=[SessionOut.of(s) for s in service.sessions.list_sessions(caller)])


@router.get("/sessions/{session_id}", tags=["sessions"], responses=_ERRORS)
def get_session(session_id: SessionId, service: ServiceDep, caller: Caller) -> SessionDetail:
    """A session with its whole transcript."""
    info = service.sessions.get(session_id, caller)
    messages = service.sessions.messages(session_id, caller)
    if info is None or messages is None:
        raise _not_found()
    return SessionDetail(
        **SessionOut.of(info).model_dump(), messages=[m.to_dict() for m in messages]
    )


@router.delete(
    "/sessions/{session_id}",
    status_code=204,
    tags=["sessions"],
    responses={**_ERRORS, 409: {"model": ErrorBody, "description": "A turn is running."}},
)
def delete_session(session_id: SessionId, service: ServiceDep, caller: Caller) -> Response:
    """Delete a session and its messages."""
    if service.chat.is_busy(session_id) and service.sessions.get(session_id, caller):
        return error_response(
            409, "session is answering a message; retry later", SessionBusyError.code
        )
    if not service.sessions.delete(session_id, caller):
        raise _not_found()
    service.chat.forget(session_id)
    # its background subagent tasks go with it (the tasks live on the event loop)
    anyio.from_thread.run(service.chat.tasks.cancel_session, caller.tenant_id, session_id)
    return Response(status_code=204)


class TaskList(BaseModel):
    tasks: list[dict[str, Any]] = Field(
        description="Background subagent tasks: id, subagent, task, status (running, done, "
        "failed, cancelled), output, error, created, finished (epoch seconds)."
    )


@router.get("/sessions/{session_id}/tasks", tags=["sessions"], responses=_ERRORS)
def list_session_tasks(session_id: SessionId, service: ServiceDep, caller: Caller) -> TaskList:
    """The session's background subagent tasks (started with ``agent_spawn``), oldest first."""
    if service.sessions.get(session_id, caller) is None:
        raise _not_found()
    owner = (caller.tenant_id, caller.user_id, session_id)
    return TaskList(tasks=[t.to_dict() for t in service.chat.tasks.tasks_of(owner)])


@router.post(
    "/sessions/{session_id}/messages",
    tags=["sessions"],
    responses={
        **_TURN_ERRORS,
        200: {
            "description": "With stream=true an SSE stream of events (text_delta, tool_started, "
            "tool_finished, citations, final, error, and any other agent event); with "
            "stream=false a ChatReply.",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
    },
    response_model=ChatReply,
)
async def post_message(
    session_id: SessionId, body: PostMessage, service: ServiceDep, caller: Caller, request: Request
) -> Response:
    """Send a user message; the answer streams as Server-Sent Events or comes as JSON.

    One turn at a time per session: while a turn runs, another message for the same session
    is answered 409 (with ``Retry-After``) rather than queued. A quiet stream carries
    ``: ping`` comments; a turn that fails before its first event (within about a second)
    is answered with its HTTP status, a later failure ends the stream with an ``error``
    event. A client that disconnects cancels the turn.
    """
    if await service.chat.store(service.sessions.get, session_id, caller) is None:
        raise _not_found()
    trace_id = current_trace_id()
    try:
        events = await service.chat.turn(
            session_id, caller, body.content, trace_id=trace_id,
            parent_span_id=current_parent_span_id(),
        )  # fmt: skip
    except SessionBusyError as exc:
        return error_response(409, str(exc), exc.code, headers={"Retry-After": "1"})
    pump = TurnPump(events)
    if not body.stream:
        return await reply_unless_gone(pump, request, lambda: _collect(session_id, trace_id, pump))
    heartbeat = service.config.heartbeat_interval
    first = await pump.next(min(heartbeat, FIRST_EVENT_GRACE))
    if isinstance(first, BaseException):
        await pump.close()
        return _failure_response(first)
    return StreamingResponse(
        _sse(pump, first, trace_id, heartbeat),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


FIRST_EVENT_GRACE = 1.0
"""Seconds a streamed turn may take to its first event and still fail with an HTTP status;
after that the stream starts (heartbeats first) and a failure is an ``error`` event."""

QUIET = object()  # no event within the wait
_Item = dict[str, Any] | BaseException | None  # an event, a failure, or the end


class TurnPump:
    """Runs a turn's events in a task of their own and hands them over through a queue, so
    the request can wait with a limit (heartbeats), and cancel the turn when the client goes
    (the turn's own cleanup then closes the model request and frees the session)."""

    def __init__(self, events: AsyncGenerator[dict[str, Any], None]) -> None:
        self._events = events
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._task = asyncio.create_task(self._run(), name="shelfhand-turn")

    async def _run(self) -> None:
        try:
            async for event in self._events:
                self._queue.put_nowait(event)
        except Exception as exc:  # TurnFailed, or a bug: handed to the request
            self._queue.put_nowait(exc)
        finally:
            await self._events.aclose()
            self._queue.put_nowait(None)

    async def next(self, timeout: float | None = None) -> _Item | object:
        """The next item, or ``QUIET`` when none came within ``timeout`` seconds."""
        with anyio.move_on_after(timeout if timeout is not None else float("inf")):
            return await self._queue.get()
        return QUIET

    async def close(self) -> None:
        """Cancel the turn if it still runs and wait (bounded) for its cleanup."""
        if not self._task.done():
            self._task.cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.wait([self._task], timeout=10)


def failure_of(exc: BaseException) -> tuple[int, str]:
    """HTTP status and code of a turn's failure."""
    if isinstance(exc, TurnFailed):
        return exc.status, exc.code
    return 500, "internal_error"


def public_failure(exc: BaseException) -> tuple[int, str, str]:
    """HTTP status, code and the message a client may see of a turn's failure."""
    status, code = failure_of(exc)
    return status, code, hide_paths(str(exc)) if status != 500 else "internal error"


async def pump_items(
    pump: TurnPump, first: _Item | object, heartbeat: float
) -> AsyncGenerator[_Item | object, None]:
    """``first``, then the turn's items (``QUIET`` after ``heartbeat`` quiet seconds) to its
    end; the turn is closed when this iterator is (use ``contextlib.aclosing``)."""
    item = first
    try:
        while item is not None:
            yield item
            item = await pump.next(heartbeat)
    finally:
        await pump.close()


async def _sse(
    pump: TurnPump, first: _Item | object, trace_id: str, heartbeat: float
) -> AsyncIterator[bytes]:
    n = 0
    async with aclosing(pump_items(pump, first, heartbeat)) as items:
        async for item in items:
            if item is QUIET:
                yield b": ping\n\n"
            elif isinstance(item, BaseException):
                status, code, message = public_failure(item)
                error = {
                    "type": "error",
                    "status": status,
                    "code": code,
                    "message": message,
                    "trace_id": trace_id,
                }
                if isinstance(item, TurnFailed) and item.budget is not None:
                    error["budget"] = item.budget
                    error["retry_after"] = item.retry_after
                yield sse_event(error, n + 1)
                return
            elif isinstance(item, dict):
                n += 1
                yield sse_event(item, n)


async def reply_unless_gone(
    pump: TurnPump, request: Request, collect: Callable[[], Awaitable[Response]]
) -> Response:
    """``await collect()`` (which reads the turn from ``pump``), cancelling the turn if the
    client disconnects first."""
    outcome: list[Response] = []
    async with anyio.create_task_group() as tg:

        async def cancel_on_disconnect() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass
            tg.cancel_scope.cancel()  # the client is gone: stop the turn

        async def answer() -> None:
            outcome.append(await collect())
            tg.cancel_scope.cancel()

        tg.start_soon(cancel_on_disconnect)
        tg.start_soon(answer)
    await pump.close()
    if not outcome:  # the client disconnected; nobody reads this
        return error_response(499, "the client closed the request", "client_closed")
    return outcome[0]


async def _collect(session_id: str, trace_id: str, pump: TurnPump) -> Response:
    steps: dict[str, ToolStep] = {}
    others: list[dict[str, Any]] = []
    final: dict[str, Any] | None = None
    while (event := await pump.next()) is not None:
        if isinstance(event, BaseException):
            return _failure_response(event)
        if not isinstance(event, dict):
            continue
        kind = event.get("type")
        if kind == "tool_started":
            steps[event["call_id"]] = ToolStep(
                call_id=event["call_id"], name=event["name"], arguments=event["arguments"]
            )
        elif kind == "tool_finished" and event["call_id"] in steps:
            step = steps[event["call_id"]]
            step.content = event["content"]
            step.is_error = event["is_error"]
            step.failure = event.get("failure", "")
            step.duration_ms = event["duration_ms"]
        elif kind == "final":
            final = event
        elif kind not in ("text_delta", "citations"):
            others.append(event)
    if final is None:  # pragma: no cover - the agent always ends with a final event
        return error_response(500, "the turn ended without an answer", "internal_error")
    reply = ChatReply(
        session_id=session_id,
        trace_id=trace_id,
        output=final.get("output", ""),
        citations=[CitationOut.of(Citation.from_dict(c)) for c in final.get("citations", [])],
        unknown_citations=final.get("unknown_citations", []),
        grounding=final.get("grounding"),
        extractive=final.get("extractive", False),
        fallback_reason=final.get("fallback_reason", ""),
        budget=final.get("budget"),
        error=final.get("error", ""),
        tool_steps=list(steps.values()),
        stop_reason=final.get("stop_reason", "final"),
        usage=final.get("usage", {}),
        events=others,
    )
    return JSONResponse(reply.model_dump())


@router.post(
    "/sessions/{session_id}/approvals/{approval_id}",
    tags=["sessions"],
    responses={
        **_ERRORS,
        404: {"model": ErrorBody, "description": "No such pending approval for this caller."},
    },
)
def decide_approval(
    session_id: SessionId,
    approval_id: Annotated[str, Path(min_length=1, max_length=64)],
    body: Decision,
    service: ServiceDep,
    caller: Caller,
) -> DecisionOut:
    """Approve or reject a tool call that waits for confirmation (an ``approval_required``
    event of this session's running turn); the turn's stream then continues."""
    if service.sessions.get(session_id, caller) is None:
        raise _not_found()
    if not service.chat.decide(
        session_id, approval_id, caller, approved=body.approved, reason=body.reason
    ):
        raise HTTPException(status_code=404, detail="no such pending approval")
    return DecisionOut(approval_id=approval_id, approved=body.approved)


@router.get("/memories", tags=["memories"], responses=_ERRORS)
def list_memories(service: ServiceDep, caller: Caller) -> MemoryList:
    """What the agent remembers about the caller (saved with the ``remember`` tool)."""
    items = service.memories.recall(caller, limit=200)
    return MemoryList(
        memories=[MemoryOut(id=m.id, content=m.content, created_at=m.created_at) for m in items]
    )


@router.delete("/memories/{memory_id}", status_code=204, tags=["memories"], responses=_ERRORS)
def delete_memory(
    memory_id: Annotated[str, Path(min_length=1, max_length=64)],
    service: ServiceDep,
    caller: Caller,
) -> Response:
    """Forget one memory of the caller."""
    if not service.memories.forget(caller, memory_id):
        raise HTTPException(status_code=404, detail="memory not found")
    return Response(status_code=204)
