"""HTTP statuses per request: what a failed response said, kept for the request that got it.

An MCP server over HTTP is one ``httpx`` client shared by every concurrent call; its response
hook sees each response, but not which call it answers. A status kept as "the last one" would
let one call's 404 pass for another's: the other call (a write included) would be taken as
never delivered and sent again, and its error would name a status that is not its own.

So each call tags its JSON-RPC request (a ``_meta`` entry under :data:`TAG_KEY`); the hook
reads the tag back from the request body of the response and files the status under it, and
the call reads its own status when it fails. Requests without a tag are the connection's own
traffic (the handshake, listing tools, the event stream): their latest status describes why
the connection could not be opened or was lost, never why a call failed. ::

    statuses = HttpStatuses()
    http = httpx2.AsyncClient(event_hooks={"response": [statuses.record]})
    with statuses.track() as request:
        await client.call_tool(name, arguments, meta=request.meta)
        ...  # on an error: request.status, e.g. "HTTP 404 Not Found" (or "")
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import cast

import httpx2
from mcp.types import RequestParamsMeta

__all__ = ["TAG_KEY", "HttpStatuses", "TrackedRequest"]

TAG_KEY = "shelfhand/request"
"""The ``_meta`` key that tags a tracked request (a prefixed name, as MCP asks of ``_meta``)."""

_TAG_BYTES = json.dumps(TAG_KEY).encode("utf-8")


class TrackedRequest:
    """One request whose response status is kept (see :meth:`HttpStatuses.track`)."""

    __slots__ = ("_statuses", "tag")

    def __init__(self, statuses: HttpStatuses, tag: str) -> None:
        self._statuses = statuses
        self.tag = tag

    @property
    def meta(self) -> RequestParamsMeta:
        """The ``_meta`` to send with the request."""
        return cast(RequestParamsMeta, {TAG_KEY: self.tag})

    @property
    def status(self) -> str:
        """``HTTP <code> <reason>`` if this request's last response was an error, else ``""``."""
        return self._statuses.status_of(self.tag)


class HttpStatuses:
    """The error statuses of one server's HTTP responses, filed by request (module docstring)."""

    def __init__(self) -> None:
        self._tracked: dict[str, str] = {}
        self._latest = ""
        self._cut = ""

    @contextmanager
    def track(self) -> Iterator[TrackedRequest]:
        """Keep the statuses of one request while the block runs (then forget them)."""
        tag = uuid.uuid4().hex
        self._tracked[tag] = ""
        try:
            yield TrackedRequest(self, tag)
        finally:
            del self._tracked[tag]

    def status_of(self, tag: str) -> str:
        """The error status filed for ``tag`` (``""``: none, or not tracked)."""
        return self._tracked.get(tag, "")

    @property
    def connection(self) -> str:
        """The status of the connection's own latest (untagged) request, if it failed; else
        that one of its replies was cut at the bound (a later reply, answered, does not hide
        it: the SDK reconnects after a cut stream)."""
        return self._latest or self._cut

    def new_connection(self) -> None:
        """A connection is being opened: what the last one said no longer applies."""
        self._latest = self._cut = ""

    async def record(self, response: httpx2.Response) -> None:
        """The ``response`` event hook: file the status under the request's tag."""
        # The SDK turns a non-JSON error response into "Server returned an error response";
        # the status lets errors say "HTTP 401 Unauthorized".
        failed = response.status_code >= 400
        status = f"HTTP {response.status_code} {response.reason_phrase}" if failed else ""
        tag = _tag_of(response.request)
        if tag is None:
            self._latest = status
        else:
            self._file(tag, status)

    def too_large(self, request: httpx2.Request, exc: Exception) -> None:
        """A reply to ``request`` was cut at the client's bound: file that as its status
        (the SDK reports such a reply as a stream that ended, or not at all)."""
        tag = _tag_of(request)
        if tag is None:
            self._cut = str(exc)
        else:
            self._file(tag, str(exc))

    def _file(self, tag: str, status: str) -> None:
        if tag in self._tracked:  # an answer after its call ended is nobody's business
            self._tracked[tag] = status


def _tag_of(request: httpx2.Request) -> str | None:
    try:
        body = request.content
    except httpx2.RequestNotRead:  # a streamed body: not one of the SDK's JSON-RPC requests
        return None
    if _TAG_BYTES not in body:
        return None
    try:
        message = json.loads(body)
        tag = message["params"]["_meta"][TAG_KEY]
    except (ValueError, KeyError, TypeError, RecursionError):
        return None
    return tag if isinstance(tag, str) else None
