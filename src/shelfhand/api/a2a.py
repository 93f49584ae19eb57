"""The workspace's agent as an A2A server (``shelfhand[a2a]``: the official ``a2a-sdk`` 1.x).

Mounted by :func:`~shelfhand.api.server.create_app` when the extra is installed:

* ``GET /.well-known/agent-card.json`` (and ``/a2a/shelfhand/.well-known/agent-card.json``):
  the agent card: the chat agent's description, one skill per tool and subagent, JSON-RPC
  at ``/a2a/shelfhand``, protocol 1.0, and the auth scheme (the service's API keys as HTTP
  bearer tokens). The card also carries the 0.3 fields (``url``, ``preferredTransport``...),
  and the JSON-RPC endpoint answers 0.3 method names, so 0.3 clients keep working.
* ``POST /a2a/shelfhand``: JSON-RPC ``SendMessage``, ``SendStreamingMessage``, ``GetTask``,
  ``ListTasks``, ``CancelTask`` (and ``SubscribeToTask``). Every call needs
  ``Authorization: Bearer <API key>``; tasks belong to the key's tenant and user, and another
  caller's task id is "task not found".

A message runs as one turn of :class:`~shelfhand.service.chat.ChatService` (turn lock,
governance, memory) in the shelfhand session of its A2A ``contextId``, so a context is a
conversation. The answer streams as an artifact (``answer``, appended chunk by chunk; when
the turn took back text it had streamed, the last chunk replaces the artifact with the answer
alone), its citations ride in the artifact's metadata (``citations``), and the task completes
(or fails with the turn's error). A long run is an ordinary task: ``returnImmediately``
answers at once with the task to poll with ``GetTask``, and ``CancelTask`` stops the turn.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import sys
from typing import TYPE_CHECKING, Any

from a2a.auth.user import User
from a2a.helpers.proto_helpers import new_task, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import DefaultRequestHandlerV2
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import DefaultServerCallContextBuilder, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    TaskState,
)
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from shelfhand.api.deps import caller_for_header
from shelfhand.api.text_bodies import BodyTooLarge, lone_surrogate, read_body, replaying
from shelfhand.core.errors import TurnFailed
from shelfhand.core.messages import Citation
from shelfhand.core.version import __version__
from shelfhand.service.completions import (
    AGENT_MODEL,
    AppendedAnswer,
    ClientMessage,
    open_turn,
    served_models,
    whole_answer,
)

if TYPE_CHECKING:
    from a2a.server.events import EventQueue

    from shelfhand.api.deps import Service
    from shelfhand.core.context import UserContext

logger = logging.getLogger(__name__)

__all__ = ["A2A_PATH", "agent_card", "agent_path", "mount_a2a"]

A2A_PATH = f"/a2a/{AGENT_MODEL}"
"""Where the workspace's agent answers JSON-RPC."""

_USER_KEY = "shelfhand_user"


class _Caller(User):
    def __init__(self, user: UserContext) -> None:
        self.user = user

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self.user.scope  # tasks are stored per tenant and user (the SDK's owner)


def _caller_of(service: Service, headers: Any) -> UserContext | None:
    return caller_for_header(service, str(headers.get("authorization", "")))


class _ContextBuilder(DefaultServerCallContextBuilder):
    def __init__(self, service: Service) -> None:
        self.service = service

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        user = _caller_of(self.service, request.headers)
        if user is None:  # pragma: no cover - _BearerOnly refused the request
            raise PermissionError("unauthenticated A2A call")
        context.user = _Caller(user)
        context.state[_USER_KEY] = user
        headers = context.state.get("headers", {})  # the SDK reads A2A-Version there
        context.state["headers"] = {k: v for k, v in headers.items() if k != "authorization"}
        return context


_MAX_BODY = 4 * 1024 * 1024
"""Bytes of one JSON-RPC request (a message with its parts; files travel by URL)."""
_PARSE_ERROR = -32700


