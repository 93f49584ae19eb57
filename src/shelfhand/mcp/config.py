"""MCP server configuration: ``mcp.json`` (the common ``mcpServers`` shape) or ``[mcp]`` in
``shelfhand.toml`` (DESIGN M1, M3).

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

from shelfhand.core.errors import ConfigurationError
from shelfhand.core.settings import read_toml
from shelfhand.mcp.client import DEFAULT_TIMEOUT, McpServer, McpServerGroup
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
    "disabled", "description",
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
        timeout: Seconds per tool call and for connecting.
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
    source: str = ""

    def server(self) -> McpServer:
        """A (not yet connected) server object for this entry."""
        if self.transport == "stdio":
            assert self.command is not None
            return StdioServer(
                self.command,
                self.args,
                self.env,
                name=self.name,
                cwd=self.cwd,
                timeout=self.timeout,
            )
        assert self.url is not None
        if self.transport == "sse":
            return SseServer(self.url, self.headers, name=self.name, timeout=self.timeout)
        return StreamableHttpServer(self.url, self.headers, name=self.name, timeout=self.timeout)


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
    """Raise :class:`ConfigurationError` naming every stdio entry (service mode, DESIGN M3)."""
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
    )


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
