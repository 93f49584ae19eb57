"""Knowledge commands: ingest, embed, reindex, status, sources, forget.

Search and ask are in :mod:`shelfhand.cli.search`, eval in :mod:`shelfhand.cli.evaluate`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

if TYPE_CHECKING:
    from shelfhand.knowledge.base import KnowledgeBase

from shelfhand.cli.common import (
    BUSY_EXIT_CODE,
    TenantOpt,
    WorkspaceOpt,
    app,
    fail,
    make_console,
    not_blank,
    nothing_indexed,
    open_app,
    plural,
    require_index,
)

EXIT_SKIPPED = 3
"""``ingest``: some files were skipped (unreadable); the others were ingested."""
EXIT_PENDING = 4
"""``ingest`` / ``embed``: text stored and keyword-searchable, but the embedder failed; the
chunks stay pending until ``shelfhand embed`` (or the next ingest) embeds them."""
EXIT_INTERRUPTED = 130
"""Ctrl-C: the current batch was finished and everything committed is kept."""


class _StopOnSigint:
    """First Ctrl-C asks the ingest to stop after its current batch; a second one aborts."""

    def __init__(self, console: Any) -> None:
        self.console = console
        self.requested = False
        self._previous: Any = None

    def __call__(self) -> bool:
        return self.requested

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        self.console.print(
            "[yellow]interrupt:[/] finishing the current batch (Ctrl-C again to abort now)",
            highlight=False,
        )

    def __enter__(self) -> _StopOnSigint:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def _bars(console: Any) -> Any:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[amount]}"),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[current]}"),
        console=console,
        transient=True,
    )


def _progress_handler(bar: Any) -> Any:
    """Phase 1: a bar over bytes (total known up front); phase 2: a bar over pending chunks."""
    tasks: dict[str, Any] = {}

    def progress(event: Any) -> None:
        if event.phase == "embed":
            if "embed" not in tasks:
                tasks["embed"] = bar.add_task("embedding", total=event.total, amount="", current="")
            bar.update(
                tasks["embed"],
                total=event.total,
                completed=event.done,
                amount="chunks",
                current=event.source,
            )
            return
        if event.kind == "done":
            return
        if "index" not in tasks:
            tasks["index"] = bar.add_task(
                "indexing", total=event.bytes_total or None, amount="", current=""
            )
        bar.update(
            tasks["index"],
            total=event.bytes_total or None,
            completed=event.bytes_done,
            amount=f"{_size(event.bytes_done)}/{_size(event.bytes_total)}, files",
            current=event.source,
        )
        # the files count rides in the description: "indexing 3/12 files"
        bar.update(tasks["index"], description=f"indexing {event.done}/{event.total} files")

    return progress


def _resume_hint(paths: list[Path], pending: int) -> str:
    again = " ".join(str(p) for p in paths) or "PATH"
    hint = f"run `shelfhand ingest {again}` again to finish (unchanged files are skipped)"
    if pending:
        hint += f"; {plural(pending, 'chunk')} still need embedding: `shelfhand embed`"
    return hint


@app.command()
def ingest(
    paths: Annotated[list[Path] | None, typer.Argument(help="Files or folders to index.")] = None,
    workspace: WorkspaceOpt = None,
    tenant: TenantOpt = "default",
    tag: Annotated[
        list[str] | None,
        typer.Option(
            "--tag",
            help="Permission tag (role allowed to read; repeatable).",
            callback=not_blank("tag"),
        ),
    ] = None,
    samples: Annotated[
        bool,
        typer.Option("--samples", help="Index the bundled sample corpus (projector after-sales)."),
    ] = False,
    wait: Annotated[
        float,
        typer.Option(
            "--wait",
            help="Seconds to wait if another ingest holds the workspace (exit code 75 after).",
            min=0,
        ),
    ] = 0.0,
    no_wait: Annotated[
        bool,
        typer.Option(
            "--no-wait",
            help="Store text (keyword-searchable) and leave embedding to `shelfhand embed` "
            "or the service.",
        ),
    ] = False,
    detach: Annotated[
        bool,
        typer.Option(
            "--detach",
            help="With SHELFHAND_DATABASE_URL: queue the job and return without following it.",
        ),
    ] = False,
    no_queue: Annotated[
        bool,
        typer.Option(
            "--no-queue",
            help="With SHELFHAND_DATABASE_URL: ingest in this process instead of queueing a "
            "job for `shelfhand worker`.",
        ),
    ] = False,
) -> None:
    """Index files and folders (incremental: unchanged files cost nothing).

    Phase 1 stores text (keyword-searchable at once), phase 2 embeds it. Exit codes: 0 all
    done, 2 usage or configuration error, 3 some files skipped, 4 text stored but embedding
    failed (pending; `shelfhand embed` later), 75 the workspace is busy (a server or another
    ingest writes to it), 130 interrupted (committed work is kept), 1 other failure.
    """
    from shelfhand.core.errors import KnowledgeError, WorkspaceBusyError

    targets = list(paths or [])
    if samples:
        from shelfhand.knowledge.base import sample_corpus

        targets.append(sample_corpus())
    if not targets:
        raise fail("give one or more PATHs, or --samples for the bundled sample corpus", 2)
    missing = [str(p) for p in targets if not p.exists()]
    if missing:
        raise fail(f"no such file or folder: {', '.join(missing)}", 2)

    a = open_app(workspace, create=True)  # (a path that cannot be a folder: exit 2, one line)
    console = make_console()
    for note in _folder_notes(targets, a.settings.workspace):
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    if a.settings.database_url and not no_queue:  # workers ingest: queue the files as a job
        from shelfhand.cli.ingest_jobs import queued_ingest
        from shelfhand.core.errors import ConfigurationError

        try:
            queue = a.ingest_queue()
        except ConfigurationError as exc:
            raise fail(str(exc), 2) from None
        assert queue is not None
        try:
            queued_ingest(
                a, queue, targets, tenant=tenant, tags=tag or [], detach=detach, console=console
            )
        finally:
            a.close()
        return
    try:
        kb = a.open_knowledge(
            writer="ingest",
            wait=wait,
            on_wait=lambda why: console.print(
                f"[yellow]waiting:[/] {escape(why)}", highlight=False
            ),
        )
    except WorkspaceBusyError as exc:
        raise fail(str(exc), BUSY_EXIT_CODE) from None
    try:
        with _StopOnSigint(console) as stop, _bars(console) as bar:
            report = kb.ingest(
                targets,
                tenant_id=tenant,
                permission_tags=tag or (),
                progress=_progress_handler(bar),
                wait=not no_wait,
                should_stop=stop,
            )
    except KnowledgeError as exc:
        kb.close()
        raise fail(str(exc), 1) from None
    except KeyboardInterrupt:
        kb.close()
        console.print(
            f"[yellow]aborted:[/] what was committed is kept; {_resume_hint(targets, 0)}",
            highlight=False,
        )
        raise typer.Exit(EXIT_INTERRUPTED) from None
    console.print(
        f"{len(report.added)} added, {len(report.updated)} updated, "
        f"{len(report.unchanged)} unchanged, {len(report.removed)} removed, "
        f"{len(report.failed)} skipped; {plural(report.chunks, 'chunk')} "
        f"({report.embedded_chunks} embedded in {report.embed_seconds:.1f} s), "
        f"{report.total_seconds:.1f} s in all -> {a.settings.workspace}",
        highlight=False,
    )
    for failure in report.failed:
        console.print(
            f"[yellow]skipped[/] {escape(failure.source)}: {escape(failure.reason)}",
            highlight=False,
        )
    if report.embedding_error:
        console.print(
            f"[yellow]keyword-only for now:[/] {report.embedding_error}; "
            f"{plural(report.pending_chunks, 'chunk')} "
            f"{'is' if report.pending_chunks == 1 else 'are'} stored and keyword-searchable, "
            "and will be embedded by `shelfhand embed`, the next ingest or the service",
            highlight=False,
        )
    elif no_wait and report.pending_chunks:
        console.print(
            f"{plural(report.pending_chunks, 'chunk')} "
            f"{'waits' if report.pending_chunks == 1 else 'wait'} for embedding: "
            "run `shelfhand embed` (or let `shelfhand serve` do it)",
            highlight=False,
        )
    if kb.degraded_reason:
        console.print(f"[yellow]note:[/] {escape(kb.degraded_reason)}", highlight=False)
    kb.close()
    if report.interrupted:
        console.print(
            f"[yellow]interrupted:[/] committed work is kept; "
            f"{_resume_hint(targets, report.pending_chunks)}",
            highlight=False,
        )
        raise typer.Exit(EXIT_INTERRUPTED)
    if report.failed:
        raise typer.Exit(EXIT_SKIPPED)
    if report.embedding_error:
        raise typer.Exit(EXIT_PENDING)


_SERVED_ADVICE = {
    "forget": "remove it through the API (DELETE /v1/knowledge/sources/SOURCE), or stop the "
    "server first",
    "reindex": "stop the server first (the rebuild needs the workspace to itself)",
    "embed": "the server embeds pending chunks itself; or stop it first",
}


def _busy(exc: Exception, command: str) -> typer.Exit:
    """Exit 75 with who holds the workspace; for a served one, what to do for ``command``
    (an upload through the API is advice for `ingest` only)."""
    message = str(exc)
    if getattr(exc, "holder", None) == "serve" and command in _SERVED_ADVICE:
        served = message.split("(shelfhand serve)", 1)[0] + "(shelfhand serve)"
        message = f"{served}: {_SERVED_ADVICE[command]}"
    return fail(message, BUSY_EXIT_CODE)


def _open_existing_as_writer(workspace: Path | None, command: str) -> KnowledgeBase:
    """The knowledge base of an existing workspace, with its writer lock (clear exits when
    nothing is indexed yet or another process writes)."""
    from shelfhand.core.errors import WorkspaceBusyError

    a = open_app(workspace, existing=True)
    require_index(a)
    try:
        return a.open_knowledge(writer="ingest")
    except WorkspaceBusyError as exc:
        raise _busy(exc, command) from None


@app.command()
def embed(workspace: WorkspaceOpt = None) -> None:
    """Embed chunks stored without vectors (after `ingest --no-wait` or an embedder outage)."""
    kb = _open_existing_as_writer(workspace, "embed")
    console = make_console()
    if kb.keyword_only:
        reason = kb.degraded_reason or "retrieval mode is keyword"
        kb.close()
        raise fail(f"no embedder available ({reason})", 2)
    with _StopOnSigint(console) as stop, _bars(console) as bar:
        report = kb.embed_pending(progress=_progress_handler(bar), should_stop=stop)
    kb.close()
    also = _other_languages(plural(report.bridged_chunks, "chunk"), report.bridged_chunks)
    console.print(
        f"{plural(report.embedded_chunks, 'chunk')} embedded{also} in {report.seconds:.1f} s; "
        f"{report.pending_chunks} pending",
        highlight=False,
    )
    if report.interrupted:
        console.print("[yellow]interrupted:[/] run `shelfhand embed` again to go on")
        raise typer.Exit(EXIT_INTERRUPTED)
    if report.error:
        raise fail(report.error, EXIT_PENDING)


@app.command()
def reindex(workspace: WorkspaceOpt = None) -> None:
    """Rebuild the keyword index from the stored chunks in one pass: after many ingests it is
    in many segments, and one segment searches faster (15-20% at 1M chunks). On Qdrant
    (qdrant_url): build its HNSW graphs and merge its segments instead. On PostgreSQL: index
    the chunks stored while Qdrant served the searches (after qdrant_url was removed)."""
    import time

    from shelfhand.core.errors import KnowledgeError

    kb = _open_existing_as_writer(workspace, "reindex")
    started = time.perf_counter()
    try:
        chunks = kb.count_chunks()
        optimized = kb.optimize_qdrant()
        if optimized is not None:  # on Qdrant: its graphs and segments, not tantivy's
            make_console().print(
                f"Qdrant index optimized: {plural(chunks, 'chunk')}"
                f"{'' if optimized else ' (nothing to do)'}, "
                f"{time.perf_counter() - started:.1f} s",
                highlight=False,
            )
            return
        analysed = kb.index_pg_keywords()
        if analysed is not None:  # PostgreSQL: its keyword fields of chunks stored without
            make_console().print(
                f"PostgreSQL keyword index: {plural(analysed, 'chunk')} indexed, "
                f"{time.perf_counter() - started:.1f} s",
                highlight=False,
            )
            return
        segments = kb.rebuild_keyword_index()
    except KnowledgeError as exc:
        raise fail(str(exc), 2) from None
    finally:
        kb.close()
    make_console().print(
        f"keyword index rebuilt: {plural(chunks, 'chunk')}, {plural(segments, 'segment')}, "
        f"{time.perf_counter() - started:.1f} s",
        highlight=False,
    )


def _other_languages(said: str, count: int) -> str:
    """ " (and <said> for questions in other languages)" when ``count`` (vectors or chunks in
    the bridge spaces) is not 0: how `embed` and `status` tell them apart."""
    return f" (and {said} for questions in other languages)" if count else ""


@app.command()
def status(
    workspace: WorkspaceOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """What the workspace holds: sources, chunks, vectors and chunks waiting for embedding."""
    a = open_app(workspace, existing=True)
    info: dict[str, Any] = {
        "workspace": str(a.settings.workspace),
        "retrieval_mode": a.settings.retrieval_mode,
        "embedder": a.settings.embedder,
        "store": a.knowledge_store(),
        "sources": 0,
        "documents": 0,
        "chunks": 0,
        "vectors": 0,
        "vectors_for_other_languages": 0,
        "pending_embeddings": 0,
    }
    if a.knowledge_exists():
        kb = a.open_knowledge(embed=False)  # counting needs no model
        s = kb.status()
        kb.close()
        info.update(
            sources=s.sources,
            documents=s.documents,
            chunks=s.chunks,
            vectors=s.vectors,
            vectors_for_other_languages=s.bridge_vectors,
            pending_embeddings=0 if a.settings.retrieval_mode == "keyword" else s.pending_chunks,
        )
    if as_json:
        typer.echo(json.dumps(info, ensure_ascii=False))
        return
    console = make_console()
    bridged = info.pop("vectors_for_other_languages")
    for key, value in info.items():
        shown = escape(str(value))
        if key == "vectors":
            shown += _other_languages(str(bridged), bridged)
        console.print(f"{key.replace('_', ' '):>19}: {shown}", highlight=False)
    if info["pending_embeddings"]:
        console.print(
            "[dim]pending chunks are keyword-searchable; `shelfhand embed` (or `shelfhand "
            "serve`) embeds them[/]"
        )
    elif not a.knowledge_exists():
        console.print(f"[dim]{escape(nothing_indexed(a.settings.workspace))}[/]", highlight=False)


@app.command()
def sources(
    workspace: WorkspaceOpt = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print a JSON list, one object per source: source, doc_type, tenants, tags, "
            "documents, chunks, updated_at (seconds since the epoch).",
        ),
    ] = False,
) -> None:
    """List the indexed sources."""
    a = open_app(workspace, existing=True)
    if not a.knowledge_exists():
        if as_json:  # (stdout stays the JSON: an empty list)
            typer.echo("[]")
            typer.echo(nothing_indexed(a.settings.workspace), err=True)
            return
        typer.echo(nothing_indexed(a.settings.workspace))
        return
    kb = a.open_knowledge(embed=False)
    listed = kb.sources()
    access = kb.source_access([s.source for s in listed])
    kb.close()
    # who may read each: its tenant(s) and its permission tags (roles; none: everyone of the
    # tenant)
    readers = [tuple(sorted(x) for x in access.get(s.source, (set(), set()))) for s in listed]
    if as_json:
        rows = [
            {
                "source": s.source,
                "doc_type": s.doc_type,
                "tenants": tenants,
                "tags": tags,
                "documents": s.documents,
                "chunks": s.chunks,
                "updated_at": s.updated_at,
            }
            for s, (tenants, tags) in zip(listed, readers, strict=True)
        ]
        typer.echo(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    from rich.table import Table

    table = Table(title=f"sources in {a.settings.workspace}")
    # paths fold (they have no spaces); short codes, numbers and dates never split
    table.add_column("source", overflow="fold", ratio=1)
    table.add_column("type", no_wrap=True)
    table.add_column("tenant", overflow="fold")
    table.add_column("tags", overflow="fold")  # ("-": everyone of the tenant)
    table.add_column("docs", no_wrap=True, justify="right")
    table.add_column("chunks", no_wrap=True, justify="right")
    table.add_column("updated", no_wrap=True)
    for s, (tenants, tags) in zip(listed, readers, strict=True):
        table.add_row(
            s.source,
            s.doc_type,
            ", ".join(tenants) or "-",
            ", ".join(tags) or "-",
            str(s.documents),
            str(s.chunks),
            time.strftime("%Y-%m-%d %H:%M", time.localtime(s.updated_at)),
        )
    make_console().print(table)


def _folder_notes(targets: list[Path], workspace: Path) -> list[str]:
    """What the folders among ``targets`` hold that ingest will not read: files of an
    unsupported type (named, a few), symbolic links to folders (never followed: a link can
    loop, or lead out of the folder given; each named once, with where it points), or nothing
    readable at all (``workspace``, which ingest never reads, is not looked into)."""
    import os

    from shelfhand.knowledge.reading.readers import SUPPORTED_SUFFIXES, listed, walked

    notes = []
    supported = ", ".join(sorted(SUPPORTED_SUFFIXES))
    skip = workspace.resolve()
    links_seen: set[str] = set()  # (a folder given twice, or inside another given)
    for folder in (t for t in targets if t.is_dir()):
        readable = 0
        ignored: list[str] = []
        links: list[str] = []
        for root, dirs, files in os.walk(folder):  # (os.walk lists a linked folder, unwalked)
            dirs[:] = [d for d in dirs if walked(d) and Path(root, d).resolve() != skip]
            for d in dirs:
                link = Path(root, d)
                if link.is_symlink() and os.path.abspath(link) not in links_seen:
                    links_seen.add(os.path.abspath(link))
                    links.append(f"{link.relative_to(folder)} -> {os.readlink(link)}")
            for name in files:
                if listed(name):
                    readable += 1
                elif walked(name):
                    ignored.append(str(Path(root, name).relative_to(folder)))
        if not readable:
            notes.append(f"{folder} holds no file of a type shelfhand reads ({supported})")
        if ignored:
            shown = ", ".join(sorted(ignored)[:5]) + (", ..." if len(ignored) > 5 else "")
            notes.append(
                f"not read in {folder}: {plural(len(ignored), 'file')} of an unsupported type "
                f"({shown}); supported: {supported}"
            )
        if links:
            shown = ", ".join(sorted(links)[:5]) + (", ..." if len(links) > 5 else "")
            notes.append(
                f"not followed in {folder}: "
                f"{plural(len(links), 'symbolic link')} to "
                f"{'a folder' if len(links) == 1 else 'folders'} ({shown}); ingest does not "
                "follow links to folders (one could loop or lead outside the folder): "
                "ingest the folder a link points to by its own path"
            )
    return notes


@app.command()
def forget(source: str, workspace: WorkspaceOpt = None) -> None:
    """Remove one source (and its chunks) from the index; `docs/` removes a whole folder."""
    from shelfhand.core.errors import WorkspaceBusyError

    a = open_app(workspace, existing=True)
    require_index(a)
    try:
        kb = a.open_knowledge(embed=False, writer="forget")
    except WorkspaceBusyError as exc:
        raise _busy(exc, "forget") from None
    removed = kb.forget(source)
    folder = source.rstrip("/") + "/"
    # `forget docs` for the folder docs/: say so and do it, rather than "not indexed"
    if (
        not removed
        and not source.endswith("/")
        and any(s.source.startswith(folder) for s in kb.sources())
    ):
        removed = kb.forget(folder)
        source = folder
    kb.close()
    if not removed:
        raise fail(f"{source!r} is not indexed (see `shelfhand sources`)", 1)
    make_console().print(f"removed {source} ({plural(removed, 'document')})")


# search and ask (shelfhand.cli.search) and eval (shelfhand.cli.evaluate) live in modules of
# their own; importing them here registers them after these commands, in the order `shelfhand
# --help` has always listed them.
from shelfhand.cli import evaluate, search  # noqa: E402, F401
