"""``shelfhand eval-tools``: the tool-call regression suite against the configured model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from shelfhand.cli.common import NO_MODEL_HINT, WorkspaceOpt, app, fail, make_console, open_app
from shelfhand.cli.model_flags import (
    MaxTokensOpt,
    TemperatureOpt,
    ToolChoiceOpt,
    ToolModeOpt,
    apply_model_flags,
)


@app.command(name="eval-tools")
def eval_tools(
    cases: Annotated[
        Path | None,
        typer.Argument(help="JSONL cases {request, tool, arguments}; default: the bundled 20."),
    ] = None,
    workspace: WorkspaceOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="Only the first N cases.")
    ] = None,
    max_iters: Annotated[
        int, typer.Option("--max-iters", min=1, help="Most model calls per case.")
    ] = 4,
    no_docs: Annotated[
        bool, typer.Option("--no-docs", help="Do not index the samples behind `retrieve`.")
    ] = False,
    no_examples: Annotated[
        bool,
        typer.Option(
            "--no-examples", help="Offer the tools without their routing examples (an ablation)."
        ),
    ] = False,
    max_tokens: MaxTokensOpt = None,
    temperature: TemperatureOpt = None,
    tool_mode: ToolModeOpt = None,
    tool_choice: ToolChoiceOpt = None,
) -> None:
    """Measure tool calling: routing and argument accuracy, whole runs (every call, no write
    that was not asked for, the answer's facts), raw-JSON and empty answers, context
    overflows, steps and latency, over the reference scenario's tools."""
    import asyncio

    from shelfhand.core.errors import ConfigurationError
    from shelfhand.evals.tool_eval import load_tool_cases, run_tool_eval, sample_tool_cases

    a = open_app(workspace)
    apply_model_flags(
        a,
        max_tokens=max_tokens,
        temperature=temperature,
        tool_mode=tool_mode,
        tool_choice=tool_choice,
    )
    if limit is not None and limit < 1:
        raise fail("--limit must be at least 1", 2)
    if max_iters < 1:
        raise fail("--max-iters must be at least 1", 2)
    try:
        selected = load_tool_cases(cases or sample_tool_cases())[:limit]
    except ConfigurationError as exc:
        raise fail(str(exc), 2) from None
    model = a.chat_model()
    if model is None:
        raise fail(NO_MODEL_HINT, 2)
    console = make_console()
    kb = None if no_docs else _sample_knowledge(a, quiet=as_json)

    def progress(result: Any) -> None:
        if not as_json:
            mark = "[green]ok[/]" if result.arguments_ok else "[red]wrong[/]"
            called = result.calls[0]["name"] if result.calls else "no tool"
            note = f" [red]{escape(result.error)}[/]" if result.error else ""
            if result.stop_reason not in ("", "final"):
                note += f" [yellow](fallback answer: {result.stop_reason})[/]"
            # the case file and the model wrote these: text, not markup
            console.print(
                f"{mark} {escape(result.id)}: {escape(called)} ({result.latency_ms:.0f} ms){note}"
            )

    try:
        report = asyncio.run(
            run_tool_eval(
                model,
                selected,
                workspace=a.settings.workspace,
                knowledge=kb,
                max_iters=max_iters,
                on_case=progress,
                examples=not no_examples,
            )
        )
    finally:
        if kb is not None:
            kb.close()
    report["model"] = model.name
    report["tool_mode"] = getattr(model, "tool_mode", None)
    if as_json:
        typer.echo(json.dumps(report, ensure_ascii=False))
        return
    _print_summary(console, report)


def _sample_knowledge(a: Any, *, quiet: bool) -> Any:
    """The bundled samples indexed in ``<workspace>/tool-eval`` (incremental: once)."""
    from shelfhand.knowledge.base import KnowledgeBase, sample_corpus

    router, _ = a.embedding_router()
    kb = KnowledgeBase(a.settings.workspace / "tool-eval", router, mode=a.settings.retrieval_mode)
    kb.ingest([sample_corpus()])
    return kb


def _print_summary(console: Any, report: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title=f"tool calls: {report['model']} ({report['tool_mode'] or 'n/a'} mode)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    n = report["cases"]
    rows = [
        ("routing accuracy", f"{report['routing_accuracy']:.0%}"),
        ("argument accuracy", f"{report['argument_accuracy']:.0%} ({report['right_calls']}/{n})"),
        ("whole runs right", f"{report['whole_run_accuracy']:.0%} ({report['right_runs']}/{n})"),
        ("extra calls", str(report["extra_calls"])),
        ("unasked writes (denied)", str(report["unasked_writes"])),
        ("answers with their facts", f"{report['facts_stated']}/{report['cases_with_facts']}"),
        ("raw-JSON answers", str(report["raw_json_answers"])),
        ("empty answers", str(report["empty_answers"])),
        ("context overflows", str(report["context_overflows"])),
        ("fallback answers", str(report["fallback_answers"])),
        ("errors", str(report["errors"])),
        ("mean steps", f"{report['mean_steps']:.2f}"),
        ("mean latency", f"{report['mean_latency_ms']:.0f} ms"),
        ("p95 latency", f"{report['p95_latency_ms']:.0f} ms"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
