"""``POST /v1/responses``: the OpenAI Responses API (Open Responses), text in and text out.

The same turn as ``/v1/chat/completions`` (:mod:`shelfhand.api.openai_routes`), in the
Responses shapes: ``input`` is a string or a list of messages (``input_text`` parts);
``instructions`` are ignored (the agent's instructions are the server's); the answer is
one ``message`` output item with an ``output_text`` part, its citations on the item as
``shelfhand.citations`` and the numbered sources appended to the text. Streamed, the events
are ``response.created``, ``response.output_item.added``, ``response.content_part.added``,
``response.output_text.delta``..., ``response.output_text.done``,
``response.content_part.done``, ``response.output_item.done`` and ``response.completed``
(``response.failed`` when the turn fails after the stream started).

Each response runs in a session of its own that is kept: ``previous_response_id`` continues
that session (its memory, its turn lock), as OpenAI's stored responses do. Not supported:
client-declared ``tools`` (400), non-text input parts (400), background mode.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from shelfhand.api.chat_routes import (
    QUIET,
    TurnPump,
    public_failure,
    pump_items,
    reply_unless_gone,
)
from shelfhand.api.deps import Caller, ServiceDep
from shelfhand.api.openai_routes import (
    TextPart,
    begin_turn,
    citation_info,
    failure_response,
    first_item,
    openai_error,
    streamed,
)
from shelfhand.api.tracing import current_trace_id
from shelfhand.core.errors import TurnFailed
from shelfhand.service.completions import AppendedAnswer, ClientMessage, final_sources

__all__ = ["router"]

router = APIRouter(prefix="/v1")


class InputMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart] = Field(max_length=200_000)
    type: Literal["message"] = "message"

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        if any(p.type not in ("input_text", "output_text", "text") for p in self.content):
            raise TurnFailed("only text input is accepted", status=400, code="unsupported_content")
        return "".join(p.text or "" for p in self.content)


class ResponsesRequest(BaseModel):
    """The Responses API request; other options are accepted and left to the server."""

    model_config = ConfigDict(extra="allow")
    model: str = Field(min_length=1, max_length=200, examples=["shelfhand"])
    input: str | list[InputMessage] = Field(
        min_length=1, max_length=200_000, examples=["保修期多久？"]
    )
    instructions: str | None = Field(default=None, max_length=200_000)
    stream: bool = False
    previous_response_id: str | None = Field(default=None, max_length=200)
    tools: list[dict[str, Any]] | None = None


@router.post(
    "/responses",
    tags=["openai"],
    responses=streamed(
        "A response object, or with stream=true an SSE stream of response.* events."
    ),
)
async def create_response(
    body: ResponsesRequest, service: ServiceDep, caller: Caller, request: Request
) -> Response:
    """Run a turn of the workspace's agent, Responses style (streamed or not)."""

    def messages() -> list[ClientMessage]:
        if isinstance(body.input, str):
            return [ClientMessage(role="user", text=body.input)]
        return [ClientMessage(role=m.role, text=m.text()) for m in body.input]

    previous = body.previous_response_id or ""
    started = await begin_turn(
        service,
        caller,
        model=body.model,
        tools=body.tools,
        messages=messages,
        session_id=_session_of(previous) if previous else "",
        conversation="" if previous else f"response:{uuid.uuid4().hex}",
    )
    if isinstance(started, Response):
        return started
    pump, session_id = started
    out = _Output(model=body.model, session_id=session_id, trace_id=current_trace_id())
    if not body.stream:
        return await reply_unless_gone(pump, request, lambda: out.collect(pump))
    first = await first_item(pump, service)
    if isinstance(first, Response):
        return first
    return StreamingResponse(
        out.stream(pump, first, service.config.heartbeat_interval),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _session_of(response_id: str) -> str:
    """The session a response id names (``resp_<session>_<trace>``); ``""`` if none."""
    if not response_id.startswith("resp_"):
        return ""
    return response_id.removeprefix("resp_").split("_", 1)[0]


class _Output:
    """One response's object and stream events, from the turn's events."""

    def __init__(self, *, model: str, session_id: str, trace_id: str) -> None:
        self.model = model
        self.id = f"resp_{session_id}_{trace_id}"
        self.item_id = f"msg_{trace_id}"
        self.session_id = session_id
        self.trace_id = trace_id
        self.created = int(time.time())
        self.sequence = 0
        self.answer = AppendedAnswer()
        """The answer as this stream sends it (its final text is all it sent)."""

    def response(
        self,
        status: str,
        text: str | None = None,
        final: Mapping[str, Any] | None = None,
        error: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        output: list[dict[str, Any]] = []
        usage = None
        if text is not None and final is not None:
            info = citation_info(final, session_id=self.session_id, trace_id=self.trace_id)
            output.append(self.item("completed", text, shelfhand=info))
            tokens = final.get("usage") or {}
            used_in, used_out = tokens.get("input_tokens", 0), tokens.get("output_tokens", 0)
            usage = {
                "input_tokens": used_in,
                "output_tokens": used_out,
                "total_tokens": used_in + used_out,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            }
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": False,
            "tool_choice": "none",
            "tools": [],
            "usage": usage,
            "error": error,
        }

    def item(self, status: str, text: str = "", **extra: Any) -> dict[str, Any]:
        content = [{"type": "output_text", "text": text, "annotations": []}] if text else []
        return {
            "type": "message",
            "id": self.item_id,
            "status": status,
            "role": "assistant",
            "content": content,
            **extra,
        }

    async def collect(self, pump: TurnPump) -> Response:
        while (event := await pump.next()) is not None:
            if isinstance(event, BaseException):
                return failure_response(event)
            if isinstance(event, dict) and event.get("type") == "final":
                return JSONResponse(self.response("completed", _answer(event), event))
        return openai_error(
            500, "the turn ended without an answer", "internal_error"
        )  # pragma: no cover

    def event(self, kind: str, **data: Any) -> bytes:
        self.sequence += 1
        payload = {"type": kind, "sequence_number": self.sequence, **data}
        return f"event: {kind}\ndata: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()

    async def stream(self, pump: TurnPump, first: object, heartbeat: float) -> AsyncIterator[bytes]:
        at = {"item_id": self.item_id, "output_index": 0, "content_index": 0}
        yield self.event("response.created", response=self.response("in_progress"))
        yield self.event(
            "response.output_item.added", output_index=0, item=self.item("in_progress")
        )
        part = {"type": "output_text", "text": "", "annotations": []}
        yield self.event("response.content_part.added", part=part, **at)
        async with aclosing(pump_items(pump, first, heartbeat)) as items:
            async for item in items:
                if item is QUIET:
                    yield b": ping\n\n"
                elif isinstance(item, BaseException):
                    _, code, message = public_failure(item)
                    failed = self.response("failed", error={"code": code, "message": message})
                    yield self.event("response.failed", response=failed)
                    return
                elif not isinstance(item, dict):
                    continue
                else:
                    text = self.answer.add(item)
                    if text:
                        yield self.event(
                            "response.output_text.delta", delta=text, logprobs=[], **at
                        )
                    if item.get("type") == "final":
                        for chunk in self._ending(item, at):
                            yield chunk

    def _ending(self, final: Mapping[str, Any], at: dict[str, Any]) -> list[bytes]:
        text = self.answer.sent  # (the deltas add up to the text, as clients expect)
        done = self.response("completed", text, final)
        part = {"type": "output_text", "text": text, "annotations": []}
        return [
            self.event("response.output_text.done", text=text, logprobs=[], **at),
            self.event("response.content_part.done", part=part, **at),
            self.event("response.output_item.done", output_index=0, item=done["output"][0]),
            self.event("response.completed", response=done),
        ]


def _answer(final: Mapping[str, Any]) -> str:
    return str(final.get("output", "")) + final_sources(final)
