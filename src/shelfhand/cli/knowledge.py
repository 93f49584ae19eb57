"""Knowledge commands: ingest, embed, status, sources, forget, search, ask, eval."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer
from rich.markup import escape

if TYPE_CHECKING:
    from shelfhand.knowledge.base import KnowledgeBase
    from shelfhand.knowledge.retrieval.hybrid import SearchMode

from shelfhand.cli.common import (
    BUSY_EXIT_CODE,
    NO_MODEL_HINT,
    RolesOpt,
    TenantOpt,
    UserOpt,
    WorkspaceOpt,
    app,
    caller_context,
    fail,
    make_console,
    open_app,
)
from shelfhand.cli.model_flags import (
    MaxTokensOpt,
    TemperatureOpt,
    ToolChoiceOpt,
    ToolModeOpt,
    apply_model_flags,
)

ModeOpt = Annotated[str, typer.Option("--mode", help="Retrieval: hybrid, keyword or vector.")]
NO_ANSWER_EXIT_CODE = 3
"""`shelfhand ask` exits with this when the model gave no answer (stop_reason ``empty``)."""


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
        hint += f"; {pending} chunks still need embedding: `shelfhand embed`"
    return hint


@app.command()
def ingest(
    paths: Annotated[list[Path] | None, typer.Argument(help="Files or folders to index.")] = None,
    workspace: WorkspaceOpt = None,
    tenant: TenantOpt = "default",
    tag: Annotated[
        list[str] | None,
        typer.Option("--tag", help="Permission tag (role allowed to read; repeatable)."),
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

    a = open_app(workspace)
    console = make_console()
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
            on_wait=lambda why: console.print(f"[yellow]waiting:[/] {why}", highlight=False),
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
        f"{len(report.failed)} skipped; {report.chunks} chunks "
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
            f"{report.pending_chunks} chunks are stored and keyword-searchable, and will be "
            "embedded by `shelfhand embed`, the next ingest or the service",
            highlight=False,
        )
    elif no_wait and report.pending_chunks:
        console.print(
            f"{report.pending_chunks} chunks wait for embedding: run `shelfhand embed` "
            "(or let `shelfhand serve` do it)",
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


def _open_existing_as_writer(workspace: Path | None) -> KnowledgeBase:
    """The knowledge base of an existing workspace, with its writer lock (clear exits when
    nothing is indexed yet or another process writes)."""
    from shelfhand.core.errors import WorkspaceBusyError

    a = open_app(workspace, existing=True)
    if not a.knowledge_exists():
        raise fail("nothing indexed yet: run `shelfhand ingest PATH`", 2)
    try:
        return a.open_knowledge(writer="ingest")
    except WorkspaceBusyError as exc:
        raise fail(str(exc), BUSY_EXIT_CODE) from None


@app.command()
def embed(workspace: WorkspaceOpt = None) -> None:
    """Embed chunks stored without vectors (after `ingest --no-wait` or an embedder outage)."""
    kb = _open_existing_as_writer(workspace)
    console = make_console()
    if kb.keyword_only:
        reason = kb.degraded_reason or "retrieval mode is keyword"
        kb.close()
        raise fail(f"no embedder available ({reason})", 2)
    with _StopOnSigint(console) as stop, _bars(console) as bar:
        report = kb.embed_pending(progress=_progress_handler(bar), should_stop=stop)
    kb.close()
    console.print(
        f"{report.embedded_chunks} chunks embedded in {report.seconds:.1f} s; "
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
    in many segments, and one segment searches faster (15-20% at 1M chunks)."""
    import time

    from shelfhand.core.errors import KnowledgeError

    kb = _open_existing_as_writer(workspace)
    started = time.perf_counter()
    try:
        chunks = kb.count_chunks()
        segments = kb.rebuild_keyword_index()
    except KnowledgeError as exc:
        raise fail(str(exc), 2) from None
    finally:
        kb.close()
    make_console().print(
        f"keyword index rebuilt: {chunks} chunks, {segments} segment(s), "
        f"{time.perf_counter() - started:.1f} s",
        highlight=False,
    )


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
            pending_embeddings=0 if a.settings.retrieval_mode == "keyword" else s.pending_chunks,
        )
    if as_json:
        typer.echo(json.dumps(info, ensure_ascii=False))
        return
    console = make_console()
    for key, value in info.items():
        console.print(f"{key.replace('_', ' '):>19}: {value}", highlight=False)
    if info["pending_embeddings"]:
        console.print(
            "[dim]pending chunks are keyword-searchable; `shelfhand embed` (or `shelfhand "
            "serve`) embeds them[/]"
        )
    elif not a.knowledge_exists():
        console.print("[dim]nothing indexed yet: run `shelfhand ingest PATH`[/]")


