"""``shelfhand eval``: retrieval quality and latency over a case file or a BEIR dataset, or
the pipeline's stages side by side (``--ablation``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from shelfhand.cli.common import WorkspaceOpt, app, fail, make_console, open_app, require_index
from shelfhand.cli.search import ModeOpt, check_mode


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
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="Only the first N queries.")
    ] = None,
) -> None:
    """Measure retrieval quality (nDCG@10, Recall@5/10, MRR@10) and latency.

    Case files with kinds also get per-kind figures (identifier rank-1 rate, "not found"
    rate) and per-language ones.
    """
    from shelfhand.core.errors import KnowledgeError
    from shelfhand.evals.runner import run_ablation, run_beir_eval, run_case_eval

    if (cases is None) == (beir is None):
        raise fail("give either a CASES file or --beir PATH", 2)
    check_mode(mode)
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
            require_index(a)
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
