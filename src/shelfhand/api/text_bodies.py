"""JSON bodies that are too large, or whose strings are not Unicode text, are refused before
a route sees them.

A JSON body is read whole before it is parsed; one over :data:`MAX_JSON_BYTES` is answered
413 as soon as its length (declared, or read so far) says so.

JSON may spell half of a surrogate pair alone (``"\\ud800"``): ``json.loads`` takes it, and
the string then fails wherever it is encoded to UTF-8 (the session store, the trace store,
an SSE event), which answered 500 after part of the turn had run. Such a body gets the
route's own bad-input answer instead: 400 in OpenAI's error body on the OpenAI-compatible
routes, 422 ``invalid_input`` on the others (the A2A routes answer a JSON-RPC parse error,
:mod:`shelfhand.api.a2a`).

A surrogate pair spelt as two escapes (``"\\ud83d\\ude00"``, an emoji as ``json.dumps``
writes it by default) is text, and passes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "MAX_JSON_BYTES",
    "BodyTooLarge",
    "TextBodies",
    "declared_size",
    "lone_surrogate",
    "read_body",
    "replaying",
]

MAX_JSON_BYTES = 32 * 1024**2
"""The largest JSON request body taken (a model's whole context is a few MiB of text); a
larger one is refused with 413 before it is read whole: a 300 MB body grew the server by
1.5 GB and 10 s of CPU before its messages were found too long."""
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_METHODS = frozenset({"POST", "PUT", "PATCH"})


def lone_surrogate(body: bytes) -> str:
    """Why the JSON ``body`` is not Unicode text (a string holding a lone surrogate), or ""
    when it is (or is not JSON at all: the route's own parser says so)."""
    if _SURROGATE_ESCAPE.search(body) is None:  # (the common case: one scan in C)
        return ""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return ""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError as exc:
                    half = ord(item[exc.start])
                    return (
                        f"a string holds half of a surrogate pair alone (\\u{half:04x}), "
                        "which is not Unicode text"
                    )
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return ""


class TextBodies:
    """ASGI middleware: a JSON request body over ``max_bytes`` or holding a lone surrogate is
    answered by ``refuse(path, status, problem)`` (413 or 400; see the module docstring) and
    never reaches the app; paths starting with one of ``skip`` are left to their own
    checks."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        refuse: Callable[[str, int, str], ASGIApp],
        skip: Collection[str] = (),
        max_bytes: int = MAX_JSON_BYTES,
    ) -> None:
        self.app = app
        self.refuse = refuse
        self.skip = tuple(skip)
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope.get("method") not in _METHODS
            or scope["path"].startswith(self.skip)
            or not _json(scope)
        ):
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        too_large = f"the request body is over {self.max_bytes // 1024**2} MiB"
        if declared_size(scope) > self.max_bytes:  # (refused before a byte is read)
            await self.refuse(path, 413, too_large)(scope, receive, send)
            return
        try:
            body = await read_body(receive, self.max_bytes)
        except BodyTooLarge:  # (chunked, with no length said up front)
            await self.refuse(path, 413, too_large)(scope, receive, send)
            return
        if body is None:  # the client went away
            return
        problem = lone_surrogate(body)
        if problem:
            await self.refuse(path, 400, problem)(scope, receive, send)
            return
        await self.app(scope, replaying(body, receive), send)


class BodyTooLarge(Exception):
    """A request body over the most bytes taken (:func:`read_body`)."""


async def read_body(receive: Receive, most: int) -> bytes | None:
    """The request's whole body, read from ``receive``; ``None`` when the client went away.

    Raises:
        BodyTooLarge: It passed ``most`` bytes (what was read is dropped; the rest is not
            read).
    """
    chunks: list[bytes] = []
    size, more = 0, True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > most:
            raise BodyTooLarge(size)
        chunks.append(chunk)
        more = message.get("more_body", False)
    return b"".join(chunks)


def replaying(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the request's ``body`` (read already, whole) first, then what
    ``receive`` gives (a disconnect)."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def declared_size(scope: Scope) -> int:
    """The request's ``Content-Length`` (0 when it says none)."""
    for key, value in scope.get("headers", ()):
        if key == b"content-length":
            return int(value) if value.isdigit() else 0
    return 0


def _json(scope: Scope) -> bool:
    """Whether the request's body is read as JSON: a JSON content type, or none (FastAPI
    reads a body without one as JSON)."""
    for key, value in scope.get("headers", ()):
        if key == b"content-type":
            return b"json" in value.lower()
    return True