@app.command()
def sources(workspace: WorkspaceOpt = None) -> None:
    """List the indexed sources."""
    a = open_app(workspace, existing=True)
    if not a.knowledge_exists():
        make_console().print("nothing indexed yet: run `shelfhand ingest PATH`")
        return
    kb = a.open_knowledge(embed=False)
    from rich.table import Table

    table = Table(title=f"sources in {a.settings.workspace}")
    # paths fold (they have no spaces); short codes, numbers and dates never split
    table.add_column("source", overflow="fold", ratio=1)
    table.add_column("type", no_wrap=True)
    table.add_column("docs", no_wrap=True, justify="right")
    table.add_column("chunks", no_wrap=True, justify="right")
    table.add_column("updated", no_wrap=True)
    for s in kb.sources():
        table.add_row(
            s.source,
            s.doc_type,
            str(s.documents),
            str(s.chunks),
            time.strftime("%Y-%m-%d %H:%M", time.localtime(s.updated_at)),
        )
    make_console().print(table)
    kb.close()


@app.command()
def forget(source: str, workspace: WorkspaceOpt = None) -> None:
    """Remove one source (and its chunks) from the index; `docs/` removes a whole folder."""
    from shelfhand.core.errors import WorkspaceBusyError

    a = open_app(workspace)
    if not a.knowledge_exists():
        raise fail("nothing indexed yet", 1)
    try:
        kb = a.open_knowledge(embed=False, writer="forget")
    except WorkspaceBusyError as exc:
        raise fail(str(exc), BUSY_EXIT_CODE) from None
    removed = kb.forget(source)
    kb.close()
    if not removed:
        raise fail(f"{source!r} is not indexed (see `shelfhand sources`)", 1)
    make_console().print(f"removed {source} ({removed} document(s))")


