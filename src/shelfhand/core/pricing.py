"""What model calls cost: a price per model, per million input and output tokens.

Set in ``shelfhand.toml`` (setting ``prices``)::

    [shelfhand.prices."qwen-plus"]
    input = 0.8          # per 1M input tokens, in your currency
    output = 2.0         # per 1M output tokens

or in ``SHELFHAND_PRICES`` as JSON (``{"qwen-plus": {"input": 0.8, "output": 2.0}}``). A run
prices each model call with its model's price (:attr:`Usage.cost
<shelfhand.core.results.Usage.cost>`); a model with no price has no cost (``None``), never a
guessed one, and neither has a run or turn with any call that could not be priced.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from shelfhand.core.results import Usage

__all__ = ["ModelPrice", "PriceTable", "parse_prices"]

PER = 1_000_000
"""Prices are per this many tokens."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelPrice:
    """One model's price per million tokens (``input``: the request, ``output``: the reply)."""

    input: float
    output: float

    def cost(self, usage: Usage) -> float:
        """What ``usage``'s tokens cost at this price."""
        return (usage.input_tokens * self.input + usage.output_tokens * self.output) / PER


@dataclass(frozen=True, slots=True)
class PriceTable(Mapping[str, ModelPrice]):
    """Prices by model name (as the provider is asked for it)."""

    models: Mapping[str, ModelPrice] = field(default_factory=dict)

    def __getitem__(self, model: str) -> ModelPrice:
        return self.models[model]

    def __iter__(self) -> Iterator[str]:
        return iter(self.models)

    def __len__(self) -> int:
        return len(self.models)

    def __str__(self) -> str:
        return "; ".join(f"{m}: {p.input:g} in, {p.output:g} out" for m, p in self.models.items())

    def to_dict(self) -> dict[str, dict[str, float]]:
        """The JSON form, as the setting is written."""
        return {m: {"input": p.input, "output": p.output} for m, p in self.models.items()}


def _amount(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where} is not a number")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{where} is below 0")
    return number


def parse_prices(raw: object) -> PriceTable:
    """A price table from a TOML table or its JSON text: ``{model: {input, output}}``.

    Raises:
        ValueError: Not such a table, an unknown key, a missing price or a negative one; the
            message says which (``qwen-plus.input is below 0``).
    """
    if isinstance(raw, str):
        text = raw.strip()
        if not text:
            return PriceTable()
        try:
            raw = json.loads(text)
        except json.JSONDecodeError:
            raise ValueError("not JSON") from None
    if not isinstance(raw, Mapping):
        raise ValueError("not a table")
    models: dict[str, ModelPrice] = {}
    for name, entry in raw.items():
        if not isinstance(entry, Mapping):
            raise ValueError(f"{name} is not a table")
        keys = set(entry)
        if keys != {"input", "output"}:
            extra = ", ".join(sorted(keys - {"input", "output"}))
            missing = ", ".join(sorted({"input", "output"} - keys))
            why = f"unknown {extra}" if extra else f"missing {missing}"
            raise ValueError(f"{name} has {why}")
        models[str(name)] = ModelPrice(
            input=_amount(entry["input"], f"{name}.input"),
            output=_amount(entry["output"], f"{name}.output"),
        )
    return PriceTable(models)