class _BearerOnly:
    """401 for an A2A call without a known API key, and a parse error for a body that is not
    UTF-8 or nests too deep, before the SDK sees it."""

    def __init__(self, app: ASGIApp, *, service: Service, paths: frozenset[str]) -> None:
        self.app = app
        self.service = service
        self.paths = paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in self.paths:
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            if _caller_of(self.service, headers) is None:
                body = {"detail": "missing or unknown API key", "code": "http_401"}
                response = JSONResponse(
                    body, status_code=401, headers={"WWW-Authenticate": "Bearer"}
                )
                await response(scope, receive, send)
                return
            if scope.get("method") == "POST":
                await self._checked_body(scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _checked_body(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A JSON-RPC parse error for a body that is not UTF-8, nests too deep or holds an
        integer too long to read (the SDK answers such a body with an internal error) and
        413 past ``_MAX_BODY``; else the SDK gets the body."""
        try:
            body = await read_body(receive, _MAX_BODY)
        except BodyTooLarge:
            await JSONResponse(
                {"detail": "request body too large", "code": "http_413"}, status_code=413
            )(scope, receive, send)
            return
        if body is None:  # the client went away
            return
        problem = _unreadable(body)
        if problem:  # the SDK parses the JSON and answers bad JSON right; not these
            error = {"code": _PARSE_ERROR, "message": f"Parse error: {problem}"}
            await JSONResponse({"jsonrpc": "2.0", "id": None, "error": error})(scope, receive, send)
            return
        await self.app(scope, replaying(body, receive), send)


def _unreadable(body: bytes) -> str:
    """Why ``body`` is not JSON's UTF-8 text, or nests too deep to parse ("" when neither).
    Valid UTF-8 is not enough: the SDK's ``json.loads`` of the bytes guesses UTF-16 or UTF-32
    from NUL bytes among the first four (``b"0\\x000\\xc2\\x80"``), fails to decode, and
    answers an internal error."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return str(exc)
    encoding = json.detect_encoding(body)
    if encoding not in ("utf-8", "utf-8-sig"):
        return f"the body reads as {encoding}, and JSON-RPC bodies are UTF-8"
    # ("\ud800" alone: the turn's text could not be stored)
    return _parse_problem(body) or lone_surrogate(body)


_FEW_BRACKETS = 200
"""A body with no more opening brackets than this cannot nest past the parser's depth."""


def _parse_problem(body: bytes) -> str:
    """Why ``body`` nests too deep to parse, or holds an integer too long to read ("" when
    neither, or when it is not JSON: the SDK says so). ``json.loads`` raises
    ``RecursionError`` near Python's recursion limit, and ``ValueError`` for an integer of
    more digits than ``sys.get_int_max_str_digits()``; the SDK answered both with an
    internal error naming the cause. Only a body with many brackets or a long run of digits
    is parsed here."""
    digits = sys.get_int_max_str_digits()
    many = body.count(b"[") + body.count(b"{") > _FEW_BRACKETS  # (two C scans)
    if not many and (not digits or _digit_run(digits).search(body) is None):
        return ""
    try:
        json.loads(body)
    except RecursionError:
        return "the JSON nests too deep"
    except json.JSONDecodeError:
        pass  # (not JSON: the SDK answers that right)
    except ValueError:  # (an integer past the digits Python converts)
        return f"a number in the JSON has more than {digits} digits"
    return ""


@functools.lru_cache(maxsize=2)
def _digit_run(digits: int) -> re.Pattern[bytes]:
    """More than ``digits`` digits in a row."""
    return re.compile(rb"[0-9]{%d}" % (digits + 1))


class ShelfhandExecutor(AgentExecutor):
    """Runs an A2A message as a turn of the service's chat logic."""

    def __init__(self, service: Service, agent: str = "") -> None:
        self.service = service
        self.agent = agent

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        user: UserContext = context.call_context.state[_USER_KEY]
        task_id, context_id = context.task_id or "", context.context_id or ""
        updater = TaskUpdater(event_queue, task_id, context_id)
        if context.current_task is None:
            task = new_task(task_id, context_id, TaskState.TASK_STATE_SUBMITTED)
            if context.message is not None:
                task.history.append(context.message)
            await event_queue.enqueue_event(task)
        await updater.start_work()
        text = context.get_user_input()
        try:
            turn = await open_turn(
                self.service.chat,
                user,
                [ClientMessage(role="user", text=text)],
                trace_id=f"a2a-{task_id}",
                conversation=f"a2a:{self.agent}:{context_id}",
                agent=self.agent,
            )
        except TurnFailed as exc:
            await updater.failed(new_text_message(str(exc), context_id=context_id))
            return
        answer = f"{task_id}-answer"
        appended = AppendedAnswer()  # chunks appended to the artifact, as the OpenAI streams
        try:
            async for event in turn.events:
                started = appended.started
                text = appended.add(event)
                if event.get("type") == "final":
                    citations = [Citation.from_dict(c) for c in event.get("citations", [])]
                    metadata: dict[str, Any] = {"citations": [c.to_dict() for c in citations]}
                    # text the turn took back (a withdrawn guess, an answer the check
                    # replaced) was appended as it streamed; the last chunk then replaces
                    # the artifact (``append`` false) with the answer alone, the turn's
                    # words for why in its metadata (``notice``), so the task, what a
                    # blocking caller gets, holds no text taken back
                    whole = appended.rewritten
                    if whole:
                        metadata["notice"] = appended.notice
                    await updater.add_artifact(
                        [new_text_part(whole_answer(event) if whole else text)],
                        artifact_id=answer,
                        name="answer",
                        append=started and not whole,
                        last_chunk=True,
                        metadata=metadata,
                    )
                elif text:
                    await updater.add_artifact(
                        [new_text_part(text)], artifact_id=answer, name="answer", append=started
                    )
        except TurnFailed as exc:
            await updater.failed(new_text_message(str(exc), context_id=context_id))
            return
        finally:
            await turn.events.aclose()
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        # the SDK has cancelled execute() already, which closed the turn (and its lock)
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.cancel()


def agent_card(service: Service, base_url: str, agent: str = "") -> AgentCard:
    """The agent card of the workspace's agent (or of its subagent ``agent``), served from
    ``base_url``."""
    model = f"{AGENT_MODEL}/{agent}" if agent else AGENT_MODEL
    info = next(m for m in served_models(service.chat) if m["id"] == model)
    url = base_url.rstrip("/") + agent_path(agent)
    spec = next((s for s in service.chat.subagents if s.id == agent), None)
    if spec is not None:  # a subagent: its own tools
        skills = [AgentSkill(id=t, name=t, description=t, tags=["tool"]) for t in spec.tools]
    else:
        skills = [
            AgentSkill(id=t.name, name=t.name, description=t.description or t.name, tags=["tool"])
            for t in service.toolkit.visible_tools()
        ]
        skills += [
            AgentSkill(id=s.id, name=s.name or s.id, description=s.description, tags=["subagent"])
            for s in service.chat.subagents
        ]
    if not skills:
        skills = [AgentSkill(id="answer", name="answer", description=info["description"])]
    return AgentCard(
        name=model,
        description=info["description"],
        version=__version__,
        supported_interfaces=[  # one endpoint answers both (the SDK's 0.3 compatibility)
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=version)
            for version in ("1.0", "0.3")
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=skills,
        security_schemes={
            "bearer": SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="bearer", description="An API key of the shelfhand service."
                )
            )
        },
        security_requirements=[SecurityRequirement(schemes={"bearer": _no_scopes()})],
    )


