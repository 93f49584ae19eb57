"""MCP server tools as shelfhand :class:`~shelfhand.tools.tool.Tool` objects (docs/design.md M1).

Results become text for the model: text content as it is, images and audio as a short
description (``[image: image/png, 5120 bytes]``, since messages carry no image blocks yet),
everything cut at the server's ``output_limit`` with a marker saying how much was dropped.

Citations a server sends with a result are marked as the server's: their ``source`` (and
``doc_id`` and ``chunk_id``, when sent) start with ``MCP server <name>: ``, the name it is
mounted under in our configuration, whatever the server sent. A reader of the answer tells
them from the knowledge base's own passages (``退货政策 (MCP server docs: 手册/退货.md)``), and
a server that sends a local file's name and chunk id gets a passage of its own, never the
number (and so the place) of the knowledge base's passage.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

import mcp.types as types
import pydantic_core

from shelfhand.core.context import RunContext
from shelfhand.core.messages import Citation
from shelfhand.mcp.options import ToolSettings
from shelfhand.tools.tool import Tool, ToolOutput

__all__ = ["McpServerLike", "McpTool", "ResourceTool", "cap", "resource_output", "to_output"]


class McpServerLike(Protocol):
    """What a tool needs of its server (:class:`~shelfhand.mcp.client.McpServer`)."""

    name: str
    prefix: str
    timeout: float
    max_duration: float
    defaults: ToolSettings

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        timeout: float | None = None,
        tool_name: str | None = None,
    ) -> ToolOutput: ...

    async def read_resource(self, uri: str) -> ToolOutput: ...


async def _no_op(run: RunContext) -> None:
    """Placeholder function: an MCP tool's work happens on its server (see McpTool.invoke)."""


