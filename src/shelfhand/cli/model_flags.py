"""Command-line flags for the chat model's options (``ask``, ``chat``, ``eval-tools``).

A flag wins over the environment and ``shelfhand.toml``; values are checked by the settings table
(:func:`shelfhand.core.settings.check_values`), so a bad one stops the command at once.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from shelfhand.app import App

MaxTokensOpt = Annotated[
    int | None,
    typer.Option(
        "--max-tokens",
        min=1,
        help="Most tokens per model reply ($SHELFHAND_MAX_TOKENS).",
        show_default=False,
    ),
]
TemperatureOpt = Annotated[
    float | None,
    typer.Option(
        "--temperature",
        min=0.0,
        max=2.0,
        help="Sampling temperature, 0-2 ($SHELFHAND_TEMPERATURE).",
        show_default=False,
    ),
]
ToolModeOpt = Annotated[
    str | None,
    typer.Option(
        "--tool-mode",
        help="How tools reach the model: native, plain or constrained ($SHELFHAND_TOOL_MODE).",
        show_default=False,
    ),
]
ToolChoiceOpt = Annotated[
    str | None,
    typer.Option(
        "--tool-choice", help="auto, required or none ($SHELFHAND_TOOL_CHOICE).", show_default=False
    ),
]


def apply_model_flags(
    app: App,
    *,
    max_tokens: int | None = None,
    temperature: float | None = None,
    tool_mode: str | None = None,
    tool_choice: str | None = None,
) -> None:
    """Put the given flags into ``app.settings`` before the model is built.

    Raises:
        typer.Exit: (code 2) when a value is invalid, with the setting named.
    """
    from shelfhand.cli.common import fail
    from shelfhand.core.errors import ConfigurationError
    from shelfhand.core.settings import check_values

    raw = {
        "max_tokens": max_tokens,
        "temperature": temperature,
        "tool_mode": tool_mode,
        "tool_choice": tool_choice,
    }
    try:
        options = check_values(raw, source="flag")
    except ConfigurationError as exc:
        raise fail(str(exc), 2) from None
    if options:
        app.settings = dataclasses.replace(app.settings, **options)
