"""A remote A2A agent as a subagent (``shelfhand[a2a]``: the official ``a2a-sdk`` 1.x client).

:class:`RemoteA2AAgent` is a :class:`~shelfhand.agent.subagents.Delegable`: the supervisor
delegates to it like to a local specialist, through the same delegate tool, so governance
applies unchanged (the subagent's ``timeout``, the tool's circuit breaker, rate limits, and
the audit record with the parent run's trace id). Declare one in code::

    Subagent("partner", "Answers questions about the partner's catalogue.",
             agent=RemoteA2AAgent("https://partner.example.com", token_env="PARTNER_A2A_KEY"))

or as ``agents/partner.md`` with ``a2a: https://partner.example.com`` in its front matter
(``a2a_token_env`` names the variable holding the bearer token).

The caller's identity is not sent: the remote agent sees this service's credential only.
With ``forward_identity=True`` the message's metadata carries the caller's tenant and user
(``shelfhand.caller``), for a remote agent that trusts this service to say who asks.

A remote agent that cannot be reached fails the delegation with
:class:`~shelfhand.core.errors.ToolUnavailableError` (the supervisor's model is told, and
the tool's breaker counts it); a remote task that fails or is rejected fails it with a
:class:`~shelfhand.core.errors.ToolError` carrying the remote message.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
from a2a.client import A2AClientError, ClientConfig, create_client
from a2a.types.a2a_pb2 import Message as A2AMessage
from a2a.types.a2a_pb2 import Part, Role, SendMessageRequest, StreamResponse, TaskState
from google.protobuf.json_format import MessageToDict

from shelfhand.backends.bounded_http import BoundedAsyncSend, ReplyTooLarge, reply_too_large
from shelfhand.core.errors import ConfigurationError, ToolError, ToolUnavailableError
from shelfhand.core.events import Event, Final, TextDelta
from shelfhand.core.messages import Citation, Message
from shelfhand.core.results import RunResult

logger = logging.getLogger(__name__)

__all__ = ["RemoteA2AAgent"]

_FAILED = {TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_REJECTED}

MAX_REPLY_BYTES = 64 * 1024**2
"""The default bound of one reply of a remote agent (its card, its answer's whole stream)."""


class _BoundedHttp(BoundedAsyncSend, httpx.AsyncClient):
    """An ``httpx`` client whose replies are bounded (see ``bounded_http``)."""


class RemoteA2AAgent:
    """An agent behind an A2A endpoint, usable wherever a local agent is delegated to.

    Args:
        url: The agent's base URL (its card is at ``<url>/.well-known/agent-card.json``).
        name: A display name (default: the URL).
        token: The bearer token to send; or
        token_env: the environment variable that holds it (read on each call, so a rotated
            secret is picked up; a missing variable fails the call, never sends nothing).
        forward_identity: Send the caller's tenant and user in the message metadata.
        connect_timeout: Seconds to connect; a dead endpoint fails fast rather than
            using up the delegation's whole ``timeout``.
        max_reply_bytes: The most bytes of one reply (the agent card, or an answer's whole
            stream), after decompression; a longer one fails the delegation, not read further.
    """

    def __init__(
        self,
        url: str,
        *,
        name: str = "",
        token: str | None = None,
        token_env: str = "",
        forward_identity: bool = False,
        connect_timeout: float = 5.0,
        max_reply_bytes: int = MAX_REPLY_BYTES,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ConfigurationError(f"an A2A agent URL must be http(s)://..., not {url!r}")
        self.url = url.rstrip("/")
        self.name = name or self.url
        self._token = token
        self.token_env = token_env
        self.forward_identity = forward_identity
        self.connect_timeout = connect_timeout
        if max_reply_bytes < 1:
            raise ConfigurationError("max_reply_bytes must be at least 1")
        self.max_reply_bytes = max_reply_bytes

    def __repr__(self) -> str:  # never the token
        return f"RemoteA2AAgent({self.url!r}, forward_identity={self.forward_identity})"

    def _headers(self) -> dict[str, str]:
        token = self._token
        if token is None and self.token_env:
            token = os.environ.get(self.token_env)
            if not token:
                raise ToolError(f"the credential for {self.name} is missing: set {self.token_env}")
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _request(self, prompt: str | Message, options: Mapping[str, Any]) -> SendMessageRequest:
        text = prompt if isinstance(prompt, str) else prompt.text
        message = A2AMessage(
            role=Role.ROLE_USER, parts=[Part(text=text)], message_id=uuid.uuid4().hex
        )
        parent = options.get("parent")
        caller = parent.user if parent is not None else options.get("context")
        if self.forward_identity and caller is not None:
            message.metadata.update(
                {"shelfhand.caller": {"tenant_id": caller.tenant_id, "user_id": caller.user_id}}
            )
        return SendMessageRequest(message=message)

    async def stream(self, prompt: str | Message, **options: Any) -> AsyncIterator[Event]:
        """The remote answer as it arrives (text deltas), ending with :class:`Final`."""
        request = self._request(prompt, options)
        timeout = httpx.Timeout(None, connect=self.connect_timeout)
        texts: list[str] = []
        citations: list[Citation] = []
        async with _BoundedHttp(
            headers=self._headers(), timeout=timeout, max_reply_bytes=self.max_reply_bytes
        ) as http:
            try:
                client = await create_client(
                    self.url, client_config=ClientConfig(httpx_client=http)
                )
                async for response in client.send_message(request):
                    for text in self._absorb(response, citations):
                        texts.append(text)
                        yield TextDelta(text=text)
            except (httpx.HTTPError, A2AClientError, OSError, ReplyTooLarge) as exc:
                too_large = reply_too_large(exc)
                if too_large is not None:  # (asking again would get as long a reply)
                    raise ToolError(
                        f"the remote agent {self.name} sent {too_large}: not read further"
                    ) from exc
                raise ToolUnavailableError(
                    f"the remote agent {self.name} cannot be reached: {type(exc).__name__}: {exc}"
                ) from exc
        output = "".join(texts)
        trace_id = str(options.get("trace_id") or "")
        yield Final(
            result=RunResult(
                output=output,
                messages=(Message.user(request.message.parts[0].text), Message.assistant(output)),
                citations=tuple(citations),
                trace_id=trace_id,
            )
        )

    def _absorb(self, response: StreamResponse, citations: list[Citation]) -> list[str]:
        """The text ``response`` adds (and its citations, into ``citations``)."""
        artifacts = []
        status = None
        if response.HasField("artifact_update"):
            artifacts = [response.artifact_update.artifact]
        elif response.HasField("task"):
            artifacts = list(response.task.artifacts)
            status = response.task.status
        elif response.HasField("status_update"):
            status = response.status_update.status
        elif response.HasField("message"):
            return [p.text for p in response.message.parts if p.text]
        if status is not None and status.state in _FAILED:
            why = " ".join(p.text for p in status.message.parts if p.text) or "no reason given"
            raise ToolError(f"the remote agent {self.name} failed the task: {why}")
        texts = []
        for artifact in artifacts:
            texts += [p.text for p in artifact.parts if p.text]
            found = MessageToDict(artifact.metadata).get("citations") or []
            for c in found:
                if isinstance(c, dict) and c.get("source"):
                    citations.append(_citation(c))
        return texts

    async def run(self, prompt: str | Message, **options: Any) -> RunResult:
        """The remote agent's whole answer."""
        async for event in self.stream(prompt, **options):
            if isinstance(event, Final):
                return event.result
        raise ToolError(f"the remote agent {self.name} ended without an answer")  # pragma: no cover


def _citation(data: Mapping[str, Any]) -> Citation:
    """A remote passage (JSON numbers arrive as floats)."""
    page = data.get("page")
    return Citation(
        index=int(data.get("index", 0)),
        source=str(data.get("source", "")),
        title=str(data.get("title", "")),
        section=str(data.get("section", "")),
        page=int(page) if page is not None else None,
        text=str(data.get("text", "")),
    )
