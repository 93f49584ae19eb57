"""PostgreSQL commands: ``pg-import`` (an embedded workspace into the configured database)."""

from __future__ import annotations

from typing import Annotated

import typer

from shelfhand.cli.common import WorkspaceOpt, app, fail, make_console, open_app


@app.command("pg-import")
def pg_import(
    workspace: WorkspaceOpt = None,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            help="Target PostgreSQL (default: SHELFHAND_DATABASE_URL / database_url).",
            show_default=False,
        ),
    ] = None,
    workers: Annotated[
        int,
        typer.Option(
            "--workers", min=1, help="Processes analysing the text (the bulk of the work)."
        ),
    ] = 1,
    maintenance_work_mem: Annotated[
        str,
        typer.Option(
            "--maintenance-work-mem", help="PostgreSQL memory for the index builds after a load."
        ),
    ] = "1GB",
) -> None:
    """Copy the workspace's embedded knowledge (documents, chunks, vectors, source hashes)
    into PostgreSQL, without re-embedding; run again, it skips what is already there unchanged
    (an interrupted import resumes) and replaces what changed."""
    from shelfhand.backends.urls import redact_url
    from shelfhand.core.errors import ConfigurationError, ShelfhandError

    a = open_app(workspace, existing=True)
    url = database_url or a.settings.database_url
    if not url:
        raise fail("no PostgreSQL configured: set SHELFHAND_DATABASE_URL or --database-url", 2)
    if not (a.settings.workspace / "knowledge.db").is_file():
        raise fail(f"{a.settings.workspace} has no embedded knowledge to import", 2)
    from shelfhand.knowledge.stores.pg import PgDatabase, PgKnowledgeStore
    from shelfhand.knowledge.stores.pg.transfer import import_workspace

    console = make_console()
    try:
        store = PgKnowledgeStore(PgDatabase(url))
    except ConfigurationError as exc:
        raise fail(str(exc), 2) from exc
    try:
        report = import_workspace(
            a.settings.workspace,
            store,
            workers=workers,
            maintenance_work_mem=maintenance_work_mem,
            progress=lambda done, total: console.print(
                f"  {done}/{total} documents", highlight=False
            ),
        )
    except ShelfhandError as exc:
        raise fail(str(exc), 1) from exc
    finally:
        store.close()
    console.print(
        f"imported {report.documents} documents, {report.chunks} chunks, {report.vectors} "
        f"vectors and {report.sources} source hashes into {redact_url(url)}"
        f" ({report.skipped} documents already there unchanged)",
        highlight=False,
    )
