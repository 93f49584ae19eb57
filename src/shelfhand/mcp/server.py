"""shelfhand as an MCP server: read-only tools and cited knowledge search (docs/design.md M2).

``shelfhand mcp serve`` offers the workspace's read-only tools — ``retrieve`` (numbered,
cited passages from the knowledge base) and the read-only built-ins — to any MCP client,
over stdio or streamable HTTP. Calls go through a :class:`Toolkit`, so they get the same
argument checks, permissions, timeouts and error results as an agent's calls.

Who is calling (and so which documents ``retrieve`` may return) never comes from tool
arguments:

- stdio: the identity given at start-up (``--tenant``, ``--user``, ``--role``);
- HTTP and SSE: ``Authorization: Bearer <key>``, mapped through the configured API keys
  (:mod:`shelfhand.core.auth`); a missing or unknown key is refused with 401, and a session
  stays bound to the caller that opened it. With no keys configured at all the start-up
  identity is used for every caller: allowed on a loopback address (with a warning), refused
  on any other unless ``allow_anonymous`` is set.

DNS-rebinding protection (``Host`` / ``Origin`` checks) is on by default on loopback; on other
addresses it is on when ``allowed_hosts`` / ``allowed_origins`` are given.

The SDK's low-level ``Server`` is used rather than the decorator layer: these tools already
carry their JSON schemas and validation, so they are listed and called as they are.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import socket
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal

import anyio
import mcp.types as types
from mcp.server import Server
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.sse import SseServerTransport
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings

from shelfhand.core.auth import identify
from shelfhand.core.context import RunContext, UserContext
from shelfhand.core.errors import ConfigurationError, InvalidArgumentError
from shelfhand.core.messages import ToolCallBlock
from shelfhand.tools.tool import Tool
from shelfhand.tools.toolkit import Toolkit

__all__ = [
    "DEFAULT_HOST",
    "HttpTransport",
    "build_http_app",
    "build_server",
    "check_anonymous",
    "exposed_tools",
    "is_loopback",
    "listening_socket",
    "serve_http",
    "serve_stdio",
    "transport_security",
]

logger = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
_USER_SCOPE_KEY = "shelfhand.user"  # set by the ASGI gate below, unreachable from a client

HttpTransport = Literal["http", "sse"]
ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]
Identity = Callable[[ServerRequestContext[Any, Any]], UserContext]


def exposed_tools(toolkit: Toolkit) -> list[Tool[..., Any]]:
    """The read-only, non-external tools of ``toolkit`` (the workspace's: ``retrieve``
    first), the ones an MCP client may call."""
    return [t for t in toolkit.tools if t.read_only and not t.external]


def build_server(
    tools: Sequence[Tool[..., Any]], identity: Identity, *, name: str = "shelfhand"
) -> Server[Any]:
    """An MCP server listing and calling ``tools`` for the caller ``identity`` names.

    Args:
        tools: The tools to offer (each must be read-only).
        identity: The caller of one request (from the transport, never from arguments).
        name: The server name reported to clients.
    """
    not_read_only = [t.name for t in tools if not t.read_only]
    if not_read_only:
        raise InvalidArgumentError(
            f"only read-only tools can be served: {', '.join(not_read_only)}"
        )
    toolkit = Toolkit(tools)

    async def on_list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        user = identity(ctx)
        listed = []
        for item in toolkit.visible_tools(user):
            function = item.schema()["function"]
            listed.append(
                types.Tool(
                    name=item.name,
                    description=item.description,
                    input_schema=function["parameters"],
                    annotations=types.ToolAnnotations(
                        read_only_hint=True, idempotent_hint=item.idempotent or None
                    ),
                )
            )
        return types.ListToolsResult(tools=listed)

    async def on_call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        user = identity(ctx)
        call = ToolCallBlock(
            id=str(ctx.request_id or uuid.uuid4().hex),
            name=params.name,
            arguments=json.dumps(params.arguments or {}, ensure_ascii=False),
        )
        result = await toolkit.call(call, RunContext(agent_name=f"mcp:{name}", user=user))
        structured: dict[str, Any] | None = None
        if result.citations:
            structured = {"citations": [c.to_dict() for c in result.citations]}
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=result.content)],
            structured_content=structured,
            is_error=result.is_error,
        )

    return Server(name, version=_version(), on_list_tools=on_list_tools, on_call_tool=on_call_tool)


# --- stdio --------------------------------------------------------------------------------------
async def serve_stdio(tools: Sequence[Tool[..., Any]], user: UserContext) -> None:
    """Serve ``tools`` over stdin/stdout for ``user`` until the client closes the stream."""
    server = build_server(tools, lambda _ctx: user)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


# --- streamable HTTP and SSE --------------------------------------------------------------------
def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``127.0.0.1``, ``::1``, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def check_anonymous(host: str, keys: Mapping[str, UserContext], allow_anonymous: bool) -> None:
    """Refuse to serve everyone as the start-up identity on a non-loopback address.

    Raises:
        ConfigurationError: no API keys, ``host`` is not loopback and ``allow_anonymous`` is
            not set; the message says how to fix it.
    """
    if keys or allow_anonymous or is_loopback(host):
        return
    raise ConfigurationError(
        f"refusing to serve MCP on {host} without API keys: every caller would be served as "
        "the start-up identity. Configure keys (SHELFHAND_API_KEYS or [[api_keys]] in "
        "shelfhand.toml), bind to 127.0.0.1, or pass --allow-anonymous to accept that."
    )


def transport_security(
    host: str,
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
) -> TransportSecuritySettings | None:
    """DNS-rebinding protection for an HTTP server bound to ``host``.

    Given hosts or origins switch the ``Host`` / ``Origin`` checks on with exactly those
    (``name:*`` allows any port); with neither, a loopback ``host`` gets the loopback names and
    any other host gets no checks (``None``).
    """
    loopback_hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
    if not allowed_hosts and not allowed_origins:
        if not is_loopback(host):
            return None
        allowed_hosts = loopback_hosts
    hosts = list(allowed_hosts) or loopback_hosts
    origins = list(allowed_origins) or [f"http://{h}" for h in hosts] + [
        f"https://{h}" for h in hosts
    ]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )


def build_http_app(
    tools: Sequence[Tool[..., Any]],
    *,
    keys: Mapping[str, UserContext],
    fallback: UserContext,
    host: str = DEFAULT_HOST,
    transport: HttpTransport = "http",
    security: TransportSecuritySettings | None = None,
) -> ASGIApp:
    """The MCP ASGI app behind a bearer-key gate: streamable HTTP (endpoint ``/mcp``) or SSE
    (``/sse``, messages posted to ``/messages/``).

    Args:
        tools: The tools to offer.
        keys: API key → identity; empty means no authentication (``fallback`` for all).
        fallback: The identity used when no keys are configured.
        host: The host the app is served on (picks the default DNS-rebinding protection).
        transport: ``http`` (streamable HTTP) or ``sse`` (the older HTTP+SSE transport).
        security: Host/Origin checks (default: :func:`transport_security` for ``host``).
    """

    def identity(ctx: ServerRequestContext[Any, Any]) -> UserContext:
        request = ctx.request
        scope = getattr(request, "scope", None)
        found = scope.get(_USER_SCOPE_KEY) if isinstance(scope, dict) else None
        # The gate sets it on every HTTP request; anything else is a wiring bug: refuse.
        if not isinstance(found, UserContext):
            raise PermissionError("no authenticated caller for this request")
        return found

    server = build_server(tools, identity)
    if security is None:
        security = transport_security(host)
    inner: ASGIApp
    if transport == "sse":
        inner = _sse_app(server, security)
    else:
        inner = server.streamable_http_app(host=host, transport_security=security)
    if not keys:
        logger.warning(
            "no API keys configured: every MCP caller is served as %s (tenant %s); configure "
            "SHELFHAND_API_KEYS or [[api_keys]] in shelfhand.toml to require keys",
            fallback.user_id,
            fallback.tenant_id,
        )

    async def gate(scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await inner(scope, receive, send)
            return
        if keys:
            user = identify(keys, _bearer(scope))
            if user is None:
                await _unauthorized(send)
                return
            # Sessions (streamable HTTP and SSE) are bound to the principal that opened them.
            principal = AccessToken(token="-", client_id=user.scope, scopes=[])
            scope["user"] = AuthenticatedUser(principal)
        else:
            user = fallback
        scope[_USER_SCOPE_KEY] = user
        await inner(scope, receive, send)

    return gate


def _sse_app(server: Server[Any], security: TransportSecuritySettings | None) -> ASGIApp:
    from starlette.applications import Starlette
    from starlette.routing import Mount, Route

    sse = SseServerTransport("/messages/", security_settings=security)

    class _Stream:
        """``GET /sse``: one MCP session over a Server-Sent Events stream (an ASGI endpoint)."""

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            async with sse.connect_sse(scope, receive, send) as (read_stream, write_stream):
                await server.run(read_stream, write_stream, server.create_initialization_options())

    return Starlette(
        routes=[
            Route("/sse", endpoint=_Stream(), methods=["GET"]),
            Mount("/messages/", app=sse.handle_post_message),
        ]
    )


async def serve_http(
    tools: Sequence[Tool[..., Any]],
    *,
    keys: Mapping[str, UserContext],
    fallback: UserContext,
    host: str = DEFAULT_HOST,
    port: int = 8765,
    transport: HttpTransport = "http",
    allow_anonymous: bool = False,
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve ``tools`` over streamable HTTP (or SSE) until cancelled.

    Args:
        port: TCP port; ``0`` picks a free one (``on_ready`` receives the real URL).
        transport: ``http`` (endpoint ``/mcp``) or ``sse`` (endpoint ``/sse``).
        allow_anonymous: Serve a non-loopback address without API keys.
        allowed_hosts: ``Host`` values accepted (DNS-rebinding protection), e.g.
            ``mcp.example.com`` or ``10.0.0.5:*``.
        allowed_origins: ``Origin`` values accepted from browsers.
        on_ready: Called with the endpoint URL once the server accepts connections.

    Raises:
        ConfigurationError: a non-loopback ``host`` without keys or ``allow_anonymous``
            (checked before anything is bound).
    """
    import uvicorn

    check_anonymous(host, keys, allow_anonymous)
    security = transport_security(host, allowed_hosts, allowed_origins)
    app = build_http_app(
        tools, keys=keys, fallback=fallback, host=host, transport=transport, security=security
    )
    # Bind first, so port 0 resolves to a real port that can be reported.
    sock = listening_socket(host, port)
    actual = sock.getsockname()[1]
    shown = f"[{host}]" if sock.family == socket.AF_INET6 else host
    url = f"http://{shown}:{actual}/{'sse' if transport == 'sse' else 'mcp'}"
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve, [sock])
        with anyio.fail_after(30):
            while not server.started:
                await anyio.sleep(0.01)
        if on_ready is not None:
            on_ready(url)
        logger.info("MCP server listening on %s", url)


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` and listening, for uvicorn to serve.

    Made with its protocol named (``IPPROTO_TCP``): asyncio turns Nagle's algorithm off
    (``TCP_NODELAY``) only on connections whose socket says TCP, and a socket made with
    protocol 0 does not. With Nagle on, a reply written in two pieces (its headers, then its
    body) waited for the client's delayed acknowledgement: 40 ms a piece, so a retrieve call
    took 94 ms instead of 14."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _bearer(scope: Mapping[str, Any]) -> str | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"authorization":
            text: str = value.decode("latin-1").strip()
            kind, _, token = text.partition(" ")
            return token.strip() if kind.lower() == "bearer" and token.strip() else None
    return None


async def _unauthorized(send: Any) -> None:
    # A JSON-RPC error body: MCP clients show its message instead of a bare status.
    error = {
        "code": types.INVALID_REQUEST,
        "message": "401 Unauthorized: send Authorization: Bearer <API key> with a configured key",
    }
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer realm="shelfhand"'),
                (b"content-length", str(len(body)).encode("ascii")),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _version() -> str:
    from shelfhand.core.version import __version__

    return __version__