class _RemoteTool(Tool[..., Any]):
    """A tool whose work happens on an MCP server: the schema is :attr:`input_schema` as
    given, arguments go to the subclass's ``invoke`` unchanged (the server validates them)."""

    server: McpServerLike
    input_schema: dict[str, Any]

    def _remote_setup(self, server: McpServerLike, input_schema: Mapping[str, Any]) -> None:
        self.server = server
        self.input_schema = dict(input_schema)
        # Whoever calls ``func(*bind(...))`` instead of ``invoke`` reaches the server too.
        self.func = self._remote
        self.is_async = True

    def schema(self) -> dict[str, Any]:
        if self._schema is None:
            parameters = dict(self.input_schema)
            parameters.setdefault("type", "object")
            parameters.setdefault("properties", {})
            function = {
                "name": self.name,
                "description": self.description,
                "parameters": parameters,
            }
            self._schema = {"type": "function", "function": function}
        return self._schema

    def bind(
        self, arguments: Mapping[str, Any], run: RunContext
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``((run,), arguments)`` for :attr:`func`; the server validates the arguments."""
        return (run,), dict(arguments)

    async def _remote(self, run: RunContext, /, **arguments: Any) -> ToolOutput:
        return await self.invoke(arguments, run=run)


class McpTool(_RemoteTool):
    """One tool of an MCP server, as the toolkit and the model see it.

    The schema is the server's ``inputSchema`` unchanged; arguments are checked by the
    server. ``read_only`` (and so retries and parallel calls) only when the server annotates
    the tool with ``readOnlyHint``; results are cached only when ``cache_ttl`` is configured.

    The toolkit's timeout for the call is the server's ``max_duration``: the server object
    itself enforces ``timeout`` between answers and progress notifications.

    Attributes:
        server: The server the tool belongs to.
        remote_name: The tool's name on the server (``name`` carries the prefix).
        input_schema: The tool's JSON schema as the server listed it.
        settings: The governance settings it was mounted with.
    """

    numbered_elsewhere = True  # (a server numbers its passages from 1: see _marked)

    def __init__(self, server: McpServerLike, listed: types.Tool, settings: ToolSettings) -> None:
        hints = listed.annotations
        read_only = bool(hints is not None and hints.read_only_hint)
        super().__init__(
            _no_op,
            name=server.prefix + listed.name,
            description=listed.description or listed.title or listed.name,
            read_only=read_only,
            idempotent=bool(hints is not None and hints.idempotent_hint) or read_only,
            timeout=server.max_duration,
            permission=settings.permission or "user",
            confirm=bool(settings.confirm),
            # never cached unless configured, and never a tool that may change something
            cache_ttl=(settings.cache_ttl or None) if read_only else None,
            # Its own breaker, so one failing tool does not block its siblings; a dead
            # server is caught by the server's own reconnection backoff.
            circuit=f"mcp:{server.name}:{listed.name}",
        )
        self._remote_setup(server, listed.input_schema or {"type": "object"})
        self.remote_name = listed.name
        self.settings = settings
        self.call_timeout = settings.timeout or server.timeout

    def __repr__(self) -> str:
        return f"McpTool(name={self.name!r}, server={self.server.name!r})"

    async def invoke(self, arguments: Mapping[str, Any], *, run: RunContext) -> ToolOutput:
        """Call the tool on its server.

        Raises:
            ToolTimeoutError: no answer or progress within ``timeout``.
            ToolError: the server is not connected, went away or refused the request.
        """
        return await self.server.call_tool(
            self.remote_name, dict(arguments), timeout=self.call_timeout, tool_name=self.name
        )

    def _same_as(self, other: McpTool) -> bool:
        return (
            self.name == other.name
            and self.description == other.description
            and self.input_schema == other.input_schema
            and self.read_only == other.read_only
            and self.settings == other.settings
        )


class ResourceTool(_RemoteTool):
    """``<prefix>read_resource(uri)``: read one of an MCP server's resources.

    The description names the resources and resource templates listed when the tool was
    mounted (the first 20 of each).
    """

    def __init__(
        self,
        server: McpServerLike,
        resources: Sequence[types.Resource],
        templates: Sequence[types.ResourceTemplate] = (),
    ) -> None:
        lines = [f"Read a resource of the MCP server {server.name} by its URI."]
        for title, listed in (("Resources:", resources), ("URI templates:", templates)):
            shown = [
                f"- {r.uri if isinstance(r, types.Resource) else r.uri_template}"
                + (f" ({r.mime_type})" if r.mime_type else "")
                + f": {r.description or r.title or r.name}"
                for r in listed[:20]
            ]
            if shown:
                lines += [title, *shown]
            if len(listed) > len(shown):
                lines.append(f"... and {len(listed) - len(shown)} more.")
        super().__init__(
            _no_op,
            name=f"{server.prefix}read_resource",
            description="\n".join(lines),
            read_only=True,
            timeout=server.timeout,
            permission=server.defaults.permission or "user",
            cache_ttl=server.defaults.cache_ttl or None,
            circuit=f"mcp:{server.name}:read_resource",
        )
        self._remote_setup(
            server,
            {
                "type": "object",
                "properties": {"uri": {"type": "string", "description": "The resource URI."}},
                "required": ["uri"],
            },
        )

    async def invoke(self, arguments: Mapping[str, Any], *, run: RunContext) -> ToolOutput:
        uri = arguments.get("uri")
        if not isinstance(uri, str) or not uri:
            return ToolOutput(content="read_resource needs a uri (a string)", is_error=True)
        return await self.server.read_resource(uri)


# --- results ----------------------------------------------------------------------------------
def to_output(
    result: types.CallToolResult, *, limit: int | None = None, source: str = "MCP server"
) -> ToolOutput:
    """A tool result as the model reads it (see the module docstring); ``source``, the
    server as our configuration names it (``MCP server docs``), marks its citations."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.ImageContent | types.AudioContent):
            kind = "image" if isinstance(block, types.ImageContent) else "audio"
            parts.append(f"[{kind}: {block.mime_type}, {_decoded_size(block.data)} bytes]")
        elif isinstance(block, types.EmbeddedResource):
            parts.append(_resource_text(block.resource))
        elif isinstance(block, types.ResourceLink):
            parts.append(f"[resource {block.uri}]")
        else:
            mime = getattr(block, "mime_type", None) or "unknown type"
            parts.append(f"[{getattr(block, 'type', 'content')} ({mime}) not shown]")
    structured = result.structured_content
    if not parts and structured is not None:
        parts.append(pydantic_core.to_json(structured).decode("utf-8"))
    content = "\n".join(parts) or ("error" if result.is_error else "done")
    return ToolOutput(
        content=cap(content, limit, source),
        is_error=bool(result.is_error),
        data=structured,
        citations=_citations(structured, limit, source),
    )


def resource_output(
    result: types.ReadResourceResult, *, limit: int | None = None, source: str = "MCP server"
) -> ToolOutput:
    """A read resource as the model reads it (text as is, binary described)."""
    text = "\n".join(_resource_text(item) for item in result.contents) or "(empty resource)"
    return ToolOutput(content=cap(text, limit, source))


def cap(text: str, limit: int | None, source: str = "MCP server") -> str:
    """``text`` cut to ``limit`` UTF-8 bytes (on a character boundary) with a marker."""
    if limit is None:
        return text
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    kept = data[:limit].decode("utf-8", errors="ignore")
    shown = len(kept.encode("utf-8"))
    return (
        f"{kept}\n[output truncated: {source} sent {len(data)} bytes, the first {shown} "
        "are shown (output_limit)]"
    )


def _resource_text(res: types.TextResourceContents | types.BlobResourceContents) -> str:
    if isinstance(res, types.TextResourceContents):
        return res.text
    mime = res.mime_type or "unknown type"
    kind = "image" if mime.startswith("image/") else "binary resource"
    return f"[{kind}: {mime}, {_decoded_size(res.blob)} bytes, {res.uri}]"


def _decoded_size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data) * 3 // 4


