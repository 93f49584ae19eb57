"""The ``shelfhand`` command line (typer + rich). Heavy imports stay inside the commands."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from shelfhand.cli.model_flags import (
    MaxTokensOpt,
    TemperatureOpt,
    ToolChoiceOpt,
    ToolModeOpt,
    apply_model_flags,
)

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


def _console() -> Any:
    from rich.console import Console

    return Console()


BUSY_EXIT_CODE = 75
"""Exit code when another process writes the workspace (EX_TEMPFAIL: try again later)."""
UNAVAILABLE_EXIT_CODE = 69
"""Exit code when PostgreSQL or Redis stops answering during a command (EX_UNAVAILABLE)."""


def _err(message: str, code: int = 1) -> typer.Exit:
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(code)


def _app(workspace: Path | None, *, existing: bool = False, create: bool = False) -> App:
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
        raise _err(str(exc), 2) from None
    ws = a.settings.workspace
    if existing and not ws.is_dir():
        raise _err(
            f"workspace {ws} does not exist: check the path, or create it with "
            f"`shelfhand ingest -w {ws} PATH`",
            2,
        )
    if create:
        try:
            ws.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _err(f"cannot create workspace {ws}: {exc}", 2) from None
    return a


def _user(tenant: str, user: str, roles: list[str] | None) -> Any:
    from shelfhand.core.context import UserContext

    return UserContext(tenant_id=tenant, user_id=user, roles=roles or [])


@app.command()
def tools(
    workspace: WorkspaceOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the schemas as JSON.")] = False,
) -> None:
    """List the tools the model can call, with their JSON schemas."""
    a = _app(workspace)
    # the schemas do not depend on the documents: no need to open the knowledge base
    kit = a.toolkit(None, governed=False)
    schemas = kit.schemas()
    if as_json:
        typer.echo(json.dumps(schemas, ensure_ascii=False, indent=2))
        return
    from rich.table import Table

    table = Table(title="tools")
    table.add_column("name", style="bold", no_wrap=True)
    table.add_column("attributes")
    table.add_column("parameters")
    table.add_column("description", ratio=1)
    for t in kit.visible_tools():
        params = t.schema()["function"]["parameters"].get("properties", {})
        attrs = [k for k in ("read_only", "concurrency_safe", "external") if getattr(t, k)]
        attrs.append(f"permission={t.permission}")
        table.add_row(t.name, ", ".join(attrs), ", ".join(params), t.description.split("\n")[0])
    _console().print(table)


@app.command()
def chat(
    workspace: WorkspaceOpt = None,
    tenant: TenantOpt = "default",
    user: UserOpt = "cli",
    role: RolesOpt = None,
    max_tokens: MaxTokensOpt = None,
    temperature: TemperatureOpt = None,
    tool_mode: ToolModeOpt = None,
    tool_choice: ToolChoiceOpt = None,
) -> None:
    """Chat with the configured model (streaming), using the tools and the knowledge base."""
    a = _app(workspace)
    apply_model_flags(
        a,
        max_tokens=max_tokens,
        temperature=temperature,
        tool_mode=tool_mode,
        tool_choice=tool_choice,
    )
    model = a.chat_model()
    if model is None:
        raise _err(NO_MODEL_HINT, 2)
    import asyncio

    from shelfhand.agent.memory import ConversationMemory
    from shelfhand.core.errors import ModelError

    console = _console()
    kb = a.open_knowledge() if a.knowledge_exists() else None
    agent = a.chat_agent(model, kb, memory=ConversationMemory())
    ctx = _user(tenant, user, role)
    console.print(f"[dim]model {model.name}; empty line or Ctrl-D to quit[/]")
    while True:
        try:
            line = console.input("[bold green]you> [/]")
        except (EOFError, KeyboardInterrupt):
            break
        if not line.strip():
            break
        try:
            asyncio.run(_stream_turn(agent, line, ctx, console))
        except ModelError as exc:
            console.print(f"[bold red]model error:[/] {exc}")


def console_approvals(console: Any) -> Any:
    """Approvals decided at the terminal: each ``confirm=True`` call asks "run it? [y/N]"."""
    import asyncio
    import json as _json

    from shelfhand.tools.approvals import ApprovalRequest, Approvals

    async def ask(request: ApprovalRequest) -> bool:
        args = _json.dumps(dict(request.arguments), ensure_ascii=False)
        prompt = f"[bold yellow]approve[/] {request.tool}({args})? [y/N] "
        try:
            answer = await asyncio.to_thread(console.input, prompt)
        except (EOFError, KeyboardInterrupt):
            return False
        return answer.strip().lower() in ("y", "yes")

    return Approvals(handler=ask)


async def _stream_turn(agent: Any, line: str, ctx: Any, console: Any) -> None:
    from shelfhand.core.events import Final, TextDelta, ToolFinished, ToolStarted
    from shelfhand.knowledge.citations import label

    mid_line = False  # streamed text without a line end yet: a tool step starts a new line
    async for event in agent.stream(line, context=ctx, approvals=console_approvals(console)):
        if isinstance(event, TextDelta):
            console.print(event.text, end="", highlight=False, markup=False)
            mid_line = not event.text.endswith("\n")
        elif isinstance(event, ToolStarted):
            if mid_line:
                console.print()
                mid_line = False
            console.print(f"[dim]→ {event.name}({event.arguments})[/]")
        elif isinstance(event, ToolFinished):
            status = "[red]error[/]" if event.is_error else "ok"
            console.print(f"[dim]← {event.name} {status} {event.duration_ms:.0f} ms[/]")
        elif isinstance(event, Final):
            console.print()
            for c in event.result.citations:
                console.print(f"[dim][{c.index}] {label(c)}[/]", highlight=False)


COMMAND_MODULES = (
    "knowledge",
    "audit",
    "mcp",
    "serve",
    "tool_eval",
    "agents",
    "pg",
    "cluster",
    "worker",
)


def _version(value: bool) -> None:
    if value:
        import shelfhand

        typer.echo(f"shelfhand {shelfhand.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version and exit.", callback=_version, is_eager=True
        ),
    ] = False,
) -> None:
    """A bookshelf (cited retrieval over your documents) and hands (governed tools) for LLM
    agents."""


def quiet_third_party() -> None:
    """Keep library chatter (faiss's loader, pypdf's warnings about odd PDFs) away from users;
    what matters is reported by shelfhand itself (e.g. a file it skipped)."""
    import logging
    import warnings

    for name in ("faiss", "faiss.loader", "pypdf"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=r"pypdf(\..*)?")
    warnings.filterwarnings("ignore", module=r"faiss(\..*)?")


def main() -> None:
    from importlib import import_module
    from importlib.util import find_spec

    for name in COMMAND_MODULES:  # each module registers its commands on `app`
        if find_spec(f"shelfhand.cli.{name}") is not None:
            import_module(f"shelfhand.cli.{name}")
    quiet_third_party()
    from shelfhand.core.errors import ConfigurationError, DependencyUnavailableError

    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
    except ConfigurationError as exc:  # e.g. a database_url that does not answer at start-up
        sys.exit(_err(str(exc), 2).exit_code)
    except DependencyUnavailableError as exc:  # PostgreSQL or Redis went away mid-command
        sys.exit(_err(str(exc), UNAVAILABLE_EXIT_CODE).exit_code)


if __name__ == "__main__":
    main()
