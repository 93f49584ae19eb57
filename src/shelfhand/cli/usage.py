"""``shelfhand usage``: what a tenant (or one user) used, by day and model, from the usage
ledger of the workspace's service (``usage.db``, or PostgreSQL with ``database_url``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from shelfhand.cli.common import TenantOpt, WorkspaceOpt, app, make_console, open_app
from shelfhand.core.context import UserContext

if TYPE_CHECKING:
    from shelfhand.app import App


@app.command()
def usage(
    workspace: WorkspaceOpt = None,
    tenant: TenantOpt = "default",
    user: Annotated[
        str | None, typer.Option("--user", help="Only this user (default: the whole tenant).")
    ] = None,
    days: Annotated[
        int, typer.Option("--days", min=1, max=366, help="The last N days, today included.")
    ] = 30,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Tokens, model calls, tool calls, retrievals and cost (with prices) of a tenant's turns
    by day and model (and of its API searches' LLM rankings, counted as no turn); with
    budgets, where the tenant's (and --user's own) stand now."""
    a = open_app(workspace, existing=True)
    owner = UserContext(tenant_id=tenant, user_id=user or "-")
    try:
        standing = _standing(a, owner, tenant_only=user is None)
        recorded = a.settings.database_url or (a.settings.workspace / "usage.db").is_file()
        rows = []
        if recorded:
            ledger = a.usage_ledger()
            try:
                rows = ledger.report(owner, days=days, all_users=True, user_id=user)
            finally:
                ledger.close()
    finally:
        a.close()
    if as_json:
        body = {"tenant": tenant, "usage": [r.to_dict() for r in rows]}
        report = body if standing is None else {**body, "budgets": standing}
        typer.echo(json.dumps(report, ensure_ascii=False))  # (names in UTF-8, as every --json)
        return
    if not recorded:
        make_console().print("No usage recorded yet: the service records each turn's usage.")
    elif not rows:
        make_console().print(f"No usage of tenant {tenant} in the last {days} days.")
    else:
        _print_rows(rows)
    if standing:
        _print_budgets(standing)


def _standing(a: App, owner: UserContext, *, tenant_only: bool) -> list[dict[str, Any]] | None:
    """Where ``owner``'s budgets stand (``None`` without budgets)."""
    from shelfhand.usage.budgets import standing

    policy = a.budget_policy()
    if policy is None:
        return None
    book = a.budget_book()
    try:
        return standing(policy, book, owner, tenant_only=tenant_only)
    finally:
        book.close()


def _print_rows(rows: list[Any]) -> None:
    typer.echo(
        f"{'day':<10}  {'model':<24} {'turns':>6} {'calls':>6} {'tokens in':>10} "
        f"{'tokens out':>10} {'tools':>6} {'retrievals':>10} {'cost':>12}"
    )
    for r in rows:
        typer.echo(
            f"{r.day:<10}  {r.model[:24]:<24} {r.turns:>6} {r.model_calls:>6} "
            f"{r.input_tokens:>10} {r.output_tokens:>10} {r.tool_calls:>6} {r.retrievals:>10} "
            f"{_cost(r.cost):>12}"
        )


def _cost(cost: float | None) -> str:
    """A cost for the table: ``-`` when unknown (the model has no price)."""
    return "-" if cost is None else f"{cost:.6f}"


def _print_budgets(standing: list[dict[str, Any]]) -> None:
    """Each budget's use in its current period, and when it resets."""
    import time

    typer.echo("")
    typer.echo(f"{'budget':<22} {'scope':<28} {'used':>12} {'limit':>12}  resets in")
    for b in standing:
        left = max(0, int(b["reset_at"] - time.time()))
        resets = (
            f"{left // 3600} h {left % 3600 // 60} min" if left >= 3600 else f"{left // 60} min"
        )
        typer.echo(
            f"{b['budget']:<22} {b['scope'][:28]:<28} {b['used']:>12} {b['limit']:>12}  {resets}"
        )
    for b in standing:
        if b.get("reserved"):
            until = time.strftime("%H:%M:%S UTC", time.gmtime(b["reserved_until"]))
            typer.echo(
                f"{b['scope']} {b['budget']}: {b['reserved']} of it reserved by model calls in "
                f"flight, given back at {until} if they never settle"
            )
