"""What a setting's value may be: each kind reads a raw value (an environment string, a TOML
value or a command-line flag) and says in words what it accepts.

A kind raises :class:`Invalid` with what it expects; :class:`~shelfhand.core.settings_table.Setting`
turns that into a :class:`~shelfhand.core.errors.ConfigurationError` naming the setting and
where to set it, so every setting's message has the same shape.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from shelfhand.core.pricing import PriceTable, parse_prices

__all__ = [
    "OFF_WORDS",
    "ON_WORDS",
    "Choice",
    "ImportSpecs",
    "Invalid",
    "Kind",
    "Names",
    "Number",
    "PathKind",
    "Prices",
    "Switch",
    "Text",
    "Url",
    "WordGroups",
]

ON_WORDS = ("on", "true", "yes", "1")
OFF_WORDS = ("off", "false", "no", "0")
"""The one on/off vocabulary of every boolean setting (case-insensitive)."""
_WORDS = ("on", "off", "true", "false", "yes", "no", "1", "0")


class Invalid(Exception):
    """A raw value a kind refuses.

    Args:
        expected: What fits, as it reads after "must be" (``"a whole number"``).
        out_of_range: The value parsed but lies outside the allowed range.
        show_value: Whether the message may quote the value (not for URLs with passwords).
    """

    def __init__(
        self, expected: str, *, out_of_range: bool = False, show_value: bool = True
    ) -> None:
        super().__init__(expected)
        self.expected = expected
        self.out_of_range = out_of_range
        self.show_value = show_value


@dataclass(frozen=True, slots=True, kw_only=True)
class Text:
    """Any text, surrounding blanks removed; a TOML value that is not a string (``model =
    42``, a list, a table) is refused rather than turned into its Python spelling."""

    def parse(self, raw: object) -> str:
        return _text(raw).strip()

    def describe(self) -> str:
        return "text"


def _text(raw: object) -> str:
    if not isinstance(raw, str | Path):
        raise Invalid("text (a string in quotes in shelfhand.toml)")
    return str(raw)


@dataclass(frozen=True, slots=True, kw_only=True)
class PathKind:
    """A filesystem path."""

    def parse(self, raw: object) -> Path:
        return Path(_text(raw).strip())

    def describe(self) -> str:
        return "path"


@dataclass(frozen=True, slots=True, kw_only=True)
class Choice:
    """One of ``options``, case-insensitive (read in lower case)."""

    options: tuple[str, ...]

    def parse(self, raw: object) -> str:
        text = str(raw).strip().lower()
        if text not in self.options:
            raise Invalid(f"one of {', '.join(self.options)}")
        return text

    def describe(self) -> str:
        return " | ".join(self.options)


@dataclass(frozen=True, slots=True, kw_only=True)
class Switch:
    """On or off, in the words of :data:`ON_WORDS` and :data:`OFF_WORDS` (TOML booleans too)."""

    def parse(self, raw: object) -> bool:
        text = str(raw).strip().lower()  # a TOML true/false reads "true"/"false" here
        if text in ON_WORDS:
            return True
        if text in OFF_WORDS:
            return False
        raise Invalid(f"on or off ({', '.join(_WORDS)})")

    def describe(self) -> str:
        return "on | off"


@dataclass(frozen=True, slots=True, kw_only=True)
class Number:
    """A number (``whole``: an integer; a TOML float or a boolean is refused) within bounds.

    ``low``/``high`` are inclusive unless ``low_open`` (the value must be above ``low``);
    ``None`` leaves that side open. NaN is always out of range.
    """

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    whole: bool = False

    def parse(self, raw: object) -> float | int:
        kind = "a whole number" if self.whole else "a number"
        if isinstance(raw, bool) or (self.whole and isinstance(raw, float)):
            raise Invalid(kind)
        try:
            number: float | int = int(str(raw).strip()) if self.whole else float(str(raw))
        except ValueError:
            raise Invalid(kind) from None
        if not self._fits(number):
            raise Invalid(self.range_text(), out_of_range=True)
        return number

    def _fits(self, number: float) -> bool:
        if number != number:  # NaN
            return False
        if self.low is not None and (number <= self.low if self.low_open else number < self.low):
            return False
        return self.high is None or number <= self.high

    def range_text(self) -> str:
        """The allowed range in words: ``between 0 and 2``, ``above 0``, ``at least 32``."""
        low = None if self.low is None else _plain(self.low)
        high = None if self.high is None else _plain(self.high)
        if low is not None and high is not None:
            if self.low_open:
                return f"above {low} and at most {high}"
            return f"between {low} and {high}"
        if low is not None:
            return f"above {low}" if self.low_open else f"at least {low}"
        return f"at most {high}" if high is not None else "a number"

    def describe(self) -> str:
        kind = "whole number" if self.whole else "number"
        return kind if self.low is None and self.high is None else f"{kind}, {self.range_text()}"


def _plain(number: float) -> str:
    """``1000000`` rather than ``1e+06``; ``0.001`` as it is."""
    return str(int(number)) if float(number).is_integer() else f"{number:g}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Url:
    """A URL with one of ``schemes``; ``quote`` says whether a refusal may show it (never for
    URLs that may hold a password)."""

    schemes: tuple[str, ...]
    quote: bool = True

    def parse(self, raw: object) -> str:
        text = str(raw).strip()
        scheme = text.split("://", 1)[0].lower() if "://" in text else ""
        if scheme not in self.schemes:
            raise Invalid(f"a URL starting with {self._starts()}", show_value=self.quote)
        return text

    def _starts(self) -> str:
        return " or ".join(s + "://" for s in self.schemes)

    def describe(self) -> str:
        return f"URL ({self._starts()})"


@dataclass(frozen=True, slots=True, kw_only=True)
class Names:
    """Some of ``options``: a TOML list, or a comma-separated string (the environment);
    read in lower case, in order, each once; empty (``""`` or ``[]``) is none."""

    options: tuple[str, ...]

    def parse(self, raw: object) -> tuple[str, ...]:
        items = raw if isinstance(raw, list | tuple) else str(raw).split(",")
        names = [str(i).strip().lower() for i in items if str(i).strip()]
        unknown = [n for n in names if n not in self.options]
        if unknown:
            raise Invalid(f"a list of {', '.join(self.options)} (not {', '.join(unknown)})")
        return tuple(dict.fromkeys(names))

    def describe(self) -> str:
        return "list of " + " | ".join(self.options)


@dataclass(frozen=True, slots=True, kw_only=True)
class Prices:
    """A price per model: a TOML table ``{model = {input = .., output = ..}}`` or the same as
    JSON (the environment), per million tokens (see :mod:`shelfhand.core.pricing`)."""

    def parse(self, raw: object) -> PriceTable:
        try:
            return parse_prices(raw)
        except ValueError as exc:
            raise Invalid(
                f"a table of models, each with input and output prices of at least 0 per 1M "
                f"tokens ({exc})",
                show_value=False,
            ) from None

    def describe(self) -> str:
        return "table: model = {input, output} per 1M tokens"


@dataclass(frozen=True, slots=True, kw_only=True)
class WordGroups:
    """Groups of two or more words: a TOML list of strings (``["开封 拆封", "质保 保修"]``) or,
    in the environment, groups separated by ``;``; the words of a group by spaces or commas.
    Empty (``""`` or ``[]``) is none."""

    def parse(self, raw: object) -> tuple[tuple[str, ...], ...]:
        items = raw if isinstance(raw, list | tuple) else str(raw).split(";")
        groups: list[tuple[str, ...]] = []
        for item in items:
            words = tuple(dict.fromkeys(str(item).replace(",", " ").split()))
            if not words:
                continue
            if len(words) < 2:
                raise Invalid(
                    'groups of two or more words, e.g. ["开封 拆封"] or "开封 拆封;质保 保修"'
                )
            groups.append(words)
        return tuple(groups)

    def describe(self) -> str:
        return "list of word groups"


_IMPORT_SPEC = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?::[A-Za-z_]\w*)?", re.ASCII)


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportSpecs:
    """Python objects to import: a TOML list of strings, or a comma-separated string (the
    environment), each ``module`` or ``module:name`` (``acme.tools``,
    ``acme.orders:lookup_order``); in order, each once; empty (``""`` or ``[]``) is none.
    Only the spelling is checked here: the import happens where the objects are used."""

    def parse(self, raw: object) -> tuple[str, ...]:
        if isinstance(raw, list | tuple):
            if not all(isinstance(i, str) for i in raw):
                raise Invalid('a list of strings such as ["acme.tools", "acme.orders:lookup"]')
            items = list(raw)
        elif isinstance(raw, str):
            items = raw.split(",")
        else:
            raise Invalid('a list such as ["acme.tools", "acme.orders:lookup"]')
        specs = [i.strip() for i in items if i.strip()]
        if not all(_IMPORT_SPEC.fullmatch(s) for s in specs):
            raise Invalid("Python modules or module:name, e.g. acme.tools or acme.orders:lookup")
        return tuple(dict.fromkeys(specs))

    def describe(self) -> str:
        return "list of module or module:name"


Kind = Text | PathKind | Choice | Switch | Number | Url | Names | Prices | WordGroups | ImportSpecs
"""Every kind of setting value."""
