"""``shelfhand eval-answers``: the answer benchmark over the workspace's documents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from shelfhand.cli.common import (
    WorkspaceOpt,
    app,
    fail,
    make_console,
    open_app,
    require_index,
    shell_word,
)
from shelfhand.cli.model_flags import (
    MaxTokensOpt,
    TemperatureOpt,
    ToolChoiceOpt,
    ToolModeOpt,
    apply_model_flags,
)


@app.command(name="eval-answers")
def eval_answers(
    cases: Annotated[
        Path | None,
        typer.Argument(
            help="JSONL cases {question, facts | not_found, sources}; default: the bundled "
            "cases over the samples (ingest them with `shelfhand ingest --samples`)."
        ),
    ] = None,
    workspace: WorkspaceOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    limit: Annotated[int | None, typer.Option("--limit", help="Only the first N cases.")] = None,
    only: Annotated[
        str | None, typer.Option("--only", help="Only these case ids (comma-separated).")
    ] = None,
    no_model: Annotated[
        bool, typer.Option("--no-model", help="Answer without the chat model (extractive).")
    ] = False,
    max_tokens: MaxTokensOpt = None,
    temperature: TemperatureOpt = None,
    tool_mode: ToolModeOpt = None,
    tool_choice: ToolChoiceOpt = None,
) -> None:
    """Measure answers as a user reads them: right (all facts), grounded, unflagged
    unsupported answers, cited right, "not found" right, extractive share and latency."""
    from shelfhand.core.errors import ConfigurationError
    from shelfhand.evals.answers import load_answer_cases, run_answer_eval, sample_answer_cases

    a = open_app(workspace, existing=True)
    apply_model_flags(
        a,
        max_tokens=max_tokens,
        temperature=temperature,
        tool_mode=tool_mode,
        tool_choice=tool_choice,
    )
    if limit is not None and limit < 1:
        raise fail("--limit must be at least 1", 2)
    try:
        selected = load_answer_cases(cases or sample_answer_cases())
    except ConfigurationError as exc:
        raise fail(str(exc), 2) from None
    if only:
        wanted = {i.strip() for i in only.split(",") if i.strip()}
        selected = [c for c in selected if c.id in wanted]
    selected = selected[:limit]
    if not selected:
        raise fail("no case selected", 2)
    require_index(
        a,
        also=""
        if cases
        else "The bundled cases ask about the sample documents: `shelfhand ingest --samples "
        f"-w {shell_word(str(a.settings.workspace))}`",
    )
    model = None if no_model else a.chat_model()
    console = make_console()

    def progress(outcome: Any) -> None:
        if as_json:
            return
        mark = "[green]right[/]" if outcome.right else "[red]wrong[/]"
        notes = []
        if outcome.extractive:
            notes.append(f"extractive: {outcome.fallback_reason}")
        if outcome.grounded is False:
            notes.append("flagged")
        if outcome.error:
            notes.append(outcome.error)
        tail = f" [yellow]({escape('; '.join(notes))})[/]" if notes else ""
        console.print(
            f"{mark} {escape(outcome.id)} ({outcome.latency_s:.1f} s){tail}", highlight=False
        )

    report = run_answer_eval(a, selected, model=model, on_case=progress)
    report["model"] = model.name if model is not None else None
    report["tool_mode"] = getattr(model, "tool_mode", None) if model is not None else None
    if as_json:
        typer.echo(json.dumps(report, ensure_ascii=False))
        return
    _print_summary(console, report)


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _print_summary(console: Any, report: dict[str, Any]) -> None:
    from rich.table import Table

    who = report["model"] or "no model (extractive)"
    mode = f", {report['tool_mode']} mode" if report["tool_mode"] else ""
    table = Table(title=f"answers: {who}{mode}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("answers right", f"{_percent(report['right'])} "
         f"({report['right_count']}/{report['answerable']})"),
        ("grounded", _percent(report["grounded"])),
        ("unsupported and not flagged", str(report["unflagged"])),
        ("cited right", _percent(report["cited_right"])),
        ("\"not found\" right", f"{_percent(report['not_found_right'])} "
         f"({report['not_found_count']})"),
        ("extractive answers", _percent(report["extractive"])),
        ("errors", str(report["errors"])),
        ("mean latency", f"{report['latency_s_mean']} s"),
        ("p95 latency", f"{report['latency_s_p95']} s"),
        ("grounding check, mean", f"{report['check_ms_mean']} ms"),
        ("grounding check, p95", f"{report['check_ms_p95']} ms"),
    ]  # fmt: skip
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
