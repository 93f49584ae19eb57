"""An OpenAI-compatible endpoint: ``GET /v1/models`` and ``POST /v1/chat/completions``.

Clients built for the OpenAI API (the ``openai`` SDK, Open WebUI, LibreChat, IDE plugins)
talk to a shelfhand agent with the service's API keys as their OpenAI key: the same tenant,
user and roles as the session API, and the same turn machinery (see
:mod:`shelfhand.service.completions` for which session a request runs in).

What shelfhand adds to the wire format, all optional for a client to read:

* ``shelfhand`` on the reply's message and on the stream's last chunk: ``citations`` (the
  passages the answer cites, as in the session API), ``session_id``, ``trace_id``,
  ``stop_reason``, and (not streamed) ``tool_steps``;
* the numbered sources appended to the answer text ("Sources: [1] ..."), so a plain chat UI
  shows them;
* tool steps as status lines in the streamed text, when asked for with the header
  ``X-Shelfhand-Steps: 1`` or ``"shelfhand": {"steps": true}`` in the body (off by default:
  they become part of the text a client stores).

Refused: a client-declared ``tools`` list (400: the agent's tools are the server's). Errors
have OpenAI's body, ``{"error": {"message", "type", "param", "code"}}``: 400, 401, 404
(unknown model or session), 429 with ``Retry-After`` (the session is answering another
message), 502 (the model failed), 503, 504 (the model timed out).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import aclosing
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from shelfhand.api.chat_routes import (
    FIRST_EVENT_GRACE,
    QUIET,
    TurnPump,
    public_failure,
    pump_items,
    reply_unless_gone,
)
from shelfhand.api.deps import Caller, Service, ServiceDep, hide_paths, json_bytes
from shelfhand.api.schemas import CitationOut
from shelfhand.api.tracing import current_parent_span_id, current_trace_id
from shelfhand.core.context import UserContext
from shelfhand.core.errors import TurnFailed
from shelfhand.core.messages import Citation
from shelfhand.service.completions import (
    AppendedAnswer,
    ClientMessage,
    agent_of,
    final_sources,
    open_turn,
    served_models,
)

__all__ = [
    "ERRORS",
    "OPENAI_PATHS",
    "begin_turn",
    "citation_info",
    "failure_response",
    "first_item",
    "openai_error",
    "router",
    "streamed",
]

router = APIRouter(prefix="/v1")

OPENAI_PATHS = ("/v1/models", "/v1/chat/completions", "/v1/responses")
"""Routes whose errors have OpenAI's body rather than shelfhand's."""

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    429: "rate_limit_error",
}


class OpenAIError(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class OpenAIErrorBody(BaseModel):
    error: OpenAIError


def openai_error(
    status: int,
    message: str,
    code: str,
    headers: Mapping[str, str] | None = None,
    param: str | None = None,
) -> JSONResponse:
    """An error response with OpenAI's body (what OpenAI clients parse and show)."""
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    body = OpenAIErrorBody(
        error=OpenAIError(message=hide_paths(message), type=kind, param=param, code=code)
    )
    extra = {"X-Trace-Id": current_trace_id()}
    return JSONResponse(body.model_dump(), status_code=status, headers={**extra, **(headers or {})})


ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": OpenAIErrorBody, "description": "Invalid request (OpenAI error body)."},
    401: {"model": OpenAIErrorBody, "description": "Missing or unknown API key."},
    404: {"model": OpenAIErrorBody, "description": "Unknown model or session."},
    429: {"model": OpenAIErrorBody, "description": "The session is answering a message."},
    502: {"model": OpenAIErrorBody, "description": "The model provider failed."},
    504: {"model": OpenAIErrorBody, "description": "The model provider timed out."},
}


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "shelfhand"
    description: str = ""


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


@router.get("/models", tags=["openai"], responses={401: ERRORS[401]})
def list_models(service: ServiceDep, caller: Caller) -> ModelList:
    """The agents a client may name as ``model`` (OpenAI's ``GET /v1/models``)."""
    models = served_models(service.chat)
    return ModelList(data=[ModelCard(id=m["id"], description=m["description"]) for m in models])


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str = Field(max_length=64)
    text: str | None = Field(default=None, max_length=200_000)


class ChatMessageIn(BaseModel):
    model_config = ConfigDict(extra="allow")  # name, tool_calls, ... of other clients
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = Field(default=None, max_length=200_000)

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        parts = self.content or []
        if any(p.type != "text" for p in parts):
            raise TurnFailed(
                "only text content is accepted", status=400, code="unsupported_content"
            )
        return "".join(p.text or "" for p in parts)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: bool = False


class ShelfhandOptions(BaseModel):
    steps: bool = Field(default=False, description="Tool steps as status lines in the stream.")


