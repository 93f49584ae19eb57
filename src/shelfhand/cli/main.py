"""The ``shelfhand`` command line (typer + rich). Heavy imports stay inside the commands.

Each module of :data:`COMMAND_MODULES` registers its commands on the one typer app of
:mod:`shelfhand.cli.common`; :func:`main` imports them, then runs the app.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from shelfhand.cli.common import UNAVAILABLE_EXIT_CODE, app, fail, missing_extra

COMMAND_MODULES = (
    "chat",
    "knowledge",
    "audit",
    "mcp",
    "serve",
    "tool_eval",
    "answer_eval",
    "agents",
    "pg",
    "cluster",
    "worker",
    "config",
    "trace",
    "usage",
)


def _version(value: bool) -> None:
    if value:
        from shelfhand.core.version import __version__

        typer.echo(f"shelfhand {__version__}")
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
    from shelfhand.cli.common import STORAGE_FULL_EXIT_CODE, not_text_argument
    from shelfhand.core.errors import (
        ConfigurationError,
        DependencyUnavailableError,
        storage_full_message,
    )

    not_text = not_text_argument(sys.argv[1:])
    if not_text:
        sys.exit(fail(not_text, 2).exit_code)
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
    except ConfigurationError as exc:  # e.g. a database_url that does not answer at start-up
        sys.exit(fail(str(exc), 2).exit_code)
    except DependencyUnavailableError as exc:  # PostgreSQL or Redis went away mid-command
        sys.exit(fail(str(exc), UNAVAILABLE_EXIT_CODE).exit_code)
    except ImportError as exc:  # an optional extra that is not installed: one line, exit 2
        hint = missing_extra(exc)
        if hint is None:
            raise
        sys.exit(fail(hint, 2).exit_code)
    except Exception as exc:  # a full disk is no bug: one line saying so, not a traceback
        full = storage_full_message(exc)
        if not full:
            raise
        sys.exit(fail(full, STORAGE_FULL_EXIT_CODE).exit_code)


if __name__ == "__main__":
    main()
