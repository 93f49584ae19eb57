"""MCP server configuration: ``mcp.json`` (the common ``mcpServers`` shape) or ``[mcp]`` in
``shelfhand.toml`` (docs/design.md M1, M3).

``mcp.json``::

    {
      "mcpServers": {
        "time":   {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC"}},
        "orders": {"type": "http", "url": "http://127.0.0.1:8000/mcp",
                   "headers": {"Authorization": "Bearer ${ORDERS_TOKEN}"}, "timeout": 10}
      }
    }

``shelfhand.toml``::

    [mcp.servers.time]
    command = "uvx"
    args = ["mcp-server-time"]

Every entry may also set how its tools are mounted (see :mod:`shelfhand.mcp.options`)::

    "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/data"],
           "prefix": "fs_", "tools": {"deny": ["move_file"]}, "cache_ttl": 0,
           "output_limit": 65536, "max_duration": 120, "reconnect": true,
           "confirm": false, "permission": "user",
           "tool_settings": {"write_file": {"confirm": true, "permission": "admin"}}}

An entry with ``command`` runs over stdio; one with ``url`` over streamable HTTP, or SSE when
``type`` (or ``transport``) is ``"sse"`` or the URL path ends in ``/sse``. ``${VAR}`` and
``${VAR:-default}`` in ``command``, ``args``, ``env``, ``url`` and ``headers`` are read from
the environment. ``"disabled": true`` skips an entry.

A long-lived HTTP service refuses stdio entries (``service_mode=True``): it would start one
child process per service instance that nobody supervises.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from shelfhand.core.errors import ConfigurationError, InvalidArgumentError
from shelfhand.core.settings import read_toml
from shelfhand.mcp.client import DEFAULT_TIMEOUT, McpServer
from shelfhand.mcp.group import McpServerGroup
from shelfhand.mcp.options import (
    DEFAULT_OUTPUT_LIMIT,
    ServerOptions,
    ToolFilter,
    ToolSettings,
    check_prefix,
    tool_filter,
    tool_settings,
)
from shelfhand.mcp.transports import SseServer, StdioServer, StreamableHttpServer

__all__ = [
    "ServerConfig",
    "find_mcp_config",
    "load_mcp_config",
    "parse_mcp_config",
    "refuse_stdio",
    "servers_from_config",
]

Transport = Literal["stdio", "sse", "http"]

_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_HTTP_TYPES = {"http", "streamable-http", "streamable_http", "streamablehttp"}
_KNOWN_KEYS = {
    "command", "args", "env", "cwd", "url", "headers", "type", "transport", "timeout",
    "disabled", "description", "prefix", "tools", "confirm", "permission", "cache_ttl",
    "tool_settings", "output_limit", "max_duration", "reconnect",
}  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerConfig:
    """One configured MCP server.

    Attributes:
        name: The entry's key (used in messages; tools keep their own names).
        transport: ``stdio``, ``sse`` or ``http`` (streamable HTTP).
        command: Executable (stdio).
        args: Its arguments (stdio).
        env: Extra environment variables (stdio).
        cwd: Working directory (stdio).
        url: Endpoint (sse, http).
        headers: HTTP headers (sse, http).
        timeout: Seconds a call may go without an answer or progress; also for connecting.
        prefix: Put before each of its tool names.
        tools: Which tools are mounted.
        defaults: Server-wide ``confirm`` / ``permission`` / ``cache_ttl``.
        tool_settings: Per-tool settings, by the server's own tool names.
        output_limit: Bytes of one result the model sees.
        max_duration: Seconds one call may take in all (``None``: 10 × timeout).
        reconnect: Reopen a lost connection on the next call.
        source: The file the entry came from.
    """

    name: str
    transport: Transport
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    timeout: float = DEFAULT_TIMEOUT
    prefix: str = ""
    tools: ToolFilter = field(default_factory=ToolFilter)
    defaults: ToolSettings = field(default_factory=ToolSettings)
    tool_settings: Mapping[str, ToolSettings] = field(default_factory=dict)
    output_limit: int = DEFAULT_OUTPUT_LIMIT
    max_duration: float | None = None
    reconnect: bool = True
    source: str = ""

    def options(self) -> ServerOptions:
        """The entry's mounting options, as the server classes take them."""
        return ServerOptions(
            prefix=self.prefix,
            tools=self.tools,
            confirm=bool(self.defaults.confirm),
            permission=self.defaults.permission or "user",
            cache_ttl=self.defaults.cache_ttl,
            tool_settings=self.tool_settings,
            output_limit=self.output_limit,
            max_duration=self.max_duration,
            reconnect=self.reconnect,
        )

    def server(self) -> McpServer:
        """A (not yet connected) server object for this entry."""
        options = self.options()
        if self.transport == "stdio":
            assert self.command is not None
            return StdioServer(
                self.command,
                self.args,
                self.env,
                name=self.name,
                cwd=self.cwd,
                timeout=self.timeout,
                **options,
            )
        assert self.url is not None
        if self.transport == "sse":
            return SseServer(
                self.url, self.headers, name=self.name, timeout=self.timeout, **options
            )
        return StreamableHttpServer(
            self.url, self.headers, name=self.name, timeout=self.timeout, **options
        )


