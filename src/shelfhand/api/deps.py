"""What every route needs: the running service's parts and the authenticated caller."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Protocol

import orjson
from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from shelfhand.core.auth import identify
from shelfhand.core.context import UserContext

if TYPE_CHECKING:
    from shelfhand.app import App
    from shelfhand.core.tracing import Tracer
    from shelfhand.jobs.queue import IngestQueue
    from shelfhand.knowledge.base import KnowledgeBase
    from shelfhand.service.chat import ChatService
    from shelfhand.service.uploads import Uploads
    from shelfhand.sessions.store import SessionStore
    from shelfhand.sessions.user_memory import UserMemoryStore
    from shelfhand.tools.toolkit import Toolkit
    from shelfhand.traces.store import SqlTraceStore
    from shelfhand.usage.ledger import SqlUsageLedger

__all__ = [
    "Caller",
    "Service",
    "ServiceConfig",
    "caller_for_header",
    "caller_for_key",
    "get_service",
    "hide_paths",
    "json_bytes",
    "sse_event",
    "unauthorized",
]

ANONYMOUS_CALLER = UserContext(tenant_id="default", user_id="anonymous", roles=())


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceConfig:
    """Limits and switches of the HTTP service.

    Args:
        max_file_bytes: The largest uploaded file (default 20 MiB).
        max_files: The most files in one upload.
        allow_anonymous: Requests without a key act as tenant ``default``, user
            ``anonymous`` (local use only; otherwise a missing key is 401). With no API keys
            configured, a request with a key does too (an OpenAI SDK always sends one, and
            there is nothing to check it against); with keys, an unknown key is still 401.
        memory_token_budget: Short-term memory budget of each session, in tokens.
        max_tenant_bytes: The most uploaded bytes one tenant keeps (``None``: no quota).
        max_tenant_files: The most uploaded files one tenant keeps (``None``: no quota).
        turn_timeout: Seconds a chat turn may go without an event (the model hangs) before
            it fails with 504; waiting for an approval does not count. ``None``: the
            workspace's ``turn_timeout`` setting.
        heartbeat_interval: Seconds between ``: ping`` comments on a quiet SSE stream (they
            keep proxies from closing it and tell the client the turn is alive).
        job_wait: With ingest workers (``database_url``), seconds an upload waits for its
            job before it answers 202 with the job to poll (``GET /v1/knowledge/jobs/{id}``).
    """

    max_file_bytes: int = 20 * 1024 * 1024
    max_files: int = 20
    allow_anonymous: bool = False
    memory_token_budget: int = 4000
    max_tenant_bytes: int | None = None
    max_tenant_files: int | None = None
    turn_timeout: float | None = None
    heartbeat_interval: float = 15.0
    job_wait: float = 300.0


class MetricsText(Protocol):
    """What ``/metrics`` serves (:class:`shelfhand.api.metrics.ServiceMetrics`)."""

    def render(self) -> bytes: ...


@dataclass(slots=True)
class Service:
    """The parts of a running service (built in the app's lifespan)."""

    app: App
    config: ServiceConfig
    api_keys: Mapping[str, UserContext]
    kb: KnowledgeBase
    sessions: SessionStore
    memories: UserMemoryStore
    toolkit: Toolkit
    chat: ChatService
    uploads: Uploads
    closers: list[Any] = field(default_factory=list)
    jobs: IngestQueue | None = None
    """Uploads become ingest jobs for ``shelfhand worker`` (``database_url`` set)."""
    traces: SqlTraceStore | None = None
    """Where turns' traces are read (``None``: tracing is off)."""
    tracer: Tracer | None = None
    metrics: MetricsText | None = None
    """``/metrics`` (``None``: prometheus-client is not installed)."""
    ledger: SqlUsageLedger | None = None
    """What each tenant, user and session used (``GET /v1/usage``)."""


# async on purpose: FastAPI runs sync dependencies in the thread pool, which costs more than
# these few lines do
async def get_service(request: Request) -> Service:
    service: Service | None = getattr(request.app.state, "service", None)
    if service is None:  # pragma: no cover - only before start-up completes
        raise HTTPException(status_code=503, detail="service is starting")
    return service


_bearer = HTTPBearer(auto_error=False, description="An API key from SHELFHAND_API_KEYS.")


async def get_caller(
    service: Annotated[Service, Depends(get_service)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> UserContext:
    """The caller behind ``Authorization: Bearer KEY``; 401 when missing or unknown."""
    user = caller_for_key(service, None if credentials is None else credentials.credentials)
    if user is not None:
        return user
    raise unauthorized(presented=credentials is not None)


def unauthorized(*, presented: bool) -> HTTPException:
    """The 401 of a request without a key (``presented`` false) or with an unknown one."""
    return HTTPException(
        status_code=401,
        detail="unknown API key"
        if presented
        else "missing API key: send Authorization: Bearer <key>",
        headers={"WWW-Authenticate": "Bearer"},
    )


def caller_for_key(service: Service, key: str | None) -> UserContext | None:
    """Who a request presenting ``key`` (``None``: no key) is; ``None`` when it may not come
    in. With ``allow_anonymous``, a request without a key is the anonymous caller, and so is
    one with a key when no keys are configured (nothing to check it against: an OpenAI SDK
    always sends one); a configured service never takes an unknown key as anonymous (a
    mistyped key would silently act as another tenant)."""
    if key:
        user = identify(service.api_keys, key)
        if user is not None or service.api_keys:
            return user
    return ANONYMOUS_CALLER if service.config.allow_anonymous else None


def caller_for_header(service: Service, authorization: str) -> UserContext | None:
    """:func:`caller_for_key` of an ``Authorization`` header's value (``Bearer KEY``; any
    other scheme, or none, presents no key)."""
    scheme, _, key = authorization.partition(" ")
    return caller_for_key(service, key.strip() if scheme.lower() == "bearer" else None)


Caller = Annotated[UserContext, Depends(get_caller)]
ServiceDep = Annotated[Service, Depends(get_service)]


def json_bytes(data: Any) -> bytes:
    """``data`` as compact UTF-8 JSON for a stream (orjson: 0.1–0.2 µs an event where
    ``json.dumps`` took 2–3.5). Half of a surrogate pair (from a custom model or tool) is
    written as a JSON escape, which the client's parser reads back, rather than an exception
    that cuts the stream short."""
    try:
        return orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # (lone surrogates; anything else fails again below, as before)
        return json.dumps(data, separators=(",", ":")).encode()


def sse_event(data: Mapping[str, Any], event_id: int) -> bytes:
    """One Server-Sent Event: ``event`` is the data's ``type``, ``data`` its JSON."""
    head = f"id: {event_id}\nevent: {data.get('type', 'message')}\ndata: ".encode()
    return head + json_bytes(data) + b"\n\n"


# an absolute file path: starts a word (not inside a URL such as http://host/a/b), 2+ parts
_ABSOLUTE_PATH = re.compile(r"(?<![\w:/.~-])/(?:[^\s/'\"]+/)+([^\s/'\":]+)")


def hide_paths(text: str) -> str:
    """``text`` with every absolute file path shortened to its file name: error bodies never
    show the server's folders (staging directories, the workspace)."""
    return _ABSOLUTE_PATH.sub(r"\1", text)
