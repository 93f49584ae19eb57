"""``shelfhand audit``: read the tool-call audit log of a workspace (``<workspace>/audit.db``)."""

from __future__ import annotations

from typing import Annotated, Any, get_args

import typer

from shelfhand.cli.common import WorkspaceOpt, app, fail, make_console, open_app, plural
from shelfhand.tools.policy import Outcome

OUTCOME_NAMES: tuple[str, ...] = (*get_args(Outcome), "budget_exceeded")
OUTCOMES = ", ".join(OUTCOME_NAMES)


@app.command()
def audit(
    workspace: WorkspaceOpt = None,
    tool: Annotated[str | None, typer.Option("--tool", help="Only calls of this tool.")] = None,
    user: Annotated[str | None, typer.Option("--user", help="Only calls by this user id.")] = None,
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="Only calls in this tenant.")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since", help="Only calls since a duration ago (30m, 1h, 2d) or an ISO time."
        ),
    ] = None,
    outcome: Annotated[
        str | None, typer.Option("--outcome", help=f"Only calls with this outcome: {OUTCOMES}.")
    ] = None,
    trace: Annotated[
        str | None, typer.Option("--trace", help="Only the calls of one run (trace id).")
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit", min=1, help="Most records (the newest); default 50, all with --jsonl."
        ),
    ] = None,
    jsonl: Annotated[
        bool, typer.Option("--jsonl", help="Print JSON Lines (one record per line) instead.")
    ] = False,
) -> None:
    """Show the audit log: one record per tool call (secrets redacted), and one per model
    call a budget refused (tool "(model)"), oldest first."""
    from shelfhand.tools.audit import AuditLog, parse_since

    app = open_app(workspace, existing=True)
    ws = app.settings.workspace
    path = ws / AuditLog.FILENAME
    if not app.settings.database_url and not path.is_file():
        make_console().print(f"No audit log yet at {path}: no governed tool call was recorded.")
        return
    if outcome is not None and outcome not in OUTCOME_NAMES:
        raise fail(f"--outcome must be one of {OUTCOMES}; got {outcome!r}", 2)
    try:
        since_ts = parse_since(since) if since else None
    except ValueError as exc:
        raise fail(str(exc), 2) from None
    filters: dict[str, Any] = {
        "tool": tool,
        "user": user,
        "tenant": tenant,
        "since": since_ts,
        "outcome": outcome,
        "trace_id": trace,
    }
    try:  # with database_url, the replicas' shared log in PostgreSQL
        with app.audit_log() as log:
            if jsonl:
                import sys

                log.export_jsonl(sys.stdout, limit=limit, **filters)
                return
            records = log.query(limit=50 if limit is None else limit, **filters)
    finally:
        app.close()
    if not records:
        make_console().print("No matching audit records.")
        return
    _print_table(records)


def _print_table(records: list[Any]) -> None:
    from datetime import datetime

    from rich import box
    from rich.table import Table

    # no vertical rules; time, decision, outcome and ms whole, a long tool or caller folded;
    # the arguments and the error's class only where there is room for them (80 columns has
    # none: --jsonl has them)
    console = make_console()
    wide = console.width >= 110
    title = f"audit log ({plural(len(records), 'call')})"
    table = Table(
        title=title if wide else f"{title}; arguments: --jsonl",
        box=box.SIMPLE_HEAD,
        collapse_padding=True,
    )
    table.add_column("time", no_wrap=True)
    table.add_column("tool", overflow="fold")  # (folds only when nothing else can)
    table.add_column("caller", overflow="fold")
    table.add_column("decision", no_wrap=True)
    # as wide as the longest outcome (invalid_arguments): an error class folds below it
    width = max(map(len, OUTCOME_NAMES))
    table.add_column("outcome", overflow="fold", min_width=width)
    ms = max(len(f"{r.duration_ms:.1f}") for r in records)
    table.add_column("ms", no_wrap=True, justify="right", min_width=ms)
    if wide:
        table.add_column("args", overflow="fold", ratio=1)
    for r in records:
        outcome = f"{r.outcome} ({r.error_class})" if r.error_class and wide else r.outcome
        if r.attempts > 1:
            outcome += f", {plural(r.attempts, 'try', 'tries')}"
        if r.cache_hit or r.dedup_hit:
            outcome += ", cache hit" if r.cache_hit else ", shared call"
        args = r.arguments if len(r.arguments) <= 60 else r.arguments[:57] + "..."
        cells = [
            datetime.fromtimestamp(r.ts).strftime("%m-%d %H:%M:%S"),
            _tool(r),
            f"{r.tenant}/{r.user}",
            r.decision,
            outcome,
            f"{r.duration_ms:.1f}",
        ]
        table.add_row(*cells, *([args] if wide else []))
    console.print(table)


def _tool(record: Any) -> str:
    """What a record's call was: the tool, or for a model call a budget refused beside the
    loop, what it was for (``(model: rerank)``)."""
    import json

    from shelfhand.service.turn_budgets import MODEL_CALL

    if record.tool != MODEL_CALL:
        return str(record.tool)

    try:
        call = json.loads(record.arguments).get("call")
    except (ValueError, AttributeError):
        call = None
    return f"(model: {call})" if isinstance(call, str) and call else MODEL_CALL
