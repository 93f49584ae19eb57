"""``shelfhand agents``: list the workspace's subagents (``<workspace>/agents/*.md``)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from shelfhand.cli.common import WorkspaceOpt, app, fail, make_console, open_app
from shelfhand.core.settings_table import BUILTIN_TOOLS


@app.command()
def agents(
    workspace: WorkspaceOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print them as JSON.")] = False,
) -> None:
    """List the subagents declared in <workspace>/agents/*.md (a bad file is an error)."""
    from shelfhand.agent.subagents import DeclarationError, check_subagent_tools

    a = open_app(workspace)
    # the tools `shelfhand serve` can give its agents (retrieve, the built-ins a subagent may opt
    # into, remember among them: the service adds it), whether or not a model is configured:
    # an unknown name is an error here as at the server's start
    toolkit = a.toolkit(None, governed=False, builtins=BUILTIN_TOOLS)
    tools = [t.name for t in toolkit.tools] + [n for n in BUILTIN_TOOLS if toolkit.get(n) is None]
    try:
        subs = a.subagents()
        check_subagent_tools(subs, tools)
    except DeclarationError as exc:
        raise fail(str(exc), 2) from None
    rows = [
        {
            "id": s.id,
            "name": s.name,
            "description": s.description,
            "model": s.model if isinstance(s.model, str) else None,
            "max_iters": s.max_iters,
            "tools": list(s.tools),
            "memory": s.memory,
            "file": s.origin,
        }
        for s in subs
    ]
    if as_json:
        typer.echo(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    console = make_console()
    if not rows:
        console.print(
            f"No subagents: add Markdown files to {a.settings.workspace / 'agents'} "
            "(see docs/agents/subagents.md)."
        )
        return
    from rich.table import Table

    table = Table(title="subagents")
    table.add_column("id", style="bold", no_wrap=True)
    table.add_column("tools")
    table.add_column("model")
    table.add_column("max_iters", justify="right")
    table.add_column("memory")
    table.add_column("description", ratio=1)
    for r in rows:
        table.add_row(
            str(r["id"]),
            ", ".join(r["tools"]) or "(none)",  # type: ignore[arg-type]
            str(r["model"] or "(main)"),
            str(r["max_iters"]),
            str(r["memory"]),
            str(r["description"]),
        )
    console.print(table)
