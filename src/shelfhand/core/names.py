"""Names and typed text that are not UTF-8: how to tell, and how to show them.

A name written in another encoding (a GBK file name from an old share) or a question typed
in a terminal that is not UTF-8 reaches Python as bytes it cannot read, kept as lone
surrogates (``surrogateescape``); they fail wherever the text is stored or sent. The
ingest, the queued ingest and the command line tell such text with :func:`is_text` and
show it with :func:`shown_bytes`.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["is_text", "shown_bytes"]


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
