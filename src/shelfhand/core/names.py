"""Names and typed text that are not UTF-8: how to tell, and how to show them.

A name written in another encoding (a GBK file name from an old share) or a question typed
in a terminal that is not UTF-8 reaches Python as bytes it cannot read, kept as lone
surrogates (``surrogateescape``); they fail wherever the text is stored or sent. The
ingest, the queued ingest and the command line tell such text with :func:`is_text` and
show it with :func:`shown_bytes`.

Text from outside that the caller does not control (a model's reply, a tool's result) may
hold lone surrogates too: a model server may send half of a pair as a JSON ``\\ud800``
escape, and a tool may return a name read with ``surrogateescape``. :func:`valid_text` makes
such text storable where it enters (the model adapters, the toolkit's results).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["is_text", "shown_bytes", "valid_text"]


def is_text(text: str) -> bool:
    """Whether ``text`` is Unicode text that UTF-8 can carry (no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown_bytes(text: str | Path) -> str:
    """``text`` as it can be shown: bytes that are not UTF-8 as ``\\xff`` escapes."""
    return os.fsencode(text).decode("utf-8", "backslashreplace")


def valid_text(text: str) -> str:
    """``text`` as UTF-8 can carry it: a surrogate pair kept in two code points joined into
    its character, each lone surrogate replaced by U+FFFD; ``text`` itself when it is valid
    (the common case: one ``isascii``, or one encoding for other text)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text
