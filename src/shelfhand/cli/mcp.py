"""``shelfhand mcp``: serve the workspace as an MCP server, list the configured MCP servers."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from shelfhand.cli.common import (
    RolesOpt,
    TenantOpt,
    WorkspaceOpt,
    app,
    caller_context,
    fail,
    make_console,
    nothing_indexed,
    open_app,
)
from shelfhand.core.secrets import redact_log_handlers
from shelfhand.core.settings_table import BUILTIN_TOOLS

mcp_app = typer.Typer(
    name="mcp",
    help="MCP both ways: serve this workspace to MCP clients, list the MCP servers it uses.",
    no_args_is_help=True,
)
app.add_typer(mcp_app, name="mcp")


@mcp_app.command()
def serve(
    workspace: WorkspaceOpt = None,
    transport: Annotated[
        str,
        typer.Option(
            "--transport", help="stdio (default), http (streamable HTTP) or sse (older clients)."
        ),
    ] = "stdio",
    host: Annotated[
        str, typer.Option("--host", help="HTTP/SSE: address to bind (loopback by default).")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="HTTP/SSE: port (0 picks a free one).")
    ] = 8765,
    allow_anonymous: Annotated[
        bool,
        typer.Option(
            "--allow-anonymous",
            help="HTTP/SSE: serve a non-loopback address without API keys (everyone gets the "
            "--tenant/--user identity).",
        ),
    ] = False,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            help="HTTP/SSE: a Host header to accept (repeatable; 'name:*' for any port). "
            "Turns on DNS-rebinding protection (on by default on loopback).",
        ),
    ] = None,
    allowed_origin: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-origin",
            help="HTTP/SSE: a browser Origin to accept (repeatable), e.g. https://app.example.com.",
        ),
    ] = None,
    tenant: TenantOpt = "default",
    user: Annotated[str, typer.Option("--user", help="User id of the caller.")] = "mcp",
    role: RolesOpt = None,
) -> None:
    """Serve read-only tools and knowledge search (retrieve) as an MCP server.

    The caller's identity: over stdio from --tenant/--user/--role; over HTTP/SSE from the
    Authorization: Bearer key (API keys from SHELFHAND_API_KEYS or api_keys tables in
    shelfhand.toml). Without keys every caller gets --tenant/--user/--role: allowed on
    loopback (with a warning), refused on any other address unless --allow-anonymous.
    """
    if transport not in ("stdio", "http", "sse"):
        raise fail(f"unknown transport {transport!r}: use stdio, http or sse", 2)
    # stdout carries the protocol on stdio: every log line must go to stderr.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    redact_log_handlers()
    import anyio

    from shelfhand.core.auth import load_api_keys
    from shelfhand.core.errors import ConfigurationError
    from shelfhand.mcp.server import check_anonymous, exposed_tools, serve_http, serve_stdio

    a = open_app(workspace)
    keys = {}
    if transport != "stdio":
        # Checked before anything is opened: a refused start-up touches nothing.
        try:
            keys = load_api_keys(a.settings.workspace)
            check_anonymous(host, keys, allow_anonymous)
        except ConfigurationError as exc:
            raise fail(str(exc), 2) from None
    # over stdio, stdout carries the protocol: what a tool module prints as it is imported
    # ("connected to the CRM") goes to stderr (while serving, the MCP SDK diverts it itself)
    with _stdout_to_stderr() if transport == "stdio" else contextlib.nullcontext():
        kb = a.open_knowledge() if a.knowledge_exists() else None
        if kb is None:  # (stderr: over stdio, stdout is the protocol)
            typer.echo(
                f"note: {nothing_indexed(a.settings.workspace)}; until then `retrieve` answers "
                "that no knowledge base is configured",
                err=True,
            )
        a.warm_up(kb)  # loading must not count against the first tool call's timeout
        tools = exposed_tools(a.toolkit(kb, builtins=BUILTIN_TOOLS))  # MCP clients choose
    identity = caller_context(tenant, user, role)
    try:
        if transport == "stdio":
            anyio.run(serve_stdio, tools, identity)
            return

        def ready(url: str) -> None:
            typer.echo(f"shelfhand MCP server listening on {url}", err=True)

        async def run_http() -> None:
            await serve_http(
                tools,
                keys=keys,
                fallback=identity,
                host=host,
                port=port,
                transport="sse" if transport == "sse" else "http",
                allow_anonymous=allow_anonymous,
                allowed_hosts=allowed_host or (),
                allowed_origins=allowed_origin or (),
                on_ready=ready,
            )

        try:
            anyio.run(run_http)
        except OSError as exc:
            raise fail(f"cannot listen on {host}:{port}: {exc}", 1) from None
    except KeyboardInterrupt:
        pass
    finally:
        if kb is not None:
            kb.close()


@mcp_app.command("list")
def list_servers(
    workspace: WorkspaceOpt = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="An mcp.json or shelfhand.toml (default: the workspace's)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.1, help="Seconds per server.")
    ] = 15.0,
) -> None:
    """Show the configured MCP servers, whether they answer, and their tools."""
    from shelfhand.core.errors import ConfigurationError
    from shelfhand.mcp.config import load_mcp_config

    source = config if config is not None else open_app(workspace, create=True).settings.workspace
    try:
        configs = load_mcp_config(source)
    except ConfigurationError as exc:
        raise fail(str(exc), 2) from None
    import anyio

    rows = anyio.run(_probe_all, configs, timeout)
    if as_json:
        typer.echo(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    if not rows:
        make_console().print(f"no MCP servers configured (looked in {source})")
        return
    from rich.table import Table

    table = Table(title="MCP servers")
    for column in ("name", "transport", "target", "status", "tools"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["name"], row["transport"], row["target"], row["status"], ", ".join(row["tools"])
        )
    make_console().print(table)


async def _probe_all(configs: list[Any], timeout: float) -> list[dict[str, Any]]:
    from dataclasses import replace

    rows = []
    for cfg in configs:
        server = replace(cfg, timeout=min(cfg.timeout, timeout)).server()
        target = cfg.url or " ".join([cfg.command or "", *cfg.args])
        row: dict[str, Any] = {
            "name": cfg.name,
            "transport": cfg.transport,
            "target": target,
            "status": "",
            "tools": [],
        }
        try:
            await server.connect()
            row["status"] = "ok"
            row["tools"] = server.offered_tools
        except Exception as exc:
            row["status"] = f"error: {exc}"
        finally:
            try:
                await server.aclose()
            except Exception as exc:
                row["status"] += f" (closing failed: {exc})"
        rows.append(row)
    return rows


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Whatever is written to stdout meanwhile (``print``, or a library writing to file
    descriptor 1) goes to stderr."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
