"""``shelfhand config``: every setting, its value and where the value came from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from shelfhand.cli.common import WorkspaceOpt, app, fail, make_console
from shelfhand.cli.model_flags import MaxTokensOpt, TemperatureOpt, ToolChoiceOpt, ToolModeOpt
from shelfhand.core.pricing import PriceTable, parse_prices

if TYPE_CHECKING:
    from shelfhand.core.settings import ResolvedSettings
    from shelfhand.core.settings_table import Setting

MASK = "***"


@app.command()
def config(
    workspace: WorkspaceOpt = None,
    max_tokens: MaxTokensOpt = None,
    temperature: TemperatureOpt = None,
    tool_mode: ToolModeOpt = None,
    tool_choice: ToolChoiceOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print them as JSON.")] = False,
) -> None:
    """Show every setting: its value and where it came from (flag, env, toml or default).

    Secrets are masked. The model flags show what `ask` and `chat` would use with them. An
    invalid setting is an error (exit 2) saying what to fix.
    """
    from shelfhand.core.errors import ConfigurationError
    from shelfhand.core.settings import resolve_settings

    flags = {
        "max_tokens": max_tokens,
        "temperature": temperature,
        "tool_mode": tool_mode,
        "tool_choice": tool_choice,
    }
    try:
        resolved = resolve_settings(workspace, flags=flags)
    except ConfigurationError as exc:
        raise fail(str(exc), 2) from None
    rows = setting_rows(resolved)
    if as_json:
        document = {"settings": rows, "warnings": list(resolved.warnings)}
        typer.echo(json.dumps(document, ensure_ascii=False, indent=2))
        return
    _print_table(rows, resolved.settings.workspace)
    for warning in resolved.warnings:
        make_console().print(f"warning: {warning}", highlight=False, markup=False)


def setting_rows(resolved: ResolvedSettings) -> list[dict[str, Any]]:
    """One row per setting of the table: name, value (secrets masked), source, env, toml."""
    from shelfhand.core.settings_table import SETTINGS

    return [
        {
            "name": s.name,
            "value": shown(s, getattr(resolved.settings, s.name)),
            "source": resolved.sources[s.name],
            "env": s.env,
            "toml": s.toml,
        }
        for s in SETTINGS
    ]


def shown(setting: Setting, value: Any) -> Any:
    """``value`` as it may be shown: a secret as ``***``, a URL without its password."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, PriceTable):
        return value.to_dict()
    if value is None or not setting.secret:
        return value
    from shelfhand.core.setting_kinds import Url

    if isinstance(setting.kind, Url):
        from shelfhand.backends.urls import redact_url

        return redact_url(str(value))
    return MASK


def _print_table(rows: list[dict[str, Any]], workspace: Path) -> None:
    from rich.table import Table

    table = Table(title=f"settings of {workspace}")
    table.add_column("setting", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    table.add_column("source", no_wrap=True)
    table.add_column("set with", overflow="fold")
    for r in rows:
        value = r["value"]
        text = "(not set)" if value is None else _text(value)
        places = [p for p in (r["env"], r["toml"] and f"{r['toml']} (toml)") if p]
        table.add_row(r["name"], text, r["source"], ", ".join(places))
    make_console().print(table)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, dict):  # the price table
        return str(parse_prices(value)) or "(none)"
    return str(value)