def _no_scopes() -> StringList:
    return StringList()


def agent_path(agent: str = "") -> str:
    """Where an agent answers JSON-RPC: ``/a2a/shelfhand`` or ``/a2a/shelfhand/<subagent>``."""
    return f"{A2A_PATH}/{agent}" if agent else A2A_PATH


def mount_a2a(api: FastAPI, service: Service) -> None:
    """Add the A2A routes to ``api``: the chat agent's card and JSON-RPC endpoint, and one
    of each per subagent (with a chat model configured)."""
    agents = [""] + [m["id"].split("/", 1)[1] for m in served_models(service.chat)[1:]]
    for agent in agents:
        path = agent_path(agent)

        def card(request: Request, agent: str = agent) -> JSONResponse:
            return JSONResponse(
                agent_card_to_dict(agent_card(service, str(request.base_url), agent))
            )

        cards = [f"{path}/.well-known/agent-card.json"]
        if not agent:
            cards.append("/.well-known/agent-card.json")
        for url in cards:
            api.add_api_route(url, card, methods=["GET"], tags=["a2a"], include_in_schema=False)
        handler = DefaultRequestHandlerV2(
            agent_executor=ShelfhandExecutor(service, agent),
            task_store=InMemoryTaskStore(),  # owner: the caller's scope (tenant and user)
            agent_card=agent_card(service, "http://localhost", agent),
        )
        routes = create_jsonrpc_routes(
            handler,
            rpc_url=path,
            context_builder=_ContextBuilder(service),
            enable_v0_3_compat=True,
        )
        api.router.routes.extend(routes)  # not in the OpenAPI schema: JSON-RPC, not REST
    api.add_middleware(_BearerOnly, service=service, paths=frozenset(map(agent_path, agents)))
