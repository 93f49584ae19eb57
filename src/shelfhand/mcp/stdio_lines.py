"""Whole lines from an MCP server's stdout, in linear time and bounded.

The MCP SDK's ``stdio_client`` reads the server's stdout as text chunks (anyio's
``TextReceiveStream``) and splits ``buffer + chunk`` on newlines at every chunk. A message
is one line, so a long one (a file read whole) is joined and scanned again at each chunk of
64 KiB: quadratic. A result of 16 MiB took 7 s of the event loop's CPU, one of 64 MiB 131 s,
during which nothing else in the process ran; and no line was too long to read.

:class:`WholeLines` is that text stream, handing the SDK text that ends at a line's end
(what comes before a line ends is kept in a list, joined once), so the SDK's buffer is
always empty. A line longer than :data:`MAX_LINE_CHARACTERS` is not kept: the rest of it is
read and dropped, and the SDK is handed a JSON-RPC error for the request it answered (its id
is read from the line's first or last characters), so that call fails at once, saying why,
and the session goes on. :func:`use_whole_lines` puts it in the SDK's ``stdio`` module, for
every stdio client of this process, when the SDK reads through anyio's class as expected.
"""

from __future__ import annotations

import json
import logging
import re

from anyio import EndOfStream
from anyio.streams.text import TextReceiveStream

__all__ = ["MAX_LINE_CHARACTERS", "WholeLines", "use_whole_lines"]

logger = logging.getLogger(__name__)

MAX_LINE_CHARACTERS = 64 * 1024**2
"""The longest message (one line) read from an MCP server's stdout."""


_EDGE = 512
"""Characters kept of each end of a line too long to read (where its request id is)."""

_ID = re.compile(r'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.){0,200}")')


_METHOD = re.compile(r'"method"\s*:')


def _refusal(head: str, tail: str) -> str:
    """The line handed on for a message too long to read: a JSON-RPC error for the request it
    answers; an empty line (which the SDK reports and skips) when it is not an answer (a
    request or notification of the server's own, whose id is not one of ours) or no id is
    found."""
    asked = _METHOD.search(head) or _METHOD.search(tail)
    found = None if asked else _ID.search(head) or _ID.search(tail)
    if found is None:
        logger.warning(
            "an MCP server sent a message over %d characters, dropped", MAX_LINE_CHARACTERS
        )
        return "\n"
    error = {
        "code": -32603,
        "message": f"the server's reply is longer than {MAX_LINE_CHARACTERS // 1024**2} MiB: "
        "not read",
    }
    return f'{{"jsonrpc": "2.0", "id": {found.group(1)}, "error": {json.dumps(error)}}}\n'


class WholeLines(TextReceiveStream):
    """anyio's ``TextReceiveStream``, each text it returns ending at a line's end (the text
    after the last one waits for the rest of its line); the stream's last text as it is."""

    def __post_init__(self, encoding: str, errors: str) -> None:
        super().__post_init__(encoding, errors)
        self._pending: list[str] = []
        self._pending_size = 0
        self._dropping: tuple[str, str] | None = None  # a line too long: its two ends

    async def receive(self) -> str:
        while True:
            try:
                text = await super().receive()
            except EndOfStream:
                if not self._pending:
                    raise
                rest, self._pending, self._pending_size = "".join(self._pending), [], 0
                return rest
            lines = self._lines(text)
            if lines:
                return lines

    def _lines(self, text: str) -> str:
        """The whole lines ``text`` ends (with what waited before them); keeps the rest."""
        out: list[str] = []
        while text:
            if self._dropping is not None:  # the rest of a line too long to read
                head, tail = self._dropping
                end = text.find("\n") + 1
                if not end:
                    self._dropping = (head, (tail + text)[-_EDGE:])
                    break
                self._dropping = None
                out.append(_refusal(head, (tail + text[: end - 1])[-_EDGE:]))
                text = text[end:]
                continue
            cut = text.rfind("\n") + 1
            if not cut:
                self._pending.append(text)
                self._pending_size += len(text)
                if self._pending_size > MAX_LINE_CHARACTERS:
                    line = "".join(self._pending)
                    self._dropping = (line[:_EDGE], line[-_EDGE:])
                    self._pending, self._pending_size = [], 0
                break
            self._pending.append(text[:cut])
            out.append("".join(self._pending))
            rest = text[cut:]
            self._pending = [rest] if rest else []
            self._pending_size = len(rest)
            break
        return "".join(out)


def use_whole_lines() -> bool:
    """Make the MCP SDK's stdio clients read through :class:`WholeLines`; ``False`` (and a
    warning) when the SDK no longer reads through anyio's ``TextReceiveStream``."""
    from mcp.client import stdio

    current = getattr(stdio, "TextReceiveStream", None)
    if current is WholeLines:
        return True
    if current is not TextReceiveStream:
        logger.warning("the MCP SDK's stdio client reads its server another way: lines unbounded")
        return False
    stdio.TextReceiveStream = WholeLines  # type: ignore[attr-defined]
    return True
