"""Chat completions in the OpenAI style, run as turns of the service's chat logic.

Transport-free: the HTTP route (:mod:`shelfhand.api.openai_routes`) parses the wire format
and calls :func:`open_turn`, which picks the shelfhand session the request belongs to and
starts a turn of :class:`~shelfhand.service.chat.ChatService` (the same turn lock, memory,
governance and caller identity as ``POST /v1/sessions/{id}/messages``). There is no second
agent path.

Which session a request runs in:

* a session header (``X-Shelfhand-Session``): that session of the caller; the server keeps
  its memory, so only the request's last user message is used;
* the request's ``user`` field: a session derived from the caller and that value (created
  on first use); a request with earlier messages runs with those as the conversation (a
  client that keeps the history, such as a chat UI, stays in charge of it), a request with
  only the new message continues the server's memory of the session;
* neither: a new session for this one request, seeded with the history the client sent and
  deleted when the turn ends.

The caller is always the API key's: nothing in the messages (a system message claiming to
be another user or tenant, say) reaches the identity the tools and retrieval see. Client
``system`` and ``developer`` messages are dropped: the agent's instructions are the server's.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shelfhand.agent.fallbacks import in_chinese
from shelfhand.core.citations import cited_numbers
from shelfhand.core.errors import NotFoundError, SessionBusyError, TurnFailed
from shelfhand.core.messages import Citation, Message
from shelfhand.knowledge.evidence.citations import label

if TYPE_CHECKING:
    from shelfhand.core.context import UserContext
    from shelfhand.service.chat import ChatService

logger = logging.getLogger(__name__)

__all__ = [
    "AGENT_MODEL",
    "AppendedAnswer",
    "ClientMessage",
    "CompletionTurn",
    "agent_of",
    "final_sources",
    "open_turn",
    "replaced_notice",
    "served_models",
    "sources_text",
    "whole_answer",
    "withdrawn_notice",
]

AGENT_MODEL = "shelfhand"
"""The model name of the workspace's chat agent (the supervisor when subagents exist)."""
SOURCES = "Sources:"
SOURCES_ZH = "来源："
"""The heading of the sources under an answer in Chinese (:func:`sources_text`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientMessage:
    """One message of the history a client sent: its role and its text."""

    role: str
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CompletionTurn:
    """A started turn: its events (see :meth:`ChatService.turn`) and its session."""

    session_id: str
    events: AsyncGenerator[dict[str, Any], None]
    ephemeral: bool
    """The session exists for this request only (deleted when the events end)."""


def served_models(chat: ChatService) -> list[dict[str, str]]:
    """The models a client may name, described for ``GET /v1/models``: the chat agent
    (``shelfhand``; the supervisor when subagents are declared), then each subagent and
    pipeline as ``shelfhand/<id>`` (with a chat model configured)."""
    if chat.subagents:
        names = ", ".join(s.id for s in chat.subagents)
        description = f"The workspace's supervisor; delegates to: {names}."
    elif chat.model is not None:
        description = "The workspace's chat agent, with its tools and knowledge."
    else:
        description = "Cited passages from the workspace's knowledge (no chat model set)."
    models = [{"id": AGENT_MODEL, "description": description}]
    if chat.model is not None:
        models += [
            {"id": f"{AGENT_MODEL}/{s.id}", "description": s.description} for s in chat.subagents
        ]
    return models


def agent_of(chat: ChatService, model: str) -> str | None:
    """The subagent a model name asks for (``""``: the chat agent; ``None``: no such model)."""
    if model == AGENT_MODEL:
        return ""
    served = {m["id"] for m in served_models(chat)}
    return model.removeprefix(f"{AGENT_MODEL}/") if model in served else None


def split_history(messages: Sequence[ClientMessage]) -> tuple[list[Message], str]:
    """The earlier conversation and the new user message of a client's history.

    Raises:
        TurnFailed: 400 when the last message is not a non-empty user message, or a message
            has a role shelfhand cannot take (``tool`` results belong to client-side tools).
    """
    if not messages or messages[-1].role != "user" or not messages[-1].text.strip():
        raise TurnFailed(
            "the last message must be a user message with text",
            status=400,
            code="invalid_messages",
        )
    history: list[Message] = []
    for m in messages[:-1]:
        if m.role == "user":
            history.append(Message.user(m.text))
        elif m.role == "assistant":
            history.append(Message.assistant(m.text))
        elif m.role not in ("system", "developer"):  # the server's instructions stand
            raise TurnFailed(
                f"messages with role {m.role!r} are not accepted: the agent's tools run on "
                "the server",
                status=400,
                code="invalid_messages",
            )
    return history, messages[-1].text


def conversation_session(user: UserContext, key: str) -> str:
    """The session id of a client's conversation key (the request's ``user`` field): the
    same for the same caller and key, different for every other caller."""
    digest = hashlib.sha256(f"{user.tenant_id}\0{user.user_id}\0{key}".encode()).hexdigest()
    return f"oai-{digest[:40]}"


async def open_turn(
    chat: ChatService,
    caller: UserContext,
    messages: Sequence[ClientMessage],
    *,
    trace_id: str,
    session_id: str = "",
    conversation: str = "",
    agent: str = "",
    parent_span_id: str = "",
) -> CompletionTurn:
    """Start the turn a chat-completions request asks for (see the module docstring).

    Raises:
        TurnFailed: 400 bad messages, 404 no such session for the caller, 429 the session
            is answering another message.
    """
    history, content = split_history(messages)
    ephemeral = False
    if session_id:
        if await chat.store(chat.sessions.get, session_id, caller) is None:
            raise TurnFailed("session not found", status=404, code=NotFoundError.code)
        seed: list[Message] | None = None
    elif conversation:
        session_id = conversation_session(caller, conversation)
        # what the client sent is the conversation when it sent one (clients that keep the
        # history, and a new session); only the new message: the server's memory
        seed = history if history else None
        if await chat.store(chat.sessions.get, session_id, caller) is None:
            await _create(chat, caller, session_id, content)
            seed = history
    else:
        info = await chat.store(chat.sessions.create, caller, title=content[:80])
        session_id, seed, ephemeral = info.id, history, True
    try:
        events = await chat.turn(
            session_id,
            caller,
            content,
            trace_id=trace_id,
            parent_span_id=parent_span_id,
            history=seed,
            agent=agent,
        )
    except Exception as exc:
        if ephemeral:  # never started: nothing will delete it otherwise
            await chat.store(chat.sessions.delete, session_id, caller)
        if isinstance(exc, SessionBusyError):
            raise TurnFailed(str(exc), status=429, code=exc.code) from exc
        raise
    if ephemeral:
        events = _then_delete(chat, caller, session_id, events)
    return CompletionTurn(session_id=session_id, events=events, ephemeral=ephemeral)


async def _create(chat: ChatService, caller: UserContext, session_id: str, title: str) -> None:
    try:
        await chat.store(chat.sessions.create, caller, title=title[:80], session_id=session_id)
    except Exception:  # a concurrent first request created it (the id is taken)
        if await chat.store(chat.sessions.get, session_id, caller) is None:
            raise


async def _then_delete(
    chat: ChatService,
    caller: UserContext,
    session_id: str,
    events: AsyncGenerator[dict[str, Any], None],
) -> AsyncGenerator[dict[str, Any], None]:
    try:
        async for event in events:
            yield event
    finally:
        await events.aclose()  # frees the turn lock first
        try:
            await chat.store(chat.sessions.delete, session_id, caller)
        except Exception:  # the answer is out; a leftover session is only clutter
            logger.warning("deleting one-request session %s failed", session_id, exc_info=True)
        chat.forget(session_id)


def sources_text(
    citations: Sequence[Citation],
    answer: str = "",
    grounding: Mapping[str, Any] | None = None,
    *,
    replaced: bool = False,
) -> str:
    """The numbered sources appended to ``answer`` so that plain chat UIs show them, under a
    heading in the answer's language: the passages it cites; when it cites none, those the
    answer check found supporting it (``grounding``, as in the ``final`` event: none for an
    answer resting on what a tool returned, or on nothing), none when the check ``replaced``
    the model's answer by something else than the passages ("the documents do not cover
    this", the tools' results), or every passage when it was not checked."""
    cited = set(cited_numbers(answer))
    shown = [c for c in citations if c.index in cited]
    if not shown and grounding:
        supporting = {
            s.get("passage") for s in grounding.get("sentences", ()) if s.get("supported")
        }
        shown = [c for c in citations if c.index in supporting]
    elif not shown and not replaced:
        shown = list(citations)
    if not shown:
        return ""
    lines = [f"[{c.index}] {label(c)}" for c in shown]
    heading = SOURCES_ZH if in_chinese(answer) else SOURCES
    return f"\n\n{heading}\n" + "\n".join(lines)