@app.command()
def search(
    query: str,
    workspace: WorkspaceOpt = None,
    k: Annotated[int, typer.Option("-k", help="How many passages.")] = 5,
    mode: ModeOpt = "hybrid",
    tenant: TenantOpt = "default",
    user: UserOpt = "cli",
    role: RolesOpt = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Search the knowledge base and print cited passages (no model involved)."""
    from shelfhand.knowledge.evidence.citations import (
        format_passages,
        prepare_evidence,
        to_citations,
    )

    a = open_app(workspace, existing=True)
    kb = a.open_knowledge()
    found = kb.search_result(
        query, k=k, user=caller_context(tenant, user, role), mode=_check_mode(mode)
    )
    citations = prepare_evidence(to_citations(list(found.hits)), query)  # disagreements flagged
    if as_json:
        typer.echo(json.dumps([c.to_dict() for c in citations], ensure_ascii=False, indent=2))
    elif not citations:
        make_console().print(
            f"not found: no passage matches {query!r}", highlight=False, markup=False
        )
    else:
        make_console().print(format_passages(citations), highlight=False, markup=False)
        if found.pending_chunks:
            make_console().print(
                f"[dim]{found.pending_chunks} chunks are not embedded yet (found by keywords "
                "only); `shelfhand embed` embeds them[/]",
                highlight=False,
            )
        for note in (found.degraded_reason, found.rerank_reason):
            if note:
                make_console().print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    kb.close()


def _check_mode(mode: str) -> SearchMode:
    if mode in ("hybrid", "keyword", "vector"):
        return cast("SearchMode", mode)
    raise fail(f"--mode must be hybrid, keyword or vector, not {mode!r}", 2)


@app.command()
def ask(
    question: str,
    workspace: WorkspaceOpt = None,
    tenant: TenantOpt = "default",
    user: UserOpt = "cli",
    role: RolesOpt = None,
    retrieval: Annotated[
        str | None,
        typer.Option(
            "--retrieval",
            help="Where the answer's passages come from: context (retrieved before the model "
            "is asked), tool (the model calls retrieve) or both (default: answer_retrieval "
            "setting, else both).",
        ),
    ] = None,
    max_tokens: MaxTokensOpt = None,
    temperature: TemperatureOpt = None,
    tool_mode: ToolModeOpt = None,
    tool_choice: ToolChoiceOpt = None,
) -> None:
    """Answer from the documents (chat model if configured, else cited passages).

    Exits 3 when the model gave no answer (a blank reply, even after a nudge): the passages
    found, or "no answer", are printed instead.
    """
    from shelfhand.agent.fallbacks import found_nothing
    from shelfhand.core.errors import ConfigurationError, ModelError
    from shelfhand.core.settings import check_answer_retrieval
    from shelfhand.knowledge.evidence.citations import conflict_notes, label

    try:
        mode = None if retrieval is None else check_answer_retrieval(retrieval)
    except ConfigurationError as exc:
        raise fail(f"--retrieval: {exc}", 2) from None
    a = open_app(workspace, existing=True)
    apply_model_flags(
        a,
        max_tokens=max_tokens,
        temperature=temperature,
        tool_mode=tool_mode,
        tool_choice=tool_choice,
    )
    console = make_console()
    kb = a.open_knowledge() if a.knowledge_exists() else None
    model = a.chat_model()
    ctx = caller_context(tenant, user, role)
    if model is None:
        if kb is None:
            raise fail("nothing indexed yet: run `shelfhand ingest PATH` (or --samples) first", 2)
        result = a.knowledge_agent(kb).run_sync(question, context=ctx)
        console.print(result.output, highlight=False, markup=False)
        from rich.markup import escape

        console.print(
            f"\n[dim]{escape(NO_MODEL_HINT)} Until then, answers are the cited passages above.[/]"
        )
        kb.close()
        return
    agent = a.chat_agent(model, kb, retrieval=mode)
    try:
        from shelfhand.cli.chat import console_approvals

        result = agent.run_sync(question, context=ctx, approvals=console_approvals(console))
    except ModelError as exc:
        raise fail(f"the chat model failed: {exc}", 1) from None
    console.print(result.output, highlight=False, markup=False)
    if not result.citations and found_nothing(result.messages):
        console.print(
            "[yellow]not found:[/] no passage of the documents matches this question; "
            "the answer above is not from them",
            highlight=False,
        )
    if result.citations:
        console.print()
        for c in result.citations:
            console.print(f"[dim][{c.index}] {label(c)}[/]", highlight=False)
    for note in conflict_notes(result.citations):  # passages that disagree: never hidden
        text = "note: " + note.removeprefix("Note: ")
        console.print(text, style="yellow", highlight=False, markup=False)
    if result.unknown_citations:
        numbers = ", ".join(f"[{n}]" for n in result.unknown_citations)
        console.print(
            f"[yellow]note:[/] the answer cites {numbers}, which no passage has: not evidence",
            highlight=False,
        )
    if kb is not None:
        kb.close()
    if result.stop_reason == "empty":
        raise typer.Exit(NO_ANSWER_EXIT_CODE)


@app.command(name="eval")
def evaluate(
    cases: Annotated[
        Path | None,
        typer.Argument(
            help="JSONL file of {query, relevant} (optional: id, kind, lang, contains)."
        ),
    ] = None,
    beir: Annotated[
        Path | None, typer.Option("--beir", help="A BEIR-layout dataset folder.")
    ] = None,
    workspace: WorkspaceOpt = None,
    mode: ModeOpt = "hybrid",
    ablation: Annotated[
        bool,
        typer.Option(
            "--ablation",
            help="Every stage side by side (keyword, vector, hybrid, + exact boost, + threshold, "
            "+ rerank, + compression) on one ingested corpus; --mode is ignored.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    limit: Annotated[int | None, typer.Option("--limit", help="Only the first N queries.")] = None,
) -> None:
    """Measure retrieval quality (nDCG@10, Recall@5/10, MRR@10) and latency.

    Case files with kinds also get per-kind figures (identifier rank-1 rate, "not found"
    rate) and per-language ones.
    """
    from shelfhand.core.errors import KnowledgeError
    from shelfhand.evals.runner import run_ablation, run_beir_eval, run_case_eval

    if (cases is None) == (beir is None):
        raise fail("give either a CASES file or --beir PATH", 2)
    _check_mode(mode)
    a = open_app(workspace, existing=cases is not None)  # a BEIR run builds its own workspace
    console = make_console()
    if as_json:  # stdout is the JSON object; progress goes to stderr
        from rich.console import Console

        log = Console(stderr=True).print
    else:
        log = console.print
    try:
        if beir is not None:
            if not (beir / "corpus.jsonl").is_file():
                raise fail(
                    f"{beir} is not a BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv)", 2
                )
            ws = workspace or a.settings.workspace / f"beir-{beir.resolve().name}"
            a = open_app(ws)
            if ablation:
                report = run_ablation(a, beir=beir, limit=limit, log=log)
            else:
                report = run_beir_eval(a, beir, mode=mode, limit=limit, log=log)
        else:
            assert cases is not None
            if not cases.is_file():
                raise fail(f"no such case file: {cases}", 2)
            if not a.knowledge_exists():
                raise fail("nothing indexed yet: run `shelfhand ingest PATH` (or --samples)", 2)
            if ablation:
                report = run_ablation(a, cases_path=cases, limit=limit, log=log)
            else:
                report = run_case_eval(a, cases, mode=mode, limit=limit)
    except KnowledgeError as exc:
        raise fail(str(exc), 2) from None
    if as_json:
        typer.echo(json.dumps(report, ensure_ascii=False))
        return
    if ablation:
        from shelfhand.cli.eval_tables import print_ablation

        print_ablation(console, report)
        return
    for key, value in report.items():
        if isinstance(value, dict | list):
            continue  # per-kind and per-language figures: below
        console.print(
            f"{key:>12}: {value:.4f}" if isinstance(value, float) else f"{key:>12}: {value}"
        )
    if "kinds" in report:
        from shelfhand.cli.eval_tables import print_case_figures

        print_case_figures(console, [("", report)])
