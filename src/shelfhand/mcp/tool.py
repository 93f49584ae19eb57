"""One MCP server tool as a shelfhand :class:`~shelfhand.tools.tool.Tool` (DESIGN M1)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import mcp.types as types
import pydantic_core

from shelfhand.core.context import RunContext
from shelfhand.core.messages import Citation
from shelfhand.tools.tool import Tool, ToolOutput

if TYPE_CHECKING:
    from shelfhand.mcp.client import McpServer

__all__ = ["McpTool", "to_output"]


async def _no_op(run: RunContext) -> None:
    """Placeholder function: an MCP tool's work happens on its server (see McpTool.invoke)."""


class McpTool(Tool[..., Any]):
    """One tool of an MCP server, as the toolkit and the model see it.

    The schema is the server's ``inputSchema`` unchanged; arguments are checked by the
    server. ``read_only`` (and so retries, caching and parallel calls) only when the server
    annotates the tool with ``readOnlyHint``.

    Attributes:
        server: The server the tool belongs to.
        input_schema: The tool's JSON schema as the server listed it.
    """

    def __init__(self, server: McpServer, listed: types.Tool, *, timeout: float) -> None:
        hints = listed.annotations
        read_only = bool(hints is not None and hints.read_only_hint)
        super().__init__(
            _no_op,
            name=listed.name,
            description=listed.description or listed.title or listed.name,
            read_only=read_only,
            idempotent=bool(hints is not None and hints.idempotent_hint) or read_only,
            timeout=timeout,
            circuit=f"mcp:{server.name}",  # one breaker per server: a dead server fails fast
        )
        self.server = server
        self.input_schema: dict[str, Any] = dict(listed.input_schema or {"type": "object"})
        # Whoever calls ``func(*bind(...))`` instead of ``invoke`` reaches the server too.
        self.func = self._remote
        self.is_async = True

    def __repr__(self) -> str:
        return f"McpTool(name={self.name!r}, server={self.server.name!r})"

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
        return await self.server.call_tool(self.name, arguments, timeout=self.timeout)

    async def invoke(self, arguments: Mapping[str, Any], *, run: RunContext) -> ToolOutput:
        """Call the tool on its server.

        Raises:
            ToolTimeoutError: no answer within ``timeout``.
            ToolError: the server is not connected, went away or refused the request.
        """
        return await self.server.call_tool(self.name, dict(arguments), timeout=self.timeout)

    def _same_as(self, listed: types.Tool) -> bool:
        return (
            self.description == (listed.description or listed.title or listed.name)
            and self.input_schema == dict(listed.input_schema or {"type": "object"})
            and self.read_only == bool(listed.annotations and listed.annotations.read_only_hint)
        )


def to_output(result: types.CallToolResult) -> ToolOutput:
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.EmbeddedResource):
            res = block.resource
            if isinstance(res, types.TextResourceContents):
                parts.append(res.text)
            else:
                parts.append(f"[binary resource {res.uri} ({res.mime_type or 'unknown type'})]")
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
        content=content,
        is_error=bool(result.is_error),
        data=structured,
        citations=_citations(structured),
    )


def _citations(structured: Any) -> tuple[Citation, ...]:
    """Citations a server sent as ``{"citations": [...]}`` (shelfhand's own ``retrieve`` does)."""
    raw = structured.get("citations") if isinstance(structured, Mapping) else None
    if not isinstance(raw, list):
        return ()
    try:
        return tuple(Citation.from_dict(item) for item in raw)
    except (KeyError, TypeError, ValueError):
        return ()  # not our shape: the text content still carries the passages
