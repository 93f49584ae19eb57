"""``shelfhand serve``: the workspace as an HTTP service (API under /v1, web chat at /)."""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Annotated, Any

import typer

from shelfhand.cli.common import BUSY_EXIT_CODE, DemoToolsOpt, WorkspaceOpt, app, fail, open_app
from shelfhand.core.secrets import redact_log_handlers

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [trace %(trace_id)s] %(message)s"


def _log_config(level: str) -> dict[str, Any]:
    """uvicorn's logging plus shelfhand's own records, each carrying the request's trace id."""
    from uvicorn.config import LOGGING_CONFIG

    config: dict[str, Any] = copy.deepcopy(LOGGING_CONFIG)
    config["filters"] = {
        "trace": {"()": "shelfhand.api.tracing.TraceIdFilter"},
        "secrets": {"()": "shelfhand.core.secrets.RedactSecrets"},
    }
    for handler in config["handlers"].values():  # uvicorn's access log names query strings
        handler["filters"] = [*handler.get("filters", ()), "secrets"]
    config["formatters"]["shelfhand"] = {"format": LOG_FORMAT}
    config["handlers"]["shelfhand"] = {
        "formatter": "shelfhand",
        "class": "logging.StreamHandler",
        "stream": "ext://sys.stderr",
        "filters": ["trace", "secrets"],
    }
    config["loggers"]["shelfhand"] = {
        "handlers": ["shelfhand"],
        "level": level.upper(),
        "propagate": False,
    }
    return config


@app.command()
def serve(
    workspace: WorkspaceOpt = None,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0 picks a free one).")] = 8080,
    allow_anonymous: Annotated[
        bool,
        typer.Option(
            "--allow-anonymous",
            help="Accept requests without an API key as tenant 'default' (local use only).",
        ),
    ] = False,
    max_upload_mb: Annotated[
        float, typer.Option(help="Largest uploaded file, in MiB.", min=0.001)
    ] = 20.0,
    tenant_quota_mb: Annotated[
        float | None,
        typer.Option(help="Most uploaded MiB one tenant keeps (default: no quota).", min=0.001),
    ] = None,
    tenant_quota_files: Annotated[
        int | None,
        typer.Option(help="Most uploaded files one tenant keeps (default: no quota).", min=1),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
    access_log: Annotated[
        bool, typer.Option("--access-log/--no-access-log", help="Log every request.")
    ] = True,
    heartbeat: Annotated[
        float,
        typer.Option(help="Seconds between ': ping' heartbeats on a quiet chat stream.", min=0.05),
    ] = 15.0,
    demo_tools: DemoToolsOpt = False,
) -> None:
    """Serve the workspace over HTTP: sessions, streamed chat, knowledge upload and search.

    API keys come from SHELFHAND_API_KEYS (JSON) or [[api_keys]] in shelfhand.toml. With no
    chat model configured, chat answers are cited passages from the knowledge agent. A new
    workspace folder is created; indexes and embedders load before /readyz says ready.
    """
    from shelfhand.core.errors import ConfigurationError, WorkspaceBusyError

    a = open_app(workspace, create=True)
    if demo_tools:
        a.use_demo_tools()
    # without the server extra: one line naming it, exit 2 (cli.main)
    import uvicorn

    from shelfhand.api import ServiceConfig, create_app

    level = log_level.lower()
    if level not in ("debug", "info", "warning", "error"):
        raise fail("--log-level must be debug, info, warning or error", 2)
    logging.basicConfig(level=level.upper(), format="%(levelname)s %(name)s %(message)s")
    redact_log_handlers()  # what libraries log (httpx: every URL a team's tool calls)
    try:
        keys = a.api_keys()
        if not keys and not allow_anonymous:
            raise fail(
                'no API keys configured: set SHELFHAND_API_KEYS=\'{"KEY": {"tenant": "t1", '
                '"user": "u1", "roles": ["user"]}}\' or add [[api_keys]] to '
                f"{Path(a.settings.workspace) / 'shelfhand.toml'}; or pass --allow-anonymous "
                "for local use",
                2,
            )
        config = ServiceConfig(
            max_file_bytes=int(max_upload_mb * 1024 * 1024),
            allow_anonymous=allow_anonymous,
            max_tenant_bytes=None if tenant_quota_mb is None else int(tenant_quota_mb * 1024**2),
            max_tenant_files=tenant_quota_files,
            heartbeat_interval=heartbeat,
        )
        api = create_app(a, config=config, api_keys=keys)
    except ConfigurationError as exc:
        raise fail(str(exc), 2) from None
    except WorkspaceBusyError as exc:
        raise fail(str(exc), BUSY_EXIT_CODE) from None
    uvicorn.run(
        api,
        host=host,
        port=port,
        log_level=level,
        log_config=_log_config(level),
        access_log=access_log,
        timeout_graceful_shutdown=10,
    )