def final_sources(final: Mapping[str, Any]) -> str:
    """:func:`sources_text` for the answer of a turn's ``final`` event."""
    output = str(final.get("output", ""))
    citations = [Citation.from_dict(c) for c in final.get("citations", [])]
    replaced = bool(final.get("fallback_reason")) and not final.get("extractive")
    return sources_text(citations, output, final.get("grounding"), replaced=replaced)


def withdrawn_notice(withdrawn: Mapping[str, Any]) -> str:
    """What an append-only stream sends when the turn's ``text_withdrawn`` event withdrew the
    text streamed so far (a dropped guess): its notice, on a line of its own; the answer
    that counts follows."""
    return f"\n\n---\n{withdrawn.get('notice', '')}…\n\n"


def replaced_notice(replaced: Mapping[str, Any] | None, streamed: str) -> str:
    """What an append-only stream sends before the checked answer when the turn's
    ``answer_replaced`` event said the check replaced the text already streamed (a client
    cannot unsee deltas): the event's notice; '' when nothing was replaced or streamed."""
    if replaced is None or not streamed.strip():
        return ""
    notice = str(replaced.get("notice", ""))
    return f"\n\n---\n{notice}{'：' if in_chinese(notice) else ':'}\n\n"


def whole_answer(final: Mapping[str, Any]) -> str:
    """The turn's answer as its ``final`` event holds it, and the sources: what a stream that
    can replace what it sent ends with, where :class:`AppendedAnswer` appended notices."""
    return str(final.get("output", "")) + final_sources(final)


