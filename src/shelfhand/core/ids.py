"""Cheap unique ids.

``uuid4()`` costs a system call per id and showed up as ~13% of an agent run. Ids here are a
random per-process prefix (64 bits, from the OS) plus a counter: unique across processes for
all practical purposes, and a few hundred nanoseconds each.
"""

from __future__ import annotations

import itertools
import os
import secrets
from collections.abc import Callable

_prefix = ""
_next: Callable[[], int] = itertools.count().__next__

_ABOVE = 1 << 64
"""Added to the counter so that ``hex`` writes it as ``0x1`` and sixteen digits: cutting the
first three characters is cheaper than formatting it to a width (``:016x``)."""


def _reset() -> None:
    """A fresh prefix and counter: at import, and in a forked child, which must not repeat its
    parent's ids (``os.register_at_fork``, so ``new_id`` makes no ``getpid`` system call)."""
    global _prefix, _next
    _prefix = secrets.token_hex(8)
    # a random start: the first id of a process would otherwise end in sixteen zeros, which
    # reads like a placeholder in logs and traces; below 2**62, so the counter stays under
    # 2**65 (sixteen digits after the "0x1") for more ids than a process can make
    _next = itertools.count(_ABOVE | secrets.randbits(62)).__next__


_reset()
os.register_at_fork(after_in_child=_reset)


def new_id() -> str:
    """A 32-hex-character id, unique within and (with overwhelming probability) across processes."""
    return _prefix + hex(_next())[3:]