MAX_CITATIONS = 20
"""The most citations one result brings (shelfhand's ``retrieve`` sends at most 8)."""


def _citations(
    structured: Any, limit: int | None = None, source: str = "MCP server"
) -> tuple[Citation, ...]:
    """Citations a server sent as ``{"citations": [...]}`` (shelfhand's own ``retrieve`` does),
    marked with ``source`` (see the module docstring): the first :data:`MAX_CITATIONS`,
    their texts within ``limit`` bytes together, as the content is (they reach the run's
    citations, the answer check and the reply: a server could send any number of any
    length)."""
    raw = structured.get("citations") if isinstance(structured, Mapping) else None
    if not isinstance(raw, list):
        return ()
    try:
        citations = [_marked(Citation.from_dict(item), source) for item in raw[:MAX_CITATIONS]]
    except (KeyError, TypeError, ValueError, AttributeError):
        return ()  # not our shape: the text content still carries the passages
    if limit is None:
        return tuple(citations)
    kept: list[Citation] = []
    left = limit
    for citation in citations:
        size = len(citation.text.encode("utf-8"))
        if size > left:
            citation = replace(citation, text=cap(citation.text, max(left, 0), source))
        kept.append(citation)
        left -= size
    return tuple(kept)


MAX_LABEL_CHARS = 500
"""The most characters of a server's citation ``source``, ``title``, ``section`` and ids (a
passage's label; the text is bounded by ``output_limit``)."""
MAX_NOTE_CHARS = 2_000
"""The most characters of the disagreements one of a server's citations reports (whole lines;
one of shelfhand's is about 100)."""


def _marked(citation: Citation, source: str) -> Citation:
    """``citation`` named as ``source``'s: its source and ids cannot be a local passage's.
    Its number, and those of the disagreements it reports, are the server's: the toolkit
    numbers them in the calling run (``McpTool.numbered_elsewhere``). What labels it and its
    disagreements are bounded (:data:`MAX_LABEL_CHARS`, :data:`MAX_NOTE_CHARS`, as many
    ``conflicts_with`` as :data:`MAX_CITATIONS`): they reach the reply as they are."""

    def mark(value: str) -> str:
        return f"{source}: {value[:MAX_LABEL_CHARS]}" if value else ""

    note = citation.conflict_note
    if len(note) > MAX_NOTE_CHARS:
        note = note[: note.rfind("\n", 0, MAX_NOTE_CHARS + 1) + 1].rstrip("\n")
    return replace(
        citation,
        source=mark(citation.source) or source,
        doc_id=mark(citation.doc_id),
        chunk_id=mark(citation.chunk_id),
        title=citation.title[:MAX_LABEL_CHARS],
        section=citation.section[:MAX_LABEL_CHARS],
        spans=citation.spans[:64],
        conflicts_with=citation.conflicts_with[:MAX_CITATIONS],
        conflict_note=note,
    )
