"""What every command shares: the ``shelfhand`` typer app, common options, errors and exit
codes, and opening the workspace's :class:`~shelfhand.app.App`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from shelfhand.app import App

app = typer.Typer(
    name="shelfhand",
    help="A bookshelf (cited retrieval over your documents) and hands (governed tools) for LLM agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # plain click help: rich markup would eat "[[api_keys]]" and print flags as "--json <bool>"
    rich_markup_mode=None,
)

WorkspaceOpt = Annotated[
    Path | None,
    typer.Option(
        "--workspace",
        "-w",
        help="Workspace folder (default ./.shelfhand or $SHELFHAND_WORKSPACE).",
        show_default=False,
    ),
]
TenantOpt = Annotated[str, typer.Option("--tenant", help="Tenant of the caller / documents.")]
UserOpt = Annotated[str, typer.Option("--user", help="User id of the caller.")]
RolesOpt = Annotated[
    list[str] | None, typer.Option("--role", help="A role of the caller (repeatable).")
]

NO_MODEL_HINT = (
    "No chat model is configured. Set SHELFHAND_MODEL (and OPENAI_BASE_URL / OPENAI_API_KEY for "
    "any OpenAI-compatible endpoint, e.g. a local llama.cpp or vLLM server), or put "
    'model = "..." under [shelfhand] in <workspace>/shelfhand.toml.'
)


def make_console() -> Any:
    from rich.console import Console

    return Console()


BUSY_EXIT_CODE = 75
"""Exit code when another process writes the workspace (EX_TEMPFAIL: try again later)."""
UNAVAILABLE_EXIT_CODE = 69
"""Exit code when PostgreSQL or Redis stops answering during a command (EX_UNAVAILABLE)."""


def fail(message: str, code: int = 1) -> typer.Exit:
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(code)


def open_app(workspace: Path | None, *, existing: bool = False, create: bool = False) -> App:
    """The app of ``workspace``.

    Args:
        existing: A read-only command: a missing workspace is an error (exit 2), never
            silently created.
        create: Create the workspace folder if it is missing (``serve``, ``mcp list``).
    """
    from shelfhand.app import App
    from shelfhand.core.errors import ConfigurationError

    try:
        a = App.from_settings(workspace=workspace)
    except ConfigurationError as exc:
        raise fail(str(exc), 2) from None
    ws = a.settings.workspace
    if existing and not ws.is_dir():
        raise fail(
            f"workspace {ws} does not exist: check the path, or create it with "
            f"`shelfhand ingest -w {ws} PATH`",
            2,
        )
    if create:
        try:
            ws.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise fail(f"cannot create workspace {ws}: {exc}", 2) from None
    return a


def caller_context(tenant: str, user: str, roles: list[str] | None) -> Any:
    from shelfhand.core.context import UserContext

    return UserContext(tenant_id=tenant, user_id=user, roles=roles or [])