class ChatCompletionRequest(BaseModel):
    """OpenAI's chat-completions request; sampling options (temperature, ...) are accepted
    and left to the server's model settings."""

    model_config = ConfigDict(extra="allow")
    model: str = Field(min_length=1, max_length=200, examples=["shelfhand"])
    messages: list[ChatMessageIn] = Field(
        min_length=1, max_length=1000, examples=[[{"role": "user", "content": "保修期多久？"}]]
    )
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = Field(
        default=None,
        max_length=256,
        description="A conversation key: requests with the same key continue one session.",
    )
    tools: list[dict[str, Any]] | None = Field(
        default=None, description="Refused when not empty: the agent's tools are the server's."
    )
    n: int | None = Field(
        default=None, ge=1, description="Refused above 1: each request gets one answer."
    )
    shelfhand: ShelfhandOptions | None = None


SessionHeader = Annotated[
    str | None,
    Header(
        alias="X-Shelfhand-Session",
        max_length=64,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="Run in this session of the caller (its memory and turn lock).",
    ),
]
StepsHeader = Annotated[
    str | None, Header(alias="X-Shelfhand-Steps", max_length=8, description="1: tool steps.")
]


def streamed(description: str) -> dict[int | str, dict[str, Any]]:
    """The documented responses of a route that answers JSON or, streamed, SSE."""
    sse = {"text/event-stream": {"schema": {"type": "string"}}}
    return {**ERRORS, 200: {"description": description, "content": sse}}


