"""Knowledge commands: ingest, sources, forget, search, ask, eval."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

if TYPE_CHECKING:
    from shelfhand.knowledge.retrieval import SearchMode

from shelfhand.cli.main import (
    NO_MODEL_HINT,
    RolesOpt,
    TenantOpt,
    UserOpt,
    WorkspaceOpt,
    _app,
    _console,
    _err,
    _user,
    app,
)
from shelfhand.cli.model_flags import (
    MaxTokensOpt,
    TemperatureOpt,
    ToolChoiceOpt,
    ToolModeOpt,
    apply_model_flags,
)

ModeOpt = Annotated[str, typer.Option("--mode", help="Retrieval: hybrid, keyword or vector.")]


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
) -> None:
    """Index files and folders (incremental: unchanged files cost nothing)."""
    from shelfhand.core.errors import KnowledgeError

    targets = list(paths or [])
    if samples:
        from shelfhand.knowledge.base import sample_corpus

        targets.append(sample_corpus())
    if not targets:
        raise _err("give one or more PATHs, or --samples for the bundled sample corpus", 2)
    missing = [str(p) for p in targets if not p.exists()]
    if missing:
        raise _err(f"no such file or folder: {', '.join(missing)}", 2)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    a = _app(workspace)
    kb = a.open_knowledge()
    console = _console()
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[current]}"),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("ingest", total=None, current="")

        def progress(event: Any) -> None:
            total = getattr(event, "total", None)
            done = getattr(event, "done", None)
            bar.update(task, total=total, completed=done, current=str(getattr(event, "source", "")))

        try:
            report = kb.ingest(
                targets, tenant_id=tenant, permission_tags=tag or (), progress=progress
            )
        except KnowledgeError as exc:
            kb.close()
            raise _err(str(exc), 1) from None
    console.print(
        f"{len(report.added)} added, {len(report.updated)} updated, "
        f"{len(report.unchanged)} unchanged, {len(report.removed)} removed, "
        f"{len(report.failed)} skipped; {report.chunks} chunks "
        f"({report.embedded_chunks} embedded in {report.embed_seconds:.1f} s), "
        f"{report.total_seconds:.1f} s in all -> {a.settings.workspace}",
        highlight=False,
    )
    for failure in report.failed:
        console.print(f"[yellow]skipped[/] {failure.source}: {failure.reason}", highlight=False)
    for failure in report.embedding_failed:
        console.print(
            f"[yellow]keyword-only[/] {failure.source}: {failure.reason} (retried next ingest)",
            highlight=False,
        )
    if kb.degraded_reason:
        console.print(f"[yellow]note:[/] {kb.degraded_reason}", highlight=False)
    kb.close()


@app.command()
def sources(workspace: WorkspaceOpt = None) -> None:
    """List the indexed sources."""
    a = _app(workspace)
    if not a.knowledge_exists():
        _console().print("nothing indexed yet: run `shelfhand ingest PATH`")
        return
    kb = a.open_knowledge(embed=False)
    from rich.table import Table

    table = Table(title=f"sources in {a.settings.workspace}")
    for col in ("source", "type", "documents", "chunks", "updated"):
        table.add_column(col, overflow="fold")
    for s in kb.sources():
        table.add_row(
            s.source,
            s.doc_type,
            str(s.documents),
            str(s.chunks),
            time.strftime("%Y-%m-%d %H:%M", time.localtime(s.updated_at)),
        )
    _console().print(table)
    kb.close()


@app.command()
def forget(source: str, workspace: WorkspaceOpt = None) -> None:
    """Remove one source (and its chunks) from the index; `docs/` removes a whole folder."""
    a = _app(workspace)
    if not a.knowledge_exists():
        raise _err("nothing indexed yet", 1)
    kb = a.open_knowledge(embed=False)
    removed = kb.forget(source)
    kb.close()
    if not removed:
        raise _err(f"{source!r} is not indexed (see `shelfhand sources`)", 1)
    _console().print(f"removed {source} ({removed} document(s))")


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
    from shelfhand.knowledge.citations import format_passages, to_citations

    a = _app(workspace)
    kb = a.open_knowledge()
    hits = kb.search(query, k=k, user=_user(tenant, user, role), mode=_check_mode(mode))
    citations = to_citations(hits)
    if as_json:
        typer.echo(json.dumps([c.to_dict() for c in citations], ensure_ascii=False, indent=2))
    else:
        _console().print(format_passages(citations), highlight=False, markup=False)
    kb.close()


def _check_mode(mode: str) -> SearchMode:
    if mode in ("hybrid", "keyword", "vector"):
        return cast("SearchMode", mode)
    raise _err(f"--mode must be hybrid, keyword or vector, not {mode!r}", 2)


@app.command()
def ask(
    question: str,
    workspace: WorkspaceOpt = None,
    tenant: TenantOpt = "default",
    user: UserOpt = "cli",
    role: RolesOpt = None,
    max_tokens: MaxTokensOpt = None,
    temperature: TemperatureOpt = None,
    tool_mode: ToolModeOpt = None,
    tool_choice: ToolChoiceOpt = None,
) -> None:
    """Answer from the documents (chat model if configured, else cited passages)."""
    from shelfhand.core.errors import ModelError
    from shelfhand.knowledge.citations import label

    a = _app(workspace)
    apply_model_flags(
        a,
        max_tokens=max_tokens,
        temperature=temperature,
        tool_mode=tool_mode,
        tool_choice=tool_choice,
    )
    console = _console()
    kb = a.open_knowledge() if a.knowledge_exists() else None
    model = a.chat_model()
    ctx = _user(tenant, user, role)
    if model is None:
        if kb is None:
            raise _err("nothing indexed yet: run `shelfhand ingest PATH` (or --samples) first", 2)
        result = a.knowledge_agent(kb).run_sync(question, context=ctx)
        console.print(result.output, highlight=False, markup=False)
        from rich.markup import escape

        console.print(
            f"\n[dim]{escape(NO_MODEL_HINT)} Until then, answers are the cited passages above.[/]"
        )
        kb.close()
        return
    agent = a.chat_agent(model, kb)
    try:
        from shelfhand.cli.main import console_approvals

        result = agent.run_sync(question, context=ctx, approvals=console_approvals(console))
    except ModelError as exc:
        raise _err(f"the chat model failed: {exc}", 1) from None
    console.print(result.output, highlight=False, markup=False)
    if result.citations:
        console.print()
        for c in result.citations:
            console.print(f"[dim][{c.index}] {label(c)}[/]", highlight=False)
    if kb is not None:
        kb.close()


@app.command(name="eval")
def evaluate(
    cases: Annotated[Path | None, typer.Argument(help="JSONL file of {query, relevant}.")] = None,
    beir: Annotated[
        Path | None, typer.Option("--beir", help="A BEIR-layout dataset folder.")
    ] = None,
    workspace: WorkspaceOpt = None,
    mode: ModeOpt = "hybrid",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    limit: Annotated[int | None, typer.Option("--limit", help="Only the first N queries.")] = None,
) -> None:
    """Measure retrieval quality (nDCG@10, Recall@5/10, MRR@10) and latency."""
    from shelfhand.eval_runner import run_beir_eval, run_case_eval

    if (cases is None) == (beir is None):
        raise _err("give either a CASES file or --beir PATH", 2)
    _check_mode(mode)
    a = _app(workspace)
    console = _console()
    if beir is not None:
        if not (beir / "corpus.jsonl").is_file():
            raise _err(
                f"{beir} is not a BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv)", 2
            )
        ws = workspace or a.settings.workspace / f"beir-{beir.resolve().name}"
        a = _app(ws)
        report = run_beir_eval(
            a, beir, mode=mode, limit=limit, log=None if as_json else console.print
        )
    else:
        assert cases is not None
        if not cases.is_file():
            raise _err(f"no such case file: {cases}", 2)
        report = run_case_eval(a, cases, mode=mode, limit=limit)
    if as_json:
        typer.echo(json.dumps(report, ensure_ascii=False))
        return
    for key, value in report.items():
        console.print(
            f"{key:>12}: {value:.4f}" if isinstance(value, float) else f"{key:>12}: {value}"
        )
