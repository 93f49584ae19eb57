"""Request bodies that are too large, or JSON whose strings are not Unicode text, are refused
before a route sees them.

Every request body is counted as it arrives (:class:`BodyLimits`): one over its route's limit
(:data:`MAX_JSON_BYTES`, or an upload's files together) is answered 413 as soon as its length,
declared or read so far, says so, whatever its content type. A body sent as ``text/plain`` to
a JSON route was read whole before its 422 (800 MB grew the server by 1.5 GB), and a chunked
upload, which declares no length, was spooled to disk whole before its 413.

A JSON body is read whole before it is parsed (:class:`TextBodies`, within :class:`BodyLimits`).

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

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "MAX_JSON_BYTES",
    "BodyLimits",
    "BodyOverLimit",
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
    """ASGI middleware: a JSON request body holding a lone surrogate is answered by
    ``refuse(path, problem)`` (400; see the module docstring) and never reaches the app;
    paths starting with one of ``skip`` are left to their own checks. How much is read is
    :class:`BodyLimits`' to bound (it wraps this middleware)."""

    def __init__(
        self, app: ASGIApp, *, refuse: Callable[[str, str], ASGIApp], skip: Collection[str] = ()
    ) -> None:
        self.app = app
        self.refuse = refuse
        self.skip = tuple(skip)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope.get("method") not in _METHODS
            or scope["path"].startswith(self.skip)
            or not _json(scope)
        ):
            await self.app(scope, receive, send)
            return
        body = await read_body(receive)
        if body is None:  # the client went away
            return
        problem = lone_surrogate(body)
        if problem:
            await self.refuse(scope["path"], problem)(scope, receive, send)
            return
        await self.app(scope, replaying(body, receive), send)


class BodyOverLimit(HTTPException):
    """A request body passed its route's limit while it was read (413, with ``code``).

    An HTTP exception, so that a route reading its body (FastAPI parsing a form or JSON)
    passes it on rather than answering 400; the app's handler for it answers in the route's
    error body."""

    def __init__(self, detail: str, code: str) -> None:
        super().__init__(status_code=413, detail=detail)
        self.code = code


class BodyLimits:
    """ASGI middleware: each request body is counted as it is read, and the read stops with
    :class:`BodyOverLimit` past the route's limit (see the module docstring).

    A declared ``Content-Length`` over the limit is answered at once, by ``refuse(path,
    status, message, code)``, as is the exception when it reaches this middleware (raised
    under another middleware that reads the body) before the response started.

    Args:
        app: The application.
        refuse: The error answer of a route.
        uploads: The limit of paths starting with ``upload_prefix`` (all of an upload's
            files with their form fields).
        upload_prefix: The upload route's path.
        admit: For an upload, the answer to send instead of reading it (a caller without a
            valid key), or ``None`` to read it: multipart files are spooled to disk before
            the route's own checks run.
        others: The limit of every other path.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        refuse: Callable[[str, int, str, str], ASGIApp],
        uploads: int,
        upload_prefix: str,
        admit: Callable[[Scope], ASGIApp | None] | None = None,
        others: int = MAX_JSON_BYTES,
    ) -> None:
        self.app = app
        self.refuse = refuse
        self.uploads = uploads
        self.upload_prefix = upload_prefix
        self.admit = admit
        self.others = others

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if path.startswith(self.upload_prefix):
            limit, code, what = self.uploads, "upload_too_large", "upload"
            refusal = None if self.admit is None else self.admit(scope)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        else:
            limit, code, what = self.others, "body_too_large", "request body"
        too_large = f"the {what} is over {_size(limit)}"
        if declared_size(scope) > limit:  # (refused before a byte is read)
            await self.refuse(path, 413, too_large, code)(scope, receive, send)
            return
        read = 0

        async def counted() -> Message:
            nonlocal read
            message = await receive()
            if message["type"] == "http.request":
                read += len(message.get("body", b""))
                if read > limit:
                    raise BodyOverLimit(too_large, code)
            return message

        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            await self.app(scope, counted, sending)
        except BodyOverLimit as exc:
            if started:
                raise
            await self.refuse(path, 413, str(exc.detail), exc.code)(scope, receive, send)


def _size(limit: int) -> str:
    """``limit`` bytes in MiB when it is a whole number of them, else in bytes."""
    mib, rest = divmod(limit, 1024**2)
    return f"{mib} MiB" if mib and not rest else f"{limit} bytes"


class BodyTooLarge(Exception):
    """A request body over the most bytes taken (:func:`read_body`)."""


async def read_body(receive: Receive, most: int | None = None) -> bytes | None:
    """The request's whole body, read from ``receive``; ``None`` when the client went away.

    Raises:
        BodyTooLarge: It passed ``most`` bytes (what was read is dropped; the rest is not
            read). ``None``: no bound here (:class:`BodyLimits` counts every body).
    """
    chunks: list[bytes] = []
    size, more = 0, True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if most is not None and size > most:
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
