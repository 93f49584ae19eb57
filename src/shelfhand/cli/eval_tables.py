"""Tables of ``shelfhand eval``: the ablation's stages side by side, per-kind case figures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.markup import escape
from rich.table import Table

from shelfhand.cli.common import plural

TIMING_LABELS = {"keyword_ms": "kw", "embed_ms": "embed", "vector_ms": "vec", "fuse_ms": "fuse"}


def _num(value: object, digits: int = 3) -> str:
    return f"{value:.{digits}f}" if isinstance(value, int | float) else "–"


def _ms(value: object) -> str:
    if not isinstance(value, int | float):
        return "–"
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def _share(figures: Mapping[str, Any] | None, key: str) -> str:
    """``75% of 8``: a share and the number of cases it is of."""
    if not figures or figures.get(key) is None:
        return "–"
    return f"{figures[key]:.0%} of {figures['n']}"


def _timings(row: Mapping[str, Any]) -> str:
    parts = []
    for name, summary in row.get("timings", {}).items():
        if not summary.get("p95_ms"):
            continue  # a component this mode does not use (embed in keyword mode, say)
        label = TIMING_LABELS.get(name, name.removesuffix("_ms"))
        parts.append(f"{label} {_ms(summary.get('p50_ms'))}")
    return " · ".join(parts)


def print_case_figures(console: Any, rows: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
    """Per-kind and per-language figures of case-file rows (``(stage label, row)``)."""
    langs = sorted({lang for _, row in rows for lang in row.get("langs", {})})
    table = Table(title="by kind and language", title_justify="left")
    table.add_column("stage", no_wrap=True)
    table.add_column("identifier rank-1", justify="right")
    table.add_column("question nDCG@10", justify="right")
    table.add_column("not found", justify="right")
    for lang in langs:
        table.add_column(f"{lang} nDCG@10", justify="right")
        table.add_column(f"{lang} ident@1 / not found", justify="right")
    for label, row in rows:
        kinds = row.get("kinds", {})
        cells = [
            escape(label),
            _share(kinds.get("identifier"), "rank1"),
            _num(kinds.get("question", {}).get("ndcg@10")),
            _share(kinds.get("not_found"), "not_found"),
        ]
        for lang in langs:
            figures = row.get("langs", {}).get(lang, {})
            cells.append(_num(figures.get("ndcg@10")))
            ident = figures.get("identifier_rank1")
            nf = figures.get("not_found")
            cells.append(f"{_num(ident, 2)} / {_num(nf, 2)}")
        table.add_row(*cells)
    console.print(table)
    label, last = rows[-1]
    kinds = last.get("kinds", {})
    missed = kinds.get("identifier", {}).get("missed") or []
    answered = kinds.get("not_found", {}).get("answered") or []
    where = f" ({label})" if label else ""
    if missed:
        console.print(
            f"identifiers not at rank 1{escape(where)}: {escape(', '.join(missed))}",
            highlight=False,
        )
    if answered:
        console.print(
            f"not_found cases that got passages{where}: {', '.join(answered)}", highlight=False
        )


def print_ablation(console: Any, report: Mapping[str, Any]) -> None:
    """The ablation report as tables: quality and latency per stage, then case figures."""
    head = f"{report['dataset']}: {report['n_queries']} judged queries"
    if "n_cases" in report:
        head += f" ({report['n_cases']} cases)"
    if "ingest_s" in report:
        head += f", {report['n_docs']} documents (ingest {report['ingest_s']:.1f} s)"
    console.print(head, highlight=False)
    # the timings per stage and the reasons for skipping get a column only where it has room;
    # at 80 columns they are printed under the table instead of squeezed to nothing
    wide = console.width >= 130
    table = Table(title="stages", title_justify="left")
    for name in ("stage", "mode", "nDCG@10", "R@5", "R@10", "MRR@10", "p50 ms", "p95 ms"):
        table.add_column(
            name, no_wrap=True, justify="left" if name in ("stage", "mode") else "right"
        )
    if wide:
        table.add_column("per stage p50 ms / skipped because", overflow="fold")
    stages = report["stages"]
    below: list[str] = []
    for row in stages:
        if row["status"] != "ok":
            why = f"skipped: {escape(row['reason'])}"
            table.add_row(escape(row["stage"]), "skipped", *["–"] * 6, *([why] if wide else []))
            below.append(f"{escape(row['stage'])}: {why}")
            continue
        timings = _timings(row)
        table.add_row(
            escape(row["stage"]),
            row["mode"],
            _num(row["ndcg@10"]),
            _num(row["recall@5"]),
            _num(row["recall@10"]),
            _num(row["mrr@10"]),
            _ms(row["p50_ms"]),
            _ms(row["p95_ms"]),
            *([timings] if wide else []),
        )
        if timings:
            below.append(f"{escape(row['stage'])}: p50 ms per stage {timings}")
    console.print(table)
    if not wide:
        for line in below:
            console.print(line, highlight=False)
    ran = [row for row in stages if row["status"] == "ok"]
    for row in ran:
        for reason, count in row.get("degraded", {}).items():
            console.print(
                f"[yellow]{escape(row['stage'])}:[/] {plural(count, 'search', 'searches')} degraded: {escape(reason)}",
                highlight=False,
            )
        if "compression" in row:
            c = row["compression"]
            console.print(
                f"{escape(row['stage'])}: evidence (top {c['evidence_k']}) "
                f"{c['tokens_before']:.0f} → {c['tokens_after']:.0f} tokens per query; "
                f"'contains' text kept {c['contains_kept']}/{c['contains_total']}, relevant "
                f"passage kept {c['relevant_kept']}/{c['relevant_total']}; "
                f"compress p50 {_ms(c['p50_ms'])} ms",
                highlight=False,
            )
    case_rows = [(row["stage"], row) for row in ran if "kinds" in row]
    if case_rows:
        print_case_figures(console, case_rows)