class AppendedAnswer:
    """A turn's answer as a stream that can only append sends it (the OpenAI-compatible chat
    and Responses streams, A2A artifacts): the text deltas as they come; a notice where the
    turn withdrew a guess it had streamed (``text_withdrawn``); at ``final``, the checked
    answer under a notice when the answer check replaced what was streamed
    (``answer_replaced``), the answer itself when nothing was streamed, and the sources.
    :attr:`sent` is all that was appended.

    The pieces are kept in lists and joined when read: a string grown piece by piece on an
    attribute is copied whole at each piece (80,000 characters in 16,000 deltas cost 32 ms,
    320,000 cost 1.8 s)."""

    __slots__ = ("_answer", "_replaced", "_sent", "_took_back")

    def __init__(self) -> None:
        self._sent: list[str] = []
        self._answer: list[str] = []  # streamed since the last withdrawal: what the client sees
        self._replaced: Mapping[str, Any] | None = None
        self._took_back: str | None = None  # the notice of the last text taken back

    @property
    def rewritten(self) -> bool:
        """Whether what was appended holds text the turn took back (a guess withdrawn, an
        answer the check replaced) under a notice: a stream that can replace what it sent
        (an A2A artifact) sends :func:`whole_answer` instead."""
        return self._took_back is not None

    @property
    def notice(self) -> str:
        """The turn's words for the last text it took back ('' for none)."""
        return self._took_back or ""

    @property
    def started(self) -> bool:
        """Whether anything was appended yet."""
        return bool(self._sent)

    @property
    def sent(self) -> str:
        """All that was appended so far."""
        if len(self._sent) > 1:
            self._sent[:] = ["".join(self._sent)]
        return self._sent[0] if self._sent else ""

    def add(self, event: Mapping[str, Any]) -> str:
        """The text to append for the turn's ``event`` ('' for none)."""
        kind = event.get("type")
        if kind == "text_delta":
            piece = str(event.get("text") or "")
            self._answer.append(piece)
        elif kind == "text_withdrawn" and any(self._answer):
            piece, self._answer = withdrawn_notice(event), []
            self._took_back = str(event.get("notice", ""))
        elif kind == "answer_replaced":
            self._replaced, piece = event, ""
        elif kind == "final":
            piece = self._ending(event)
        else:
            piece = ""
        if piece:
            self._sent.append(piece)
        return piece

    def _ending(self, final: Mapping[str, Any]) -> str:
        output = str(final.get("output", ""))
        answer = "".join(self._answer)
        if self._replaced is not None or not answer:
            # the checked answer follows the deltas, said to be the one that counts (or,
            # nothing streamed, is the answer)
            notice = replaced_notice(self._replaced, answer)
            if notice and self._replaced is not None:
                self._took_back = str(self._replaced.get("notice", ""))
            rest = notice + output
        else:
            rest = ""
        return rest + final_sources(final)