@router.post(
    "/chat/completions",
    tags=["openai"],
    responses=streamed(
        "A chat.completion, or with stream=true an SSE stream of chat.completion.chunk "
        "objects ending with [DONE]."
    ),
)
async def chat_completions(
    body: ChatCompletionRequest,
    service: ServiceDep,
    caller: Caller,
    request: Request,
    session: SessionHeader = None,
    steps: StepsHeader = None,
) -> Response:
    """Run a turn of the workspace's agent, OpenAI style (streamed or not)."""
    if body.n is not None and body.n > 1:  # silently one choice would break a client's [1]
        return openai_error(
            400,
            f"n={body.n} is not supported: each request gets one answer (a turn of the agent); "
            "send the request again for another",
            "n_not_supported",
            param="n",
        )
    started = await begin_turn(
        service,
        caller,
        model=body.model,
        tools=body.tools,
        messages=lambda: [ClientMessage(role=m.role, text=m.text()) for m in body.messages],
        session_id=session or "",
        conversation=body.user or "",
    )
    if isinstance(started, Response):
        return started
    pump, session_id = started
    reply = _Reply(model=body.model, trace_id=current_trace_id(), session_id=session_id)
    if not body.stream:
        return await reply_unless_gone(pump, request, lambda: reply.collect(pump))
    first = await first_item(pump, service)
    if isinstance(first, Response):
        return first
    show_steps = steps in ("1", "true") or bool(body.shelfhand and body.shelfhand.steps)
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    heartbeat = service.config.heartbeat_interval
    return StreamingResponse(
        reply.stream(pump, first, heartbeat, steps=show_steps, usage=include_usage),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def begin_turn(
    service: Service,
    caller: UserContext,
    *,
    model: str,
    tools: list[dict[str, Any]] | None,
    messages: Callable[[], list[ClientMessage]],
    session_id: str = "",
    conversation: str = "",
) -> tuple[TurnPump, str] | Response:
    """Check an OpenAI-style request and start its turn: the turn's pump and session id, or
    the error response (client tools, unknown model, bad messages, unknown or busy
    session)."""
    if tools:
        return openai_error(
            400,
            "client-declared tools are not supported: the agent's tools are the server's "
            "(Open WebUI: turn off the model's Builtin Tools capability)",
            "tools_not_supported",
            param="tools",
        )
    agent = agent_of(service.chat, model)
    if agent is None:
        return openai_error(
            404, f"the model {model!r} does not exist", "model_not_found", param="model"
        )
    try:
        turn = await open_turn(
            service.chat,
            caller,
            messages(),
            trace_id=current_trace_id(),
            parent_span_id=current_parent_span_id(),
            agent=agent,
            session_id=session_id,
            conversation=conversation,
        )
    except TurnFailed as exc:
        return openai_error(exc.status, str(exc), exc.code, _retry_after(exc))
    return TurnPump(turn.events), turn.session_id


async def first_item(pump: TurnPump, service: Service) -> object:
    """A stream's first item, or the error response of a turn that failed at once (a
    failure within ``FIRST_EVENT_GRACE`` seconds is answered with its HTTP status)."""
    first = await pump.next(min(service.config.heartbeat_interval, FIRST_EVENT_GRACE))
    if isinstance(first, BaseException):
        await pump.close()
        return failure_response(first)
    return first


def failure_response(exc: BaseException) -> JSONResponse:
    """The OpenAI error response of a failed turn."""
    status, code, message = public_failure(exc)
    return openai_error(status, message, code, _retry_after(exc))


def _retry_after(exc: BaseException) -> dict[str, str] | None:
    """``Retry-After`` of a 429: a spent budget's reset, else a second (a busy session)."""
    if not isinstance(exc, TurnFailed) or exc.status != 429:
        return None
    return {"Retry-After": str(exc.retry_after or 1)}


def _usage(final: Mapping[str, Any]) -> dict[str, int]:
    usage = final.get("usage") or {}
    prompt, completion = int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _finish_reason(final: Mapping[str, Any]) -> str:
    return "length" if final.get("stop_reason") == "max_iters" else "stop"


def _step_line(event: Mapping[str, Any]) -> str:
    name = event.get("name", "")
    agent = f"{event['agent']}: " if event.get("agent") else ""
    if event.get("type") == "tool_started":
        return f"> {agent}running `{name}`\n\n"
    outcome = "failed" if event.get("is_error") else "done"
    return f"> {agent}`{name}` {outcome} ({float(event.get('duration_ms', 0)):.0f} ms)\n\n"


def citation_info(final: Mapping[str, Any], *, session_id: str, trace_id: str) -> dict[str, Any]:
    """The ``shelfhand`` extra field of an answer: its citations, session, trace, stop."""
    citations = [Citation.from_dict(c) for c in final.get("citations", [])]
    return {
        "citations": [CitationOut.of(c).model_dump() for c in citations],
        "session_id": session_id,
        "trace_id": trace_id,
        "stop_reason": final.get("stop_reason", "final"),
        # the answer check (see the answers page): per-sentence support, and whether the
        # answer is the passages' own sentences in place of the model's, and why
        "grounding": final.get("grounding"),
        "extractive": bool(final.get("extractive")),
        "fallback_reason": final.get("fallback_reason") or "",
        "budget": final.get("budget"),  # the budget that ran out mid-turn, if one did
    }


class _Reply:
    """Builds one request's chat.completion (or its chunks) from the turn's events."""

    def __init__(self, *, model: str, trace_id: str, session_id: str) -> None:
        self.model = model
        self.trace_id = trace_id
        self.session_id = session_id
        self.id = f"chatcmpl-{trace_id}"
        self.created = int(time.time())
        self.answer = AppendedAnswer()
        """The answer as this append-only stream sends it."""

    def extra(self, final: Mapping[str, Any]) -> dict[str, Any]:
        return citation_info(final, session_id=self.session_id, trace_id=self.trace_id)

    async def collect(self, pump: TurnPump) -> Response:
        steps: list[dict[str, Any]] = []
        final: dict[str, Any] | None = None
        while (event := await pump.next()) is not None:
            if isinstance(event, BaseException):
                return failure_response(event)
            if not isinstance(event, dict):
                continue
            if event.get("type") == "tool_finished":
                steps.append(
                    {k: event.get(k) for k in ("name", "is_error", "failure", "duration_ms")}
                )
            elif event.get("type") == "final":
                final = event
        if final is None:  # pragma: no cover - the agent always ends with a final event
            return openai_error(500, "the turn ended without an answer", "internal_error")
        info = self.extra(final)
        message = {
            "role": "assistant",
            "content": str(final.get("output", "")) + final_sources(final),
            "shelfhand": {**info, "tool_steps": steps},
        }
        return JSONResponse(
            {
                "id": self.id,
                "object": "chat.completion",
                "created": self.created,
                "model": self.model,
                "choices": [
                    {"index": 0, "message": message, "finish_reason": _finish_reason(final)}
                ],
                "usage": _usage(final),
            }
        )

    def chunk(self, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        data = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }
        return b"data: " + json_bytes(data) + b"\n\n"

    async def stream(
        self, pump: TurnPump, first: object, heartbeat: float, *, steps: bool, usage: bool
    ) -> AsyncIterator[bytes]:
        yield self.chunk({"role": "assistant", "content": ""})
        async with aclosing(pump_items(pump, first, heartbeat)) as items:
            async for item in items:
                if item is QUIET:
                    yield b": ping\n\n"
                elif isinstance(item, BaseException):
                    _, code, message = public_failure(item)
                    error = {"message": message, "type": "server_error", "code": code}
                    yield b"data: " + json.dumps({"error": error}).encode() + b"\n\n"
                    return
                elif isinstance(item, dict):
                    kind = item.get("type")
                    if steps and kind in ("tool_started", "tool_finished"):
                        yield self.chunk({"content": _step_line(item)})
                        continue
                    text = self.answer.add(item)
                    if text:
                        yield self.chunk({"content": text})
                    if kind == "final":
                        for part in self._ending(item, usage=usage):
                            yield part
        yield b"data: [DONE]\n\n"

    def _ending(self, final: Mapping[str, Any], *, usage: bool) -> list[bytes]:
        info = self.extra(final)
        parts = [self.chunk({}, _finish_reason(final), shelfhand=info)]
        if usage:
            data = {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": _usage(final),
            }
            parts.append(b"data: " + json.dumps(data).encode() + b"\n\n")
        return parts
