"""What the eval suites share: JSONL case files read line by line with errors naming the
line, and facts looked for in an answer."""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from shelfhand.core.errors import ConfigurationError

__all__ = ["case_objects", "states"]

_SEPARATOR = re.compile(r"(?<=\d)[,，](?=\d{3})")


def case_objects(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each non-blank line of the JSONL file ``path`` as ``(where, object)``, ``where`` naming
    file and line for the caller's own errors.

    Raises:
        ConfigurationError: the file cannot be read, or a line is not a JSON object.
    """
    from shelfhand.core.errors import DocumentTooLarge, UnreadableDocumentError
    from shelfhand.knowledge.reading.limits import ReadLimits
    from shelfhand.knowledge.reading.readers import read_bounded

    try:  # (within the reading limits, and never a pipe that would wait for a writer)
        lines = read_bounded(path, ReadLimits()).decode("utf-8").splitlines()
    except (UnreadableDocumentError, DocumentTooLarge) as exc:
        reason = str(exc).removeprefix(f"cannot read {path}: ")
        raise ConfigurationError(f"cannot read the case file {path}: {reason}") from None
    except UnicodeDecodeError as exc:
        raise ConfigurationError(
            f"cannot read the case file {path}: it is not UTF-8 ({exc.reason} at byte "
            f"{exc.start}); save it as UTF-8"
        ) from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}, line {number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"{where}: not JSON ({exc.msg})") from None
        if not isinstance(data, dict):
            raise ConfigurationError(f"{where}: expected an object")
        yield where, data


def _normal(text: str) -> str:
    return _SEPARATOR.sub("", unicodedata.normalize("NFKC", text)).lower()


def states(answer: str, fact: str) -> bool:
    """Whether ``answer`` states ``fact``: one of its alternatives (joined by ``|``), case-
    insensitive, with thousands separators ignored (``3,999`` is ``3999``). An alternative
    that starts with a digit is a number: it is stated on its own, not as the end of another
    number or code (``12`` is not stated by ``SKU2024-012``, ``3`` not by ``3.5`` or
    ``2023``)."""
    text = _normal(answer)
    return any(_holds(text, _normal(alt)) for alt in fact.split("|"))


def _holds(text: str, alt: str) -> bool:
    if not alt[:1].isdigit():
        return alt in text
    return re.search(rf"(?<![0-9a-z.]){re.escape(alt)}(?![0-9]|[.,][0-9])", text) is not None