def servers_from_config(configs: list[ServerConfig]) -> McpServerGroup:
    """One group with a server per entry, in file order (closed in reverse)."""
    return McpServerGroup(c.server() for c in configs)


def find_mcp_config(workspace: Path) -> Path | None:
    """``<workspace>/mcp.json`` if it exists, else ``shelfhand.toml`` if it has ``[mcp]``."""
    candidate = workspace / "mcp.json"
    if candidate.is_file():
        return candidate
    toml_path = workspace / "shelfhand.toml"
    if toml_path.is_file() and "mcp" in read_toml(toml_path):
        return toml_path
    return None


def load_mcp_config(
    path_or_workspace: str | Path,
    *,
    service_mode: bool = False,
    env: Mapping[str, str] | None = None,
) -> list[ServerConfig]:
    """Read the MCP servers configured in a file or a workspace.

    Args:
        path_or_workspace: An ``mcp.json`` (any ``.json``) or ``shelfhand.toml`` file, or a
            workspace folder (its ``mcp.json``, else ``[mcp]`` in its ``shelfhand.toml``; no
            configuration there means no servers).
        service_mode: The caller is a long-lived HTTP service: stdio entries are refused.
        env: Variables for ``${VAR}`` expansion (default: the process environment).

    Raises:
        ConfigurationError: a malformed file or entry, an unset variable, or (in service
            mode) a stdio entry; the message names the file and the entry.
    """
    source = Path(path_or_workspace)
    if source.is_dir():
        found = find_mcp_config(source)
        if found is None:
            return []
        source = found
    if not source.is_file():
        raise ConfigurationError(f"MCP configuration file {source} does not exist")
    if source.suffix == ".toml":
        section = read_toml(source).get("mcp", {})
        if not isinstance(section, Mapping):
            raise ConfigurationError(f"{source}: [mcp] must be a table")
        data: Any = section
    else:
        try:
            data = json.loads(source.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"{source} is not valid JSON: {exc}") from None
    configs = parse_mcp_config(data, source=str(source), env=env)
    if service_mode:
        refuse_stdio(configs)
    return configs


def refuse_stdio(configs: list[ServerConfig]) -> None:
    """Raise :class:`ConfigurationError` naming every stdio entry (service mode, docs/design.md M3)."""
    stdio = [c for c in configs if c.transport == "stdio"]
    if not stdio:
        return
    named = ", ".join(f"{c.name!r} (command {c.command!r})" for c in stdio)
    where = stdio[0].source or "the MCP configuration"
    raise ConfigurationError(
        f"MCP server entry {named} in {where} uses stdio, which the long-lived HTTP service "
        "does not run (it would start unsupervised child processes per instance). Serve it "
        "over HTTP and configure a url instead, or remove the entry."
    )


def parse_mcp_config(
    data: Any, *, source: str = "", env: Mapping[str, str] | None = None
) -> list[ServerConfig]:
    """Entries of an already-parsed ``{"mcpServers": {...}}`` (or ``{"servers": {...}}``)."""
    env = os.environ if env is None else env
    where = source or "MCP configuration"
    if not isinstance(data, Mapping):
        raise ConfigurationError(f"{where}: expected an object with mcpServers")
    servers = data.get("mcpServers", data.get("servers"))
    if servers is None:
        return []
    if not isinstance(servers, Mapping):
        raise ConfigurationError(f"{where}: mcpServers must map server names to entries")
    return [
        c
        for name, entry in servers.items()
        if (c := _entry(str(name), entry, where, env)) is not None
    ]


def _entry(name: str, entry: Any, where: str, env: Mapping[str, str]) -> ServerConfig | None:
    here = f"{where}: MCP server {name!r}"
    if not isinstance(entry, Mapping):
        raise ConfigurationError(f"{here} must be an object")
    if entry.get("disabled") is True:
        return None
    unknown = sorted(set(entry) - _KNOWN_KEYS)
    if unknown:
        raise ConfigurationError(
            f"{here}: unknown keys {', '.join(unknown)} (known: {', '.join(sorted(_KNOWN_KEYS))})"
        )
    timeout = entry.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise ConfigurationError(f"{here}: timeout must be a positive number of seconds")
    common = _mount_options(name, entry, here)
    if common["max_duration"] is not None and common["max_duration"] < timeout:
        raise ConfigurationError(f"{here}: max_duration must be at least timeout ({timeout:g} s)")
    command, url = entry.get("command"), entry.get("url")
    if (command is None) == (url is None):
        raise ConfigurationError(f"{here} needs either command (stdio) or url (HTTP), not both")
    kind = str(entry.get("type") or entry.get("transport") or "").lower()
    if command is not None:
        if kind not in ("", "stdio"):
            raise ConfigurationError(f"{here}: type {kind!r} does not go with command")
        if not isinstance(command, str) or not command:
            raise ConfigurationError(f"{here}: command must be a non-empty string")
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ConfigurationError(f"{here}: args must be a list of strings")
        cwd = entry.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise ConfigurationError(f"{here}: cwd must be a string")
        return ServerConfig(
            name=name,
            transport="stdio",
            command=_expand(command, env, here),
            args=tuple(_expand(a, env, here) for a in args),
            env=_string_map(entry.get("env"), "env", env, here),
            cwd=cwd,
            timeout=float(timeout),
            source=where,
            **common,
        )
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ConfigurationError(f"{here}: url must be an http:// or https:// URL")
    url = _expand(url, env, here)
    if kind == "sse" or (not kind and url.split("?", 1)[0].rstrip("/").endswith("/sse")):
        transport: Transport = "sse"
    elif kind in _HTTP_TYPES or not kind:
        transport = "http"
    else:
        raise ConfigurationError(f"{here}: unknown type {kind!r}; use stdio, sse or http")
    return ServerConfig(
        name=name,
        transport=transport,
        url=url,
        headers=_string_map(entry.get("headers"), "headers", env, here),
        timeout=float(timeout),
        source=where,
        **common,
    )


def _mount_options(name: str, entry: Mapping[str, Any], here: str) -> dict[str, Any]:
    """``prefix``, ``tools``, settings, ``output_limit``, ... of one entry, checked."""
    try:
        prefix = entry.get("prefix", "")
        if not isinstance(prefix, str):
            raise InvalidArgumentError("prefix must be a string")
        defaults = ToolSettings.from_mapping(
            {k: entry[k] for k in ("confirm", "permission", "cache_ttl") if k in entry},
            "settings",
        )
        limit = entry.get("output_limit", DEFAULT_OUTPUT_LIMIT)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 256:
            raise InvalidArgumentError("output_limit must be a whole number of bytes, at least 256")
        duration = entry.get("max_duration")
        if duration is not None and (
            isinstance(duration, bool) or not isinstance(duration, int | float) or duration <= 0
        ):
            raise InvalidArgumentError("max_duration must be a positive number of seconds")
        reconnect = entry.get("reconnect", True)
        if not isinstance(reconnect, bool):
            raise InvalidArgumentError("reconnect must be true or false")
        return {
            "prefix": check_prefix(prefix, name),
            "tools": tool_filter(entry.get("tools"), name),
            "defaults": defaults,
            "tool_settings": tool_settings(entry.get("tool_settings"), name),
            "output_limit": limit,
            "max_duration": None if duration is None else float(duration),
            "reconnect": reconnect,
        }
    except ValueError as exc:
        raise ConfigurationError(f"{here}: {exc}") from None


def _string_map(value: Any, key: str, env: Mapping[str, str], here: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigurationError(f"{here}: {key} must map names to strings")
    return {str(k): _expand(v, env, here) for k, v in value.items()}


def _expand(text: str, env: Mapping[str, str], here: str) -> str:
    def sub(match: re.Match[str]) -> str:
        var, default = match.group(1), match.group(2)
        value = env.get(var)
        if value is None or value == "":
            if default is None:
                raise ConfigurationError(
                    f"{here} uses ${{{var}}}, which is not set; set it or write ${{{var}:-default}}"
                )
            return default
        return value

    return _VAR_RE.sub(sub, text)
